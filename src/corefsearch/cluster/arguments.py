"""The options of ``corefsearch train clusterer``: defaults, ``--help`` texts and checks, in one place.

Kept apart from ``train.py`` so that the command line reads them without importing the trainer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corefsearch.base.errors import InputError
from corefsearch.cluster.loss import DEFAULT_MARGIN
from corefsearch.training.arguments import (
    TrainingArguments,
    at_least_one,
    not_negative,
    one_of,
    override,
    positive,
)

if TYPE_CHECKING:
    from corefsearch.cluster.model import ClustererConfig

TRAIN_SCOPES = ("topic", "predicted-topic")
OBJECTIVES = ("pairs", "topic-batch")


@dataclass
class ClustererTrainingArguments(TrainingArguments):
    """Every option of ``corefsearch train clusterer`` with its default (shared ones: :class:`TrainingArguments`)."""

    batch_size: int = override("batch_size", 64, help=(  # mentions ("topic-batch") or pairs ("pairs") per step
        "Mentions (--objective topic-batch) or mention pairs (pairs) per optimizer step."))
    # chosen on dev for the topic-batch objective (2e-5: 74.08, 5e-5: 74.66 CoNLL F1, ECB+ events)
    lr: float = override("lr", 5e-5, help="AdamW learning rate of the encoder.")
    weight_decay: float = override("weight_decay", 0.01, cli=False)
    warmup: float = override("warmup", 0.1, cli=False)
    # every pair of a batch of one topic's mentions (the default: it won on dev) | drawn mention pairs (Hsu & Horwood)
    objective: str = field(default="topic-batch", metadata={
        "help": "topic-batch (every pair of a batch of one train topic's mentions) | pairs (drawn mention pairs, "
                "Hsu & Horwood)."})
    head_lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate of the (randomly initialised) MLPs."})
    margin: float = field(default=DEFAULT_MARGIN, metadata={"help": "Contrastive loss margin m (on d = 1 - cos)."})
    negatives_per_positive: float = field(default=3.0, metadata={"help": "Negative pairs per positive pair."})
    max_positives_per_cluster: int = field(default=200, metadata={
        "help": "At most N positive pairs per cluster (a seeded sample of a larger cluster's pairs)."})
    # nearest neighbours (by the untrained encoder) searched for hard negatives; 0: none
    hard_negatives_k: int = field(default=10, metadata={
        "help": "Hard negatives from each mention's N nearest mentions by the untrained encoder (computed once; "
                "0: topic negatives only)."})
    # before each epoch after the first, re-mine with the encoder being trained: the pairs' hard negatives, or
    # the topic batches (each gathers a mention's nearest mentions of its topic)
    remine_negatives: bool = field(default=False, metadata={
        "help": "Before each epoch after the first, re-mine with the encoder being trained: the pairs' hard "
                "negatives (the N nearest mentions of the same topic), or topic batches that gather a mention's "
                "nearest mentions.", "option": "--remine-negatives"})
    scope: str = field(default="topic", metadata={  # dev clustering: within gold topics or predicted topics
        "help": "Dev clustering within: topic (gold topics) | predicted-topic (TF-IDF document clusters)."})
    # β values tried on dev with every τ (comma-separated): a shared head lemma takes β off a pair's distance
    lemma_weights: str = field(default="0", metadata={
        "help": "Lemma weights β tried on dev with every τ, comma-separated (a shared head lemma takes β off a "
                "pair's cosine distance when clustering); the best is saved with the model."})
    mlp_hidden: int = field(default=1024, metadata={"cli": False})
    mlp_out: int = field(default=1024, metadata={"cli": False})
    max_length: int = field(default=128, metadata={"cli": False})
    # mentions per batch when encoding (hard negatives, dev)
    encode_batch_size: int = field(default=64, metadata={"cli": False})

    kind = "clusterer"
    run_only = (*TrainingArguments.run_only, "encode_batch_size")
    options_order = ("base_model", "objective", "epochs", "batch_size", "lr", "head_lr", "weight_decay", "warmup",
                     "margin", "negatives_per_positive", "max_positives_per_cluster", "hard_negatives_k",
                     "remine_negatives", "scope",
                     "lemma_weights", "mlp_hidden", "mlp_out", "max_length", "seed", "max_steps")

    def validate(self) -> None:
        super().validate()
        at_least_one({"--max-positives-per-cluster": self.max_positives_per_cluster,
                      "--encode-batch-size": self.encode_batch_size})
        not_negative({"--hard-negatives-k": self.hard_negatives_k})
        if not (self.negatives_per_positive >= 0 and math.isfinite(self.negatives_per_positive)):
            raise InputError(f"--negatives-per-positive must be a number ≥ 0, got {self.negatives_per_positive}")
        positive({"--margin": self.margin})
        one_of("--scope", self.scope, TRAIN_SCOPES, " (the dev clustering that picks the epoch and τ)")
        one_of("--objective", self.objective, OBJECTIVES)
        if self.remine_negatives and self.objective == "pairs" and not (
                self.hard_negatives_k and self.negatives_per_positive):
            raise InputError("--remine-negatives re-mines the pairs' hard negatives: give --hard-negatives-k N "
                             "(N ≥ 1) and --negatives-per-positive above 0")
        if self.objective == "topic-batch" and self.batch_size < 2:
            raise InputError("--objective topic-batch needs --batch-size of at least 2 mentions, got "
                             f"{self.batch_size}")
        self.lemma_weight_grid()
        self.clusterer_config().validate()

    def lemma_weight_grid(self) -> list[float]:
        """The β values of ``--lemma-weights``, checked (each in [0, 2], none twice)."""
        from corefsearch.cluster.model import check_lemma_weight

        try:
            weights = [float(part) for part in str(self.lemma_weights).split(",")]
        except ValueError:
            raise InputError(f"--lemma-weights takes comma-separated numbers, got {self.lemma_weights!r}") from None
        for weight in weights:
            check_lemma_weight(weight, "--lemma-weights")
        if len(set(weights)) != len(weights):
            raise InputError(f"--lemma-weights names a value twice: {self.lemma_weights!r}")
        return weights

    def learning_rates(self) -> dict[str, float]:
        return {"--lr": self.lr, "--head-lr": self.head_lr}

    def clusterer_config(self) -> ClustererConfig:
        from corefsearch.cluster.model import ClustererConfig

        return ClustererConfig(max_length=self.max_length, mlp_hidden=self.mlp_hidden, mlp_out=self.mlp_out)
