"""Mention detection: quality against gold mentions, speed against dense encoding, memory at scale.

- **quality**: for each ``--dataset NAME=DIR`` (built with every gold mention: ECB+ ``--validated-only
  --chains all --mention-type all``, MEANTIME ``--format cdcr-json --mention-type all``) and each
  ``--model NAME=DETECTOR`` (``heuristic`` or a folder from ``corefsearch train detector``), the dataset's
  passages are detected (``corefsearch detect`` on a copy) and scored with ``evaluate --mentions`` on
  ``--split`` (test; dev to choose): P/R/F1 per type, strict and head match, over the passages annotated in full.
- **speed**: passages per second on ``--threads`` CPU threads for the same ``--passages`` passages (the
  first dataset's, repeated to the count): the trained detector (torch, and onnx / onnx-int8 of its export
  fused, the default, and unfused) against the dense passage encoder on the same base (the bundled
  all-MiniLM-L6-v2, batches of 64, 180 tokens) and sentence-transformers' ``encode`` of the same base with
  its torch, ONNX and int8 ONNX backends (bench/peer_worker.py, in ``--peer-python``'s environment); the
  rows take turns, ``--repeats`` rounds, the median reported. ``--quality-backends`` also scores the
  trained detectors' mentions with the ONNX backends.
- **memory**: peak resident memory of a whole ``corefsearch detect`` process (``/usr/bin/time``) over
  synthetic passages (``--memory-sizes``, e.g. 10000,100000,1000000), with a tiny random detector (the
  streaming machinery is what is measured, not the model).

Writes ``## Predicted mentions: detection (bench/detect.py)`` into ``--results`` (bench/RESULTS.md).

Run: ``python bench/detect.py --dataset ecbplus=DIR --model heuristic --model trained=DIR [--split test]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
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
from encode_speed import encode_as_indexed  # noqa: E402

SECTION = "## Predicted mentions: detection (bench/detect.py)"
CLI = [sys.executable, "-m", "corefsearch.cli"]
BATCH = 64
DENSE = "dense passage encoder (torch)"
PEER = "sentence-transformers"


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def named(text: str) -> tuple[str, str]:
    name, _, value = text.partition("=")
    return (name, value) if value else (text, text)


def quality(datasets: list[tuple[str, str]], models: list[tuple[str, str]], split: str,
            work: Path, backends: list[str]) -> list[list[str]]:
    from corefsearch.detect.run import detect_dataset
    from corefsearch.evaluate.mentions import evaluate_detection

    rows = []
    runs = [(name, model, "torch") for name, model in models]
    runs += [(f"{name} ({backend})", str(exported(model, work, True)), backend) for name, model in models
             if model != "heuristic" for backend in backends if backend != "torch"]
    for data_name, data_dir in datasets:
        for model_name, model, backend in runs:
            copy = work / f"{data_name}-{model_name.replace(' ', '').replace('(', '-').replace(')', '')}"
            if not (copy / "predicted_mentions.json").exists():
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(data_dir, copy)
                summary = detect_dataset(copy, model, device="cpu", backend=backend)
                log(f"{data_name} / {model_name}: {summary.passages:,} passages in {summary.seconds:.0f} s")
            evaluation = evaluate_detection(copy, copy, split)
            for kind in evaluation.scores["strict"]:
                strict, head = evaluation.scores["strict"][kind], evaluation.scores["head"][kind]
                rows.append([data_name, model_name, kind,
                             *(f"{100 * v:.2f}" for v in (strict.precision, strict.recall, strict.f1)),
                             *(f"{100 * v:.2f}" for v in (head.precision, head.recall, head.f1)), f"{strict.gold:,}"])
    return rows


def exported(detector: str, work: Path, fuse: bool) -> Path:
    """A copy of the detector in ``work`` with a current ONNX export (int8 ``linear``), fused (the default
    for a BERT) or not: bench/reader_speed.py's copies, which serve any model folder."""
    from reader_speed import ensure_export

    return ensure_export(Path(detector), "fused-linear" if fuse else "linear", work)


