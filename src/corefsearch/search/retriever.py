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
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.models import check_device
from corefsearch.base.onnx_backend import check_backend_device
from corefsearch.base.schema import Hit, Query
from corefsearch.datasets.dataset import check_built_from
from corefsearch.fusion import FusionOptions
from corefsearch.search.backends import BACKENDS, backends_of, compose
from corefsearch.search.backends import RETRIEVERS as RETRIEVER_BACKENDS
from corefsearch.sparse.search import BM25Options

if TYPE_CHECKING:
    from corefsearch.sparse.search import BM25Options

RETRIEVERS = tuple(RETRIEVER_BACKENDS)  # bm25, dense, hybrid


@dataclass
class RetrievalOptions:
    """Which retriever answers (``bm25``, ``dense`` or ``hybrid``) and the dense and fusion settings."""

    retriever: str = field(default="bm25", metadata={"help": "bm25 | dense | hybrid (BM25 and dense fused)."})
    encoder: str | None = field(default=None, metadata={  # default: the encoder the dense index was built with
        "help": "Dense query encoder (default: the one the dense index was built with)."})
    device: str = field(default="auto", metadata={"help": "Dense and reader: auto | cpu | cuda."})
    fusion: FusionOptions = field(default_factory=FusionOptions)
    # the dense query encoder's runtime: torch | onnx | onnx-int8 (its folder's onnx/, `corefsearch export-onnx`)
    backend: str = field(default="torch", metadata={"help": (
        "Run the transformer encoders (the dense query encoder with --retriever dense|hybrid, the reader's with "
        "--reader) with torch (default) | onnx | onnx-int8 (ONNX Runtime on the CPU, from the exports "
        "`corefsearch export-onnx MODEL_DIR` writes).")})
    # search-time FAISS settings over the manifest's (--ef-search: HNSW, --nprobe: IVF-PQ; None: the manifest's),
    # checked against the index by DenseSearcher (faiss_index.check_search_parameters)
    ef_search: int | None = field(default=None, metadata={"option": "--ef-search", "help": (
        "Dense HNSW index: the search's candidate list (default: the index's, 128; at least k either way). Higher "
        "finds more of the exact neighbours, more slowly.")})
    nprobe: int | None = field(default=None, metadata={"option": "--nprobe", "help": (
        "Dense IVF-PQ index: inverted lists visited per query (default: the index's, 32). Higher finds more of the "
        "exact neighbours, more slowly.")})

    def validate(self) -> None:
        check_retriever_name(self.retriever)
        self.fusion.validate()
        if self.uses_dense:
            check_device(self.device)
            check_backend_device(self.backend, self.device)

    @property
    def search_parameters(self) -> dict[str, int]:
        """The FAISS search settings given here, by their manifest names (``efSearch``, ``nprobe``)."""
        given = {"efSearch": self.ef_search, "nprobe": self.nprobe}
        return {name: value for name, value in given.items() if value is not None}

    @property
    def uses_bm25(self) -> bool:
        return uses_bm25(self.retriever)

    @property
    def uses_dense(self) -> bool:
        return uses_dense(self.retriever)


def check_retriever_name(name: str) -> None:
    if name not in RETRIEVERS:
        raise InputError(f"--retriever must be one of {', '.join(RETRIEVERS)}, got {name!r}")


def uses_bm25(name: str) -> bool:
    """Whether the retriever ``name`` searches the Lucene index (its queries are BM25 strings)."""
    return "lucene" in RETRIEVER_BACKENDS[name]


def uses_dense(name: str) -> bool:
    """Whether the retriever ``name`` encodes its queries (a device and a runtime to check)."""
    return "dense" in RETRIEVER_BACKENDS[name]


@runtime_checkable
class Retriever(Protocol):
    """What every retriever offers. ``search_one`` and ``search`` leave each query's own passage
    (``Query.passage_id``, when it has one) out of its results; BM25 and hybrid also take the
    keyword ``query_string=`` in ``search_one`` (the BM25 string, when the caller formulated it)."""

    name: str  # "bm25" | "dense" | "hybrid"

    @property
    def tag(self) -> str:  # the TREC run tag
        ...

    def search(self, queries: Sequence[Query], k: int) -> Iterator[tuple[Query, list[Hit]]]: ...

    def search_one(self, query: Query, k: int) -> list[Hit]: ...

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
                    if len(RETRIEVER_BACKENDS[name]) == 1:
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


def open_retrievers(index: Path, options: BM25Options | None = None, retrieval: RetrievalOptions | None = None,
                    names: Sequence[str] | None = None,
                    manifests: IndexManifests | None = None) -> dict[str, Retriever]:
    """The retrievers ``names`` (default: ``retrieval.retriever``) of ``index``, in that order,
    sharing one searcher per backend among them (one encoder loaded); the manifests are read once (or
    taken from ``manifests``)."""
    options = options or BM25Options()
    retrieval = retrieval or RetrievalOptions()
    names = list(dict.fromkeys(names or [retrieval.retriever]))
    for name in names:
        replace(retrieval, retriever=name).validate()
    options.validate()
    manifests = manifests or IndexManifests.load(index, names)
    needed = [name for name in BACKENDS if any(name in RETRIEVER_BACKENDS[r] for r in names)]
    # Opened in the registry's reverse order: the dense encoder loads before the JVM starts.
    searchers = {name: BACKENDS[name].open(index, manifests.get(name), options, retrieval)  # type: ignore[arg-type]
                 for name in reversed(needed)}
    for name, searcher in searchers.items():
        if not BACKENDS[name].stores_passages:
            BACKENDS[name].use_passages(searcher, _passage_store(index, manifests, searchers,
                                                                 searcher.passages_sha256))
    return {name: compose(name, searchers, retrieval) for name in names}


def open_retriever(index: Path, options: BM25Options | None = None, retrieval: RetrievalOptions | None = None,
                   manifests: IndexManifests | None = None) -> Retriever:
    """The retriever ``retrieval.retriever`` (default ``bm25``) of ``index``, its manifests read and
    checked once (a missing index is a ``MissingArtefactError`` saying what to build)."""
    retrieval = retrieval or RetrievalOptions()
    return open_retrievers(index, options, retrieval, [retrieval.retriever], manifests)[retrieval.retriever]
