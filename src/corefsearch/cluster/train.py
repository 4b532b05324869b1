"""Train the contrastive mention encoder (``corefsearch train clusterer``; Hsu & Horwood 2022).

Two objectives. With ``objective="pairs"`` (Hsu & Horwood's), training pairs come from the train
split (``pairs.py``): every pair within a gold cluster (a seeded
sample of ``max_positives_per_cluster`` for a large cluster) and ``negatives_per_positive``
negatives per positive, half of them hard (the ``hard_negatives_k`` nearest mentions outside the
cluster), the rest random mentions of the same topic (``MentionRecord.topic``; the whole split
when documents have none). **The hard neighbours are computed once**, before the first step: the
train mentions are encoded by the untrained model (the base encoder with fresh heads) and searched
with FAISS (exact inner product); they are refreshed only with ``remine_negatives`` (below). The pairs are drawn
once (seeded) and shuffled per epoch (seed and epoch), ``batch_size`` pairs a step; the loss is
:func:`~corefsearch.cluster.loss.contrastive_loss` on the two encoded sides of the batch's pairs
(each distinct mention of a batch is encoded once).

After each epoch (and before training, as epoch 0) the dev split's mentions are encoded and
clustered with all-pairs average linkage within each group of ``scope`` (``topic`` or
``predicted-topic``) and mention type, at every τ of :func:`~corefsearch.cluster.encoder.threshold_grid`
(0.025 to 0.9 by 0.025); the CoNLL F1 (singletons kept) of the best τ is the dev metric, and the epoch
with the best one is kept, its τ saved as the model's ``threshold``. Without dev clusters the last
epoch is kept and the model has no threshold (``cluster`` then needs ``--threshold``).

``objective="topic-batch"`` (the default: it won on dev, bench/RESULTS.md "Recipes tried on dev")
trains on mentions instead of drawn pairs: each step takes ``batch_size``
mentions of one train topic (its clusters shuffled, seeded by seed and epoch, and cut into equal
batches, so a cluster's mentions mostly share a batch) and the same contrastive loss over **every**
pair of the batch, the coreferent pairs' mean plus the others' mean (a batch has far more of the
latter). One encoder pass of B mentions then teaches B(B−1)/2 pairs instead of B/2, every negative is
a mention of the same topic (the hard cases: the other events the topic's documents describe), and
an epoch is one pass over the train mentions; the pair options (``negatives_per_positive``,
``max_positives_per_cluster``, ``hard_negatives_k``) do not apply.

``remine_negatives`` (both objectives) mines again before each epoch after the first, with the encoder
as it is then: the pairs' hard negatives become the ``hard_negatives_k`` nearest mentions of the same
topic outside the cluster (the pairs drawn again, same seed), and a topic's batches gather a mention
with its nearest mentions (:func:`hard_topic_batches`), so that each batch holds what the encoder
still confuses. What an epoch mined is kept in the work folder, so a resumed run trains on the same.

The run is :class:`ClustererTask` driven by the one training loop (``corefsearch.training``):
checkpoints, Ctrl-C and resume come from there. ``OUT`` appears in one rename at the end with the
mention encoder (``model.py``), ``training_args.json``, ``dev_curve.json`` and a model card.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from corefsearch.base.artefacts import write_manifest
from corefsearch.base.errors import InputError
from corefsearch.base.model_card import write_model_card
from corefsearch.cluster.arguments import ClustererTrainingArguments
from corefsearch.cluster.baselines import mention_head_lemmas
from corefsearch.cluster.batches import hard_topic_batches, topic_batches
from corefsearch.cluster.inputs import MentionRecord
from corefsearch.cluster.loss import pair_batch_loss, topic_batch_loss
from corefsearch.cluster.mentions import read_split_mentions, split_mention_ids
from corefsearch.cluster.model import MentionEncoder
from corefsearch.cluster.pairs import MentionPair, coreferent_pairs, training_pairs
from corefsearch.cluster.topics import mention_groups
from corefsearch.datasets.dataset import Dataset
from corefsearch.evaluate.coref import score_partitions
from corefsearch.io.outputs import Output, model_input, writes_outputs
from corefsearch.io.write import sha256_file
from corefsearch.training import (
    TRAINING_ARGS_FILE,
    Log,
    LoopResult,
    Run,
    TrainingSummary,
    TrainingTask,
    epoch_rng,
    start_run,
)

if TYPE_CHECKING:
    import torch

SELECTION_METRIC = "CoNLL F1"


@dataclass
class ClustererExtras:
    """What :class:`~corefsearch.training.run.TrainingSummary` holds for the clusterer alone."""

    train_mentions: int
    train_pairs: int
    threshold: float | None  # τ of the kept epoch, saved with the model (None: no dev clusters)


@dataclass
class DevSet:
    """The dev mentions (sorted by id), their gold clusters, and the groups and types they are clustered in."""

    records: list[MentionRecord]
    key: dict[str, str]
    groups: dict[str, str]
    types: dict[str, str]
    lemmas: dict[str, str] | None = None  # head lemmas, when a lemma weight above 0 is tried


def read_train(dataset_dir: Path) -> list[MentionRecord]:
    """The train split's mentions (sorted by id); an error unless some cluster has two mentions."""
    from corefsearch.cluster.encoder import split_records

    records = split_records(dataset_dir, "train")
    sizes: dict[str, int] = {}
    for r in records:
        sizes[r.cluster_id] = sizes.get(r.cluster_id, 0) + 1
    if not any(size >= 2 for size in sizes.values()):
        raise InputError(f"{Path(dataset_dir) / 'clusters.jsonl'}: no train cluster has two or more mentions, so "
                         "there is no coreferent pair to train on; build the dataset with clusters that have "
                         "several mentions in the train split")
    return records


