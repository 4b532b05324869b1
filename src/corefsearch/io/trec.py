"""TREC run and qrels files, written with trec_eval's tie order and read back with line-numbered errors."""

from __future__ import annotations

import array
import math
import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from corefsearch.base.errors import InputError
from corefsearch.io.read import text_lines
from corefsearch.io.write import atomic_file

# --- TREC files -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRow:
    qid: str
    doc_id: str
    rank: int
    score: float
    tag: str


def trec_eval_scores(scores: Iterable[float]) -> list[float]:
    """The scores as trec_eval compares them: in a C ``float`` (``TEXT_RESULTS.sim`` in trec_eval's
    ``trec_format.h``, which pytrec_eval fills too), so scores equal in single precision tie.
    (``array('f')`` makes the same C conversion, nearest float, infinity beyond the range.)"""
    return array.array("f", scores).tolist()


def trec_eval_score(score: float) -> float:
    """One score as trec_eval compares it (see ``trec_eval_scores``)."""
    return trec_eval_scores((score,))[0]


def trec_eval_order(scores: Mapping[str, float]) -> list[str]:
    """Doc ids best first in trec_eval's order: score descending, ties by doc id descending.

    trec_eval ignores the rank column and sorts each query's results itself (``comp_sim_docno``
    in ``form_res_rels.c``: ``sim`` descending, then ``strcmp(docno2, docno1)``); Python's string
    order is strcmp's on UTF-8 bytes. pytrec_eval runs the same code.
    """
    as_read = dict(zip(scores, trec_eval_scores(scores.values()), strict=True))
    return sorted(as_read, key=lambda doc: (as_read[doc], doc), reverse=True)


# The score column of a run: 6 decimals. Written by hand below (not Python's float formatting)
# where a tied score is lowered by whole steps of the last decimal.
_SCORE_DECIMALS = 6


def _float_below(value: float) -> float:
    """The next C ``float`` below ``value`` (itself a C float)."""
    if value == math.inf:
        return float(struct.unpack("f", struct.pack("I", 0x7F7FFFFF))[0])  # the largest float
    if value == 0.0:
        return -float(struct.unpack("f", struct.pack("I", 1))[0])  # the smallest negative one
    bits = struct.unpack("I", struct.pack("f", value))[0]
    return float(struct.unpack("f", struct.pack("I", bits - 1 if value > 0 else bits + 1))[0])


def _decimal_text(steps: int) -> str:
    """``steps`` × 10⁻⁶ written with 6 decimals, exactly."""
    whole, part = divmod(abs(steps), 10**_SCORE_DECIMALS)
    return f"{'-' if steps < 0 else ''}{whole}.{part:0{_SCORE_DECIMALS}d}"


def _score_below(limit: float) -> str:
    """The largest 6-decimal score that trec_eval reads as less than ``limit`` (a C float)."""
    from fractions import Fraction

    # every decimal at or below the float under `limit` reads as at most that float ...
    steps = math.floor(Fraction(_float_below(limit)) * 10**_SCORE_DECIMALS)
    # ... and a few just above it may still read as less than `limit` (a float step spans
    # several decimal steps above 8): take the closest to the original score
    while trec_eval_score((steps + 1) / 10**_SCORE_DECIMALS) < limit:
        steps += 1
    return _decimal_text(steps)


def _query_lines(rows: list[RunRow]) -> Iterator[str]:
    """One query's run lines in trec_eval's order with ranks 1..n and no two scores that tie for trec_eval.

    Anserini does the same to its BM25 runs (``ScoreTiesAdjusterReranker``): ties are ordered,
    then each score that still equals the one above it (as trec_eval reads it) is lowered by
    the least step that separates them. Tools that break ties otherwise (ir-measures' RR@k sorts
    tied doc ids ascending) then see the same ranking as trec_eval, and trec_eval's ranking,
    hence every metric, is the one of the scores as given.
    """
    texts = [f"{row.score:.{_SCORE_DECIMALS}f}" for row in rows]
    as_read = trec_eval_scores(float(text) for text in texts)
    if len({row.doc_id for row in rows}) != len(rows):
        twice = next(row.doc_id for i, row in enumerate(rows) if any(r.doc_id == row.doc_id for r in rows[:i]))
        raise ValueError(f"query {rows[0].qid}: passage {twice} would be written twice (trec_eval refuses that)")
    # trec_eval_order of the scores as written
    order = sorted(range(len(rows)), key=lambda i: (as_read[i], rows[i].doc_id), reverse=True)
    above = math.inf  # the score above, as trec_eval reads it
    for rank, i in enumerate(order, start=1):
        row, text, value = rows[i], texts[i], as_read[i]
        if value >= above:
            text = _score_below(above)
            value = trec_eval_score(float(text))
        above = value
        yield f"{row.qid} Q0 {row.doc_id} {rank} {text} {row.tag}\n"


