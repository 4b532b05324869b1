"""``export-onnx --quantize-ops linear|all`` and ``--fuse``: what the int8 model quantises, ONNX
Runtime's transformer fusions, and what ``onnx/export.json`` records of both.

Tiny random BERTs (helpers.save_tiny_bert: 2 layers, 32 wide, 2 heads), exported here: a reader
folder and the zero-shot retriever of the tiny base (``export-onnx BASE --out DIR``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import PASSAGES, a_query, flat, tiny_reader
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.reader.read import Reader

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")
LAYERS = 2  # helpers.save_tiny_bert
MATMULS = 8 * LAYERS  # Q, K, V, Q·Kᵀ, ·V, attention output, two feed-forward products per layer
# How far int8 may move the tiny encoder's outputs from fp32 (measured: reader scores by at most 0.003,
# pooled vectors to a cosine of 0.99998 or more, with either --quantize-ops, fused or not):
INT8_SCORE = 0.02  # the largest difference of a reader score
INT8_COSINE = 0.999  # the least cosine between an int8 and an fp32 pooled vector
MANY = [(f"{pid}-{i}", text) for i in range(3) for pid, text in PASSAGES]


def export(folder: Path, *options: str) -> dict:
    result = runner.invoke(app, ["export-onnx", str(folder), *options])
    assert result.exit_code == 0, result.output
    return json.loads((folder / "onnx" / "export.json").read_text())


@pytest.fixture(scope="module")
def reader_folder(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("reader") / "reader"
    tiny_reader(tiny_base, "integrated").save(folder)
    return folder


def int8_scores_near_fp32(folder: Path) -> None:
    fp32 = {h.passage_id: h.score for h in Reader.load(folder, backend="onnx", threads=1).read(a_query(), MANY)}
    int8 = {h.passage_id: h.score for h in Reader.load(folder, backend="onnx-int8", threads=1).read(a_query(), MANY)}
    assert int8.keys() == fp32.keys()
    assert max(abs(int8[p] - fp32[p]) for p in fp32) < INT8_SCORE


def test_linear_quantises_the_products_with_weights_and_all_every_product(reader_folder: Path) -> None:
    record = export(reader_folder, "--no-fuse")  # the default ops: linear
    fp32, int8 = (record["files"][name]["nodes"] for name in ("model.onnx", "model_qint8.onnx"))
    assert fp32["MatMul"] == MATMULS and "MatMulInteger" not in fp32
    assert int8["MatMulInteger"] == MATMULS - 2 * LAYERS and int8["MatMul"] == 2 * LAYERS  # attention's stay fp32
    assert int8.get("DequantizeLinear", 0) >= 1  # the embedding tables: int8, dequantised on lookup
    quantization = record["quantization"]
    assert quantization["ops"] == "linear" and quantization["matmul_const_b_only"] is True
    assert quantization["per_channel"] is True and quantization["reduce_range"] is False
    assert quantization["op_types_to_quantize"] == ["MatMul", "Attention", "Gather"]
    assert record["fusion"] is None
    int8_scores_near_fp32(reader_folder)

    record = export(reader_folder, "--no-fuse", "--quantize-ops", "all")
    int8 = record["files"]["model_qint8.onnx"]["nodes"]
    assert int8["MatMulInteger"] == MATMULS and "MatMul" not in int8  # Q·Kᵀ and ·V too
    assert "DequantizeLinear" not in int8  # embeddings fp32, as sentence-transformers' export leaves them
    assert record["quantization"]["ops"] == "all" and record["quantization"]["matmul_const_b_only"] is False
    assert record["quantization"]["op_types_to_quantize"] == ["MatMul", "Attention"]
    assert record["files"]["model.onnx"]["max_abs_diff"] < 1e-4  # the fp32 file is the same export
    int8_scores_near_fp32(reader_folder)
    hits = Reader.load(reader_folder, backend="onnx-int8").read(a_query(), MANY)
    texts = dict(MANY)
    assert all(h.text == texts[h.passage_id][h.start:h.end] for h in hits)


def test_fused_export_reproduces_torch_and_quantises_the_fused_attention(reader_folder: Path) -> None:
    assert export(reader_folder)["fusion"]["fused"]["Attention"] == LAYERS  # a BERT is fused by default
    record = export(reader_folder, "--fuse", "--quantize-ops", "all")
    fusion = record["fusion"]
    assert fusion["model_type"] == "bert" and fusion["attention"] == "eager" and fusion["opt_level"] == 0
    assert fusion["num_heads"] == 2 and fusion["hidden_size"] == 32
    assert fusion["fused"]["Attention"] == LAYERS and fusion["fused"]["SkipLayerNormalization"] == 2 * LAYERS
    fp32, int8 = (record["files"][name]["nodes"] for name in ("model.onnx", "model_qint8.onnx"))
    assert fp32["Attention"] == LAYERS and fp32["MatMul"] == 3 * LAYERS  # the rest is inside Attention
    assert int8["QAttention"] == LAYERS and int8["MatMulInteger"] == 3 * LAYERS and "MatMul" not in int8
    assert record["files"]["model.onnx"]["max_abs_diff"] < 1e-4
    # The fused fp32 model scores as torch does; int8 near it.
    torch_hits = Reader.load(reader_folder, backend="torch").read(a_query(), MANY)
    onnx_hits = {h.passage_id: h for h in Reader.load(reader_folder, backend="onnx", threads=1).read(a_query(), MANY)}
    assert [onnx_hits[h.passage_id].score for h in torch_hits] == pytest.approx([h.score for h in torch_hits],
                                                                                abs=1e-4)
    assert [(onnx_hits[h.passage_id].start, onnx_hits[h.passage_id].end) for h in torch_hits] == [
        (h.start, h.end) for h in torch_hits]
    int8_scores_near_fp32(reader_folder)


def test_a_fused_zero_shot_retriever_encodes_as_torch_does(tiny_base: Path, tmp_path: Path) -> None:
    from corefsearch.dense.model import BiEncoder

    out = tmp_path / "retriever"
    result = runner.invoke(app, ["export-onnx", str(tiny_base), "--out", str(out), "--fuse", "--quantize-ops", "all"])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "query_encoder" / "onnx" / "export.json").read_text())
    assert record["fusion"]["fused"]["Attention"] == LAYERS
    titles, texts = [f"Report {i}" for i in range(len(PASSAGES))], [t for _, t in PASSAGES]
    vectors = {}
    for backend in ("torch", "onnx", "onnx-int8"):
        model = BiEncoder.load(str(out), "cpu")
        model.use_backend(backend, threads=1)
        vectors[backend] = model.passage_encoder.encode_passages(titles, texts, max_length=32, batch_size=3)
        vectors[backend] /= np.linalg.norm(vectors[backend], axis=1, keepdims=True)
    assert np.abs(vectors["onnx"] - vectors["torch"]).max() < 1e-4
    assert (vectors["onnx-int8"] * vectors["onnx"]).sum(axis=1).min() > INT8_COSINE


def test_bad_export_options_are_one_line(reader_folder: Path, tmp_path: Path) -> None:
    from corefsearch.export.graph import resolve_fuse

    result = runner.invoke(app, ["export-onnx", str(reader_folder), "--quantize-ops", "everything"])
    assert result.exit_code == 1 and "--quantize-ops must be one of linear, all" in flat(result.output)
    assert "Traceback" not in result.output
    with pytest.raises(InputError, match="--fuse fuses BERT-style encoders"):
        resolve_fuse(True, SimpleNamespace(model_type="gpt2"), tmp_path)
    # By default an encoder the optimizer does not know is exported unfused; one it knows, fused.
    assert resolve_fuse(None, SimpleNamespace(model_type="gpt2"), tmp_path) is False
    assert resolve_fuse(None, SimpleNamespace(model_type="bert"), tmp_path) is True
    assert resolve_fuse(False, SimpleNamespace(model_type="bert"), tmp_path) is False
