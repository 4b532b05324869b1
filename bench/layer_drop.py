"""A smaller encoder made from a larger one by keeping some of its layers: the base of a faster,
smaller reader or retriever (``train reader --base-model OUT``), offered as a choice, never a default.

Keeping every other layer of a 6-layer MiniLM (``--layers 0,2,4``) is how DistilBERT initialised its
student; the kept layers' weights are copied unchanged, the embeddings and the tokenizer too, and
the config says how many layers are left. What the smaller model costs in MRR@10 is only known once a
reader is trained on it and scored on dev (bench/RESULTS.md, "Reader inference speed"); its speed can
be measured untrained (``python bench/reader_speed.py --base-model OUT``). Written by hand: a few lines
over ``transformers``' own model classes, which have no layer-dropping helper.

Run: ``python bench/layer_drop.py --out work/minilm-l3 [--model default] [--layers 0,2,4]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def drop_layers(model_name: str, layers: Sequence[int], out: Path) -> Path:
    """Save to ``out`` the encoder ``model_name`` (``default``: the bundled all-MiniLM-L6-v2) keeping only
    ``layers`` (indices, in order), with its tokenizer."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from corefsearch.base.errors import InputError
    from corefsearch.base.models import load_offline, resolve_model

    path = resolve_model(None if model_name == "default" else model_name)
    model = load_offline(AutoModel, path)
    stack = getattr(getattr(model, "encoder", None), "layer", None)
    if not isinstance(stack, torch.nn.ModuleList):
        raise InputError(f"{model_name}: not a BERT-style encoder (no encoder.layer list to keep layers of)")
    if not layers or sorted(set(layers)) != list(layers) or layers[0] < 0 or layers[-1] >= len(stack):
        raise InputError(f"--layers must be increasing indices below {len(stack)}, got {list(layers)}")
    model.encoder.layer = torch.nn.ModuleList(stack[i] for i in layers)
    model.config.num_hidden_layers = len(layers)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    load_offline(AutoTokenizer, path).save_pretrained(out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="A Hugging Face model name or folder (default: the "
                                                          "bundled all-MiniLM-L6-v2).")
    parser.add_argument("--layers", default="0,2,4", help="The layers kept, comma-separated indices.")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        layers = [int(x) for x in args.layers.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--layers takes comma-separated integers, got {args.layers!r}")
    from corefsearch.base.errors import CorefSearchError

    try:
        drop_layers(args.model, layers, args.out)
    except CorefSearchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.out} ({len(layers)} layers: {', '.join(map(str, layers))} of {args.model})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
