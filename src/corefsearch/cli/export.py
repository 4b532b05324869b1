"""``export-onnx``: the encoders of a reader, a retriever or a mention detector to ONNX for ``--backend onnx``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from corefsearch.cli.app import app, console, log_line, user_errors
from corefsearch.cli.report import print_export_summary
from corefsearch.export.graph import DEFAULT_QUANTIZE_OPS, FUSE_HELP, QUANTIZE_OPS_HELP


@app.command("export-onnx")
@user_errors
def export_onnx_command(
    model_dir: Annotated[Path, typer.Argument(
        metavar="MODEL_DIR", help="A reader folder (`train reader`), a retriever folder (`train retriever`) or a "
                                  "detector folder (`train detector`); with "
                                  "--out: `default` (the bundled all-MiniLM-L6-v2) or a Hugging Face model.")],
    quantize: Annotated[bool, typer.Option(
        help="Also write the dynamic int8 quantisation (onnx/model_qint8.onnx, for --backend onnx-int8).")] = True,
    quantize_ops: Annotated[str, typer.Option(
        "--quantize-ops", help=QUANTIZE_OPS_HELP)] = DEFAULT_QUANTIZE_OPS,
    fuse: Annotated[Optional[bool], typer.Option("--fuse/--no-fuse", help=FUSE_HELP)] = None,  # noqa: UP045
    out: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--out", help="For `default` or a Hugging Face model: write it here as a retriever folder with its export, "
                      "to pass as --encoder OUT (a new or empty folder).")] = None,
) -> None:
    """Export the encoders of a reader, a retriever or a mention detector to ONNX (onnx/ beside their weights) for
    `--backend onnx`."""
    from corefsearch.export.onnx import export_onnx

    summary = export_onnx(model_dir, quantize=quantize, out=out, quantize_ops=quantize_ops, fuse=fuse,
                          log=log_line)
    print_export_summary(summary, model_dir, out, console)


