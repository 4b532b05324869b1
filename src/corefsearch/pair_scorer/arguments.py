"""The options of ``corefsearch train pair-scorer``: defaults, ``--help`` texts and checks, in one place.

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
from corefsearch.cluster.arguments import TRAIN_SCOPES
from corefsearch.training.arguments import (
    TrainingArguments,
    one_of,
    override,
    scored_on_dev,
    unreached,
)

if TYPE_CHECKING:
    from corefsearch.pair_scorer.model import PairScorerConfig


@dataclass
class PairScorerTrainingArguments(TrainingArguments):
    """Every option of ``corefsearch train pair-scorer`` with its default (shared ones: :class:`TrainingArguments`)."""

    epochs: int = override("epochs", 2)
    batch_size: int = override("batch_size", 16, help="Mention pairs per optimizer step.")
    lr: float = override("lr", 3e-5, help="AdamW learning rate of the encoder.")
    head_lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate of the (randomly initialised) head."})
    neighbours: int = field(default=5, metadata={
        "help": "Candidate pairs: each mention's N nearest mentions of its topic by the --encoder (0: none)."})
    same_lemma: bool = field(default=True, metadata={"help": "Candidate pairs: mentions with the same head lemma."})
    lemma_heuristic: bool = field(default=False, metadata={
        "help": "Candidate pairs: also those `cluster --method lemma-heuristic` links (Ahmed et al. 2023).",
        "option": "--lemma-heuristic"})
    negatives_per_positive: float = field(default=3.0, metadata={
        "help": "At most N negative candidate pairs per positive one in training (a seeded sample of the rest)."})
    max_pairs: int | None = field(default=None, metadata={
        "help": "Train on a seeded sample of N candidate pairs (default: all, after the negatives' cap)."})
    both_orders: bool = field(default=True, metadata={
        "help": "Score each pair in both orders and average (twice the reading at inference)."})
    scope: str = field(default="topic", metadata={
        "help": "Dev clustering within: topic (gold topics) | predicted-topic (predicted document groups)."})
    dev_max_pairs: int | None = field(default=1000, metadata={
        "help": "Epochs are compared by the best pair F1 on a seeded sample of N dev candidate pairs (0: all); "
                "the kept epoch then scores every dev candidate pair once to pick the threshold and linkage by "
                "CoNLL F1."})
    max_length: int = field(default=128, metadata={"help": "Word pieces of a pair (both sentences)."})
    hidden: int = field(default=256, metadata={"cli": False})
    encode_batch_size: int = field(default=64, metadata={"cli": False})
    score_batch_size: int = field(default=64, metadata={"cli": False})

    kind = "pair-scorer"
    dev_options = ("scope", "dev_max_pairs")
    run_only = (*TrainingArguments.run_only, "encode_batch_size", "score_batch_size")
    options_order = ("base_model", "epochs", "batch_size", "lr", "head_lr", "weight_decay", "warmup", "neighbours",
                     "same_lemma", "lemma_heuristic", "negatives_per_positive", "max_pairs", "both_orders", "scope",
                     "dev_max_pairs", "max_length", "hidden", "seed", "max_steps")

    def validate(self) -> None:
        super().validate()
        all_at_least_one({"--max-pairs": self.max_pairs, "--encode-batch-size": self.encode_batch_size,
                          "--score-batch-size": self.score_batch_size})
        not_negative({"--neighbours": self.neighbours, "--dev-max-pairs": self.dev_max_pairs})
        if not (self.negatives_per_positive >= 0 and math.isfinite(self.negatives_per_positive)):
            raise InputError(f"--negatives-per-positive must be a number ≥ 0, got {self.negatives_per_positive}")
        if not self.neighbours and not self.same_lemma and not self.lemma_heuristic:
            raise InputError("no candidate pairs: give --neighbours N (with --encoder), --lemma-heuristic, or keep "
                             "--same-lemma")
        one_of("--scope", self.scope, TRAIN_SCOPES, " (the dev clustering that picks the threshold)")
        self.scorer_config().validate()

    def learning_rates(self) -> dict[str, float]:
        return {"--lr": self.lr, "--head-lr": self.head_lr}

    def scorer_config(self) -> PairScorerConfig:
        from corefsearch.pair_scorer.model import PairScorerConfig

        return PairScorerConfig(max_length=self.max_length, hidden=self.hidden, neighbours=self.neighbours,
                                same_lemma=self.same_lemma, lemma_heuristic=self.lemma_heuristic,
                                both_orders=self.both_orders)

    @classmethod
    def unused_options(cls, record: Mapping[str, Any]) -> set[str]:
        """Also a ``max_pairs`` or ``dev_max_pairs`` the run did not reach."""
        unused = super().unused_options(record)
        options: Mapping[str, Any] = record.get("options") or {}
        counts: Mapping[str, Any] = record.get("counts") or {}
        if unreached(options.get("max_pairs"), counts.get("candidate_train_pairs")):
            unused.add("max_pairs")
        if scored_on_dev(record) and unreached(options.get("dev_max_pairs") or None, counts.get("dev_pairs")):
            unused.add("dev_max_pairs")
        return unused

    @classmethod
    def card_text(cls, record: Mapping[str, Any], base: BaseModel, folder_name: str) -> CardText:
        options: Mapping[str, Any] = record.get("options") or {}
        threshold, linkage = record.get("threshold"), record.get("linkage")
        sources = (("those with the same head lemma", options.get("same_lemma")),
                   ("those the lemma heuristic links", options.get("lemma_heuristic")),
                   (f"each mention's {options.get('neighbours')} nearest by a mention encoder",
                    options.get("neighbours")))
        what = (f"A mention-pair cross-encoder trained with `corefsearch train pair-scorer` on {base.description}: "
                "it reads two mentions' sentences together (`[CLS] A [SEP] B [SEP]`, each mention between `[E]` and "
                "`[/E]`) and gives the probability that they corefer"
                + (", averaged over both orders" if options.get("both_orders") else "")
                + ". The candidate pairs are "
                + " and ".join(part for part, on in sources if on)
                + "; " + ((f"the clusters are the connected components of the pairs with p > {threshold:g}"
                           if linkage == "components" else f"they are clustered by average linkage on 1 − p at "
                           f"p ≥ {threshold:g}") + " (picked on dev)." if threshold is not None
                          else "a threshold is to be given (no dev split picked one)."))
        return CardText("transformers", "text-classification", "corefsearch mention-pair scorer (cross-encoder)",
                        ["corefsearch", "cross-document-coreference", "coreference-clustering", "cross-encoder"],
                        what, _usage(folder_name))


def _usage(folder_name: str) -> list[str]:
    shell, literal = shlex.quote(folder_name), json.dumps(folder_name, ensure_ascii=False)
    intended = (
        "Scoring candidate mention pairs for cross-document coreference clustering of gold mentions. It was "
        "trained and selected on the dataset above only; on other domains or mention types, measure it before "
        "relying on it.")
    return usage_lines(intended, folder_name, [
        "```bash",
        f"corefsearch cluster DATASET --method encoder --model ENCODER --pair-scorer {shell} --out clusters.jsonl",
        "```",
        "",
        "```python",
        "from corefsearch.pair_scorer.model import PairScorer",
        "",
        f"scorer = PairScorer.load({literal})  # encoder, tokenizer, head and config (threshold, linkage)",
        "```",
    ])
