"""sentence-transformers configuration for a saved encoder folder.

Each encoder folder of a trained retriever (``MODEL_DIR/query_encoder``,
``MODEL_DIR/passage_encoder``) is a Hugging Face folder; these files make it a
sentence-transformers model as well, so that ``SentenceTransformer(folder)`` computes the
vectors corefsearch computes:

- ``modules.json``: a Transformer (the folder itself) and a Pooling module, no Normalize
  (corefsearch scores by dot product of unnormalised vectors);
- ``sentence_bert_config.json``: ``max_seq_length`` (the passage length, or the query
  window for the query encoder), no lower-casing beyond the tokenizer's own;
- ``1_Pooling/config.json``: CLS or mean pooling, as the retriever was trained;
- ``config_sentence_transformers.json``: the versions and ``similarity_fn_name: "dot"``.

They are written by hand in the long-standing format (the one all-MiniLM-L6-v2 ships with,
read by sentence-transformers 2.x to 6.x) rather than by ``SentenceTransformer.save``, so that
training does not need sentence-transformers installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MODULES_FILE = "modules.json"
ST_CONFIG_FILE = "config_sentence_transformers.json"
BERT_CONFIG_FILE = "sentence_bert_config.json"
POOLING_DIR = "1_Pooling"


def _write(path: Path, record: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def write_sentence_transformers_config(folder: Path, pooling: str, dimension: int, max_seq_length: int) -> None:
    """Make the Hugging Face encoder ``folder`` load with ``SentenceTransformer(folder)``."""
    import torch
    import transformers

    from corefsearch import __version__

    if pooling not in ("cls", "mean"):
        raise ValueError(f"pooling must be cls or mean, got {pooling!r}")
    folder = Path(folder)
    _write(folder / MODULES_FILE, [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": POOLING_DIR, "type": "sentence_transformers.models.Pooling"},
    ])
    _write(folder / BERT_CONFIG_FILE, {"max_seq_length": int(max_seq_length), "do_lower_case": False})
    _write(folder / POOLING_DIR / "config.json", {
        "word_embedding_dimension": int(dimension),
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    })
    _write(folder / ST_CONFIG_FILE, {
        "__version__": {"corefsearch": __version__, "transformers": transformers.__version__,
                        "pytorch": torch.__version__},
        "prompts": {},
        "default_prompt_name": None,
        "similarity_fn_name": "dot",
    })
