"""``train retriever | reader | clusterer | detector``: the four trainers, each resumable."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer

from corefsearch.cli.app import app, console, log_line, user_errors
from corefsearch.cli.options import PrecisionOption
from corefsearch.cli.report import print_training_summary

# --- corefsearch train ... ----------------------------------------------------------------------------

T = TypeVar("T")

train_app = typer.Typer(help="Train models on a dataset.", no_args_is_help=True)
app.add_typer(train_app, name="train")

ThreadsOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="CPU threads of the model (torch.set_num_threads; default: torch's, one per core).")]
LogEveryOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="Log a line (step, loss, steps/s, ETA) every N steps (0: never; default: 50 when stderr is not a "
         "terminal, e.g. under nohup, where the progress bar does not show).")]
SeedOption = Annotated[int, typer.Option(help="Random seed.")]
MaxStepsOption = Annotated[Optional[int], typer.Option(help="Stop after N optimizer steps in all.")]  # noqa: UP045
TrainDeviceOption = Annotated[str, typer.Option(help="auto | cpu | cuda")]
CheckpointEveryOption = Annotated[int, typer.Option(help="Also checkpoint every N steps (0: at epoch ends only).")]
RetrainOption = Annotated[bool, typer.Option(help="Retrain into an existing model directory.")]


def training_arguments(cls: type[T], given: dict[str, Any]) -> T:
    """The trainer's arguments from a command's parameters (its ``locals()``): every field of ``cls`` the
    command declares, by name; the command's own parameters (dataset, out, overwrite, ...) are not fields."""
    names = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{name: value for name, value in given.items() if name in names})


@train_app.command("retriever")
@user_errors
def train_retriever_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train; dev selects).")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
    index: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--index", help="Lucene index of DATASET for BM25 hard negatives (none: in-batch negatives only).")] = None,
    base_model: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Hugging Face model name or folder (default: the bundled all-MiniLM-L6-v2).")] = None,
    shared_encoder: Annotated[bool, typer.Option(
        "--shared-encoder", help="One encoder for queries and passages (default: two, as in DPR).")] = False,
    markers: Annotated[bool, typer.Option(help="Boundary tokens around the query mention.")] = True,
    pooling: Annotated[str, typer.Option(help="cls | mean")] = "cls",
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 5,
    batch_size: Annotated[int, typer.Option(help="Examples per batch (in-batch negatives).")] = 16,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 1e-5,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.")] = 0.01,
    warmup: Annotated[float, typer.Option(help="Linear warm-up, as a fraction of the steps.")] = 0.1,
    max_query_len: Annotated[int, typer.Option(help="Query window in tokens, grown around the mention.")] = 64,
    max_passage_len: Annotated[int, typer.Option(help="Passage length in tokens.")] = 180,
    hard_negatives: Annotated[int, typer.Option(
        help="Draw one hard negative per example from the BM25 top N not relevant (0: none).")] = 20,
    refresh_negatives: Annotated[bool, typer.Option(
        "--refresh-negatives", help="Before each epoch after the first, re-mine the hard negatives with the "
                                    "retriever being trained: its top N of the training passages (ANCE).")] = False,
    positives_per_query: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="At most N positives per query per epoch, sampled (default: all).")] = None,
    seed: SeedOption = 13,
    max_steps: MaxStepsOption = None,
    device: TrainDeviceOption = "auto",
    precision: PrecisionOption = "auto",
    dev_max_queries: Annotated[int, typer.Option(
        help="Dev queries (a seeded sample) scored over the dev passages after each epoch.")] = 500,
    threads: ThreadsOption = None,
    log_every: LogEveryOption = None,
    checkpoint_every: CheckpointEveryOption = 500,
    overwrite: RetrainOption = False,
) -> None:
    """Train the mention-aware DPR bi-encoder; resumes an interrupted run of the same command."""
    from corefsearch.dense.train import RetrieverTrainingArguments, train_retriever

    args = training_arguments(RetrieverTrainingArguments, locals())
    summary = train_retriever(dataset, out, args, index=index, overwrite=overwrite,
                              log=log_line)
    print_training_summary(summary, console)


