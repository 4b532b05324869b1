"""An ONNX Runtime backend for the transformer encoder of a model folder.

The conventions are sentence-transformers' (``backend="onnx"``): the export lives in the model
folder as ``onnx/model.onnx``, its dynamic int8 quantisation as ``onnx/model_qint8.onnx``
(``corefsearch export-onnx MODEL_DIR`` writes both, see :mod:`corefsearch.export.onnx`).
``onnx/export.json`` records the checksum of the encoder weights it was exported from, so that
an export left over from earlier weights (a model retrained into the same folder) is refused
instead of silently scoring with the old model.

:class:`OnnxEncoder` stands in for the Hugging Face ``AutoModel``: called with the same keyword
tensors (``input_ids``, ``attention_mask`` and, when the model has segments,
``token_type_ids``), it returns an object with ``.last_hidden_state`` as a torch tensor. Any
head on top of the encoder stays in torch. Nothing in it is specific to the reader, so the dense
retriever's and the mention encoder's encoders can use it as well.

An inference-only folder (:func:`inference_only`: what ``corefsearch.export.ship`` writes) ships the int8
export and no torch encoder weights; :func:`resolve_backend` runs it with ``onnx-int8`` when no backend is
asked for, and refuses any other in one line. Its export is checked against the sha256 ``export.json``
records of the file, as there are no weights to check it against.

sentence-transformers' own ONNX backend goes through Hugging Face Optimum, which is not a
dependency here (and whose exporter needs the network for some models); the export is
``torch.onnx.export`` and the session plain ``onnxruntime``, a few lines each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corefsearch.base.artefacts import ONNX_EXPORT, find_manifest
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.models import RETRIEVER_QUERY_ENCODER, load_offline, model_kind
from corefsearch.base.shipped import resolve_reference
from corefsearch.io.write import sha256_file

BACKENDS = ("torch", "onnx", "onnx-int8")
ONNX_DIR = "onnx"
ONNX_MODEL = "model.onnx"
ONNX_QINT8 = "model_qint8.onnx"
EXPORT_RECORD = "export.json"
OUTPUT_NAME = "last_hidden_state"
WEIGHTS_FILE = "model.safetensors"  # the encoder weights save_pretrained writes (safe_serialization=True)
# Every form of torch encoder weights a Hugging Face folder may hold (one file or shards, safetensors or pickle).
TORCH_WEIGHTS = (WEIGHTS_FILE, "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
SHIPPED_BACKEND = "onnx-int8"  # the one export an inference-only folder ships


def check_backend(backend: str | None) -> None:
    """A backend name, or None (not given: see :func:`resolve_backend`)."""
    if backend is not None and backend not in BACKENDS:
        raise InputError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def check_backend_device(backend: str | None, device: str) -> None:
    """The ONNX backends run on the CPU (the ``onnxruntime`` package, not ``onnxruntime-gpu``); None (not given)
    is checked once the model folder resolves it (:func:`resolve_backend`)."""
    check_backend(backend)
    if backend not in (None, "torch") and device not in ("auto", "cpu"):
        raise InputError(f"--backend {backend} runs the model on the CPU (ONNX Runtime), not on --device {device}: "
                         "use --device cpu, or --backend torch on a GPU")


def onnx_file(folder: Path, backend: str) -> Path:
    """The ONNX file of ``backend`` (``onnx`` or ``onnx-int8``) in a model folder."""
    return Path(folder) / ONNX_DIR / (ONNX_QINT8 if backend == "onnx-int8" else ONNX_MODEL)


def weights_checksum(folder: Path) -> str | None:
    """The sha256 of the folder's encoder weights (None when they are not one safetensors file)."""
    path = Path(folder) / WEIGHTS_FILE
    return "sha256:" + sha256_file(path) if path.is_file() else None


def has_torch_weights(folder: Path) -> bool:
    """Whether an encoder folder holds torch weights (any of :data:`TORCH_WEIGHTS`)."""
    return any((Path(folder) / name).is_file() for name in TORCH_WEIGHTS)


def inference_only(reference: str | Path | None) -> bool:
    """Whether ``reference`` is an inference-only model folder: one whose encoder (a retriever's: its query
    encoder) ships its int8 ONNX export and no torch weights."""
    if reference in (None, "", "default"):
        return False
    folder = Path(str(resolve_reference(reference))).expanduser()  # a shipped model's name: its folder
    if model_kind(folder) == "retriever":
        folder = folder / RETRIEVER_QUERY_ENCODER
    return onnx_file(folder, SHIPPED_BACKEND).is_file() and not has_torch_weights(folder)


def resolve_backend(reference: str | Path | None, backend: str | None, device: str = "auto") -> str:
    """The backend the model ``reference`` runs with: ``backend`` as given, or (None: not given) torch, and
    onnx-int8 for an inference-only folder (:func:`inference_only`), which runs nothing else, and on the CPU:
    another backend or ``device`` there is one line."""
    check_backend(backend)
    if not inference_only(reference):
        return backend or "torch"
    if backend not in (None, SHIPPED_BACKEND):
        raise InputError(f"--backend {backend}: {reference} ships only its int8 ONNX export (no torch weights, no "
                         f"fp32 export); leave --backend out or use --backend {SHIPPED_BACKEND}")
    if device not in ("auto", "cpu"):
        raise InputError(f"--device {device}: {reference} ships only its int8 ONNX export, which runs on the CPU "
                         "(ONNX Runtime); use --device cpu")
    return SHIPPED_BACKEND


