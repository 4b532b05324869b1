"""``corefsearch export-onnx MODEL_DIR``: export the transformer encoder(s) of a model folder to
ONNX (and their dynamic int8 quantisation), beside their weights, for ``--backend onnx|onnx-int8``.

A reader, a mention encoder (clusterer) or a detector folder has one encoder (exported to ``MODEL_DIR/onnx/``); a
retriever folder one or two (``MODEL_DIR/query_encoder/onnx/``, and ``MODEL_DIR/passage_encoder/onnx/`` unless the
encoder is shared); ``export-onnx default --out DIR`` (or a Hugging Face model instead of ``default``) writes
the zero-shot retriever of that model to ``DIR`` and exports it there, as the bundled model's own
folder is not corefsearch's to write. Every encoder goes through :func:`export_encoder`, given the
encoder and sample inputs made by its own model class (the reader's windows, the retriever's
passage and query batches, the mention encoder's marked mentions, the detector's windows).

The encoder is exported from torch (``AutoModel`` → ``last_hidden_state``) with dynamic batch
and sequence axes and the inputs corefsearch passes it (``input_ids``, ``attention_mask`` and,
when the model has segments, ``token_type_ids``), then run with ONNX Runtime on other batches
than it was traced with (another batch size and length, padded rows and full ones) against
torch: an export that does not reproduce the torch encoder is refused. With ``fuse``
(``--fuse``) the traced graph goes through ONNX Runtime's transformer fusions first (traced with
eager attention, which they match), and the fused graph is what is checked and written. The int8
model is ``onnxruntime.quantization.quantize_dynamic`` of the fp32 one (weights int8, activations
quantised on the fly; ``quantize_ops`` says which operators, see :mod:`corefsearch.export.graph`);
its difference to torch is reported, not bounded (quantisation changes the numbers by design;
``bench/encode_speed.py`` and ``bench/reader_speed.py`` measure what it costs in MRR@10).

Each file is written under a temporary name in the ``onnx/`` folder and renamed into place when
complete; ``onnx/export.json`` (written last) records the checksum of the weights exported, which
``--backend onnx`` checks (see :mod:`corefsearch.base.onnx_backend`), the fusions and the
quantisation's settings, and each file's sha256 and nodes by operator type. A folder that ships only its
int8 export (:func:`corefsearch.base.onnx_backend.inference_only`) has no weights to export again.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.base.artefacts import ONNX_EXPORT, manifest_record, versions, write_manifest
from corefsearch.base.errors import InputError
from corefsearch.base.models import (
    CLUSTERER_CONFIG,
    DETECTOR_CONFIG,
    READER_CONFIG,
    RETRIEVER_CONFIG,
    check_model_folder,
    model_kind,
)
from corefsearch.base.onnx_backend import (
    EXPORT_RECORD,
    ONNX_DIR,
    ONNX_MODEL,
    ONNX_QINT8,
    OUTPUT_NAME,
    WEIGHTS_FILE,
    OnnxEncoder,
    inference_only,
    weights_checksum,
)
from corefsearch.base.schema import Query
from corefsearch.base.shipped import resolve_reference
from corefsearch.cluster.inputs import MentionRecord
from corefsearch.cluster.model import MentionEncoder
from corefsearch.dense.model import BiEncoder
from corefsearch.detect.model import MentionDetector
from corefsearch.export.graph import (
    DEFAULT_QUANTIZE_OPS,
    check_quantize_ops,
    fuse_transformer,
    node_counts,
    quantization_settings,
    quantize_int8,
    resolve_fuse,
)
from corefsearch.io.write import atomic_directory, sha256_file
from corefsearch.reader.model import CrossEncoderReader
from corefsearch.reader.read import Reader

OPSET = 17
FP32_TOLERANCE = 1e-3  # max abs difference of the hidden states allowed between ONNX Runtime and torch
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # what a Hugging Face encoder is exported with

# Sample inputs: a query and passages of different lengths, one long enough for several windows,
# so that the traced batch and the checked one both hold padded and full rows.
SAMPLE_QUERY = ("Firefighters fought the blaze through the night after the fire broke out at the mill.", "blaze")
SAMPLE_PASSAGES = (
    "A fire destroyed the old textile mill.",
    "Rail workers began a strike across the country on Friday, and the unions said it would go on.",
    "Police suspect arson in the mill fire. " * 12,
    "The blaze sent smoke across the city centre while crews fought it through the night.",
    "Storm.",
)


@dataclass
class ExportedFile:
    path: Path
    max_abs_diff: float  # hidden states against torch on the check batch
    megabytes: float


@dataclass(frozen=True)
class ExportOptions:
    """What ``export-onnx`` writes besides the fp32 model: the int8 one (``quantize``) quantising the
    operators of ``quantize_ops`` (``linear`` | ``all``), both fused first with ``fuse`` (None: when the
    encoder is one ONNX Runtime's optimizer fuses, see :func:`corefsearch.export.graph.resolve_fuse`)."""
    quantize: bool = True
    quantize_ops: str = DEFAULT_QUANTIZE_OPS
    fuse: bool | None = None

    def __post_init__(self) -> None:
        check_quantize_ops(self.quantize_ops)


@dataclass
class ExportSummary:
    folder: Path
    files: list[ExportedFile]
    removed: list[Path]  # an int8 file of earlier weights, removed by --no-quantize
    seconds: float
    kind: str = "encoder"  # reader | retriever | clusterer | detector: the kind of model folder


@contextlib.contextmanager
def _temporary_beside(path: Path) -> Iterator[Path]:
    """A temporary file name beside ``path`` (hidden, random part from mkstemp), removed unless renamed."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _sample_inputs(reader: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Encoder inputs from the reader's own windows: one batch to trace, another to check against."""
    text, mention = SAMPLE_QUERY
    start = text.index(mention)
    query = Query("export", "", text, start, start + len(mention), mention, "")
    windows = Reader(reader).windows(query, [(f"p{i}", t) for i, t in enumerate(SAMPLE_PASSAGES)])
    windows.sort(key=lambda w: len(w.input_ids))
    trace = [windows[0], windows[len(windows) // 2]]  # two rows of different lengths: one padded
    return reader.encoder_inputs(trace), reader.encoder_inputs(windows)


def _encoder_module(model: Any, names: list[str]) -> Any:
    """The Hugging Face model as a module of positional tensors → ``last_hidden_state``."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(names, tensors, strict=True))).last_hidden_state

    return Encoder().eval()


@contextlib.contextmanager
def _eager_attention(model: Any) -> Iterator[None]:
    """The model with eager attention inside the block (the graph ONNX Runtime's fusions match), then
    its own again."""
    previous = getattr(model.config, "_attn_implementation", None)
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if previous and previous != "eager":
            model.set_attn_implementation(previous)


def _export(model: Any, inputs: dict[str, Any], path: Path) -> None:
    import torch

    names = list(inputs)
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    axes[OUTPUT_NAME] = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings():
        # The TorchScript exporter (dynamo=False) is deprecated in torch 2.9+, but the dynamo one
        # needs onnxscript, and this one exports a BERT-style encoder exactly. Its TracerWarnings are
        # about Python branches of the attention-mask code; the traced batch holds a padded row, so
        # the masked branch is the one recorded, which is exact for full rows too (checked below).
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(_encoder_module(model, names), tuple(inputs.values()), str(path), dynamo=False,
                              input_names=names, output_names=[OUTPUT_NAME], dynamic_axes=axes,
                              opset_version=OPSET, do_constant_folding=True)


def _max_abs_diff(path: Path, config: Any, inputs: dict[str, Any], expected: Any) -> float:
    import torch

    got = OnnxEncoder(path, config)(**inputs).last_hidden_state
    if got.shape != expected.shape:
        raise InputError(f"{path}: the ONNX encoder gives hidden states of shape {tuple(got.shape)}, torch "
                         f"{tuple(expected.shape)}; the export failed")
    mask = inputs["attention_mask"].bool()  # padding positions are never read
    diff = (got - expected).abs()[mask]
    return float(diff.max()) if torch.isfinite(diff).all() else float("inf")


def export_encoder(folder: Path, model: Any, trace: dict[str, Any], checks: list[dict[str, Any]],
                   options: ExportOptions | None = None, log: Callable[[str], None] | None = None) -> ExportSummary:
    """Export the Hugging Face encoder ``model`` whose weights are ``folder/model.safetensors`` to
    ``folder/onnx/model.onnx`` and, with ``options.quantize``, ``folder/onnx/model_qint8.onnx``: traced
    with the inputs ``trace`` (and fused with ``options.fuse``), checked against torch on each batch of
    ``checks`` (other sizes and lengths; each holds the inputs ``trace`` names). The one export path of
    every kind of model folder."""
    import torch

    options = options or ExportOptions()
    fuse = resolve_fuse(options.fuse, model.config, folder)
    say = log or (lambda _: None)
    started = time.perf_counter()
    folder = Path(folder)
    checksum = weights_checksum(folder)
    if checksum is None:
        raise InputError(f"{folder} holds no model.safetensors (the encoder weights corefsearch saves): cannot tell "
                         "later which weights an export belongs to")
    mode = (folder / WEIGHTS_FILE).stat().st_mode & 0o777  # the exports get the weights' permissions
    model.train(False)
    with torch.inference_mode():
        expected = [model(**check).last_hidden_state for check in checks]

    def max_abs_diff(path: Path) -> float:
        return max(_max_abs_diff(path, model.config, check, want) for check, want in zip(checks, expected,
                                                                                      strict=True))

    out_dir = folder / ONNX_DIR
    out_dir.mkdir(exist_ok=True)
    record_path = out_dir / EXPORT_RECORD
    files: list[ExportedFile] = []
    removed: list[Path] = []
    fp32, int8 = out_dir / ONNX_MODEL, out_dir / ONNX_QINT8
    fusion = None
    with _temporary_beside(fp32) as tmp_fp32, _temporary_beside(int8) as tmp_int8:
        say(f"Exporting the encoder of {folder} (opset {OPSET}) ...")
        if fuse:
            with _temporary_beside(fp32) as traced:
                with _eager_attention(model):
                    _export(model, trace, traced)
                say("Fusing attention, GELU and LayerNorm (ONNX Runtime's transformer optimizer) ...")
                fusion = fuse_transformer(traced, tmp_fp32, model.config)
        else:
            _export(model, trace, tmp_fp32)
        diff = max_abs_diff(tmp_fp32)
        if not diff <= FP32_TOLERANCE:
            raise InputError(f"the ONNX export of {folder} does not reproduce the torch encoder (max abs difference "
                             f"{diff:.3g} > {FP32_TOLERANCE:g}); nothing was written")
        files.append(ExportedFile(fp32, diff, tmp_fp32.stat().st_size / 1e6))
        nodes = {fp32.name: node_counts(tmp_fp32)}
        if options.quantize:
            say(f"Quantising it to int8 (dynamic, per channel, --quantize-ops {options.quantize_ops}) ...")
            quantize_int8(tmp_fp32, tmp_int8, options.quantize_ops)
            nodes[int8.name] = node_counts(tmp_int8)
            diff8 = max_abs_diff(tmp_int8)
            if diff8 == float("inf"):
                raise InputError(f"the int8 model of {folder} gives non-finite hidden states; nothing was written "
                                 "(export with --no-quantize)")
            files.append(ExportedFile(int8, diff8, tmp_int8.stat().st_size / 1e6))
        # Every file checked: now replace the old export. Its record goes first, so that an export
        # interrupted half-way is never taken for a complete one (the new record is written last).
        record_path.unlink(missing_ok=True)
        if options.quantize:
            os.chmod(tmp_int8, mode)
            os.replace(tmp_int8, int8)
        elif int8.exists():  # from earlier weights, perhaps: never left to look current
            int8.unlink()
            removed.append(int8)
        os.chmod(tmp_fp32, mode)
        os.replace(tmp_fp32, fp32)
    write_manifest(record_path, manifest_record(ONNX_EXPORT, {
        "weights_sha256": checksum,
        "files": {f.path.name: {"max_abs_diff": f.max_abs_diff, "sha256": "sha256:" + sha256_file(f.path),
                                "nodes": nodes[f.path.name]} for f in files},
        "inputs": list(trace), "output": OUTPUT_NAME, "opset": OPSET, "fusion": fusion,
        "quantization": quantization_settings(options.quantize_ops) if options.quantize else None,
        "versions": versions("torch", "onnx", "onnxruntime")}))
    return ExportSummary(folder, files, removed, time.perf_counter() - started)


def export_onnx(folder: Path | str, quantize: bool = True, log: Callable[[str], None] | None = None,
                out: Path | None = None, quantize_ops: str = DEFAULT_QUANTIZE_OPS,
                fuse: bool | None = None) -> ExportSummary:
    """Export the encoder(s) of a model folder to ONNX, each into its own ``onnx/`` folder:

    - a reader (``corefsearch_reader.json``), a mention encoder (``corefsearch_clusterer.json``) or a detector
      (``corefsearch_detector.json``): its encoder, into ``folder/onnx/``;
    - a retriever (``corefsearch_retriever.json``): each encoder it loads, into
      ``folder/query_encoder/onnx/`` and ``folder/passage_encoder/onnx/`` (only the first when the
      encoder is shared: the passage folder is then a copy the retriever does not load);
    - ``default`` (the bundled all-MiniLM-L6-v2) or a Hugging Face model name or folder, with ``out``:
      written to ``out`` as a retriever folder (the same zero-shot retriever ``--encoder`` makes of it:
      one shared encoder, mean pooling, no markers; the same passage fingerprint, so an index built
      with the model searches with ``out``), then exported there. The bundled model's own folder
      (site-packages) is never written to.
    """
    started = time.perf_counter()
    folder = resolve_reference(folder)  # a shipped model's name: its folder
    options = ExportOptions(quantize, quantize_ops, fuse)
    if out is not None:
        summary = _export_zero_shot(str(folder), Path(out), options, log)
    else:
        check_model_folder(folder, "MODEL_DIR")
        folder = Path(folder)
        kind = model_kind(folder)
        if inference_only(folder):
            raise InputError(f"{folder} ships only its int8 ONNX export (no torch weights to export again); export the "
                             "trained folder it was written from")
        if kind == "reader":
            summary = _export_reader(folder, options, log)
        elif kind == "retriever":
            summary = _export_retriever(folder, options, log)
        elif kind == "detector":
            summary = _export_detector(folder, options, log)
        elif kind == "clusterer":
            summary = _export_clusterer(folder, options, log)
        else:
            zero_shot = "default" if str(folder) == "default" else str(folder)
            raise InputError(f"{folder} is not a reader, retriever, mention encoder or detector folder (it holds none "
                             f"of {READER_CONFIG}, {RETRIEVER_CONFIG}, {CLUSTERER_CONFIG}, {DETECTOR_CONFIG}); for the "
                             "bundled default "
                             "encoder or a Hugging Face model, write an exported copy with `corefsearch export-onnx "
                             f"{zero_shot} --out DIR` and pass --encoder DIR")
    summary.seconds = time.perf_counter() - started
    return summary


def _export_reader(folder: Path, options: ExportOptions, log: Callable[[str], None] | None) -> ExportSummary:
    reader = CrossEncoderReader.load(folder, "cpu")
    reader.train(False)
    trace, check = _sample_inputs(reader)
    summary = export_encoder(folder, reader.model, trace, [check], options, log)
    summary.kind = "reader"
    return summary


def _export_detector(folder: Path, options: ExportOptions, log: Callable[[str], None] | None) -> ExportSummary:
    """A mention detector's encoder, traced on its own windows of the sample passages (long and short)."""
    detector = MentionDetector.load(folder, "cpu")
    windows = detector.windows(list(SAMPLE_PASSAGES))
    trace = detector.pad(windows[:2])
    check = detector.pad(windows)
    summary = export_encoder(folder, detector.model, trace, [check], options, log)
    summary.kind = "detector"
    return summary


def _export_clusterer(folder: Path, options: ExportOptions, log: Callable[[str], None] | None) -> ExportSummary:
    """A mention encoder's encoder, traced on its own inputs of sample mentions (a short context and a long one,
    one row padded), checked on every sample passage's mention (another batch size and length)."""
    encoder = MentionEncoder.load(folder, "cpu", backend="torch")
    encoder.train(False)
    records = []
    for i, text in enumerate((SAMPLE_QUERY[0], *SAMPLE_PASSAGES)):
        word = SAMPLE_QUERY[1] if i == 0 else max(text.split(), key=len).strip(".,")
        start = text.index(word)
        records.append(MentionRecord(f"export-{i}", "export", "export", None, f"export-{i}", word, start,
                                     start + len(word), text, " ".join(SAMPLE_PASSAGES[:2])))

    def inputs(batch: list[MentionRecord]) -> dict[str, Any]:
        return {k: v for k, v in encoder.batch(batch).items() if k in MODEL_INPUTS}

    summary = export_encoder(folder, encoder.model, inputs([records[-1], records[2]]), [inputs(records)], options,
                             log)
    summary.kind = "clusterer"
    return summary


def _export_retriever(folder: Path, options: ExportOptions, log: Callable[[str], None] | None) -> ExportSummary:
    model = BiEncoder.load(str(folder), "cpu")  # one line when it is incomplete
    files: list[ExportedFile] = []
    removed: list[Path] = []
    for side, encoder_folder in model.encoder_folders().items():
        encoder = model.query_encoder if side == "query" else model.passage_encoder
        trace, checks = _retriever_sample_inputs(encoder, model.config.max_query_len, model.config.max_passage_len)
        part = export_encoder(encoder_folder, encoder.model, trace, checks, options, log)
        files += part.files
        removed += part.removed
    return ExportSummary(folder, files, removed, 0.0, kind="retriever")


def _export_zero_shot(reference: str, out: Path, options: ExportOptions,
                      log: Callable[[str], None] | None) -> ExportSummary:
    say = log or (lambda _: None)
    if reference not in ("", "default"):
        check_model_folder(reference, "MODEL")
        kind = model_kind(reference)
        if kind in ("reader", "retriever"):
            raise InputError(f"{reference} is a {kind} folder: its export goes into it, `corefsearch export-onnx "
                             f"{reference}` (--out is for the bundled default encoder or a Hugging Face model)")
    if out.exists() and any(out.iterdir()):
        raise InputError(f"--out {out} already exists and is not empty: give a new folder (the exported copy of "
                         f"{reference or 'default'} is written there)")
    model = BiEncoder.load(reference or "default", "cpu")  # the zero-shot retriever --encoder makes of it
    say(f"Writing {reference or 'default'} as a retriever folder to {out} ...")
    with atomic_directory(out, overwrite=True) as tmp:
        model.save(tmp)
        summary = _export_retriever(tmp, options, lambda message: say(message.replace(str(tmp), str(out))))
    # The files were written in the temporary folder: name them where they are now.
    files = [ExportedFile(out / f.path.relative_to(tmp), f.max_abs_diff, f.megabytes) for f in summary.files]
    return ExportSummary(out, files, [], 0.0, kind="retriever")


def _retriever_sample_inputs(encoder: Any, max_query_len: int,
                             max_passage_len: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Inputs of a retriever's encoder, from its own batches: a batch of two ``title [SEP] text``
    passages of different lengths to trace (segments 0 and 1, one row padded), and to check, every
    sample passage (another batch size and length) and a batch of queries (with its mention marked
    when the encoder has markers; no segments given, as the torch path gives none)."""
    titles = [f"Report {i}" if i % 2 else "" for i in range(len(SAMPLE_PASSAGES))]
    order = sorted(range(len(SAMPLE_PASSAGES)), key=lambda i: len(SAMPLE_PASSAGES[i]))
    pair = [order[0], order[len(order) // 2]]
    trace = encoder.passage_batch([titles[i] or "Report" for i in pair], [SAMPLE_PASSAGES[i] for i in pair],
                                  max_passage_len)
    trace = {k: v for k, v in trace.items() if k in MODEL_INPUTS}
    passages = encoder.model_inputs(encoder.passage_batch(titles, list(SAMPLE_PASSAGES), max_passage_len), trace)
    queries = []
    for i, text in enumerate((SAMPLE_QUERY[0], *SAMPLE_PASSAGES[:3])):
        word = SAMPLE_QUERY[1] if i == 0 else text.split()[1]
        start = text.index(word)
        queries.append(Query(f"export-{i}", "", text, start, start + len(word), word, ""))
    query_inputs = encoder.model_inputs(encoder.query_batch(queries, max_query_len), trace)
    return trace, [passages, query_inputs]
