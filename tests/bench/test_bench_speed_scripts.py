"""bench/encode_speed.py and bench/reader_speed.py run end to end at a tiny size (so that they do not
rot between full measurements): a tiny random BERT, a handful of passages or queries, two exports,
and sentence-transformers' rows in a worker process of this Python (its torch rows; its ONNX rows
need optimum, which this environment need not have: they are then skipped, with why)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PASSAGES, tiny_reader
from typer.testing import CliRunner

from corefsearch.cli import app

ROOT = Path(__file__).resolve().parents[2]


def bench(script: str, *args: object) -> str:
    command = [sys.executable, str(ROOT / "bench" / script), *map(str, args), "--peer-python", sys.executable,
               "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_encode_speed_runs_at_a_tiny_size(tiny_base: Path, tmp_path: Path) -> None:
    passages = tmp_path / "passages.jsonl"
    passages.write_text("".join(json.dumps({"title": "Report" if i % 2 else "", "text": text}) + "\n"
                                for i, (_, text) in enumerate(PASSAGES)))
    results = tmp_path / "RESULTS.md"
    out = bench("encode_speed.py", "--encoder", tiny_base, "--passages-file", passages, "--queries", 0,
                "--repeats", 2, "--exports", "linear,fused-all", "--out-dir", tmp_path / "work", "--results", results)
    section = results.read_text().split("## Dense encoding speed (bench/encode_speed.py)", 1)[1]
    assert section.strip() in out  # printed and written
    for row in ("corefsearch torch", "corefsearch onnx ", "corefsearch onnx fused", "corefsearch onnx-int8 linear",
                "corefsearch onnx-int8 fused-all", "sentence-transformers torch"):
        assert f"| {row}" in section, row
    assert "load average" in section and "sentence-transformers " in section


@pytest.mark.java
def test_reader_speed_runs_at_a_tiny_size(tiny_base: Path, tiny_dataset: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    result = CliRunner().invoke(app, ["index", str(tiny_dataset), "--out", str(index), "--threads", "1"])
    assert result.exit_code == 0, result.output
    reader = tmp_path / "reader"
    tiny_reader(tiny_base, "integrated").save(reader)
    results = tmp_path / "RESULTS.md"
    bench("reader_speed.py", "--reader", reader, "--dataset", tiny_dataset, "--index", index, "--split", "dev",
          "--queries", 2, "--rerank-k", 4, "--exports", "all,fused-all", "--peer-model", tiny_base,
          "--out-dir", tmp_path / "work", "--results", results)
    section = results.read_text().split("## Reader inference speed (bench/reader_speed.py)", 1)[1]
    for row in ("torch, batch 32", "onnx ", "onnx fused", "onnx-int8 all", "onnx-int8 fused-all", "CrossEncoder torch"):
        assert f"| {row}" in section, row
    assert "MRR@10" in section and "load average" in section


def test_detect_speed_and_backend_quality_run_at_a_tiny_size(tiny_base: Path, tiny_dataset: Path,
                                                              tmp_path: Path) -> None:
    from corefsearch.detect.model import DetectorConfig, MentionDetector

    detector = tmp_path / "detector"
    MentionDetector.from_base(str(tiny_base), DetectorConfig(max_length=64, stride=8)).save(detector)
    results = tmp_path / "RESULTS.md"
    out = bench("detect.py", "--dataset", f"tiny={tiny_dataset}", "--model", f"tiny={detector}", "--split", "auto",
                "--quality-backends", "torch,onnx-int8", "--passages", 6, "--repeats", 1,
                "--out-dir", tmp_path / "work", "--results", results)
    section = results.read_text().split("## Predicted mentions: detection (bench/detect.py)", 1)[1]
    assert section.strip() in out
    for row in ("detector (torch)", "detector (onnx, --no-fuse)", "detector (onnx-int8, fused)",
                "dense passage encoder (torch)", "sentence-transformers torch"):
        assert f"| {row}" in section, row
    assert "| tiny | tiny (onnx-int8) |" in section  # the fused int8 export's mentions, scored
    assert not (detector / "onnx").exists()  # the bench exports copies, never the folder it is given


def test_layer_drop_keeps_the_chosen_layers_unchanged(tiny_base: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModel

    out = tmp_path / "smaller"
    command = [sys.executable, str(ROOT / "bench" / "layer_drop.py"), "--model", str(tiny_base), "--layers", "1",
               "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    full, small = AutoModel.from_pretrained(tiny_base), AutoModel.from_pretrained(out)
    assert small.config.num_hidden_layers == 1 and len(small.encoder.layer) == 1
    kept, source = small.encoder.layer[0].state_dict(), full.encoder.layer[1].state_dict()
    assert kept.keys() == source.keys() and all(torch.equal(kept[k], source[k]) for k in kept)
    assert (out / "tokenizer_config.json").is_file()
    bad = subprocess.run([*command[:4], "--layers", "1,0", "--out", str(tmp_path / "bad")], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert bad.returncode == 1 and bad.stderr.startswith("error: --layers must be increasing indices")
