"""What the trainers' resume tests share: Ctrl-C in the middle of a training step, and "the same
model folder as the uninterrupted run's"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Interrupt:
    """Wraps a function called inside a training step; on its ``at``-th call (after the real call,
    so the step has drawn its dropout masks) raises KeyboardInterrupt, as Ctrl-C would."""

    def __init__(self, func: Any, at: int) -> None:
        self.func, self.at, self.calls = func, at, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self.func(*args, **kwargs)
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return value


def dev_curve(folder: Path) -> list[dict[str, Any]]:
    """A model folder's dev curve without the timings."""
    entries = json.loads((folder / "dev_curve.json").read_text(encoding="utf-8"))
    return [{k: v for k, v in entry.items() if k != "seconds"} for entry in entries]


def assert_same_model(folder: Path, reference: Path) -> None:
    """The same weights, byte for byte (every ``*.safetensors``), and the same dev curve."""
    weights = sorted(p.relative_to(folder) for p in folder.rglob("*.safetensors"))
    assert weights and weights == sorted(p.relative_to(reference) for p in reference.rglob("*.safetensors"))
    for name in weights:
        assert (folder / name).read_bytes() == (reference / name).read_bytes(), name
    assert dev_curve(folder) == dev_curve(reference)
