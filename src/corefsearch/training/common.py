"""What every training run shares (retriever, readers, clusterer): seeding, the AdamW parameter
groups, the resumable working folder's claim, the progress bar over steps, the step boundary a
checkpoint holds, and the default log. The loop that uses them is ``loop.py``."""

from __future__ import annotations

import contextlib
import copy
import random
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from corefsearch.base.errors import InputError
from corefsearch.base.progress import new_progress, progress_enabled
from corefsearch.io.outputs import clean_temporaries_in
from corefsearch.io.read import json_type
from corefsearch.training.checkpoint import RUN_FILE, UnusableWorkFile, WorkDir, rng_state

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


def epoch_rng(seed: int, epoch: int) -> random.Random:
    """The generator of an epoch's order (every trainer's batches): a function of the seed and the epoch only,
    so a resumed run regenerates the batches it skips."""
    return random.Random(seed * 1_000_003 + epoch)


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


# What a run record says about the library versions: not compared when a run resumes.
VERSION_KEYS = ("versions", "corefsearch_version")


def claim_work_dir(work: WorkDir, record: dict[str, Any], overwrite: bool, log: Log) -> None:
    """Create the working folder, or check that a leftover one belongs to this same run
    (same ``record`` apart from the library versions, :data:`VERSION_KEYS`)."""
    if work.exists():
        try:
            previous = work.read_json(RUN_FILE)
            if previous is not None and not isinstance(previous, dict):
                raise UnusableWorkFile(f"{work.path / RUN_FILE}: not a run record (it holds {json_type(previous)})")
        except UnusableWorkFile as err:
            if not overwrite:
                raise work.cannot_resume(err) from None
            log(f"Discarding the interrupted run in {work.path} ({err}; --overwrite).")
            work.remove()
    if work.exists():  # and its run.json was read
        same = previous is not None and {k: v for k, v in previous.items() if k not in VERSION_KEYS} == {
            k: v for k, v in record.items() if k not in VERSION_KEYS}
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
    clean_temporaries_in(work.path)  # a checkpoint a killed run was writing (the caller holds the lock on OUT)
    work.write_json(RUN_FILE, record)


def differences(previous: dict[str, Any], record: dict[str, Any]) -> str:
    """The options (as CLI flags) and inputs in which two run records differ."""
    names = [f"--{k.replace('_', '-')}" for k in record.get("options", {})
             if previous.get("options", {}).get(k) != record["options"][k]]
    names += [k for k in record if k not in ("options", *VERSION_KEYS) and previous.get(k) != record.get(k)]
    return ", ".join(names) or "unreadable run.json"


# Steps between progress lines when stderr is not a terminal (nohup, a log file, a pipe).
DEFAULT_LOG_EVERY = 50


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except ValueError:  # closed
        return False


def resolve_log_every(log_every: int | None) -> int:
    """Steps between progress lines: ``log_every`` as given (0: none); by default
    ``DEFAULT_LOG_EVERY`` when stderr is not a terminal, where the progress bar does not show,
    and none on a terminal. (``TrainingArguments.validate`` refuses a negative one.)"""
    if log_every is None:
        return 0 if stderr_is_terminal() else DEFAULT_LOG_EVERY
    return log_every


def set_threads(threads: int | None) -> None:
    """``torch.set_num_threads`` (the CPU threads of one training process); ``None`` keeps torch's default.
    (``TrainingArguments.validate`` refuses fewer than one.)"""
    if threads is None:
        return
    import torch

    torch.set_num_threads(threads)


def _duration(seconds: float) -> str:
    import datetime as dt

    return str(dt.timedelta(seconds=round(seconds)))


class TrainingProgress(contextlib.AbstractContextManager["TrainingProgress"]):
    """A rich progress bar over the training steps with the running loss (silent when quiet), and
    every ``log_every`` steps a line to ``log``: step, epoch, running loss, steps per second and
    the time left, so that a run whose stderr is not a terminal (``nohup``) can be followed.

    ``log_every`` ``None`` is :func:`resolve_log_every`'s default. Speed and time left count the
    steps of this invocation (a resumed run's earlier steps are not timed) over the wall-clock
    time since it started training, dev evaluations and checkpoints included.
    """

    def __init__(self, total: int, completed: int, log: Log | None = None, log_every: int | None = None) -> None:
        self.total, self.completed = total, completed
        self.log = log
        self.log_every = resolve_log_every(log_every) if log is not None else 0
        self._progress: Any = None
        self._task: Any = None
        self._started = 0.0
        self._first = completed

    def __enter__(self) -> TrainingProgress:
        import time

        if progress_enabled() and sys.stderr is not None:
            self._progress = new_progress()
            self._progress.__enter__()
            self._task = self._progress.add_task("Training", total=self.total, completed=self.completed)
        self._started, self._first = time.perf_counter(), self.completed
        return self

    def advance(self, epoch: int, epochs: int, running_loss: float) -> None:
        self.completed += 1
        if self._progress is not None:
            self._progress.update(self._task, advance=1,
                                  description=f"Training, epoch {epoch}/{epochs}, loss {running_loss:.4f}")
        if self.log is not None and self.log_every and (self.completed % self.log_every == 0
                                                         or self.completed == self.total):
            self.log(self.line(epoch, epochs, running_loss))

    def line(self, epoch: int, epochs: int, running_loss: float) -> str:
        import time

        elapsed = time.perf_counter() - self._started
        done = self.completed - self._first
        rate = done / elapsed if elapsed > 0 else 0.0
        left = self.total - self.completed
        eta = _duration(left / rate) if rate > 0 else "unknown"
        return (f"step {self.completed:,}/{self.total:,} (epoch {epoch}/{epochs}): loss {running_loss:.4f}, "
                f"{rate:.2f} steps/s, ETA {eta}")

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)  # type: ignore[arg-type]


class StepBoundary:
    """The training progress and the random generators' states as of the last completed optimizer
    step (or the bookkeeping at an epoch's end): what a checkpoint must hold.

    A step interrupted half-way (Ctrl-C) has already drawn from the generators (dropout masks) but
    not changed the weights, the optimizer or the scheduler; a checkpoint taken with the generators'
    states of that moment would make the resumed run draw other masks than an uninterrupted one.
    So the trainers mark the boundary after each step (while the weights are known to be
    consistent with it) and checkpoint it, not the live state.
    """

    def __init__(self, state: dict[str, Any]) -> None:
        self.mark(state)

    def mark(self, state: dict[str, Any]) -> None:
        self.progress: dict[str, Any] = copy.deepcopy(state)
        self.rng: dict[str, Any] = rng_state()

    @property
    def global_step(self) -> int:
        return int(self.progress["global_step"])
