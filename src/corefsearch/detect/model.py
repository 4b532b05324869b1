"""The trained mention detector: a Hugging Face encoder and one BIO head per mention type.

Token tagging (BIO): one encoder pass tags every word of a passage, so detection costs what dense
encoding costs. The head reads each word piece's last hidden state (dropout, then a linear layer to 3
tags per type). With ``tagging="word"`` (the default, chosen on dev: bench/RESULTS.md, "Predicted
mentions") only the first piece of each word is tagged, in training and in decoding, and a span covers
its words whole, so a word is never cut into pieces ("Poly" + "y" of "Polygamy"); ``"piece"`` tags every
piece. A passage longer than ``max_length`` pieces is read in windows that overlap by ``stride``, and a
span found in two windows is kept once.

A saved detector is a Hugging Face folder (``config.json``, ``model.safetensors``, the tokenizer) plus
``detector_head.safetensors`` and ``corefsearch_detector.json`` (:class:`DetectorConfig`: base model,
types, lengths). The config is read strictly (:func:`corefsearch.base.artefacts.config_from_json`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import config_from_json
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.model_files import HEAD_FILES
from corefsearch.base.models import DEFAULT_MODEL, DETECTOR_CONFIG, EncoderWithHead, load_offline, resolve_model
from corefsearch.base.onnx_backend import OnnxEncoder, load_encoder_model, resolve_backend
from corefsearch.base.precision import autocast
from corefsearch.base.schema import MENTION_TYPES
from corefsearch.detect.labels import IGNORE, spans_from_tags, tags_for_spans, trim

if TYPE_CHECKING:
    import torch

HEAD_WEIGHTS = HEAD_FILES["detector"]
TRAIN_HINT = "train one with `corefsearch train detector`, or use `--model heuristic`"
MAX_LENGTH = 256
STRIDE = 64
TAGGINGS = ("word", "piece")

#: A found mention: (start, end, type, score), characters into the passage text.
Found = tuple[int, int, str, float]


@dataclass
class DetectorConfig:
    """What a detector tags and how it reads; saved beside its weights."""

    base_model: str = DEFAULT_MODEL
    types: list[str] = field(default_factory=lambda: list(MENTION_TYPES))
    max_length: int = MAX_LENGTH
    stride: int = STRIDE
    dropout: float = 0.1
    tagging: str = "word"  # word: the first piece of each word is tagged, spans cover whole words | piece

    def validate(self) -> None:
        if self.tagging not in TAGGINGS:
            raise InputError(f"tagging must be one of {', '.join(TAGGINGS)}, got {self.tagging!r}")
        if not self.types or any(t not in MENTION_TYPES for t in self.types) or len(set(self.types)) != len(self.types):
            raise InputError(f"types must be distinct values of {', '.join(MENTION_TYPES)}, got {self.types}")
        if self.max_length < 16:
            raise InputError(f"max_length must be at least 16, got {self.max_length}")
        if not 0 <= self.stride < self.max_length // 2:
            raise InputError(f"stride must be in [0, max_length / 2), got {self.stride}")
        if not 0 <= self.dropout < 1:
            raise InputError(f"dropout must be in [0, 1), got {self.dropout}")


def _head_module(width: int, n_types: int, dropout: float) -> Any:
    from torch import nn

    return nn.Sequential(nn.Dropout(dropout), nn.Linear(width, 3 * n_types))


@dataclass
class Window:
    """One window of a passage as the encoder reads it: token ids and each token's character offsets
    into the passage (``(0, 0)`` for special tokens)."""

    row: int  # the passage's position in the batch given to :meth:`MentionDetector.windows`
    input_ids: list[int]
    offsets: list[tuple[int, int]]
    # the characters each tagged position stands for: with word tagging the whole word at its first piece and
    # (0, 0) at the others (not tagged); with piece tagging the offsets themselves
    tagged: list[tuple[int, int]]


def _word_offsets(offsets: list[tuple[int, int]], words: list[int | None]) -> list[tuple[int, int]]:
    """Per piece: the characters of its whole word at the word's first piece in the window, (0, 0) elsewhere."""
    tagged: list[tuple[int, int]] = [(0, 0)] * len(offsets)
    first: dict[int, int] = {}
    for j, word in enumerate(words):
        if word is None or offsets[j] == (0, 0):
            continue
        if word not in first:
            first[word] = j
            tagged[j] = offsets[j]
        else:
            start = tagged[first[word]][0]
            tagged[first[word]] = (start, offsets[j][1])
    return tagged


