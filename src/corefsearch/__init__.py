"""corefsearch: cross-document coreference search."""

__version__ = "0.1.0"
