"""A retriever model: a query encoder and a passage encoder (DPR), or one shared encoder.

Saved layout (``corefsearch train retriever --out MODEL_DIR``)::

    MODEL_DIR/query_encoder/      Hugging Face folder (safetensors, tokenizer with markers)
    MODEL_DIR/passage_encoder/    the same for passages (a copy when the encoder is shared)
    MODEL_DIR/corefsearch_retriever.json   lengths, pooling, markers, shared, base model

An inference-only retriever folder (``corefsearch.export.ship``) holds each encoder's int8 export and no torch
weights, and ``MODEL_DIR/fingerprints.json``: the fingerprints of the weights it was exported from (what an
index records of its encoder), so that an index built with the trained folder is searched with it as it is.
It loads with ``onnx-int8`` by default and runs nothing else.

Any plain Hugging Face model (name or folder) also loads as a retriever: one shared
encoder, mean pooling and no markers (an untrained model knows no marker tokens), the
zero-shot baseline.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from corefsearch.base.artefacts import config_from_json, read_json_object
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.models import RETRIEVER_CONFIG, RETRIEVER_QUERY_ENCODER, model_kind, resolve_model
from corefsearch.base.onnx_backend import (
    SHIPPED_BACKEND,
    OnnxEncoder,
    check_onnx_export,
    inference_only,
    resolve_backend,
)
from corefsearch.base.shipped import resolve_reference
from corefsearch.dense.encoder import EncoderConfig, TextEncoder
from corefsearch.dense.st_export import write_sentence_transformers_config

QUERY_ENCODER = RETRIEVER_QUERY_ENCODER
PASSAGE_ENCODER = "passage_encoder"
FINGERPRINTS_FILE = "fingerprints.json"  # an inference-only folder's: the fingerprints of its torch weights


@dataclass
class RetrieverConfig:
    shared_encoder: bool = False
    max_query_len: int = 64
    max_passage_len: int = 180
    pooling: str = "cls"
    markers: bool = True
    base_model: str = "default"

    def validate(self) -> None:
        if self.max_query_len < 8 or self.max_passage_len < 8:
            raise InputError("--max-query-len and --max-passage-len must be at least 8 tokens")
        EncoderConfig(pooling=self.pooling).validate()


class BiEncoder:
    def __init__(self, query_encoder: TextEncoder, passage_encoder: TextEncoder, config: RetrieverConfig,
                 reference: str, folder: Path | None = None) -> None:
        self.query_encoder = query_encoder
        self.passage_encoder = passage_encoder
        self.config = config
        self.reference = reference
        self.folder = folder  # the retriever folder it was loaded from (None: a zero-shot Hugging Face model)
        self.backend = "torch"  # the runtime of the encoders (use_backend)
        self._fingerprints: dict[str, str] | None = None  # of the torch weights, kept when ONNX Runtime runs them

    @classmethod
    def from_base(cls, base_model: str | None, config: RetrieverConfig, device: str = "cpu") -> BiEncoder:
        """Fresh encoders from a base model, for training (two copies unless shared)."""
        config.validate()
        encoder_config = EncoderConfig(pooling=config.pooling, markers=config.markers,
                                       max_length=config.max_passage_len)
        query = TextEncoder.load(base_model, EncoderConfig(**asdict(encoder_config)), device)
        passage = query if config.shared_encoder else TextEncoder.load(
            base_model, EncoderConfig(**asdict(encoder_config)), device)
        config.base_model = resolve_model(base_model) if base_model not in (None, "", "default") else "default"
        return cls(query, passage, config, reference=config.base_model)

    @classmethod
    def load(cls, name_or_path: str | None, device: str = "cpu") -> BiEncoder:
        """A trained retriever folder, or any Hugging Face model as a zero-shot retriever."""
        if model_kind(name_or_path) == "reader":
            raise InputError(f"{name_or_path} is a reader (from `corefsearch train reader`), not a retriever: a dense "
                             "encoder is a retriever folder from `corefsearch train retriever`, a Hugging Face model "
                             "name or folder, or `default`; give a reader to --reader")
        if model_kind(name_or_path) == "retriever":
            folder = Path(resolve_reference(str(name_or_path)))  # a shipped model's name, or a folder
            remedy = f"copy the retriever folder {folder} again, or train it again (`corefsearch train retriever`)"
            config = config_from_json(RetrieverConfig, folder / RETRIEVER_CONFIG, remedy, "retriever configuration")
            for name in (QUERY_ENCODER,) if config.shared_encoder else (QUERY_ENCODER, PASSAGE_ENCODER):
                if not (folder / name).is_dir():
                    raise MissingArtefactError(f"{folder / name}: no such folder, the retriever is incomplete; "
                                               f"{remedy}")
            backend = SHIPPED_BACKEND if inference_only(folder) else "torch"
            command = f"corefsearch export-onnx {folder}"
            query = TextEncoder.load(str(folder / QUERY_ENCODER), device=device, backend=backend, command=command)
            passage = query if config.shared_encoder else TextEncoder.load(
                str(folder / PASSAGE_ENCODER), device=device, backend=backend, command=command)
            model = cls(query, passage, config, reference=str(folder.resolve()), folder=folder)
            if backend != "torch":
                model.backend, model._fingerprints = backend, _shipped_fingerprints(folder, remedy)
            return model
        config = RetrieverConfig(shared_encoder=True, pooling="mean", markers=False,
                                 base_model=str(name_or_path or "default"))
        encoder = TextEncoder.load(name_or_path, EncoderConfig(pooling="mean", markers=False), device)
        return cls(encoder, encoder, config, reference=config.base_model)

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.query_encoder.save(folder / QUERY_ENCODER)
        self.passage_encoder.save(folder / PASSAGE_ENCODER)
        # Each encoder folder also loads with SentenceTransformer(folder): the same pooling, and
        # the query window / passage length as max_seq_length.

        for name, encoder, length in ((QUERY_ENCODER, self.query_encoder, self.config.max_query_len),
                                      (PASSAGE_ENCODER, self.passage_encoder, self.config.max_passage_len)):
            write_sentence_transformers_config(folder / name, self.config.pooling, encoder.dimension, length)
        (folder / RETRIEVER_CONFIG).write_text(json.dumps(asdict(self.config), indent=2) + "\n", encoding="utf-8")

    def passage_fingerprint(self) -> str:
        """Identifies what passage vectors mean: the passage encoder's weights and settings."""
        if self._fingerprints is not None:
            return self._fingerprints["passage"]
        return _fingerprint(self.passage_encoder, self.config)

    def query_fingerprint(self) -> str:
        if self._fingerprints is not None:
            return self._fingerprints["query"]
        return _fingerprint(self.query_encoder, self.config)

    def encoder_folders(self) -> dict[str, Path]:
        """The folder of each encoder the retriever loads: ``{"query": ..., "passage": ...}``, the
        passage one only when the encoder is not shared (a shared one is loaded from query_encoder/)."""
        if self.folder is None:
            raise InputError(f"{self.reference} is not a retriever folder")
        if self.config.shared_encoder:
            return {"query": self.folder / QUERY_ENCODER}
        return {"query": self.folder / QUERY_ENCODER, "passage": self.folder / PASSAGE_ENCODER}

    def use_backend(self, backend: str | None, sides: tuple[str, ...] = ("query", "passage"),
                    threads: int | None = None) -> None:
        """Run the encoders of ``sides`` (query, passage) with ONNX Runtime on the CPU (``backend``
        ``onnx`` or ``onnx-int8``) from their folders' ``onnx/`` export (``corefsearch export-onnx
        MODEL_DIR``), checked to be an export of the weights they hold now; ``torch`` changes nothing;
        None: torch, or onnx-int8 for an inference-only folder (loaded so; any other backend is one line).
        Tokenisation, pooling and the fingerprints (of the torch weights) stay as they are."""
        backend = resolve_backend(self.folder, backend)
        if backend == "torch":
            return
        if self.folder is None:
            raise _no_export(self.reference, backend)
        folders = self.encoder_folders()
        if self._fingerprints is None:
            self._fingerprints = {"query": self.query_fingerprint(), "passage": self.passage_fingerprint()}
        command = f"corefsearch export-onnx {self.folder}"
        for side in sides:
            folder = folders.get(side, folders["query"])  # a shared encoder: query_encoder/
            encoder = self.query_encoder if side == "query" else self.passage_encoder
            if isinstance(encoder.model, OnnxEncoder):
                if threads is not None and encoder.model.threads != threads:  # inference-only: loaded with torch's
                    encoder.model = OnnxEncoder(encoder.model.path, encoder.model.config, threads)
                continue  # shared, and already swapped (or loaded so)
            path = check_onnx_export(folder, backend, command=command)
            encoder.model = OnnxEncoder(path, encoder.model.config, threads)
            encoder.device = "cpu"
        self.backend = backend

    def fingerprints(self) -> dict[str, str]:
        """``{"query": ..., "passage": ...}``: what :data:`FINGERPRINTS_FILE` of an inference-only copy records."""
        return {"query": self.query_fingerprint(), "passage": self.passage_fingerprint()}

    def description(self) -> dict[str, Any]:
        return {"reference": self.reference, "config": asdict(self.config),
                "passage_fingerprint": self.passage_fingerprint(), "dimension": self.passage_encoder.dimension}


