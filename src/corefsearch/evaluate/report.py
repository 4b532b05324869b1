"""Present evaluations: a rich table (×100, as the paper reports), JSON, CSV (one row per run)
and a per-query CSV.

Span metrics (EM, F1) are extra metrics like the ranking ones, after them; the number of
scored span pairs is a row below the table's query count and a ``span_pairs`` key in the JSON.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from corefsearch.evaluate.metrics import SPAN_METRICS, is_definition_metric
from corefsearch.evaluate.ranking import Evaluation
from corefsearch.evaluate.significance import paired_test
from corefsearch.io.outputs import output_lock
from corefsearch.io.write import atomic_file

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

SIGNIFICANCE_LEVEL = 0.05
MARKER = "†"


def _metrics(evaluations: Sequence[Evaluation]) -> list[str]:
    """Every metric any evaluation has, in the order evaluated (the ranking metrics; span metrics last)."""
    present: list[str] = []
    for evaluation in evaluations:
        present.extend(metric for metric in evaluation.aggregate if metric not in present)
    return [m for m in present if m not in SPAN_METRICS] + [m for m in SPAN_METRICS if m in present]


def _check(evaluations: Sequence[Evaluation]) -> None:
    if not evaluations:
        raise ValueError("no evaluations to report")
    names = [evaluation.name for evaluation in evaluations]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"run names must be unique, repeated: {', '.join(duplicates)}")


def render_table(evaluations: Sequence[Evaluation], console: Console | None = None,
                 alpha: float = SIGNIFICANCE_LEVEL) -> Table:
    """Print (and return) one row per metric, one column per run, values ×100 with 2 decimals.

    With several runs, those after the first carry ``†`` where a two-sided paired t-test
    against the first run gives p < ``alpha`` (and the caption says so; a single run has no
    test and no such note). All runs must use the same metric definition.
    """
    from rich.console import Console
    from rich.table import Table

    _check(evaluations)
    definitions = {evaluation.definition for evaluation in evaluations}
    if len(definitions) > 1:
        raise ValueError(f"cannot put runs scored with different definitions in one table: "
                         f"{', '.join(sorted(definitions))}")
    definition = definitions.pop()
    base = evaluations[0]

    metrics = _metrics(evaluations)
    has_spans = any(metric in SPAN_METRICS for metric in metrics)

    several = len(evaluations) > 1
    notes = [f"{MARKER} p < {alpha:g} vs {base.name} (two-sided paired t-test over queries)"] if several else []
    if definition == "coresearch":
        note = "R@k micro-averaged as in the CoreSearch paper"
        if any(not is_definition_metric(m) for m in metrics if m not in SPAN_METRICS):
            note += " (the metrics other than MRR@k, mAP@k, R@k as trec_eval)"
        notes.append(note + (", tested on per-query recall" if several else ""))
    if has_spans:
        notes.append("EM/F1 (SQuAD v1.1): mean over relevant re-ranked pairs"
                     + (", tested on per-query means" if several else ""))
    what = "Ranking and span metrics" if has_spans else "Ranking metrics"
    table = Table(title=f"{what} ×100 ({definition} definitions)", caption="; ".join(notes) or None)
    table.add_column("Metric")
    for evaluation in evaluations:
        table.add_column(evaluation.name, justify="right")

    for metric in metrics:
        cells = [metric]
        for position, evaluation in enumerate(evaluations):
            if metric not in evaluation.aggregate:
                cells.append("–")
                continue
            cell = f"{100 * evaluation.aggregate[metric]:.2f}"
            if position > 0 and metric in base.aggregate:
                p_value = paired_test(base, evaluation, metric)
                # NaN (no shared queries) never counts as significant
                cell += MARKER if not math.isnan(p_value) and p_value < alpha else " "
            cells.append(cell)
        table.add_row(*cells)
    table.add_section()
    table.add_row("queries", *(str(evaluation.n_queries) for evaluation in evaluations))
    if has_spans:
        table.add_row("span pairs", *("–" if evaluation.n_span_pairs is None else str(evaluation.n_span_pairs)
                                      for evaluation in evaluations))

    (console or Console()).print(table)
    return table


def to_json(evaluations: Sequence[Evaluation]) -> dict[str, dict[str, float]]:
    """``{run name: {metric: value}}`` with raw fractions (not ×100), metric names as in the table.

    A run evaluated with spans also has ``"span_pairs"``: how many pairs EM and F1 average over.
    """
    _check(evaluations)
    result: dict[str, dict[str, float]] = {}
    for evaluation in evaluations:
        values = {metric: evaluation.aggregate[metric] for metric in _metrics([evaluation])}
        if evaluation.n_span_pairs is not None:
            values["span_pairs"] = evaluation.n_span_pairs
        result[evaluation.name] = values
    return result


def to_csv(evaluations: Sequence[Evaluation]) -> str:
    """``run,<metrics…>,queries`` (and ``span_pairs`` with spans): one row per run, fractions as in the JSON."""
    _check(evaluations)
    metrics = _metrics(evaluations)
    spans = any(evaluation.n_span_pairs is not None for evaluation in evaluations)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["run", *metrics, "queries", *(["span_pairs"] if spans else [])])
    for evaluation in evaluations:
        cells = [repr(evaluation.aggregate[m]) if m in evaluation.aggregate else "" for m in metrics]
        pairs = [] if not spans else ["" if evaluation.n_span_pairs is None else str(evaluation.n_span_pairs)]
        writer.writerow([evaluation.name, *cells, str(evaluation.n_queries), *pairs])
    return buffer.getvalue()


def write_per_query_csv(evaluations: Sequence[Evaluation], path: Path) -> int:
    """Write ``run,qid,<metrics…>`` (one row per run and query) atomically; return the row count.

    A metric a run lacks (infAP in a mixed set) is left empty, as are EM and F1 for a query
    without a scored span pair.
    """
    _check(evaluations)
    metrics = _metrics(evaluations)
    rows = 0
    with output_lock(Path(path), "--per-query"), atomic_file(Path(path)) as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["run", "qid", *metrics])
        for evaluation in evaluations:
            for qid, values in evaluation.per_query.items():
                cells = (repr(values[metric]) if metric in values else "" for metric in metrics)
                writer.writerow([evaluation.name, qid, *cells])
                rows += 1
    return rows
