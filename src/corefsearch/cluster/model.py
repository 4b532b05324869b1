"""The contrastive mention encoder of Hsu & Horwood (2022, §3.2; DESIGN.md §4 "Contrastive").

A Hugging Face encoder reads a mention's input (:mod:`corefsearch.cluster.inputs`: the document's
first two sentences + the mention's sentence with ``[E]``/``[/E]``); two MLPs map the first token's
vector (``[CLS]``, the document and the mention together) and the element-wise sum of the mention's
token vectors; the mention's vector is ``v = [MLP₁(CLS) ; MLP₂(Σ mention tokens)]``, L2-normalised so
that the dot product is the cosine that the contrastive loss and the clustering use. One encoder pass
per mention, n passes for n mentions, instead of a cross-encoder's n² pairs.

A saved encoder is a Hugging Face folder (``config.json``, ``model.safetensors``, the tokenizer with
``[E]``/``[/E]``) plus ``clusterer_head.safetensors`` (the two MLPs) and ``corefsearch_clusterer.json``
(:class:`ClustererConfig`: base model, max length, MLP sizes, markers, and the threshold τ that
training picks on dev). The config is read strictly (:func:`corefsearch.base.artefacts.config_from_json`).
``load(..., backend="onnx"|"onnx-int8")`` runs the encoder on ONNX Runtime (the export of ``corefsearch export-onnx
FOLDER``), the MLPs in torch; a folder that ships only its int8 export runs on it by default.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from corefsearch.base.artefacts import config_from_json
from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.model_files import HEAD_FILES
from corefsearch.base.models import (
    CLUSTERER_CONFIG,
    DEFAULT_MODEL,
    EncoderWithHead,
    base_encoder,
    load_offline,
    resolve_model,
)
from corefsearch.base.onnx_backend import OnnxEncoder, load_encoder_model, resolve_backend
from corefsearch.base.precision import autocast
from corefsearch.base.progress import track
from corefsearch.base.shipped import resolve_reference, shipped_hint
from corefsearch.cluster.inputs import (
    ENTITY_END,
    ENTITY_START,
    MAX_LENGTH,
    EncoderInput,
    MentionRecord,
    encoder_input,
)

if TYPE_CHECKING:
    import torch

HEAD_WEIGHTS = HEAD_FILES["clusterer"]
TRAIN_HINT = "train one with `corefsearch train clusterer`"


@dataclass
class ClustererConfig:
    """How a mention encoder reads and what it outputs; saved beside its weights."""

    base_model: str = DEFAULT_MODEL
    max_length: int = MAX_LENGTH
    mlp_hidden: int = 1024  # the paper's hidden layer of both MLPs
    mlp_out: int = 1024  # each half of v (the paper: 2 × 1024 = 2048 dimensions)
    dropout: float = 0.1
    start_marker: str = ENTITY_START
    end_marker: str = ENTITY_END
    threshold: float | None = None  # τ, the cosine distance where clustering stops; set by training on dev
    # β: two mentions with the same head lemma are β closer (cosine distance) when clustered; set on dev
    lemma_weight: float = 0.0
    # The answer's cut (``query --cluster``): a hit's nearest candidate mention joins the query's answer when its
    # cosine to the query mention, plus β for a shared head lemma, is at least this; None: 1 - τ
    answer_threshold: float | None = None

    def validate(self) -> None:
        for name, value, least in (("max_length", self.max_length, 8), ("mlp_hidden", self.mlp_hidden, 1),
                                   ("mlp_out", self.mlp_out, 1)):
            if value < least:
                raise InputError(f"{name} must be at least {least}, got {value}")
        if not 0 <= self.dropout < 1:
            raise InputError(f"dropout must be in [0, 1), got {self.dropout}")
        if (self.start_marker, self.end_marker) != (ENTITY_START, ENTITY_END):
            raise InputError(f"markers must be {ENTITY_START} and {ENTITY_END}, got {self.start_marker} and "
                             f"{self.end_marker}")
        if self.threshold is not None and (isinstance(self.threshold, bool) or
                                           not isinstance(self.threshold, (int, float)) or
                                           not 0 <= self.threshold <= 2):
            raise InputError(f"threshold (a cosine distance) must be between 0 and 2, got {self.threshold}")
        check_lemma_weight(self.lemma_weight, "lemma_weight")
        if self.answer_threshold is not None and (isinstance(self.answer_threshold, bool) or
                                                  not isinstance(self.answer_threshold, (int, float)) or
                                                  not -1 <= self.answer_threshold <= 3):
            raise InputError(f"answer_threshold (a cosine, plus β for a shared head lemma) must be between -1 and 3, "
                             f"got {self.answer_threshold}")

    @property
    def answer_cut(self) -> float | None:
        """The answer's cut: :attr:`answer_threshold`, else the cosine of τ (None without either)."""
        if self.answer_threshold is not None:
            return float(self.answer_threshold)
        return None if self.threshold is None else 1.0 - float(self.threshold)


