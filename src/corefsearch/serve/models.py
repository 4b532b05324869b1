"""The shapes of ``corefsearch serve``'s requests and answers, as pydantic models.

Request bodies are strict: a field of the wrong JSON type (``"k": "5"``, ``"mention": 3``) is a
422 naming the field, as a wrong type in a dataset file is an error naming the line, rather than
a value quietly converted. Unknown fields are refused too.

The answers are described by models so that ``/openapi.json`` (and ``/docs``) tells a client
what it gets back, and every route validates what it returns against them. Fields that an answer
leaves out (the reader's ``span`` without a reader, the dataset's fields for an ad-hoc question)
are left out of the JSON as well (the routes use ``response_model_exclude_unset``), so ``/search``
answers exactly what ``corefsearch query --json`` prints, plus ``timing``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Judgement = Literal["relevant", "not_relevant", "unjudged"]


class StrictBody(BaseModel):
    """A request body: JSON types as declared (no ``"5"`` for 5, no ``true`` for 1), no unknown fields."""

    model_config = ConfigDict(strict=True, extra="forbid")


class SearchRequest(StrictBody):
    """One question: a mention in its context (``mention`` [+ ``occurrence``], or the character
    offsets ``start``/``end`` of a selection in ``context``), or a query of the server's dataset
    (``qid``)."""

    context: str | None = Field(None, description="The passage the mention occurs in (default: the mention alone).")
    mention: str | None = Field(None, description="The mention as written in the context.")
    occurrence: int | None = Field(None, description="Which occurrence of `mention` in the context (1-based).")
    start: int | None = Field(None, description="The mention's first character in `context` (with `end`).")
    end: int | None = Field(None, description="One past the mention's last character in `context`.")
    qid: str | None = Field(None, description="A query of the dataset the server was started with (--dataset).")
    k: int = Field(10, description="Passages to return: ranks offset+1 to offset+k (offset + k at most the "
                                   "server's max_k).")
    offset: int = Field(0, description="Ranks to skip: 0 for the first page, k for the second, ...")
    retriever: str | None = Field(None, description="One of the server's retrievers (GET /info); default its first.")
    rerank_k: int | None = Field(None, description="With a reader: re-rank the top N (0: no re-ranking; "
                                                   "default: the server's --rerank-k).")
    query_format: str | None = Field(None, description="BM25 query format for this question (default: the server's).")
    rounds: int | None = Field(None, description="2: a second round from the coreferring mentions the first found "
                                                 "(default: the server's --rounds).")
    cluster: bool = Field(False, description="Also answer as a cluster: the query mention's cluster among the mentions "
                                             "found, by document, with the near misses (needs the server's "
                                             "--mention-encoder).")


# --- answers ----------------------------------------------------------------------------------


class ErrorResponse(BaseModel):
    """Every error the server answers (4xx and 500): one line, never a traceback."""

    detail: str = Field(description="What is wrong, in one line; for a malformed request, each field named "
                                    "(`k: Input should be a valid integer, got a string`).")


class TextSpan(BaseModel):
    start: int = Field(description="First character in the hit's text.")
    end: int = Field(description="One past the last character.")
    text: str = Field(description="The characters start..end of the hit's text.")


class SearchHit(BaseModel):
    rank: int = Field(description="1-based rank in the whole ranking (not in the page).")
    score: float
    passage_id: str
    title: str
    text: str
    matched: list[tuple[int, int]] = Field(description="Character ranges of the text that match terms of the "
                                                       "BM25 query (none for the dense retriever alone).")
    span: TextSpan | None = Field(None, description="The reader's coreferring span (hits it re-ranked only).")
    relevant: bool | None = Field(None, description="With `qid`: the query's qrels hold the passage relevant "
                                                    "(false also for a passage nobody judged: see `judgement`).")
    gold_mentions: list[TextSpan] | None = Field(None, description="With `qid`: the mentions of the query's "
                                                                   "cluster in the passage.")
    judgement: Judgement | None = Field(None, description="With `qid`: `relevant`; `not_relevant` (judged so in "
                                                          "the qrels, or in a document the corpus annotated that "
                                                          "has no mention of the cluster there); `unjudged` (no "
                                                          "judgement: a document the corpus never annotated, or "
                                                          "relevance -1 in the qrels).")


class SearchedQuery(BaseModel):
    mention: str
    start: int
    end: int
    context: str
    bm25_query: str | None = Field(description="The BM25 query string (null for the dense retriever alone).")
    id: str | None = Field(None, description="With `qid`: the query's id.")
    split: str | None = Field(None, description="With `qid`: the split holding it.")
    passage_id: str | None = Field(None, description="With `qid`: the query's own passage (left out of the hits).")
    cluster_id: str | None = Field(None, description="With `qid`: its gold cluster.")
    relevant_passages: int | None = Field(None, description="With `qid`: how many passages its qrels hold relevant.")


class Timing(BaseModel):
    queue_ms: float = Field(description="Waiting for a free search thread.")
    search_ms: float = Field(description="The search itself.")
    total_ms: float = Field(description="The whole request.")


class ClusterMention(BaseModel):
    passage_id: str
    rank: int = Field(description="The rank of its passage.")
    start: int = Field(description="First character of the mention in `text`.")
    end: int
    mention: str
    text: str = Field(description="The passage's text.")
    score: float = Field(description="Its score against the query mention: the mention encoder's cosine, plus its β "
                                     "when both have the same head lemma.")


class ClusterDocument(BaseModel):
    doc_id: str | None
    title: str
    mentions: list[ClusterMention]


class AnswerCluster(BaseModel):
    threshold: float = Field(description="The cut: a hit's best-scoring candidate mention is a member at this score or "
                                         "above (the mention encoder's answer_threshold, else 1 - τ).")
    size: int = Field(description="Mentions in the query mention's cluster, its own included.")
    documents: list[ClusterDocument] = Field(description="The cluster's other mentions, by document.")
    near_misses: list[ClusterMention] = Field(description="The candidates outside it with the highest scores.")
    candidates: str | None = Field(None, description="Where the mentions come from: `reader` (its spans), `detected` "
                                                      "(a detector's, every one of the query's type scored) or `gold` "
                                                      "(the annotated ones: an upper bound).")
    detector: str | None = Field(None, description="With `detected`: the detector.")
    detected: str | None = Field(None, description="With `detected`: stored (`corefsearch detect`) or at query time.")
    reader: bool | None = Field(None, description="True when the reader's spans mark the passages it read.")
    passages_without_mentions: int | None = Field(None, description="Hits in which no mention was found.")
    candidates_scored: int | None = Field(None, description="The candidate mentions of the hits that were scored.")
    note: str | None = Field(None, description="Said when the cluster is the query's alone: no mention found, or none "
                                               "at the cut.")


class SearchResponse(BaseModel):
    """What ``corefsearch query --json`` prints for the same question, plus ``timing``."""

    query: SearchedQuery
    retriever: str
    encoder: str | None = Field(description="The dense encoder (dense, hybrid).")
    fusion: str | None = Field(description="rrf | interpolate (hybrid).")
    reader: str | None = Field(description="The reader's folder when it re-ranked.")
    rerank_fusion: str | None
    hits: list[SearchHit]
    expansion: dict[str, Any] | None = Field(None, description="With rounds 2: the second round's options and its "
                                                               "queries (the mentions it searched from).")
    cluster: AnswerCluster | None = Field(None, description="With `cluster`: the answer as a cluster.")
    timing: Timing


class DocumentPassage(BaseModel):
    id: str
    text: str


class PassageResponse(BaseModel):
    id: str
    title: str
    text: str
    doc_id: str | None = Field(description="Null when the dataset's passages file is gone (then `document` holds "
                                            "the passage alone).")
    document: list[DocumentPassage] = Field(description="Every passage of its document, in order.")


class DatasetQuery(BaseModel):
    id: str
    mention: str
    passage_id: str
    cluster_id: str


class QueriesResponse(BaseModel):
    split: str
    total: int = Field(description="Queries in the split.")
    matching: int = Field(description="Queries in the split that `contains` matches (`total` without it).")
    offset: int
    queries: list[DatasetQuery] = Field(description="The matching queries offset+1 to offset+limit.")


class HealthResponse(BaseModel):
    status: Literal["ok"]
    retrievers: list[str]


class Defaults(BaseModel):
    retriever: str
    k: int
    query_format: str
    rerank_k: int | None


class LimitsInfo(BaseModel):
    max_body_bytes: int
    max_context_chars: int
    max_k: int = Field(description="The deepest rank a search reaches: offset + k at most this.")
    max_rerank_k: int
    threads: int
    api_key: bool


class InfoResponse(BaseModel):
    """The engine's description (index, retrievers, options, encoder, reader, dataset, versions,
    load times) and the server's: query formats, defaults, the dataset's splits, the limits."""

    model_config = ConfigDict(extra="allow")  # the engine may describe more than is listed here

    index: str
    retrievers: list[str]
    reader: dict[str, Any] | None = Field(description="The reader (model, rerank_k, head, fusion, backend), or "
                                                      "null without one.")
    mention_encoder: str | None = Field(None, description="The mention encoder of the cluster answers "
                                                          "(--mention-encoder), or null.")
    dataset: str | None
    query_formats: list[str]
    defaults: Defaults
    dataset_splits: list[str]
    limits: LimitsInfo
