"""``detect``: the predicted mentions of every passage of a dataset."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from corefsearch.base.counts import counted
from corefsearch.base.precision import DEFAULT_PRECISION, PRECISION_HELP
from corefsearch.cli.app import app, click_errors, console, log_line, user_errors
from corefsearch.cli.fields import options_from
from corefsearch.cli.options import (
    RayCpusOption,
    RayOption,
    RayWorkersOption,
    precision_scope,
    ray_options,
)


@dataclass
class DetectArgs:
    """The options of ``detect`` (less ``--ray``)."""

    model: str | None = field(default=None, metadata={"option": "--model", "help": (
        "heuristic (spaCy's parse, no training) | a detector folder from `train detector` | a shipped detector's name "
        "(`corefsearch models`; default: the shipped detector, needed when none is shipped).")})
    mention_type: str = field(default="all", metadata={"help": "all | event | entity: the mention types kept."})
    batch_size: int = field(default=64, metadata={"help": "Passage windows per batch."})
    device: str = field(default="auto", metadata={"help": "A trained detector: auto | cpu | cuda."})
    backend: str | None = field(default=None, metadata={"help": (
        "A trained detector: torch | onnx | onnx-int8 (its encoder on ONNX Runtime: run `corefsearch export-onnx "
        "MODEL` first); default torch, or onnx-int8 for a folder that ships only that export.")})
    precision: str = field(default=DEFAULT_PRECISION, metadata={"help": PRECISION_HELP})
    threads: int | None = field(default=None, metadata={
        "help": "CPU threads (torch.set_num_threads; default: torch's)."})
    overwrite: bool = field(default=False, metadata={"help": (
        "Replace the dataset's predicted mentions (also what repairs them: one of the two files without the other, "
        "or a mentions file changed since detection).")})


@app.command("detect")
@user_errors
@options_from(DetectArgs)
def detect_command(
    ctx: typer.Context,
    dataset: Annotated[Path, typer.Argument(metavar="DATASET", help="Dataset directory from `build-dataset`.")],
    *,
    args: DetectArgs,
    ray: RayOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus_per_worker: RayCpusOption = None,
) -> None:
    """Detect the mentions of every passage of DATASET; writes DATASET/predicted_mentions.jsonl (kept apart from
    the gold mentions) and its manifest. Resumes an interrupted run of the same detector."""
    from corefsearch.base.schema import MENTION_TYPES
    from corefsearch.detect.detectors import default_detector
    from corefsearch.detect.run import detect_dataset

    types = None if args.mention_type == "all" else [args.mention_type]
    model = args.model if args.model is not None else default_detector(types, log_line)
    if model is None:  # none given and none shipped: the usage error of a required option
        raise click_errors.MissingParameter(ctx=ctx, param=next(p for p in ctx.command.params if p.name == "model"))
    if args.mention_type not in ("all", *MENTION_TYPES):
        raise typer.BadParameter(f"must be all, event or entity, got {args.mention_type!r}",
                                 param_hint="--mention-type")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    ray_given = ray_options(ray, ray_workers, ray_cpus_per_worker)
    detection = None
    if ray_given is not None:
        from corefsearch.distributed.detection import RayDetection

        detection = RayDetection(ray_given)
    with precision_scope(args.precision, backend=args.backend, ray=ray_given):
        summary = detect_dataset(dataset, model, batch_size=args.batch_size, device=args.device,
                                 backend=args.backend, types=types, overwrite=args.overwrite, log=log_line,
                                 detection=detection)
    found = ", ".join(counted(n, f"{kind} mention") for kind, n in summary.mentions.items()) or "no mentions"
    console.print(f"Detected {found} in {counted(summary.passages, 'passage')} ({summary.passages_without:,} with "
                  f"none) in {summary.seconds:.1f} s ({summary.passages_per_second:,.0f} passages/s); wrote "
                  f"{summary.out}.", highlight=False, markup=False)