def read_dev(dataset_dir: Path, scope: str, log: Log, lemmas: bool = False) -> DevSet | None:
    """The dev split's mentions and groups (and with ``lemmas``, their head lemmas), or None (with a log
    line) when the dataset has no dev clusters."""
    from corefsearch.cluster.encoder import split_records

    try:
        split_mention_ids(Dataset(dataset_dir), "dev")
    except InputError:
        log(f"{dataset_dir} has no dev clusters: the epochs are not scored, the last one is kept and the model "
            "records no threshold (give `cluster` a --threshold).")
        return None
    found = read_split_mentions(dataset_dir, "dev")
    records = split_records(dataset_dir, "dev")
    groups = mention_groups(found.mentions, scope, dataset_dir)
    head_lemmas = None
    if lemmas:
        head_lemmas = mention_head_lemmas(found.mentions, found.passage_texts)
    return DevSet(records, {r.mention_id: r.cluster_id for r in records}, groups,
                  {m.mention_id: m.type for m in found.mentions}, head_lemmas)


def nearest_neighbours(vectors: np.ndarray, ids: list[str], k: int) -> dict[str, list[str]]:
    """``{mention id: its k nearest other mentions, nearest first}`` by inner product of the unit vectors
    (FAISS, exact)."""
    import faiss

    if k < 1 or len(ids) < 2:
        return {}
    index = faiss.IndexFlatIP(vectors.shape[1])
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    index.add(matrix)
    _, found = index.search(matrix, min(k, len(ids) - 1) + 1)
    return {ids[row]: [ids[j] for j in hits if j >= 0 and j != row][:k] for row, hits in enumerate(found.tolist())}


def dev_scores(encoder: MentionEncoder, dev: DevSet, batch_size: int,
               lemma_weights: Sequence[float] = (0.0,)) -> dict[str, float]:
    """``{"CoNLL F1": best, "threshold": τ, "lemma_weight": β}`` over the τ grid × ``lemma_weights`` (among
    equal F1s the smallest β, then the smallest τ)."""
    from corefsearch.cluster.encoder import threshold_grid, threshold_sweep

    vectors = encoder.encode(dev.records, batch_size=batch_size)
    ids = [r.mention_id for r in dev.records]
    best: tuple[float, float, float] | None = None
    for weight in sorted(lemma_weights):
        sweep = threshold_sweep(ids, vectors, dev.groups, dev.types, threshold_grid(), dev.lemmas, weight)
        for tau, response in sweep.items():
            f1 = score_partitions(dev.key, response, "keep").conll_f1
            if best is None or f1 > best[0]:
                best = (f1, tau, weight)
    assert best is not None
    return {SELECTION_METRIC: round(best[0], 6), "threshold": best[1], "lemma_weight": best[2]}


def _training_outputs(a: dict[str, Any]) -> list[Output]:
    args = a["args"] or ClustererTrainingArguments()
    return [Output(a["out"], "--out", "dir", {"DATASET": a["dataset_dir"],
                                              "--base-model": model_input(args.base_model)})]


