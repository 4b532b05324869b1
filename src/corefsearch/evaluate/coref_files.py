"""Score a clustering (``{mention_id, cluster_id}`` lines, from ``corefsearch cluster`` or any other
system) against a dataset's gold clusters of one split, and present the scores (table, JSON, CSV).

The key is every cluster of ``DATASET/clusters.jsonl`` listed under the split, with all its
mentions (a mention's split is the split of its gold cluster). Response mentions of other splits
are left out (with a warning that counts them); a mention the dataset does not have at all, or a
mention given twice, is an error naming ``FILE:LINE``.

A clusters file of predicted mentions (each line with its span, ``coref_predicted.py``) is scored
against every gold mention of the passages of the split, its mentions matched to gold ones by exact
span; without ``singletons`` it is scored twice, singletons kept and dropped (Cattan et al. 2021).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.counts import counted
from corefsearch.base.errors import InputError
from corefsearch.base.schema import SPLITS, RecordFields
from corefsearch.datasets.dataset import Dataset
from corefsearch.evaluate.coref import METRIC_NAMES, SINGLETONS, CorefScores, score_partitions
from corefsearch.evaluate.coref_predicted import SPAN_FIELDS, has_spans, match_predicted
from corefsearch.io.read import read_jsonl

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

METRIC_LABELS = {"MUC": "MUC", "B3": "B³", "CEAF-e": "CEAF-e", "LEA": "LEA"}


@dataclass
class GoldKey:
    """The gold ``{mention_id: cluster_id}`` of one split, and the split of every dataset mention."""

    split: str
    key: dict[str, str]
    mention_splits: dict[str, str]


@dataclass
class MatchCounts:
    """How the predicted mentions of a response met the gold ones (before any singleton is dropped)."""

    detector: str | None  # as the clusters file names it
    predicted: int  # response mentions in passages of the split
    matched: int  # of them, those with a gold twin (the same span)
    gold: int  # gold mentions of the split (the key)


@dataclass
class ClusterEvaluation:
    name: str
    split: str
    singletons: str
    scores: CorefScores
    warnings: list[str] = field(default_factory=list)
    matching: MatchCounts | None = None  # predicted mentions only

    @property
    def mentions(self) -> str:
        """gold (the response clusters the dataset's mention ids) or predicted (spans matched to them)."""
        return "gold" if self.matching is None else "predicted"

    def to_json(self) -> dict[str, Any]:
        values: dict[str, Any] = {"clusters": self.name, "split": self.split, "singletons": self.singletons}
        values.update({name: score.to_json() for name, score in self.scores.metrics().items()})
        values["CoNLL F1"] = self.scores.conll_f1
        values["key_mentions"] = self.scores.key_mentions
        values["response_mentions"] = self.scores.response_mentions
        values["mentions"] = self.mentions
        if self.matching is not None:
            values.update({"detector": self.matching.detector, "predicted_mentions": self.matching.predicted,
                           "matched_mentions": self.matching.matched, "gold_mentions": self.matching.gold})
        return values


def read_gold_key(dataset_dir: Path, split: str) -> GoldKey:
    """The gold clusters of ``split`` from ``DATASET/clusters.jsonl`` (every record checked)."""
    if split not in SPLITS:
        raise InputError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    dataset = Dataset(dataset_dir)  # fails clearly when it is not a dataset
    key: dict[str, str] = {}
    mention_splits: dict[str, str] = {}
    for cluster in dataset.clusters():
        for mention_id in cluster.mention_ids:
            mention_splits[mention_id] = cluster.split
            if cluster.split == split:
                key[mention_id] = cluster.cluster_id
    if not key:
        raise InputError(f"the dataset {dataset.root} has no mentions in the {split} split "
                         f"(clusters.jsonl lists none); choose another --split")
    return GoldKey(split, key, mention_splits)


def read_response(path: Path, gold: GoldKey) -> tuple[dict[str, str], list[str]]:
    """The ``{mention_id: cluster_id}`` of a clusters file, restricted to the key's split, and warnings."""
    response: dict[str, str] = {}
    first_line: dict[str, int] = {}
    other_split: list[str] = []
    for line_number, record in read_jsonl(path):
        fields = RecordFields(record, f"{path}:{line_number}")
        mention_id = fields.ident("mention_id")
        fields.subject = f"mention {mention_id}"
        cluster_id = fields.ident("cluster_id")
        if any(name in record for name in SPAN_FIELDS):
            raise fields.error("gives a span (passage_id, start, end), but line 1 does not: a clusters file holds "
                               "gold mentions (dataset ids) or predicted ones (each with its span), not both")
        if mention_id in first_line:
            raise InputError(f"{path}:{line_number}: mention {mention_id} occurs twice "
                             f"(first on line {first_line[mention_id]}); each mention belongs to one cluster")
        first_line[mention_id] = line_number
        mention_split = gold.mention_splits.get(mention_id)
        if mention_split is None:
            raise InputError(f"{path}:{line_number}: mention {mention_id!r} is not in the dataset "
                             f"(its clusters.jsonl has no such mention id)")
        if mention_split != gold.split:
            other_split.append(mention_id)
            continue
        response[mention_id] = cluster_id
    if not response:
        raise InputError(f"{path} has no mention of the {gold.split} split"
                         + (f" ({len(other_split):,} of other splits); choose the split with --split"
                            if other_split else " (it is empty)"))
    warnings = []
    if other_split:
        warnings.append(f"{len(other_split):,} mention(s) of other splits than {gold.split} ignored "
                        f"(e.g. {other_split[0]})")
    missing = [mention for mention in gold.key if mention not in response]
    if missing:
        warnings.append(f"{len(missing):,} of the {len(gold.key):,} {gold.split} mentions are not in {path.name} "
                        f"(e.g. {missing[0]}): they count as missed")
    return response, warnings


def evaluate_clusters(clusters_path: Path, dataset_dir: Path, split: str = "test",
                      singletons: str = "keep") -> ClusterEvaluation:
    """Score a clusters file against the dataset's gold clusters of ``split``."""
    return evaluate_cluster_settings(clusters_path, dataset_dir, split, singletons)[0]


def evaluate_cluster_settings(clusters_path: Path, dataset_dir: Path, split: str | None = None,
                              singletons: str | None = None) -> list[ClusterEvaluation]:
    """Score a clusters file against the dataset's gold clusters of ``split`` (default test), once per singleton
    setting: ``singletons`` (keep or drop), else keep for gold mentions and both, kept then dropped, for
    predicted mentions (their spans matched to the gold mentions of the passages of ``split``; ``all``: every
    passage, the default when no passage records a split)."""
    if singletons is not None and singletons not in SINGLETONS:
        raise InputError(f"--singletons must be keep or drop, got {singletons!r}")
    path = Path(clusters_path)
    matching: MatchCounts | None = None
    if has_spans(path):
        found = match_predicted(path, dataset_dir, split)
        key, response, warnings, split = found.key, found.response, found.warnings, found.split
        matching = MatchCounts(found.detector, found.predicted, found.matched, len(found.key))
        settings = [singletons] if singletons is not None else list(SINGLETONS)
    else:
        split = split or "test"
        gold = read_gold_key(dataset_dir, split)
        response, warnings = read_response(path, gold)
        key = gold.key
        settings = [singletons or "keep"]
    return [ClusterEvaluation(path.name, split, setting, score_partitions(key, response, setting), warnings, matching)
            for setting in settings]


def render_cluster_table(evaluation: ClusterEvaluation, console: Console | None = None) -> Table:
    """Print (and return) one row per metric with recall, precision and F1 ×100, then CoNLL F1."""
    from rich.console import Console
    from rich.table import Table

    scores = evaluation.scores
    caption = (f"{counted(scores.key_mentions, 'key mention')} in {counted(scores.key_clusters, 'cluster')}; "
               f"{counted(scores.response_mentions, 'response mention')} in "
               f"{counted(scores.response_clusters, 'cluster')}")
    matching = evaluation.matching
    if matching is not None:
        caption += (f"\npredicted mentions (detector {matching.detector or 'not named'}): {matching.matched:,} of "
                    f"{matching.predicted:,} match a gold mention's span exactly; "
                    f"{counted(matching.gold, 'gold mention')}")
    table = Table(title=f"Coreference metrics ×100: {evaluation.name} ({evaluation.split}, "
                        f"{'predicted mentions, ' if matching is not None else ''}"
                        f"singletons {'kept' if evaluation.singletons == 'keep' else 'dropped'})",
                  caption=caption)
    table.add_column("Metric")
    for column in ("R", "P", "F1"):
        table.add_column(column, justify="right")
    for name, score in scores.metrics().items():
        table.add_row(METRIC_LABELS[name], *(f"{100 * value:.2f}" for value in
                                             (score.recall, score.precision, score.f1)))
    table.add_section()
    table.add_row("CoNLL", "", "", f"{100 * scores.conll_f1:.2f}")
    (console or Console()).print(table)
    return table


def cluster_csv(evaluation: ClusterEvaluation | list[ClusterEvaluation]) -> str:
    """``clusters,split,singletons,MUC_R,MUC_P,MUC_F1,…,LEA_F1,CoNLL_F1,key_mentions,response_mentions,
    mentions,predicted_mentions,matched_mentions`` (the last two empty for gold mentions); one row per evaluation."""
    evaluations = evaluation if isinstance(evaluation, list) else [evaluation]
    header = ["clusters", "split", "singletons"]
    header += [f"{name}_{part}" for name in METRIC_NAMES for part in ("R", "P", "F1")]
    header += ["CoNLL_F1", "key_mentions", "response_mentions", "mentions", "predicted_mentions", "matched_mentions"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for one in evaluations:
        scores = one.scores
        row: list[str] = [one.name, one.split, one.singletons]
        for score in scores.metrics().values():
            row += [repr(score.recall), repr(score.precision), repr(score.f1)]
        row += [repr(scores.conll_f1), str(scores.key_mentions), str(scores.response_mentions), one.mentions]
        row += ["", ""] if one.matching is None else [str(one.matching.predicted), str(one.matching.matched)]
        writer.writerow(row)
    return buffer.getvalue()


__all__ = ["METRIC_NAMES", "ClusterEvaluation", "GoldKey", "MatchCounts", "cluster_csv", "evaluate_cluster_settings",
           "evaluate_clusters", "read_gold_key", "read_response", "render_cluster_table"]
