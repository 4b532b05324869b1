"""Hybrid search: BM25 and dense search of the same queries, each to depth k, fused."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from corefsearch.dense.search import DenseSearcher
from corefsearch.errors import InputError
from corefsearch.fusion._base import FusionOptions, fuse
from corefsearch.progress import track
from corefsearch.schema import Query
from corefsearch.sparse.search import BM25Searcher, Hit


class HybridSearcher:
    """Fuses :class:`BM25Searcher` and :class:`DenseSearcher` results; own passages are left out of both."""

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
        if k < 1:
            raise InputError(f"--k must be at least 1, got {k}")
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

    def search_one(self, query: Query, query_string: str, k: int) -> list[Hit]:
        own = query.passage_id or None
        sparse = self.bm25.search_one(query_string, k, exclude=own)
        dense = self.dense.search_one(query, k)
        return fuse({query.id: dense}, {query.id: sparse}, k, self.fusion)[query.id]