def check_lemma_weight(weight: float, option: str = "--lemma-weight") -> None:
    """β, the cosine distance a shared head lemma takes off a mention pair: a number in [0, 2]."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 2:
        raise InputError(f"{option} (the cosine distance a shared head lemma takes off a pair) must be between 0 "
                         f"and 2, got {weight}")


def add_entity_markers(tokenizer: Any, model: Any) -> tuple[int, int]:
    """Add ``[E]``/``[/E]`` to a tokenizer (once; special: never split nor lower-cased) and rows for
    them to the model's embeddings; their ids. (As ``dense.encoder.add_marker_tokens`` does for
    ``[M]``/``[/M]``.)"""
    missing = [t for t in (ENTITY_START, ENTITY_END) if t not in tokenizer.get_vocab()]
    if missing:
        from transformers import AddedToken
        from transformers.utils import logging as hf_logging

        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in missing], special_tokens=True)
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            model.resize_token_embeddings(len(tokenizer))
        finally:
            hf_logging.set_verbosity(verbosity)
    start_id, end_id = tokenizer.convert_tokens_to_ids([ENTITY_START, ENTITY_END])
    return int(start_id), int(end_id)


def _mlp(n_in: int, hidden: int, out: int, dropout: float) -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, out))


def _head_module(config: ClustererConfig, width: int) -> Any:
    from torch import nn

    class ClustererHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cls = _mlp(width, config.mlp_hidden, config.mlp_out, config.dropout)
            self.mention = _mlp(width, config.mlp_hidden, config.mlp_out, config.dropout)

    return ClustererHead()


@dataclass
class EncodingPlan:
    """What :meth:`MentionEncoder.encode` runs: the distinct tokenised ``inputs``, the ``batches`` (rows of
    ``inputs``, in order of length) and ``slot`` (record i's vector is row ``slot[i]`` of the inputs')."""

    inputs: list[EncoderInput]
    batches: list[list[int]]
    slot: np.ndarray

    def assemble(self, outputs: Iterable[np.ndarray], dimension: int) -> np.ndarray:
        """The records' vectors, in their order, from the vectors of each batch (in batch order)."""
        vectors = np.zeros((len(self.inputs), dimension), dtype=np.float32)
        for rows, output in zip(self.batches, outputs, strict=True):
            vectors[rows] = output
        return vectors[self.slot]


