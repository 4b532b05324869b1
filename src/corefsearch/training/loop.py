"""The one training loop: epochs of optimizer steps over a :class:`~corefsearch.training.task.TrainingTask`.

Resume and the atomic result fit together like this. Nothing is written to ``OUT`` while the
run lasts: the run lives in the hidden sibling folder ``.OUT.training/``
(``training/checkpoint.py``), which the trainer has claimed (``claim_work_dir``) and which holds
the latest checkpoint (written at the end of every epoch, every ``checkpoint_every`` steps and
on Ctrl-C) and the best weights so far. A checkpoint holds the state of the last *completed*
step (:class:`~corefsearch.training.common.StepBoundary`): a step interrupted half-way is
redone. When the folder holds a checkpoint, the loop resumes from it: it regenerates the
interrupted epoch's batches (a function of seed and epoch), skips those already done and
restores the weights, optimizer, scheduler and random states, so the run ends after the same
total number of steps, with the same weights, as an uninterrupted one. After each epoch (and,
when the task has a baseline, once before training as epoch 0) the task is scored on its dev
set; the epoch with the best selection metric is kept (without a dev set, the last). At the
end the task writes the model into a temporary folder beside ``OUT`` (with ``dev_curve.json``:
``[{"epoch", "step", "loss", <dev metrics>, "seconds"}]``), which is renamed to ``OUT`` in one
step; then ``.OUT.training/`` is removed. Hence ``OUT`` existing means the run finished.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corefsearch.io.write import atomic_directory, write_json
from corefsearch.training.checkpoint import WorkDir, set_rng_state
from corefsearch.training.common import Log, StepBoundary, TrainingProgress, adamw, default_log
from corefsearch.training.task import TrainingTask

DEV_CURVE_FILE = "dev_curve.json"
# Steps over which the progress bar's running loss is averaged.
RUNNING_LOSS_STEPS = 50


@dataclass
class LoopOptions:
    """How the loop runs a task (the task's own options, e.g. learning rates, stay with it). The
    trainers build it from their arguments (``TrainingArguments.loop_options``), which checked it."""

    epochs: int
    weight_decay: float = 0.01
    warmup: float = 0.1  # fraction of the steps with a linearly rising learning rate, then linear decay
    max_steps: int | None = None  # stop after this many steps (inside an epoch, too)
    checkpoint_every: int = 500  # steps between checkpoints; 0: only at epoch ends (and on Ctrl-C)
    log_every: int | None = None  # steps between progress lines; None: resolve_log_every's default
    max_grad_norm: float = 1.0
    overwrite: bool = False  # replace an existing OUT at the end


@dataclass
class LoopResult:
    steps_per_epoch: int
    total_steps: int
    steps_run: int  # in this invocation
    train_seconds: float  # the training steps of this invocation (no evaluation, no checkpoints)
    resumed_from_step: int | None
    best_epoch: int | None
    best_score: float | None
    dev_curve: list[dict[str, Any]] = field(default_factory=list)

    @property
    def seconds_per_step(self) -> float | None:
        return self.train_seconds / self.steps_run if self.steps_run else None


def total_steps_of(steps_per_epoch: int, options: LoopOptions, log: Log) -> int:
    """The run's steps: every epoch's, or ``max_steps`` when that is fewer."""
    total_steps = steps_per_epoch * options.epochs
    if options.max_steps is not None and options.max_steps < total_steps:
        total_steps = options.max_steps
        log(f"--max-steps {options.max_steps}: training stops after {total_steps} of "
            f"{steps_per_epoch * options.epochs} steps ({steps_per_epoch} per epoch).")
    return total_steps


def train_loop(task: TrainingTask, work: WorkDir, out: Path, options: LoopOptions, *, log: Log | None = None,
               on_step: Callable[[int, float], None] | None = None) -> LoopResult:
    """Train ``task`` in the claimed working folder ``work`` (resuming its checkpoint if it has
    one) and write the result to ``out``. ``on_step(step, loss)`` is called after every
    optimizer step. See the module docstring."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    log = log or default_log
    steps_per_epoch = task.steps_per_epoch
    total_steps = total_steps_of(steps_per_epoch, options, log)
    groups = task.parameter_groups()
    modules = [module for module, _ in groups]
    parameters = [p for module in modules for p in module.parameters()]
    optimizer = adamw(groups, options.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(options.warmup * total_steps), total_steps)

    state: dict[str, Any] = {"epoch": 1, "step_in_epoch": 0, "global_step": 0, "loss_sum": 0.0,
                             "loss_count": 0, "dev_curve": [], "best_epoch": None, "best_score": None}
    resumed_from: int | None = None
    if work.has_checkpoint():
        checkpoint = work.load_checkpoint()
        task.load_weights(checkpoint)
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        set_rng_state(checkpoint["rng"])
        state = checkpoint["progress"]
        resumed_from = state["global_step"]
        log(f"Resuming the interrupted run in {work.path} from step {resumed_from:,} of {total_steps:,} "
            f"(epoch {state['epoch']}, batch {state['step_in_epoch']:,} of {steps_per_epoch:,}).")

    def save_checkpoint() -> None:
        # The boundary, not the live state: see StepBoundary (weights, optimizer and scheduler are those of
        # the boundary whenever this runs: they change only inside the `updating` window).
        work.save_checkpoint({**task.weights(), "optimizer": optimizer.state_dict(),
                              "scheduler": scheduler.state_dict(), "rng": boundary.rng,
                              "progress": dict(boundary.progress)})

    if task.has_dev and not state["dev_curve"]:
        baseline = task.baseline()
        if baseline is not None:
            entry0: dict[str, Any] = {"epoch": 0, "step": 0, "loss": None, **baseline}
            entry0.setdefault("seconds", 0.0)
            state["dev_curve"].append(entry0)

    def better(score: float, best: float | None) -> bool:
        return best is None or (score > best if task.greater_is_better else score < best)

    steps_run, train_seconds = 0, 0.0
    last_saved = state["global_step"]
    updating = False
    boundary = StepBoundary(state)
    recent: deque[float] = deque(maxlen=RUNNING_LOSS_STEPS)
    for module in modules:
        module.train()
    try:
        with TrainingProgress(total_steps, state["global_step"], log, options.log_every) as progress:
            while state["epoch"] <= options.epochs:
                if state["global_step"] >= total_steps and state["step_in_epoch"] == 0:
                    break
                epoch = state["epoch"]
                epoch_started = time.perf_counter()
                for batch in task.epoch_batches(epoch)[state["step_in_epoch"]:]:
                    if state["global_step"] >= total_steps:
                        break
                    started = time.perf_counter()
                    optimizer.zero_grad(set_to_none=True)
                    value = task.backward(batch)
                    torch.nn.utils.clip_grad_norm_(parameters, options.max_grad_norm)
                    updating = True
                    optimizer.step()
                    scheduler.step()
                    state["global_step"] += 1
                    state["step_in_epoch"] += 1
                    state["loss_sum"] += value
                    state["loss_count"] += 1
                    boundary.mark(state)
                    updating = False
                    train_seconds += time.perf_counter() - started
                    steps_run += 1
                    recent.append(value)
                    progress.advance(epoch, options.epochs, sum(recent) / len(recent))
                    if on_step is not None:
                        on_step(state["global_step"], value)
                    if options.checkpoint_every and state["global_step"] % options.checkpoint_every == 0:
                        save_checkpoint()
                        last_saved = state["global_step"]
                # End of the epoch (or of max_steps inside it): evaluate, keep the best, checkpoint.
                mean_loss = state["loss_sum"] / state["loss_count"] if state["loss_count"] else None
                entry: dict[str, Any] = {"epoch": epoch, "step": state["global_step"], "loss": mean_loss}
                metrics: dict[str, float] = {}
                if task.has_dev:
                    metrics = task.dev_metrics()
                    for module in modules:
                        module.train()
                    entry.update(metrics)
                    score = metrics[task.selection_metric]
                    if better(score, state["best_score"]):
                        state["best_score"], state["best_epoch"] = score, epoch
                        work.save_best(task.weights())
                else:
                    state["best_epoch"] = epoch
                entry["seconds"] = round(time.perf_counter() - epoch_started, 3)
                state["dev_curve"].append(entry)
                log(f"Epoch {epoch}: loss {number_text(mean_loss)}"
                    + (f", dev {metrics_text(metrics)}" if task.has_dev else "")
                    + (" (best so far)" if task.has_dev and state["best_epoch"] == epoch else "") + ".")
                state.update(epoch=epoch + 1, step_in_epoch=0, loss_sum=0.0, loss_count=0)
                boundary.mark(state)
                save_checkpoint()
                last_saved = state["global_step"]
    except KeyboardInterrupt:
        if not updating and boundary.global_step > last_saved:
            save_checkpoint()
            last_saved = boundary.global_step
        if work.has_checkpoint():
            log(f"Interrupted: a checkpoint at step {last_saved:,} is in {work.path}; rerun the same command "
                "to resume.")
        raise

    best = work.load_best() if task.has_dev else None
    if best is not None:
        task.load_weights(best)
    result = LoopResult(steps_per_epoch=steps_per_epoch, total_steps=total_steps, steps_run=steps_run,
                        train_seconds=train_seconds, resumed_from_step=resumed_from,
                        best_epoch=state["best_epoch"], best_score=state["best_score"],
                        dev_curve=state["dev_curve"])
    with atomic_directory(Path(out), overwrite=options.overwrite) as tmp:
        task.save(tmp, result)
        write_json(tmp / DEV_CURVE_FILE, result.dev_curve)
    work.remove()
    return result


def number_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def metrics_text(metrics: dict[str, Any]) -> str:
    """``MRR@10 0.1234, R@100 0.5678``."""
    return ", ".join(f"{name} {number_text(value)}" for name, value in metrics.items())
