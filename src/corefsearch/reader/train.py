"""Train a reader (``corefsearch train reader``): the DPR reader or the integrated coreference reader.

As in CoreSearch (Eirew et al. 2022, §4; DESIGN.md §4): each training query is read with one
relevant passage (the positive, drawn from the relevant passages the retriever found in its top
``negatives_from``, else from all relevant ones) and ``negatives`` passages drawn from the
retriever's top ``negatives_from`` that are not relevant (nor the query's own passage, nor a
passage holding another mention of its cluster). The run comes from ``corefsearch search``
with any retriever; train on the retriever (and depth) the reader will re-rank at inference. The
loss is ``span_weight`` × the start + end cross-entropy of the gold span in the positive plus the
cross-entropy of choosing the positive among the query's passages (softmax over the passage
scores of the head, see ``model.py``), with ``ranking_loss="softmax+pairwise"`` plus a margin
ranking term between the positive and each negative. ``batch_size`` queries make one optimizer
step (their gradients accumulate, each query read on its own: its windows sorted by length and
read in a few passes, each padded to its own longest window, see
:func:`~corefsearch.reader.inputs.length_buckets`, as ``Reader.read`` reads them at inference).

After each epoch the reader re-ranks the dev queries' top ``dev_rerank_k`` passages of the same
run, and the same reader scores are also fused with the run's ranks (RRF, as ``search
--rerank-fusion rrf``); the epoch with the best dev MRR@10 of the reader alone is kept (without
dev queries in the run, the last), and the fusion with the better dev MRR@10 at that epoch is
recorded in the reader's ``corefsearch_reader.json`` (``fusion``), which ``search`` then uses.
The run is :class:`ReaderTask` driven by the one training loop (``corefsearch.training.loop``),
as the retriever's is: the working folder ``.OUT.training/`` makes it resumable
(``training/checkpoint.py``); ``OUT`` appears in one rename at the end with the reader (Hugging
Face folder + ``reader_head.safetensors`` + ``corefsearch_reader.json``), ``training_args.json``
and ``dev_curve.json``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import write_manifest
from corefsearch.base.errors import InputError
from corefsearch.base.model_card import write_model_card
from corefsearch.base.progress import track
from corefsearch.base.schema import Hit, Query
from corefsearch.datasets.dataset import Dataset
from corefsearch.evaluate import evaluate_run
from corefsearch.evaluate.metrics import rank_documents
from corefsearch.io.outputs import Output, model_input, writes_outputs
from corefsearch.io.trec import read_qrels, read_run
from corefsearch.io.write import sha256_file
from corefsearch.reader.arguments import ReaderTrainingArguments
from corefsearch.reader.batches import ReaderData, ReaderExample, epoch_examples
from corefsearch.reader.loss import example_loss
from corefsearch.reader.model import CrossEncoderReader
from corefsearch.reader.read import Reader
from corefsearch.reader.rerank import order_reranked
from corefsearch.training import (
    TRAINING_ARGS_FILE,
    Log,
    LoopResult,
    Run,
    TrainingSummary,
    TrainingTask,
    start_run,
)
from corefsearch.training.loop import metrics_text

if TYPE_CHECKING:
    import torch


SELECTION_METRIC = "MRR@10"
RRF_METRIC = "MRR@10 rrf"  # the dev curve's MRR@10 of the reader's scores fused with the run's ranks
RETRIEVER_METRIC = "retriever MRR@10"  # epoch 0's reference: the run's own ranking


@dataclass
class ReaderExtras:
    """What :class:`~corefsearch.training.run.TrainingSummary` holds for a reader alone."""

    train_queries: int
    fusion: str = "reader"  # recorded in the reader's folder: what `search --reader` uses by default
    fusion_dev: dict[str, float] | None = None  # the kept epoch's dev MRR@10 per fusion (None: no dev queries)


def _ranked(scores: dict[str, float]) -> list[str]:
    return rank_documents(scores)


def _read_runs(run_paths: Sequence[Path]) -> dict[str, dict[str, float]]:
    """The runs of ``run_paths`` as one (e.g. a run of the train queries and one of the dev queries); a query in
    two of them is one line naming both files."""
    merged: dict[str, dict[str, float]] = {}
    source: dict[str, Path] = {}
    for path in run_paths:
        for qid, hits in read_run(path).items():
            if qid in merged:
                raise InputError(f"query {qid} is in both {source[qid]} and {path}; give each query's run once")
            merged[qid], source[qid] = hits, path
    return merged


def _runs_text(run_paths: Sequence[Path]) -> str:
    return " and ".join(str(p) for p in run_paths)


def _load_data(dataset: Dataset, run_paths: Sequence[Path], args: ReaderTrainingArguments, log: Log) -> ReaderData:
    run = _read_runs(run_paths)
    run_path = _runs_text(run_paths)
    queries: dict[str, list[Query]] = {}
    relevant: dict[str, set[str]] = {}
    for split in ("train", "dev"):
        if not (dataset.queries_path(split).exists() and dataset.qrels_path(split).exists()):
            queries[split] = []
            continue
        judged = read_qrels(dataset.qrels_path(split))
        for qid, pids in judged.items():
            relevant[qid] = {pid for pid, rel in pids.items() if rel > 0}
        queries[split] = [q for q in dataset.queries(split) if q.id in run and relevant.get(q.id)]
    train, dev = queries["train"], queries["dev"]
    if not train:
        raise InputError(f"{run_path} holds no train query of {dataset.root} with relevant passages; "
                         f"search {dataset.queries_path('train')} first (`corefsearch search`)")
    if args.max_train_queries is not None and len(train) > args.max_train_queries:
        chosen = set(random.Random(args.seed).sample(range(len(train)), args.max_train_queries))
        train = [q for i, q in enumerate(train) if i in chosen]
    if not dev:
        log(f"{run_path} holds no dev queries: dev evaluation is skipped and the last epoch is kept.")
    elif args.dev_max_queries is not None and len(dev) > args.dev_max_queries:
        chosen = set(random.Random(args.seed).sample(range(len(dev)), args.dev_max_queries))
        dev = [q for i, q in enumerate(dev) if i in chosen]
    ranked = {}
    needed: set[str] = set()
    train_ids = {q.id for q in train}
    for query in train + dev:
        depth = args.negatives_from if query.id in train_ids else args.dev_rerank_k
        ranked[query.id] = [pid for pid in _ranked(run[query.id]) if pid != query.passage_id][:depth]
        needed.update(ranked[query.id])
    for query in train:
        needed.update(relevant[query.id])
    passages = {p.id: p for p in dataset.passages() if p.id in needed}
    missing = sorted(needed - set(passages))
    if missing:
        raise InputError(f"{run_path} or the qrels name passages that are not in {dataset.passages_path} "
                         f"(e.g. {missing[0]}); was the run searched on another dataset?")
    return ReaderData(train, dev, relevant, ranked, passages)


def evaluate_dev(reader: Reader, data: ReaderData, depth: int) -> dict[str, float]:
    """Dev MRR@10 (trec_eval semantics) of the reader re-ranking the run's top ``depth``: by its
    score alone (``MRR@10``), and fused with the run's ranks by RRF as ``search --rerank-fusion
    rrf`` does (``MRR@10 rrf``; the same reader scores)."""
    run, fused = {}, {}
    for query in track(data.dev, "Dev re-ranking"):
        pids = data.ranked[query.id][:depth]
        hits = reader.read(query, [(pid, data.passages[pid].text) for pid in pids])
        run[query.id] = {hit.passage_id: hit.score for hit in hits}
        retrieved = [Hit(pid, -float(rank)) for rank, pid in enumerate(pids)]  # the run's order
        fused[query.id] = {hit.passage_id: hit.score for hit in order_reranked(hits, retrieved, depth, "rrf")}
    qrels = {q.id: dict.fromkeys(data.relevant[q.id], 1) for q in data.dev}
    return {SELECTION_METRIC: round(evaluate_run(run, qrels, definition="trec", name="dev").aggregate[
                SELECTION_METRIC], 6),
            RRF_METRIC: round(evaluate_run(fused, qrels, definition="trec", name="dev rrf").aggregate[
                SELECTION_METRIC], 6)}


def chosen_fusion(dev_curve: list[dict[str, Any]], best_epoch: int | None) -> tuple[str, dict[str, float] | None]:
    """The ``--rerank-fusion`` with the better dev MRR@10 at the kept epoch (``reader`` on a tie,
    and without dev scores), with both values."""
    entry = next((e for e in dev_curve if e.get("epoch") == best_epoch and e.get(RRF_METRIC) is not None
                  and e.get(SELECTION_METRIC) is not None), None)
    if entry is None:
        return "reader", None
    dev = {"reader": entry[SELECTION_METRIC], "rrf": entry[RRF_METRIC]}
    return ("rrf" if dev["rrf"] > dev["reader"] else "reader"), dev


def retriever_dev(data: ReaderData) -> dict[str, float]:
    """The run's own dev MRR@10 on the same queries: the reference a reader should beat."""
    run = {q.id: {pid: -float(rank) for rank, pid in enumerate(data.ranked[q.id])} for q in data.dev}
    qrels = {q.id: dict.fromkeys(data.relevant[q.id], 1) for q in data.dev}
    return {SELECTION_METRIC: round(evaluate_run(run, qrels, definition="trec", name="dev").aggregate[
        SELECTION_METRIC], 6)}


