"""Dense encoding on Ray against the local path: `index --dense` on one process against `index
--dense --ray` with local workers, on the same collection, encoder and CPUs, and a projection of
the hours 925k passages take on N machines.

- **collection**: the ECB+ all-topics dataset (``BuildOptions()``, as bench/dense.py and
  bench/encode_speed.py build it), or its first ``--limit`` passages (a smoke test, not the
  benchmark).
- **local**: ``build_dense_index`` in this process with ``--workers × --threads-per-worker`` torch
  threads (the CPUs the Ray run gets).
- **Ray**: ``build_dense_index_on_ray`` on a local Ray cluster started here with that many CPUs
  (``ray.init(num_cpus=...)``, timed apart), ``--workers`` actors of ``--threads-per-worker``
  threads each, the same chunk size (default: at least four chunks per worker, at most 8,192
  passages) and batch size. The vectors of the two runs are compared bit for bit.
- Rates: wall-clock passages/s of each run's encoding (for Ray: from the first chunk submitted to
  the last saved, so the workers' start-up, the model loads and the transfers are in it), and the
  **per-worker rate** (passages per second of one worker's own encoding time, summed over the
  shards' manifests): the unit of the projection.
- **projection**: hours for ``--project`` passages (925,000: the CoreSearch collection) on N
  machines like this one, each running ``cores / --threads-per-worker`` workers at the measured
  per-worker rate, plus the measured fixed cost (Ray start, worker start, merge). It assumes the
  rate holds on every machine and that the shared file system and the driver keep up (the driver
  writes 1.4 GB of 384-d vectors for 925k passages).

This machine is one machine: the point of the Ray row here is that it gives the same vectors and
what the Ray machinery costs, not a speed-up. The rounds take turns (``--repeats``, the order
rotated each round, the median reported).

Writes ``## Dense encoding on Ray (bench/ray_encode.py)`` into ``--results`` (bench/RESULTS.md),
replacing that section.

Run: ``python bench/ray_encode.py [--out-dir DIR] [--workers 2] [--threads-per-worker 1] [--limit N]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import cpu_model, markdown_table, write_section  # noqa: E402
from encode_speed import dataset, log  # noqa: E402

from corefsearch.datasets.build import BuildOptions  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Dense encoding on Ray (bench/ray_encode.py)"
MACHINES = (1, 2, 4, 8, 16, 32)


def limited(collection: Path, limit: int | None, root: Path) -> Path:
    """``collection``, or a copy of it holding only its first ``limit`` passages."""
    if limit is None:
        return collection
    out = root / f"{collection.name}-first-{limit}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text((collection / "manifest.json").read_text(encoding="utf-8"), encoding="utf-8")
    kept = []
    with (collection / "passages.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                kept.append(line)
            if len(kept) == limit:
                break
    (out / "passages.jsonl").write_text("".join(kept), encoding="utf-8")
    return out


def count_passages(collection: Path) -> int:
    with (collection / "passages.jsonl").open(encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


def vectors(index: Path) -> Any:
    from corefsearch.dense import faiss_index

    stored = faiss_index.read_index(index / "dense" / "faiss.index")
    return stored.reconstruct_n(0, stored.ntotal)


def run_local(collection: Path, out: Path, args: argparse.Namespace, chunk: int) -> dict[str, float]:
    import torch

    from corefsearch.dense.indexing import build_dense_index

    torch.set_num_threads(args.workers * args.threads_per_worker)
    started = time.perf_counter()
    summary = build_dense_index(collection, out, args.encoder, batch_size=args.batch_size, device="cpu",
                                overwrite=True, chunk_size=chunk)
    return {"wall": time.perf_counter() - started, "encode": summary.encode_seconds, "passages": summary.passages}


def run_ray(collection: Path, out: Path, args: argparse.Namespace, chunk: int) -> dict[str, float]:
    from corefsearch.dense.store import load_dense_manifest
    from corefsearch.distributed.dense_encoding import build_dense_index_on_ray
    from corefsearch.distributed.session import RayOptions

    started = time.perf_counter()
    summary = build_dense_index_on_ray(collection, out, args.encoder,
                                       RayOptions("auto", args.workers, float(args.threads_per_worker)),
                                       batch_size=args.batch_size, device="cpu", overwrite=True, chunk_size=chunk)
    shards = [json.loads(path.read_text(encoding="utf-8"))
              for path in sorted((out / "dense-shards").glob(f"shard-*-of-{args.workers}/manifest.json"))]
    worker_seconds = sum(float(shard["encoding"]["seconds"]) for shard in shards)
    assert load_dense_manifest(out)["encoding"]["shards"] == args.workers
    return {"wall": time.perf_counter() - started, "encode": summary.encode_seconds, "passages": summary.passages,
            "worker_seconds": worker_seconds, "busiest": max(float(s["encoding"]["seconds"]) for s in shards)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None, help="The dataset and the indexes.")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--encoder", default="default", help="Encoder (default: the bundled all-MiniLM-L6-v2).")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers (actors), one encoder each.")
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="Passages per chunk, both runs (default: four chunks per worker, at most 8,192).")
    parser.add_argument("--limit", type=int, default=None, help="Only the first N passages (a smoke test).")
    parser.add_argument("--repeats", type=int, default=1, help="Rounds (the order rotated each round).")
    parser.add_argument("--project", type=int, default=925_000, help="Passages of the projection.")
    args = parser.parse_args(argv)
    started = dt.datetime.now()
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-ray-encode-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"working in {root}")

    collection = limited(dataset(root, "ecb-all", BuildOptions()), args.limit, root)
    n_passages = count_passages(collection)
    chunk = args.chunk_size or min(8192, max(1, math.ceil(n_passages / (4 * args.workers))))

    import ray

    cpus = args.workers * args.threads_per_worker
    clock = time.perf_counter()
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level="ERROR")
    ray_start = time.perf_counter() - clock
    log(f"started a local Ray cluster of {cpus} CPUs in {ray_start:.1f} s")
    rounds: dict[str, list[dict[str, float]]] = {"local": [], "ray": []}
    try:
        for number in range(args.repeats):
            order = ["local", "ray"] if number % 2 == 0 else ["ray", "local"]
            for name in order:
                log(f"round {number + 1}: {name}, {n_passages:,} passages in chunks of {chunk:,}")
                runner = run_local if name == "local" else run_ray
                rounds[name].append(runner(collection, root / f"index-{name}", args, chunk))
        import numpy as np

        identical = bool(np.array_equal(vectors(root / "index-local"), vectors(root / "index-ray")))
    finally:
        ray.shutdown()
    section = report(args, rounds, n_passages, chunk, ray_start, identical, started)
    print(section)
    write_section(args.results, section, SECTION)
    log(f"wrote {args.results}")
    return 0


def median(values: list[dict[str, float]], key: str) -> float:
    return statistics.median(value[key] for value in values)


def report(args: argparse.Namespace, rounds: dict[str, list[dict[str, float]]], n_passages: int, chunk: int,
           ray_start: float, identical: bool, started: dt.datetime) -> str:
    import ray
    import torch

    cpus = args.workers * args.threads_per_worker
    local_encode = median(rounds["local"], "encode")
    ray_encode = median(rounds["ray"], "encode")
    ray_wall = median(rounds["ray"], "wall")
    per_worker = n_passages / median(rounds["ray"], "worker_seconds")  # passages per second of one worker's time
    local_rate, ray_rate = n_passages / local_encode, n_passages / ray_encode
    # The fixed cost of a Ray run: its wall time less the busiest worker's own encoding (Ray and
    # worker start, model loads, transfers, writing the shards, the merge), plus starting Ray.
    fixed = ray_wall - median(rounds["ray"], "busiest") + ray_start
    rows = [["local (`index --dense`)", f"{cpus} torch threads", f"{local_encode:,.1f}", f"{local_rate:,.1f}",
             "—", f"{median(rounds['local'], 'wall'):,.1f}"],
            [f"Ray (`index --dense --ray`), {args.workers} local workers",
             f"{args.workers} × {args.threads_per_worker} thread(s)", f"{ray_encode:,.1f}", f"{ray_rate:,.1f}",
             f"{per_worker:,.1f}", f"{ray_wall:,.1f} (+ {ray_start:.1f} to start Ray)"]]
    cores = os.cpu_count() or 1
    per_machine = max(1, cores // args.threads_per_worker)
    projection = []
    for n in MACHINES:
        hours = args.project / (per_worker * per_machine * n) / 3600 + fixed / 3600
        projection.append([str(n), str(n * per_machine), f"{hours:,.2f}"])
    limit = f" --limit {args.limit}" if args.limit is not None else ""
    command = (f"python bench/ray_encode.py --workers {args.workers} --threads-per-worker {args.threads_per_worker} "
               f"--repeats {args.repeats}{limit}" + (f" --encoder {args.encoder}" if args.encoder != "default" else ""))
    collection = ("the ECB+ all-topics collection" if args.limit is None else
                  f"the first {n_passages:,} passages of the ECB+ all-topics collection (`--limit`: a smoke test, "
                  "not the benchmark)")
    encoder = "the bundled all-MiniLM-L6-v2 (zero-shot)" if args.encoder == "default" else f"`{args.encoder}`"
    parts = [
        SECTION, "",
        f"Run {started:%Y-%m-%d %H:%M} by `{command}`: {collection}, {n_passages:,} passages, encoder {encoder}, "
        f"batches of {args.batch_size}, chunks of {chunk:,}, on the CPU; median of {args.repeats} round(s) in "
        f"rotated order. Ray {ray.__version__} (a local cluster of {cpus} CPUs started by the script), torch "
        f"{torch.__version__}. Vectors of the two runs identical bit for bit: **{'yes' if identical else 'NO'}**.",
        "",
        markdown_table(["Run", "CPUs", "encoding (s)", "passages/s", "per-worker passages/s", "wall (s)"], rows,
                       ["l", "l", "r", "r", "r", "r"]),
        "",
        f"One machine: the Ray row measures what the Ray machinery costs for the same work on the same cores "
        f"({ray_rate / local_rate:.2f}× the local rate), not a speed-up. Fixed cost of a Ray run here: "
        f"{fixed:,.1f} s (Ray and worker start, model loads, transfers, writing and merging the shards).",
        "",
        f"Projection for {args.project:,} passages (the CoreSearch collection) on N machines like this one "
        f"({cores} cores, {per_machine} workers of {args.threads_per_worker} thread(s) each), at the measured "
        f"per-worker rate of {per_worker:,.1f} passages/s plus the fixed cost; it assumes that rate holds on every "
        "machine (measured here with whatever else shared the cores: see the load average below) and "
        "that the shared file system and the driver keep up:",
        "",
        markdown_table(["Machines", "Workers", "Hours"], projection, ["r", "r", "r"]),
        "",
        f"Machine: {cpu_model()}, {cores} CPUs; load average at the end (1, 5, 15 min): "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} (other work on the machine shares its cores: compare "
        "rows of one run, not runs).",
    ]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
