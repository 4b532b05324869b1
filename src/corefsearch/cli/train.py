"""``train retriever | reader | clusterer | pair-scorer | detector``: the five trainers, each resumable.

A trainer's options are the fields of its arguments dataclass (defaults and ``--help`` texts there,
``corefsearch.cli.fields`` turns them into Typer options); the options written here are those that are
no training argument: the inputs, ``--out`` and ``--overwrite``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from corefsearch.cli.app import app, console, log_line, user_errors
from corefsearch.cli.fields import options_from
from corefsearch.cli.report import print_training_summary
from corefsearch.cluster.arguments import ClustererTrainingArguments
from corefsearch.dense.arguments import RetrieverTrainingArguments
from corefsearch.detect.arguments import DetectorTrainingArguments
from corefsearch.pair_scorer.arguments import PairScorerTrainingArguments
from corefsearch.reader.arguments import ReaderTrainingArguments

# --- corefsearch train ... ----------------------------------------------------------------------------

train_app = typer.Typer(help="Train models on a dataset.", no_args_is_help=True)
app.add_typer(train_app, name="train")

RetrainOption = Annotated[bool, typer.Option(help="Retrain into an existing model directory.")]

# The order of each command's training options in --help.
RETRIEVER_OPTIONS = ("base_model", "shared_encoder", "markers", "pooling", "epochs", "batch_size", "lr", "weight_decay",
                     "warmup", "max_query_len", "max_passage_len", "hard_negatives", "refresh_negatives",
                     "positives_per_query", "seed", "max_steps", "device", "precision", "dev_max_queries", "threads",
                     "log_every", "checkpoint_every")
READER_OPTIONS = ("head", "base_model", "markers", "epochs", "batch_size", "lr", "head_lr", "weight_decay", "warmup",
                  "negatives", "negatives_from", "span_weight", "ranking_loss", "max_length", "max_query_len",
                  "doc_stride", "max_span_len", "hidden", "seed", "max_steps", "max_train_queries", "dev_max_queries",
                  "threads", "log_every", "dev_rerank_k", "device", "precision", "checkpoint_every")
CLUSTERER_OPTIONS = ("base_model", "objective", "epochs", "batch_size", "lr", "head_lr", "margin",
                     "negatives_per_positive", "max_positives_per_cluster", "hard_negatives_k", "remine_negatives",
                     "scope", "lemma_weights", "seed", "max_steps", "device", "precision", "threads", "log_every",
                     "checkpoint_every")
PAIR_SCORER_OPTIONS = ("base_model", "epochs", "batch_size", "lr", "head_lr", "neighbours", "same_lemma",
                       "lemma_heuristic", "negatives_per_positive", "max_pairs", "both_orders", "scope",
                       "dev_max_pairs", "max_length", "seed", "max_steps", "device", "precision", "threads",
                       "log_every", "checkpoint_every")
DETECTOR_OPTIONS = ("base_model", "mention_type", "epochs", "batch_size", "lr", "head_lr", "weight_decay", "warmup",
                    "max_length", "stride", "tagging", "encode_batch_size", "seed", "max_steps", "device", "precision",
                    "threads", "log_every", "checkpoint_every")


@train_app.command("retriever")
@user_errors
@options_from(RetrieverTrainingArguments, order=RETRIEVER_OPTIONS)
def train_retriever_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train; dev selects).")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
    index: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--index", help="Lucene index of DATASET for BM25 hard negatives (none: in-batch negatives only).")] = None,
    *,
    args: RetrieverTrainingArguments,
    overwrite: RetrainOption = False,
) -> None:
    """Train the mention-aware DPR bi-encoder; resumes an interrupted run of the same command."""
    from corefsearch.dense.train import train_retriever

    summary = train_retriever(dataset, out, args, index=index, overwrite=overwrite, log=log_line)
    print_training_summary(summary, console)


@train_app.command("reader")
@user_errors
@options_from(ReaderTrainingArguments, order=READER_OPTIONS)
def train_reader_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train; dev selects).")],
    run: Annotated[list[Path], typer.Option(
        "--run", help="TREC run of the train (and dev) queries from `corefsearch search`, any retriever; repeat it "
                      "for several files (e.g. --run train.trec --run dev.trec), read as one.")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
    *,
    args: ReaderTrainingArguments,
    overwrite: RetrainOption = False,
) -> None:
    """Train a reader that re-ranks retrieved passages and marks the coreferring span; resumable."""
    from corefsearch.reader.train import train_reader

    summary = train_reader(dataset, run, out, args, overwrite=overwrite, log=log_line)
    print_training_summary(summary, console)


@train_app.command("clusterer")
@user_errors
@options_from(ClustererTrainingArguments, order=CLUSTERER_OPTIONS)
def train_clusterer_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train clusters; dev "
                                                 "picks the epoch and τ).")],
    out: Annotated[Path, typer.Option("--out", help="Mention encoder directory to write.")],
    *,
    args: ClustererTrainingArguments,
    overwrite: RetrainOption = False,
) -> None:
    """Train the contrastive mention encoder for `cluster --method encoder`; resumable."""
    from corefsearch.cluster.train import train_clusterer

    summary = train_clusterer(dataset, out, args, overwrite=overwrite, log=log_line)
    print_training_summary(summary, console)


@train_app.command("pair-scorer")
@user_errors
@options_from(PairScorerTrainingArguments, order=PAIR_SCORER_OPTIONS)
def train_pair_scorer_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train clusters; dev "
                                                 "picks the epoch, the threshold and the linkage).")],
    out: Annotated[Path, typer.Option("--out", help="Pair scorer directory to write.")],
    encoder: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--encoder", help="Mention encoder from `train clusterer`: each mention's --neighbours nearest mentions "
                          "are candidate pairs (the encoder `cluster --model` then uses).")] = None,
    *,
    args: PairScorerTrainingArguments,
    overwrite: RetrainOption = False,
) -> None:
    """Train a mention-pair cross-encoder for `cluster --method encoder --pair-scorer`; resumable."""
    from corefsearch.pair_scorer.train import train_pair_scorer

    summary = train_pair_scorer(dataset, out, args, encoder=encoder, overwrite=overwrite, log=log_line)
    print_training_summary(summary, console)


@train_app.command("detector")
@user_errors
@options_from(DetectorTrainingArguments, order=DETECTOR_OPTIONS)
def train_detector_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset with every gold mention of "
                                                 "its passages (train; dev picks the epoch).")],
    out: Annotated[Path, typer.Option("--out", help="Detector directory to write.")],
    *,
    args: DetectorTrainingArguments,
    overwrite: RetrainOption = False,
) -> None:
    """Train a mention detector (BIO tags per type) for `corefsearch detect`; resumable."""
    from corefsearch.detect.train import train_detector

    summary = train_detector(dataset, out, args, overwrite=overwrite, log=log_line)
    print_training_summary(summary, console)
