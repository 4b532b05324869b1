"""One retriever interface for BM25, dense and hybrid search, opened once from an INDEX.

:class:`Retriever` is what :class:`~corefsearch.sparse.search.BM25Searcher`,
:class:`~corefsearch.dense.search.DenseSearcher` and :class:`~corefsearch.search.hybrid.HybridSearcher`
have in common: ``search(queries, k)``, ``search_one(query, k)`` (the query's own passage left
out), ``passage(id)``, ``describe()`` (what a run's ``.meta.json`` records), ``name`` and
``tag`` (the TREC run tag). :func:`open_retriever` reads and checks the index manifests once
(:class:`IndexManifests`) and hands them to the searchers, which then do not read them again.
``corefsearch search``, ``query`` and ``serve`` all open their retrievers here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from corefsearch.base.errors import MissingArtefactError
from corefsearch.base.schema import Hit, Query
from corefsearch.datasets.dataset import check_built_from
from corefsearch.search.backends import BACKENDS, backends_of, compose
from corefsearch.search.options import RETRIEVERS, RetrievalOptions
from corefsearch.sparse.search import BM25Options


@runtime_checkable
class Retriever(Protocol):
    """What every retriever offers. ``search_one`` and ``search`` leave each query's own passage
    (``Query.passage_id``, when it has one) out of its results. ``search_one``'s ``query_string``: the
    query's BM25 string when the caller formulated it (a retriever without BM25 takes no notice of it)."""

    name: str  # "bm25" | "dense" | "hybrid"

    @property
    def tag(self) -> str:  # the TREC run tag
        ...

    def search(self, queries: Sequence[Query], k: int) -> Iterator[tuple[Query, list[Hit]]]: ...

    def search_one(self, query: Query, k: int, *, query_string: str | None = None) -> list[Hit]: ...

    def passage(self, passage_id: str) -> dict[str, Any]: ...  # {"id", "title", "text"}

    def describe(self) -> dict[str, Any]: ...  # what RUN.meta.json records about the retriever

    @property
    def manifest(self) -> dict[str, Any]: ...  # its index's manifest (a composed one: the first backend's)

    @property
    def passages_sha256(self) -> str | None: ...  # of the passages it was built from

    def contains(self, passage_ids: Sequence[str]) -> set[str]: ...  # those of the ids it holds

    def warm(self) -> None: ...  # open now what it would open at the first query


# --- the index manifests, read and checked once --------------------------------------------------


@dataclass
class IndexManifests:
    """The manifests of the index backends a set of retrievers needs (``INDEX/lucene``, ``INDEX/dense``),
    read once, by backend name."""

    index: Path
    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, backend: str) -> dict[str, Any] | None:
        return self.manifests.get(backend)

    @classmethod
    def load(cls, index: Path, names: Sequence[str]) -> IndexManifests:
        """Fail before any work when an index one of the retrievers ``names`` needs is missing (and
        say what to run); a composed retriever (``hybrid``) names every index it needs."""
        manifests = cls(Path(index))
        for name in names:
            for backend in backends_of(name):
                if backend.name in manifests.manifests:
                    continue
                try:
                    manifests.manifests[backend.name] = backend.load_manifest(index)
                except MissingArtefactError as err:
                    if len(RETRIEVERS[name]) == 1:
                        raise
                    raise MissingArtefactError(f"--retriever {name} needs a Lucene and a dense index in {index}: "
                                               f"{err}") from None
        return manifests

    def check_dataset(self, dataset_dir: Path) -> None:
        """Fail clearly when an index was built from other passages than the dataset's (gold offsets
        and query passages are the dataset's: the index must hold the same)."""
        for name, manifest in self.manifests.items():
            what = f"the index {self.index}" if name == "lucene" else f"the {name} index {self.index}"
            check_built_from(dataset_dir, manifest.get("passages_sha256"), what,
                             BACKENDS[name].rebuild_command(dataset_dir, self.index, manifest))


# --- opening ---------------------------------------------------------------------------------------


def _passage_store(index: Path, manifests: IndexManifests, searchers: dict[str, Any], sha: str | None) -> Any:
    """Where a backend that stores no texts reads its passages: a backend beside it that stores them,
    built from the same passages (opened, or opened when first asked), else the dataset's file (``None``)."""
    for backend in BACKENDS.values():
        if not backend.stores_passages:
            continue
        manifest = manifests.get(backend.name)
        if manifest is None and (Path(index) / backend.name / "manifest.json").exists():
            manifest = backend.load_manifest(index)
        if manifest is not None and manifest.get("passages_sha256") == sha:
            return backend.passages(index, manifest, searchers.get(backend.name))
    return None


def open_retrievers(index: Path, bm25: BM25Options | None = None, retrieval: RetrievalOptions | None = None,
                    names: Sequence[str] | None = None,
                    manifests: IndexManifests | None = None) -> dict[str, Retriever]:
    """The retrievers ``names`` (default: ``retrieval.retriever``) of ``index``, in that order,
    sharing one searcher per backend among them (one encoder loaded); the manifests are read once (or
    taken from ``manifests``). ``bm25``: the BM25 query's options."""
    bm25 = bm25 or BM25Options()
    retrieval = retrieval or RetrievalOptions()
    names = list(dict.fromkeys(names or [retrieval.retriever]))
    for name in names:
        replace(retrieval, retriever=name).validate()
    bm25.validate()
    manifests = manifests or IndexManifests.load(index, names)
    needed = [name for name in BACKENDS if any(name in RETRIEVERS[r] for r in names)]
    # Opened in the registry's reverse order: the dense encoder loads before the JVM starts.
    searchers = {name: BACKENDS[name].open(index, manifests.get(name), bm25, retrieval)  # type: ignore[arg-type]
                 for name in reversed(needed)}
    for name, searcher in searchers.items():
        if not BACKENDS[name].stores_passages:
            BACKENDS[name].use_passages(searcher, _passage_store(index, manifests, searchers,
                                                                 searcher.passages_sha256))
    return {name: compose(name, searchers, retrieval) for name in names}


def open_retriever(index: Path, bm25: BM25Options | None = None, retrieval: RetrievalOptions | None = None,
                   manifests: IndexManifests | None = None) -> Retriever:
    """The retriever ``retrieval.retriever`` (default ``bm25``) of ``index``, its manifests read and
    checked once (a missing index is a ``MissingArtefactError`` saying what to build)."""
    retrieval = retrieval or RetrievalOptions()
    return open_retrievers(index, bm25, retrieval, [retrieval.retriever], manifests)[retrieval.retriever]
