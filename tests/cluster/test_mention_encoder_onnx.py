"""The mention encoder on ONNX Runtime: ``export-onnx`` of a clusterer folder (fp32 and int8, checked against
torch), ``MentionEncoder.load(..., backend="onnx"|"onnx-int8")`` and ``cluster --method encoder --backend``.

A tiny random BERT (helpers.save_tiny_bert) with the clusterer dataset's words, made into an untrained mention
encoder (helpers.save_mention_encoder) and exported here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import cluster_words, flat, partition, read_clusters, save_mention_encoder, save_tiny_bert
from helpers import write_cluster_dataset as write_dataset
from typer.testing import CliRunner

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.cli import app
from corefsearch.cluster.encoder import split_records
from corefsearch.cluster.model import MentionEncoder

runner = CliRunner(env={"COLUMNS": "250"})
pytestmark = pytest.mark.usefixtures("one_thread_each_test")
FP32_ATOL = 1e-4  # the retriever's and the reader's bound on vectors and scores against torch
INT8_COSINE = 0.999  # the least cosine between an int8 and an fp32 vector (tests/export/test_onnx_export_options.py)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data") / "ds")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained mention encoder (τ 0.5), exported with the defaults (fused, int8)."""
    root = tmp_path_factory.mktemp("onnx-clusterer")
    base = save_tiny_bert(root / "base", cluster_words(), seed=0, max_positions=160)
    folder = save_mention_encoder(base, root / "encoder")
    result = runner.invoke(app, ["export-onnx", str(folder)])
    assert result.exit_code == 0, result.output
    assert str(folder / "onnx" / "model.onnx") in flat(result.output)
    return folder


def test_the_export_reproduces_torch_and_int8_stays_near_it(exported: Path, dataset: Path) -> None:
    record = json.loads((exported / "onnx" / "export.json").read_text())
    assert record["fusion"]["fused"]["Attention"] == 2  # a BERT is fused by default
    assert record["files"]["model.onnx"]["max_abs_diff"] < 1e-4
    assert all(entry["sha256"].startswith("sha256:") for entry in record["files"].values())
    records = split_records(dataset, "train") + split_records(dataset, "dev") + split_records(dataset, "test")
    vectors = {}
    for backend in ("torch", "onnx", "onnx-int8"):
        encoder = MentionEncoder.load(exported, "cpu", backend=backend)
        assert encoder.backend == backend
        assert (type(encoder.model).__name__ == "OnnxEncoder") == (backend != "torch")
        vectors[backend] = encoder.encode(records, batch_size=4)
    np.testing.assert_allclose(vectors["onnx"], vectors["torch"], atol=FP32_ATOL, rtol=0)
    assert (vectors["onnx-int8"] * vectors["onnx"]).sum(axis=1).min() > INT8_COSINE  # unit vectors: the cosine
    assert MentionEncoder.load(exported).backend == "torch"  # the torch weights are there: the default


def test_cluster_with_an_onnx_backend_gives_the_torch_partition(exported: Path, dataset: Path,
                                                                  tmp_path: Path) -> None:
    clusters = {}
    for backend in ("torch", "onnx"):
        out = tmp_path / f"{backend}.jsonl"
        result = runner.invoke(app, ["cluster", str(dataset), "--out", str(out), "--method", "encoder", "--model",
                                     str(exported), "--split", "dev", "--device", "cpu", "--backend", backend])
        assert result.exit_code == 0, result.output
        assert ("the encoder ran on onnx" in flat(result.output)) == (backend == "onnx")
        clusters[backend] = partition(read_clusters(out))
    assert clusters["onnx"] == clusters["torch"]


def test_backend_errors_are_one_line(exported: Path, dataset: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(exported, plain, ignore=shutil.ignore_patterns("onnx"))
    with pytest.raises(MissingArtefactError, match=f"run `corefsearch export-onnx {plain}` first"):
        MentionEncoder.load(plain, backend="onnx")
    stale = tmp_path / "stale"
    shutil.copytree(exported, stale)
    save_mention_encoder(save_tiny_bert(tmp_path / "other", cluster_words(), seed=4, max_positions=160), stale)
    with pytest.raises(InputError, match="exported from other encoder weights"):
        MentionEncoder.load(stale, backend="onnx-int8")

    def error(*args: object) -> str:
        result = runner.invoke(app, ["cluster", str(dataset), "--out", str(tmp_path / "c.jsonl"), *map(str, args)])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
        return flat(result.output)

    assert "runs the model on the CPU" in error("--method", "encoder", "--model", exported, "--backend", "onnx",
                                                "--device", "cuda")
    assert "--backend: only with --method encoder" in error("--method", "lemma", "--backend", "onnx")
    assert "run `corefsearch export-onnx" in error("--method", "encoder", "--model", plain, "--backend", "onnx-int8")
    assert not (tmp_path / "c.jsonl").exists()
