"""What every training run shares (retriever and readers): seeding, the AdamW parameter groups,
the resumable working folder's claim, the progress bar over steps, and the default log."""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from corefsearch.dense.checkpoint import RUN_FILE, WorkDir
from corefsearch.errors import InputError
from corefsearch.progress import new_progress, progress_enabled

if TYPE_CHECKING:
    import torch

Log = Callable[[str], None]


def default_log(message: str) -> None:
    if progress_enabled():
        from rich.console import Console

        Console(stderr=True, highlight=False).print(message, markup=False)


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def adamw(groups: Iterable[tuple[torch.nn.Module, float]], weight_decay: float) -> torch.optim.Optimizer:
    """AdamW over ``(module, learning rate)`` pairs; no weight decay on biases and LayerNorm
    weights (the one-dimensional parameters)."""
    import torch

    seen: set[int] = set()
    parameter_groups = []
    for module, lr in groups:
        decay, no_decay = [], []
        for parameter in module.parameters():
            if not parameter.requires_grad or id(parameter) in seen:
                continue
            seen.add(id(parameter))
            (decay if parameter.ndim >= 2 else no_decay).append(parameter)
        parameter_groups += [{"params": decay, "weight_decay": weight_decay, "lr": lr},
                             {"params": no_decay, "weight_decay": 0.0, "lr": lr}]
    return torch.optim.AdamW(parameter_groups)


def claim_work_dir(work: WorkDir, record: dict[str, Any], overwrite: bool, log: Log) -> None:
    """Create the working folder, or check that a leftover one belongs to this same run
    (same ``record`` apart from the library versions)."""
    if work.exists():
        previous = work.read_json(RUN_FILE)
        same = previous is not None and {k: v for k, v in previous.items() if k != "versions"} == {
            k: v for k, v in record.items() if k != "versions"}
        if not same:
            if not overwrite:
                raise InputError(f"{work.path} holds an interrupted training run with other settings "
                                 f"({differences(previous or {}, record)}); rerun with those settings to resume "
                                 "it, or add --overwrite to discard it")
            log(f"Discarding the interrupted run in {work.path} (other settings; --overwrite).")
            work.remove()
        elif not work.has_checkpoint():
            log(f"Found {work.path} from an interrupted run without a checkpoint; starting from the beginning.")
    work.create()
    work.write_json(RUN_FILE, record)


def differences(previous: dict[str, Any], record: dict[str, Any]) -> str:
    """The options (as CLI flags) and inputs in which two run records differ."""
    names = [f"--{k.replace('_', '-')}" for k in record.get("options", {})
             if previous.get("options", {}).get(k) != record["options"][k]]
    names += [k for k in record if k not in ("options", "versions") and previous.get(k) != record.get(k)]
    return ", ".join(names) or "unreadable run.json"


class TrainingProgress(contextlib.AbstractContextManager["TrainingProgress"]):
    """A rich progress bar over the training steps with the running loss; silent when quiet."""

    def __init__(self, total: int, completed: int) -> None:
        self.total, self.completed = total, completed
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> TrainingProgress:
        if progress_enabled() and sys.stderr is not None:
            self._progress = new_progress()
            self._progress.__enter__()
            self._task = self._progress.add_task("Training", total=self.total, completed=self.completed)
        return self

    def advance(self, epoch: int, epochs: int, running_loss: float) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1,
                                  description=f"Training, epoch {epoch}/{epochs}, loss {running_loss:.4f}")

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)  # type: ignore[arg-type]
