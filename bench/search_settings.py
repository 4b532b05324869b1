"""What the search-time FAISS settings buy: ``--ef-search`` on an HNSW index and ``--nprobe`` on an
IVF-PQ index, latency against the share of the exact top k found.

It reads the dense indexes ``bench/scale.py`` leaves in its out dir (``OUT_DIR/dense-N/index-hnsw``,
``index-ivfpq``, the query vectors in ``vectors/`` and the exact flat top 500 in
``flat-top500.npy``) and, for each setting, opens the index with ``open_retriever(INDEX,
retrieval=RetrievalOptions("dense", ef_search=... | nprobe=...))``, as ``corefsearch search
--ef-search/--nprobe`` does, and searches the first ``--queries`` query vectors one at a time at
k = 500 (``search_vectors``: FAISS, ids, the query's own passage left out) after a warm-up of 20.
overlap@500: the share of the exact top 500 (own passage left out) found.

Writes ``## Search-time FAISS settings (bench/search_settings.py)`` into ``--results``
(bench/RESULTS.md), replacing that section.

Run: ``python bench/search_settings.py --scale-dir OUT_DIR [--size 1000000] [--queries 300]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import cpu_model, markdown_table, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Search-time FAISS settings (bench/search_settings.py)"
K = 500
SETTINGS = (("hnsw", "ef_search", (None, 1000, 2000)), ("ivfpq", "nprobe", (None, 64, 128, 256)))


def measure(index: Path, option: str, value: int | None, vectors: Any, own: list[str], truth: Any,
            n: int) -> dict[str, Any]:
    import numpy as np

    from corefsearch.search.options import RetrievalOptions
    from corefsearch.search.retriever import open_retriever

    retrieval = RetrievalOptions("dense", device="cpu", **({option: value} if value is not None else {}))
    searcher: Any = open_retriever(index, retrieval=retrieval)
    row = {passage_id: i for i, passage_id in enumerate(searcher.ids)}
    for i in range(min(20, n)):  # warm-up
        searcher.search_vectors(vectors[i:i + 1], K, [own[i]])
    seconds, overlap = [], []
    for i in range(n):
        began = time.perf_counter()
        hits = searcher.search_vectors(vectors[i:i + 1], K, [own[i]])[0]
        seconds.append(time.perf_counter() - began)
        exact = set(truth[i].tolist()) - {-1, row[own[i]]}
        overlap.append(len({row[h.passage_id] for h in hits} & exact) / len(exact))
    parameters = searcher.parameters
    return {"p50_ms": float(np.median(seconds)) * 1e3, "p95_ms": float(np.percentile(seconds, 95)) * 1e3,
            "overlap": float(np.mean(overlap)), "parameters": parameters}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale-dir", type=Path, required=True, help="The --out-dir of bench/scale.py.")
    parser.add_argument("--size", type=int, default=1_000_000, help="Its --dense-size (the dense-N folder).")
    parser.add_argument("--queries", type=int, default=300, help="Query vectors searched (the first N).")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    args = parser.parse_args(argv)
    import faiss
    import numpy as np
    import torch

    faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    folder = args.scale_dir / f"dense-{args.size}"
    needed = [folder / "vectors" / "queries.npy", folder / "vectors" / "queries.json", folder / "flat-top500.npy"]
    missing = [str(path) for path in needed if not path.exists()]
    if missing:
        raise SystemExit(f"{', '.join(missing)}: missing; run `python bench/scale.py --out-dir {args.scale_dir} "
                         f"--dense-size {args.size}` first")
    vectors = np.load(needed[0])
    own = [passage_id for _, passage_id in json.loads(needed[1].read_text(encoding="utf-8"))]
    truth = np.load(needed[2])
    n = min(args.queries, len(vectors), len(truth))
    started = time.perf_counter()
    rows = []
    for kind, option, values in SETTINGS:
        for value in values:
            result = measure(folder / f"index-{kind}", option, value, vectors, own, truth, n)
            name = "efSearch" if kind == "hnsw" else "nprobe"
            used = (f"max({result['parameters'][name]}, k + 1) = {max(int(result['parameters'][name]), K + 1)}"
                    if kind == "hnsw" else str(result["parameters"][name]))
            flag = f"--{option.replace('_', '-')} {value}" if value is not None else "(the index's)"
            rows.append([kind, flag, used, f"{result['p50_ms']:.2f}", f"{result['p95_ms']:.2f}",
                         f"{result['overlap']:.3f}"])
            print(" | ".join(rows[-1]), flush=True)
    minutes = (time.perf_counter() - started) / 60
    section = "\n".join([
        SECTION, "",
        f"Run {dt.datetime.now():%Y-%m-%d %H:%M} by `python bench/search_settings.py --scale-dir DIR --size "
        f"{args.size} --queries {n}` ({minutes:.1f} min) on the dense indexes of bench/scale.py at {args.size:,} "
        f"vectors (see \"A million passages on one machine\" for how they are made), {n} queries at k = {K}, "
        f"one at a time, FAISS on {args.threads} threads; {cpu_model()}, {os.cpu_count()} CPUs.", "",
        markdown_table(["Index", "option", "setting used", "p50 ms", "p95 ms", "overlap@500"], rows, "lllrrr"), ""])
    print(section)
    write_section(args.results, section, SECTION)


if __name__ == "__main__":
    main()