def speed(texts: list[str], detector: str, threads: int, repeats: int, work: Path,
          peer_python: str | None) -> tuple[list[list[str]], str]:
    """passages/s of each row, median of ``repeats`` rounds taken in turns: the detector on each backend
    (ONNX unfused and fused), the dense passage encoder (torch) and sentence-transformers' ``encode`` with
    its torch, ONNX and int8 ONNX backends (bench/peer_worker.py); and the peer's versions."""
    import torch
    from peer_worker import Peer, default_python

    from corefsearch.base.models import default_model_path
    from corefsearch.dense.model import BiEncoder
    from corefsearch.detect.model import MentionDetector

    torch.set_num_threads(threads)
    rows: dict[str, Any] = {}
    model = MentionDetector.load(Path(detector), backend="torch")
    rows["detector (torch)"] = (lambda m: lambda: m.detect(texts, batch_size=BATCH))(model)
    for fuse in (False, True):
        folder = exported(detector, work, fuse)
        for backend in ("onnx", "onnx-int8"):
            model = MentionDetector.load(folder, backend=backend)
            model.detect(texts[:BATCH], batch_size=BATCH)  # warm-up, untimed
            name = f"detector ({backend}{', fused' if fuse else ', --no-fuse'})"
            rows[name] = (lambda m: lambda: m.detect(texts, batch_size=BATCH))(model)
    dense = BiEncoder.load(None, "cpu")  # the zero-shot retriever of the bundled all-MiniLM-L6-v2
    rows[DENSE] = lambda: encode_as_indexed(dense, [""] * len(texts), texts, BATCH)  # as index --dense encodes
    seconds: dict[str, list[float]] = {name: [] for name in rows}
    timers = {name: functools.partial(_timed, function) for name, function in rows.items()}
    python = peer_python or default_python(Path(__file__).resolve().parents[1])
    peer = Peer(python, "encode", default_model_path(), work, threads, 180, BATCH) if peer_python != "none" else None
    try:
        if peer is not None:
            peer.hold(texts[:BATCH])
            for row in peer.rows:
                peer.run(row)  # warm-up, untimed
            peer.hold(texts)
            for row in peer.rows:
                timers[f"{PEER} {row}"] = (lambda r: lambda: peer.run(r))(row)
                seconds[f"{PEER} {row}"] = []
        names = list(timers)
        for round_ in range(repeats):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                seconds[name].append(timers[name]())
            log(f"round {round_ + 1} (load {', '.join(f'{x:.1f}' for x in os.getloadavg())}): "
                + ", ".join(f"{n} {len(texts) / s[-1]:.0f}/s" for n, s in seconds.items()))
    finally:
        if peer is not None:
            peer.close()
    rate = {name: len(texts) / statistics.median(values) for name, values in seconds.items()}
    peers = [name for name in rate if name.startswith(PEER)]
    fastest = max(peers, key=rate.__getitem__) if peers else None
    table = [[name, f"{rate[name]:.1f}", f"{rate[name] / rate[DENSE]:.2f}",
              f"{rate[name] / rate[fastest]:.2f}" if fastest else "—"] for name in names]
    versions = ", ".join(f"{k} {v}" for k, v in peer.versions.items() if k != "python") if peer else ""
    skipped = "".join(f" No `{PEER} {row}` row: {why}." for row, why in peer.skipped.items()) if peer else ""
    return table, (f"{PEER} in a worker process ({versions}); its fastest row: {fastest}.{skipped}" if peer
                   else "No sentence-transformers rows (`--peer-python none`).")


def _timed(function: Any) -> float:
    began = time.perf_counter()
    function()
    return time.perf_counter() - began


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
    parser.add_argument("--quality-backends", default="torch",
                        help="Backends the trained detectors are scored with, comma-separated: torch | onnx | "
                             "onnx-int8 (the ONNX ones on the default, fused export).")
    parser.add_argument("--peer-python", default=None,
                        help="The Python of sentence-transformers' environment (default: work/peer-venv/bin/python if "
                             "there is one, else this one); 'none': no peer rows.")
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
        rows = quality(datasets, models, args.split, args.out_dir,
                       [b for b in args.quality_backends.split(",") if b])
        body += ["", f"Detection, {args.split} split, passages annotated in full (×100):", "",
                 markdown_table(["Data", "Detector", "Type", "strict P", "strict R", "strict F1", "head P", "head R",
                                 "head F1", "gold"], rows, ["l", "l", "l", *"r" * 7])]
    trained = args.speed_model or next((m for _, m in models if m != "heuristic"), None)
    if trained and datasets and args.passages:
        from corefsearch.datasets.dataset import Dataset

        texts = [p.text for p in Dataset(datasets[0][1]).passages()]
        texts = (texts * (args.passages // max(len(texts), 1) + 1))[:args.passages]
        rows, peer_text = speed(texts, trained, args.threads, args.repeats, args.out_dir, args.peer_python)
        body += ["", f"Speed: {len(texts):,} passages of {datasets[0][0]}, {args.threads} threads, batches of {BATCH}, "
                     f"median of {args.repeats} rounds taken in turns. {peer_text}", "",
                 markdown_table(["Row", "passages/s", "× dense encoding (torch)", f"× {PEER}'s fastest"], rows,
                                ["l", "r", "r", "r"])]
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
