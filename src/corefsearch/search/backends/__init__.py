"""Index backends by name: each owns its folder in an INDEX, its manifest, building, appending (for
``add``), opening a searcher, and its options (as Pyserini's searchers each own theirs and BEIR's
retrievers share one ``search``).

``lucene`` (BM25 over Anserini, ``INDEX/lucene``) and ``dense`` (FAISS over an encoder,
``INDEX/dense``). A retriever name is one backend or a composition of several (``hybrid``: both,
fused): :data:`RETRIEVERS`. ``retriever``, ``pipeline``, ``engine`` and ``add`` reach the backends
only through :class:`IndexBackend` and this registry.

Adding a backend (say a learned-sparse index): its searcher in a wing (``search``, ``search_one``,
``passage``, ``describe``, ``tag``, ``manifest``, ``passages_sha256``, ``contains``), one module here
implementing :class:`IndexBackend`, and one line in :data:`BACKENDS` (and, for a retriever of its own,
in ``corefsearch.search.options.RETRIEVERS``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from corefsearch.dense.encoder import DEFAULT_BATCH_SIZE
from corefsearch.search.backends.dense import DenseBackend
from corefsearch.search.backends.lucene import LuceneBackend
from corefsearch.search.hybrid import HybridSearcher
from corefsearch.search.options import RETRIEVERS

if TYPE_CHECKING:
    from corefsearch.search.options import RetrievalOptions
    from corefsearch.sparse.search import BM25Options


@dataclass
class AppendOptions:
    """``corefsearch add``'s settings for the backends it appends to, ``--help`` texts in the metadata
    (``--batch-size`` and ``--threads``: ``index``'s, in :class:`~.dense.DenseIndexOptions` and
    :class:`~.lucene.LuceneIndexOptions`)."""

    encoder: Any = field(default=None, metadata={  # the dense encoder to add with
        "help": "Dense: the passage encoder (default: the one the dense index was built with)."})
    device: str = field(default="auto", metadata={"help": "Dense: auto | cpu | cuda."})
    batch_size: int = DEFAULT_BATCH_SIZE
    threads: int = 2


class IndexBackend(Protocol):
    """What a kind of index offers to the stages."""

    name: str  # the folder INDEX/<name> and the backend's name
    retriever: str  # the retriever it answers as alone
    stores_passages: bool  # whether its searcher gives the passages' texts itself

    def load_manifest(self, index: Path) -> dict[str, Any]: ...  # a missing index: MissingArtefactError

    def rebuild_command(self, dataset_dir: Path, index: Path, manifest: dict[str, Any]) -> str: ...

    def build(self, dataset_dir: Path, out: Path, options: Any, overwrite: bool) -> Any: ...

    def prepare_append(self, index: Path, options: AppendOptions) -> Any: ...  # checked before any work

    def append(self, index: Path, passages_path: Path, old_count: int, staged: Path, prepared: Any,
               options: AppendOptions) -> int: ...  # the new passages into a copy in ``staged``; how many

    def open(self, index: Path, manifest: dict[str, Any], bm25: BM25Options,
             retrieval: RetrievalOptions) -> Any: ...

    def passages(self, index: Path, manifest: dict[str, Any], opened: Any = None) -> Any: ...  # a passage store

    def use_passages(self, searcher: Any, store: Any) -> None: ...  # a store for a searcher without texts


BACKENDS: dict[str, IndexBackend] = {"lucene": LuceneBackend(), "dense": DenseBackend()}
__all__ = ["BACKENDS", "RETRIEVERS", "AppendOptions", "IndexBackend", "backends_in", "backends_of", "compose"]


def backends_of(retriever: str) -> list[IndexBackend]:
    return [BACKENDS[name] for name in RETRIEVERS[retriever]]


def backends_in(index: Path) -> Iterator[IndexBackend]:
    """The backends whose folder ``index`` holds."""
    return (backend for backend in BACKENDS.values() if (Path(index) / backend.name).is_dir())


def compose(retriever: str, searchers: dict[str, Any], retrieval: RetrievalOptions) -> Any:
    """The retriever ``retriever`` from its backends' opened searchers."""
    if retriever == "hybrid":
        return HybridSearcher(searchers["lucene"], searchers["dense"], retrieval.fusion)
    (name,) = RETRIEVERS[retriever]
    return searchers[name]