def load_encoder_model(folder: str | Path, backend: str, threads: int | None = None, command: str | None = None) -> Any:
    """The encoder of a model folder for ``backend``: the Hugging Face ``AutoModel`` (torch), or an
    :class:`OnnxEncoder` over the folder's checked export (``command``: see :func:`check_onnx_export`)."""
    from transformers import AutoConfig, AutoModel

    if backend == "torch":
        return load_offline(AutoModel, str(folder))
    path = check_onnx_export(folder, backend, command)
    return OnnxEncoder(path, load_offline(AutoConfig, str(folder)), threads)


def check_onnx_export(folder: Path, backend: str, command: str | None = None) -> Path:
    """The ONNX file ``backend`` reads from ``folder``, checked: it exists and was exported from the
    encoder weights the folder holds now. One line saying what to run otherwise (``command``, default
    ``corefsearch export-onnx FOLDER``; a retriever's encoder folders name the retriever's)."""
    folder = Path(folder)
    path = onnx_file(folder, backend)
    remedy = f"run `{command or f'corefsearch export-onnx {folder}'}`"
    if not path.is_file():
        quantised = " (the int8 file comes with the default --quantize)" if backend == "onnx-int8" else ""
        raise MissingArtefactError(f"--backend {backend} reads {path}, which does not exist: {remedy} "
                                   f"first{quantised}")
    record_path = folder / ONNX_DIR / EXPORT_RECORD
    record = find_manifest(record_path, ONNX_EXPORT) or {}
    try:
        exported_from, files = record["weights_sha256"], set(record["files"])
    except (KeyError, TypeError):
        raise MissingArtefactError(f"{record_path} is missing or unreadable, so {path} cannot be matched to the "
                                   f"weights of {folder}: {remedy} again") from None
    if path.name not in files:
        raise MissingArtefactError(f"{record_path} does not list {path.name}: {path} is not from the last export; "
                                   f"{remedy} again")
    if not has_torch_weights(folder):  # inference-only: the export is checked against its own recorded checksum
        entry = record["files"][path.name]
        recorded = entry.get("sha256") if isinstance(entry, dict) else None
        if recorded is not None and recorded != "sha256:" + sha256_file(path):
            raise InputError(f"{path} is not the file {record_path} records (its sha256 differs): the folder is "
                             "damaged; copy it again")
        return path
    if exported_from != weights_checksum(folder):
        raise InputError(f"{path} was exported from other encoder weights than {folder / WEIGHTS_FILE} holds now "
                         f"(the model was retrained or replaced): {remedy} again")
    return path


class OnnxEncoder:
    """An ``onnxruntime.InferenceSession`` over an exported encoder, callable like the Hugging Face
    model: ``encoder(input_ids=..., attention_mask=..., token_type_ids=...).last_hidden_state``.

    ``config`` is the Hugging Face config of the encoder (callers read e.g. ``type_vocab_size``
    from it). ``threads`` sets ONNX Runtime's intra-op threads (default: torch's
    ``get_num_threads()``, so that both backends use the same cores). It runs on the CPU
    (``CPUExecutionProvider``: the ``onnxruntime`` package, not ``onnxruntime-gpu``).
    """

    training = False  # as an nn.Module in evaluation mode: it only runs inference

    def __init__(self, path: Path, config: Any, threads: int | None = None) -> None:
        import onnxruntime as ort
        import torch

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(threads) if threads else torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: not its notes on the graph
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own Fail/InvalidGraph/... on a damaged file
            why = " ".join(str(err).split())[:240]
            raise InputError(f"{path}: ONNX Runtime cannot load it ({type(err).__name__}: {why}); export it again "
                             f"with `corefsearch export-onnx {Path(path).parent.parent}`") from None
        self.path = Path(path)
        self.config = config
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.threads = options.intra_op_num_threads
        self.device = "cpu"

    def __call__(self, **inputs: Any) -> Any:
        import numpy as np
        import torch
        from transformers.modeling_outputs import BaseModelOutput

        feed = {}
        for name in self.input_names:
            if name not in inputs:
                raise InputError(f"{self.path} takes {', '.join(self.input_names)}; the caller gave no {name}")
            value = inputs[name]
            array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            feed[name] = array.astype(np.int64, copy=False)
        (hidden,) = self.session.run([OUTPUT_NAME], feed)
        return BaseModelOutput(last_hidden_state=torch.from_numpy(hidden))

    # The few nn.Module methods the model classes call on their encoder.
    def to(self, device: Any) -> OnnxEncoder:
        if str(device) != "cpu":
            raise InputError(f"the ONNX backend runs on the CPU (ONNX Runtime's CPU provider), not on {device}: "
                             "use --device cpu, or --backend torch on a GPU")
        return self

    def train(self, mode: bool = True) -> OnnxEncoder:
        if mode:
            raise InputError("an ONNX encoder is for inference only; train the torch model")
        return self

    def eval(self) -> OnnxEncoder:
        return self
