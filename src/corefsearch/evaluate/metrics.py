"""Metric names and definitions shared by every evaluation module, and the ``Run``/``Qrels`` types.

Two definitions (DESIGN.md §4), never mixed silently: ``"trec"`` (trec_eval semantics through
ir-measures) and ``"coresearch"`` (the CoreSearch paper's code: R@k micro-averaged). MRR@k, mAP@k
and R@k take the chosen definition; any other ir-measures measure is always trec_eval's.
:func:`parse_metrics` reads the ``--metrics`` option, :func:`rank_documents` is trec_eval's
order of a query's documents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from corefsearch.base.errors import InputError
from corefsearch.io.trec import trec_eval_order

if TYPE_CHECKING:
    pass


Run = Mapping[str, Mapping[str, float]]


Qrels = Mapping[str, Mapping[str, int]]


EM = "EM"


F1 = "F1"


SPAN_METRICS: tuple[str, ...] = (EM, F1)


DEFINITIONS: tuple[str, ...] = ("trec", "coresearch")


METRICS: tuple[str, ...] = ("MRR@10", "mAP@10", "mAP@50", "R@10", "R@50", "R@100", "R@500")


INFAP = "infAP"


# Every metric that can appear, in table order.
ALL_METRICS: tuple[str, ...] = (*METRICS, INFAP, *SPAN_METRICS)


UNJUDGED = -1


# Our (paper) metric names -> ir-measures names (trec_eval: recip_rank cut at 10, map_cut_k,
# recall_k, infAP).
IR_MEASURES_NAMES: dict[str, str] = {
    "MRR@10": "RR@10",
    "mAP@10": "AP@10",
    "mAP@50": "AP@50",
    "R@10": "R@10",
    "R@50": "R@50",
    "R@100": "R@100",
    "R@500": "R@500",
    INFAP: "infAP",
}


# Our metric names with any cut-off: MRR@k, mAP@k, R@k (the definition decides their semantics).
_DEFINITION_METRIC = re.compile(r"(MRR|mAP|R)@([1-9][0-9]*)")


_IR_MEASURES_PREFIX = {"MRR": "RR", "mAP": "AP", "R": "R"}


DEFAULTS_KEYWORD = "defaults"


METRIC_EXAMPLES = "nDCG@10, P@5, R@1000, RR, RR@10, AP, AP@10, infAP"


def is_definition_metric(metric: str) -> bool:
    """MRR@k, mAP@k and R@k: computed under the chosen definition (the rest is always trec_eval's)."""
    return _DEFINITION_METRIC.fullmatch(metric) is not None


def ir_measures_name(metric: str) -> str:
    """The ir-measures name of a metric: MRR@k -> RR@k, mAP@k -> AP@k; others are ir-measures names."""
    match = _DEFINITION_METRIC.fullmatch(metric)
    return f"{_IR_MEASURES_PREFIX[match[1]]}@{match[2]}" if match else IR_MEASURES_NAMES.get(metric, metric)


def parse_metrics(spec: str | Sequence[str]) -> list[str]:
    """The metrics of ``--metrics`` (separated by commas or spaces, or a list), in the order given, each once.

    A name is one of ours with any cut-off (MRR@k, mAP@k, R@k), ``defaults`` (the default set
    in its order), or an ir-measures measure (nDCG@10, P@5, RR, AP@100, infAP, ...), spelled as
    ir-measures prints it. Raises ``InputError`` naming an unknown or incomputable one.
    """
    import ir_measures

    names = [part.strip() for part in (re.split(r"[,\s]+", spec) if isinstance(spec, str) else spec)]
    if not any(names):
        raise InputError(f"--metrics names no metric; give comma-separated names such as {METRIC_EXAMPLES}")
    metrics: list[str] = []
    for name in names:
        if not name:
            continue
        if name == DEFAULTS_KEYWORD:
            metrics.extend(m for m in METRICS if m not in metrics)
            continue
        if not is_definition_metric(name):
            try:
                measure = ir_measures.parse_measure(name)
                # a one-query evaluation: fails now, not after the runs are read, where no provider computes it
                ir_measures.calc_aggregate([measure], {"q": {"d": 1}}, {"q": {"d": 1.0}})
            except Exception as err:  # ir-measures raises NameError, ValueError, AssertionError, ...
                what = "unknown metric" if isinstance(err, NameError) else "ir-measures cannot compute the metric"
                raise InputError(f"--metrics: {what} {name!r}; give ir-measures names such as {METRIC_EXAMPLES}, "
                                 f"or {', '.join(METRICS)} ({DEFAULTS_KEYWORD} = all of these)") from None
            name = str(measure)
        if name not in metrics:
            metrics.append(name)
    return metrics


def check_definition(definition: str) -> None:
    if definition not in DEFINITIONS:
        raise InputError(f"unknown metric definition {definition!r}; choose one of {', '.join(DEFINITIONS)}")


def rank_documents(scores: Mapping[str, float]) -> list[str]:
    """Doc ids best first, in trec_eval's order: score (as a C float) descending, then doc id descending."""
    return trec_eval_order(scores)