def _weights(reader: CrossEncoderReader) -> dict[str, Any]:
    return {"model": {k: v.detach().cpu() for k, v in reader.model.state_dict().items()},
            "head": {k: v.detach().cpu() for k, v in reader.head.state_dict().items()}}


def _load_weights(reader: CrossEncoderReader, weights: dict[str, Any]) -> None:
    reader.model.load_state_dict(weights["model"])
    reader.head.load_state_dict(weights["head"])


def _training_outputs(a: dict[str, Any]) -> list[Output]:
    args = a["args"] or ReaderTrainingArguments()
    runs = [a["run_path"]] if isinstance(a["run_path"], (str, Path)) else list(a["run_path"])
    return [Output(a["out"], "--out", "dir", [("DATASET", a["dataset_dir"]), *(("--run", r) for r in runs),
                                              ("--base-model", model_input(args.base_model))])]


@writes_outputs(_training_outputs)
def train_reader(dataset_dir: Path, run_path: Path | Sequence[Path], out: Path,
                 args: ReaderTrainingArguments | None = None, *, overwrite: bool = False, log: Log | None = None,
                 on_step: Callable[[int, float], None] | None = None) -> TrainingSummary[ReaderExtras]:
    """Train a reader on the train queries of ``run_path`` (searched on ``dataset_dir``) into ``out``; ``run_path``
    may be several runs (e.g. one of the train queries, one of the dev queries), read as one."""
    args = args or ReaderTrainingArguments()
    run_paths = [Path(run_path)] if isinstance(run_path, (str, Path)) else [Path(p) for p in run_path]
    run, dataset = start_run(args, out, overwrite=overwrite, log=log,
                             open_inputs=lambda: _open_inputs(Path(dataset_dir), run_paths))
    data = _load_data(dataset, run_paths, args, run.log)
    # One run: its path and sha256 as before; several: one line each, in the order given.
    paths = [str(p.resolve()) for p in run_paths]
    digests = ["sha256:" + sha256_file(p) for p in run_paths]
    run.claim(dataset, {"run": paths[0] if len(paths) == 1 else paths,
                        "run_sha256": digests[0] if len(digests) == 1 else digests})

    steps_per_epoch = math.ceil(len(epoch_examples(data, args, 1)) / args.batch_size)
    if steps_per_epoch == 0:
        raise InputError(f"no training example: no train query of {_runs_text(run_paths)} has both a relevant "
                         "passage with its mention and a retrieved non-relevant passage")

    model = CrossEncoderReader.from_base(args.base_model, args.reader_config(), run.device)
    task = ReaderTask(model=model, args=args, data=data, steps_per_epoch=steps_per_epoch, run=run)
    result = run.train(task, on_step)
    fusion, fusion_dev = chosen_fusion(result.dev_curve, result.best_epoch)
    return run.summary(result, ReaderExtras(len(data.train), fusion, fusion_dev))


