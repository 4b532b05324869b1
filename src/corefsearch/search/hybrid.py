"""Hybrid search: BM25 and dense search of the same queries, each to depth k, fused."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.progress import track
from corefsearch.base.schema import Hit, Query
from corefsearch.dense.search import DenseSearcher
from corefsearch.fusion import FusionOptions, fuse
from corefsearch.sparse.search import BM25Searcher


class HybridSearcher:
    """Fuses :class:`BM25Searcher` and :class:`DenseSearcher` results; own passages are left out of both.
    A :class:`corefsearch.search.retriever.Retriever`; its passages are the Lucene index's."""

    name = "hybrid"

    def __init__(self, bm25: BM25Searcher, dense: DenseSearcher, fusion: FusionOptions | None = None) -> None:
        self.bm25 = bm25
        self.dense = dense
        self.fusion = fusion or FusionOptions()
        self.fusion.validate()
        if bm25.manifest.get("passages_sha256") != dense.manifest.get("passages_sha256"):
            raise InputError(f"the Lucene and the dense index in {dense.index} were built from different passages; "
                             "rebuild one of them from the same dataset (with --overwrite)")

    def search(self, queries: Sequence[Query], k: int, batch_size: int = 1000) -> Iterator[tuple[Query, list[Hit]]]:
        """Search every query (in batches, under one progress bar), fused to the top ``k``."""
        at_least_one("--k", k)
        strings = self.bm25.formulate(queries)
        starts = range(0, len(queries), batch_size)
        for start in track(starts, f"Searching (hybrid, {self.fusion.method})", total=len(starts)):
            chunk = queries[start:start + batch_size]
            sparse = self.bm25.search_batch(strings[start:start + batch_size], [q.id for q in chunk], k,
                                            [q.passage_id for q in chunk])
            dense = self.dense.search_chunk(chunk, k)
            fused = fuse(dense, sparse, k, self.fusion)
            for query in chunk:
                yield query, fused[query.id]

    @property
    def tag(self) -> str:
        """The TREC run tag."""
        return f"hybrid-{self.fusion.tag}-{self.bm25.tag}-{self.dense.tag}"

    @property
    def options(self) -> Any:
        return self.bm25.options

    @property
    def manifest(self) -> dict[str, Any]:
        return self.bm25.manifest

    @property
    def passages_sha256(self) -> str | None:
        return self.bm25.passages_sha256

    def describe(self) -> dict[str, Any]:
        """What a run's metadata records about the retriever (a search adds the fusion's ``depth``)."""
        return {"retriever": self.name, "options": self.bm25.describe()["options"],
                "dense": self.dense.describe()["dense"], "fusion": self.fusion.to_json()}

    def formulate(self, queries: Sequence[Query], query_format: str | None = None) -> list[str]:
        return self.bm25.formulate(queries, query_format)

    def passage(self, passage_id: str) -> dict[str, Any]:
        return self.bm25.passage(passage_id)

    def contains(self, passage_ids: Sequence[str]) -> set[str]:
        return self.dense.contains(passage_ids)

    def warm(self) -> None:
        self.bm25.warm()

    def search_one(self, query: Query, k: int, *, query_string: str | None = None) -> list[Hit]:
        """One query fused to the top ``k``; ``query_string``: its BM25 string when the caller has it."""
        own = query.passage_id or None
        if query_string is None:
            query_string = self.bm25.formulate([query])[0]
        sparse = self.bm25.search_string(query_string, k, exclude=own)
        dense = self.dense.search_one(query, k)
        return fuse({query.id: dense}, {query.id: sparse}, k, self.fusion)[query.id]