class MentionEncoder(EncoderWithHead):
    """The encoder, its tokenizer, the two MLPs and the config."""

    CONFIG_FILE = CLUSTERER_CONFIG
    HEAD_FILE = HEAD_WEIGHTS
    HEAD_NAME = "the head"

    def __init__(self, model: Any, tokenizer: Any, config: ClustererConfig, head: Any = None,
                 device: str = "cpu") -> None:
        self._attach(model, tokenizer, config, device)
        self.marker_ids = add_entity_markers(tokenizer, self.model)
        self.head = (head if head is not None else _head_module(config, int(model.config.hidden_size))).to(device)
        self.last_unique_inputs: int | None = None  # distinct inputs of the last encode() call
        self.backend = "torch"  # the encoder's runtime (load's backend)

    @property
    def dimension(self) -> int:
        return 2 * self.config.mlp_out

    @classmethod
    def from_base(cls, name_or_path: str | None, config: ClustererConfig | None = None,
                  device: str = "cpu") -> MentionEncoder:
        """A new encoder (random MLPs) on a Hugging Face model (default: the bundled all-MiniLM-L6-v2)."""
        from transformers import AutoModel, AutoTokenizer

        config = config or ClustererConfig()
        name_or_path = base_encoder(name_or_path)  # a retriever folder: its query encoder
        reference = resolve_model(name_or_path)
        if name_or_path not in (None, "", "default"):
            config.base_model = reference
        tokenizer = load_offline(AutoTokenizer, reference, use_fast=True)
        model = load_offline(AutoModel, reference)
        return cls(model, tokenizer, config, device=device)

    @classmethod
    def load(cls, folder: Path, device: str = "cpu", backend: str | None = None) -> MentionEncoder:
        """An encoder saved by :meth:`save`; a folder that is not one is a one-line error. ``backend`` onnx|onnx-int8
        runs its encoder on ONNX Runtime (on the CPU, whatever ``device``); None: torch, or onnx-int8 for a folder
        that ships only that export (:func:`corefsearch.base.onnx_backend.resolve_backend`)."""
        from transformers import AutoTokenizer

        folder = Path(resolve_reference(folder))  # a shipped model's name, or a folder
        if not folder.is_dir():
            raise MissingArtefactError(f"{folder}: no such mention encoder folder; {TRAIN_HINT}{shipped_hint()}")
        config_path = folder / CLUSTERER_CONFIG
        if not config_path.is_file() or not (folder / HEAD_WEIGHTS).is_file():
            raise MissingArtefactError(f"{folder} is not a mention encoder (no {CLUSTERER_CONFIG} / {HEAD_WEIGHTS}); "
                                       f"{TRAIN_HINT}")
        remedy = f"copy the mention encoder folder {folder} again, or train it again (`corefsearch train clusterer`)"
        config = config_from_json(ClustererConfig, config_path, remedy, "mention encoder configuration")
        tokenizer = load_offline(AutoTokenizer, str(folder), use_fast=True)
        if ENTITY_START not in tokenizer.get_vocab() or ENTITY_END not in tokenizer.get_vocab():
            raise InputError(f"{folder}: the tokenizer lacks the {ENTITY_START}/{ENTITY_END} tokens the encoder was "
                             f"trained with; {remedy}")
        backend = resolve_backend(folder, backend)
        model = load_encoder_model(folder, backend)
        encoder = cls(model, tokenizer, config, device=device if backend == "torch" else "cpu")
        encoder.backend = backend
        encoder.load_head(folder, remedy)
        return encoder

    def modules(self) -> list[Any]:
        return [self.head] if isinstance(self.model, OnnxEncoder) else [self.model, self.head]

    def parameters(self) -> list[Any]:
        return [p for module in self.modules() for p in module.parameters()]

    def batch(self, records: Sequence[MentionRecord] | Sequence[EncoderInput]) -> dict[str, torch.Tensor]:
        """Padded ``input_ids``, ``attention_mask``, ``token_type_ids`` (if the tokenizer has them) and
        ``mention_mask`` (1 on the mention's tokens), of records or of their tokenised inputs."""
        import torch

        inputs = [r if isinstance(r, EncoderInput) else encoder_input(self.tokenizer, r, self.config.max_length)
                  for r in records]
        width = max(len(i.input_ids) for i in inputs)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(inputs), width), pad, dtype=torch.long)
        attention = torch.zeros((len(inputs), width), dtype=torch.long)
        types = torch.zeros((len(inputs), width), dtype=torch.long)
        mention = torch.zeros((len(inputs), width), dtype=torch.float32)
        for row, item in enumerate(inputs):
            ids[row, :len(item.input_ids)] = torch.tensor(item.input_ids)
            attention[row, :len(item.input_ids)] = 1
            if item.token_type_ids is not None:
                types[row, :len(item.token_type_ids)] = torch.tensor(item.token_type_ids)
            mention[row, item.mention_start:item.mention_end] = 1
        batch = {"input_ids": ids, "attention_mask": attention, "mention_mask": mention}
        if inputs and inputs[0].token_type_ids is not None:
            batch["token_type_ids"] = types
        return {name: tensor.to(self.device) for name, tensor in batch.items()}

    def forward(self, records: Sequence[MentionRecord] | Sequence[EncoderInput]) -> torch.Tensor:
        """The L2-normalised vectors ``[MLP₁(CLS) ; MLP₂(Σ mention tokens)]`` (records × 2·mlp_out), with
        gradients (for training)."""
        import torch
        import torch.nn.functional as F

        batch = self.batch(records)
        mention_mask = batch.pop("mention_mask")
        with autocast(self.device):  # the --precision scope (fp32: nothing)
            hidden = self.model(**batch).last_hidden_state
            cls = hidden[:, 0]
            summed = (hidden * mention_mask.unsqueeze(-1).to(hidden.dtype)).sum(dim=1)
            vector = torch.cat([self.head.cls(cls), self.head.mention(summed)], dim=-1)
        return F.normalize(vector.float(), dim=-1)

    def plan(self, records: Sequence[MentionRecord], batch_size: int = 32) -> EncodingPlan:
        """The batches :meth:`encode` runs for ``records``: identical inputs once, the rest in order of length."""
        at_least_one("--batch-size", batch_size)
        unique: dict[tuple[Any, ...], int] = {}
        inputs: list[EncoderInput] = []
        slot = np.zeros(len(records), dtype=np.int64)  # record i's vector is row slot[i] of the unique inputs
        for i, record in enumerate(records):
            item = encoder_input(self.tokenizer, record, self.config.max_length)
            key = (tuple(item.input_ids), tuple(item.token_type_ids or ()), item.mention_start, item.mention_end)
            if key not in unique:
                unique[key] = len(inputs)
                inputs.append(item)
            slot[i] = unique[key]
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i].input_ids))
        batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
        return EncodingPlan(inputs, batches, slot)

    def encode_batches(self, batches: Iterable[Sequence[EncoderInput]]) -> list[np.ndarray]:
        """The vectors of each batch of tokenised inputs (float32, unit length), in evaluation mode.
        The same batches give the same numbers wherever they run (``corefsearch.distributed`` sends
        the batches of one :meth:`plan` to Ray workers)."""
        import torch

        was_training = self.model.training
        self.train(False)
        try:
            with torch.inference_mode():
                return [self.forward(list(batch)).float().cpu().numpy() for batch in batches]
        finally:
            self.train(was_training)

    def encode(self, records: Sequence[MentionRecord], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """The vectors of ``records`` (float32, unit length, in order), in evaluation mode.

        The records are tokenised first; identical inputs (the same mention in the same sentence under
        the same two opening sentences: copies of one wire story in a news archive) are encoded once,
        and the rest in order of length, so that a batch pads its inputs to a similar length (on ECB+
        this saves a third of the work of batches in corpus order); the vectors come back in the
        records' order. ``progress``: a progress bar over the batches."""
        plan = self.plan(records, batch_size)
        batches: Iterable[list[EncoderInput]] = ([plan.inputs[i] for i in rows] for rows in plan.batches)
        if progress:
            batches = track(batches, "Encoding mentions", total=len(plan.batches))
        vectors = plan.assemble(self.encode_batches(batches), self.dimension)
        self.last_unique_inputs = len(plan.inputs)
        return vectors
