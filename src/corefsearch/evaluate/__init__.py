"""Evaluation of retrieval runs: ranking metrics (trec_eval or CoreSearch definitions, and any
ir-measures measure), a reader's spans (EM and F1 as in SQuAD v1.1), paired significance tests,
reports (table, JSON, CSV, per-query CSV) and R@k / MRR@k curves with their plot; and the scores of
clusterings and mention detections.

Runs: ``metrics`` (the metric names, the two definitions ``trec`` and ``coresearch``, ``Run`` and
``Qrels``; the floor), ``ranking`` (a run against qrels, through ir-measures), ``coresearch`` (the
CoreSearch paper's definitions, by hand), ``trec_eval_binary`` (the trec_eval binary in Pyserini's jar),
``spans`` (a reader's spans: EM and F1), ``query_clusters`` (a run's top k as a cluster, per-query B³,
``evaluate --cluster-k``), ``significance`` (paired tests between two runs), ``report`` (table, JSON, CSV,
per-query CSV) and ``curves`` (R@k and MRR@k at every cut-off, ``evaluate --plot``).

Clusterings and detections: ``coref`` (MUC, B³, CEAF-e, LEA and CoNLL F1 of two partitions),
``coref_files`` (a clusters file against a dataset's gold clusters of one split, and its table, JSON and
CSV), ``coref_predicted`` (a clustering of predicted mentions, matched to the gold ones by span) and
``mentions`` (mention detection against the gold mentions: precision, recall and F1 per type).

Heavy dependencies (ir-measures, scipy, rich, matplotlib) are imported only when used, so importing
this package stays cheap for the CLI.
"""

from corefsearch.evaluate.coresearch import evaluate_coresearch, micro_recall
from corefsearch.evaluate.curves import Curve, cutoff_curve, plot_curves
from corefsearch.evaluate.metrics import (
    ALL_METRICS,
    DEFINITIONS,
    INFAP,
    METRICS,
    SPAN_METRICS,
    parse_metrics,
    rank_documents,
)
from corefsearch.evaluate.ranking import Evaluation, add_span_scores, evaluate_files, evaluate_run
from corefsearch.evaluate.report import render_table, to_csv, to_json, write_per_query_csv
from corefsearch.evaluate.significance import paired_test
from corefsearch.evaluate.spans import (
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
    "Curve",
    "Evaluation",
    "SpanPrediction",
    "SpanScores",
    "add_span_scores",
    "cutoff_curve",
    "evaluate_coresearch",
    "evaluate_files",
    "evaluate_run",
    "exact_match",
    "micro_recall",
    "normalize_answer",
    "paired_test",
    "parse_metrics",
    "plot_curves",
    "rank_documents",
    "read_spans",
    "render_table",
    "score_pair",
    "score_spans",
    "to_csv",
    "to_json",
    "token_f1",
    "write_per_query_csv",
]