class MentionDetector(EncoderWithHead):
    """An encoder with a BIO head per type; :meth:`detect` gives each passage's mentions."""

    CONFIG_FILE = DETECTOR_CONFIG
    HEAD_FILE = HEAD_WEIGHTS
    HEAD_NAME = "the detector's head"

    def __init__(self, model: Any, tokenizer: Any, config: DetectorConfig, device: str = "cpu",
                 head: Any = None) -> None:
        self._attach(model, tokenizer, config, device)
        width = int(getattr(model.config, "hidden_size", 0) or model.config.dim)
        self.head = (head or _head_module(width, len(config.types), config.dropout)).to(device)
        self.backend = "torch"  # the encoder's runtime (load's backend)

    @classmethod
    def from_base(cls, base_model: str | None, config: DetectorConfig, device: str = "cpu") -> MentionDetector:
        from transformers import AutoModel, AutoTokenizer

        reference = resolve_model(base_model, "--base-model")
        config.base_model = base_model or DEFAULT_MODEL
        tokenizer = load_offline(AutoTokenizer, reference)
        model = load_offline(AutoModel, reference)
        return cls(model, tokenizer, config, device)

    @classmethod
    def load(cls, folder: Path, device: str = "cpu", backend: str | None = None) -> MentionDetector:
        """A detector folder from ``train detector``; ``backend`` onnx|onnx-int8 runs its encoder on ONNX
        Runtime (the export of ``corefsearch export-onnx FOLDER``); None: torch, or onnx-int8 for a folder that
        ships only that export (:func:`corefsearch.base.onnx_backend.resolve_backend`)."""
        from transformers import AutoTokenizer

        folder = Path(folder)
        if not (folder / DETECTOR_CONFIG).is_file():
            raise MissingArtefactError(f"{folder}: not a mention detector folder (no {DETECTOR_CONFIG}); {TRAIN_HINT}")
        config = config_from_json(DetectorConfig, folder / DETECTOR_CONFIG, TRAIN_HINT, "detector configuration")
        tokenizer = load_offline(AutoTokenizer, str(folder))
        backend = resolve_backend(folder, backend)
        detector = cls(load_encoder_model(folder, backend), tokenizer, config, device if backend == "torch" else "cpu")
        detector.backend = backend
        detector.load_head(folder, TRAIN_HINT)
        detector.train(False)
        return detector

    @property
    def types(self) -> list[str]:
        """The mention types this detector tags."""
        return list(self.config.types)

    def modules(self) -> list[Any]:
        return [self.head] if isinstance(self.model, OnnxEncoder) else [self.model, self.head]

    # --- inputs ----------------------------------------------------------------------------------

    def windows(self, texts: Sequence[str]) -> list[Window]:
        """The windows of ``texts``: each text's tokens cut into pieces of at most ``max_length`` tokens
        (with the special tokens) that overlap by ``stride`` tokens."""
        encoded = self.tokenizer(list(texts), add_special_tokens=True, truncation=True,
                                 max_length=self.config.max_length, stride=self.config.stride,
                                 return_overflowing_tokens=True, return_offsets_mapping=True,
                                 return_special_tokens_mask=True)
        rows = encoded["overflow_to_sample_mapping"]
        windows = []
        for i, ids in enumerate(encoded["input_ids"]):
            special = encoded["special_tokens_mask"][i]
            offsets = [(0, 0) if special[j] else (int(a), int(b))
                       for j, (a, b) in enumerate(encoded["offset_mapping"][i])]
            windows.append(Window(int(rows[i]), list(ids), offsets,
                                  _word_offsets(offsets, encoded.word_ids(i)) if self.config.tagging == "word"
                                  else offsets))
        return windows

    def pad(self, windows: Sequence[Window]) -> dict[str, torch.Tensor]:
        import numpy as np
        import torch

        width = max(len(w.input_ids) for w in windows)
        pad_id = self.tokenizer.pad_token_id or 0
        ids = np.full((len(windows), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(windows), width), dtype=np.int64)
        for row, window in enumerate(windows):
            ids[row, :len(window.input_ids)] = window.input_ids
            mask[row, :len(window.input_ids)] = 1
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if getattr(self.model.config, "type_vocab_size", 0):
            batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
        return batch

    def target_tags(self, windows: Sequence[Window], gold: Sequence[Sequence[tuple[int, int, str]]]) -> torch.Tensor:
        """``[windows, tokens, types]`` BIO targets from each passage's gold ``(start, end, type)`` spans."""
        import torch

        width = max(len(w.input_ids) for w in windows)
        targets = torch.full((len(windows), width, len(self.config.types)), IGNORE, dtype=torch.long)
        for row, window in enumerate(windows):
            for t, kind in enumerate(self.config.types):
                spans = [(s, e) for s, e, k in gold[window.row] if k == kind]
                targets[row, :len(window.tagged), t] = torch.tensor(tags_for_spans(window.tagged, spans))
        return targets

    # --- forward ---------------------------------------------------------------------------------

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[windows, tokens, types, 3]`` tag scores."""
        inputs = {name: value.to(self.device) for name, value in batch.items()}
        with autocast(self.device):
            hidden = self.model(**inputs).last_hidden_state
            scores = self.head(hidden.to(next(self.head.parameters()).dtype))
        return scores.float().view(*hidden.shape[:2], len(self.config.types), 3)

    def loss(self, windows: Sequence[Window], gold: Sequence[Sequence[tuple[int, int, str]]]) -> torch.Tensor:
        import torch

        logits = self.logits(self.pad(windows))
        targets = self.target_tags(windows, gold).to(logits.device)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 3), targets.reshape(-1), ignore_index=IGNORE)

    def detect(self, texts: Sequence[str], batch_size: int = 64) -> list[list[Found]]:
        """The mentions of each text: ``(start, end, type, score)``, sorted, offsets slicing the text."""
        import torch

        windows = self.windows(texts)
        found: list[dict[tuple[int, int, str], float]] = [{} for _ in texts]
        order = sorted(range(len(windows)), key=lambda i: len(windows[i].input_ids))  # length-sorted batches
        self.train(False)
        with torch.inference_mode():
            for first in range(0, len(order), batch_size):
                chunk = [windows[i] for i in order[first:first + batch_size]]
                # One max gives each token's tag and its probability; only the tagged tokens of each row
                # become Python lists (converting the padded tensor whole took a third of the time outside
                # the model).
                best, tags = self.logits(self.pad(chunk)).softmax(-1).max(-1)
                best, tags = best.cpu().numpy(), tags.cpu().numpy()
                for row, window in enumerate(chunk):
                    tagged = [j for j, (a, b) in enumerate(window.tagged) if a != b]  # special tokens only at the ends
                    text = texts[window.row]
                    offsets = [window.tagged[j] for j in tagged]
                    row_tags, row_best = tags[row, tagged].T.tolist(), best[row, tagged].T.tolist()
                    for t, kind in enumerate(self.config.types):
                        column, scores = row_tags[t], row_best[t]
                        for start, end, score in spans_from_tags(column, offsets, scores):
                            span = trim(text, start, end)
                            if span is not None:
                                key = (*span, kind)
                                found[window.row][key] = max(score, found[window.row].get(key, 0.0))
        return [sorted((s, e, k, round(v, 6)) for (s, e, k), v in spans.items()) for spans in found]
