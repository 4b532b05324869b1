"""The shipped retriever and reader against their torch weights: the same queries, the same first stage.

- Retriever: ``search --retriever dense`` and the hybrid (``--fields sentence=1,document=0.1``, interpolation
  α 0.5) on ECB+ events dev and test, once over the dense index built with the trained folder's torch weights
  (``--torch-index``) and once over the one built with the shipped int8 folder (``--int8-index``); MRR@10 and
  R@100 (trec definitions).
- Reader: the dev queries the reader's training selected on (the same seeded sample: ``--dev-max-queries`` of the
  dev queries of ``--run`` with a relevant passage, ``--seed``), the hybrid's top 50 re-ranked and fused by RRF,
  by the torch weights (``--torch-reader``) and by the shipped int8 folder (``--int8-reader``); MRR@10 and the
  seconds per query (warm, the whole search divided by its queries) on this machine.

Every run is a ``corefsearch search`` subprocess; the runs are kept in ``--work`` and reused when there.
Prints the tables for bench/RESULTS.md, "Shipped models".

Run: ``python bench/shipped_compare.py --dataset D --torch-index I1 --int8-index I2 --torch-reader R
--int8-reader reader-ecbplus --run DEV_RUN [--work work/shipped-compare]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import time
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")

from bm25 import markdown_table  # noqa: E402
from headline import CLI, HYBRID, REPO  # noqa: E402  (the same hybrid as the headline's)


def search(out: Path, index: Path, queries: Path, *options: str) -> float:
    """Run one search into ``out`` unless it is there; its wall seconds (0 when reused)."""
    if out.exists():
        return 0.0
    started = time.perf_counter()
    result = subprocess.run([*CLI, "search", "--index", str(index), "--queries", str(queries), "--out", str(out),
                             *options], cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"search failed: {result.stderr[-3000:]}")
    return time.perf_counter() - started


def scores(run: Path, qrels: Path) -> dict[str, float]:
    result = subprocess.run([*CLI, "evaluate", str(run), "--qrels", str(qrels), "--output-format", "json"],
                            cwd=REPO, capture_output=True, text=True, check=True)
    return next(iter(json.loads(result.stdout).values()))


def dev_sample(dataset: Path, run: Path, size: int, seed: int, out: Path) -> Path:
    """The dev queries ``train reader`` evaluates on: those of ``run`` with a relevant passage, then a seeded
    sample of ``size`` (``corefsearch.reader.train``'s selection), as a queries file."""
    from corefsearch.datasets.dataset import Dataset
    from corefsearch.io.trec import read_qrels, read_run

    data = Dataset(dataset)
    ranked = read_run(run)
    judged = read_qrels(data.qrels_path("dev"))
    dev = [q for q in data.queries("dev") if q.id in ranked and any(r > 0 for r in judged.get(q.id, {}).values())]
    if len(dev) > size:
        chosen = set(random.Random(seed).sample(range(len(dev)), size))
        dev = [q for i, q in enumerate(dev) if i in chosen]
    wanted = {q.id for q in dev}
    lines = [line for line in data.queries_path("dev").read_text(encoding="utf-8").splitlines(keepends=True)
             if json.loads(line)["id"] in wanted]
    out.write_text("".join(lines), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--torch-index", type=Path, required=True)
    parser.add_argument("--int8-index", type=Path, required=True)
    parser.add_argument("--torch-reader", type=Path)
    parser.add_argument("--int8-reader", default="reader-ecbplus")
    parser.add_argument("--run", type=Path, help="The dev run the reader was trained with (its dev selection).")
    parser.add_argument("--dev-max-queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--work", type=Path, default=REPO / "work" / "shipped-compare")
    parser.add_argument("--splits", default="dev,test")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for split in args.splits.split(","):
        queries, qrels = args.dataset / "queries" / f"{split}.jsonl", args.dataset / "qrels" / f"{split}.txt"
        for retriever, options in (("dense", ["--retriever", "dense"]), ("hybrid", HYBRID)):
            found = {}
            for form, index in (("torch", args.torch_index), ("int8", args.int8_index)):
                out = args.work / f"{split}-{retriever}-{form}.trec"
                search(out, index, queries, *options, "--k", "100", "--device", "cpu")
                found[form] = scores(out, qrels)
            rows.append([split, retriever, *(f"{100 * found[f][m]:.2f}" for f in ("torch", "int8")
                                             for m in ("MRR@10", "R@100")),
                         f"{100 * (found['int8']['MRR@10'] - found['torch']['MRR@10']):+.2f}"])
    print(markdown_table(["split", "retriever", "torch MRR@10", "torch R@100", "int8 MRR@10", "int8 R@100",
                          "Δ MRR@10"], rows, "llrrrrr"))
    if args.torch_reader is None or args.run is None:
        return
    sample = dev_sample(args.dataset, args.run, args.dev_max_queries, args.seed, args.work / "dev-sample.jsonl")
    count = sum(1 for _ in sample.open(encoding="utf-8"))
    qrels = args.dataset / "qrels" / "dev.txt"
    reader_rows = []
    for form, reader, index in (("torch", str(args.torch_reader), args.torch_index),
                                ("int8", args.int8_reader, args.int8_index)):
        out = args.work / f"dev-reader-{form}.trec"
        seconds = search(out, index, sample, *HYBRID, "--k", "50", "--reader", reader, "--rerank-fusion", "rrf",
                         "--device", "cpu")
        first = args.work / f"dev-sample-hybrid-{form}.trec"
        search(first, index, sample, *HYBRID, "--k", "50", "--device", "cpu")
        reader_rows.append([form, f"{100 * scores(first, qrels)['MRR@10']:.2f}",
                            f"{100 * scores(out, qrels)['MRR@10']:.2f}",
                            f"{seconds / count:.2f}" if seconds else "reused"])
    print()
    print(f"Reader, {count} dev queries (the training's selection), the hybrid's top 50, RRF:")
    print(markdown_table(["weights", "first stage MRR@10", "reader RRF MRR@10", "s/query (whole search)"],
                         reader_rows, "lrrr"))


if __name__ == "__main__":
    main()
