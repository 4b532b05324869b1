"""Index backends by name: each owns its folder in an INDEX, its manifest, building, appending (for
``add``), opening a searcher, and its options (as Pyserini's searchers each own theirs and BEIR's
retrievers share one ``search``).

``lucene`` (BM25 over Anserini, ``INDEX/lucene``) and ``dense`` (FAISS over an encoder,
``INDEX/dense``). A retriever name is one backend or a composition of several (``hybrid``: both,
fused): :data:`RETRIEVERS`. ``retriever``, ``pipeline``, ``engine`` and ``add`` reach the backends
only through :class:`IndexBackend` and this registry.

Adding a backend (say a learned-sparse index): its searcher in a wing (``search``, ``search_one``,
``passage``, ``describe``, ``tag``, ``manifest``, ``passages_sha256``, ``contains``), one module here
implementing :class:`IndexBackend`, and one line in :data:`BACKENDS` and :data:`RETRIEVERS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from corefsearch.search.backends.dense import DenseBackend
from corefsearch.search.backends.lucene import LuceneBackend
from corefsearch.search.hybrid import HybridSearcher

if TYPE_CHECKING:
    from corefsearch.search.retriever import RetrievalOptions
    from corefsearch.sparse.search import BM25Options


@dataclass
class AppendOptions:
    """``corefsearch add``'s settings for the backends it appends to."""

    encoder: Any = None  # the dense encoder to add with (default: the one the index was built with)
    device: str = "auto"
    batch_size: int = 64
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

    def open(self, index: Path, manifest: dict[str, Any], options: BM25Options,
             retrieval: RetrievalOptions) -> Any: ...

    def passages(self, index: Path, manifest: dict[str, Any], opened: Any = None) -> Any: ...  # a passage store

    def use_passages(self, searcher: Any, store: Any) -> None: ...  # a store for a searcher without texts


BACKENDS: dict[str, IndexBackend] = {"lucene": LuceneBackend(), "dense": DenseBackend()}
# Each retriever name: the backends it searches, in the order its composition takes them.
RETRIEVERS: dict[str, tuple[str, ...]] = {"bm25": ("lucene",), "dense": ("dense",), "hybrid": ("lucene", "dense")}


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
