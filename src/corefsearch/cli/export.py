"""``export-onnx``: the encoders of a reader, a retriever, a mention encoder or a mention detector to ONNX for
``--backend onnx``; with ``--ship OUT --card CARD.json``, the inference-only copy of the folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from corefsearch.base.errors import CorefSearchError
from corefsearch.cli.app import app, console, log_line, user_errors
from corefsearch.cli.report import print_export_summary
from corefsearch.export.graph import DEFAULT_QUANTIZE_OPS, FUSE_HELP, QUANTIZE_OPS_HELP


@app.command("export-onnx")
@user_errors
def export_onnx_command(
    model_dir: Annotated[Path, typer.Argument(
        metavar="MODEL_DIR", help="A reader folder (`train reader`), a retriever folder (`train retriever`), a "
                                  "mention encoder folder (`train clusterer`) or a detector folder (`train "
                                  "detector`); with --out: `default` (the bundled all-MiniLM-L6-v2) or a Hugging "
                                  "Face model.")],
    quantize: Annotated[bool, typer.Option(
        help="Also write the dynamic int8 quantisation (onnx/model_qint8.onnx, for --backend onnx-int8).")] = True,
    quantize_ops: Annotated[str, typer.Option(
        "--quantize-ops", help=QUANTIZE_OPS_HELP)] = DEFAULT_QUANTIZE_OPS,
    fuse: Annotated[Optional[bool], typer.Option("--fuse/--no-fuse", help=FUSE_HELP)] = None,  # noqa: UP045
    out: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--out", help="For `default` or a Hugging Face model: write it here as a retriever folder with its export, "
                      "to pass as --encoder OUT (a new or empty folder).")] = None,
    ship: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--ship", help="Write the inference-only copy of MODEL_DIR here: its int8 export (exported first if it "
                       "has none), tokenizer, configs and heads, no torch weights, no fp32 export; needs "
                       "--card.")] = None,
    card: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--card", help="With --ship: the model's card, a JSON object (name, description, recipe, data, scores, "
                       "limits; kind, mention_type, format, base_model, created filled in when left out), written "
                       "to OUT/corefsearch_card.json with its size and appended to OUT/README.md.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="With --ship: replace OUT if it exists.")] = False,
    head_precision: Annotated[str, typer.Option(
        "--head-precision", help="With --ship: store the head's large weight matrices as int8 rows (a quarter of "
                                 "the size; what the shipped models use) or fp32 as trained.")] = "int8",
) -> None:
    """Export the encoders of a reader, a retriever, a mention encoder or a mention detector to ONNX (onnx/ beside
    their weights) for `--backend onnx`; with --ship OUT --card CARD.json, write the folder's inference-only copy."""
    if ship is not None or card is not None or overwrite or head_precision != "int8":
        _ship(model_dir, ship, card, overwrite, out, quantize, quantize_ops, fuse, head_precision)
        return
    from corefsearch.export.onnx import export_onnx

    summary = export_onnx(model_dir, quantize=quantize, out=out, quantize_ops=quantize_ops, fuse=fuse,
                          log=log_line)
    print_export_summary(summary, model_dir, out, console)


def _ship(model_dir: Path, ship: Path | None, card: Path | None, overwrite: bool, out: Path | None, quantize: bool,
          quantize_ops: str, fuse: bool | None, head_precision: str) -> None:
    """``--ship OUT --card CARD.json``: the inference-only copy (``corefsearch.export.ship``)."""
    if ship is None or card is None:
        raise CorefSearchError("--ship OUT and --card CARD.json go together (--overwrite and --head-precision with "
                               "them): give both")
    if out is not None:
        raise CorefSearchError("--out writes a zero-shot retriever; --ship copies a trained folder: give one of them")
    from corefsearch.export.onnx import ExportOptions
    from corefsearch.export.ship import read_card, write_shipped

    summary = write_shipped(model_dir, ship, read_card(card), overwrite=overwrite,
                            options=ExportOptions(quantize, quantize_ops, fuse), log=log_line,
                            head_precision=head_precision)
    if summary.exported is not None:
        print_export_summary(summary.exported, model_dir, None, console)
    console.print(f"Wrote {summary.folder}: the inference-only {summary.kind} ({len(summary.files)} files, "
                  f"{summary.size / 1e6:.1f} MB; no torch weights, no fp32 export) in {summary.seconds:.1f} s",
                  markup=False, soft_wrap=True)


