"""The options of ``corefsearch train retriever``: defaults, ``--help`` texts and checks, in one place.

Kept apart from ``train.py`` so that the command line reads them without importing the trainer.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corefsearch.base.checks import all_at_least_one, not_negative
from corefsearch.base.errors import InputError
from corefsearch.base.model_card import BaseModel, CardText, base_name, usage_lines
from corefsearch.dense.model import RetrieverConfig
from corefsearch.training.arguments import (
    TrainingArguments,
    count,
    override,
    scored_on_dev,
    unreached,
)

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
    dev_options = ("dev_max_queries",)
    options_order = ("base_model", "shared_encoder", "markers", "pooling", "epochs", "batch_size", "lr",
                     "weight_decay", "warmup", "max_query_len", "max_passage_len", "hard_negatives",
                     "refresh_negatives", "positives_per_query", "seed", "max_steps", "dev_max_queries")

    def validate(self) -> None:
        super().validate()
        all_at_least_one({"--positives-per-query": self.positives_per_query, "--dev-max-queries": self.dev_max_queries})
        not_negative({"--hard-negatives": self.hard_negatives})
        if self.refresh_negatives and self.hard_negatives == 0:
            raise InputError("--refresh-negatives re-mines the hard negatives: give --hard-negatives N (N ≥ 1)")
        self.retriever_config().validate()  # --pooling, --max-query-len, --max-passage-len

    def retriever_config(self) -> RetrieverConfig:
        return RetrieverConfig(shared_encoder=self.shared_encoder, max_query_len=self.max_query_len,
                               max_passage_len=self.max_passage_len, pooling=self.pooling, markers=self.markers)

    @classmethod
    def unused_options(cls, record: Mapping[str, Any]) -> set[str]:
        """Also ``hard_negatives`` without an index, a ``positives_per_query`` no query reached, and a
        ``dev_max_queries`` above the dev queries there were."""
        unused = super().unused_options(record)
        options: Mapping[str, Any] = record.get("options") or {}
        counts: Mapping[str, Any] = record.get("counts") or {}
        if scored_on_dev(record) and unreached(options.get("dev_max_queries"), counts.get("dev_queries")):
            unused.add("dev_max_queries")
        if not record.get("index"):
            unused.add("hard_negatives")
        relevant_pairs = count(counts.get("relevant_pairs"))
        if options.get("positives_per_query") is None or (
                relevant_pairs is not None and count(counts.get("examples_per_epoch")) == relevant_pairs):
            unused.add("positives_per_query")
        return unused

    @classmethod
    def card_text(cls, record: Mapping[str, Any], base: BaseModel, folder_name: str) -> CardText:
        options: Mapping[str, Any] = record.get("options") or {}
        tags = ["corefsearch", "cross-document-coreference", "dense-retrieval", "sentence-transformers",
                "feature-extraction", "sentence-similarity"]
        what = (f"A query encoder and a passage encoder{' (shared)' if options.get('shared_encoder') else ''} "
                f"trained with `corefsearch train retriever` on {base.description}: {options.get('pooling', 'cls')} "
                f"pooling, {'with' if options.get('markers', True) else 'without'} mention markers, in-batch "
                "negatives" + (" and BM25 hard negatives." if hard_negatives_used(record) else "."))
        inputs = ([f"- BM25 hard negatives from the Lucene index `{base_name(record['index'])}`"]
                  if hard_negatives_used(record) else [])
        return CardText("sentence-transformers", "sentence-similarity",
                        "corefsearch retriever (mention-aware DPR bi-encoder)", tags, what,
                        _usage(folder_name, options), inputs)


def hard_negatives_used(record: Mapping[str, Any]) -> bool:
    """Whether a retriever was trained with BM25 hard negatives (an index, and more than 0 asked for)."""
    return bool(record.get("index")) and bool((record.get("options") or {}).get("hard_negatives"))


def _usage(folder_name: str, options: Mapping[str, Any]) -> list[str]:
    markers = options.get("markers", True)
    query_text = ('text[:start] + "[M] " + text[start:end] + " [/M]" + text[end:]' if markers
                  else "the query passage itself (no markers)")
    shell = shlex.quote(folder_name)
    intended = (
        "Cross-document coreference search: given a passage with one marked mention of an event or entity, "
        "retrieve the passages that mention the same event or entity. The query encoder reads the mention's "
        "passage with the mention between the boundary tokens `[M]` and `[/M]`; the passage encoder reads "
        "`title [SEP] text`. Scores are dot products of the unnormalised vectors. It was trained and selected "
        "on the dataset above only; on other domains or mention types, measure it before relying on it.")
    return usage_lines(intended, folder_name, [
        "With corefsearch:",
        "",
        "```bash",
        f"corefsearch index DATASET --out INDEX --dense --encoder {shell}",
        f"corefsearch search --index INDEX --queries DATASET/queries/test.jsonl --out run.txt --retriever dense "
        f"--encoder {shell}",
        "```",
        "",
        "With sentence-transformers (each encoder folder is a sentence-transformers model):",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f"passages = SentenceTransformer({json.dumps(folder_name + '/passage_encoder', ensure_ascii=False)})",
        f"queries = SentenceTransformer({json.dumps(folder_name + '/query_encoder', ensure_ascii=False)})",
        'p = passages.encode([("Title", "Passage text.")])  # (title, text) pairs; "" for no title',
        f"q = queries.encode([marked])  # marked = {query_text}",
        "scores = q @ p.T",
        "```",
        "",
        f"The query encoder reads at most {options.get('max_query_len')} tokens; corefsearch cuts a longer "
        "passage to a window grown evenly around the mention, sentence-transformers cuts it at the end, so "
        "for long passages feed a window around the mention.",
    ])
