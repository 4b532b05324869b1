"""A retriever model: a query encoder and a passage encoder (DPR), or one shared encoder.

Saved layout (``corefsearch train retriever --out MODEL_DIR``)::

    MODEL_DIR/query_encoder/      Hugging Face folder (safetensors, tokenizer with markers)
    MODEL_DIR/passage_encoder/    the same for passages (a copy when the encoder is shared)
    MODEL_DIR/corefsearch_retriever.json   lengths, pooling, markers, shared, base model

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

from corefsearch.dense.encoder import EncoderConfig, TextEncoder, resolve_model
from corefsearch.errors import InputError

RETRIEVER_CONFIG = "corefsearch_retriever.json"
QUERY_ENCODER = "query_encoder"
PASSAGE_ENCODER = "passage_encoder"


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


def is_retriever_dir(path: str | Path | None) -> bool:
    return path is not None and (Path(path) / RETRIEVER_CONFIG).exists()


class BiEncoder:
    def __init__(self, query_encoder: TextEncoder, passage_encoder: TextEncoder, config: RetrieverConfig,
                 reference: str) -> None:
        self.query_encoder = query_encoder
        self.passage_encoder = passage_encoder
        self.config = config
        self.reference = reference

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
        from corefsearch.reader.model import READER_CONFIG

        if name_or_path not in (None, "") and (Path(str(name_or_path)) / READER_CONFIG).exists():
            raise InputError(f"{name_or_path} is a reader (from `corefsearch train reader`), not a retriever: a dense "
                             "encoder is a retriever folder from `corefsearch train retriever`, a Hugging Face model "
                             "name or folder, or `default`; give a reader to --reader")
        if is_retriever_dir(name_or_path):
            from corefsearch.artefacts import config_from_json
            from corefsearch.errors import MissingArtefactError

            folder = Path(name_or_path)  # type: ignore[arg-type]
            remedy = f"copy the retriever folder {folder} again, or train it again (`corefsearch train retriever`)"
            config = config_from_json(RetrieverConfig, folder / RETRIEVER_CONFIG, remedy, "retriever configuration")
            for name in (QUERY_ENCODER,) if config.shared_encoder else (QUERY_ENCODER, PASSAGE_ENCODER):
                if not (folder / name).is_dir():
                    raise MissingArtefactError(f"{folder / name}: no such folder, the retriever is incomplete; "
                                               f"{remedy}")
            query = TextEncoder.load(str(folder / QUERY_ENCODER), device=device)
            passage = query if config.shared_encoder else TextEncoder.load(str(folder / PASSAGE_ENCODER),
                                                                          device=device)
            return cls(query, passage, config, reference=str(folder.resolve()))
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
        from corefsearch.dense.st_export import write_sentence_transformers_config

        for name, encoder, length in ((QUERY_ENCODER, self.query_encoder, self.config.max_query_len),
                                      (PASSAGE_ENCODER, self.passage_encoder, self.config.max_passage_len)):
            write_sentence_transformers_config(folder / name, self.config.pooling, encoder.dimension, length)
        (folder / RETRIEVER_CONFIG).write_text(json.dumps(asdict(self.config), indent=2) + "\n", encoding="utf-8")

    def passage_fingerprint(self) -> str:
        """Identifies what passage vectors mean: the passage encoder's weights and settings."""
        return _fingerprint(self.passage_encoder, self.config)

    def query_fingerprint(self) -> str:
        return _fingerprint(self.query_encoder, self.config)

    def description(self) -> dict[str, Any]:
        return {"reference": self.reference, "config": asdict(self.config),
                "passage_fingerprint": self.passage_fingerprint(), "dimension": self.passage_encoder.dimension}


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
