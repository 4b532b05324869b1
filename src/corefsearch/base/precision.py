"""Numeric precision of the forward passes: ``--precision auto|fp32|bf16|fp16`` (the floor: no wing).

On a GPU, bf16 autocast (``torch.autocast``) runs the matrix products on the card's bf16 units;
on a CPU without bf16 units it is slower, so ``auto`` is bf16 on a GPU that has it, fp16 on an
older GPU, and fp32 on the CPU. For the bundled 22M-parameter all-MiniLM-L6-v2 the card's
arithmetic is not what limits: on one H100 bf16 ran no faster than fp32 (``bench/RESULTS.md``,
"On a GPU"). The weights stay fp32 (autocast casts per operation), so a model trained in bf16 is
saved, loaded and searched like any other, and an index built in one precision is searched in
another.

Like ``torch.autocast`` itself, the precision is a scope rather than an argument of every call:
a command enters :func:`using` once, where ``--precision`` enters the library (checked there by
:func:`check_precision`), and each model's forward pass enters :func:`autocast` for its own
device, which resolves ``auto`` against it. A library user writes::

    with corefsearch.base.precision.using("bf16"):
        run = search(...)

Training takes the same scope: the loop runs each step's forward and backward passes under
:func:`autocast` and, for fp16 (whose small exponent underflows gradients), scales the loss with
``torch.amp.GradScaler`` (:func:`grad_scaler`); bf16 needs no scaling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from corefsearch.base.errors import InputError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEFAULT_PRECISION = "auto"
PRECISION_HELP = ("Numeric precision of the models' forward passes: auto (bf16 on a GPU that has it, fp32 on the "
                  "CPU) | fp32 | bf16 | fp16. The weights stay fp32.")

_current = DEFAULT_PRECISION  # the innermost `using` scope's; process-wide (a server's request threads see it)


def check_precision(precision: str, option: str = "--precision") -> None:
    """Refuse a precision that is not one of :data:`PRECISIONS` (without importing torch)."""
    if precision not in PRECISIONS:
        raise InputError(f"{option} must be one of {', '.join(PRECISIONS)} (auto: bf16 on a GPU that has it, "
                         f"fp32 on the CPU), got {precision!r}")


def current() -> str:
    """The precision of the innermost :func:`using` scope (``auto`` outside any)."""
    return _current


@contextlib.contextmanager
def using(precision: str) -> Iterator[None]:
    """Run the forward passes inside the block in ``precision`` (in every thread: a server's request
    threads run in the scope its start entered)."""
    global _current
    check_precision(precision)
    previous, _current = _current, precision
    try:
        yield
    finally:
        _current = previous


def resolve(precision: str, device: str) -> str:
    """``fp32``, ``bf16`` or ``fp16``: what ``precision`` means on ``device`` (``auto``: bf16 on a GPU
    that has it, fp16 on one that does not, fp32 on the CPU)."""
    check_precision(precision)
    if precision != "auto":
        return precision
    if not str(device).startswith("cuda"):
        return "fp32"
    import torch

    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def dtype_of(resolved: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[resolved]


def autocast(device: str, precision: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of ``precision`` (default: the current scope's) on ``device``; a no-op for
    fp32."""
    resolved = resolve(precision or current(), device)
    if resolved == "fp32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type="cuda" if str(device).startswith("cuda") else "cpu", dtype=dtype_of(resolved))


def grad_scaler(device: str, precision: str | None = None) -> Any:
    """A ``torch.amp.GradScaler`` for fp16 training on ``device``, else None (fp32 and bf16 need none)."""
    if resolve(precision or current(), device) != "fp16":
        return None
    import torch

    return torch.amp.GradScaler("cuda" if str(device).startswith("cuda") else "cpu")
