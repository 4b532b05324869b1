"""Span metrics for a reader's answers: exact match (EM) and token F1, as in SQuAD v1.1.

``corefsearch search --reader`` writes ``RUN.spans.jsonl`` beside a run, one line per
re-ranked (query, passage): ``{"qid", "passage_id", "start", "end", "text", "score"}`` with
character offsets (``end`` exclusive) into the passage text of the dataset's ``passages.jsonl``.

Only pairs whose passage is relevant to the query in the qrels (relevance > 0) are scored.
The gold answers of a pair are the passage's mentions of the query's cluster. A predicted
span scores only against the gold mentions it overlaps (so the same words elsewhere in the
passage earn nothing): EM and F1 are each the maximum over those mentions, 0 without overlap.
The aggregate is the mean over scored pairs; a query's value is the mean over its pairs.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.schema import SPLITS, Passage, Query, SpanRecord
from corefsearch.datasets.dataset import Dataset
from corefsearch.evaluate.metrics import EM, F1, Qrels, Run
from corefsearch.io.read import read_jsonl

# field -> (accepted types, how an error names them)
_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "qid": ((str,), "a string"), "passage_id": ((str,), "a string"), "start": ((int,), "an integer"),
    "end": ((int,), "an integer"), "text": ((str,), "a string"), "score": ((int, float), "a number"),
}
_EXAMPLES = 5  # how many ids a warning names


@dataclass(frozen=True)
class SpanPrediction(SpanRecord):
    """One line of a spans file as read back (a :class:`~corefsearch.base.schema.SpanRecord`) with its
    1-based line number, for error messages."""

    line: int = 0


@dataclass
class SpanScores:
    """EM and F1 of one spans file, as fractions (not ×100).

    ``per_query`` holds ``{"EM": …, "F1": …}`` only for queries with at least one scored pair;
    ``n_pairs`` counts the scored (relevant) pairs the aggregates average over.
    """

    em: float
    f1: float
    n_pairs: int
    per_query: dict[str, dict[str, float]]
    warnings: list[str] = field(default_factory=list)

    @property
    def aggregate(self) -> dict[str, float]:
        return {EM: self.em, F1: self.f1}


# --- SQuAD v1.1 --------------------------------------------------------------------------------
# Written by hand after the official SQuAD v1.1 script (evaluate-v1.1.py: normalize_answer,
# f1_score, exact_match_score) so the numbers are comparable with reported reader results;
# no package ships that script as a library.

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse white space."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """Harmonic mean of token precision and recall over the normalised tokens (bag overlap)."""
    predicted = normalize_answer(prediction).split()
    expected = normalize_answer(gold).split()
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision = same / len(predicted)
    recall = same / len(expected)
    return 2 * precision * recall / (precision + recall)


# --- reading -----------------------------------------------------------------------------------


def _prediction(path: Path, line: int, record: dict[str, Any]) -> SpanPrediction:
    where = f"{path}:{line}"
    for key, (types, description) in _FIELDS.items():
        if key not in record:
            raise InputError(f"{where}: spans record lacks the field {key!r}")
        value = record[key]
        # bool is an int in Python but never a valid offset or score
        if isinstance(value, bool) or not isinstance(value, types):
            raise InputError(f"{where}: {key} must be {description}, got {value!r}")
    if not math.isfinite(record["score"]):  # 1e999 parses to inf
        raise InputError(f"{where}: score must be a finite number, got {record['score']!r}")
    start, end = record["start"], record["end"]
    if start < 0 or start > end:
        raise InputError(f"{where}: offsets [{start}, {end}) are not a span (need 0 <= start <= end)")
    return SpanPrediction(line=line, qid=record["qid"], passage_id=record["passage_id"], start=start, end=end,
                          text=record["text"], score=float(record["score"]))


def read_spans(path: Path) -> list[SpanPrediction]:
    """Read and check a spans JSONL file; a bad record is an ``InputError`` naming ``FILE:LINE``.

    A (qid, passage_id) pair may occur once: a second prediction for it would be ambiguous.
    """
    path = Path(path)
    predictions: list[SpanPrediction] = []
    seen: dict[tuple[str, str], int] = {}
    for line, record in read_jsonl(path):
        prediction = _prediction(path, line, record)
        pair = (prediction.qid, prediction.passage_id)
        if pair in seen:
            raise InputError(f"{path}:{line}: query {prediction.qid} and passage {prediction.passage_id} "
                             f"already have a span on line {seen[pair]}")
        seen[pair] = line
        predictions.append(prediction)
    return predictions


def _query_clusters(dataset: Dataset, qids: set[str]) -> dict[str, str]:
    """``{qid: cluster_id}`` for the wanted qids, streamed from every split's queries file present."""
    clusters: dict[str, str] = {}
    for split in SPLITS:
        path = dataset.queries_path(split)
        if not path.exists():
            continue
        for line, record in read_jsonl(path):
            if str(record.get("id")) not in qids:
                continue
            query = Query.from_json(record, where=f"{path}:{line}")
            clusters[query.id] = query.cluster_id
    return clusters


def _check_against_passage(path: Path, prediction: SpanPrediction, passage: Passage) -> None:
    where = f"{path}:{prediction.line}"
    if prediction.end > len(passage.text):
        raise InputError(f"{where}: offsets [{prediction.start}, {prediction.end}) do not fit passage "
                         f"{passage.id} of {len(passage.text)} characters")
    actual = passage.text[prediction.start:prediction.end]
    if actual != prediction.text:
        # offsets into another version of the passages: scoring them would be meaningless
        raise InputError(f"{where}: text {prediction.text!r} is not passage {passage.id}'s "
                         f"text[{prediction.start}:{prediction.end}] {actual!r}; were the spans made "
                         f"from another dataset?")


