"""One query flow: retrieve → re-rank → second round → spans, for the queries of a file (``search``)
or for one query (``query``, ``serve``), over what an engine opened (``corefsearch.search.engine``) for
one set of options, checked once at the door (``corefsearch.search.options``).

Both paths run the same stages in the same order, to the same depths: the first round is searched to
``max(k, rerank_k)`` (deeper for the second round's background, ``ExpansionOptions.first_depth``), its
top ``rerank_k`` re-ranked by the reader (its spans kept), the second round fused to ``k``
(``corefsearch.search.second_round``), the list cut to ``k``. A file's queries are searched together
(``Retriever.search``) and read in blocks of ``--rerank-batch-queries`` (or on a Ray cluster); one
query is searched with its own BM25 string (``Retriever.search_one``). The answer as a cluster is the
engine's last step over a flow's output (``corefsearch.search.cluster_answer``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.progress import track
from corefsearch.base.schema import Hit, Query
from corefsearch.distributed.reranking import rerank_on_ray
from corefsearch.reader.rerank import ReaderOptions, rerank_hits, rerank_many
from corefsearch.search.calibration import HeadCalibration
from corefsearch.search.candidates import describe_candidates
from corefsearch.search.options import ExpansionOptions, SearchOptions
from corefsearch.search.retriever import Retriever
from corefsearch.search.second_round import from_spans, second_round


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
    """The stages over an opened ``retriever`` for ``options``: the reader (loaded, or with ``--ray`` its
    ``reader_config`` alone), the second round (``expansion``: the options' resolved one; ``expander`` gives the
    mention encoder's :class:`~corefsearch.search.second_round.EncoderExpansion` when first needed)."""

    def __init__(self, retriever: Retriever, options: SearchOptions, loaded_reader: Any = None,
                 reader_config: Any = None, expansion: ExpansionOptions | None = None,
                 expander: Callable[[], Any] | None = None) -> None:
        self.retriever = retriever
        self.options = options
        self.reader: ReaderOptions | None = options.reader
        self.loaded_reader = loaded_reader
        self.reader_config = reader_config if reader_config is not None else getattr(loaded_reader, "config", None)
        self.expansion = expansion or options.second_round
        self.expander = expander
        self.ray = options.ray
        self.times = FlowTimes()
        self._calibration: HeadCalibration | None = None

    def calibration(self) -> HeadCalibration | None:
        """``--expand-order calibrated``'s model (read once), else None."""
        if self.expansion.order != "calibrated":
            return None
        if self._calibration is None:
            if self.expansion.calibration is None:
                raise InputError("--expand-order calibrated needs a calibration file: give --expand-calibration FILE "
                                 "(from `corefsearch calibrate INDEX`)")
            self._calibration = HeadCalibration.load(Path(self.expansion.calibration))
        return self._calibration

    def fusion(self) -> tuple[str, bool]:
        """The re-ranking fusion and whether the reader's folder chose it."""
        assert self.reader is not None and self.reader_config is not None
        return self.reader.fusion_for(self.reader_config)

    def depth(self, k: int, rerank_k: int, rounds: int) -> int:
        """How deep the first round is searched."""
        depth = max(k, rerank_k)
        return self.expansion.first_depth(depth) if rounds == 2 else depth

    # --- what ran ---

    def describe_reader(self) -> dict[str, Any]:
        """The reader: its folder, depth, head, markers, fusion (and who chose it), runtime and passes."""
        assert self.reader is not None and self.reader_config is not None
        fusion, from_model = self.fusion()
        return {"model": str(Path(self.reader.model).resolve()), "rerank_k": self.reader.rerank_k,
                "head": self.reader_config.head, "markers": self.reader_config.markers, "fusion": fusion,
                "fusion_from": "model" if from_model else "--rerank-fusion", "backend": self.reader.backend,
                "batch_queries": self.reader.batch_queries}

    def describe_answer(self, answered: Flowed) -> dict[str, Any] | None:
        """One question's second round: its options and expansion queries (None: one round)."""
        if answered.expansions is None:
            return None
        options = replace(self.expansion, rounds=2)
        calibration = self.calibration()
        record = {**options.describe(), **self.times.candidates,
                  **({"calibrated": calibration.describe()} if calibration is not None else {}),
                  "passages_without_candidates": self.times.passages_without, "queries": [
                      {"passage_id": x.passage_id, "mention": x.mention, "start": x.start, "end": x.end}
                      for x in answered.expansions]}
        if not answered.expansions:
            record["note"] = (f"no coreferring mention found in the top {options.expand} passages "
                              f"({self.times.passages_without} without a candidate): the answer is the first round's")
        return record

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
            reader = self.reader if self.reader.rerank_k == rerank_k else replace(self.reader, rerank_k=rerank_k)
            pairs, self.times.workers = rerank_on_ray(reader, retrieved, texts, fusion, self.ray)
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

    def second_round(self, answers: list[Flowed], k: int) -> None:
        """Each answer's hits fused with those of the mentions its first round found (in place)."""
        started = time.perf_counter()
        n = self.expansion.expand
        first = [(answer.query, answer.hits) for answer in answers]
        if self.expansion.source == "reader":
            spans_of = {answer.query.id: answer.spans for answer in answers}
            texts = {h.passage_id: self.retriever.passage(h.passage_id)["text"] for query, hits in first
                     for h in hits[:n] if h.passage_id in spans_of[query.id]}
            expansions = {query.id: from_spans(query, hits, spans_of[query.id], texts, n) for query, hits in first}
            self.times.passages_without = sum(1 for query, hits in first for h in hits[:n]
                                              if not _marked(spans_of[query.id].get(h.passage_id)))
            self.times.candidates = {"candidates": "reader"}
        else:
            assert self.expander is not None  # SearchOptions.check_question
            expander = self.expander()
            before = expander.empty
            expansions = expander.expansions(first, n, self.expansion.min_similarity, self.expansion.margin)
            self.times.passages_without = expander.empty - before
            self.times.candidates = describe_candidates(expander.candidates)
        self.times.queries_without = sum(1 for query, hits in first if hits[:n] and n and not expansions[query.id])
        fused = second_round(self.retriever, first, expansions, self.expansion, k, self.calibration())
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
            self.second_round(answers, k)
        for answer in answers:
            answer.hits = answer.hits[:k]
        return answers

    # --- the two ways in ---

    def run(self, queries: Sequence[Query]) -> list[Flowed]:
        """The queries of a file, at the options' depth: searched together, read in blocks with a progress bar."""
        k, rerank_k, rounds = self.options.k, self.options.rerank_k, self.options.rounds
        retrieved = list(self.retriever.search(queries, self.depth(k, rerank_k, rounds)))
        return self.finish(retrieved, k, rerank_k, rounds, progress=True)

    def answer(self, query: Query, k: int, rerank_k: int, rounds: int, query_string: str | None = None) -> Flowed:
        """One query (``query_string``: its BM25 string, formulated by the caller)."""
        hits = self.retriever.search_one(query, self.depth(k, rerank_k, rounds), query_string=query_string)
        return self.finish([(query, hits)], k, rerank_k, rounds, progress=False)[0]


def _marked(span: tuple[int, int] | None) -> bool:
    return span is not None and span[0] < span[1]
