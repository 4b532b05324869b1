"""The options of ``corefsearch train detector``: defaults, ``--help`` texts and checks, in one place.

Kept apart from ``train.py`` so that the command line reads them without importing the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corefsearch.base.schema import MENTION_TYPES
from corefsearch.detect.model import MAX_LENGTH, STRIDE
from corefsearch.training.arguments import TrainingArguments, at_least_one, one_of, override

if TYPE_CHECKING:
    from corefsearch.detect.model import DetectorConfig

TYPE_CHOICES = ("all", *MENTION_TYPES)


@dataclass
class DetectorTrainingArguments(TrainingArguments):
    """Every option of ``corefsearch train detector`` with its default (shared ones: :class:`TrainingArguments`)."""

    batch_size: int = override("batch_size", 16, help="Passages per optimizer step.")
    lr: float = override("lr", 5e-5, help="AdamW learning rate of the encoder.")
    head_lr: float = field(default=1e-3, metadata={
        "help": "AdamW learning rate of the (randomly initialised) tag head."})
    mention_type: str = field(default="all", metadata={"help": "all | event | entity: the mention types tagged."})
    max_length: int = field(default=MAX_LENGTH, metadata={"help": "Tokens per window of a passage."})
    stride: int = field(default=STRIDE, metadata={"help": "Tokens two windows of a long passage share."})
    # word: the first piece of each word (chosen on dev) | piece: every word piece
    tagging: str = field(default="word", metadata={
        "help": "word (the first piece of each word is tagged, spans cover whole words) | piece (every word piece)."})
    encode_batch_size: int = field(default=64, metadata={"help": "Dev passages per batch when detecting."})

    kind = "detector"
    run_only = (*TrainingArguments.run_only, "encode_batch_size")
    options_order = ("base_model", "mention_type", "epochs", "batch_size", "lr", "head_lr", "weight_decay", "warmup",
                     "max_length", "stride", "tagging", "seed", "max_steps")

    def validate(self) -> None:
        super().validate()
        at_least_one({"--encode-batch-size": self.encode_batch_size})
        one_of("--mention-type", self.mention_type, TYPE_CHOICES)
        self.detector_config().validate()

    def learning_rates(self) -> dict[str, float]:
        return {"--lr": self.lr, "--head-lr": self.head_lr}

    def types(self) -> list[str]:
        return list(MENTION_TYPES) if self.mention_type == "all" else [self.mention_type]

    def detector_config(self) -> DetectorConfig:
        from corefsearch.detect.model import DetectorConfig

        return DetectorConfig(types=self.types(), max_length=self.max_length, stride=self.stride,
                              tagging=self.tagging)
