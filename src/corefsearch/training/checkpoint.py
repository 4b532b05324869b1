"""The working folder of a retriever training run, which makes it resumable.

A run that will write ``OUT`` works in the hidden sibling ``.OUT.training/``; ``OUT`` itself
appears only at the very end, by one rename, so ``OUT`` existing means "finished"::

    .OUT.training/run.json            what the run is (options, dataset and index checksums);
                                      a rerun resumes only when this matches
    .OUT.training/hard_negatives.json the mined BM25 candidates (not searched again on resume)
    .OUT.training/checkpoint.pt       encoders, optimizer, scheduler, RNG states, epoch/step,
                                      running loss, dev curve (replaced atomically)
    .OUT.training/best.pt             the encoders of the best dev epoch so far

Every file is written to a temporary name and renamed over the old one, so an interrupt at
any moment leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

from corefsearch.io.write import atomic_file

RUN_FILE = "run.json"
HARD_NEGATIVES_FILE = "hard_negatives.json"
CHECKPOINT_FILE = "checkpoint.pt"
BEST_FILE = "best.pt"


def work_dir_for(out: Path) -> Path:
    out = Path(out)
    return out.parent / f".{out.name}.training"


class WorkDir:
    def __init__(self, out: Path) -> None:
        self.path = work_dir_for(out)

    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    # --- JSON side files ----------------------------------------------------------------------

    def read_json(self, name: str) -> Any:
        path = self.path / name
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None

    def write_json(self, name: str, value: Any) -> None:
        with atomic_file(self.path / name) as handle:
            json.dump(value, handle, indent=2, ensure_ascii=False)
            handle.write("\n")

    # --- torch state ----------------------------------------------------------------------------

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_FILE

    def has_checkpoint(self) -> bool:
        return self.checkpoint_path.exists()

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        _save(state, self.checkpoint_path)

    def load_checkpoint(self) -> dict[str, Any]:
        return _load(self.checkpoint_path)

    def save_best(self, state: dict[str, Any]) -> None:
        _save(state, self.path / BEST_FILE)

    def load_best(self) -> dict[str, Any] | None:
        path = self.path / BEST_FILE
        return _load(path) if path.exists() else None


def _save(state: dict[str, Any], path: Path) -> None:
    import torch

    with atomic_file(path, "wb") as handle:
        torch.save(state, handle)


def _load(path: Path) -> dict[str, Any]:
    import torch

    # Only tensors and plain Python values: the safe loader suffices.
    return torch.load(path, map_location="cpu", weights_only=True)


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch (and CUDA) generator states, as plain values and tensors."""
    import numpy as np
    import torch

    kind, keys, position, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [kind, keys.tolist(), int(position), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
