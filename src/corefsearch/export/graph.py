"""The graph steps of an ONNX export after tracing (:mod:`corefsearch.export.onnx`): ONNX Runtime's
transformer fusions (``export-onnx --fuse``) and the dynamic int8 quantisation (``--quantize-ops``).

**Fusions** (``onnxruntime.transformers.optimizer.optimize_model``, model type ``bert``): each
attention block (Q, K and V projections, Q·Kᵀ, the mask, softmax, ·V) becomes one ``Attention``
node, the GELU and its bias one ``BiasGelu``, the residual add and LayerNorm one
``SkipLayerNormalization``. They match the graph of eager attention only, so a fused export is
traced with ``attn_implementation="eager"`` (the numbers are those of the default attention). Only
the offline Python fusions run (``opt_level`` 0): the file stays independent of the CPU it was
made on, and ONNX Runtime applies its own graph optimisations when it loads it. The embedding
fusion (``EmbedLayerNormalization``) is left out, as Hugging Face Optimum leaves it out by
default (it does not go well with quantisation).

**Quantisation** (``onnxruntime.quantization.quantize_dynamic``: int8 weights per output channel,
activations quantised to uint8 on the fly, the full 8-bit range):

- ``linear`` (the default): the matrix products with a weight matrix (ONNX Runtime's own default
  for dynamic quantisation, ``MatMulConstBOnly``: 36 of the 48 ``MatMul`` of a 6-layer BERT), a
  fused ``Attention`` (its Q/K/V projections), and the embedding tables (``Gather``); the attention
  products Q·Kᵀ and ·V stay fp32;
- ``all``: every ``MatMul``, the attention products too (both of their inputs quantised on the
  fly), and a fused ``Attention``; the embedding tables stay fp32. This is what
  sentence-transformers' ``export_dynamic_quantized_onnx_model`` quantises (through Optimum's
  ``ORTQuantizer`` with ``AutoQuantizationConfig.avx512_vnni(is_static=False)``: operators
  ``MatMul`` and ``Add``, of which dynamic quantisation has only ``MatMul``; int8 weights, per
  channel, no reduced range).

What each step did is recorded in ``onnx/export.json``: the fusions found, the quantisation's
settings and the node count of every file by operator type.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError

QUANTIZE_OPS = ("linear", "all")
DEFAULT_QUANTIZE_OPS = "linear"
QUANTIZE_OPS_HELP = ("Which operators the int8 model quantises: linear (the matrix products with a weight matrix, "
                     "and the embedding tables; the attention products Q·Kᵀ and ·V stay fp32) | all (every MatMul, "
                     "the attention products too; embeddings fp32: what sentence-transformers' dynamic int8 export "
                     "quantises).")
FUSE_HELP = ("Fuse attention, GELU and LayerNorm (ONNX Runtime's transformer optimizer) before quantising; the "
             "fused model is checked against torch like any export. Default: fuse BERT-style encoders (bert, "
             "roberta, xlm-roberta, camembert, electra), export others unfused.")
# quantize_dynamic's settings of each choice (recorded); besides weight_type=QInt8 (activations: QUInt8)
_OP_TYPES = {"linear": ["MatMul", "Attention", "Gather"], "all": ["MatMul", "Attention"]}
_CONST_B_ONLY = {"linear": True, "all": False}
PER_CHANNEL = True  # on all-MiniLM-L6-v2 per tensor moved the hidden states twice as far from torch
REDUCE_RANGE = False  # 7-bit weights are for AVX512 CPUs without VNNI; Optimum's avx512_vnni uses the full range
FUSION_OPT_LEVEL = 0  # the offline Python fusions only (see the module docstring)
# Hugging Face model types whose encoder ONNX Runtime's "bert" optimizer fuses
FUSABLE = ("bert", "roberta", "xlm-roberta", "camembert", "electra")


def check_quantize_ops(ops: str) -> None:
    if ops not in QUANTIZE_OPS:
        raise InputError(f"--quantize-ops must be one of {', '.join(QUANTIZE_OPS)}, got {ops!r}")


def resolve_fuse(fuse: bool | None, config: Any, folder: Path) -> bool:
    """Whether to fuse: ``--fuse`` / ``--no-fuse`` as given, else (None) when the "bert" optimizer knows
    the encoder (fused int8 encodes fastest: bench/RESULTS.md, "Dense encoding speed"). ``--fuse`` is
    refused for an encoder the optimizer does not know."""
    kind = getattr(config, "model_type", None)
    if fuse is None:
        return kind in FUSABLE
    if fuse and kind not in FUSABLE:
        raise InputError(f"--fuse fuses BERT-style encoders ({', '.join(FUSABLE)}); the encoder of {folder} is "
                         f"{kind!r}: export it with --no-fuse")
    return fuse


def quantization_settings(ops: str) -> dict[str, Any]:
    """The settings ``ops`` quantises with, as recorded in ``export.json``."""
    check_quantize_ops(ops)
    return {"method": "quantize_dynamic", "ops": ops, "weight_type": "QInt8", "activation_type": "QUInt8",
            "per_channel": PER_CHANNEL, "reduce_range": REDUCE_RANGE, "op_types_to_quantize": _OP_TYPES[ops],
            "matmul_const_b_only": _CONST_B_ONLY[ops]}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Without the root-logger notes of ONNX Runtime's tools (the quantiser's advice to pre-process:
    ``quant_pre_process`` changed neither the numbers nor the speed on all-MiniLM-L6-v2)."""
    previous = logging.root.manager.disable
    logging.disable(max(previous, logging.WARNING))
    try:
        yield
    finally:
        logging.disable(previous)


def quantize_int8(source: Path, target: Path, ops: str) -> dict[str, Any]:
    """``quantize_dynamic`` of ``source`` into ``target`` with the settings of ``ops``; the settings."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    settings = quantization_settings(ops)
    # A fused graph holds contrib operators (Attention, SkipLayerNormalization) that ONNX shape inference
    # cannot type: their outputs are fp32, as every activation of these encoders.
    extra = {"MatMulConstBOnly": settings["matmul_const_b_only"], "DefaultTensorType": onnx.TensorProto.FLOAT}
    with _quiet():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=PER_CHANNEL,
                         reduce_range=REDUCE_RANGE, op_types_to_quantize=settings["op_types_to_quantize"],
                         extra_options=extra)
    return settings


def fuse_transformer(source: Path, target: Path, config: Any) -> dict[str, Any]:
    """ONNX Runtime's transformer fusions of ``source`` (an encoder traced with eager attention) into
    ``target``; what was fused, as recorded in ``export.json``."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    options.enable_embed_layer_norm = False
    with _quiet():
        model = optimize_model(str(source), model_type="bert", num_heads=int(config.num_attention_heads),
                               hidden_size=int(config.hidden_size), optimization_options=options,
                               opt_level=FUSION_OPT_LEVEL, use_gpu=False)
        fused = {name: int(count) for name, count in model.get_fused_operator_statistics().items() if count}
        model.save_model_to_file(str(target))
    return {"optimizer": "onnxruntime.transformers.optimizer", "model_type": "bert", "opt_level": FUSION_OPT_LEVEL,
            "num_heads": int(config.num_attention_heads), "hidden_size": int(config.hidden_size),
            "embed_layer_norm": False, "attention": "eager", "fused": fused}


def node_counts(path: Path) -> dict[str, int]:
    """The nodes of the ONNX graph at ``path`` by operator type (most frequent first)."""
    import onnx

    counts = collections.Counter(node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node)
    return dict(counts.most_common())