def _passages(dataset: Dataset, path: Path, predictions: Sequence[SpanPrediction],
              needed: set[str]) -> dict[str, Passage]:
    """Stream the dataset's passages once: check every prediction against its passage's text and
    keep only the ``needed`` passages (those of scored pairs). Unknown passage ids are errors."""
    by_passage: dict[str, list[SpanPrediction]] = {}
    for prediction in predictions:
        by_passage.setdefault(prediction.passage_id, []).append(prediction)
    kept: dict[str, Passage] = {}
    remaining = set(by_passage)
    if not remaining:
        return kept
    records = read_jsonl(dataset.passages_path)
    try:
        for line, record in records:
            passage_id = str(record.get("id"))
            if passage_id not in remaining:
                continue
            passage = Passage.from_json(record, where=f"{dataset.passages_path}:{line}")
            remaining.discard(passage_id)
            for prediction in by_passage[passage_id]:
                _check_against_passage(path, prediction, passage)
            if passage_id in needed:
                kept[passage_id] = passage
            if not remaining:
                break  # every passage the spans point to has been seen
    finally:
        records.close()
    if remaining:
        first = min((p for p in predictions if p.passage_id in remaining), key=lambda p: p.line)
        raise InputError(f"{path}:{first.line}: unknown passage id {first.passage_id!r} (not in "
                         f"{dataset.passages_path}; {len(remaining)} unknown in all)")
    return kept


def _overlaps(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    return a_start < b_end and b_start < a_end


def score_pair(prediction: SpanPrediction, passage: Passage, cluster_id: str) -> tuple[float, float]:
    """``(EM, F1)`` of one prediction: the best over the gold mentions of ``cluster_id`` in
    ``passage`` that its span overlaps; ``(0, 0)`` when it overlaps none."""
    em = f1 = 0.0
    for mention in passage.mentions:
        if mention.cluster_id != cluster_id:
            continue
        if not _overlaps(prediction.start, prediction.end, mention.start, mention.end):
            continue
        gold = passage.text[mention.start:mention.end]
        em = max(em, exact_match(prediction.text, gold))
        f1 = max(f1, token_f1(prediction.text, gold))
    return em, f1


def _examples(ids: Iterable[str]) -> str:
    shown = list(dict.fromkeys(ids))
    text = ", ".join(shown[:_EXAMPLES])
    return f"{text}, …" if len(shown) > _EXAMPLES else text


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def score_spans(spans_path: Path, dataset: Path | Dataset, qrels: Qrels, run: Run | None = None) -> SpanScores:
    """EM and F1 of the spans in ``spans_path`` over its relevant (qrels relevance > 0) pairs.

    ``dataset`` gives the passages (streamed; only those the spans point to are read) and the
    queries' clusters (every split's queries file present). With ``run``, spans for pairs the
    run does not hold are reported in ``warnings`` (they are still scored).

    Raises ``InputError`` (naming ``FILE:LINE``) for a malformed record, an unknown query or
    passage id, or a span whose offsets or text do not match its passage.
    """
    spans_path = Path(spans_path)
    dataset = dataset if isinstance(dataset, Dataset) else Dataset(Path(dataset))
    predictions = read_spans(spans_path)

    clusters = _query_clusters(dataset, {p.qid for p in predictions})
    unknown = [p for p in predictions if p.qid not in clusters]
    if unknown:
        raise InputError(f"{spans_path}:{unknown[0].line}: unknown query id {unknown[0].qid!r} (not in any "
                         f"queries file of {dataset.root}; {len({p.qid for p in unknown})} unknown in all)")

    scored = [p for p in predictions if qrels.get(p.qid, {}).get(p.passage_id, 0) > 0]
    passages = _passages(dataset, spans_path, predictions, {p.passage_id for p in scored})

    warnings: list[str] = []
    if not predictions:
        warnings.append(f"{spans_path} holds no spans")
    elif not scored:
        warnings.append(f"none of the {len(predictions)} spans in {spans_path} is for a relevant passage; "
                        f"EM and F1 are 0")
    if run is not None:
        outside = [p for p in predictions if p.passage_id not in (run.get(p.qid) or {})]
        if outside:
            warnings.append(f"{len(outside)} of {len(predictions)} spans are for (query, passage) pairs not "
                            f"in the run ({_examples(p.qid for p in outside)}); their relevant ones are scored")

    em_values: list[float] = []
    f1_values: list[float] = []
    by_query: dict[str, list[tuple[float, float]]] = {}
    no_gold: list[str] = []
    for prediction in scored:
        passage = passages[prediction.passage_id]
        cluster_id = clusters[prediction.qid]
        if not any(m.cluster_id == cluster_id for m in passage.mentions):
            no_gold.append(prediction.qid)
        em, f1 = score_pair(prediction, passage, cluster_id)
        em_values.append(em)
        f1_values.append(f1)
        by_query.setdefault(prediction.qid, []).append((em, f1))
    if no_gold:
        # qrels from elsewhere than the dataset's own: such pairs have no answer to find
        warnings.append(f"{len(no_gold)} relevant pairs have no mention of the query's cluster in the passage; "
                        f"they score 0 ({_examples(no_gold)})")

    per_query = {qid: {EM: _mean([em for em, _ in pairs]), F1: _mean([f1 for _, f1 in pairs])}
                 for qid, pairs in by_query.items()}
    return SpanScores(em=_mean(em_values), f1=_mean(f1_values), n_pairs=len(scored), per_query=per_query,
                      warnings=warnings)
