"""The answer to one question (``query``, ``serve``'s ``POST /search``): the ranked hits with their spans,
and what answered (the retriever, the reader, the second round, the cluster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corefsearch.base.schema import Query


@dataclass
class AdhocHit:
    rank: int
    score: float
    passage_id: str
    title: str
    text: str
    matched: list[tuple[int, int]] = field(default_factory=list)
    span: tuple[int, int] | None = None  # the reader's coreferring span (characters of text)
    # A query of a dataset (--dataset --qid): relevant in its qrels, and the mentions of its cluster
    relevant: bool | None = None
    gold_mentions: list[tuple[int, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        record = {"rank": self.rank, "score": self.score, "passage_id": self.passage_id, "title": self.title,
                  "text": self.text, "matched": [list(span) for span in self.matched]}
        if self.span is not None:
            start, end = self.span
            record["span"] = {"start": start, "end": end, "text": self.text[start:end]}
        if self.relevant is not None:
            record["relevant"] = self.relevant
            record["gold_mentions"] = [{"start": start, "end": end, "text": self.text[start:end]}
                                       for start, end in self.gold_mentions]
        return record


@dataclass
class AdhocResult:
    query: Query
    query_string: str | None  # the BM25 query (None for the dense retriever alone)
    occurrences: int
    hits: list[AdhocHit]
    retriever: str = "bm25"
    encoder: str | None = None  # the dense encoder's reference (dense, hybrid)
    fusion: str | None = None  # rrf | interpolate (hybrid)
    reader: str | None = None  # the reader's folder (--reader)
    rerank_fusion: str | None = None  # with a reader: reader | rrf (--rerank-fusion, or the reader's recorded one)
    split: str | None = None  # a query of a dataset: its split ...
    relevant_total: int | None = None  # ... and how many passages its qrels hold relevant
    expansion: dict[str, Any] | None = None  # the second round (rounds 2): its options and expansion queries
    cluster: dict[str, Any] | None = None  # the answer as a cluster (corefsearch.search.cluster_answer)

    def to_json(self) -> dict[str, Any]:
        query: dict[str, Any] = {"mention": self.query.mention, "start": self.query.start, "end": self.query.end,
                                 "context": self.query.text, "bm25_query": self.query_string}
        if self.split is not None:
            query = {"id": self.query.id, "split": self.split, "passage_id": self.query.passage_id,
                     "cluster_id": self.query.cluster_id, **query, "relevant_passages": self.relevant_total}
        record = {"query": query, "retriever": self.retriever, "encoder": self.encoder, "fusion": self.fusion,
                  "reader": self.reader, "rerank_fusion": self.rerank_fusion,
                  "hits": [hit.to_json() for hit in self.hits]}
        if self.expansion is not None:
            record["expansion"] = self.expansion
        if self.cluster is not None:
            record["cluster"] = self.cluster
        return record
