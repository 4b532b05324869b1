"""The second search round (``search --rounds 2``): which N and which weight, on dev; then test once.

The first round is the hybrid dev chose (bench/hybrid.py: dense + BM25 over the sentence fields,
interpolation α 0.5), searched to depth ``--k`` as ``corefsearch search`` does (the CLI's own option
builder). Its expansion mentions are marked by the mention encoder (``--expand-from encoder``:
in each of the top N passages, the dataset mention nearest to the query mention), or, with
``--spans RUN.spans.jsonl`` of a reader run over the same first round, by the reader. Every expansion
query of the largest N is searched once; each (N, w) of the grid then fuses the first round with
the lists of its first N expansions (``corefsearch.expansion.fuse_rounds``, what the CLI runs),
and is scored with ``corefsearch evaluate``'s scorer: MRR@10, mAP@10, R@10, R@100 (trec
definitions), ×100, on ``--split`` (dev). ``--test``: the test split once with what dev chose.

Run: ``python bench/second_round.py --index INDEX --dataset D --mention-encoder M [--k 100]
[--expand 1,2,3,5] [--weights 0.25,0.5,1,2] [--test]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")

METRICS = ("MRR@10", "mAP@10", "R@10", "R@100")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def rounds(index: Path, dataset: Path, split: str, encoder: Path, k: int, n_max: int, device: str,
           spans: Path | None) -> tuple[list[Any], dict[str, list[Any]], dict[str, list[Any]], float, float]:
    """The first round, each query's expansion queries (largest N), their hits; seconds of each round."""
    from corefsearch.cli.options import search_setup
    from corefsearch.datasets.dataset import read_queries
    from corefsearch.expansion import EncoderExpansion, from_spans
    from corefsearch.retriever import open_retriever

    setup = search_setup(["hybrid"], query_format="sentence", rm3=False, rocchio=False,
                         fields="sentence=1,document=0.1", threads=2, encoder=None, fusion="interpolate",
                         alpha=0.5, device=device, reader=None, rerank_k=50, backend=None, rerank_fusion=None,
                         ef_search=None, nprobe=None)
    retriever = open_retriever(index, setup.bm25, setup.retrieval)
    queries = read_queries(dataset / "queries" / f"{split}.jsonl")
    log(f"{split}: first round, {len(queries):,} queries")
    began = time.perf_counter()
    first = list(retriever.search(queries, k))
    first_seconds = time.perf_counter() - began
    if spans is not None:
        from corefsearch.evaluate.spans import read_spans

        marked: dict[str, dict[str, tuple[int, int]]] = {}
        for span in read_spans(spans):
            marked.setdefault(span.qid, {})[span.passage_id] = (span.start, span.end)
        texts = {h.passage_id: retriever.passage(h.passage_id)["text"] for _, hits in first for h in hits[:n_max]}
        expansions = {q.id: from_spans(q, hits, marked.get(q.id, {}), texts, n_max) for q, hits in first}
    else:
        expansions = EncoderExpansion.load(encoder, dataset, device).expansions(first, n_max)
    flat = [x for q, _ in first for x in expansions[q.id]]
    log(f"{split}: second round, {len(flat):,} expansion queries")
    began = time.perf_counter()
    found = {x.id: hits for x, hits in retriever.search(flat, k)}
    second_seconds = time.perf_counter() - began
    return first, expansions, found, first_seconds, second_seconds


def scores(first: list[Any], expansions: dict[str, list[Any]], found: dict[str, list[Any]], n: int, weight: float,
           k: int, qrels: Path) -> dict[str, float]:
    from corefsearch.evaluate.ranking import evaluate_run
    from corefsearch.expansion import expansion_list, fuse_rounds
    from corefsearch.io.trec import read_qrels

    run = {}
    for query, hits in first:
        mine = expansions[query.id][:n]
        lists = [expansion_list(x, found[x.id]) for x in mine]
        ranked = fuse_rounds(hits, lists, weight, k, query.passage_id) if n and mine else hits
        run[query.id] = {h.passage_id: float(len(ranked) - i) for i, h in enumerate(ranked)}  # ranks, tie-free
    aggregate = evaluate_run(run, read_qrels(qrels)).aggregate
    return {m: 100 * float(aggregate[m]) for m in METRICS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True, help="index with lucene/, lucene/fields/ and dense/")
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--mention-encoder", type=Path, required=True)
    parser.add_argument("--spans", type=Path, default=None, help="a reader's spans of the same first round")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--expand", default="1,2,3,5")
    parser.add_argument("--weights", default="0.25,0.5,1,2")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--test", action="store_true")
    args = parser.parse_args(argv)
    grid_n = [int(x) for x in args.expand.split(",")]
    grid_w = [float(x) for x in args.weights.split(",")]
    first, expansions, found, s1, s2 = rounds(args.index, args.dataset, args.split, args.mention_encoder, args.k,
                                              max(grid_n), args.device, args.spans)
    qrels = args.dataset / "qrels" / f"{args.split}.txt"
    base = scores(first, expansions, found, 0, 0.0, args.k, qrels)
    print(f"{args.split}, {len(first):,} queries, ×100; first round {s1:.0f} s, the second round's "
          f"{len(found):,} queries {s2:.0f} s ({1000 * s2 / max(len(first), 1):.0f} ms per original query at "
          f"N = {max(grid_n)})\n")
    print("| N | w | " + " | ".join(METRICS) + " |\n| ---: | ---: |" + " ---: |" * len(METRICS))
    print("| first round | | " + " | ".join(f"{base[m]:.2f}" for m in METRICS) + " |")
    best = (base["MRR@10"], 0, 0.0)
    for n in grid_n:
        for w in grid_w:
            row = scores(first, expansions, found, n, w, args.k, qrels)
            print(f"| {n} | {w:g} | " + " | ".join(f"{row[m]:.2f}" for m in METRICS) + " |", flush=True)
            if row["MRR@10"] > best[0]:
                best = (row["MRR@10"], n, w)
    print(f"\nDev chose N = {best[1]}, w = {best[2]:g} (MRR@10 {best[0]:.2f}; N = 0 is the first round).")
    if args.test:
        first, expansions, found, s1, s2 = rounds(args.index, args.dataset, "test", args.mention_encoder, args.k,
                                                  max(best[1], 1), args.device, None)
        qrels = args.dataset / "qrels" / "test.txt"
        one = scores(first, expansions, found, 0, 0.0, args.k, qrels)
        two = scores(first, expansions, found, best[1], best[2], args.k, qrels)
        print(f"\nTest, once ({len(first):,} queries), ×100:\n")
        print("| run | " + " | ".join(METRICS) + " |\n| --- |" + " ---: |" * len(METRICS))
        print("| first round | " + " | ".join(f"{one[m]:.2f}" for m in METRICS) + " |")
        print(f"| + second round (N {best[1]}, w {best[2]:g}) | " + " | ".join(f"{two[m]:.2f}" for m in METRICS)
              + " |")
        print(f"\nSecond round: {1000 * s2 / len(first):.0f} ms per query in batch ({len(found):,} expansion "
              f"queries), the first {1000 * s1 / len(first):.0f} ms.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
