"""``--precision``: the scope, what ``auto`` means on each device, the reduced-precision forward passes of
every model kind (bf16 on the CPU runs the same code a GPU runs), and every trainer in bf16 and fp16 (fp16
with a gradient scaler). The GPU's own checks are in ``tests/gpu/``."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    a_query,
    flat,
    reader_args,
    retriever_args,
    save_mention_encoder,
    tiny_reader,
    write_cluster_dataset,
)
from typer.testing import CliRunner

from corefsearch.base import precision
from corefsearch.base.errors import InputError
from corefsearch.cli import app

runner = CliRunner()


def test_precision_is_checked_resolved_for_the_device_and_scoped() -> None:
    import torch

    with pytest.raises(InputError, match="--precision must be one of auto, fp32, bf16, fp16"):
        precision.check_precision("fp8")
    assert precision.resolve("auto", "cpu") == "fp32"
    assert precision.resolve("bf16", "cpu") == "bf16"
    assert precision.current() == "auto"
    with precision.using("bf16"):
        assert precision.current() == "bf16"
        with precision.using("fp32"):
            assert precision.current() == "fp32"
        assert precision.current() == "bf16"
        with precision.autocast("cpu"):
            assert torch.is_autocast_enabled("cpu")
            assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert precision.current() == "auto"
    assert isinstance(precision.autocast("cpu"), contextlib.nullcontext)  # auto on the CPU: fp32
    assert precision.grad_scaler("cpu", "fp16") is not None
    assert precision.grad_scaler("cpu", "bf16") is None and precision.grad_scaler("cpu", "fp32") is None
    with pytest.raises(InputError), precision.using("half"):
        pass


def close_but_not_equal(full: np.ndarray, reduced: np.ndarray) -> None:
    assert reduced.dtype == np.float32 and reduced.shape == full.shape
    cosine = np.sum(full * reduced, axis=1) / (np.linalg.norm(full, axis=1) * np.linalg.norm(reduced, axis=1))
    assert cosine.min() > 0.99
    assert not np.array_equal(full, reduced)  # the reduced-precision path ran


def test_every_model_kind_encodes_in_bf16_close_to_fp32(tiny_base: Path, tmp_path: Path, one_thread: None) -> None:
    from corefsearch.cluster.encoder import split_records
    from corefsearch.cluster.model import MentionEncoder
    from corefsearch.dense.encoder import EncoderConfig, TextEncoder

    encoder = TextEncoder.load(str(tiny_base), EncoderConfig(pooling="mean"))
    texts = ["the storm hit the coast", "a quake struck the city at dawn", "rescuers searched the rubble"]
    full = encoder.encode_passages([""] * 3, texts, max_length=32)
    with precision.using("bf16"):
        close_but_not_equal(full, encoder.encode_passages([""] * 3, texts, max_length=32))
    assert np.array_equal(full, encoder.encode_passages([""] * 3, texts, max_length=32))  # the scope ended

    dataset = write_cluster_dataset(tmp_path / "clusters")
    mentions = MentionEncoder.load(save_mention_encoder(tiny_base, tmp_path / "encoder"))
    records = split_records(dataset, "train")
    full = mentions.encode(records)
    with precision.using("bf16"):
        close_but_not_equal(full, mentions.encode(records))

    from corefsearch.reader.read import Reader

    reader = Reader(tiny_reader(tiny_base, "integrated"))
    passages = [(f"p{i}", text) for i, text in enumerate(texts)]
    full_hits = {h.passage_id: h.score for h in reader.read(a_query(), passages)}
    with precision.using("bf16"):
        reduced = {h.passage_id: h.score for h in reader.read(a_query(), passages)}
    assert reduced.keys() == full_hits.keys()
    scale = max(abs(v) for v in full_hits.values()) + 1e-6
    assert all(abs(reduced[p] - full_hits[p]) <= 0.05 * scale for p in full_hits)


@pytest.mark.parametrize("reduced", ["bf16", "fp16"])
def test_every_trainer_trains_in_reduced_precision_and_records_it(reduced: str, tiny_base: Path, tiny_dataset: Path,
                                                                  tiny_run: Path, tmp_path: Path,
                                                                  one_thread: None) -> None:
    from corefsearch.cluster.train import ClustererTrainingArguments, train_clusterer
    from corefsearch.dense.train import train_retriever
    from corefsearch.reader.train import train_reader

    quiet = {"log": lambda _: None}
    summaries = {
        "retriever": train_retriever(tiny_dataset, tmp_path / "retriever",
                                     retriever_args(tiny_base, epochs=1, max_steps=2, precision=reduced), **quiet),
        "reader": train_reader(tiny_dataset, tiny_run, tmp_path / "reader",
                               reader_args(tiny_base, max_steps=2, dev_max_queries=2, precision=reduced), **quiet),
        "clusterer": train_clusterer(
            write_cluster_dataset(tmp_path / "clusters"), tmp_path / "clusterer",
            ClustererTrainingArguments(base_model=str(tiny_base), objective="pairs", epochs=1, batch_size=4,
                                       max_steps=2, mlp_hidden=16, mlp_out=8, hard_negatives_k=3, device="cpu",
                                       log_every=0, precision=reduced), **quiet)}
    for kind, summary in summaries.items():
        record = json.loads((summary.out / "training_args.json").read_text())
        assert record["precision"] == reduced, kind
        assert "precision" not in record["options"], kind  # how a run goes, not what it trains: resumable
        assert summary.steps_run == 2, kind
        losses = [e["loss"] for e in json.loads((summary.out / "dev_curve.json").read_text()) if e["loss"] is not None]
        assert losses and all(math.isfinite(loss) for loss in losses), kind


def test_cli_precision_is_checked_where_it_enters(tiny_dataset: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "retriever", str(tiny_dataset), "--out", str(tmp_path / "r"),
                                 "--precision", "fp8", "--device", "cpu"])
    assert result.exit_code == 1 and "--precision must be one of auto, fp32, bf16, fp16" in flat(result.output)
    assert "Traceback" not in result.output and not (tmp_path / "r").exists()
    result = runner.invoke(app, ["index", str(tiny_dataset), "--out", str(tmp_path / "i"), "--dense",
                                 "--backend", "onnx", "--precision", "bf16"])
    assert result.exit_code == 1
    assert "--precision bf16 runs the torch encoder in bf16; --backend onnx" in flat(result.output)
    assert not (tmp_path / "i").exists()
    result = runner.invoke(app, ["cluster", str(tiny_dataset), "--out", str(tmp_path / "c.jsonl"), "--method",
                                 "lemma", "--precision", "double"])
    assert result.exit_code == 1 and "--precision must be one of" in flat(result.output)
