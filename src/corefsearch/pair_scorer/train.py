"""Train the mention-pair cross-encoder (``corefsearch train pair-scorer``; Ahmed et al. 2023).

Training pairs are the train split's candidate pairs (``cluster.candidates``), chosen as at inference: within
each gold topic and mention type, the pairs whose mentions share a head lemma (``same_lemma``) and each
mention's ``neighbours`` nearest mentions by a trained mention encoder (``--encoder``, from ``train
clusterer``), labelled by the gold clusters. Every positive is kept; the negatives are a seeded sample of at
most ``negatives_per_positive`` per positive, and ``max_pairs`` caps the whole (a seeded sample). Each epoch
shuffles the pairs and the order of each pair's two mentions (seed and epoch), ``batch_size`` pairs a step,
binary cross-entropy on the logit (``model.py``).

Dev. After each epoch (and before training, as epoch 0) the scorer reads a seeded sample of ``dev_max_pairs``
dev candidate pairs (grouped by ``scope``, candidates as in training) and the best pair F1 over the
probability thresholds is the selection metric (reading every dev pair after each epoch is more than a CPU
budget allows). The kept epoch then scores every dev candidate pair once, and the threshold and linkage
(``components`` or ``average``) with the best dev CoNLL F1 (singletons kept) are saved in the scorer's
config, which ``cluster --pair-scorer`` uses. The run is :class:`PairScorerTask` in the one training loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from corefsearch.base.artefacts import write_manifest
from corefsearch.base.errors import InputError
from corefsearch.base.model_card import write_model_card
from corefsearch.base.shipped import resolve_reference
from corefsearch.cluster.candidates import LINKAGES, assignment_of, candidate_pairs, probability_grid
from corefsearch.cluster.encoder import split_records
from corefsearch.cluster.inputs import MentionRecord
from corefsearch.cluster.mentions import read_split_mentions, split_mention_ids
from corefsearch.cluster.model import MentionEncoder
from corefsearch.cluster.topics import mention_groups
from corefsearch.datasets.dataset import Dataset
from corefsearch.evaluate.coref import score_partitions
from corefsearch.io.outputs import Output, model_input, writes_outputs
from corefsearch.io.write import sha256_file
from corefsearch.pair_scorer.arguments import PairScorerTrainingArguments
from corefsearch.pair_scorer.model import PairScorer, lemma_candidates
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

SELECTION_METRIC = "pair F1"
CONLL = "CoNLL F1"


@dataclass
class PairScorerExtras:
    """What :class:`~corefsearch.training.run.TrainingSummary` holds for the pair scorer alone."""

    train_mentions: int
    train_pairs: int
    threshold: float | None  # the probability threshold dev picked (None: no dev clusters)
    linkage: str
    dev_conll: float | None


@dataclass
class SplitPairs:
    """A split's mentions (sorted by id), their candidate pairs (rows ``(i, j)``) with gold labels, and the
    groups, types and gold clusters the pairs are clustered and scored with."""

    records: list[MentionRecord]
    pairs: np.ndarray
    labels: np.ndarray
    groups: dict[str, str]
    types: dict[str, str]

    @property
    def ids(self) -> list[str]:
        return [r.mention_id for r in self.records]

    @property
    def key(self) -> dict[str, str]:
        return {r.mention_id: r.cluster_id for r in self.records}


def split_pairs(dataset_dir: Path, split: str, scope: str, args: PairScorerTrainingArguments,
                encoder: MentionEncoder | None) -> SplitPairs:
    """The candidate pairs of ``split`` within the groups of ``scope`` (see the module docstring)."""
    found = read_split_mentions(dataset_dir, split)
    records = split_records(dataset_dir, split)
    groups = mention_groups(found.mentions, scope, dataset_dir)
    types = {m.mention_id: m.type for m in found.mentions}
    lemmas, extra = lemma_candidates(args.scorer_config(), found, groups, types)
    k = args.neighbours if encoder is not None else 0
    vectors = encoder.encode(records, batch_size=args.encode_batch_size) if k else None
    ids = [r.mention_id for r in records]
    pairs = candidate_pairs(ids, groups, types, lemmas=lemmas, vectors=vectors, k=k, extra=extra)
    clusters = np.asarray([r.cluster_id for r in records], dtype=object)
    labels = (clusters[pairs[:, 0]] == clusters[pairs[:, 1]]).astype(np.int64) if len(pairs) else np.zeros(0, int)
    return SplitPairs(records, pairs, labels, groups, types)


def training_sample(labels: np.ndarray, negatives_per_positive: float, max_pairs: int | None,
                    seed: int) -> np.ndarray:
    """Rows of the candidate pairs to train on, sorted: every positive, a seeded sample of at most
    ``negatives_per_positive`` negatives per positive, then a seeded sample of ``max_pairs`` of those."""
    rng = np.random.default_rng(seed)
    positives = np.flatnonzero(labels == 1)
    negatives = np.flatnonzero(labels == 0)
    cap = math.floor(negatives_per_positive * len(positives) + 1e-9)
    if len(negatives) > cap:
        negatives = rng.choice(negatives, cap, replace=False)
    chosen = np.concatenate([positives, negatives])
    if max_pairs is not None and len(chosen) > max_pairs:
        chosen = rng.choice(chosen, max_pairs, replace=False)
    return np.sort(chosen)


def best_pair_f1(labels: np.ndarray, probabilities: np.ndarray) -> tuple[float, float]:
    """The best F1 of predicting coreference at p > t over the threshold grid, and that t."""
    best = (0.0, 0.5)
    for threshold in probability_grid():
        predicted = probabilities > threshold
        hits = int((predicted & (labels == 1)).sum())
        if hits:
            f1 = 2 * hits / (int(predicted.sum()) + int((labels == 1).sum()))
            if f1 > best[0]:
                best = (f1, threshold)
    return round(best[0], 6), best[1]


def clustering_sweep(dev: SplitPairs, probabilities: np.ndarray) -> dict[str, Any]:
    """The threshold and linkage with the best dev CoNLL F1 (singletons kept) of the scored dev pairs
    (ties: the first linkage of ``LINKAGES``, then the lowest threshold), and the best of each linkage."""
    best: dict[str, Any] = {}
    per_linkage: dict[str, dict[str, float]] = {}
    for linkage in LINKAGES:
        for threshold in probability_grid():
            response = assignment_of(dev.ids, dev.groups, dev.types, dev.pairs, probabilities, threshold, linkage)
            f1 = round(score_partitions(dev.key, response, "keep").conll_f1, 6)
            if f1 > per_linkage.get(linkage, {}).get(CONLL, -1.0):
                per_linkage[linkage] = {CONLL: f1, "threshold": threshold}
            if not best or f1 > best[CONLL]:
                best = {CONLL: f1, "threshold": threshold, "linkage": linkage}
    return {**best, "per_linkage": per_linkage}


def _training_outputs(a: dict[str, Any]) -> list[Output]:
    args = a["args"] or PairScorerTrainingArguments()
    return [Output(a["out"], "--out", "dir", {"DATASET": a["dataset_dir"], "--encoder": a["encoder"],
                                              "--base-model": model_input(args.base_model)})]


@writes_outputs(_training_outputs)
def train_pair_scorer(dataset_dir: Path, out: Path, args: PairScorerTrainingArguments | None = None, *,
                      encoder: Path | None = None, overwrite: bool = False, log: Log | None = None,
                      on_step: Callable[[int, float], None] | None = None) -> TrainingSummary[PairScorerExtras]:
    """Train a pair scorer on the train clusters of ``dataset_dir`` (candidates from the mention encoder
    ``encoder`` and head lemmas; dev picks the epoch, threshold and linkage) into ``out``."""
    args = args or PairScorerTrainingArguments()
    encoder = resolve_reference(encoder)  # a shipped mention encoder's name: its folder
    if args.neighbours and encoder is None:
        raise InputError(f"--neighbours {args.neighbours} takes each mention's nearest mentions by a mention encoder: "
                         "give --encoder DIR (from `corefsearch train clusterer`), or --neighbours 0")
    run, dataset = start_run(args, out, overwrite=overwrite, log=log,
                             open_inputs=lambda: Dataset(dataset_dir).require_gold("train pair-scorer"))
    mention_encoder = MentionEncoder.load(Path(encoder), run.device) if encoder is not None and args.neighbours \
        else None
    train = split_pairs(dataset.root, "train", "topic", args, mention_encoder)
    chosen = training_sample(train.labels, args.negatives_per_positive, args.max_pairs, args.seed)
    if not int(train.labels[chosen].sum()):
        raise InputError(f"{dataset.root}: no candidate train pair corefers, so there is nothing to learn; build the "
                         "dataset with train clusters of several mentions, or give more candidates (--neighbours)")
    dev: SplitPairs | None = None
    try:
        split_mention_ids(dataset, "dev")
        dev = split_pairs(dataset.root, "dev", args.scope, args, mention_encoder)
    except InputError:
        run.log(f"{dataset.root} has no dev clusters: the last epoch is kept and the scorer records no threshold "
                "(give `cluster` a --pair-threshold).")
    del mention_encoder
    run.claim(dataset, {"encoder": str(Path(encoder).resolve()) if encoder is not None and args.neighbours else None,
                        "clusters_sha256": dataset.manifest.get("checksums", {}).get("clusters.jsonl")
                        or "sha256:" + sha256_file(dataset.root / "clusters.jsonl")})
    steps_per_epoch = math.ceil(len(chosen) / args.batch_size)
    run.log(f"{len(train.pairs):,} candidate train pairs ({int(train.labels.sum()):,} coreferent) over "
            f"{len(train.records):,} mentions; training on {len(chosen):,} ({int(train.labels[chosen].sum()):,} "
            f"coreferent): {steps_per_epoch:,} steps per epoch."
            + (f" Dev: {len(dev.pairs):,} candidate pairs ({int(dev.labels.sum()):,} coreferent)." if dev else ""))
    scorer = PairScorer.from_base(args.base_model, args.scorer_config(), run.device)
    task = PairScorerTask(scorer=scorer, args=args, train=train, chosen=chosen, dev=dev,
                          steps_per_epoch=steps_per_epoch, run=run)
    result = run.train(task, on_step)
    return run.summary(result, PairScorerExtras(len(train.records), len(chosen), scorer.config.threshold,
                                                scorer.config.linkage, task.dev_conll))


class PairScorerTask(TrainingTask):
    """The pair scorer as a :class:`~corefsearch.training.task.TrainingTask` (see the module docstring)."""

    selection_metric = SELECTION_METRIC

    def __init__(self, *, scorer: PairScorer, args: PairScorerTrainingArguments, train: SplitPairs,
                 chosen: np.ndarray, dev: SplitPairs | None, steps_per_epoch: int, run: Run) -> None:
        self.scorer, self.args, self.train, self.chosen, self.dev = scorer, args, train, chosen, dev
        self.steps_per_epoch, self.run, self.log = steps_per_epoch, run, run.log
        self.dev_rows = np.zeros(0, dtype=np.int64)
        if dev is not None:
            rows = np.arange(len(dev.pairs))
            if args.dev_max_pairs and len(rows) > args.dev_max_pairs:
                rows = np.sort(np.random.default_rng(args.seed).choice(rows, args.dev_max_pairs, replace=False))
            self.dev_rows = rows
        self.dev_conll: float | None = None
        self.dev_choice: dict[str, Any] | None = None

    @property
    def has_dev(self) -> bool:
        return self.dev is not None

    def parameter_groups(self) -> list[tuple[torch.nn.Module, float]]:
        return [(self.scorer.model, self.args.lr), (self.scorer.head, self.args.head_lr)]

    def epoch_batches(self, epoch: int) -> list[list[tuple[int, int, int]]]:
        rng = epoch_rng(self.args.seed, epoch)
        rows = [int(row) for row in self.chosen]
        rng.shuffle(rows)
        examples = []
        for row in rows:
            i, j = (int(x) for x in self.train.pairs[row])
            examples.append((j, i, int(self.train.labels[row])) if rng.random() < 0.5 else
                            (i, j, int(self.train.labels[row])))
        size = self.args.batch_size
        return [examples[start:start + size] for start in range(0, len(examples), size)]

    def loss(self, batch: list[tuple[int, int, int]]) -> torch.Tensor:
        import torch
        import torch.nn.functional as F

        records = self.train.records
        logits = self.scorer.forward([(records[i], records[j]) for i, j, _ in batch])
        labels = torch.tensor([label for _, _, label in batch], dtype=torch.float32, device=logits.device)
        return F.binary_cross_entropy_with_logits(logits, labels)

    def baseline(self) -> dict[str, Any] | None:
        scores = self.dev_metrics()
        self.log(f"Untrained scorer: dev {SELECTION_METRIC} {scores[SELECTION_METRIC]:.4f} on {len(self.dev_rows):,} "
                 "dev pairs.")
        return {**scores, "note": "untrained"}

    def dev_metrics(self) -> dict[str, float]:
        assert self.dev is not None
        pairs = self.dev.pairs[self.dev_rows]
        probabilities = self.scorer.score(self.dev.records, pairs, self.args.score_batch_size)
        f1, threshold = best_pair_f1(self.dev.labels[self.dev_rows], probabilities)
        return {SELECTION_METRIC: f1, "pair threshold": threshold}

    def weights(self) -> dict[str, Any]:
        return {"weights": self.scorer.state()}

    def load_weights(self, saved: dict[str, Any]) -> None:
        self.scorer.load_state(saved["weights"])

    def choose_clustering(self) -> None:
        """Score every dev candidate pair with the kept weights; the threshold and linkage dev likes best go
        into the scorer's config."""
        assert self.dev is not None
        self.log(f"Scoring all {len(self.dev.pairs):,} dev candidate pairs to pick the threshold and linkage.")
        probabilities = self.scorer.score(self.dev.records, self.dev.pairs, self.args.score_batch_size)
        self.dev_choice = clustering_sweep(self.dev, probabilities)
        self.dev_conll = self.dev_choice[CONLL]
        self.scorer.config.threshold = self.dev_choice["threshold"]
        self.scorer.config.linkage = self.dev_choice["linkage"]
        self.log(f"Dev {CONLL} {self.dev_conll:.4f}: {self.scorer.config.linkage} linkage at p > "
                 f"{self.scorer.config.threshold:g}.")

    def save(self, folder: Path, result: LoopResult) -> None:
        if self.dev is not None:
            self.choose_clustering()
        dev = self.dev
        record = self.run.finished_record(
            counts={"train_mentions": len(self.train.records), "candidate_train_pairs": len(self.train.pairs),
                    "coreferent_candidate_train_pairs": int(self.train.labels.sum()), "train_pairs": len(self.chosen),
                    "dev_mentions": len(dev.records) if dev else 0, "dev_candidate_pairs": len(dev.pairs) if dev else 0,
                    "dev_pairs": len(self.dev_rows), "steps_per_epoch": result.steps_per_epoch,
                    "total_steps": result.total_steps},
            best_epoch=result.best_epoch, threshold=self.scorer.config.threshold, linkage=self.scorer.config.linkage,
            dev_clustering=self.dev_choice, selection_metric=SELECTION_METRIC if dev else None)
        self.scorer.save(folder)
        write_manifest(folder / TRAINING_ARGS_FILE, record)
        write_model_card(folder, self.args, record, result.dev_curve, self.run.manifest, name=str(self.run.out))
