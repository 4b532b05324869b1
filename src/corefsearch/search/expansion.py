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
   L = 0 (all), H = 10, R = 0, N = 10, w = 4 and the cosine 0.8, the defaults (bench/RESULTS.md, "The head and
   the tail").

``N = 0`` leaves the first round as it is. The run's metadata records the expansion
(``ExpansionOptions.describe``; :meth:`ExpansionOptions.from_metadata` reads it back).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.models import check_model_folder, resolve_device
from corefsearch.base.nlp import head_lemmas
from corefsearch.base.schema import Hit, Query
from corefsearch.cluster.inputs import MentionRecord
from corefsearch.detect.detectors import check_detector

CANDIDATES = ("detected", "gold", "reader")
# Chosen on ECB+ dev (bench/second_round.py; bench/RESULTS.md, "The head and the tail" for the shape, "Detected
# candidates" for the gate): the top 10 passages' detected mentions that pass the cosine 0.9 are searched; the top
# 10 ranks are the first round's with those passages moved up (the lists' own passages alone), the ranks below come
# from the whole lists. w 2 and 4 tie on dev MRR@10 with detected candidates; 4 has the better R@100.
DEFAULT_EXPAND = 10
DEFAULT_WEIGHT = 4.0
DEFAULT_MIN_SIMILARITY = 0.9
DEFAULT_RECIPROCAL = 0
DEFAULT_MARGIN: float | None = None
DEFAULT_LIST_DEPTH = 0
DEFAULT_HEAD = 10
# The margin test's background: the first round's passages ranked 21st to 100th, which mostly hold other
# events; with the test on, the first round is searched at least this deep.
BACKGROUND_FROM = 20
BACKGROUND_DEPTH = 100
RRF_K = 60  # Cormack et al. (2009), and Pyserini's default


@dataclass
class ExpansionOptions:
    """``--rounds``, ``--expand N``, ``--expand-weight W``, ``--expand-from reader|encoder``,
    ``--mention-encoder DIR`` (for ``encoder``), ``--expand-min-similarity``, ``--expand-reciprocal R``,
    ``--expand-margin δ``, ``--expand-list-depth L`` and ``--expand-head H``."""

    rounds: int = field(default=1, metadata={"help": (
        "2: a second round from the coreferring mentions the first found in its top --expand passages (the reader's "
        "spans, or the mention encoder's nearest mentions), fused with the first.")})
    expand: int = field(default=DEFAULT_EXPAND, metadata={"help": (
        "With --rounds 2: the top N passages whose coreferring mentions are kept, moved up and (with "
        "--expand-list-depth 0 or > 1) searched again (default 10, chosen on dev).")})
    weight: float = field(default=DEFAULT_WEIGHT, metadata={"option": "--expand-weight", "help": (
        "With --rounds 2: the weight of the second round in the weighted RRF; the first weighs 1 (default 4, chosen "
        "on dev).")})
    # None: the reader's spans when there is a reader and no mention encoder, else detected (see candidates_for)
    candidates: str | None = field(default=None, metadata={"help": (
        "With --rounds 2 (and --cluster): where the coreferring mentions come from. detected (the default): a "
        "mention detector's mentions of the top passages, the mention encoder picking the nearest in each; gold: "
        "the dataset's annotated mentions (an upper bound, not available on unannotated text); reader: the "
        "reader's spans (the default with --reader and no --mention-encoder).")})
    detector: str | None = field(default=None, metadata={"help": (
        "With --candidates detected: heuristic or a detector folder (`train detector`), run on the top passages "
        "at query time (default: the dataset's stored predicted mentions from `corefsearch detect`, else "
        "heuristic).")})
    encoder: Path | None = field(default=None, metadata={"option": "--mention-encoder", "help": (
        "With --rounds 2 --candidates detected|gold: the mention encoder folder (`train clusterer`).")})
    # encoder source: a passage whose nearest mention is less similar to the query's (cosine) gives no expansion
    min_similarity: float | None = field(default=DEFAULT_MIN_SIMILARITY, metadata={
        "option": "--expand-min-similarity", "help": (
            "With --rounds 2 --candidates detected|gold: a passage whose nearest mention is less similar to the "
            "query mention (cosine) gives no expansion (default 0.9, chosen on dev).")})
    # an expansion whose own search does not rank the query's passage in its top R is dropped (0: none is)
    reciprocal: int = field(default=DEFAULT_RECIPROCAL, metadata={
        "option": "--expand-reciprocal", "cli": False, "help": (
        "With --rounds 2: an expansion counts only when its own search ranks the query's passage in its top R (0: "
        "every expansion counts; default 0, chosen on dev). Queries whose passage is not in the collection (ad hoc "
        "ones) skip the test.")})
    # encoder source: an expansion mention must be this much more similar to the query's than any mention of the
    # first round's background passages (ranks 21 to 100) is (None: no such test)
    margin: float | None = field(default=DEFAULT_MARGIN, metadata={"option": "--expand-margin", "cli": False, "help": (
        "With --rounds 2 --expand-from encoder: an expansion mention counts only when its cosine to the query "
        "mention exceeds by this margin the highest of any mention in the first round's passages ranked 21st to "
        "100th (searched that deep): a gate set by each query's own background, not a fixed cosine.")})
    # how many passages of each expansion's list (its own passage first) the fusion reads (0: all of them)
    list_depth: int = field(default=DEFAULT_LIST_DEPTH, metadata={
        "option": "--expand-list-depth", "cli": False, "help": (
        "With --rounds 2: how many passages of each expansion's list the fusion reads, its own passage first (0: "
        "all, the default, chosen on dev; 1: the top passages whose mention corefers move up, and with "
        "--expand-reciprocal 0 nothing is searched).")})
    # the top H ranks from each list's own passage alone, the rest from the lists read to list_depth (0: no split)
    head: int = field(default=DEFAULT_HEAD, metadata={"option": "--expand-head", "cli": False, "help": (
        "With --rounds 2: the top H ranks come from the expansions' own passages alone (as --expand-list-depth 1 "
        "orders them), the ranks below from their searches (0: every rank from the searches; default 10, chosen on "
        "dev: the searches raise R@100 and leave MRR@10 as the moved-up passages give it).")})

    @property
    def active(self) -> bool:
        return self.rounds == 2

    def validate(self, has_reader: bool) -> None:
        if self.rounds not in (1, 2):
            raise InputError(f"--rounds must be 1 or 2, got {self.rounds}")
        if self.expand < 0:
            raise InputError(f"--expand must not be negative, got {self.expand}")
        if not (self.weight >= 0 and math.isfinite(self.weight)):
            raise InputError(f"--expand-weight must be a number ≥ 0, got {self.weight}")
        if self.reciprocal < 0:
            raise InputError(f"--expand-reciprocal must not be negative (0 turns the test off), got {self.reciprocal}")
        if self.min_similarity is not None and not -1 <= self.min_similarity <= 1:
            raise InputError(f"--expand-min-similarity is a cosine similarity in [-1, 1], got {self.min_similarity}")
        if self.list_depth < 0:
            raise InputError(f"--expand-list-depth must not be negative (0 reads every passage of each list), "
                             f"got {self.list_depth}")
        if self.head < 0:
            raise InputError(f"--expand-head must not be negative (0: no split), got {self.head}")
        if self.margin is not None and not -2 <= self.margin <= 2:
            raise InputError(f"--expand-margin is a difference of cosine similarities, in [-2, 2], got {self.margin}")
        if self.candidates is not None and self.candidates not in CANDIDATES:
            raise InputError(f"--candidates must be one of {', '.join(CANDIDATES)}, got {self.candidates!r}")
        if self.detector is not None and self.candidates not in (None, "detected"):
            raise InputError(f"--detector finds the candidates of --candidates detected, not {self.candidates}: "
                             "leave it out")
        if not self.active:
            return
        candidates = self.candidates_for(has_reader)
        if candidates == "reader" and not has_reader:
            raise InputError("--candidates reader takes the spans of --reader: add --reader MODEL_DIR, or use "
                             "--candidates detected --mention-encoder DIR")
        if candidates != "reader" and self.encoder is None:
            raise InputError(f"--rounds 2 with --candidates {candidates}: the mention encoder picks the coreferring "
                             "mention among the candidates; add --mention-encoder DIR (from `corefsearch train "
                             "clusterer`), or --reader MODEL_DIR --candidates reader")
        if candidates != "reader":
            check_model_folder(self.encoder, "--mention-encoder")
        if self.detector is not None:
            check_detector(self.detector, option="--detector")
        if candidates == "reader" and self.list_depth == 1 and self.expand:
            import warnings

            warnings.warn("--candidates reader with --expand-list-depth 1 leaves the first round as it is: every top "
                          "passage the reader read has a span, so all of them move up together. Give "
                          "--expand-list-depth 0 (or more than 1) to fuse the expansions' searches", stacklevel=2)

    def candidates_for(self, has_reader: bool) -> str:
        """The candidates a run takes: ``--candidates``, else the reader's spans when there is a reader and no
        mention encoder, else detected ones (never the annotations unless asked)."""
        return self.candidates or ("reader" if has_reader and self.encoder is None else "detected")

    def source_for(self, has_reader: bool) -> str:
        """Who marks the mentions: the ``reader`` (its spans) or the mention ``encoder`` (among candidates)."""
        return "reader" if self.candidates_for(has_reader) == "reader" else "encoder"

    def first_depth(self, k: int, has_reader: bool) -> int:
        """How deep the first round of a second round is searched, for a run of depth ``k``: to the margin
        test's background."""
        if self.margin is not None and self.source_for(has_reader) == "encoder":
            return max(k, BACKGROUND_DEPTH)
        return k

    def describe(self, has_reader: bool) -> dict[str, Any]:
        """The run metadata's ``expansion``."""
        source = self.source_for(has_reader)
        return {"rounds": self.rounds, "expand": self.expand, "source": source,
                "candidates": self.candidates_for(has_reader),
                "weights": {"first": 1.0, "second": self.weight}, "rrf_k": RRF_K,
                "encoder": str(Path(self.encoder).resolve()) if source == "encoder" and self.encoder else None,
                "min_similarity": self.min_similarity if source == "encoder" else None,
                "margin": self.margin if source == "encoder" else None,
                "background_ranks": [BACKGROUND_FROM + 1, BACKGROUND_DEPTH] if source == "encoder" else None,
                "reciprocal": self.reciprocal, "list_depth": self.list_depth, "head": self.head}

    @classmethod
    def from_metadata(cls, record: Mapping[str, Any]) -> ExpansionOptions:
        """The options a run's metadata ``expansion`` records."""
        similarity, margin = record.get("min_similarity"), record.get("margin")
        return cls(rounds=int(record["rounds"]), expand=int(record["expand"]),
                   weight=float(record["weights"]["second"]),
                   # runs written before --candidates: the encoder's candidates were the annotated mentions
                   candidates=record.get("candidates") or ("reader" if record["source"] == "reader" else "gold"),
                   encoder=Path(record["encoder"]) if record.get("encoder") else None,
                   min_similarity=float(similarity) if similarity is not None else None,
                   margin=float(margin) if margin is not None else None,  # None also in runs written before it
                   # runs written before the test existed had none
                   reciprocal=int(record.get("reciprocal", 0)),
                   # runs written before the option fused every passage of each list
                   list_depth=int(record.get("list_depth", 0)),
                   head=int(record.get("head", 0)))  # runs written before it had no split


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
        passage); the query mention is encoded once."""
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
                 options: ExpansionOptions, k: int) -> list[tuple[Query, list[Hit]]]:
    """Each query's first-round hits fused with the hits of its expansion queries (searched together, with
    ``retriever``, to depth ``k``); ``N = 0`` (or no expansion) leaves a query's first round as it is."""
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
        fused.append((query, head_and_tail(hits, lists, options.weight, k, query.passage_id, options.head) if lists
                      else list(hits[:k])))
    return fused


def head_and_tail(first: Sequence[Hit], lists: Sequence[Sequence[Hit]], weight: float, k: int, exclude: str | None,
                  head: int) -> list[Hit]:
    """:func:`fuse_rounds` of the lists, except that its top ``head`` ranks are those of the fusion of the lists' own
    passages alone (their first hits), in that order (0: the fusion of the lists). The head keeps its scores there,
    raised by one constant where needed to stay above the tail's, so that the scores still descend with the ranks
    (trec_eval orders a run by its scores)."""
    fused = fuse_rounds(first, lists, weight, k, exclude)
    if not head:
        return fused
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


# --- the answer as a cluster (query --cluster, serve) ---------------------------------------------------------

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
