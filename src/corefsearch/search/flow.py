"""One query flow: retrieve → re-rank → second round → spans, for the queries of a file (``search``)
or for one query (``query``, ``serve``), with its options checked once, here (:func:`check_flow`).

Both paths run the same stages in the same order, to the same depths: the first round is searched to
``max(k, rerank_k)`` (deeper for the second round's background, ``ExpansionOptions.first_depth``), its
top ``rerank_k`` re-ranked by the reader (its spans kept), the second round fused to ``k``
(``corefsearch.search.expansion``), the list cut to ``k``. A file's queries are searched together
(``Retriever.search``) and read in blocks of ``--rerank-batch-queries`` (or on a Ray cluster); one
query is searched with its own BM25 string (``Retriever.search_one``). The answer as a cluster is the
engine's last step over a flow's output (``SearchEngine``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.progress import track
from corefsearch.base.schema import Hit, Query
from corefsearch.distributed.reranking import rerank_on_ray
from corefsearch.reader.rerank import ReaderOptions, check_rerank_k, rerank_hits, rerank_many
from corefsearch.search.candidates import describe_candidates
from corefsearch.search.expansion import ExpansionOptions, from_spans, second_round
from corefsearch.search.retriever import Retriever


def check_k(k: object) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"--k must be at least 1, got {k}")


def check_flow(k: int, rerank_k: int, rounds: int, *, has_reader: bool, expansion: ExpansionOptions | None = None,
               has_mention_encoder: bool = False, cluster: bool = False) -> None:
    """The one check of a flow's options: depth ``k``; ``rerank_k`` (0: no re-ranking; more needs a reader);
    ``rounds`` (2 needs the reader's spans or a mention encoder); ``cluster`` (needs a mention encoder)."""
    check_k(k)
    check_rerank_k(rerank_k, has_reader=has_reader)
    if isinstance(rounds, bool) or rounds not in (1, 2):
        raise InputError(f"rounds must be 1 or 2, got {rounds!r}")
    if rounds == 2:
        source = (expansion or ExpansionOptions()).source_for(rerank_k > 0)
        if source == "reader" and not rerank_k:
            raise InputError("a second round from the reader's spans needs re-ranking (rerank_k > 0)")
        if source == "encoder" and not has_mention_encoder:
            raise InputError("without the reader's spans, the second round marks mentions with a mention encoder: "
                             "open the engine with --mention-encoder DIR, or re-rank (rerank_k > 0) with a reader")
    if cluster and not has_mention_encoder:
        raise InputError("a cluster answer clusters the mentions found with a mention encoder: open the engine "
                         "with --mention-encoder DIR (from `corefsearch train clusterer`)")


@dataclass
class Flowed:
    """One query's answer: its ranked ``hits`` and the reader's hits (``read``, with their spans)."""

    query: Query
    hits: list[Hit]
    read: list[Any] = field(default_factory=list)
    expansions: list[Query] | None = None  # the second round's expansion queries

    @property
    def spans(self) -> dict[str, tuple[int, int]]:
        return {hit.passage_id: (hit.start, hit.end) for hit in self.read}


@dataclass
class FlowTimes:
    """What a flow over a file records: seconds reading, Ray workers, second-round seconds and expansions."""

    reading: float | None = None
    workers: int | None = None
    second_round: float | None = None
    expansions: int = 0
    queries_without: int = 0  # queries whose top passages gave no expansion: their second round is their first
    passages_without: int = 0  # top passages without a candidate (encoder) or a non-empty span (reader)
    candidates: dict[str, Any] = field(default_factory=dict)  # the candidate source (search.candidates)


class QueryFlow:
    """The stages over an opened ``retriever``: a ``reader`` (its options, the loaded reader or, with
    ``ray``, its configuration alone), a second round (``expansion``; ``expander`` gives the mention
    encoder's :class:`~corefsearch.search.expansion.EncoderExpansion` when first needed)."""

    def __init__(self, retriever: Retriever, reader: ReaderOptions | None = None, loaded_reader: Any = None,
                 reader_config: Any = None, expansion: ExpansionOptions | None = None,
                 expander: Callable[[], Any] | None = None, ray: Any = None) -> None:
        self.retriever = retriever
        self.reader = reader
        self.loaded_reader = loaded_reader
        self.reader_config = reader_config if reader_config is not None else getattr(loaded_reader, "config", None)
        self.expansion = expansion or ExpansionOptions()
        self.expander = expander
        self.ray = ray
        self.times = FlowTimes()

    def fusion(self) -> tuple[str, bool]:
        """The re-ranking fusion and whether the reader's folder chose it."""
        assert self.reader is not None and self.reader_config is not None
        return self.reader.fusion_for(self.reader_config)

    def depth(self, k: int, rerank_k: int, rounds: int) -> int:
        """How deep the first round is searched."""
        depth = max(k, rerank_k)
        return self.expansion.first_depth(depth, rerank_k > 0) if rounds == 2 else depth

    # --- the stages ---

    def rerank(self, retrieved: list[tuple[Query, list[Hit]]], rerank_k: int, progress: bool = False
               ) -> list[tuple[list[Hit], list[Any]]]:
        """Each query's top ``rerank_k`` re-ranked: ``(ranked hits, the reader's hits)``, in order."""
        texts = {passage_id: self.retriever.passage(passage_id)
                 for passage_id in sorted({h.passage_id for _, hits in retrieved for h in hits[:rerank_k]})}
        started = time.perf_counter()
        fusion = self.fusion()[0]
        if self.ray is not None:
            assert self.reader is not None
            pairs, self.times.workers = rerank_on_ray(replace_rerank_k(self.reader, rerank_k), retrieved, texts,
                                                      fusion, self.ray)
        elif len(retrieved) == 1 and not progress:
            query, hits = retrieved[0]
            pairs = [rerank_hits(self.loaded_reader, query, hits, texts, rerank_k, fusion)]
        else:
            assert self.reader is not None
            size = self.reader.batch_queries  # queries whose windows are read together
            pairs = [pair for start in track(range(0, len(retrieved), size), "Re-ranking",
                                             total=-(-len(retrieved) // size))
                     for pair in rerank_many(self.loaded_reader, retrieved[start:start + size], texts, rerank_k,
                                             fusion)]
        self.times.reading = time.perf_counter() - started
        return pairs

    def second_round(self, answers: list[Flowed], k: int, rerank_k: int) -> None:
        """Each answer's hits fused with those of the mentions its first round found (in place)."""
        started = time.perf_counter()
        n = self.expansion.expand
        first = [(answer.query, answer.hits) for answer in answers]
        if self.expansion.source_for(rerank_k > 0) == "reader":
            spans_of = {answer.query.id: answer.spans for answer in answers}
            texts = {h.passage_id: self.retriever.passage(h.passage_id)["text"] for query, hits in first
                     for h in hits[:n] if h.passage_id in spans_of[query.id]}
            expansions = {query.id: from_spans(query, hits, spans_of[query.id], texts, n) for query, hits in first}
            self.times.passages_without = sum(1 for query, hits in first for h in hits[:n]
                                              if not _marked(spans_of[query.id].get(h.passage_id)))
            self.times.candidates = {"candidates": "reader"}
        else:
            assert self.expander is not None  # check_flow
            expander = self.expander()
            before = expander.empty
            expansions = expander.expansions(first, n, self.expansion.min_similarity, self.expansion.margin)
            self.times.passages_without = expander.empty - before
            self.times.candidates = describe_candidates(expander.candidates)
        self.times.queries_without = sum(1 for query, hits in first if hits[:n] and n and not expansions[query.id])
        fused = second_round(self.retriever, first, expansions, self.expansion, k)
        for answer, (_, hits) in zip(answers, fused, strict=True):
            answer.hits = hits
            answer.expansions = expansions[answer.query.id]
        self.times.second_round = time.perf_counter() - started
        self.times.expansions = sum(len(v) for v in expansions.values())

    def finish(self, retrieved: list[tuple[Query, list[Hit]]], k: int, rerank_k: int, rounds: int,
               progress: bool) -> list[Flowed]:
        """Re-ranking, the second round and the cut to ``k`` of a first round."""
        answers = [Flowed(query, hits) for query, hits in retrieved]
        if rerank_k:
            for answer, (ranked, read) in zip(answers, self.rerank(retrieved, rerank_k, progress), strict=True):
                answer.hits, answer.read = ranked, read
        if rounds == 2:
            self.second_round(answers, k, rerank_k)
        for answer in answers:
            answer.hits = answer.hits[:k]
        return answers

    # --- the two ways in ---

    def run(self, queries: Sequence[Query], k: int, rerank_k: int, rounds: int) -> list[Flowed]:
        """The queries of a file: searched together, read in blocks with a progress bar."""
        retrieved = list(self.retriever.search(queries, self.depth(k, rerank_k, rounds)))
        return self.finish(retrieved, k, rerank_k, rounds, progress=True)

    def answer(self, query: Query, k: int, rerank_k: int, rounds: int, query_string: str | None = None) -> Flowed:
        """One query (``query_string``: its BM25 string, formulated by the caller)."""
        depth = self.depth(k, rerank_k, rounds)
        if query_string is not None:
            hits = self.retriever.search_one(query, depth, query_string=query_string)  # type: ignore[call-arg]
        else:
            hits = self.retriever.search_one(query, depth)
        return self.finish([(query, hits)], k, rerank_k, rounds, progress=False)[0]


def _marked(span: tuple[int, int] | None) -> bool:
    return span is not None and span[0] < span[1]


def replace_rerank_k(reader: ReaderOptions, rerank_k: int) -> ReaderOptions:
    from dataclasses import replace

    return reader if reader.rerank_k == rerank_k else replace(reader, rerank_k=rerank_k)
