"""Evaluation of retrieval runs: ranking metrics (trec_eval or CoreSearch definitions),
a reader's spans (EM and F1 as in SQuAD v1.1), paired significance tests, and reports
(table, JSON, per-query CSV).

Heavy dependencies (ir-measures, scipy, rich) are imported only when used, so importing
this package stays cheap for the CLI.
"""

from corefsearch.evaluate.coresearch import evaluate_coresearch, micro_recall
from corefsearch.evaluate.ranking import (
    ALL_METRICS,
    DEFINITIONS,
    INFAP,
    METRICS,
    Evaluation,
    add_span_scores,
    evaluate_files,
    evaluate_run,
    rank_documents,
)
from corefsearch.evaluate.report import render_table, to_json, write_per_query_csv
from corefsearch.evaluate.significance import paired_test
from corefsearch.evaluate.spans import (
    SPAN_METRICS,
    SpanPrediction,
    SpanScores,
    exact_match,
    normalize_answer,
    read_spans,
    score_pair,
    score_spans,
    token_f1,
)

__all__ = [
    "ALL_METRICS",
    "DEFINITIONS",
    "INFAP",
    "METRICS",
    "SPAN_METRICS",
    "Evaluation",
    "SpanPrediction",
    "SpanScores",
    "add_span_scores",
    "evaluate_coresearch",
    "evaluate_files",
    "evaluate_run",
    "exact_match",
    "micro_recall",
    "normalize_answer",
    "paired_test",
    "rank_documents",
    "read_spans",
    "render_table",
    "score_pair",
    "score_spans",
    "to_json",
    "token_f1",
    "write_per_query_csv",
]
