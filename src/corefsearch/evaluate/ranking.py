"""Ranking metrics for TREC runs against qrels.

Two definitions (DESIGN.md §4), never mixed silently:

* ``"trec"`` (default): trec_eval semantics through ir-measures — RR@10, AP@k (``map_cut``,
  divided by all relevant |R|), R@k averaged per query, and infAP when the qrels mark
  unjudged pairs with relevance −1.
* ``"coresearch"``: the CoreSearch paper's code (see ``coresearch.py``); same MRR@10 and
  mAP@k, but R@k is micro-averaged over queries.

Relevance ≤ 0 is non-relevant; −1 means "unjudged" for infAP and non-relevant elsewhere.

Other metrics can be asked for (``metrics=``, the CLI's ``--metrics``): the names above with
any cut-off (MRR@k, mAP@k, R@k: they keep the definition's semantics) and any ir-measures
measure (nDCG@10, P@5, RR, AP, infAP, Judged@10, ...), which is always trec_eval's.

A reader's spans file can add EM and F1 (SQuAD v1.1, see ``spans.py``) to a run's metrics.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from corefsearch.base.checks import all_at_least_one
from corefsearch.base.errors import InputError
from corefsearch.datasets.dataset import Dataset, dataset_holding
from corefsearch.evaluate.coresearch import evaluate_coresearch
from corefsearch.evaluate.curves import cutoff_curve
from corefsearch.evaluate.metrics import (
    INFAP,
    METRICS,
    UNJUDGED,
    Qrels,
    Run,
    check_definition,
    ir_measures_name,
    is_definition_metric,
    rank_documents,
)
from corefsearch.evaluate.query_clusters import score_query_clusters
from corefsearch.evaluate.spans import SpanScores, score_spans
from corefsearch.io.trec import read_qrels, read_run

if TYPE_CHECKING:
    from corefsearch.evaluate.curves import Curve



_EXAMPLES = 5  # how many query ids a warning names


@dataclass
class Evaluation:
    """The scores of one run.

    ``aggregate`` maps metric name -> value over all qrels queries (a fraction, not ×100);
    ``per_query`` maps qid -> metric -> value for every qrels query (under ``"coresearch"``
    the per-query R@k is the query's own ratio while the aggregate R@k is micro-averaged).
    ``warnings`` are for the user (missing or extra queries); the CLI prints them.

    With spans, ``aggregate`` also holds EM and F1 (means over the ``n_span_pairs`` scored
    pairs) and ``per_query`` holds them for the queries with a scored pair only (a query
    without one has no span value, rather than a 0 that would blame the reader for retrieval).
    ``n_span_pairs`` is None without spans. ``curve`` (R@k and MRR@k at every k, for the
    plot) is there when ``evaluate_files`` was asked for it.
    """

    name: str
    definition: str
    aggregate: dict[str, float]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    warnings: list[str] = field(default_factory=list)
    n_span_pairs: int | None = None
    curve: Curve | None = None

    @property
    def metrics(self) -> list[str]:
        return list(self.aggregate)


def _tie_free(scores: Mapping[str, float]) -> dict[str, float]:
    # ir-measures computes RR@k with its MS MARCO provider, which breaks score ties by doc id
    # ascending, while trec_eval (AP, R, infAP) breaks them descending. Re-scoring by trec_eval's
    # own order leaves no ties, so every provider ranks the same way.
    ranked = rank_documents(scores)
    return {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)}


def _examples(qids: Sequence[str]) -> str:
    shown = ", ".join(qids[:_EXAMPLES])
    return f"{shown}, …" if len(qids) > _EXAMPLES else shown


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def trec_per_query(run: Run, qrels: Qrels, metrics: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per-query values with trec_eval semantics for every qrels query.

    ir-measures (like trec_eval without ``-c``) scores only queries in both run and qrels and
    RR skips queries without a relevant doc; every qrels query starts at 0 for every metric and
    is overwritten by what ir-measures reports, which is trec_eval ``-c`` semantics.
    """
    import ir_measures

    measures = [ir_measures.parse_measure(ir_measures_name(name)) for name in metrics]
    # two of our names can be one measure (MRR@10 and RR@10): each gets the value
    ours: dict[str, list[str]] = {}
    for measure, name in zip(measures, metrics, strict=True):
        ours.setdefault(str(measure), []).append(name)
    per_query = {qid: dict.fromkeys(metrics, 0.0) for qid in qrels}
    ranked = {qid: _tie_free(run[qid]) for qid in qrels if run.get(qid)}
    if ranked:
        plain_qrels = {qid: dict(judged) for qid, judged in qrels.items()}
        unique = list({str(measure): measure for measure in measures}.values())
        for value in ir_measures.iter_calc(unique, plain_qrels, ranked):
            for name in ours[str(value.measure)]:
                per_query[value.query_id][name] = float(value.value)
    return per_query


def evaluate_run(run: Run, qrels: Qrels, definition: str = "trec", name: str = "run",
                 spans: SpanScores | None = None, metrics: Sequence[str] | None = None) -> Evaluation:
    """Score ``run`` ({qid: {doc: score}}) against ``qrels`` ({qid: {doc: relevance}}).

    Every qrels query is evaluated (``n_queries == len(qrels)``). A qrels query that the run
    lacks (or whose result list is empty) counts 0 for every metric — trec_eval's ``-c``
    behaviour, where plain ir-measures/pytrec_eval would silently drop it and inflate the
    means; it is reported in ``warnings`` with a count. Run queries absent from the qrels
    are ignored, also with a warning. ``infAP`` is added when any qrels relevance is −1.
    Under ``"coresearch"``, infAP (which the paper does not use) is trec_eval's.
    ``spans`` (from ``score_spans``) adds EM and F1 and their warnings.

    ``metrics`` (from ``parse_metrics``) replaces the default set, in its order: MRR@k, mAP@k
    and R@k under the definition, other ir-measures measures (and infAP, only when asked for)
    with trec_eval semantics.

    Raises ``InputError`` for an unknown definition or empty qrels.
    """
    check_definition(definition)
    if not qrels:
        raise InputError("the qrels hold no queries")

    warnings: list[str] = []
    extra = [qid for qid in run if qid not in qrels]
    if extra:
        warnings.append(f"{len(extra)} of {len(run)} run queries are not in the qrels and were "
                        f"ignored ({_examples(extra)})")
    missing = [qid for qid in qrels if not run.get(qid)]
    if missing:
        warnings.append(f"{len(missing)} of {len(qrels)} qrels queries have no results in the run; "
                        f"they count 0 for every metric ({_examples(missing)})")
    no_relevant = [qid for qid, judged in qrels.items() if not any(rel > 0 for rel in judged.values())]
    if no_relevant:
        warnings.append(f"{len(no_relevant)} of {len(qrels)} qrels queries have no relevant document; "
                        f"they count 0 for every metric ({_examples(no_relevant)})")

    if metrics is None:
        metrics = list(METRICS)
        if any(rel == UNJUDGED for judged in qrels.values() for rel in judged.values()):
            metrics.append(INFAP)
    metrics = list(dict.fromkeys(metrics))

    # Under "coresearch", MRR@k, mAP@k and R@k are the paper's (R@k micro-averaged); the rest is trec_eval's.
    paper = [metric for metric in metrics if is_definition_metric(metric)] if definition == "coresearch" else []
    others = [metric for metric in metrics if metric not in paper]
    per_query = trec_per_query(run, qrels, others) if others else {qid: {} for qid in qrels}
    paper_aggregate: dict[str, float] = {}
    if paper:
        paper_per_query, paper_aggregate = evaluate_coresearch(run, qrels, paper)
        for qid, values in per_query.items():
            values.update(paper_per_query[qid])
    per_query = {qid: {metric: values[metric] for metric in metrics} for qid, values in per_query.items()}
    aggregate = {metric: paper_aggregate[metric] if metric in paper_aggregate
                 else _mean([values[metric] for values in per_query.values()]) for metric in metrics}

    evaluation = Evaluation(name=name, definition=definition, aggregate=aggregate, per_query=per_query,
                            n_queries=len(qrels), warnings=warnings)
    if spans is not None:
        add_span_scores(evaluation, spans)
    return evaluation


def add_span_scores(evaluation: Evaluation, spans: SpanScores) -> None:
    """Put EM and F1 into ``evaluation`` (aggregate, per query where scored) with the span warnings."""
    evaluation.aggregate.update(spans.aggregate)
    for qid, values in spans.per_query.items():
        # scored pairs are relevant in the qrels, so their queries are qrels queries
        evaluation.per_query.setdefault(qid, {}).update(values)
    evaluation.n_span_pairs = spans.n_pairs
    evaluation.warnings.extend(spans.warnings)


def _stem(path: Path) -> str:
    # "bm25.trec.gz" -> "bm25": read_run un-gzips transparently, so .gz is not part of the name.
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return Path(name).stem or name


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return os.fspath(path)


def run_names(run_paths: Sequence[Path]) -> list[str]:
    """File stems; runs sharing a stem are named by their path (relative to the cwd if under it)."""
    paths = [Path(p) for p in run_paths]
    stems = [_stem(p) for p in paths]
    names = [_relative(p) if stems.count(stem) > 1 else stem for p, stem in zip(paths, stems, strict=True)]
    # The same file given twice still needs distinct names (they key the JSON output).
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return unique


def _check_dataset_qrels(path: Path) -> None:
    """The qrels of a dataset of plain documents (``DATASET/qrels/SPLIT.txt``), missing or empty: the one line
    saying why, not "no such file" or "no judgments" (qrels written there by hand are read)."""
    holder = dataset_holding(path) if path.parent.name == "qrels" else None
    if holder is None or holder.has_gold_mentions or (path.is_file() and path.stat().st_size):
        return
    holder.require_gold("evaluate", "score runs against the qrels of a dataset with gold mentions")


def evaluate_files(run_paths: Sequence[Path], qrels_path: Path, definition: str = "trec",
                   spans_paths: Sequence[Path] | None = None, dataset: Path | None = None,
                   metrics: Sequence[str] | None = None, curves: bool = False,
                   cluster_k: int | None = None) -> list[Evaluation]:
    """Evaluate each TREC run file against one qrels file (read once), in the order given.

    ``spans_paths`` (one reader spans file per run, same order) adds EM and F1, which need the
    ``dataset`` directory the spans' offsets point into. Raises ``InputError`` when the counts
    differ or the dataset is missing. ``metrics`` as in ``evaluate_run``; ``curves`` adds each
    run's R@k and MRR@k at every cut-off (``Evaluation.curve``, for ``plot_curves``). ``cluster_k`` (with
    spans) adds each query's top k scored as a cluster: per-query B³ (``query_clusters.py``).
    """
    check_definition(definition)
    spans_paths = list(spans_paths or [])
    if spans_paths and len(spans_paths) != len(run_paths):
        raise InputError(f"give one spans file per run, in the same order: {len(run_paths)} run(s) but "
                         f"{len(spans_paths)} spans file(s)")
    if spans_paths and dataset is None:
        raise InputError("span evaluation (--spans) needs the dataset the spans point into (--dataset DATASET)")
    if dataset is not None and not spans_paths:
        raise InputError("a dataset (--dataset) is only used to evaluate spans; add --spans RUN.spans.jsonl")
    if cluster_k is not None and not spans_paths:
        raise InputError("--cluster-k scores the mentions a run's spans mark: add --spans RUN.spans.jsonl and "
                         "--dataset DATASET")
    all_at_least_one({"--cluster-k": cluster_k})
    # opened first, so that a wrong directory fails before any run is read
    data = Dataset(Path(dataset)).require_gold("evaluate --spans") if dataset is not None else None
    _check_dataset_qrels(Path(qrels_path))
    qrels = read_qrels(Path(qrels_path))
    if not qrels:
        raise InputError(f"{qrels_path}: holds no judgments (lines 'qid 0 doc_id relevance'); is it the qrels "
                         "of a split without queries?")
    evaluations = []
    for position, (path, name) in enumerate(zip(run_paths, run_names(run_paths), strict=True)):
        run = read_run(Path(path))
        spans = None
        if data is not None:
            spans = score_spans(Path(spans_paths[position]), data, qrels, run)
        evaluation = evaluate_run(run, qrels, definition, name, spans=spans, metrics=metrics)
        if cluster_k is not None and data is not None:
            clusters = score_query_clusters(run, Path(spans_paths[position]), data, cluster_k)
            evaluation.aggregate.update(clusters.aggregate())
            for qid, values in clusters.per_query.items():
                evaluation.per_query.setdefault(qid, {}).update(
                    {f"cluster {name}@{cluster_k}": value for name, value in values.items()})
        if curves:
            evaluation.curve = cutoff_curve(run, qrels, definition, name)
        evaluations.append(evaluation)
    return evaluations
