"""The options of ``corefsearch train retriever``: defaults, ``--help`` texts and checks, in one place.

Kept apart from ``train.py`` so that the command line reads them without importing the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corefsearch.base.errors import InputError
from corefsearch.training.arguments import TrainingArguments, at_least_one, not_negative, override

if TYPE_CHECKING:
    from corefsearch.dense.model import RetrieverConfig


@dataclass
class RetrieverTrainingArguments(TrainingArguments):
    """Every option of ``corefsearch train retriever`` with its default (shared ones: :class:`TrainingArguments`)."""

    epochs: int = override("epochs", 5)
    batch_size: int = override("batch_size", 16, help="Examples per batch (in-batch negatives).")
    lr: float = override("lr", 1e-5)
    shared_encoder: bool = field(default=False, metadata={
        "help": "One encoder for queries and passages (default: two, as in DPR).", "option": "--shared-encoder"})
    markers: bool = field(default=True, metadata={"help": "Boundary tokens around the query mention."})
    pooling: str = field(default="cls", metadata={"help": "cls | mean"})
    max_query_len: int = field(default=64, metadata={"help": "Query window in tokens, grown around the mention."})
    max_passage_len: int = field(default=180, metadata={"help": "Passage length in tokens."})
    hard_negatives: int = field(default=20, metadata={
        "help": "Draw one hard negative per example from the BM25 top N not relevant (0: none)."})
    # ANCE: before each epoch after the first, the hard negatives are re-mined by the retriever being trained
    refresh_negatives: bool = field(default=False, metadata={
        "help": "Before each epoch after the first, re-mine the hard negatives with the retriever being trained: "
                "its top N of the training passages (ANCE).", "option": "--refresh-negatives"})
    positives_per_query: int | None = field(default=None, metadata={  # None: every relevant passage (the paper)
        "help": "At most N positives per query per epoch, sampled (default: all)."})
    dev_max_queries: int | None = field(default=500, metadata={  # None: every dev query
        "help": "Dev queries (a seeded sample) scored over the dev passages after each epoch."})

    kind = "retriever"
    options_order = ("base_model", "shared_encoder", "markers", "pooling", "epochs", "batch_size", "lr",
                     "weight_decay", "warmup", "max_query_len", "max_passage_len", "hard_negatives",
                     "refresh_negatives", "positives_per_query", "seed", "max_steps", "dev_max_queries")

    def validate(self) -> None:
        super().validate()
        at_least_one({"--positives-per-query": self.positives_per_query, "--dev-max-queries": self.dev_max_queries})
        not_negative({"--hard-negatives": self.hard_negatives})
        if self.refresh_negatives and self.hard_negatives == 0:
            raise InputError("--refresh-negatives re-mines the hard negatives: give --hard-negatives N (N ≥ 1)")
        self.retriever_config().validate()  # --pooling, --max-query-len, --max-passage-len

    def retriever_config(self) -> RetrieverConfig:
        from corefsearch.dense.model import RetrieverConfig

        return RetrieverConfig(shared_encoder=self.shared_encoder, max_query_len=self.max_query_len,
                               max_passage_len=self.max_passage_len, pooling=self.pooling, markers=self.markers)