@train_app.command("reader")
@user_errors
def train_reader_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train; dev selects).")],
    run: Annotated[Path, typer.Option(
        "--run", help="TREC run of the train (and dev) queries from `corefsearch search`, any retriever.")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
    head: Annotated[str, typer.Option(help="dpr (start/end + passage selection) | integrated (coreference).")
                    ] = "integrated",
    base_model: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Hugging Face model name or folder (default: the bundled all-MiniLM-L6-v2).")] = None,
    markers: Annotated[bool, typer.Option(help="Boundary tokens around the query mention.")] = True,
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 3,
    batch_size: Annotated[int, typer.Option(help="Queries per optimizer step.")] = 4,
    lr: Annotated[float, typer.Option(help="AdamW learning rate of the encoder.")] = 2e-5,
    head_lr: Annotated[float, typer.Option(help="AdamW learning rate of the (randomly initialised) head.")
                       ] = 1e-3,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.")] = 0.01,
    warmup: Annotated[float, typer.Option(help="Linear warm-up, as a fraction of the steps.")] = 0.1,
    negatives: Annotated[int, typer.Option(help="Retrieved non-relevant passages per query.")] = 23,
    negatives_from: Annotated[int, typer.Option(
        help="Draw the negatives (and the positive) from the run's top N (the --rerank-k it will re-rank).")] = 50,
    span_weight: Annotated[float, typer.Option(
        help="Weight of the span (start + end) cross-entropy against the passage-selection term.")] = 1.0,
    ranking_loss: Annotated[str, typer.Option(
        help="softmax (cross-entropy of the positive among the query's passages) | softmax+pairwise (plus a "
             "margin ranking term between the positive and each negative).")] = "softmax",
    max_length: Annotated[int, typer.Option(help="Tokens per [query ; passage] input.")] = 256,
    max_query_len: Annotated[int, typer.Option(help="Query window in tokens, grown around the mention.")] = 64,
    doc_stride: Annotated[int, typer.Option(help="Tokens between the starts of a long passage's windows.")] = 128,
    max_span_len: Annotated[int, typer.Option(help="Longest span (tokens) extracted at inference.")] = 10,
    hidden: Annotated[int, typer.Option(help="Integrated head: hidden units of its FFNNs.")] = 128,
    seed: SeedOption = 13,
    max_steps: MaxStepsOption = None,
    max_train_queries: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="Train on a seeded sample of N train queries (default: all in the run).")] = None,
    dev_max_queries: Annotated[int, typer.Option(help="Dev queries re-ranked after each epoch.")] = 200,
    threads: ThreadsOption = None,
    log_every: LogEveryOption = None,
    dev_rerank_k: Annotated[int, typer.Option(help="Dev: re-rank the run's top N.")] = 50,
    device: TrainDeviceOption = "auto",
    precision: PrecisionOption = "auto",
    checkpoint_every: CheckpointEveryOption = 500,
    overwrite: RetrainOption = False,
) -> None:
    """Train a reader that re-ranks retrieved passages and marks the coreferring span; resumable."""
    from corefsearch.reader.train import ReaderTrainingArguments, train_reader

    args = training_arguments(ReaderTrainingArguments, locals())
    summary = train_reader(dataset, run, out, args, overwrite=overwrite,
                           log=log_line)
    print_training_summary(summary, console)


