"""``evaluate``: ranking metrics of runs, span metrics of a reader, coreference metrics of a clustering."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from corefsearch.base.errors import CorefSearchError
from corefsearch.cli.app import app, console, err_console, user_errors
from corefsearch.cli.fields import options_from


@dataclass
class EvaluateArgs:
    """The options of ``evaluate``: runs and their qrels, a reader's spans, or a clustering or a detection against a
    dataset."""

    qrels: Path | None = field(default=None, metadata={
        "option": "--qrels", "help": "TREC qrels (e.g. DATASET/qrels/test.txt); needed with RUN files."})
    definition: str = field(default="trec", metadata={
        "help": "trec (trec_eval semantics) | coresearch (the paper's code: micro-averaged recall)."})
    per_query: Path | None = field(default=None, metadata={"help": "Write per-query values to this CSV."})
    output_format: str = field(default="table", metadata={
        "help": "table | json | csv (one row per run, one column per metric)."})
    metrics: str | None = field(default=None, metadata={"help": (
        "Comma-separated metrics instead of the defaults: MRR@k, mAP@k, R@k (under --definition), `defaults`, or any "
        "ir-measures name (trec_eval semantics), e.g. defaults,nDCG@10,P@5,RR,AP,infAP.")})
    plot: Path | None = field(default=None, metadata={
        "help": "Draw the recall@k and MRR@k curves (k = 1 to the run depth) of every run into this PNG."})
    spans: list[Path] | None = field(default=None, metadata={"help": (
        "A reader's RUN.spans.jsonl, one per run in the same order: adds EM and F1 (SQuAD v1.1) over the relevant "
        "re-ranked passages; needs --dataset.")})
    dataset: Path | None = field(default=None, metadata={"help": (
        "With --spans: the dataset directory whose passages and queries the spans point into; with --clusters: the "
        "dataset whose gold clusters are the key.")})
    clusters: Path | None = field(default=None, metadata={"option": "--clusters", "help": (
        "Score this clustering ({mention_id, cluster_id} JSONL lines) against the gold clusters of --dataset instead "
        "of runs: MUC, B³, CEAF-e, LEA and CoNLL F1. Lines with a span (passage_id, start, end) are predicted "
        "mentions, matched to gold ones by exact span.")})
    split: str | None = field(default=None, metadata={"help": (
        "With --clusters: the split whose gold clusters are the key (default: test; with predicted mentions the gold "
        "mentions of the passages of the split, or all: of every passage, the default when no passage records a "
        "split).")})
    singletons: str | None = field(default=None, metadata={"help": (
        "With --clusters: keep | drop (remove the singleton clusters of key and response before scoring; default: "
        "keep, and both for predicted mentions).")})
    mentions: Path | None = field(default=None, metadata={"option": "--mentions", "help": (
        "Score predicted mentions (a predicted_mentions.jsonl from `corefsearch detect`, or a dataset folder holding "
        "one) against the gold mentions of --dataset instead of runs: P/R/F1 per type, strict and head match, over "
        "the passages annotated in full.")})
    cluster_k: int | None = field(default=None, metadata={"help": (
        "With --spans and --dataset: also score each query's top K as a cluster (the mentions its spans mark, with "
        "the query's own) against the query's gold cluster: per-query B³ P/R/F1.")})


@app.command("evaluate")
@user_errors
@options_from(EvaluateArgs)
def evaluate_command(
    runs: Annotated[Optional[list[Path]], typer.Argument(  # noqa: UP045
        metavar="[RUN]...", help="TREC run file(s); the first is the baseline.")] = None,
    *,
    args: EvaluateArgs,
) -> None:
    """Score runs: MRR@10, mAP@10, mAP@50, R@10, R@50, R@100, R@500 (and infAP on incomplete qrels).

    With --metrics other metrics (any ir-measures name), with --spans and --dataset also the
    reader's EM and F1, with --plot a PNG of the recall@k and MRR@k curves. With --clusters
    and --dataset (and no runs), score a coreference clustering: MUC, B³, CEAF-e, LEA, CoNLL F1.
    """
    from corefsearch.evaluate import evaluate_files, parse_metrics, render_table, to_csv, to_json, write_per_query_csv

    if args.output_format not in ("table", "json", "csv"):
        raise CorefSearchError(f"--output-format must be table, json or csv, got {args.output_format!r}")
    if args.mentions is not None:
        if args.clusters is not None or runs:
            raise CorefSearchError("--mentions scores a detection: leave out RUN files and --clusters")
        _evaluate_mentions(args.mentions, args.dataset, args.split, args.output_format)
        return
    if args.clusters is not None:
        _evaluate_clusters(args.clusters, runs, args.dataset, args.split, args.singletons, args.output_format,
                           {"--qrels": args.qrels, "--per-query": args.per_query, "--metrics": args.metrics,
                            "--plot": args.plot, "--spans": args.spans,
                            "--definition": None if args.definition == "trec" else args.definition,
                            "--cluster-k": args.cluster_k})
        return
    unused = [name for name, value in (("--split", args.split), ("--singletons", args.singletons))
              if value is not None]
    if unused:
        raise CorefSearchError(f"{' and '.join(unused)}: only with --clusters (scoring a clustering), not with runs")
    if not runs:
        raise CorefSearchError("give the RUN file(s) to score (with --qrels), or a clustering with --clusters")
    if args.qrels is None:
        raise CorefSearchError("--qrels is required to score runs (e.g. --qrels DATASET/qrels/test.txt)")
    chosen = parse_metrics(args.metrics) if args.metrics is not None else None
    inputs = [*(("RUN", run) for run in runs), ("--qrels", args.qrels),
              *(("--spans", path) for path in args.spans or ()), ("--dataset", args.dataset)]
    if args.plot is not None:  # before any work, as --per-query
        from corefsearch.io.outputs import check_output_file

        check_output_file(args.plot, "--plot", [*inputs, ("--per-query", args.per_query)])
    if args.per_query is not None:  # before any work: never one of the inputs, and writable
        from corefsearch.io.outputs import check_output_file

        check_output_file(args.per_query, "--per-query", inputs)
    evaluations = evaluate_files(runs, args.qrels, definition=args.definition, spans_paths=args.spans,
                                 dataset=args.dataset, metrics=chosen, curves=args.plot is not None,
                                 cluster_k=args.cluster_k)
    for evaluation in evaluations:
        for message in evaluation.warnings:
            err_console.print(f"[yellow]warning:[/yellow] {escape(f'{evaluation.name}: {message}')}",
                              highlight=False)
    if args.per_query is not None:
        write_per_query_csv(evaluations, args.per_query)
    if args.plot is not None:
        from corefsearch.evaluate import plot_curves

        plot_curves([evaluation.curve for evaluation in evaluations if evaluation.curve is not None], args.plot)
    if args.output_format == "json":
        sys.stdout.write(json.dumps(to_json(evaluations), indent=2) + "\n")
    elif args.output_format == "csv":
        sys.stdout.write(to_csv(evaluations))
    else:
        render_table(evaluations, console)


def _evaluate_clusters(clusters: Path, runs: list[Path] | None, dataset: Path | None, split: str | None,
                       singletons: str | None, output_format: str, run_options: dict[str, Any]) -> None:
    """`evaluate --clusters`: the coreference metrics of a clustering against the dataset's gold clusters."""
    if runs:
        raise CorefSearchError("give either RUN files (ranking metrics) or --clusters (coreference metrics), not both")
    given = [name for name, value in run_options.items() if value is not None]
    if given:
        them = "them" if len(given) > 1 else "it"
        raise CorefSearchError(f"{', '.join(given)} score runs, not a clustering: leave {them} out with --clusters")
    if dataset is None:
        raise CorefSearchError("--clusters needs --dataset DATASET (its clusters.jsonl holds the gold clusters)")
    from corefsearch.evaluate.coref_files import cluster_csv, evaluate_cluster_settings, render_cluster_table

    evaluations = evaluate_cluster_settings(clusters, dataset, split, singletons)
    for message in evaluations[0].warnings:
        err_console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)
    if output_format == "json":  # one object, or a list of them for both singleton settings
        values = [evaluation.to_json() for evaluation in evaluations]
        sys.stdout.write(json.dumps(values[0] if len(values) == 1 else values, indent=2) + "\n")
    elif output_format == "csv":
        sys.stdout.write(cluster_csv(evaluations))
    else:
        for evaluation in evaluations:
            render_cluster_table(evaluation, console)




def _evaluate_mentions(mentions: Path, dataset: Path | None, split: str | None, output_format: str) -> None:
    """`evaluate --mentions`: mention detection P/R/F1 against the dataset's gold mentions."""
    if dataset is None:
        raise CorefSearchError("--mentions needs --dataset DATASET (its passages hold the gold mentions)")
    from corefsearch.evaluate.mentions import detection_csv, evaluate_detection, render_detection_table

    evaluation = evaluate_detection(mentions, dataset, split or "auto")
    for message in evaluation.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)
    if output_format == "json":
        sys.stdout.write(json.dumps(evaluation.to_json(), indent=2) + "\n")
    elif output_format == "csv":
        sys.stdout.write(detection_csv(evaluation))
    else:
        render_detection_table(evaluation, console)
