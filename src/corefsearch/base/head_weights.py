"""A head's weights on disk: safetensors, fp32 as trained, or int8 rows in a shipped folder (the floor).

A mention encoder's head (two 384→1024→1024 MLPs) is 11.5 MB in fp32, a third of its shipped folder; stored
as int8 with one fp32 scale per output row it is 2.9 MB and clusters ECB+ dev the same (bench/RESULTS.md,
"Shipped models"). ONNX Runtime quantizes the encoder's graph, but the head runs in torch beside it, and
safetensors holds no quantized tensor type: the per-row symmetric rounding below is written by hand (a few
lines), and the file says so in its metadata, so that a reader of the file knows what the int8 tensors mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

QUANTIZED_KEY = "corefsearch_quantized"  # safetensors metadata: how the int8 tensors are stored
INT8_ROWS = "int8-rows"  # each quantized tensor W is stored as int8 Q with ``W:scale`` (fp32, one per row): W = Q·s
SCALE_SUFFIX = ":scale"
MIN_ELEMENTS = 65_536  # smaller tensors (biases, norms, small layers) stay fp32: they weigh nothing
HEAD_PRECISIONS = ("int8", "fp32")


def quantize_state(state: dict[str, Any], min_elements: int = MIN_ELEMENTS) -> dict[str, Any]:
    """``state`` with every floating 2-D tensor of at least ``min_elements`` values as int8 rows and their
    scales (symmetric, one scale per row: the weight of one output unit)."""
    import torch

    out: dict[str, Any] = {}
    for name, tensor in state.items():
        tensor = tensor.detach().cpu()
        if tensor.is_floating_point() and tensor.dim() == 2 and tensor.numel() >= min_elements:
            weights = tensor.float()
            scale = weights.abs().amax(dim=1).clamp(min=1e-12) / 127.0
            out[name] = torch.round(weights / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
            out[name + SCALE_SUFFIX] = scale.contiguous()
        else:
            out[name] = tensor.contiguous()
    return out


def save_head(state: dict[str, Any], path: Path, precision: str = "fp32") -> None:
    """Write ``state`` to ``path`` as safetensors, in ``precision`` (``fp32`` as trained, or ``int8`` rows)."""
    from safetensors.torch import save_file

    if precision not in HEAD_PRECISIONS:
        raise ValueError(f"head precision {precision!r}: give one of {', '.join(HEAD_PRECISIONS)}")
    if precision == "int8":
        save_file(quantize_state(state), str(path), metadata={"format": "pt", QUANTIZED_KEY: INT8_ROWS})
    else:
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(path))


def load_head_state(path: Path) -> dict[str, Any]:
    """The head's weights in ``path`` as fp32 tensors, whichever way :func:`save_head` wrote them; a file
    whose metadata names another storage raises ``ValueError``."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118 (safe_open has no iter)
    storage = metadata.get(QUANTIZED_KEY)
    if storage is None:
        return tensors
    if storage != INT8_ROWS:
        raise ValueError(f"its metadata says {QUANTIZED_KEY}={storage!r}; this corefsearch reads {INT8_ROWS!r}")
    state = {}
    for key, tensor in tensors.items():
        if key.endswith(SCALE_SUFFIX):
            continue
        scale = tensors.get(key + SCALE_SUFFIX)
        state[key] = tensor if scale is None else tensor.float() * scale[:, None]
    return state


def head_precision(path: Path) -> str:
    """``int8`` or ``fp32``: how the head in ``path`` is stored (``fp32`` also for fp16 tensors read back)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    return "int8" if metadata.get(QUANTIZED_KEY) == INT8_ROWS else "fp32"
