"""Dense search over ``INDEX/dense``: encode the queries (mention marked when the model uses
markers) with the retriever's query encoder and look up the top passages by inner product."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.faiss_gpu import GPU_MAX_K, to_gpu
from corefsearch.base.onnx_backend import check_backend_device
from corefsearch.base.progress import track
from corefsearch.base.schema import Hit, Query
from corefsearch.datasets.passages import PassageFile
from corefsearch.dense import faiss_index
from corefsearch.dense.store import (
    DENSE_DIR,
    FAISS_FILE,
    IDS_FILE,
    load_dense_manifest,
    load_encoder,
    portable_reference,
)

if TYPE_CHECKING:
    from corefsearch.dense.model import BiEncoder


class DenseSearcher:
    """Top-k passages by dot product; every query's own passage is left out of its results.

    The encoder defaults to the one the index manifest names; another one must have the
    same passage fingerprint (the same passage encoder), or the vectors would not compare.

    A :class:`corefsearch.search.retriever.Retriever`. The dense index stores no passage texts:
    ``passage`` reads them from ``passages`` (set by ``open_retriever``: the Lucene index beside
    it when that holds the same passages), else from the dataset's passages file the manifest
    names. ``manifest``: the dense index manifest when the caller has read it already.

    ``backend`` ``onnx`` or ``onnx-int8`` runs the query encoder with ONNX Runtime on the CPU
    (``threads`` intra-op threads; default torch's), from its folder's export (``corefsearch
    export-onnx``); whatever backend encoded the passages (the manifest's ``encoding.backend``). None: torch, or
    onnx-int8 for an inference-only encoder folder.
    """

    name = "dense"

    def __init__(self, index: Path, encoder_ref: str | BiEncoder | None = None, device: str = "auto",
                 query_batch_size: int = 128, manifest: dict[str, Any] | None = None,
                 passages: Any = None, backend: str | None = None, threads: int | None = None,
                 search_parameters: dict[str, int] | None = None) -> None:
        self.index = Path(index)
        self.manifest = manifest if manifest is not None else load_dense_manifest(self.index)
        self.search_parameters = faiss_index.check_search_parameters(
            self.manifest["faiss"], search_parameters or {}, self.index)
        self.passages = passages  # anything with .passage(id) -> {"id", "title", "text"}; None: the dataset file
        recorded = self.manifest["encoder"]
        folder = self.index / DENSE_DIR
        for name in (FAISS_FILE, IDS_FILE):
            if not (folder / name).exists():
                raise MissingArtefactError(f"{folder / name} is missing; rebuild the dense index with "
                                           f"`corefsearch index DATASET --dense --encoder {recorded['reference']} "
                                           f"--out {self.index} --overwrite`")

        check_backend_device(backend, device)
        try:
            self.model = load_encoder(encoder_ref if encoder_ref is not None else recorded["reference"],
                                      device if backend in (None, "torch") else "cpu")
        except MissingArtefactError as err:
            if encoder_ref is not None:
                raise
            raise MissingArtefactError(f"the dense index {self.index} was built with encoder "
                                       f"{recorded['reference']}, which cannot be loaded ({err}); pass the same "
                                       "encoder with --encoder") from None
        if self.model.passage_fingerprint() != recorded["passage_fingerprint"]:
            given = (portable_reference(encoder_ref) if isinstance(encoder_ref, str) else self.model.reference)
            raise InputError(f"the dense index {self.index} was built with encoder {recorded['reference']}, and "
                             f"{given} encodes passages differently; search with --encoder "
                             f"{recorded['reference']} or rebuild the index with `corefsearch index DATASET "
                             f"--dense --encoder {given} --out {self.index} --overwrite`")
        self.model.use_backend(backend, ("query",), threads)  # a missing or stale export: one line
        self.query_batch_size = query_batch_size
        dataset = self.manifest.get("dataset", "DATASET")
        self.faiss = faiss_index.read_index(
            folder / FAISS_FILE, f"rebuild it with `corefsearch index {dataset} --dense --encoder "
                                 f"{recorded['reference']} --out {self.index} --overwrite`")
        # Flat and IVF-PQ indexes are searched on the GPU when FAISS can (a copy; the CPU one answers searches
        # deeper than the GPU's limit).
        self.faiss_gpu: Any = None
        query_device = self.model.query_encoder.device
        if faiss_index.on_gpu(query_device, self.manifest["faiss"].get("type", "")):
            self.faiss_gpu = to_gpu(self.faiss, query_device)
        with (folder / IDS_FILE).open(encoding="utf-8") as handle:
            self.ids = [line.rstrip("\n") for line in handle]
        if len(self.ids) != self.faiss.ntotal or len(self.ids) != self.manifest["passages"]:
            raise InputError(f"{folder} is inconsistent: {self.faiss.ntotal} vectors, {len(self.ids)} ids, "
                             f"{self.manifest['passages']} passages in the manifest; rebuild it with --overwrite")

    @property
    def num_passages(self) -> int:
        return len(self.ids)

    @property
    def tag(self) -> str:
        """The TREC run tag."""
        return f"dense-{self.parameters['type']}"

    @property
    def passages_sha256(self) -> str | None:
        return self.manifest.get("passages_sha256")

    def describe(self) -> dict[str, Any]:
        """What a run's metadata records about the retriever."""
        return {"retriever": self.name, "options": None, "dense": describe(self)}

    def warm(self) -> None:
        """Nothing to open: the encoder and the FAISS index are loaded with the searcher."""

    def contains(self, passage_ids: Sequence[str]) -> set[str]:
        """Those of ``passage_ids`` that are in the index."""
        if not hasattr(self, "_id_set"):
            self._id_set = set(self.ids)
        return {pid for pid in passage_ids if pid in self._id_set}

    def passage(self, passage_id: str) -> dict[str, Any]:
        """The passage ``{"id", "title", "text"}`` (see the class's note on where the texts come from)."""
        if self.passages is None:
            self.passages = PassageFile(Path(self.manifest["dataset"]) / "passages.jsonl",
                                        self.manifest["passages_sha256"], f"the index {self.index}")
        return self.passages.passage(passage_id)  # type: ignore[no-any-return]

    @property
    def parameters(self) -> dict[str, Any]:
        """The FAISS index's parameters as the manifest records them, with the search-time settings
        given to this searcher (``--ef-search``, ``--nprobe``) over the recorded ones."""
        return {**self.manifest["faiss"], **self.search_parameters}

    def encode(self, queries: Sequence[Query]) -> Any:
        return self.model.query_encoder.encode_queries(list(queries), max_length=self.model.config.max_query_len,
                                                       batch_size=self.query_batch_size)

    def search_vectors(self, vectors: Any, k: int, exclude: Sequence[str | None]) -> list[list[Hit]]:
        """The top ``k`` passages of each vector, the passage ``exclude[i]`` left out of row i."""
        import numpy as np

        at_least_one("--k", k)
        depth = min(k + 1, len(self.ids))
        index = self.faiss_gpu if self.faiss_gpu is not None and depth <= GPU_MAX_K else self.faiss
        faiss_index.configure_search(index, self.parameters, depth)
        scores, rows = index.search(np.ascontiguousarray(vectors, dtype=np.float32), depth)
        results = []
        ids = self.ids
        for own, row_scores, row_ids in zip(exclude, scores, rows, strict=True):
            # Plain Python numbers, one pass, each id read once: at k = 500 this loop is most of what
            # corefsearch adds to FAISS's own search time (bench/scale.py), and at a million passages
            # its cost is mostly cache misses on the ids list and its strings.
            hits = [Hit(passage_id, s) for s, r in zip(row_scores.tolist(), row_ids.tolist(), strict=True)
                    if r >= 0 and (passage_id := ids[r]) != own]
            if not bool(np.all(row_scores[:-1] >= row_scores[1:])):  # FAISS gives inner products descending
                hits.sort(key=lambda hit: -hit.score)  # stable: FAISS's order among equal scores
            results.append(hits[:k])
        return results

    def search_chunk(self, queries: Sequence[Query], k: int) -> dict[str, list[Hit]]:
        """Search a list of queries (no progress bar); ``{query id: hits}``."""
        if not queries:
            return {}
        vectors = self.encode(queries)
        hits = self.search_vectors(vectors, k, [q.passage_id or None for q in queries])
        return {query.id: query_hits for query, query_hits in zip(queries, hits, strict=True)}

    def search(self, queries: Sequence[Query], k: int, batch_size: int = 256) -> Iterator[tuple[Query, list[Hit]]]:
        """Search every query (in batches, under a progress bar), its own passage removed."""
        at_least_one("--k", k)
        starts = range(0, len(queries), batch_size)
        for start in track(starts, "Searching (dense)", total=len(starts)):
            chunk = queries[start:start + batch_size]
            hits = self.search_chunk(chunk, k)
            for query in chunk:
                yield query, hits[query.id]

    def search_one(self, query: Query, k: int, *, query_string: str | None = None) -> list[Hit]:
        """One query, its own passage (if it has one) left out (``query_string``, a BM25 string, is not read)."""
        return self.search_vectors(self.encode([query]), k, [query.passage_id or None])[0]


def describe(searcher: DenseSearcher) -> dict[str, Any]:
    """What a run's metadata records about the dense side."""
    return {"encoder": searcher.manifest["encoder"]["reference"],
            "query_encoder": portable_reference(str(searcher.model.reference)),
            "passage_fingerprint": searcher.manifest["encoder"]["passage_fingerprint"],
            "faiss": searcher.parameters, "device": searcher.model.query_encoder.device,
            "backend": searcher.model.backend,
            "passages_backend": searcher.manifest.get("encoding", {}).get("backend", "torch"),
            "passages_sha256": searcher.manifest["passages_sha256"]}