@writes_outputs(_training_outputs)
def train_clusterer(dataset_dir: Path, out: Path, args: ClustererTrainingArguments | None = None, *,
                    overwrite: bool = False, log: Log | None = None,
                    on_step: Callable[[int, float], None] | None = None) -> TrainingSummary[ClustererExtras]:
    """Train a mention encoder on the train clusters of ``dataset_dir`` (dev picks epoch and τ) into ``out``."""
    args = args or ClustererTrainingArguments()
    run, dataset = start_run(args, out, overwrite=overwrite, log=log,
                             open_inputs=lambda: Dataset(dataset_dir).require_gold("train clusterer"))
    train = read_train(dataset.root)
    dev = read_dev(dataset.root, args.scope, run.log, lemmas=any(args.lemma_weight_grid()))
    run.claim(dataset, {"clusters_sha256": dataset.manifest.get("checksums", {}).get("clusters.jsonl")
                        or "sha256:" + sha256_file(dataset.root / "clusters.jsonl")})

    encoder = MentionEncoder.from_base(args.base_model, args.clusterer_config(), run.device)
    clusters: dict[str, list[str]] = {}
    for r in train:
        clusters.setdefault(r.cluster_id, []).append(r.mention_id)
    pairs: list[MentionPair] = []
    if args.objective == "pairs":
        ids = [r.mention_id for r in train]
        neighbours: dict[str, list[str]] = {}
        if args.hard_negatives_k:
            # Once, with the untrained encoder (the same on a resumed run: the checkpoint is loaded later).
            neighbours = nearest_neighbours(encoder.encode(train, batch_size=args.encode_batch_size), ids,
                                            args.hard_negatives_k)
        pairs = training_pairs(clusters, {r.mention_id: r.topic for r in train}, neighbours,
                               args.negatives_per_positive, args.max_positives_per_cluster, seed=args.seed)
        steps_per_epoch = math.ceil(len(pairs) / args.batch_size)
        run.log(f"{len(pairs):,} training pairs ({sum(p.label for p in pairs):,} positive) over {len(train):,} "
                f"train mentions: {steps_per_epoch:,} steps per epoch.")
    else:
        steps_per_epoch = len(topic_batches(train, args.batch_size, args.seed, 1))
        run.log(f"{len(train):,} train mentions in {len({r.topic for r in train}):,} topics, batches of "
                f"{args.batch_size} mentions of one topic: {steps_per_epoch:,} steps per epoch.")
    task = ClustererTask(encoder=encoder, args=args, records={r.mention_id: r for r in train}, pairs=pairs,
                         dev=dev, steps_per_epoch=steps_per_epoch, run=run)
    result = run.train(task, on_step)
    return run.summary(result, ClustererExtras(len(train), len(pairs), task.saved_threshold))


def best_threshold(dev_curve: list[dict[str, Any]], best_epoch: int | None) -> float | None:
    """τ of the kept epoch's dev entry (None without dev scores)."""
    entry = next((e for e in dev_curve if e["epoch"] == best_epoch), None)
    return None if entry is None or entry.get("threshold") is None else float(entry["threshold"])


def best_lemma_weight(dev_curve: list[dict[str, Any]], best_epoch: int | None) -> float:
    """β of the kept epoch's dev entry (0 without dev scores)."""
    entry = next((e for e in dev_curve if e["epoch"] == best_epoch), None)
    return 0.0 if entry is None else float(entry.get("lemma_weight") or 0.0)


