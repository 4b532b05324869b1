"""Mention detection scored against a dataset's gold mentions: precision, recall and F1 per type and
over all types, by strict match (the same passage, offsets and type) and by head match (the predicted
span holds the syntactic head of a gold mention of its type; one prediction matches one gold mention).

Only the passages annotated in full are scored: those holding a gold mention (for ECB+, build the
dataset with ``--validated-only --chains all --mention-type all``, so that a passage is a validated
sentence and every mention in it is there; the sentences outside the validated ones carry unannotated
mentions that would count as false predictions). ``split`` keeps the passages of one split.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.counts import counted
from corefsearch.base.errors import InputError
from corefsearch.base.nlp import head_spans
from corefsearch.base.schema import MENTION_TYPES, SPLITS, PredictedMention
from corefsearch.datasets.dataset import Dataset
from corefsearch.io.read import read_jsonl

if TYPE_CHECKING:
    from rich.console import Console

Span = tuple[int, int, str]  # start, end, type (characters into the passage)
MATCHES = ("strict", "head")


@dataclass
class DetectionScore:
    gold: int = 0
    predicted: int = 0
    correct: int = 0

    @property
    def precision(self) -> float:
        return self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"P": self.precision, "R": self.recall, "F1": self.f1, "gold": self.gold,
                "predicted": self.predicted, "correct": self.correct}


@dataclass
class DetectionEvaluation:
    """``scores[match][type]``: ``type`` is event, entity or all."""

    name: str
    split: str | None
    passages: int
    scores: dict[str, dict[str, DetectionScore]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"mentions": self.name, "split": self.split, "passages": self.passages,
                **{match: {kind: score.to_json() for kind, score in by_type.items()}
                   for match, by_type in self.scores.items()}}


def _head_matches(gold: Sequence[Span], heads: Sequence[tuple[int, int]], predicted: Sequence[Span]) -> int:
    """One-to-one head matches: each gold mention (in order) takes the unused prediction of its type that
    holds its head, the exact span first, else the shortest."""
    used: set[int] = set()
    correct = 0
    for (start, end, kind), (head_start, head_end) in zip(gold, heads, strict=True):
        candidates = [i for i, (s, e, k) in enumerate(predicted)
                      if i not in used and k == kind and s <= head_start and head_end <= e]
        if not candidates:
            continue
        exact = [i for i in candidates if predicted[i][:2] == (start, end)]
        chosen = exact[0] if exact else min(candidates, key=lambda i: predicted[i][1] - predicted[i][0])
        used.add(chosen)
        correct += 1
    return correct


def score_detection(gold: Mapping[str, Sequence[Span]], predicted: Mapping[str, Sequence[Span]],
                    heads: Mapping[str, Sequence[tuple[int, int]]] | None = None,
                    types: Sequence[str] = MENTION_TYPES) -> dict[str, dict[str, DetectionScore]]:
    """Scores over the passages of ``gold`` (``{passage id: spans}``; predictions in other passages are
    not scored). ``heads``: per passage, the head characters of each gold span, in order (needed for the
    head match; without it only strict is scored)."""
    matches = MATCHES if heads is not None else ("strict",)
    scores = {match: {kind: DetectionScore() for kind in (*types, "all")} for match in matches}
    for passage_id, gold_spans in gold.items():
        found = [span for span in dict.fromkeys(predicted.get(passage_id, ())) if span[2] in types]
        for kind in types:
            g = [span for span in gold_spans if span[2] == kind]
            p = [span for span in found if span[2] == kind]
            for match in matches:
                score = scores[match][kind]
                score.gold += len(g)
                score.predicted += len(p)
                if match == "strict":
                    score.correct += len(set(g) & set(p))
                else:
                    assert heads is not None
                    h = [head for span, head in zip(gold_spans, heads[passage_id], strict=True) if span[2] == kind]
                    score.correct += _head_matches(g, h, p)
    for by_type in scores.values():
        total = by_type["all"]
        for kind in types:
            total.gold += by_type[kind].gold
            total.predicted += by_type[kind].predicted
            total.correct += by_type[kind].correct
    return scores


def read_predicted(path: Path) -> dict[str, list[Span]]:
    """``{passage id: spans}`` of a predicted mentions file (``corefsearch detect``'s, or any system's in that
    format); every line checked."""
    found: dict[str, list[Span]] = {}
    for line_number, record in read_jsonl(Path(path)):
        mention = PredictedMention.from_json(record, where=f"{path}:{line_number}")
        found.setdefault(mention.passage_id, []).append((mention.start, mention.end, mention.type))
    return found


def evaluate_detection(mentions: Path, dataset_dir: Path, split: str | None = "auto", head: bool = True,
                       types: Sequence[str] | None = None) -> DetectionEvaluation:
    """Score a predicted mentions file against the gold mentions of ``dataset_dir`` (see the module docstring).
    ``split``: the passages of one split; None: all; ``"auto"``: test when the passages carry splits, else all."""
    if split not in (None, "auto", *SPLITS):
        raise InputError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    dataset = Dataset(dataset_dir)
    mentions = Path(mentions)
    if mentions.is_dir():  # a dataset's own: both files checked (one without the other, or changed: one line)
        holder = Dataset(mentions)
        holder.predicted_manifest()
        mentions = holder.predicted_mentions_path
    predicted = read_predicted(mentions)
    gold: dict[str, list[Span]] = {}
    texts: dict[str, str] = {}
    splits: dict[str, str | None] = {}
    passage_ids: set[str] = set()
    for passage in dataset.passages():  # one pass; "auto" is settled after it
        passage_ids.add(passage.id)
        if not passage.mentions or split not in ("auto", None, passage.split):
            continue
        gold[passage.id] = sorted({(m.start, m.end, m.type) for m in passage.mentions})
        texts[passage.id] = passage.text
        splits[passage.id] = passage.split
    if split == "auto":
        split = "test" if any(s is not None for s in splits.values()) else None
        gold = {pid: spans for pid, spans in gold.items() if split is None or splits[pid] == split}
    if not gold:
        where = f" of the {split} split" if split else ""
        raise InputError(f"{dataset.root}: no passage{where} holds a gold mention, so there is nothing to score the "
                         "detection against (a dataset of plain documents has no gold mentions)")
    unknown = sorted(set(predicted) - passage_ids)
    if unknown:
        raise InputError(f"{mentions}: passage {unknown[0]} is not in {dataset.passages_path} "
                         f"({len(unknown):,} unknown passage(s)): were the mentions detected on another dataset?")
    kinds = list(types) if types else sorted({span[2] for spans in gold.values() for span in spans},
                                             key=MENTION_TYPES.index)
    heads = None
    if head:
        ids = sorted(gold)
        heads = dict(zip(ids, head_spans([texts[i] for i in ids], [[s[:2] for s in gold[i]] for i in ids]),
                         strict=True))
    evaluation = DetectionEvaluation(mentions.name, split, len(gold), score_detection(gold, predicted, heads, kinds))
    outside = sum(len(spans) for pid, spans in predicted.items() if pid not in gold)
    if outside:
        evaluation.warnings.append(f"{outside:,} predicted mention(s) lie in passages without gold mentions (not "
                                   "annotated in full, or of another split): not scored")
    return evaluation


def render_detection_table(evaluation: DetectionEvaluation, console: Console | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Mention detection ×100: {evaluation.name}"
                        f"{f' ({evaluation.split})' if evaluation.split else ''}",
                  caption=f"{counted(evaluation.passages, 'passage')} annotated in full")
    for column in ("Match", "Type", "P", "R", "F1", "gold", "predicted"):
        table.add_column(column, justify="left" if column in ("Match", "Type") else "right")
    for match, by_type in evaluation.scores.items():
        for kind, score in by_type.items():
            table.add_row(match, kind, *(f"{100 * v:.2f}" for v in (score.precision, score.recall, score.f1)),
                          f"{score.gold:,}", f"{score.predicted:,}")
        table.add_section()
    (console or Console()).print(table)


def detection_csv(evaluation: DetectionEvaluation) -> str:
    """``mentions,split,match,type,P,R,F1,gold,predicted,correct``, one row per match and type."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["mentions", "split", "match", "type", "P", "R", "F1", "gold", "predicted", "correct"])
    for match, by_type in evaluation.scores.items():
        for kind, score in by_type.items():
            writer.writerow([evaluation.name, evaluation.split or "", match, kind, repr(score.precision),
                             repr(score.recall), repr(score.f1), score.gold, score.predicted, score.correct])
    return buffer.getvalue()
