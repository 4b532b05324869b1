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
total number of steps, with the same weights, as an uninterrupted one. After each epoch, and once
before training as epoch 0 (the task's baseline: the starting weights), the task is scored on its
dev set; the epoch with the best selection metric is kept, the starting weights when no epoch beats
them (without a dev set, the last epoch). At the
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

from corefsearch.base.errors import InputError
from corefsearch.base.precision import autocast, grad_scaler
from corefsearch.io.write import atomic_directory, write_json
from corefsearch.training.checkpoint import (
    BEST_FILE,
    CHECKPOINT_FILE,
    UnusableWorkFile,
    WorkDir,
    check_rng_state,
    set_rng_state,
)
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
    device: str = "cpu"  # where the task's modules are (the autocast's device type)
    precision: str = "fp32"  # resolved (corefsearch.base.precision.resolve): fp32 | bf16 | fp16


@dataclass
class LoopResult:
    steps_per_epoch: int
    total_steps: int
    steps_run: int  # in this invocation
    train_seconds: float  # the training steps of this invocation (no evaluation, no checkpoints)
    resumed_from_step: int | None
    best_epoch: int | None
    dev_curve: list[dict[str, Any]] = field(default_factory=list)
    best_score: float | None = None

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
    # fp16 scales the loss so that small gradients do not underflow; bf16 and fp32 need no scaler. The
    # scale is not checkpointed: a resumed run starts it again at its default and it settles in a few steps.
    scaler = grad_scaler(options.device, options.precision)
    task.loss_scale = scaler.scale if scaler is not None else None

    state: dict[str, Any] = {"epoch": 1, "step_in_epoch": 0, "global_step": 0, "loss_sum": 0.0,
                             "loss_count": 0, "dev_curve": [], "best_epoch": None, "best_score": None}
    resumed_from: int | None = None
    checkpoint: dict[str, Any] | None = None
    if work.has_checkpoint():
        # Every file is read and checked against this run before anything is restored: a damaged one
        # is a one-line error, or with --overwrite discarded for a start from the beginning.
        try:
            checkpoint = work.load_checkpoint()
            _check_checkpoint(work, checkpoint, task, optimizer, scheduler, steps_per_epoch, total_steps, options)
            best = work.load_best()
            if best is not None:
                _check_weights(work.path / BEST_FILE, best, task)
            del best
        except UnusableWorkFile as err:
            if not options.overwrite:
                raise work.cannot_resume(err) from None
            log(f"Discarding the checkpoint of the interrupted run in {work.path} ({err}; --overwrite); "
                "starting from the beginning.")
            for name in (CHECKPOINT_FILE, BEST_FILE):
                (work.path / name).unlink(missing_ok=True)
            checkpoint = None
    if checkpoint is not None:
        try:
            task.load_weights(checkpoint)
            optimizer.load_state_dict(checkpoint["optimizer"])
            scheduler.load_state_dict(checkpoint["scheduler"])
            set_rng_state(checkpoint["rng"])
        except torch.cuda.OutOfMemoryError:
            raise
        except (LookupError, TypeError, ValueError, RuntimeError) as err:  # what the checks above did not foresee
            raise InputError(f"{work.checkpoint_path}: does not fit this run ({type(err).__name__}: {err}); delete "
                             f"{work.path} to start the run again") from None
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
            if baseline.get(task.selection_metric) is not None:
                # The starting point is the epoch to beat: kept when no epoch does.
                state["best_score"], state["best_epoch"] = baseline[task.selection_metric], 0
                work.save_best(task.weights())

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
                    with autocast(options.device, options.precision):
                        value = task.backward(batch)
                    if scaler is not None:
                        scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(parameters, options.max_grad_norm)
                    updating = True
                    if scaler is not None:
                        scaler.step(optimizer)  # skipped when a gradient is not finite
                        scaler.update()
                    else:
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

    if task.has_dev and state["best_epoch"] == 0:
        log(f"No epoch beat the starting point's dev {task.selection_metric} ({number_text(state['best_score'])}): "
            "the starting weights are kept.")
    try:
        best = work.load_best() if task.has_dev else None
    except UnusableWorkFile as err:  # damaged while the run lasted
        raise work.cannot_resume(err) from None
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


# --- the checks of a checkpoint before a resumed run restores it ---------------------------------

_PROGRESS_COUNTS = ("epoch", "step_in_epoch", "global_step", "loss_count")


def _check_checkpoint(work: WorkDir, checkpoint: dict[str, Any], task: TrainingTask, optimizer: Any, scheduler: Any,
                      steps_per_epoch: int, total_steps: int, options: LoopOptions) -> None:
    """Raise :class:`UnusableWorkFile` unless ``checkpoint`` holds what this run saves, in the shapes
    of its model and optimizer: the weights, the optimizer and scheduler states, the random
    generators' states and the progress (restoring anything else could fail half-way, or later,
    in the middle of the training)."""
    path = work.checkpoint_path
    missing = [key for key in ("optimizer", "scheduler", "rng", "progress") if key not in checkpoint]
    if missing:
        raise UnusableWorkFile(f"{path}: not a checkpoint of this training (no {', '.join(missing)})")
    _check_weights(path, checkpoint, task)
    try:
        _check_optimizer(checkpoint["optimizer"], optimizer)
        _check_scheduler(checkpoint["scheduler"], scheduler)
        _check_progress(checkpoint["progress"], steps_per_epoch, total_steps, options.epochs)
    except _Unfit as err:
        raise UnusableWorkFile(f"{path}: does not fit this run ({err})") from None
    except _ODD_CONTENT as err:  # e.g. an unhashable parameter id
        raise UnusableWorkFile(f"{path}: does not fit this run ({type(err).__name__}: {err})") from None
    try:
        check_rng_state(checkpoint["rng"])
    except _ODD_CONTENT as err:
        raise UnusableWorkFile(f"{path}: does not fit this run (random generators' states: {err})") from None


class _Unfit(Exception):
    """What makes part of a checkpoint unfit for the run (the message says what and where)."""


# What checking odd content (a value of another type than expected) may raise besides _Unfit.
_ODD_CONTENT = (LookupError, TypeError, ValueError, RuntimeError, OverflowError, AttributeError)


def _check_weights(path: Path, saved: dict[str, Any], task: TrainingTask) -> None:
    """``saved`` holds the task's weights: the keys of ``task.weights()``, its tensors' shapes."""
    expected = task.weights()
    try:
        missing = [key for key in expected if key not in saved]
        if missing:
            raise _Unfit(f"no {', '.join(missing)}")
        for key, value in expected.items():
            _check_layout(value, saved[key], key)
    except _Unfit as err:
        raise UnusableWorkFile(f"{path}: the weights do not fit this run's model ({err})") from None
    except _ODD_CONTENT as err:
        raise UnusableWorkFile(f"{path}: the weights do not fit this run's model ({type(err).__name__}: "
                               f"{err})") from None


def _check_layout(expected: Any, found: Any, where: str) -> None:
    """``found`` has the structure of ``expected``: the same keys, list lengths and tensor shapes."""
    import torch

    if isinstance(expected, torch.Tensor):
        if not isinstance(found, torch.Tensor) or found.shape != expected.shape:
            raise _Unfit(f"{where}: {_described(found)} where a tensor of shape {tuple(expected.shape)} goes")
    elif isinstance(expected, dict):
        if not isinstance(found, dict):
            raise _Unfit(f"{where}: {_described(found)} where a mapping goes")
        odd = sorted(map(str, set(expected) ^ set(found)))
        if odd:
            raise _Unfit(f"{where}: {len(odd)} key(s) missing or unexpected, e.g. {odd[0]}")
        for key, value in expected.items():
            _check_layout(value, found[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        if not isinstance(found, (list, tuple)) or len(found) != len(expected):
            raise _Unfit(f"{where}: {_described(found)} where a list of {len(expected)} goes")
        for index, (value, other) in enumerate(zip(expected, found, strict=True)):
            _check_layout(value, other, f"{where}[{index}]")


def _described(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    return f"a {type(value).__name__}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_optimizer(saved: Any, optimizer: Any) -> None:
    """The optimizer's state: its parameter groups (sizes, numeric hyperparameters) and, per
    parameter, state tensors of the parameter's shape (torch finds a wrong one only at a step)."""
    import torch

    if not isinstance(saved, dict) or not isinstance(saved.get("param_groups"), list) \
            or not isinstance(saved.get("state"), dict):
        raise _Unfit(f"optimizer: {_described(saved)} where an optimizer state goes")
    groups = optimizer.param_groups
    if len(saved["param_groups"]) != len(groups):
        raise _Unfit(f"optimizer: {len(saved['param_groups'])} parameter groups where this run has {len(groups)}")
    ids: list[Any] = []
    for number, (found, group) in enumerate(zip(saved["param_groups"], groups, strict=True)):
        if not isinstance(found, dict) or not isinstance(found.get("params"), list) \
                or len(found["params"]) != len(group["params"]):
            raise _Unfit(f"optimizer: parameter group {number} does not hold {len(group['params'])} parameters")
        for key in ("lr", "weight_decay", "eps"):
            if key in group and not _is_number(found.get(key)):
                raise _Unfit(f"optimizer: parameter group {number}: {key} is {found.get(key)!r}, not a number")
        ids.extend(found["params"])
    # torch pairs the saved parameter ids with this optimizer's parameters by position.
    parameters = dict(zip(ids, (p for group in groups for p in group["params"]), strict=True))
    for key, values in saved["state"].items():
        if key not in parameters or not isinstance(values, dict):
            raise _Unfit(f"optimizer: state for a parameter {key!r} that is not in its groups")
        for name, value in values.items():
            shape = parameters[key].shape
            if name == "step":
                if not (_is_number(value) or isinstance(value, torch.Tensor) and value.numel() == 1):
                    raise _Unfit(f"optimizer: parameter {key}: step is {_described(value)}, not a number")
            elif not isinstance(value, torch.Tensor) or value.shape != shape:
                raise _Unfit(f"optimizer: parameter {key}: {name} is {_described(value)}, its parameter's "
                             f"shape is {tuple(shape)}")


def _check_scheduler(saved: Any, scheduler: Any) -> None:
    """The learning-rate schedule's state: its counters and one rate per parameter group."""
    expected = scheduler.state_dict()
    if not isinstance(saved, dict):
        raise _Unfit(f"scheduler: {_described(saved)} where a scheduler state goes")
    for key in ("last_epoch", "_step_count"):
        if key in expected and not (_is_number(saved.get(key)) and float(saved[key]).is_integer()):
            raise _Unfit(f"scheduler: {key} is {saved.get(key)!r}, not a whole number")
    for key in ("base_lrs", "_last_lr"):
        value = saved.get(key)
        if key in expected and not (isinstance(value, list) and len(value) == len(expected[key])
                                    and all(_is_number(rate) for rate in value)):
            raise _Unfit(f"scheduler: {key} is not a list of {len(expected[key])} rates")
    lambdas = saved.get("lr_lambdas")
    if "lr_lambdas" in expected and not (isinstance(lambdas, list) and len(lambdas) == len(expected["lr_lambdas"])
                                         and all(x is None or isinstance(x, dict) for x in lambdas)):
        raise _Unfit("scheduler: lr_lambdas is not what this schedule saves")


def _check_progress(saved: Any, steps_per_epoch: int, total_steps: int, epochs: int) -> None:
    """The position in the run (epoch, step), the running loss, the dev curve and the best epoch so far."""
    if not isinstance(saved, dict):
        raise _Unfit(f"progress: {_described(saved)} where a mapping goes")
    for key in _PROGRESS_COUNTS:
        if not _is_count(saved.get(key)):
            raise _Unfit(f"progress: {key} is {saved.get(key)!r}, not a count")
    if not 1 <= saved["epoch"] <= epochs + 1 or saved["step_in_epoch"] > steps_per_epoch \
            or saved["global_step"] > total_steps:
        raise _Unfit(f"progress: epoch {saved['epoch']}, step {saved['global_step']} lie outside this run "
                     f"({epochs} epoch(s) of {steps_per_epoch} steps, {total_steps} in all)")
    if not _is_number(saved.get("loss_sum")):
        raise _Unfit(f"progress: loss_sum is {saved.get('loss_sum')!r}, not a number")
    curve = saved.get("dev_curve")
    if not isinstance(curve, list) or not all(isinstance(entry, dict) and _is_count(entry.get("epoch"))
                                              and _is_count(entry.get("step")) for entry in curve):
        raise _Unfit("progress: dev_curve is not a list of {epoch, step, ...} entries")
    if not (saved.get("best_epoch") is None or _is_count(saved["best_epoch"])) \
            or not (saved.get("best_score") is None or _is_number(saved["best_score"])) \
            or "best_epoch" not in saved or "best_score" not in saved:
        raise _Unfit("progress: best_epoch and best_score are not an epoch and a score (or null)")


def number_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def metrics_text(metrics: dict[str, Any]) -> str:
    """``MRR@10 0.1234, R@100 0.5678``."""
    return ", ".join(f"{name} {number_text(value)}" for name, value in metrics.items())
