"""Recall@k and MRR@k over every cut-off k = 1..depth, and their plot (``evaluate --plot``).

The values are computed by hand rather than through ir-measures: one pass over each ranking
(trec_eval's order) gives every cut-off at once, where ir-measures would evaluate each of the
hundreds of cut-offs separately. They follow the same definitions as ``evaluate_run`` (tested
to agree at the table's cut-offs): MRR@k is the mean over all qrels queries of 1/rank of the
first relevant passage within k; R@k is the per-query mean under ``"trec"`` and micro-averaged
(found / relevant over all queries) under ``"coresearch"``. A qrels query the run lacks
counts 0, as in the table.

matplotlib is imported only when a plot is drawn, and through its object API with the Agg
canvas, so the caller's pyplot backend and state are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from corefsearch.base.checks import at_least_one
from corefsearch.evaluate.metrics import Qrels, Run, check_definition, rank_documents
from corefsearch.io.outputs import output_lock
from corefsearch.io.write import atomic_file

# The cut-offs of the default table, marked on the plot.
MARKED_CUTOFFS = (10, 50, 100, 500)


@dataclass
class Curve:
    """R@k and MRR@k of one run for k = ``ks[i]`` (1..depth), as fractions."""

    name: str
    definition: str
    ks: list[int]
    recall: list[float]
    mrr: list[float]

    def at(self, k: int) -> tuple[float, float]:
        """``(R@k, MRR@k)``; beyond the depth the values stay those at the depth."""
        at_least_one("cut-off", k, ValueError)
        i = min(k, len(self.ks)) - 1
        return self.recall[i], self.mrr[i]


def cutoff_curve(run: Run, qrels: Qrels, definition: str = "trec", name: str = "run",
                 depth: int | None = None) -> Curve:
    """R@k and MRR@k for k = 1..``depth`` (default: the longest result list of a qrels query, at least 1)."""
    check_definition(definition)
    rankings = {qid: rank_documents(run.get(qid) or {}) for qid in qrels}
    if depth is None:
        depth = max((len(ranking) for ranking in rankings.values()), default=1) or 1
    # additions at each rank, summed up to k below
    recall_add = [0.0] * (depth + 1)
    mrr_add = [0.0] * (depth + 1)
    total_relevant = 0
    for qid, judged in qrels.items():
        relevant = {doc for doc, rel in judged.items() if rel > 0}
        if not relevant:
            continue
        total_relevant += len(relevant)
        hits = [rank for rank, doc in enumerate(rankings[qid][:depth], start=1) if doc in relevant]
        weight = 1.0 if definition == "coresearch" else 1.0 / len(relevant)
        for rank in hits:
            recall_add[rank] += weight
        if hits:
            mrr_add[hits[0]] += 1.0 / hits[0]
    n_queries = len(qrels)
    recall_denominator = total_relevant if definition == "coresearch" else n_queries
    recall, mrr = [], []
    found = reciprocal = 0.0
    for k in range(1, depth + 1):
        found += recall_add[k]
        reciprocal += mrr_add[k]
        recall.append(found / recall_denominator if recall_denominator else 0.0)
        mrr.append(reciprocal / n_queries if n_queries else 0.0)
    return Curve(name, definition, list(range(1, depth + 1)), recall, mrr)


def plot_curves(curves: Sequence[Curve], path: Path) -> None:
    """Draw R@k and MRR@k (×100, k on a log scale) of every curve side by side into the PNG ``path``,
    atomically."""
    from matplotlib.figure import Figure

    if not curves:
        raise ValueError("no curves to plot")
    definition = curves[0].definition
    figure = Figure(figsize=(11, 4.4), layout="constrained")
    recall_axes, mrr_axes = figure.subplots(1, 2)
    for curve in curves:
        recall_axes.plot(curve.ks, [100 * v for v in curve.recall], label=curve.name, linewidth=1.6)
        mrr_axes.plot(curve.ks, [100 * v for v in curve.mrr], label=curve.name, linewidth=1.6)
    depth = max(len(curve.ks) for curve in curves)
    recall_title = "Recall@k, " + ("micro-averaged (coresearch)" if definition == "coresearch"
                                   else "mean over queries (trec)")
    ticks = [k for k in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000) if k <= depth]
    for axes, title in ((recall_axes, recall_title), (mrr_axes, "MRR@k")):
        axes.set_xscale("log")
        axes.set_xlim(1, max(depth, 2))
        axes.set_xticks(ticks, [str(k) for k in ticks])
        axes.minorticks_off()
        axes.set_xlabel("k (log scale)")
        axes.set_ylabel("×100")
        axes.set_title(title)
        axes.grid(True, which="major", alpha=0.35)
        for k in MARKED_CUTOFFS:
            if k <= depth:
                axes.axvline(k, color="grey", linestyle=":", linewidth=0.8)
    recall_axes.legend(loc="lower right", fontsize="small")
    mrr_axes.legend(loc="lower right", fontsize="small")
    with output_lock(Path(path), "--plot"), atomic_file(Path(path), "wb") as handle:
        figure.savefig(handle, format="png", dpi=150)
