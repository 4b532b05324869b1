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
from corefsearch.base.schema import Hit, Query
from corefsearch.fusion import FusionOptions

if TYPE_CHECKING:
    from corefsearch.sparse.search import BM25Options

RETRIEVERS = ("bm25", "dense", "hybrid")


@dataclass
class RetrievalOptions:
    """Which retriever answers (``bm25``, ``dense`` or ``hybrid``) and the dense and fusion settings."""

    retriever: str = "bm25"
    encoder: str | None = None  # default: the encoder the dense index was built with
    device: str = "auto"
    fusion: FusionOptions = field(default_factory=FusionOptions)
    # the dense query encoder's runtime: torch | onnx | onnx-int8 (its folder's onnx/, `corefsearch export-onnx`)
    backend: str = "torch"
    # search-time FAISS settings over the manifest's (--ef-search: HNSW, --nprobe: IVF-PQ; None: the manifest's),
    # checked against the index by DenseSearcher (faiss_index.check_search_parameters)
    ef_search: int | None = None
    nprobe: int | None = None

    def validate(self) -> None:
        check_retriever_name(self.retriever)
        self.fusion.validate()
        if self.uses_dense:
            from corefsearch.base.models import check_device
            from corefsearch.base.onnx_backend import check_backend_device

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
    return name in ("bm25", "hybrid")


def uses_dense(name: str) -> bool:
    return name in ("dense", "hybrid")


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


# --- the index manifests, read and checked once --------------------------------------------------


@dataclass
class IndexManifests:
    """The manifests of ``INDEX/lucene`` and ``INDEX/dense`` that a set of retrievers needs, read once."""

    index: Path
    lucene: dict[str, Any] | None = None
    dense: dict[str, Any] | None = None

    @classmethod
    def load(cls, index: Path, names: Sequence[str]) -> IndexManifests:
        """Fail before any work when an index one of the retrievers ``names`` needs is missing (and
        say what to run); a hybrid retriever names both indexes it needs."""
        from corefsearch.dense.store import load_dense_manifest
        from corefsearch.sparse.index import load_lucene_manifest

        manifests = cls(Path(index))
        for name in names:
            needed = [("lucene", load_lucene_manifest, uses_bm25(name)), ("dense", load_dense_manifest,
                                                                            uses_dense(name))]
            for kind, load, wanted in needed:
                if not wanted or getattr(manifests, kind) is not None:
                    continue
                try:
                    setattr(manifests, kind, load(index))
                except MissingArtefactError as err:
                    if name != "hybrid":
                        raise
                    raise MissingArtefactError(f"--retriever hybrid needs a Lucene and a dense index in {index}: "
                                               f"{err}") from None
        return manifests

    def check_dataset(self, dataset_dir: Path) -> None:
        """Fail clearly when an index was built from other passages than the dataset's (gold offsets
        and query passages are the dataset's: the index must hold the same)."""
        from corefsearch.datasets.dataset import check_built_from

        if self.lucene is not None:
            check_built_from(dataset_dir, self.lucene.get("passages_sha256"), f"the index {self.index}",
                             f"corefsearch index {dataset_dir} --out {self.index} --overwrite")
        if self.dense is not None:
            check_built_from(dataset_dir, self.dense.get("passages_sha256"), f"the dense index {self.index}",
                             f"corefsearch index {dataset_dir} --dense --encoder "
                             f"{self.dense['encoder']['reference']} --out {self.index} --overwrite")


# --- passage texts where no Lucene index stores them ---------------------------------------------


class _LucenePassages:
    """The stored passages of the Lucene index beside a dense one (the JVM started at the first lookup)."""

    def __init__(self, index: Path, manifest: dict[str, Any]) -> None:
        self.index = index
        self.manifest = manifest
        self._searcher: Any = None

    def passage(self, passage_id: str) -> dict[str, Any]:
        if self._searcher is None:
            from corefsearch.sparse.search import BM25Searcher

            self._searcher = BM25Searcher(self.index, manifest=self.manifest)
        return self._searcher.passage(passage_id)  # type: ignore[no-any-return]


def _dense_passages(index: Path, dense_manifest: dict[str, Any], lucene_manifest: dict[str, Any] | None,
                    bm25: Any) -> Any:
    """Where a dense retriever's passage texts come from: the Lucene index beside it when that
    holds the same passages (it stores them), else the dataset's passages file (``None``)."""
    from corefsearch.sparse.index import LUCENE_DIR, load_lucene_manifest

    if lucene_manifest is None and (Path(index) / LUCENE_DIR / "manifest.json").exists():
        lucene_manifest = load_lucene_manifest(index)
    if lucene_manifest is None or lucene_manifest.get("passages_sha256") != dense_manifest.get("passages_sha256"):
        return None
    return bm25 if bm25 is not None else _LucenePassages(Path(index), lucene_manifest)


# --- opening ---------------------------------------------------------------------------------------


def open_retrievers(index: Path, options: BM25Options | None = None, retrieval: RetrievalOptions | None = None,
                    names: Sequence[str] | None = None,
                    manifests: IndexManifests | None = None) -> dict[str, Retriever]:
    """The retrievers ``names`` (default: ``retrieval.retriever``) of ``index``, in that order,
    sharing one BM25 searcher and one dense searcher (one encoder loaded) among them; the
    manifests are read once (or taken from ``manifests``)."""
    from corefsearch.sparse.search import BM25Options, BM25Searcher

    options = options or BM25Options()
    retrieval = retrieval or RetrievalOptions()
    names = list(dict.fromkeys(names or [retrieval.retriever]))
    for name in names:
        replace(retrieval, retriever=name).validate()
    options.validate()
    manifests = manifests or IndexManifests.load(index, names)
    bm25 = dense = None
    if any(uses_dense(name) for name in names):
        from corefsearch.dense.search import DenseSearcher

        assert manifests.dense is not None  # IndexManifests.load read it
        dense = DenseSearcher(index, retrieval.encoder, device=retrieval.device, manifest=manifests.dense,
                              backend=retrieval.backend, search_parameters=retrieval.search_parameters)
    if any(uses_bm25(name) for name in names):
        bm25 = BM25Searcher(index, options, manifest=manifests.lucene)
    if dense is not None:
        dense.passages = _dense_passages(index, manifests.dense, manifests.lucene, bm25)  # type: ignore[arg-type]
    opened: dict[str, Retriever] = {}
    for name in names:
        if name == "hybrid":
            from corefsearch.search.hybrid import HybridSearcher

            opened[name] = HybridSearcher(bm25, dense, retrieval.fusion)  # type: ignore[arg-type]
        else:
            opened[name] = bm25 if name == "bm25" else dense  # type: ignore[assignment]
    return opened


def open_retriever(index: Path, options: BM25Options | None = None, retrieval: RetrievalOptions | None = None,
                   manifests: IndexManifests | None = None) -> Retriever:
    """The retriever ``retrieval.retriever`` (default ``bm25``) of ``index``, its manifests read and
    checked once (a missing index is a ``MissingArtefactError`` saying what to build)."""
    retrieval = retrieval or RetrievalOptions()
    return open_retrievers(index, options, retrieval, [retrieval.retriever], manifests)[retrieval.retriever]
