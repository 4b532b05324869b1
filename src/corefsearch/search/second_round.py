"""A second search round from the coreferring mentions the first one found (``--rounds 2 --expand N``).

CoreSearch answers each query in one round. But the passages a first round ranks highest hold other
mentions of the query's event, often worded otherwise ("the blaze" for "the fire"), and each of them,
used as a query, reaches passages the first wording missed. So the second round:

1. takes the first round's top ``N`` passages (after the reader, when there is one);
2. marks in each the mention that corefers with the query:
   - ``reader``: the span the reader marked in it (``RUN.spans.jsonl``'s span);
   - ``encoder``: of the dataset's mentions in that passage, the one the mention encoder
     (``train clusterer``) puts nearest to the query mention, of the query's type. These are the
     dataset's gold mention boundaries, as ``cluster`` uses; a passage without mentions gives none.
     With ``--expand-margin δ``, a mention counts only when its cosine to the query mention exceeds
     by δ the highest cosine of any mention in the first round's passages ranked 21st to 100th (the
     background: mostly other events). A fixed cosine gate (``--expand-min-similarity``) means
     something else on each corpus, as each runs its similarities higher or lower; the background
     is the query's own and the collection's. Being annotated mentions, they also tell which
     passages hold a mention at all: on a collection annotated only in part (ECB+) that alone
     tells which passages can be relevant, and a benchmark should compare with that
     (bench/mention_promotion.py's oracle row);
3. searches again with each marked passage as a query of its own (the query format exactly: a
   passage with a marked mention), with the same retriever, leaving out the original query's passage;
4. keeps an expansion only if its own search ranks the original query's passage in its top ``R``
   (``--expand-reciprocal R``; 0 keeps every one): a mention that corefers with the query finds the
   query's passage again, a mention of another event mostly does not. The test is by ranks, so it
   does not depend on how a corpus's similarities run (the encoder's cosine gate does). A query
   whose passage is not in the collection (an ad hoc query) has nothing to find again: the test
   does not apply to it;
5. fuses the rounds by weighted reciprocal rank fusion: a passage scores
   ``1 / (60 + rank₁) + w · mean_i 1 / (60 + rank₂ᵢ)``, rank₁ in the first round and rank₂ᵢ in the
   list of expansion i (a list that misses it adds nothing). Expansion i's own passage heads its
   list (:func:`expansion_list`): the retriever leaves a query's passage out of its hits, and without
   it the passages the second round starts from would be the only top passages it cannot raise.
   ``w`` and ``N`` are chosen on dev (bench/second_round.py). Only the first ``L`` passages of each
   expansion's list count (``--expand-list-depth L``; 0: all). With L = 1 each list is its own passage
   alone: the second round moves up the top passages whose mention it kept, and searches only for the
   reciprocal test, not at all with R = 0. Read whole, the searches cost more MRR@10 than they bring
   (bench/RESULTS.md, "How deep each expansion's list is read"), so ``--expand-head H`` takes the top H ranks
   from the lists' own passages alone (the order L = 1 gives) and the rest from the lists read to L: the
   searches then fill the ranks below H, where they raise R@100, and leave the top H, where they cost MRR@10,
   as the heads order it. A head that fills the run (H ≥ k, over a first round of k passages) leaves them no
   rank, so nothing is searched then (:func:`needs_search`): ``serve``'s top 10 costs no search. Dev chose
   L = 0 (all), H = 10, R = 0, N = 10 and w = 4, the defaults (bench/RESULTS.md, "The head and the tail"); the
   cosine gate, 0.8 with gold candidates then, is 0.9 with detected ones, the default ("Detected candidates").

``N = 0`` leaves the first round as it is. The options are ``corefsearch.search.options.ExpansionOptions``; the
run's metadata records them (``ExpansionOptions.describe``; ``ExpansionOptions.from_metadata`` reads them back).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.models import resolve_device
from corefsearch.base.schema import Hit, Query
from corefsearch.search.calibration import HeadCalibration
from corefsearch.search.options import BACKGROUND_FROM, RRF_K, ExpansionOptions


def expansion_query(query: Query, passage_id: str, text: str, start: int, end: int) -> Query:
    """The query a marked mention of a retrieved passage makes (a query record like any other; its id
    names the query it expands and the passage)."""
    return Query(f"{query.id}>{passage_id}", passage_id, text, start, end, text[start:end], query.cluster_id,
                 query.type)


def from_spans(query: Query, hits: Sequence[Hit], spans: Mapping[str, tuple[int, int]],
               texts: Mapping[str, str], n: int) -> list[Query]:
    """The expansion queries of the reader's spans (``{passage_id: (start, end)}``) in the top ``n`` hits
    that have a non-empty one."""
    found = []
    for hit in hits[:n]:
        span = spans.get(hit.passage_id)
        if span is not None and span[0] < span[1]:
            found.append(expansion_query(query, hit.passage_id, texts[hit.passage_id], *span))
    return found


class EncoderExpansion:
    """Marks the expansion mentions with a mention encoder: in each top passage, the candidate mention
    (``corefsearch.search.candidates``: detected, or the dataset's annotated ones) nearest to the query
    mention. The vectors are computed when first needed and kept; ``empty`` counts the passages asked about
    that held no candidate of the query's type."""

    def __init__(self, encoder: Any, candidates: Any) -> None:
        self.encoder = encoder
        self.candidates = candidates
        self.known: dict[str, Any] = {}  # mention id -> record, of every candidate seen
        self.vectors: dict[str, Any] = {}
        self.empty = 0

    @classmethod
    def load(cls, encoder_dir: Path, candidates: Any, device: str = "cpu") -> EncoderExpansion:
        from corefsearch.cluster.model import MentionEncoder

        return cls(MentionEncoder.load(Path(encoder_dir), resolve_device(device)), candidates)

    def _encode(self, mention_ids: set[str]) -> None:
        todo = sorted(m for m in mention_ids if m not in self.vectors)
        if todo:
            vectors = self.encoder.encode([self.known[m] for m in todo])
            self.vectors.update(zip(todo, vectors, strict=True))

    def _query_vector(self, query: Query) -> Any:
        """The query mention's vector (kept for a query of the dataset, whose id names it)."""
        record = self.candidates.query_record(query)
        if not record.doc_id:  # an ad-hoc query's passage is not in the dataset: its vector is not kept
            return self.encoder.encode([record])[0]
        self.known.setdefault(record.mention_id, record)
        self._encode({record.mention_id})
        return self.vectors[record.mention_id]

    def nearest(self, items: Sequence[tuple[Query, Sequence[str]]], min_similarity: float | None = None,
                count: bool = True) -> dict[str, dict[str, Any]]:
        """``{query id: {passage id: record}}``: in each passage of each ``(query, passage ids)``, the candidate
        mention of the query's type nearest to the query mention (passages without one are left out, and
        those whose nearest mention is less similar than ``min_similarity``, a cosine)."""
        found = self.candidates.of(list(dict.fromkeys(pid for _, passage_ids in items for pid in passage_ids)))
        for mentions in found.values():
            for candidate in mentions:
                self.known.setdefault(candidate.record.mention_id, candidate.record)
        types = {query.type for query, _ in items}  # only candidates a query can take are encoded
        self._encode({c.record.mention_id for mentions in found.values() for c in mentions if c.type in types})
        result: dict[str, dict[str, Any]] = {}
        for query, passage_ids in items:
            own = self._query_vector(query)
            chosen = result.setdefault(query.id, {})
            for pid in passage_ids:
                candidates = [c.record for c in found.get(pid, ())
                              if c.record.mention_id != query.id and c.type == query.type]
                if not candidates:
                    self.empty += count
                    continue
                best = max(candidates, key=lambda r: float(own @ self.vectors[r.mention_id]))
                if min_similarity is None or float(own @ self.vectors[best.mention_id]) >= min_similarity:
                    chosen[pid] = best
        return result

    def similarities(self, query: Query, records: Mapping[str, Any]) -> dict[str, float]:
        """``{key: cosine to the query mention}`` of dataset mention records (e.g. those :meth:`nearest` chose, by
        passage, or any candidates of theirs); the query mention is encoded once, each record once a process."""
        for record in records.values():
            self.known.setdefault(record.mention_id, record)
        self._encode({r.mention_id for r in records.values()})
        own = self._query_vector(query)
        return {key: float(own @ self.vectors[r.mention_id]) for key, r in records.items()}

    def background(self, items: Sequence[tuple[Query, Sequence[str]]]) -> dict[str, float | None]:
        """``{query id: the highest cosine to the query mention of any mention of its type in these passages}``
        (``None``: they hold none): how similar a mention of another event gets, for this query, in this
        collection."""
        chosen = self.nearest(items, count=False)
        return {query.id: max(self.similarities(query, chosen[query.id]).values(), default=None)
                for query, _ in items}

    def expansions(self, items: Sequence[tuple[Query, Sequence[Hit]]], n: int,
                   min_similarity: float | None = None, margin: float | None = None) -> dict[str, list[Query]]:
        """``{query id: expansion queries}`` of each ``(query, ranked hits)`` (``min_similarity``: see
        :meth:`nearest`). ``margin``: an expansion mention counts only when its cosine to the query mention
        exceeds by ``margin`` the :meth:`background` of the hits from rank ``BACKGROUND_FROM + 1`` on (no test
        when those hold no mention)."""
        chosen = self.nearest([(query, [h.passage_id for h in hits[:n]]) for query, hits in items], min_similarity)
        if margin is not None:
            floor = self.background([(query, [h.passage_id for h in hits[BACKGROUND_FROM:]]) for query, hits in items])
            for query, _ in items:
                if floor[query.id] is not None:
                    cosine = self.similarities(query, chosen[query.id])
                    chosen[query.id] = {pid: r for pid, r in chosen[query.id].items()
                                        if cosine[pid] - floor[query.id] >= margin}
        return {query.id: [expansion_query(query, pid, r.sentence, r.start, r.end)
                           for pid, r in chosen[query.id].items()] for query, _ in items}


def fuse_rounds(first: Sequence[Hit], seconds: Sequence[Sequence[Hit]], weight: float, k: int,
                exclude: str | None = None) -> list[Hit]:
    """Weighted reciprocal rank fusion of the first round and the expansion lists (module docstring): the
    top ``k``, ``exclude`` (the original query's passage) left out. Written by hand: Pyserini's RRF (what
    ``--fusion rrf`` uses) weighs every run alike, and the second round's weight is chosen on dev."""
    scores: dict[str, float] = {}
    first_rank: dict[str, int] = {}
    for rank, hit in enumerate(first[:k], start=1):
        scores[hit.passage_id] = 1.0 / (RRF_K + rank)
        first_rank[hit.passage_id] = rank
    if seconds and weight:
        share = weight / len(seconds)
        for hits in seconds:
            for rank, hit in enumerate(hits[:k], start=1):
                if hit.passage_id != exclude:
                    scores[hit.passage_id] = scores.get(hit.passage_id, 0.0) + share / (RRF_K + rank)
    ordered = sorted(scores, key=lambda pid: (-scores[pid], first_rank.get(pid, math.inf), pid))
    return [Hit(pid, scores[pid]) for pid in ordered[:k] if pid != exclude]


def expansion_list(expansion: Query, hits: Sequence[Hit]) -> list[Hit]:
    """Expansion ``expansion``'s list for the fusion: its own passage first (the passage its mention is in,
    which the retriever left out of its hits), then its hits."""
    return [Hit(expansion.passage_id, math.inf), *(h for h in hits if h.passage_id != expansion.passage_id)]


def second_round(retriever: Any, first: Sequence[tuple[Query, list[Hit]]], expansions: Mapping[str, list[Query]],
                 options: ExpansionOptions, k: int, calibration: HeadCalibration | None = None
                 ) -> list[tuple[Query, list[Hit]]]:
    """Each query's first-round hits fused with the hits of its expansion queries (searched together, with
    ``retriever``, to depth ``k``); ``N = 0`` (or no expansion) leaves a query's first round as it is.
    ``calibration`` (``--expand-order calibrated``): the head is the first round's top ordered by it
    (:func:`calibrated_head`)."""
    # Expansions not searched have lists of their own passage alone (nothing below it would be read or shown).
    found: dict[str, list[Hit]] = {x.id: [] for query, _ in first for x in expansions.get(query.id, [])}
    flat = [x for query, hits in first if needs_search(options, hits, k) for x in expansions.get(query.id, [])]
    if flat:
        found.update((x.id, hits) for x, hits in retriever.search(flat, k))
    fused = []
    for query, hits in first:
        mine = expansions.get(query.id, [])
        if options.expand == 0 or not mine:
            fused.append((query, list(hits[:k])))
            continue
        depth = options.reciprocal if _in_collection(retriever, query.passage_id) else 0
        lists = [expansion_list(x, found[x.id])[:options.list_depth or None] for x in mine
                 if finds_again(query, found[x.id], depth)]
        if not lists:
            fused.append((query, list(hits[:k])))
            continue
        top = None if calibration is None else calibrated_head(hits, {found[0].passage_id for found in lists},
                                                                calibration, options.head, query.passage_id)
        fused.append((query, head_and_tail(hits, lists, options.weight, k, query.passage_id, options.head, top)))
    return fused


def calibrated_head(first: Sequence[Hit], kept: set[str], calibration: HeadCalibration, head: int,
                    exclude: str | None) -> list[Hit]:
    """The first round's top ``head`` passages ordered by ``calibration`` (each scored by its posterior, given its
    rank and whether its mention was kept: ``kept``, the passages that gave an expansion), or in the first round's
    order where the calibration does not apply (search/calibration.py)."""
    top = [hit for hit in first if hit.passage_id != exclude][:head]
    return [Hit(top[i].passage_id, score) for i, score in calibration.order([h.passage_id in kept for h in top])]


def head_and_tail(first: Sequence[Hit], lists: Sequence[Sequence[Hit]], weight: float, k: int, exclude: str | None,
                  head: int, top: Sequence[Hit] | None = None) -> list[Hit]:
    """:func:`fuse_rounds` of the lists, except that its top ``head`` ranks are those of the fusion of the lists' own
    passages alone (their first hits), in that order (0: the fusion of the lists), or ``top`` where it is given.
    The head keeps its scores there, raised by one constant where needed to stay above the tail's, so that the
    scores still descend with the ranks (trec_eval orders a run by its scores)."""
    fused = fuse_rounds(first, lists, weight, k, exclude)
    if not head:
        return fused
    if top is None:
        top = fuse_rounds(first, [hits[:1] for hits in lists], weight, k, exclude)[:head]
    seen = {hit.passage_id for hit in top}
    tail = [hit for hit in fused if hit.passage_id not in seen][:max(k - len(top), 0)]
    lift = max(0.0, tail[0].score - top[-1].score + 1e-6) if top and tail else 0.0  # a run keeps 6 decimals
    return [*(Hit(hit.passage_id, hit.score + lift) for hit in top), *tail]


def needs_search(options: ExpansionOptions, hits: Sequence[Hit], k: int) -> bool:
    """Whether the expansions of a query whose first round found ``hits`` are searched, for a run of depth ``k``:
    for lists deeper than their own passage, unless the head fills the run (``head ≥ k`` over a first round of
    ``k`` passages: no rank is left for the searches' passages); and for the reciprocal test."""
    if options.reciprocal > 0:
        return True
    return options.list_depth != 1 and not (options.head >= k and len(hits) >= k)


def _in_collection(retriever: Any, passage_id: str) -> bool:
    """Whether the query's passage is in the collection (an ad hoc query's, or that of a queries file from
    elsewhere, is not: it cannot be found again, so the reciprocal test does not apply to it)."""
    if not passage_id:
        return False
    try:
        retriever.passage(passage_id)
    except InputError:
        return False
    return True


def finds_again(query: Query, hits: Sequence[Hit], depth: int) -> bool:
    """The reciprocal test: an expansion's ``hits`` rank the original ``query``'s passage in the top
    ``depth`` (0: no test)."""
    return depth == 0 or any(hit.passage_id == query.passage_id for hit in hits[:depth])