def _no_export(reference: str, backend: str) -> MissingArtefactError:
    shown = "the bundled default encoder" if reference in ("", "default") else reference
    return MissingArtefactError(
        f"--backend {backend} runs an ONNX export of the encoder, and {shown} has none (it is not a "
        f"retriever folder, and the default one is not written to): run `corefsearch export-onnx "
        f"{reference or 'default'} --out DIR` and pass --encoder DIR (the same encoder: an index built "
        f"with {reference or 'default'} is searched with DIR as it is)")


def check_query_backend(reference: str | None, backend: str | None, device: str = "auto") -> None:
    """Before anything loads, what :meth:`BiEncoder.use_backend` checks of the query encoder: an ONNX ``backend``
    runs its export, which only a retriever folder can hold (``corefsearch export-onnx``), made from its weights
    (None: torch, or onnx-int8 for an inference-only folder, on the CPU)."""
    backend = resolve_backend(reference, backend, device)
    if backend == "torch":
        return
    if model_kind(reference) != "retriever":
        raise _no_export(str(reference or "default"), backend)
    folder = Path(str(reference))
    check_onnx_export(folder / RETRIEVER_QUERY_ENCODER, backend, command=f"corefsearch export-onnx {folder}")


def _shipped_fingerprints(folder: Path, remedy: str) -> dict[str, str]:
    """The fingerprints an inference-only retriever folder records (it has no torch weights to compute them)."""
    record = read_json_object(folder / FINGERPRINTS_FILE, remedy, "fingerprints of the retriever's weights")
    if not all(isinstance(record.get(side), str) for side in ("query", "passage")):
        raise InputError(f"{folder / FINGERPRINTS_FILE}: no query and passage fingerprints; {remedy}")
    return {"query": record["query"], "passage": record["passage"]}


def _fingerprint(encoder: TextEncoder, config: RetrieverConfig) -> str:
    import torch

    digest = hashlib.sha256()
    digest.update(json.dumps(asdict(encoder.config), sort_keys=True).encode())
    digest.update(json.dumps({"pooling": config.pooling, "max_passage_len": config.max_passage_len}).encode())
    with torch.no_grad():
        for name, tensor in sorted(encoder.model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return "sha256:" + digest.hexdigest()
