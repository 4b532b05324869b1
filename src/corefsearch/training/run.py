"""The start of every training run, and the summary every trainer returns.

A trainer runs in this order::

    run, inputs = start_run(args, out, overwrite=..., log=..., open_inputs=...)  # see start_run
    ...read its data (errors here leave nothing behind)...
    run.claim(dataset, {...the inputs' checksums...})  # the working folder .OUT.training/, then the seed
    ...build the model and its TrainingTask(run=run, ...)...
    result = run.train(task, on_step)                   # the one loop (loop.py)
    return run.summary(result, extras)                  # TrainingSummary; the CLI prints it

The run record (:func:`run_record`) identifies a run: a leftover working folder is resumed only when
its record is the same (``claim_work_dir``); it is also the start of ``training_args.json``
(:meth:`Run.finished_record`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from corefsearch.base.artefacts import manifest_record, training_kind, versions
from corefsearch.base.errors import InputError
from corefsearch.base.models import check_model_folder, resolve_device
from corefsearch.base.precision import resolve, using
from corefsearch.base.shipped import resolve_reference
from corefsearch.io.write import sha256_file
from corefsearch.training.checkpoint import WorkDir
from corefsearch.training.common import Log, claim_work_dir, default_log, seed_everything, set_threads
from corefsearch.training.loop import LoopResult, train_loop

if TYPE_CHECKING:
    from corefsearch.training.arguments import TrainingArguments
    from corefsearch.training.task import TrainingTask

TRAINING_ARGS_FILE = "training_args.json"

T = TypeVar("T")
E = TypeVar("E")


class DatasetFiles(Protocol):
    """What a run record needs of a dataset (``corefsearch.datasets.dataset.Dataset`` has it)."""

    @property
    def root(self) -> Path: ...

    @property
    def manifest(self) -> dict[str, Any]: ...

    @property
    def passages_path(self) -> Path: ...


@dataclass(kw_only=True)
class TrainingSummary(LoopResult, Generic[E]):
    """What a training run did: the loop's result, the run's kind, folder and device, and ``extras``, what
    only its trainer counts (``cli/report.py`` prints it)."""

    kind: str  # retriever | reader | clusterer
    out: Path
    device: str
    extras: E


class Run:
    """A training run that :func:`start_run` started: its arguments, ``OUT``, device, log and working
    folder; :meth:`claim` makes the folder its own."""

    def __init__(self, args: TrainingArguments, out: Path, *, device: str, overwrite: bool, log: Log) -> None:
        self.args, self.out, self.device, self.overwrite, self.log = args, out, device, overwrite, log
        self.work = WorkDir(out)
        self.record: dict[str, Any] = {}
        self.manifest: dict[str, Any] = {}

    def claim(self, dataset: DatasetFiles, inputs: dict[str, Any]) -> None:
        """Claim the working folder for the run that :func:`run_record` of ``dataset`` and ``inputs``
        identifies (a leftover one of the same run is resumed, one of another is refused unless
        ``overwrite``), then seed every random generator with the arguments' seed."""
        self.record = run_record(self.args, dataset, inputs)
        self.manifest = dataset.manifest
        claim_work_dir(self.work, self.record, self.overwrite, self.log)
        seed_everything(self.args.seed)

    def finished_record(self, **rest: Any) -> dict[str, Any]:
        """``training_args.json``: the run record, the device, ``checkpoint_every``, when it was written,
        then ``rest`` (counts, best epoch, ...), and ``kept`` when the best epoch is the starting point."""
        head = manifest_record(training_kind(self.args.kind), {})  # kind, corefsearch_version, created
        record = {**head, **self.record, "device": self.device, "precision": self.precision,
                  "checkpoint_every": self.args.checkpoint_every, **rest}
        if rest.get("best_epoch") == 0:  # the loop kept the starting weights: no epoch beat them on dev
            record["kept"] = "the starting weights (epoch 0): no trained epoch beat them on dev"
        return record

    @property
    def precision(self) -> str:
        """What ``--precision`` means on the run's device: fp32, bf16 or fp16."""
        return resolve(self.args.precision, self.device)

    def train(self, task: TrainingTask, on_step: Callable[[int, float], None] | None = None) -> LoopResult:
        """Run ``task`` through the training loop into ``OUT``, its steps and dev evaluations in the
        run's precision."""
        from dataclasses import replace

        options = replace(self.args.loop_options(self.overwrite), device=self.device, precision=self.precision)
        with using(self.args.precision):
            return train_loop(task, self.work, self.out, options, log=self.log, on_step=on_step)

    def summary(self, result: LoopResult, extras: E) -> TrainingSummary[E]:
        loop = {name.name: getattr(result, name.name) for name in fields(LoopResult)}
        return TrainingSummary(**loop, kind=self.args.kind, out=self.out, device=self.device, extras=extras)


def start_run(args: TrainingArguments, out: Path, *, overwrite: bool, log: Log | None,
              open_inputs: Callable[[], T]) -> tuple[Run, T]:
    """The prologue of every trainer: check the arguments, set the CPU threads, check the base
    model folder (a shipped model's name becomes its folder), open the trainer's inputs (``open_inputs()``:
    the dataset, a run file, ... and their errors), refuse an existing ``OUT`` unless ``overwrite``, resolve
    the device.
    Returns the run and what ``open_inputs`` returned."""
    args.validate()
    set_threads(args.threads)
    args.base_model = resolve_reference(args.base_model)  # a shipped model's name: its folder (as recorded)
    check_model_folder(args.base_model, "--base-model")
    inputs = open_inputs()
    out = Path(out)
    if out.exists() and not overwrite:
        raise InputError(f"{out} already exists (a finished training run?); use --overwrite to retrain it")
    device = resolve_device(args.device)
    return Run(args, out, device=device, overwrite=overwrite, log=log or default_log), inputs


def run_record(args: TrainingArguments, dataset: DatasetFiles, inputs: dict[str, Any]) -> dict[str, Any]:
    """What identifies a run: its kind, the recorded options, the dataset and its passages' checksum,
    the trainer's other ``inputs`` (checksums, paths), and the library versions (not compared)."""
    checksums = dataset.manifest.get("checksums", {})
    return manifest_record(training_kind(args.kind), {
        "options": args.recorded_options(), "dataset": str(dataset.root.resolve()),
        "passages_sha256": checksums.get("passages.jsonl") or "sha256:" + sha256_file(dataset.passages_path),
        **inputs, "versions": versions("torch", "transformers", python=True)}, created=False)
