"""Mention detection: quality against gold mentions, speed against dense encoding, memory at scale.

- **quality**: for each ``--dataset NAME=DIR`` (built with every gold mention: ECB+ ``--validated-only
  --chains all --mention-type all``, MEANTIME ``--format cdcr-json --mention-type all``) and each
  ``--model NAME=DETECTOR`` (``heuristic`` or a folder from ``corefsearch train detector``), the dataset's
  passages are detected (``corefsearch detect`` on a copy) and scored with ``evaluate --mentions`` on
  ``--split`` (test; dev to choose): P/R/F1 per type, strict and head match, over the passages annotated in full.
- **speed**: passages per second on ``--threads`` CPU threads for the same ``--passages`` passages (the
  first dataset's, repeated to the count): the trained detector (torch, onnx, onnx-int8) against the
  dense passage encoder on the same base (the bundled all-MiniLM-L6-v2, batches of 64, 180 tokens) and
  sentence-transformers' ``encode``; the rows take turns, ``--repeats`` rounds, the median reported.
- **memory**: peak resident memory of a whole ``corefsearch detect`` process (``/usr/bin/time``) over
  synthetic passages (``--memory-sizes``, e.g. 10000,100000,1000000), with a tiny random detector (the
  streaming machinery is what is measured, not the model).

Writes ``## Predicted mentions: detection (bench/detect.py)`` into ``--results`` (bench/RESULTS.md).

Run: ``python bench/detect.py --dataset ecbplus=DIR --model heuristic --model trained=DIR [--split test]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import machine, markdown_table, write_section  # noqa: E402

SECTION = "## Predicted mentions: detection (bench/detect.py)"
CLI = [sys.executable, "-m", "corefsearch.cli"]
BATCH = 64


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def named(text: str) -> tuple[str, str]:
    name, _, value = text.partition("=")
    return (name, value) if value else (text, text)


def quality(datasets: list[tuple[str, str]], models: list[tuple[str, str]], split: str,
            work: Path) -> list[list[str]]:
    from corefsearch.detect.run import detect_dataset
    from corefsearch.evaluate.mentions import evaluate_detection

    rows = []
    for data_name, data_dir in datasets:
        for model_name, model in models:
            copy = work / f"{data_name}-{model_name}"
            if not (copy / "predicted_mentions.json").exists():
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(data_dir, copy)
                summary = detect_dataset(copy, model, device="cpu")
                log(f"{data_name} / {model_name}: {summary.passages:,} passages in {summary.seconds:.0f} s")
            evaluation = evaluate_detection(copy, copy, split)
            for kind in evaluation.scores["strict"]:
                strict, head = evaluation.scores["strict"][kind], evaluation.scores["head"][kind]
                rows.append([data_name, model_name, kind,
                             *(f"{100 * v:.2f}" for v in (strict.precision, strict.recall, strict.f1)),
                             *(f"{100 * v:.2f}" for v in (head.precision, head.recall, head.f1)), f"{strict.gold:,}"])
    return rows


def speed(texts: list[str], detector: str, threads: int, repeats: int) -> list[list[str]]:
    import torch
    from sentence_transformers import SentenceTransformer

    from corefsearch.base.models import default_model_path
    from corefsearch.dense.model import BiEncoder
    from corefsearch.detect.model import MentionDetector
    from corefsearch.export.onnx import export_onnx

    torch.set_num_threads(threads)
    folder = Path(detector)
    if not (folder / "onnx" / "model_qint8.onnx").exists():
        export_onnx(folder)
    rows: dict[str, Any] = {}
    for backend in ("torch", "onnx", "onnx-int8"):
        model = MentionDetector.load(folder, backend=backend)
        rows[f"detector ({backend})"] = (lambda m: lambda: m.detect(texts, batch_size=BATCH))(model)
    dense = BiEncoder.load(None, "cpu")  # the zero-shot retriever of the bundled all-MiniLM-L6-v2
    rows["dense passage encoder (torch)"] = lambda: dense.passage_encoder.encode_passages(
        [""] * len(texts), texts, max_length=180, batch_size=BATCH)
    reference = SentenceTransformer(default_model_path(), device="cpu")
    reference.max_seq_length = 180
    rows["sentence-transformers encode"] = lambda: reference.encode(texts, batch_size=BATCH, show_progress_bar=False)
    names = list(rows)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            began = time.perf_counter()
            rows[name]()
            seconds[name].append(time.perf_counter() - began)
        log(f"round {round_ + 1}: " + ", ".join(f"{n} {len(texts) / s[-1]:.0f}/s" for n, s in seconds.items()))
    dense_rate = len(texts) / statistics.median(seconds["dense passage encoder (torch)"])
    table = []
    for name in names:
        rate = len(texts) / statistics.median(seconds[name])
        table.append([name, f"{rate:.1f}", f"{rate / dense_rate:.2f}"])
    return table


def synthetic_dataset(root: Path, size: int) -> Path:
    from corefsearch.base.artefacts import DATASET, manifest_record, write_manifest

    folder = root / f"synthetic-{size}"
    if (folder / "manifest.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    words = ["the", "fire", "broke", "out", "at", "the", "plant", "on", "monday", "and", "crews", "fought", "the",
             "blaze", "for", "hours"]
    with (folder / "passages.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(size):
            text = " ".join(words[(i + j) % len(words)] for j in range(12 + i % 20))
            handle.write(json.dumps({"id": f"d{i}-0", "doc_id": f"d{i}", "title": "", "text": text,
                                     "mentions": []}) + "\n")
    write_manifest(folder / "manifest.json", manifest_record(DATASET, {"options": {}, "counts": {}}))
    return folder


def memory(root: Path, sizes: list[int]) -> list[list[str]]:
    import string

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers import save_tiny_bert

    from corefsearch.detect.model import DetectorConfig, MentionDetector

    tiny = root / "tiny-detector"
    if not (tiny / "corefsearch_detector.json").exists():
        base = save_tiny_bert(root / "tiny-base", [*string.ascii_lowercase, "the", "fire", "broke", "out"])
        MentionDetector.from_base(str(base), DetectorConfig(max_length=64, stride=8)).save(tiny)
    rows = []
    for size in sizes:
        data = synthetic_dataset(root, size)
        with tempfile.TemporaryDirectory() as folder:
            stats = Path(folder) / "time.txt"
            command = ["/usr/bin/time", "-o", str(stats), "-f", "%e %M", *CLI, "detect", str(data), "--model",
                       str(tiny), "--batch-size", "256", "--overwrite"]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            seconds, peak = stats.read_text().split()[-2:]
        rows.append([f"{size:,}", f"{float(seconds):.0f}", f"{int(peak) / 1024:.0f}"])
        log(f"memory: {size:,} passages, {seconds} s, {int(peak) / 1024:.0f} MB")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", default=[], help="NAME=DATASET_DIR (repeatable)")
    parser.add_argument("--model", action="append", default=[], help="NAME=DETECTOR or heuristic (repeatable)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--out-dir", type=Path, default=Path(tempfile.gettempdir()) / "detect-bench")
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--speed-model", help="the detector folder timed (default: the first trained --model)")
    parser.add_argument("--memory-sizes", default="", help="comma-separated passage counts (empty: no memory rows)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    datasets = [named(text) for text in args.dataset]
    models = [named(text) for text in args.model]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    lines = [SECTION, "", f"- Date: {dt.datetime.now():%Y-%m-%d %H:%M} (local time)",
             *(f"- {k}: {v}" for k, v in machine().items()),
             f"- Command: `python bench/detect.py {' '.join(argv if argv is not None else sys.argv[1:])}`"]
    body: list[str] = []
    if datasets and models and not args.skip_quality:
        rows = quality(datasets, models, args.split, args.out_dir)
        body += ["", f"Detection, {args.split} split, passages annotated in full (×100):", "",
                 markdown_table(["Data", "Detector", "Type", "strict P", "strict R", "strict F1", "head P", "head R",
                                 "head F1", "gold"], rows, ["l", "l", "l", *"r" * 7])]
    trained = args.speed_model or next((m for _, m in models if m != "heuristic"), None)
    if trained and datasets and args.passages:
        from corefsearch.datasets.dataset import Dataset

        texts = [p.text for p in Dataset(datasets[0][1]).passages()]
        texts = (texts * (args.passages // max(len(texts), 1) + 1))[:args.passages]
        rows = speed(texts, trained, args.threads, args.repeats)
        body += ["", f"Speed: {len(texts):,} passages of {datasets[0][0]}, {args.threads} threads, batches of {BATCH}, "
                     f"median of {args.repeats} rounds taken in turns:", "",
                 markdown_table(["Row", "passages/s", "× dense encoding"], rows, ["l", "r", "r"])]
    sizes = [int(s) for s in args.memory_sizes.split(",") if s.strip()]
    if sizes:
        rows = memory(args.out_dir, sizes)
        body += ["", "Memory: a whole `corefsearch detect` process over synthetic passages (a tiny random detector; "
                     "shards of 4,096 passages):", "",
                 markdown_table(["passages", "s", "peak MB"], rows, ["r", "r", "r"])]
    lines.append(f"- Total run time: {(time.perf_counter() - started) / 60:.1f} min")
    section = "\n".join(lines + body) + "\n"
    print(section)
    if args.results is not None:
        write_section(args.results, section, SECTION)


if __name__ == "__main__":
    main()
