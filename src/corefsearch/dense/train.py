"""Train the mention-aware DPR retriever (``corefsearch train retriever``).

The method is the CoreSearch paper's (Eirew et al. 2022, §4; DESIGN.md §4): a query encoder
and a passage encoder (or one shared encoder), the mention marked by boundary tokens, one
example per training query and relevant passage, one BM25 hard negative per example
(``examples.py``), NLL of the positive against the batch's passages with same-cluster
passages masked out (``loss.py``), AdamW with linear warm-up and decay, gradient clipping at
1.0, dropout as in the model config. After each epoch (and once before training, as epoch 0)
the encoders are scored on the dev queries over the dev passages (exact dot-product search,
MRR@10 and R@100 with trec_eval semantics, the query's own passage left out); the best
epoch's encoders are kept.

The run is :class:`RetrieverTask` driven by the one training loop (``corefsearch.training.loop``).
Resume and the atomic result fit together like this. Nothing is written to ``OUT`` while the
run lasts: the run lives in the hidden sibling folder ``.OUT.training/`` (see
``checkpoint.py``), which holds the options of the run, the mined hard negatives, the latest
checkpoint (written at the end of every epoch, every ``checkpoint_every`` steps and on
Ctrl-C) and the best encoders so far. Rerunning the same command finds that folder and, when
its options, dataset and index are the same, resumes from the checkpoint: it regenerates the
interrupted epoch's examples (a function of seed and epoch), skips the batches already done
and restores the optimizer, scheduler and random states, so the run ends after the same total
number of steps as an uninterrupted one. At the end the final model is assembled in a
temporary folder beside ``OUT`` and renamed to ``OUT`` in one step; then ``.OUT.training/``
is removed. Hence ``OUT`` existing means the run finished; retraining it needs ``--overwrite``
(which also discards a leftover run with other options instead of refusing to touch it).

Output: ``OUT/query_encoder/``, ``OUT/passage_encoder/`` (Hugging Face folders, tokenizer with
the markers), ``OUT/corefsearch_retriever.json``, ``OUT/training_args.json`` (all options, the
dataset and index, checksums, versions, counts) and ``OUT/dev_curve.json``
(``[{"epoch", "step", "loss", "MRR@10", "R@100", "seconds"}]``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import write_manifest
from corefsearch.base.errors import InputError
from corefsearch.base.memory import release_memory
from corefsearch.base.model_card import write_model_card
from corefsearch.base.schema import Query
from corefsearch.datasets.dataset import Dataset
from corefsearch.dense.arguments import RetrieverTrainingArguments
from corefsearch.dense.examples import (
    StoredPassage,
    TrainingExample,
    batches,
    epoch_examples,
    examples_per_epoch,
    read_relevant,
)
from corefsearch.dense.loss import batch_loss
from corefsearch.dense.mining import mine_in_child
from corefsearch.dense.model import BiEncoder
from corefsearch.evaluate import evaluate_run
from corefsearch.io.outputs import Output, model_input, writes_outputs
from corefsearch.io.write import sha256_file
from corefsearch.sparse.index import check_index_matches_dataset
from corefsearch.training import (
    TRAINING_ARGS_FILE,
    Log,
    LoopResult,
    Run,
    TrainingSummary,
    TrainingTask,
    start_run,
)
from corefsearch.training.checkpoint import HARD_NEGATIVES_FILE, UnusableWorkFile, WorkDir
from corefsearch.training.loop import metrics_text

if TYPE_CHECKING:
    import torch

DEV_METRICS = ("MRR@10", "R@100")
SELECTION_METRIC = "MRR@10"
EVAL_BATCH_SIZE = 64


@dataclass
class RetrieverExtras:
    """What :class:`~corefsearch.training.run.TrainingSummary` holds for the retriever alone."""

    train_queries: int
    examples_per_epoch: int


@dataclass
class DevSet:
    queries: list[Query]
    qrels: dict[str, dict[str, int]]
    passage_ids: list[str]
    titles: list[str]
    texts: list[str]


# --- the run ---------------------------------------------------------------------------------------


def _training_outputs(a: dict[str, Any]) -> list[Output]:
    args = a["args"] or RetrieverTrainingArguments()
    return [Output(a["out"], "--out", "dir", {"DATASET": a["dataset_dir"], "--index": a["index"],
                                              "--base-model": model_input(args.base_model)})]


@writes_outputs(_training_outputs)
def train_retriever(dataset_dir: Path, out: Path, args: RetrieverTrainingArguments | None = None,
                    index: Path | None = None, *, overwrite: bool = False, log: Log | None = None,
                    on_step: Callable[[int, float], None] | None = None) -> TrainingSummary[RetrieverExtras]:
    """Train a retriever on ``dataset_dir`` (train split; dev for selection) into ``out``.

    ``index`` is a Lucene index of the dataset (``corefsearch index``) for BM25 hard
    negatives. ``on_step(step, loss)`` is called after every optimizer step. See the module
    docstring for how an interrupted run resumes.
    """
    args = args or RetrieverTrainingArguments()
    run, dataset = start_run(args, out, overwrite=overwrite, log=log,
                             open_inputs=lambda: Dataset(dataset_dir).require_gold("train retriever"))
    log = run.log
    if index is not None:
        check_index_matches_dataset(Path(index), Path(dataset_dir))

    # --- data ---------------------------------------------------------------------------------
    train_queries = dataset.queries("train") if dataset.queries_path("train").exists() else []
    relevant = read_relevant(dataset.qrels_path("train")) if dataset.qrels_path("train").exists() else {}
    train_queries = [q for q in train_queries if relevant.get(q.id)]
    if not train_queries:
        raise InputError(f"{dataset.root} has no training queries with relevant passages "
                         f"({dataset.queries_path('train')}, {dataset.qrels_path('train')})")
    qrels_path = dataset.qrels_path("train")
    run.claim(dataset, {"train_qrels_sha256": dataset.manifest.get("checksums", {}).get("qrels/train.txt") or (
                            "sha256:" + sha256_file(qrels_path) if qrels_path.exists() else None),
                        "index": str(Path(index).resolve()) if index is not None else None})
    mined = _hard_negative_candidates(run.work, train_queries, relevant, args, index, log)
    dev_queries, dev_relevant = _dev_queries(dataset, args)
    needed = {pid for pids in relevant.values() for pid in pids} | {pid for pids in mined.values() for pid in pids}
    store, splits, dev = _read_passages(dataset, needed, dev_queries, dev_relevant, args.refresh_negatives)
    # Hard negatives come from the training collection only (the index may also hold dev and test).
    hard_negatives = {qid: [pid for pid in pids if splits.get(pid, "") in ("train", None)][:args.hard_negatives]
                      for qid, pids in mined.items()}
    missing = sorted(needed - set(store))
    if missing:
        raise InputError(f"the qrels of {dataset.root} name passages that are not in passages.jsonl "
                         f"(e.g. {missing[0]})")
    if dev is None:
        log("No dev queries: dev evaluation is skipped and the last epoch is kept.")
    n_examples = examples_per_epoch(train_queries, relevant, args.positives_per_query)

    # --- model, then the loop ------------------------------------------------------------------------
    model = BiEncoder.from_base(args.base_model, args.retriever_config(), run.device)
    task = RetrieverTask(model=model, args=args, train_queries=train_queries, relevant=relevant,
                         hard_negatives=hard_negatives, store=store, splits=splits, dev=dev,
                         steps_per_epoch=math.ceil(n_examples / args.batch_size), run=run)
    result = run.train(task, on_step)
    return run.summary(result, RetrieverExtras(train_queries=len(train_queries), examples_per_epoch=n_examples))


class RetrieverTask(TrainingTask):
    """The retriever as a :class:`~corefsearch.training.task.TrainingTask`: batches of examples
    (``examples.py``), the in-batch NLL (``loss.py``), dev MRR@10 and R@100 of exact search."""

    selection_metric = SELECTION_METRIC

    def __init__(self, *, model: BiEncoder, args: RetrieverTrainingArguments, train_queries: list[Query],
                 relevant: dict[str, list[str]], hard_negatives: dict[str, list[str]],
                 store: dict[str, StoredPassage], splits: dict[str, str | None], dev: DevSet | None,
                 steps_per_epoch: int, run: Run) -> None:
        self.model, self.args, self.train_queries, self.relevant = model, args, train_queries, relevant
        self.hard_negatives, self.store, self.dev, self.run, self.log = hard_negatives, store, dev, run, run.log
        self.splits = splits
        self.clusters = {pid: passage.clusters for pid, passage in store.items()}
        self.encoders = _unique_encoders(model)
        self.steps_per_epoch = steps_per_epoch

    @property
    def has_dev(self) -> bool:
        return self.dev is not None

    def parameter_groups(self) -> list[tuple[torch.nn.Module, float]]:
        return [(e.model, self.args.lr) for e in self.encoders]

    def epoch_batches(self, epoch: int) -> list[list[TrainingExample]]:
        negatives = self.refreshed_negatives(epoch) if self.args.refresh_negatives and epoch > 1 else None
        examples = epoch_examples(self.train_queries, self.relevant, negatives or self.hard_negatives,
                                  self.args.positives_per_query, self.args.seed, epoch)
        return batches(examples, self.args.batch_size)

    def refreshed_negatives(self, epoch: int) -> dict[str, list[str]]:
        """The hard negatives of ``epoch`` re-mined by the model as it is at the epoch's start (ANCE), kept in
        the work folder: a run resumed inside the epoch reads them back rather than mining with the weights
        of the checkpoint."""
        name = f"hard_negatives_epoch{epoch}.json"
        saved = self.run.work.read_json(name)
        if isinstance(saved, dict):
            return saved
        collection = [pid for pid, split in self.splits.items() if split in ("train", None)]
        self.log(f"Epoch {epoch}: re-mining the hard negatives with the model being trained "
                 f"({len(self.train_queries):,} queries over {len(collection):,} passages).")
        mined = mine_dense_negatives(self.model, self.train_queries, self.relevant, collection,
                                     [self.store[pid].title for pid in collection],
                                     [self.store[pid].text for pid in collection], self.args.hard_negatives,
                                     self.args.max_query_len, self.args.max_passage_len, EVAL_BATCH_SIZE)
        for encoder in self.encoders:
            encoder.model.train()  # encoding switched them to eval mode
        self.run.work.write_json(name, mined)
        return mined

    def loss(self, batch: Sequence[TrainingExample]) -> torch.Tensor:
        return batch_loss(self.model, batch, self.relevant, self.clusters, self.store, self.args)

    def baseline(self) -> dict[str, Any] | None:
        assert self.dev is not None
        metrics = evaluate_dev(self.model, self.dev, self.args)
        self.log(f"Before training: dev {metrics_text(metrics)}.")
        return metrics

    def dev_metrics(self) -> dict[str, float]:
        assert self.dev is not None
        return evaluate_dev(self.model, self.dev, self.args)

    def weights(self) -> dict[str, Any]:
        return {"models": [_weights(e) for e in self.encoders]}

    def load_weights(self, saved: dict[str, Any]) -> None:
        for encoder, weights in zip(self.encoders, saved["models"], strict=True):
            encoder.model.load_state_dict(weights)

    def save(self, folder: Path, result: LoopResult) -> None:
        curve = result.dev_curve
        dev = self.dev
        record = self.run.finished_record(
            counts={"train_queries": len(self.train_queries),
                    "relevant_pairs": examples_per_epoch(self.train_queries, self.relevant, None),
                    "queries_with_hard_negatives": sum(1 for pids in self.hard_negatives.values() if pids),
                    "examples_per_epoch": examples_per_epoch(self.train_queries, self.relevant,
                                                             self.args.positives_per_query),
                    "steps_per_epoch": result.steps_per_epoch, "total_steps": result.total_steps,
                    "dev_queries": len(dev.queries) if dev else 0,
                    "dev_passages": len(dev.passage_ids) if dev else 0},
            best_epoch=result.best_epoch, selection_metric=SELECTION_METRIC if dev else None)
        self.model.save(folder)
        write_manifest(folder / TRAINING_ARGS_FILE, record)

        write_model_card(folder, self.args, record, curve, self.run.manifest, name=str(self.run.out))


# --- pieces of the run -------------------------------------------------------------------------------


def _hard_negative_candidates(work: WorkDir, queries: Sequence[Query], relevant: dict[str, list[str]],
                              args: RetrieverTrainingArguments, index: Path | None, log: Log) -> dict[str, list[str]]:
    """BM25 candidates per query (not relevant, deeper than needed), mined once and kept in the work dir."""
    if args.hard_negatives == 0:
        return {}
    if index is None:
        log("No --index: no BM25 hard negatives, in-batch negatives only.")
        return {}
    try:
        saved = work.read_json(HARD_NEGATIVES_FILE)
        if saved is not None and not (isinstance(saved, dict) and all(
                isinstance(pids, list) and all(isinstance(pid, str) for pid in pids) for pids in saved.values())):
            raise UnusableWorkFile(f"{work.path / HARD_NEGATIVES_FILE}: not a mapping of query ids to lists of "
                                   "passage ids")
    except UnusableWorkFile as err:  # a cache of what BM25 finds: found again, the same
        log(f"{err}; mining the hard negatives again.")
        saved = None
    if saved is not None:
        return saved

    # In a child process: the JVM and spaCy's NER pipeline would otherwise hold their memory for the whole run.
    mined = mine_in_child(Path(index), queries, relevant, args.hard_negatives)
    work.write_json(HARD_NEGATIVES_FILE, mined)
    return mined


def _dev_queries(dataset: Dataset, args: RetrieverTrainingArguments) -> tuple[list[Query], dict[str, list[str]]]:
    if not (dataset.queries_path("dev").exists() and dataset.qrels_path("dev").exists()):
        return [], {}
    relevant = read_relevant(dataset.qrels_path("dev"))
    queries = [q for q in dataset.queries("dev") if relevant.get(q.id)]
    if args.dev_max_queries is not None and len(queries) > args.dev_max_queries:
        chosen = set(random.Random(args.seed).sample(range(len(queries)), args.dev_max_queries))
        queries = [q for i, q in enumerate(queries) if i in chosen]
    return queries, {q.id: relevant[q.id] for q in queries}


def _read_passages(dataset: Dataset, needed: set[str], dev_queries: list[Query],
                   dev_relevant: dict[str, list[str]], every_train_passage: bool = False
                   ) -> tuple[dict[str, StoredPassage], dict[str, str | None], DevSet | None]:
    """One streaming pass: the training passages (``needed``, or with ``every_train_passage`` every
    passage of the training collection, which ``--refresh-negatives`` searches), their splits, and the
    dev collection (passages of split "dev"; every passage when the passages carry no split)."""
    store: dict[str, StoredPassage] = {}
    splits: dict[str, str | None] = {}
    # Candidates for the dev collection: passages of split "dev", and split-less passages in case
    # no passage carries a split (then all of them are the collection).
    dev_split: list[tuple[str, str, str]] = []
    no_split: list[tuple[str, str, str]] = []
    any_split = False
    for passage in dataset.passages():
        any_split = any_split or passage.split is not None
        if passage.id in needed or (every_train_passage and passage.split in ("train", None)):
            store[passage.id] = StoredPassage(passage.title, passage.text,
                                              frozenset(m.cluster_id for m in passage.mentions))
            splits[passage.id] = passage.split
        if dev_queries and passage.split == "dev":
            dev_split.append((passage.id, passage.title, passage.text))
        elif dev_queries and passage.split is None and not any_split:
            no_split.append((passage.id, passage.title, passage.text))
    if not dev_queries:
        return store, splits, None
    collection = dev_split if any_split else no_split
    qrels = {qid: dict.fromkeys(pids, 1) for qid, pids in dev_relevant.items()}
    return store, splits, DevSet(dev_queries, qrels, [p[0] for p in collection], [p[1] for p in collection],
                                 [p[2] for p in collection])


def _unique_encoders(model: BiEncoder) -> list[Any]:
    if model.query_encoder is model.passage_encoder:
        return [model.query_encoder]
    return [model.query_encoder, model.passage_encoder]


def _weights(encoder: Any) -> dict[str, Any]:
    return {name: tensor.detach().cpu() for name, tensor in encoder.model.state_dict().items()}


# --- dev evaluation --------------------------------------------------------------------------------


def evaluate_dev(model: BiEncoder, dev: DevSet, args: RetrieverTrainingArguments) -> dict[str, float]:
    """MRR@10 and R@100 (trec_eval semantics) of exact dot-product search over the dev passages."""
    passages = model.passage_encoder.encode_passages(dev.titles, dev.texts, args.max_passage_len,
                                                     batch_size=EVAL_BATCH_SIZE, description="Dev passages")
    queries = model.query_encoder.encode_queries(dev.queries, args.max_query_len, batch_size=EVAL_BATCH_SIZE,
                                                 description="Dev queries")
    run = exact_search(queries, passages, dev.passage_ids, [q.passage_id for q in dev.queries], k=100)
    scored = {q.id: hits for q, hits in zip(dev.queries, run, strict=True)}
    evaluation = evaluate_run(scored, dev.qrels, definition="trec", name="dev")
    del passages, queries, run
    release_memory()  # the encoder's activations, freed but kept by the C allocator (about 0.5 GB on ECB+)
    return {metric: round(evaluation.aggregate[metric], 6) for metric in DEV_METRICS}


def mine_dense_negatives(model: BiEncoder, queries: Sequence[Query], relevant: Mapping[str, Sequence[str]],
                         passage_ids: Sequence[str], titles: Sequence[str], texts: Sequence[str], depth: int,
                         max_query_len: int, max_passage_len: int, batch_size: int = 64) -> dict[str, list[str]]:
    """Each query's hard-negative candidates by the retriever ``model`` itself (ANCE, Xiong et al. 2021):
    the ``depth`` passages of the collection (``passage_ids`` with their titles and texts) nearest to the
    query by exact dot product, nearest first, neither relevant nor its own passage. A function of the
    model's weights alone: the same weights give the same candidates."""
    import numpy as np

    passages = model.passage_encoder.encode_passages(titles, texts, max_passage_len, batch_size=batch_size,
                                                     description="Re-mining: passages")
    vectors = model.query_encoder.encode_queries(list(queries), max_query_len, batch_size=batch_size,
                                                 description="Re-mining: queries")
    found = exact_search(np.ascontiguousarray(vectors), passages, passage_ids, [q.passage_id for q in queries],
                         k=depth + max((len(relevant.get(q.id, ())) for q in queries), default=0))
    candidates: dict[str, list[str]] = {}
    for query, hits in zip(queries, found, strict=True):
        gold = set(relevant.get(query.id, ()))
        candidates[query.id] = [pid for pid in hits if pid not in gold and pid != query.passage_id][:depth]
    return candidates


def exact_search(query_vectors: Any, passage_vectors: Any, passage_ids: Sequence[str],
                 exclude: Sequence[str | None], k: int, chunk: int = 256) -> list[dict[str, float]]:
    """Top-``k`` passages by dot product for each query, its ``exclude`` passage left out."""
    import torch

    passages = torch.from_numpy(passage_vectors)
    position = {pid: i for i, pid in enumerate(passage_ids)}
    k = min(k, len(passage_ids))
    results: list[dict[str, float]] = []
    for start in range(0, len(query_vectors), chunk):
        scores = torch.from_numpy(query_vectors[start:start + chunk]) @ passages.T
        for row, own in enumerate(exclude[start:start + chunk]):
            if own in position:
                scores[row, position[own]] = float("-inf")
        values, indices = scores.topk(k, dim=1)
        for row_values, row_indices in zip(values.tolist(), indices.tolist(), strict=True):
            results.append({passage_ids[i]: v for v, i in zip(row_values, row_indices, strict=True)
                            if v != float("-inf")})
    return results