class ClustererTask(TrainingTask):
    """The mention encoder as a :class:`~corefsearch.training.task.TrainingTask` (see the module docstring)."""

    selection_metric = SELECTION_METRIC

    def __init__(self, *, encoder: MentionEncoder, args: ClustererTrainingArguments,
                 records: dict[str, MentionRecord], pairs: list[MentionPair], dev: DevSet | None,
                 steps_per_epoch: int, run: Run) -> None:
        self.encoder, self.args, self.records, self.pairs, self.dev = encoder, args, records, pairs, dev
        self.steps_per_epoch, self.run, self.log = steps_per_epoch, run, run.log
        self.saved_threshold: float | None = None

    @property
    def has_dev(self) -> bool:
        return self.dev is not None

    def parameter_groups(self) -> list[tuple[torch.nn.Module, float]]:
        # The MLP heads start from random weights, so they get their own (larger) learning rate.
        return [(self.encoder.model, self.args.lr), (self.encoder.head, self.args.head_lr)]

    def epoch_batches(self, epoch: int) -> list[list[MentionPair]] | list[list[str]]:
        remined = self.remined(epoch) if self.args.remine_negatives and epoch > 1 else None
        if self.args.objective == "topic-batch":
            if remined is not None:
                return remined  # type: ignore[return-value]
            return topic_batches(list(self.records.values()), self.args.batch_size, self.args.seed, epoch)
        order = list(self.pairs) if remined is None else [MentionPair(*pair) for pair in remined]
        epoch_rng(self.args.seed, epoch).shuffle(order)
        size = self.args.batch_size
        return [order[i:i + size] for i in range(0, len(order), size)]

    def remined(self, epoch: int) -> list[list[str]] | list[list[Any]]:
        """``--remine-negatives``: what ``epoch`` trains on, mined with the encoder as it is at the epoch's
        start: the topic batches (:func:`hard_topic_batches`), or the pairs with hard negatives from the
        ``hard_negatives_k`` nearest mentions of the same topic. Kept in the work folder, so that a run
        resumed inside the epoch reads them back instead of mining with the checkpoint's weights."""
        name = f"remined_epoch{epoch}.json"
        saved = self.run.work.read_json(name)
        if isinstance(saved, list):
            return saved
        records = sorted(self.records.values(), key=lambda r: r.mention_id)
        what = "topic batches" if self.args.objective == "topic-batch" else "hard negatives"
        self.log(f"Epoch {epoch}: re-mining the {what} with the encoder being trained ({len(records):,} train "
                 "mentions).")
        vectors = self.encoder.encode(records, batch_size=self.args.encode_batch_size)
        mined: list[list[Any]]
        if self.args.objective == "topic-batch":
            mined = hard_topic_batches(records, vectors, self.args.batch_size, self.args.seed, epoch)
        else:
            topic = {r.mention_id: r.topic for r in records}
            near = nearest_neighbours(vectors, [r.mention_id for r in records], 4 * self.args.hard_negatives_k)
            neighbours = {m: [n for n in found if topic[n] == topic[m]][:self.args.hard_negatives_k]
                          for m, found in near.items()}
            clusters: dict[str, list[str]] = {}
            for r in records:
                clusters.setdefault(r.cluster_id, []).append(r.mention_id)
            mined = [[p.first, p.second, p.label] for p in training_pairs(
                clusters, topic, neighbours, self.args.negatives_per_positive, self.args.max_positives_per_cluster,
                seed=self.args.seed)]
        self.run.work.write_json(name, mined)
        return mined

    def loss(self, batch: list[MentionPair] | list[str]) -> torch.Tensor:
        if self.args.objective == "topic-batch":
            return topic_batch_loss(self.encoder, [self.records[m] for m in batch], self.args.margin)  # type: ignore[index]
        return pair_batch_loss(self.encoder, self.records, batch, self.args.margin)  # type: ignore[arg-type]

    def baseline(self) -> dict[str, Any] | None:
        scores = self.dev_metrics()
        self.log(f"Untrained encoder: dev {SELECTION_METRIC} {scores[SELECTION_METRIC]:.4f} at τ "
                 f"{scores['threshold']:g}" + (f", lemma weight β {scores['lemma_weight']:g}."
                                                if len(self.args.lemma_weight_grid()) > 1 else "."))
        return {**scores, "note": "untrained"}

    def dev_metrics(self) -> dict[str, float]:
        assert self.dev is not None
        return dev_scores(self.encoder, self.dev, self.args.encode_batch_size, self.args.lemma_weight_grid())

    def weights(self) -> dict[str, Any]:
        return {"weights": self.encoder.state()}

    def load_weights(self, saved: dict[str, Any]) -> None:
        self.encoder.load_state(saved["weights"])

    def save(self, folder: Path, result: LoopResult) -> None:
        self.saved_threshold = best_threshold(result.dev_curve, result.best_epoch) if self.has_dev else None
        self.encoder.config.threshold = self.saved_threshold
        self.encoder.config.lemma_weight = best_lemma_weight(result.dev_curve, result.best_epoch)
        record = self.run.finished_record(
            counts={"train_mentions": len(self.records), "train_pairs": len(self.pairs),
                    "positive_pairs": sum(p.label for p in self.pairs),
                    "coreferent_pairs": coreferent_pairs([r.cluster_id for r in self.records.values()]),
                    "dev_mentions": len(self.dev.records) if self.dev else 0,
                    "steps_per_epoch": result.steps_per_epoch, "total_steps": result.total_steps},
            best_epoch=result.best_epoch, threshold=self.saved_threshold,
            lemma_weight=self.encoder.config.lemma_weight,
            selection_metric=SELECTION_METRIC if self.has_dev else None)
        self.encoder.save(folder)
        write_manifest(folder / TRAINING_ARGS_FILE, record)

        write_model_card(folder, self.args, record, result.dev_curve, self.run.manifest, name=str(self.run.out))
