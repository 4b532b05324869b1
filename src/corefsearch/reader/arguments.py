"""The options of ``corefsearch train reader``: defaults, ``--help`` texts and checks, in one place.

Kept apart from ``train.py`` so that the command line reads them without importing the trainer.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corefsearch.base.checks import all_at_least_one
from corefsearch.base.model_card import BaseModel, CardText, base_name, usage_lines
from corefsearch.reader.model import ReaderConfig
from corefsearch.training.arguments import (
    TrainingArguments,
    finite_positive,
    one_of,
    override,
    scored_on_dev,
    unreached,
)

if TYPE_CHECKING:
    from corefsearch.reader.model import ReaderConfig

RANKING_LOSSES = ("softmax", "softmax+pairwise")


@dataclass
class ReaderTrainingArguments(TrainingArguments):
    """Every option of ``corefsearch train reader`` with its default (shared ones: :class:`TrainingArguments`)."""

    batch_size: int = override("batch_size", 4, help="Queries per optimizer step.")
    lr: float = override("lr", 2e-5, help="AdamW learning rate of the encoder.")
    head: str = field(default="integrated", metadata={
        "help": "dpr (start/end + passage selection) | integrated (coreference)."})
    markers: bool = field(default=True, metadata={"help": "Boundary tokens around the query mention."})
    head_lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate of the (randomly initialised) head."})
    negatives: int = field(default=23, metadata={"help": "Retrieved non-relevant passages per query."})
    negatives_from: int = field(default=50, metadata={  # the run's top-k the negatives (and the positive) come from
        "help": "Draw the negatives (and the positive) from the run's top N (the --rerank-k it will re-rank)."})
    span_weight: float = field(default=1.0, metadata={
        "help": "Weight of the span (start + end) cross-entropy against the passage-selection term."})
    ranking_loss: str = field(default="softmax", metadata={
        "help": "softmax (cross-entropy of the positive among the query's passages) | softmax+pairwise (plus a "
                "margin ranking term between the positive and each negative)."})
    max_length: int = field(default=256, metadata={"help": "Tokens per [query ; passage] input."})
    max_query_len: int = field(default=64, metadata={"help": "Query window in tokens, grown around the mention."})
    doc_stride: int = field(default=128, metadata={"help": "Tokens between the starts of a long passage's windows."})
    max_span_len: int = field(default=10, metadata={"help": "Longest span (tokens) extracted at inference."})
    hidden: int = field(default=128, metadata={"help": "Integrated head: hidden units of its FFNNs."})
    top_spans: int = field(default=5, metadata={"cli": False})
    max_train_queries: int | None = field(default=None, metadata={  # None: every train query in the run
        "help": "Train on a seeded sample of N train queries (default: all in the run)."})
    dev_max_queries: int | None = field(default=200, metadata={"help": "Dev queries re-ranked after each epoch."})
    dev_rerank_k: int = field(default=50, metadata={"help": "Dev: re-rank the run's top N."})

    kind = "reader"
    dev_options = ("dev_max_queries", "dev_rerank_k")
    options_order = ("head", "base_model", "markers", "epochs", "batch_size", "lr", "head_lr", "weight_decay",
                     "warmup", "negatives", "negatives_from", "span_weight", "ranking_loss", "max_length",
                     "max_query_len", "doc_stride", "max_span_len", "hidden", "top_spans", "seed", "max_steps",
                     "max_train_queries", "dev_max_queries", "dev_rerank_k")

    def validate(self) -> None:
        super().validate()
        all_at_least_one({"--negatives-from": self.negatives_from, "--dev-rerank-k": self.dev_rerank_k,
                          "--max-train-queries": self.max_train_queries, "--dev-max-queries": self.dev_max_queries,
                          "--negatives": self.negatives})
        finite_positive("--span-weight", self.span_weight)
        one_of("--ranking-loss", self.ranking_loss, RANKING_LOSSES)
        self.reader_config().validate()  # --head, --max-length, --max-query-len, --doc-stride, ...

    def learning_rates(self) -> dict[str, float]:
        return {"--lr": self.lr, "--head-lr": self.head_lr}

    def reader_config(self) -> ReaderConfig:
        return ReaderConfig(head=self.head, markers=self.markers, max_length=self.max_length,
                            max_query_len=self.max_query_len, doc_stride=self.doc_stride,
                            max_span_len=self.max_span_len, hidden=self.hidden, top_spans=self.top_spans)

    @classmethod
    def unused_options(cls, record: Mapping[str, Any]) -> set[str]:
        """Also limits the run did not reach (``max_train_queries``, ``dev_max_queries``) and the integrated
        head's options on a ``dpr`` reader."""
        unused = super().unused_options(record)
        options: Mapping[str, Any] = record.get("options") or {}
        counts: Mapping[str, Any] = record.get("counts") or {}
        if scored_on_dev(record) and unreached(options.get("dev_max_queries"), counts.get("dev_queries")):
            unused.add("dev_max_queries")
        if unreached(options.get("max_train_queries"), counts.get("train_queries")):
            unused.add("max_train_queries")
        if options.get("head") == "dpr":
            unused |= {"hidden", "top_spans"}
        return unused

    @classmethod
    def card_text(cls, record: Mapping[str, Any], base: BaseModel, folder_name: str) -> CardText:
        options: Mapping[str, Any] = record.get("options") or {}
        what = (f"A cross-encoder reader trained with `corefsearch train reader` on {base.description}: the "
                f"`{options.get('head')}` head re-scores each retrieved passage and marks its coreferring span.")
        runs, digests = record.get("run") or [], record.get("run_sha256") or []
        runs, digests = ([runs], [digests]) if isinstance(runs, str) else (runs, digests)
        inputs = [f"- Retrieved candidates: the run `{base_name(run)}` (`{digest}`)"
                  for run, digest in zip(runs, [*digests, *[None] * len(runs)], strict=False)]
        title = f"corefsearch reader ({options.get('head', 'integrated')} head)"
        return CardText("transformers", "text-ranking", title,
                        ["corefsearch", "cross-document-coreference", "reranking", "span-extraction"], what,
                        _usage(folder_name), inputs)


def _usage(folder_name: str) -> list[str]:
    shell, literal = shlex.quote(folder_name), json.dumps(folder_name, ensure_ascii=False)
    intended = (
        "Re-ranking the passages a retriever found for a marked mention, and marking the span in each passage "
        "that corefers with it (cross-document coreference search). A cross-encoder over "
        "`[query window ; passage]` with the mention between `[M]` and `[/M]`. It was trained and selected on "
        "the dataset above only; on other domains or mention types, measure it before relying on it.")
    return usage_lines(intended, folder_name, [
        "With corefsearch:",
        "",
        "```bash",
        f"corefsearch search --index INDEX --queries DATASET/queries/test.jsonl --out run.txt --reader {shell}",
        "```",
        "",
        "```python",
        "from corefsearch.reader.model import CrossEncoderReader",
        "",
        f"reader = CrossEncoderReader.load({literal})  # encoder, tokenizer, head and config",
        "```",
        "",
        "The encoder and its tokenizer (with the marker tokens) are a plain Hugging Face folder; the head "
        "(`reader_head.safetensors`) and its settings (`corefsearch_reader.json`) are corefsearch's:",
        "",
        "```python",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        f"tokenizer = AutoTokenizer.from_pretrained({literal})",
        f"encoder = AutoModel.from_pretrained({literal})",
        "```",
    ])
