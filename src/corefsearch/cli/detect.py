"""``detect``: the predicted mentions of every passage of a dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from corefsearch.base.counts import counted
from corefsearch.cli.app import app, console, log_line, user_errors
from corefsearch.cli.options import (
    PrecisionOption,
    RayCpusOption,
    RayOption,
    RayWorkersOption,
    precision_scope,
    ray_options,
)


@app.command("detect")
@user_errors
def detect_command(
    dataset: Annotated[Path, typer.Argument(metavar="DATASET", help="Dataset directory from `build-dataset`.")],
    model: Annotated[str, typer.Option(
        "--model", help="heuristic (spaCy's parse, no training) | a detector folder from `train detector`.")],
    mention_type: Annotated[str, typer.Option(help="all | event | entity: the mention types kept.")] = "all",
    batch_size: Annotated[int, typer.Option(help="Passage windows per batch.")] = 64,
    device: Annotated[str, typer.Option(help="A trained detector: auto | cpu | cuda.")] = "auto",
    backend: Annotated[str, typer.Option(
        help="A trained detector: torch | onnx | onnx-int8 (its encoder on ONNX Runtime: run `corefsearch "
             "export-onnx MODEL` first).")] = "torch",
    precision: PrecisionOption = "auto",
    threads: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="CPU threads (torch.set_num_threads; default: torch's).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace the dataset's predicted mentions.")] = False,
    ray: RayOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus_per_worker: RayCpusOption = None,
) -> None:
    """Detect the mentions of every passage of DATASET; writes DATASET/predicted_mentions.jsonl (kept apart from
    the gold mentions) and its manifest. Resumes an interrupted run of the same detector."""
    from corefsearch.base.schema import MENTION_TYPES
    from corefsearch.detect.run import detect_dataset

    if mention_type not in ("all", *MENTION_TYPES):
        raise typer.BadParameter(f"must be all, event or entity, got {mention_type!r}", param_hint="--mention-type")
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    types = None if mention_type == "all" else [mention_type]
    ray_given = ray_options(ray, ray_workers, ray_cpus_per_worker)
    detection = None
    if ray_given is not None:
        from corefsearch.distributed.detection import RayDetection

        detection = RayDetection(ray_given)
    with precision_scope(precision, backend=backend, ray=ray_given):
        summary = detect_dataset(dataset, model, batch_size=batch_size, device=device, backend=backend, types=types,
                                 overwrite=overwrite, log=log_line, detection=detection)
    found = ", ".join(counted(n, f"{kind} mention") for kind, n in summary.mentions.items()) or "no mentions"
    console.print(f"Detected {found} in {counted(summary.passages, 'passage')} ({summary.passages_without:,} with "
                  f"none) in {summary.seconds:.1f} s ({summary.passages_per_second:,.0f} passages/s); wrote "
                  f"{summary.out}.", highlight=False, markup=False)
