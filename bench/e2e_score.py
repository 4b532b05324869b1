"""Score re-ranked test runs made elsewhere (bench/gpu_readers.sh) beside the BM25 rows and their retriever.

bench/e2e.py trains, re-ranks and scores in one working folder on this machine. When the readers
were trained and ran on another machine (a GPU host, bench/gpu_readers.sh), their runs, spans and
training records come back as files; this script puts them in the same table: each BM25 row, the
first-stage retriever, and each reader alone and fused with the retriever's ranks by RRF (the
fusion ``search --rerank-fusion rrf`` makes, from the reader's spans file: bench/e2e.py's
``fuse_with_retriever``), with MRR@10, mAP@10, mAP@50, R@10, R@50, span EM and F1. The dev
table lists every reader trained (its dev MRR@10 alone and by RRF, from its ``dev_curve.json``)
and the one dev chose; only ``--test`` readers are scored on the test queries.

Run: ``python bench/e2e_score.py --dataset D --bm25 "BM25 m+e+RM3=bm25.trec" --bm25 "BM25 sentence
fields=f.trec" --retriever "hybrid=first.trec" --readers OUT_DIR [--test cpu-recipe,span2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import markdown_table  # noqa: E402
from e2e import COLUMNS, METRICS, fuse_with_retriever, pct  # noqa: E402


def named(text: str) -> tuple[str, Path]:
    name, _, path = text.rpartition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name, Path(path)


def dev_row(folder: Path) -> dict[str, object]:
    curve = json.loads((folder / "dev_curve.json").read_text(encoding="utf-8"))
    record = json.loads((folder / "training_args.json").read_text(encoding="utf-8"))
    best = max((p for p in curve if p.get("epoch")), key=lambda p: max(p["MRR@10"], p.get("MRR@10 rrf") or 0))
    retriever = next((p["MRR@10"] for p in curve if p.get("epoch") == 0), None)
    return {"alone": best["MRR@10"], "rrf": best.get("MRR@10 rrf"), "retriever": retriever,
            "fusion": (record.get("fusion") or {}).get("chosen", "reader")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--bm25", type=named, action="append", default=[], help="NAME=RUN (repeat)")
    parser.add_argument("--retriever", type=named, required=True, help="NAME=RUN of the first stage")
    parser.add_argument("--readers", type=Path, required=True, help="folder of NAME/{test.trec,dev_curve.json,…}")
    parser.add_argument("--test", default="", help="comma-separated readers to score on the test queries")
    args = parser.parse_args(argv)

    from corefsearch.datasets.dataset import read_queries
    from corefsearch.evaluate import evaluate_files

    qrels = args.dataset / "qrels" / f"{args.split}.txt"
    qids = {q.id for q in read_queries(args.dataset / "queries" / f"{args.split}.jsonl")}

    def scores(run: Path, spans: Path | None = None) -> dict[str, float]:
        evaluation = evaluate_files([run], qrels, spans_paths=[spans] if spans else None,
                                    dataset=args.dataset if spans else None)[0]
        return {m: evaluation.aggregate[m] for m in (COLUMNS if spans else METRICS)}

    readers = sorted(p for p in args.readers.iterdir() if (p / "dev_curve.json").is_file())
    dev = {p.name: dev_row(p) for p in readers}
    chosen = max(dev, key=lambda n: dev[n]["rrf" if dev[n]["fusion"] == "rrf" else "alone"])  # type: ignore[arg-type]
    print("dev (the readers' own dev sample; MRR@10 ×100):")
    print(markdown_table(["reader", "retriever", "alone", "RRF", "fusion recorded", "dev's choice"],
                         [[n, pct(d["retriever"]) if d["retriever"] is not None else "–", pct(d["alone"]),
                           pct(d["rrf"]) if d["rrf"] is not None else "–", str(d["fusion"]),
                           "**yes**" if n == chosen else ""] for n, d in dev.items()], "lrrrll"))

    values: dict[str, dict[str, float]] = {}
    for name, run in (*args.bm25, args.retriever):
        values[name] = scores(run)
    root = Path(tempfile.mkdtemp(prefix="corefsearch-e2e-score-"))
    for name in [n for n in args.test.split(",") if n]:
        run = args.readers / name / "test.trec"
        spans = Path(f"{run}.spans.jsonl")
        values[f"{args.retriever[0]} + reader {name}"] = scores(run, spans)
        values[f"{args.retriever[0]} + reader {name}, RRF"] = scores(
            fuse_with_retriever(run, args.retriever[1], qids, root), spans)
    base = values[args.bm25[0][0]]["MRR@10"] if args.bm25 else None
    strongest = max((values[n]["MRR@10"] for n, _ in args.bm25), default=None)
    rows = []
    for name, metrics in values.items():
        rows.append([name, *("–" if m not in metrics else pct(metrics[m]) for m in COLUMNS),
                     f"{metrics['MRR@10'] / base:.2f}×" if base else "–",
                     f"{metrics['MRR@10'] / strongest:.2f}×" if strongest else "–"])
    print(f"\n{args.split} ({len(qids):,} queries; ×100):")
    print(markdown_table(["Run", *COLUMNS, f"/ {args.bm25[0][0]}" if args.bm25 else "/ BM25",
                          "/ strongest BM25"], rows, "l" + "r" * (len(COLUMNS) + 2)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
