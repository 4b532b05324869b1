"""The options of ``corefsearch train detector``: defaults, ``--help`` texts and checks, in one place.

Kept apart from ``train.py`` so that the command line reads them without importing the trainer.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corefsearch.base.checks import all_at_least_one
from corefsearch.base.model_card import BaseModel, CardText, usage_lines
from corefsearch.base.schema import MENTION_TYPES
from corefsearch.detect.model import MAX_LENGTH, STRIDE, DetectorConfig
from corefsearch.training.arguments import TrainingArguments, one_of, override

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
        all_at_least_one({"--encode-batch-size": self.encode_batch_size})
        one_of("--mention-type", self.mention_type, TYPE_CHOICES)
        self.detector_config().validate()

    def learning_rates(self) -> dict[str, float]:
        return {"--lr": self.lr, "--head-lr": self.head_lr}

    def types(self) -> list[str]:
        return list(MENTION_TYPES) if self.mention_type == "all" else [self.mention_type]

    def detector_config(self) -> DetectorConfig:
        return DetectorConfig(types=self.types(), max_length=self.max_length, stride=self.stride,
                              tagging=self.tagging)

    @classmethod
    def card_text(cls, record: Mapping[str, Any], base: BaseModel, folder_name: str) -> CardText:
        options: Mapping[str, Any] = record.get("options") or {}
        what = (f"A mention detector trained with `corefsearch train detector` on {base.description}: one BIO tag "
                f"sequence per mention type ({', '.join(_trained_types(options))}) over the encoder's tokens, "
                "picked on dev by strict mention F1.")
        return CardText("transformers", "token-classification", "corefsearch mention detector (BIO tagging)",
                        ["corefsearch", "cross-document-coreference", "mention-detection", "token-classification"],
                        what, _usage(folder_name))


def _usage(folder_name: str) -> list[str]:
    shell, literal = shlex.quote(folder_name), json.dumps(folder_name, ensure_ascii=False)
    intended = (
        "Mention detection in plain text: each token of a passage is tagged B, I or O once per mention type, "
        "and the tagged spans are the predicted mentions that `cluster --mentions predicted` and the search "
        "features read. It was trained and selected on the fully annotated passages of the dataset above only; "
        "on other domains, measure it (`corefsearch evaluate --mentions`) before relying on it.")
    return usage_lines(intended, folder_name, [
        "```bash",
        f"corefsearch detect DATASET --model {shell}",
        "```",
        "",
        "```python",
        "from corefsearch.detect.model import MentionDetector",
        "",
        f"detector = MentionDetector.load({literal})",
        'detector.detect(["A fire broke out at the plant on Monday."])  # [[(start, end, type, score), ...]]',
        "```",
    ])


def _trained_types(options: Mapping[str, Any]) -> list[str]:
    """The mention types a run trained (the record's ``mention_type``: event, entity or all)."""
    kind = options.get("mention_type", "all")
    return list(MENTION_TYPES) if kind == "all" else [str(kind)]
