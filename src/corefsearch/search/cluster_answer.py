"""The answer as a cluster (``query --cluster``, ``serve``'s ``cluster: true``): the query mention and the
mentions found in its hits (the reader's span in each, else the mention encoder's nearest candidate mention),
clustered by the mention encoder; the cluster that holds the query mention, by document, and the near misses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from corefsearch.base.errors import CorefSearchError, InputError
from corefsearch.base.nlp import head_lemmas
from corefsearch.base.schema import Query
from corefsearch.cluster.inputs import MentionRecord
from corefsearch.search.candidates import describe_candidates

NEAR_MISSES = 5


@dataclass
class FoundMention:
    """A mention of a retrieved passage: the reader's span, or the dataset mention the encoder put nearest."""

    passage_id: str
    doc_id: str | None
    title: str
    text: str  # the passage's text
    start: int
    end: int
    rank: int  # of its passage in the answer
    context: str  # the document's first two passages (what the mention encoder reads beside the sentence)


def cluster_answer(encoder: Any, query: Query, query_context: str, found: Sequence[FoundMention],
                   threshold: float | None = None) -> dict[str, Any]:
    """The query mention and the mentions found, clustered by average linkage on the mention encoder's vectors
    at its τ (``threshold``: another τ); the cluster that holds the query mention, its mentions grouped by
    document (in the order of their best rank), and the other mentions nearest to the query as near misses.
    Each mention's score is its cosine similarity to the query mention."""
    from corefsearch.cluster.agglomerative import cluster_dense

    tau = encoder.config.threshold if threshold is None else threshold
    if tau is None:
        raise InputError("the mention encoder records no threshold (it was trained without a dev split)")
    records = [MentionRecord("query", "", "", None, query.passage_id, query.text[query.start:query.end],
                             query.start, query.end, query.text, query_context)]
    records += [MentionRecord(f"m{i}", "", m.doc_id or m.passage_id, None, m.passage_id, m.text[m.start:m.end],
                              m.start, m.end, m.text, m.context) for i, m in enumerate(found)]
    vectors = encoder.encode(records)
    # The lemma weight β the encoder was chosen with on dev, as `cluster --method encoder` applies it: two mentions
    # with the same head lemma are β closer.
    beta = float(encoder.config.lemma_weight)
    lemmas = _head_lemmas(records) if beta and len(records) > 1 else None
    labels = cluster_dense(vectors, float(tau), lemmas, beta) if len(records) > 1 else [0]
    similarity = (vectors @ vectors[0]).tolist()
    members = [i for i in range(1, len(records)) if labels[i] == labels[0]]
    documents: dict[str, dict[str, Any]] = {}
    for i in sorted(members, key=lambda i: found[i - 1].rank):
        mention = found[i - 1]
        key = mention.doc_id or mention.passage_id
        documents.setdefault(key, {"doc_id": mention.doc_id, "title": mention.title, "mentions": []})[
            "mentions"].append(_mention_json(mention, similarity[i]))
    others = sorted((i for i in range(1, len(records)) if labels[i] != labels[0]), key=lambda i: -similarity[i])
    return {"threshold": float(tau), "size": 1 + len(members), "documents": list(documents.values()),
            "near_misses": [_mention_json(found[i - 1], similarity[i]) for i in others[:NEAR_MISSES]]}


def _head_lemmas(records: Sequence[MentionRecord]) -> list[str]:
    """The head lemma of each record's mention; each sentence parsed once."""
    sentences = list(dict.fromkeys(r.sentence for r in records))
    spans = [[(r.start, r.end) for r in records if r.sentence == sentence] for sentence in sentences]
    found = {sentence: iter(lemmas) for sentence, lemmas in zip(sentences, head_lemmas(sentences, spans), strict=True)}
    return [next(found[r.sentence]) for r in records]


def _mention_json(mention: FoundMention, score: float) -> dict[str, Any]:
    return {"passage_id": mention.passage_id, "rank": mention.rank, "start": mention.start, "end": mention.end,
            "mention": mention.text[mention.start:mention.end], "text": mention.text, "score": round(score, 4)}


def cluster_of_hits(encoder: Any, expander: Callable[[], Any], query: Query, hits: Sequence[Any],
                    spans: dict[str, tuple[int, int]], document_context: Callable[[str], tuple[str | None, str]]
                    ) -> dict[str, Any]:
    """The answer as a cluster of an answer's ``hits`` (``AdhocHit``): the reader's span in each (``spans``), else
    the mention encoder's nearest candidate mention in it (``expander()``: the engine's
    ``corefsearch.search.second_round.EncoderExpansion``); ``document_context(passage id)``: the passage's document
    id and head (what the encoder reads as context)."""
    unmarked = [hit.passage_id for hit in hits if hit.passage_id not in spans]
    nearest: dict[str, Any] = {}
    source: dict[str, Any] = {"candidates": "reader"} if spans else {}
    unavailable = None
    if unmarked:
        try:
            expansion = expander()
            nearest = expansion.nearest([(query, unmarked)], count=False)[query.id]
            source = {**describe_candidates(expansion.candidates), **({"reader": True} if spans else {})}
        except CorefSearchError as err:
            unavailable = str(err)  # e.g. no dataset beside the index: the reader's spans alone
    found = []
    for hit in hits:
        span = spans.get(hit.passage_id)
        if span is None and hit.passage_id in nearest:
            span = (nearest[hit.passage_id].start, nearest[hit.passage_id].end)
        if span is None or span[0] >= span[1]:
            continue
        doc_id, context = document_context(hit.passage_id)
        found.append(FoundMention(hit.passage_id, doc_id, hit.title, hit.text, span[0], span[1], hit.rank,
                                  context))
    # An ad-hoc query's document is its context alone (the head the encoder reads, as for a one-passage one).
    query_context = document_context(query.passage_id)[1] or query.text
    answer = cluster_answer(encoder, query, query_context, found)
    answer.update(source)
    answer["passages_without_mentions"] = len(hits) - len(found)
    if not found:
        why = f" ({unavailable})" if unavailable else ""
        answer["note"] = (f"no mention found in the top {len(hits)} passages{why}: the cluster is the query "
                          "mention alone")
    return answer
