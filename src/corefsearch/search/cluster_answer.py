"""The answer as a cluster (``query --cluster``, ``serve``'s ``cluster: true``): the query mention and, in each
hit, the candidate mention nearest to it when it is near enough; by document, each with its score, and the near
misses below the cut.

An answer is one query mention against the few dozen candidate mentions of its hits, not a whole-corpus
clustering: each candidate is scored against the query mention alone, by the mention encoder (cosine, plus β for
a shared head lemma, as ``cluster --method encoder`` reads a pair), and a hit's best candidate joins the answer at
or above the encoder's answer cut (``answer_threshold`` in its configuration, chosen on ECB+ dev for answers;
else the cosine of its clustering τ). Dev chose this over average linkage at τ, over every candidate above a cut,
over the reader's span and over a logistic regression on the reader's and the encoder's scores (bench/RESULTS.md,
"Answers"). The candidates are the hits' detected (or stored) mentions of the query's type and, where a reader
re-ranked, its span when it overlaps none of them.
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
    """A candidate mention of a retrieved passage: a detected (or stored) one, or the reader's span."""

    passage_id: str
    doc_id: str | None
    title: str
    text: str  # the passage's text
    start: int
    end: int
    rank: int  # of its passage in the answer
    context: str  # the document's first two passages (what the mention encoder reads beside the sentence)


def answer_scores(encoder: Any, query: Query, query_context: str, found: Sequence[FoundMention],
                  cached: Callable[[Sequence[FoundMention]], dict[int, float]] | None = None) -> list[float]:
    """Each found mention's score against the query mention: the cosine of their encoder vectors, plus the
    encoder's β when both have the same head lemma. ``cached(found)``: the cosines it already knows, by index
    (the engine's candidate mentions, whose vectors it keeps); the others are encoded here."""
    if not found:
        return []
    known = cached(found) if cached is not None else {}
    query_record = MentionRecord("query", "", "", None, query.passage_id, query.text[query.start:query.end],
                                 query.start, query.end, query.text, query_context)
    records = [MentionRecord(f"m{i}", "", m.doc_id or m.passage_id, None, m.passage_id, m.text[m.start:m.end],
                             m.start, m.end, m.text, m.context) for i, m in enumerate(found)]
    rest = [i for i in range(len(found)) if i not in known]
    if rest:
        vectors = encoder.encode([query_record, *(records[i] for i in rest)])
        known.update(zip(rest, (float(v) for v in vectors[1:] @ vectors[0]), strict=True))
    scores = [known[i] for i in range(len(found))]
    beta = float(encoder.config.lemma_weight)
    if beta:
        lemmas = _head_lemmas([query_record, *records])
        scores = [score + beta * (lemmas[i + 1] == lemmas[0]) for i, score in enumerate(scores)]
    return scores


def cluster_answer(encoder: Any, query: Query, query_context: str, found: Sequence[FoundMention],
                   cut: float | None = None,
                   cached: Callable[[Sequence[FoundMention]], dict[int, float]] | None = None) -> dict[str, Any]:
    """The answer of the query mention among ``found`` (every candidate of the hits): in each passage, the
    candidate with the highest score (:func:`answer_scores`) is a member when its score is at least ``cut``
    (None: the encoder's ``answer_cut``); members by document, ranked by score (documents by their best member's),
    each with its score, then the other candidates with the highest scores as near misses."""
    cut = encoder.config.answer_cut if cut is None else cut
    if cut is None:
        raise InputError("the mention encoder records no threshold (it was trained without a dev split)")
    scores = answer_scores(encoder, query, query_context, found, cached)
    best: dict[str, int] = {}
    for i, mention in enumerate(found):
        if mention.passage_id not in best or scores[i] > scores[best[mention.passage_id]]:
            best[mention.passage_id] = i
    # Ranked by score: documents in the order of their best member's, each document's members by theirs.
    members = sorted((i for i in best.values() if scores[i] >= cut), key=lambda i: (-scores[i], found[i].rank))
    documents: dict[str, dict[str, Any]] = {}
    for i in members:
        mention = found[i]
        key = mention.doc_id or mention.passage_id
        documents.setdefault(key, {"doc_id": mention.doc_id, "title": mention.title, "mentions": []})[
            "mentions"].append(_mention_json(mention, scores[i]))
    chosen = set(members)
    others = sorted((i for i in range(len(found)) if i not in chosen), key=lambda i: -scores[i])
    return {"threshold": float(cut), "size": 1 + len(members), "documents": list(documents.values()),
            "near_misses": [_mention_json(found[i], scores[i]) for i in others[:NEAR_MISSES]]}


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
    """The answer as a cluster of an answer's ``hits`` (``AdhocHit``): the candidate mentions of the query's type in
    each (``expander()``: the engine's ``corefsearch.search.second_round.EncoderExpansion``, whose candidates are
    read), and the reader's span (``spans``) where it overlaps none of them; ``document_context(passage id)``: the
    passage's document id and head (what the encoder reads as context)."""
    records: dict[tuple[str, int, int], Any] = {}  # the candidates' own records, whose vectors the expansion keeps
    source: dict[str, Any] = {"candidates": "reader"} if spans else {}
    unavailable = None
    cached = None
    try:
        expansion = expander()
        found_of = expansion.candidates.of([hit.passage_id for hit in hits])
        for pid, mentions in found_of.items():
            records.update(((pid, c.record.start, c.record.end), c.record) for c in mentions
                           if c.type == query.type and c.record.mention_id != query.id)
        source = {**describe_candidates(expansion.candidates), **({"reader": True} if spans else {})}

        def cached(found: Sequence[FoundMention]) -> dict[int, float]:
            keyed = {i: records[key] for i, m in enumerate(found) if (key := (m.passage_id, m.start, m.end)) in records}
            return expansion.similarities(query, keyed) if keyed else {}
    except CorefSearchError as err:
        unavailable = str(err)  # e.g. no dataset beside the index: the reader's spans alone
    found = []
    marked = 0
    for hit in hits:
        own = [(start, end) for pid, start, end in records if pid == hit.passage_id]
        span = spans.get(hit.passage_id)
        if span is not None and span[0] < span[1] and not any(s < span[1] and span[0] < e for s, e in own):
            own.append(span)
        marked += bool(own)
        if not own:
            continue
        doc_id, context = document_context(hit.passage_id)
        found += [FoundMention(hit.passage_id, doc_id, hit.title, hit.text, start, end, hit.rank, context)
                  for start, end in own]
    # An ad-hoc query's document is its context alone (the head the encoder reads, as for a one-passage one).
    query_context = document_context(query.passage_id)[1] or query.text
    answer = cluster_answer(encoder, query, query_context, found, cached=cached)
    answer.update(source)
    answer["candidates_scored"] = len(found)
    answer["passages_without_mentions"] = len(hits) - marked
    if not found:
        why = f" ({unavailable})" if unavailable else ""
        answer["note"] = (f"no mention found in the top {len(hits)} passages{why}: the cluster is the query "
                          "mention alone")
    elif answer["size"] == 1:
        answer["note"] = (f"none of the {len(found)} candidate mentions of the top {len(hits)} passages reaches the "
                          f"cut {answer['threshold']:g}: the cluster is the query mention alone (the nearest are "
                          "the near misses)")
    return answer
