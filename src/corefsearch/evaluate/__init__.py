"""Evaluation of retrieval runs: ranking metrics (trec_eval or CoreSearch definitions),
paired significance tests, and reports (table, JSON, per-query CSV).

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
    evaluate_files,
    evaluate_run,
    rank_documents,
)
from corefsearch.evaluate.report import render_table, to_json, write_per_query_csv
from corefsearch.evaluate.significance import paired_test

__all__ = [
    "ALL_METRICS",
    "DEFINITIONS",
    "INFAP",
    "METRICS",
    "Evaluation",
    "evaluate_coresearch",
    "evaluate_files",
    "evaluate_run",
    "micro_recall",
    "paired_test",
    "rank_documents",
    "render_table",
    "to_json",
    "write_per_query_csv",
]
