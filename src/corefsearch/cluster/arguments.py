"""The options of ``corefsearch train clusterer``: defaults, ``--help`` texts and checks, in one place.

Kept apart from ``train.py`` so that the command line reads them without importing the trainer.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corefsearch.base.checks import all_at_least_one, not_negative
from corefsearch.base.errors import InputError
from corefsearch.base.model_card import BaseModel, CardText, usage_lines
from corefsearch.cluster.loss import DEFAULT_MARGIN
from corefsearch.training.arguments import (
    TrainingArguments,
    count,
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
        "help": "Dev clustering within: topic (gold topics) | predicted-topic (predicted document groups)."})
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
    dev_options = ("scope",)
    run_only = (*TrainingArguments.run_only, "encode_batch_size")
    options_order = ("base_model", "objective", "epochs", "batch_size", "lr", "head_lr", "weight_decay", "warmup",
                     "margin", "negatives_per_positive", "max_positives_per_cluster", "hard_negatives_k",
                     "remine_negatives", "scope",
                     "lemma_weights", "mlp_hidden", "mlp_out", "max_length", "seed", "max_steps")

    def validate(self) -> None:
        super().validate()
        all_at_least_one({"--max-positives-per-cluster": self.max_positives_per_cluster,
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

    @classmethod
    def unused_options(cls, record: Mapping[str, Any]) -> set[str]:
        """Also the pair options under the ``topic-batch`` objective, ``hard_negatives_k`` without negatives,
        and a ``max_positives_per_cluster`` no cluster reached."""
        unused = super().unused_options(record)
        options: Mapping[str, Any] = record.get("options") or {}
        counts: Mapping[str, Any] = record.get("counts") or {}
        if options.get("objective") == "topic-batch":
            unused |= {"negatives_per_positive", "max_positives_per_cluster", "hard_negatives_k"}
        if options.get("negatives_per_positive") == 0:
            unused.add("hard_negatives_k")
        positives, coreferent = count(counts.get("positive_pairs")), count(counts.get("coreferent_pairs"))
        if positives is not None and coreferent is not None and positives >= coreferent:
            unused.add("max_positives_per_cluster")
        return unused

    @classmethod
    def card_text(cls, record: Mapping[str, Any], base: BaseModel, folder_name: str) -> CardText:
        options: Mapping[str, Any] = record.get("options") or {}
        tau, beta = record.get("threshold"), record.get("lemma_weight")
        what = (f"A contrastive mention encoder (Hsu & Horwood 2022) trained with `corefsearch train clusterer` on "
                f"{base.description}: `[MLP(CLS) ; MLP(sum of the mention's tokens)]`, unit length, contrastive loss "
                f"with margin {options.get('margin')}"
                + (" over every pair of batches of one topic's mentions" if options.get("objective") == "topic-batch"
                   else " over drawn mention pairs")
                + "; mentions are clustered by average linkage on cosine distance, "
                + (f"stopping at τ = {tau:g} (picked on dev)" if tau is not None else
                   "with a threshold τ to give (no dev split picked one)")
                + (f"; two mentions with the same head lemma are β = {beta:g} closer (picked on dev)."
                   if beta else "."))
        return CardText("transformers", "feature-extraction",
                        "corefsearch mention encoder (contrastive, for coreference clustering)",
                        ["corefsearch", "cross-document-coreference", "coreference-clustering", "feature-extraction"],
                        what, _usage(folder_name))


def _usage(folder_name: str) -> list[str]:
    shell, literal = shlex.quote(folder_name), json.dumps(folder_name, ensure_ascii=False)
    intended = (
        "Cross-document coreference clustering of gold mentions: each mention is read once (the first two "
        "sentences of its document + its sentence with the mention between `[E]` and `[/E]`), and the vectors are "
        "clustered agglomeratively. It was trained and selected on the dataset above only; on other domains or "
        "mention types, measure it before relying on it.")
    return usage_lines(intended, folder_name, [
        "```bash",
        f"corefsearch cluster DATASET --method encoder --model {shell} --out clusters.jsonl --scope topic",
        "```",
        "",
        "```python",
        "from corefsearch.cluster.model import MentionEncoder",
        "",
        f"encoder = MentionEncoder.load({literal})  # encoder, tokenizer, heads and config (threshold)",
        "```",
        "",
        "The encoder and its tokenizer (with `[E]`/`[/E]`) are a plain Hugging Face folder; the two MLPs "
        "(`clusterer_head.safetensors`) and the settings (`corefsearch_clusterer.json`) are corefsearch's.",
    ])