def _open_inputs(dataset_dir: Path, run_paths: Sequence[Path]) -> Dataset:
    dataset = Dataset(dataset_dir).require_gold("train reader")
    if not run_paths:
        raise InputError("give a run: --run RUN (a TREC run of the train and dev queries from `corefsearch search`)")
    for run_path in run_paths:
        if not run_path.is_file():
            raise InputError(f"{run_path}: no such run file; write one with `corefsearch search --queries "
                             f"{dataset.queries_path('train')} ...`")
    return dataset


class ReaderTask(TrainingTask):
    """A reader as a :class:`~corefsearch.training.task.TrainingTask`: ``batch_size`` queries a
    step, each read on its own (its windows in length buckets) with gradients that accumulate
    (``backward``); dev MRR@10 of re-ranking the run, alone and fused with the run's ranks;
    epoch 0 of the dev curve is the run's own ranking."""

    selection_metric = SELECTION_METRIC

    def __init__(self, *, model: CrossEncoderReader, args: ReaderTrainingArguments, data: ReaderData,
                 steps_per_epoch: int, run: Run) -> None:
        self.model, self.reader, self.args, self.data = model, Reader(model), args, data
        self.steps_per_epoch, self.run, self.log = steps_per_epoch, run, run.log

    @property
    def has_dev(self) -> bool:
        return bool(self.data.dev)

    def parameter_groups(self) -> list[tuple[torch.nn.Module, float]]:
        # The head starts from random weights: at the encoder's learning rate its passage score
        # hardly moves in a short run, so it gets its own (larger) one.
        return [(self.model.model, self.args.lr), (self.model.head, self.args.head_lr)]

    def epoch_batches(self, epoch: int) -> list[list[ReaderExample]]:
        examples = epoch_examples(self.data, self.args, epoch)
        size = self.args.batch_size
        return [examples[i:i + size] for i in range(0, len(examples), size)]

    def loss(self, batch: list[ReaderExample]) -> torch.Tensor:
        """The batch's mean example loss in one graph (``backward`` does the same query by query)."""
        import torch

        losses = [loss for loss in (self.example_loss(e) for e in batch) if loss is not None]
        if not losses:
            return torch.zeros((), requires_grad=True)
        return torch.stack(losses).sum() / len(batch)

    def example_loss(self, example: ReaderExample) -> torch.Tensor | None:
        return example_loss(self.reader, example, self.data.passages, self.args.span_weight, self.args.ranking_loss)

    def backward(self, batch: list[ReaderExample]) -> float:
        # Each query's graph is freed after its own backward pass: a batch of queries with their
        # negatives does not fit in memory at once (and reading a step's queries in one graph
        # was no faster on a CPU: 17.4 against 18.3 s a step, see the reader-train notes). The
        # step's loss: the mean over the examples that have one (an example without a window
        # holding its gold span is skipped).
        total, counted = 0.0, 0
        for example in batch:
            loss = self.example_loss(example)
            if loss is None:
                continue
            self.scaled(loss / len(batch)).backward()
            total += float(loss.detach())
            counted += 1
        return total / counted if counted else 0.0

    def baseline(self) -> dict[str, Any] | None:
        """The untrained reader (the loop keeps it when no epoch beats it), with the run's own ranking as the
        reference a reader should beat (``retriever MRR@10``)."""
        reference = retriever_dev(self.data)[SELECTION_METRIC]
        self.log(f"Retriever alone: dev {SELECTION_METRIC} {reference:.4f} ({len(self.data.dev):,} dev queries).")
        start = self.dev_metrics()
        self.log(f"Untrained reader: dev {metrics_text(start)}.")
        return {**start, RETRIEVER_METRIC: reference, "note": "untrained"}

    def dev_metrics(self) -> dict[str, float]:
        return evaluate_dev(self.reader, self.data, self.args.dev_rerank_k)

    def weights(self) -> dict[str, Any]:
        return {"weights": _weights(self.model)}

    def load_weights(self, saved: dict[str, Any]) -> None:
        _load_weights(self.model, saved["weights"])

    def save(self, folder: Path, result: LoopResult) -> None:
        fusion, fusion_dev = chosen_fusion(result.dev_curve, result.best_epoch)
        self.model.config.fusion = fusion  # corefsearch_reader.json: what `search --reader` uses by default
        record = self.run.finished_record(
            counts={"train_queries": len(self.data.train), "dev_queries": len(self.data.dev),
                    "steps_per_epoch": result.steps_per_epoch, "total_steps": result.total_steps},
            best_epoch=result.best_epoch, selection_metric=SELECTION_METRIC if self.data.dev else None,
            fusion={"chosen": fusion, "dev": fusion_dev, "metric": SELECTION_METRIC if fusion_dev else None,
                    "epoch": result.best_epoch if fusion_dev else None})
        self.model.save(folder)
        write_manifest(folder / TRAINING_ARGS_FILE, record)

        write_model_card(folder, self.args, record, result.dev_curve, self.run.manifest, name=str(self.run.out))
