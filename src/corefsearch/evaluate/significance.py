"""Paired significance tests between two evaluated runs."""

from __future__ import annotations

import math

from corefsearch.evaluate.ranking import Evaluation

_EPSILON = 1e-12  # per-query differences below this are float noise


def paired_test(base: Evaluation, other: Evaluation, metric: str) -> float:
    """Two-sided paired t-test p-value of ``metric`` over the queries both runs have it for.

    Uses the per-query values; for the micro-averaged R@k of the ``"coresearch"`` definition
    these are the per-query ratios (a micro average has no per-query sample to test); for EM
    and F1, the per-query means over scored pairs of the queries both runs scored a pair of.
    Degenerate cases are decided rather than left to scipy's NaN: identical values → 1.0;
    the same non-zero difference on every query → 0.0; no shared query, or a single one that
    differs → NaN (no test possible).

    Raises ``ValueError`` when the definitions differ or a run lacks the metric.
    """
    if base.definition != other.definition:
        raise ValueError(f"cannot compare {base.name!r} ({base.definition}) with "
                         f"{other.name!r} ({other.definition}): different metric definitions")
    for evaluation in (base, other):
        if metric not in evaluation.aggregate:
            raise ValueError(f"run {evaluation.name!r} has no metric {metric!r}")

    # span metrics exist only for queries with a scored pair; ranking metrics for every query
    shared = [qid for qid, values in base.per_query.items()
              if metric in values and metric in other.per_query.get(qid, {})]
    a = [base.per_query[qid][metric] for qid in shared]
    b = [other.per_query[qid][metric] for qid in shared]
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    if not diffs:
        return math.nan
    if all(abs(d) <= _EPSILON for d in diffs):
        return 1.0
    if len(diffs) < 2:
        return math.nan
    if max(diffs) - min(diffs) <= _EPSILON:
        return 0.0  # zero variance, non-zero mean: t is infinite

    from scipy.stats import ttest_rel

    p_value = float(ttest_rel(b, a).pvalue)
    return 1.0 if math.isnan(p_value) else p_value
