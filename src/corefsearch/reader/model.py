"""The readers of CoreSearch (Eirew et al. 2022, §4; DESIGN.md §4): a cross-encoder over
``[query ; passage]`` whose head re-scores the passage and marks the coreferring span.

Both heads have start/end logits over the passage tokens (the span). They differ in the
passage score:

- ``dpr``: a linear "selection" score of the [CLS] vector, compared across the passages of a
  query (the DPR reader of Karpukhin et al. 2020).
- ``integrated``: the coreference score of the span ``m_j`` with the query mention ``m_i``,
  ``s(m_j, m_i) = s_m(m_j) + s_a(m_j, m_i)`` (Lee et al. 2017), ``s_m = w·FFNN(g_j)``,
  ``s_a = w·FFNN([g_i ; g_j ; g_i ∘ g_j])``, ``g = [first token ; last token]`` of the span in
  the cross-encoded sequence, each FFNN with one hidden layer (``hidden`` units). The span is
  the gold mention in training and the best of the top start/end spans at inference.

A saved reader is a Hugging Face folder (encoder weights in safetensors, the tokenizer with the
boundary tokens) plus ``reader_head.safetensors`` and ``corefsearch_reader.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import config_from_json
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.model_files import HEAD_FILES
from corefsearch.base.models import (
    DEFAULT_MODEL,
    READER_CONFIG,
    EncoderWithHead,
    add_marker_tokens,
    base_encoder,
    load_offline,
    model_kind,
    resolve_model,
)
from corefsearch.base.onnx_backend import load_encoder_model, resolve_backend
from corefsearch.reader.inputs import PairWindow
from corefsearch.reader.spans import top_spans

if TYPE_CHECKING:
    import torch

HEADS = ("dpr", "integrated")
# How `search --reader` orders the re-ranked passages (`--rerank-fusion`): the reader's score, or
# reciprocal rank fusion with the retriever's ranks; `train reader` records the one that won on dev.
FUSIONS = ("reader", "rrf")
HEAD_WEIGHTS = HEAD_FILES["reader"]


@dataclass
class ReaderConfig:
    """How a reader reads; saved beside its weights."""

    head: str = "integrated"
    markers: bool = True
    max_length: int = 256
    max_query_len: int = 64
    doc_stride: int = 128
    max_span_len: int = 10
    hidden: int = 128
    top_spans: int = 5  # integrated head: start/end spans scored for coreference at inference
    dropout: float = 0.1
    base_model: str = DEFAULT_MODEL
    # The --rerank-fusion `search` and `query` use by default: the one with the better dev MRR@10
    # when the reader was trained (a folder written before it was recorded reads as "reader").
    fusion: str = "reader"

    def validate(self) -> None:
        if self.head not in HEADS:
            raise InputError(f"--head must be one of {', '.join(HEADS)}, got {self.head!r}")
        if self.fusion not in FUSIONS:
            raise InputError(f"fusion must be one of {', '.join(FUSIONS)}, got {self.fusion!r}")
        checks = {"--max-length": (self.max_length, 16), "--max-query-len": (self.max_query_len, 4),
                  "--doc-stride": (self.doc_stride, 1), "--max-span-len": (self.max_span_len, 1),
                  "--hidden": (self.hidden, 1), "top_spans": (self.top_spans, 1)}
        for option, (value, least) in checks.items():
            if value < least:
                raise InputError(f"{option} must be at least {least}, got {value}")
        if self.max_query_len >= self.max_length - 8:
            raise InputError(f"--max-query-len ({self.max_query_len}) leaves no room for the passage in "
                             f"--max-length {self.max_length}")


def _ffnn(n_in: int, hidden: int, dropout: float) -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1))


def _head_module(config: ReaderConfig, width: int) -> Any:
    from torch import nn

    class ReaderHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.span = nn.Linear(width, 2)  # start and end logits
            if config.head == "dpr":
                self.select = nn.Linear(width, 1)
            else:
                self.mention = _ffnn(2 * width, config.hidden, config.dropout)
                self.pair = _ffnn(6 * width, config.hidden, config.dropout)

    return ReaderHead()


@dataclass
class ReaderOutput:
    """What the model says about a batch of windows (passage tokens only for the span logits)."""

    hidden: torch.Tensor  # (W, L, H), the whole sequence
    start_logits: torch.Tensor  # (W, T) over the window's passage tokens, padded with -inf
    end_logits: torch.Tensor
    n_tokens: torch.Tensor  # (W,) passage tokens per window
    passage_start: torch.Tensor  # (W,) position of the first passage token in the sequence


class CrossEncoderReader(EncoderWithHead):
    """The encoder, its tokenizer, the head and the config, with batching and scoring."""

    CONFIG_FILE = READER_CONFIG
    HEAD_FILE = HEAD_WEIGHTS
    HEAD_NAME = "the reader's head"

    def __init__(self, model: Any, tokenizer: Any, config: ReaderConfig, head: Any = None,
                 device: str = "cpu") -> None:
        self._attach(model, tokenizer, config, device)
        self.marker_ids = add_marker_tokens(tokenizer, model) if config.markers else None
        self.head = (head if head is not None else _head_module(config, int(model.config.hidden_size))).to(device)

    # --- construction and persistence ------------------------------------------------------

    @classmethod
    def from_base(cls, name_or_path: str | None, config: ReaderConfig, device: str = "cpu") -> CrossEncoderReader:
        """A new reader on a Hugging Face encoder (default: the bundled all-MiniLM-L6-v2)."""
        from transformers import AutoModel, AutoTokenizer

        name_or_path = base_encoder(name_or_path)  # a retriever folder: its query encoder
        reference = resolve_model(name_or_path)
        if name_or_path not in (None, "", "default"):
            config.base_model = reference
        tokenizer = load_offline(AutoTokenizer, reference, use_fast=True)
        model = load_offline(AutoModel, reference)
        return cls(model, tokenizer, config, device=device)

    @staticmethod
    def read_config(folder: Path) -> ReaderConfig:
        """The configuration of the reader saved in ``folder``, checked, without loading its weights
        (what a caller that only needs the reader's settings reads: ``search --reader --ray``)."""
        folder = Path(folder)
        config_path = folder / READER_CONFIG
        if model_kind(folder) == "retriever":
            raise InputError(f"{folder} is a retriever (from `corefsearch train retriever`), not a reader: --reader "
                             "takes a folder from `corefsearch train reader`; give a retriever to --encoder")
        if not config_path.is_file() or not (folder / HEAD_WEIGHTS).is_file():
            raise MissingArtefactError(f"{folder} is not a reader (no {READER_CONFIG} / {HEAD_WEIGHTS}); "
                                       "train one with `corefsearch train reader`")
        remedy = f"copy the reader folder {folder} again, or train it again (`corefsearch train reader`)"
        return config_from_json(ReaderConfig, config_path, remedy, "reader configuration")

    @classmethod
    def load(cls, folder: Path, device: str = "cpu", backend: str | None = None,
             threads: int | None = None) -> CrossEncoderReader:
        """A reader saved by :meth:`save` (``corefsearch train reader``); ``backend`` onnx|onnx-int8 runs its encoder
        on ONNX Runtime (on the CPU, ``threads`` intra-op threads); None: torch, or onnx-int8 for a folder that
        ships only that export (:func:`corefsearch.base.onnx_backend.resolve_backend`)."""
        from transformers import AutoTokenizer

        folder = Path(folder)
        config = cls.read_config(folder)
        remedy = f"copy the reader folder {folder} again, or train it again (`corefsearch train reader`)"
        tokenizer = load_offline(AutoTokenizer, str(folder), use_fast=True)
        backend = resolve_backend(folder, backend)
        model = load_encoder_model(folder, backend, threads)
        reader = cls(model, tokenizer, config, device=device if backend == "torch" else "cpu")
        reader.load_head(folder, remedy)
        return reader

    # --- forward ----------------------------------------------------------------------------

    def forward(self, windows: list[PairWindow]) -> ReaderOutput:
        import torch

        inputs = self.encoder_inputs(windows)
        length = inputs["input_ids"].shape[1]
        hidden = self.model(**inputs).last_hidden_state
        logits = self.head.span(hidden)  # (W, L, 2)
        n_tokens = torch.tensor([w.n_passage_tokens for w in windows], device=hidden.device)
        starts = torch.tensor([w.passage_start for w in windows], device=hidden.device)
        width = max(1, int(n_tokens.max()))
        positions = starts[:, None] + torch.arange(width, device=hidden.device)[None, :]
        positions = positions.clamp(max=length - 1)
        passage_logits = logits.gather(1, positions[:, :, None].expand(-1, -1, 2))
        valid = torch.arange(width, device=hidden.device)[None, :] < n_tokens[:, None]
        passage_logits = passage_logits.masked_fill(~valid[:, :, None], float("-inf"))
        return ReaderOutput(hidden, passage_logits[..., 0], passage_logits[..., 1], n_tokens, starts)

    def encoder_inputs(self, windows: list[PairWindow]) -> dict[str, torch.Tensor]:
        """The encoder's keyword inputs for a batch of windows, padded to the longest: ``input_ids``,
        ``attention_mask`` and, when the model has segments, ``token_type_ids`` (what an ONNX export
        of the encoder takes too, see :mod:`corefsearch.export.onnx`)."""
        import torch

        length = max(len(w.input_ids) for w in windows)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(windows), length), pad, dtype=torch.long)
        types = torch.zeros((len(windows), length), dtype=torch.long)
        mask = torch.zeros((len(windows), length), dtype=torch.long)
        for row, window in enumerate(windows):
            n = len(window.input_ids)
            ids[row, :n] = torch.tensor(window.input_ids)
            types[row, :n] = torch.tensor(window.token_type_ids)
            mask[row, :n] = 1
        inputs = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}
        if getattr(self.model.config, "type_vocab_size", 1) > 1:
            inputs["token_type_ids"] = types.to(self.device)
        return inputs

    # --- scores -----------------------------------------------------------------------------

    def query_mention_vectors(self, output: ReaderOutput, windows: list[PairWindow]) -> torch.Tensor:
        """``g_i`` per window: the query mention's first and last token vectors, ``(W, 2H)``."""
        import torch

        rows = torch.arange(len(windows), device=output.hidden.device)
        first = torch.tensor([w.query_mention[0] for w in windows], device=output.hidden.device)
        last = torch.tensor([w.query_mention[1] for w in windows], device=output.hidden.device)
        return torch.cat([output.hidden[rows, first], output.hidden[rows, last]], dim=-1)

    def span_vectors(self, output: ReaderOutput, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """``g_j`` of candidate spans given as passage-token indices ``(W, K)``: ``(W, K, 2H)``."""
        import torch

        hidden = output.hidden
        offset = output.passage_start[:, None]
        size = hidden.shape[-1]
        first = hidden.gather(1, (starts + offset)[:, :, None].expand(-1, -1, size))
        last = hidden.gather(1, (ends + offset)[:, :, None].expand(-1, -1, size))
        return torch.cat([first, last], dim=-1)

    def coreference_scores(self, query_vectors: torch.Tensor, span_vectors: torch.Tensor) -> torch.Tensor:
        """``s(m_j, m_i) = s_m(m_j) + s_a(m_j, m_i)`` for ``g_i`` ``(W, 2H)`` and ``g_j``
        ``(W, K, 2H)``: ``(W, K)``."""
        import torch

        g_i = query_vectors[:, None, :].expand_as(span_vectors)
        pair = torch.cat([g_i, span_vectors, g_i * span_vectors], dim=-1)
        return self.head.mention(span_vectors).squeeze(-1) + self.head.pair(pair).squeeze(-1)

    def window_scores(self, output: ReaderOutput, windows: list[PairWindow]) -> tuple[Any, Any, Any]:
        """Per window: the passage score and the predicted span (passage-token indices)."""
        import torch

        k = 1 if self.config.head == "dpr" else self.config.top_spans
        starts, ends, span_score = top_spans(output.start_logits, output.end_logits, output.n_tokens,
                                             self.config.max_span_len, k)
        if self.config.head == "dpr":
            scores = self.head.select(output.hidden[:, 0]).squeeze(-1)
            return scores, starts[:, 0], ends[:, 0]
        coref = self.coreference_scores(self.query_mention_vectors(output, windows),
                                        self.span_vectors(output, starts, ends))
        # Windows without passage tokens have no span to score.
        coref = coref.masked_fill(torch.isinf(span_score) & (span_score < 0), float("-inf"))
        best = coref.argmax(dim=1)
        rows = torch.arange(len(windows), device=coref.device)
        return coref[rows, best], starts[rows, best], ends[rows, best]