def write_run(path: Path, rows: Iterable[RunRow]) -> int:
    """Write a TREC run file ``qid Q0 doc_id rank score tag`` atomically; return the line count.

    Each query's rows must come together; they are written in trec_eval's order of their
    scores (``trec_eval_order`` of the 6-decimal scores) with ranks 1..n (the given ranks and
    order are not used), and scores that tie for trec_eval are separated by the least step
    (see ``_query_lines``), so every evaluation tool ranks the file as trec_eval does. A score
    that is not a finite number is an ``InputError`` (trec_eval refuses the file).
    """
    count = 0
    done: set[str] = set()
    with atomic_file(path) as handle:
        group: list[RunRow] = []

        def flush() -> None:
            nonlocal count
            if group:
                handle.writelines(_query_lines(group))
                count += len(group)
                done.add(group[0].qid)
                group.clear()

        for row in rows:
            if not math.isfinite(row.score):
                raise InputError(f"query {row.qid}: passage {row.doc_id} has the score {row.score}, which "
                                 "trec_eval refuses; the model that scored it is broken (retrain or reload it)")
            if group and row.qid != group[0].qid:
                flush()
            if row.qid in done:
                raise ValueError(f"query {row.qid}: its run rows must come together")
            group.append(row)
        flush()
    return count


def _trec_lines(path: Path, layout: str) -> Iterator[tuple[int, list[str]]]:
    """``(line_number, columns)`` of a whitespace-separated TREC file with the given column layout."""
    expected = len(layout.split())
    for line_number, line in text_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != expected:
            raise InputError(f"{path}:{line_number}: expected {expected} columns '{layout}', found {len(parts)}")
        yield line_number, parts


def read_run(path: Path) -> dict[str, dict[str, float]]:
    """Read a TREC run into ``{qid: {doc_id: score}}`` (the shape ir-measures and pytrec_eval take).

    Refused, as trec_eval refuses them: a score that is not a finite number and a passage listed
    twice for one query. A run without results is an error too (there is nothing to evaluate).
    """
    run: dict[str, dict[str, float]] = {}
    for line_number, (qid, _, doc_id, rank, score, _tag) in _trec_lines(path, "qid Q0 doc_id rank score tag"):
        try:
            int(rank)
            value = float(score)
        except ValueError:
            raise InputError(f"{path}:{line_number}: rank must be an integer and score a number") from None
        if not math.isfinite(value):
            raise InputError(f"{path}:{line_number}: score {score} is not a finite number")
        results = run.setdefault(qid, {})
        if doc_id in results:
            raise InputError(f"{path}:{line_number}: passage {doc_id} is listed twice for query {qid}")
        results[doc_id] = value
    if not run:
        raise InputError(f"{path}: holds no results (an empty run); write a run with `corefsearch search`")
    return run


def write_qrels(path: Path, qrels: Iterable[tuple[str, str, int]]) -> int:
    """Write TREC qrels ``qid 0 doc_id relevance`` atomically."""
    count = 0
    with atomic_file(path) as handle:
        for qid, doc_id, relevance in qrels:
            handle.write(f"{qid} 0 {doc_id} {relevance}\n")
            count += 1
    return count


_INTEGER = re.compile(r"[+-]?[0-9]+")


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Read TREC qrels into ``{qid: {doc_id: relevance}}``; relevance −1 marks an unjudged pair.

    Relevance is any integer, as for trec_eval (0 and below: not relevant; −1: unjudged for
    infAP); "1.5" or "yes" is refused, as is a pair judged twice with different values.
    """
    qrels: dict[str, dict[str, int]] = {}
    for line_number, (qid, _, doc_id, relevance) in _trec_lines(path, "qid 0 doc_id relevance"):
        if not _INTEGER.fullmatch(relevance):
            raise InputError(f"{path}:{line_number}: relevance must be an integer, got {relevance!r}")
        value = int(relevance)
        judged = qrels.setdefault(qid, {})
        if judged.get(doc_id, value) != value:
            raise InputError(f"{path}:{line_number}: passage {doc_id} of query {qid} is judged twice, "
                             f"{judged[doc_id]} and {value}")
        judged[doc_id] = value
    return qrels