@train_app.command("clusterer")
@user_errors
def train_clusterer_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train clusters; dev "
                                                 "picks the epoch and τ).")],
    out: Annotated[Path, typer.Option("--out", help="Mention encoder directory to write.")],
    base_model: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Hugging Face model name or folder (default: the bundled all-MiniLM-L6-v2).")] = None,
    objective: Annotated[str, typer.Option(
        help="topic-batch (every pair of a batch of one train topic's mentions) | pairs (drawn mention pairs, "
             "Hsu & Horwood).")] = "topic-batch",
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 3,
    batch_size: Annotated[int, typer.Option(
        help="Mentions (--objective topic-batch) or mention pairs (pairs) per optimizer step.")] = 64,
    lr: Annotated[float, typer.Option(help="AdamW learning rate of the encoder.")] = 5e-5,
    head_lr: Annotated[float, typer.Option(help="AdamW learning rate of the (randomly initialised) MLPs.")] = 1e-3,
    margin: Annotated[float, typer.Option(help="Contrastive loss margin m (on d = 1 - cos).")] = 0.5,
    negatives_per_positive: Annotated[float, typer.Option(help="Negative pairs per positive pair.")] = 3.0,
    max_positives_per_cluster: Annotated[int, typer.Option(
        help="At most N positive pairs per cluster (a seeded sample of a larger cluster's pairs).")] = 200,
    hard_negatives_k: Annotated[int, typer.Option(
        help="Hard negatives from each mention's N nearest mentions by the untrained encoder (computed once; "
             "0: topic negatives only).")] = 10,
    remine_negatives: Annotated[bool, typer.Option(
        "--remine-negatives", help="Before each epoch after the first, re-mine with the encoder being trained: "
                                   "the pairs' hard negatives (the N nearest mentions of the same topic), or "
                                   "topic batches that gather a mention's nearest mentions.")] = False,
    scope: Annotated[str, typer.Option(
        help="Dev clustering within: topic (gold topics) | predicted-topic (TF-IDF document clusters).")] = "topic",
    lemma_weights: Annotated[str, typer.Option(
        help="Lemma weights β tried on dev with every τ, comma-separated (a shared head lemma takes β off a "
             "pair's cosine distance when clustering); the best is saved with the model.")] = "0",
    seed: SeedOption = 13,
    max_steps: MaxStepsOption = None,
    device: TrainDeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    log_every: LogEveryOption = None,
    checkpoint_every: CheckpointEveryOption = 500,
    overwrite: RetrainOption = False,
) -> None:
    """Train the contrastive mention encoder for `cluster --method encoder`; resumable."""
    from corefsearch.cluster.train import ClustererTrainingArguments, train_clusterer

    args = training_arguments(ClustererTrainingArguments, locals())
    summary = train_clusterer(dataset, out, args, overwrite=overwrite,
                              log=log_line)
    print_training_summary(summary, console)




@train_app.command("detector")
@user_errors
def train_detector_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset with every gold mention of "
                                                 "its passages (train; dev picks the epoch).")],
    out: Annotated[Path, typer.Option("--out", help="Detector directory to write.")],
    base_model: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Hugging Face model name or folder (default: the bundled all-MiniLM-L6-v2).")] = None,
    mention_type: Annotated[str, typer.Option(help="all | event | entity: the mention types tagged.")] = "all",
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 3,
    batch_size: Annotated[int, typer.Option(help="Passages per optimizer step.")] = 16,
    lr: Annotated[float, typer.Option(help="AdamW learning rate of the encoder.")] = 5e-5,
    head_lr: Annotated[float, typer.Option(help="AdamW learning rate of the (randomly initialised) tag head.")
                       ] = 1e-3,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.")] = 0.01,
    warmup: Annotated[float, typer.Option(help="Linear warm-up, as a fraction of the steps.")] = 0.1,
    max_length: Annotated[int, typer.Option(help="Tokens per window of a passage.")] = 256,
    stride: Annotated[int, typer.Option(help="Tokens two windows of a long passage share.")] = 64,
    tagging: Annotated[str, typer.Option(
        help="word (the first piece of each word is tagged, spans cover whole words) | piece (every word piece).")
    ] = "word",
    encode_batch_size: Annotated[int, typer.Option(help="Dev passages per batch when detecting.")] = 64,
    seed: SeedOption = 13,
    max_steps: MaxStepsOption = None,
    device: TrainDeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    log_every: LogEveryOption = None,
    checkpoint_every: CheckpointEveryOption = 500,
    overwrite: RetrainOption = False,
) -> None:
    """Train a mention detector (BIO tags per type) for `corefsearch detect`; resumable."""
    from corefsearch.detect.train import DetectorTrainingArguments, train_detector

    args = training_arguments(DetectorTrainingArguments, locals())
    summary = train_detector(dataset, out, args, overwrite=overwrite, log=log_line)
    print_training_summary(summary, console)
