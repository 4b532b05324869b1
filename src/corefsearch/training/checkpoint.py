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
any moment leaves the previous checkpoint intact. A file that is damaged or not what a run wrote
(truncated, garbage, a pickle the safe loader refuses) is an :class:`UnusableWorkFile`, which the
trainers turn into a one-line error saying what to do (:meth:`WorkDir.cannot_resume`).
"""

from __future__ import annotations

import json
import pickle
import random
import shutil
import warnings
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.io.write import atomic_file

RUN_FILE = "run.json"
HARD_NEGATIVES_FILE = "hard_negatives.json"
CHECKPOINT_FILE = "checkpoint.pt"
BEST_FILE = "best.pt"


class UnusableWorkFile(InputError):
    """A file of the working folder that cannot be read or is not what a run wrote (the message
    names the file and why)."""


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

    def cannot_resume(self, error: UnusableWorkFile) -> InputError:
        """The user's error for a damaged file of this folder: what to do about it."""
        return InputError(f"{error}; the interrupted run in {self.path} cannot be resumed: delete that folder to "
                          "start the run again, or rerun with --overwrite to discard it")

    # --- JSON side files ----------------------------------------------------------------------

    def read_json(self, name: str) -> Any:
        """The JSON value in ``name``, ``None`` when there is no such file; one that cannot be read
        or is not JSON (UTF-8) is an :class:`UnusableWorkFile`."""
        path = self.path / name
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:  # ValueError: JSONDecodeError, UnicodeDecodeError
            why = f"cannot read it ({err.strerror or err})" if isinstance(err, OSError) else f"not JSON ({err})"
            raise UnusableWorkFile(f"{path}: {why}") from None

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

    # Only tensors and plain Python values: the safe loader suffices, and refuses anything else.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on a foreign pickle: the error says enough
            state = torch.load(path, map_location="cpu", weights_only=True)
    except MemoryError:
        raise
    except Exception as err:  # torch.load fails in many ways on a damaged file (RuntimeError, EOFError, ...)
        raise UnusableWorkFile(f"{path}: not a checkpoint of this training ({_load_failure(err)})") from None
    if not isinstance(state, dict):
        raise UnusableWorkFile(f"{path}: not a checkpoint of this training (it holds a {type(state).__name__})")
    return state


def _load_failure(err: Exception) -> str:
    """Why ``torch.load`` failed, in a few words."""
    if isinstance(err, pickle.UnpicklingError):
        # A paragraph, whose one line that is not boilerplate says what was refused.
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        boilerplate = ("Weights only load failed", "Please file an issue", "Check the documentation")
        specific = [line for line in lines if not line.startswith(boilerplate)]
        return "refused by torch's safe loader: " + (specific[0] if specific else "not a tensor file")
    if isinstance(err, EOFError):
        return "the file ends too early: truncated or empty"
    if isinstance(err, OSError):
        return f"cannot read it ({err.strerror or err})"
    first = str(err).strip().splitlines()[0].split(". ")[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


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


def check_rng_state(state: Any) -> None:
    """Raise (``LookupError``, ``TypeError``, ``ValueError``, ...) where :func:`set_rng_state` would
    fail on ``state``: it is tried on new generators, the running ones are left alone."""
    import numpy as np
    import torch

    version, internal, gauss = state["python"]
    random.Random().setstate((version, tuple(internal), gauss))
    kind, keys, position, has_gauss, cached = state["numpy"]
    np.random.RandomState().set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    torch.Generator().set_state(state["torch"])
    cuda = state.get("cuda", [])
    if not isinstance(cuda, list) or not all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda):
        raise TypeError("the CUDA generator states are not byte tensors")


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
