"""Re-rank the top N of an existing TREC run with a trained reader, with no index and no Java.

``corefsearch search --reader`` retrieves and re-ranks in one command, so it needs the index (and
Lucene for BM25). A machine that only has the reader's device (a GPU host without Java) can take a
run made elsewhere, the dataset it was made from, and re-rank it here: the run and the spans file
written are the ones ``search --reader`` writes for the same first-stage run (same re-ranking
function, same writers), so ``corefsearch evaluate`` and bench/e2e.py's span scoring read them.

Run: ``python bench/rerank_run.py --dataset D --queries D/queries/test.jsonl --run first.trec
--reader READER --out reranked.trec [--rerank-k 50] [--rerank-fusion reader|rrf] [--device auto]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True, help="dataset folder (its passages.jsonl)")
    parser.add_argument("--queries", type=Path, required=True, help="queries JSONL of the run")
    parser.add_argument("--run", type=Path, required=True, help="first-stage TREC run")
    parser.add_argument("--reader", type=Path, required=True, help="reader folder from `train reader`")
    parser.add_argument("--out", type=Path, required=True, help="re-ranked TREC run (spans: OUT.spans.jsonl)")
    parser.add_argument("--rerank-k", type=int, default=50)
    parser.add_argument("--rerank-fusion", choices=("reader", "rrf"), default=None,
                        help="default: the fusion the reader's folder records")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    if args.out.resolve() == args.run.resolve():
        parser.error("--out would overwrite --run")

    from corefsearch.base.progress import track
    from corefsearch.base.schema import Hit
    from corefsearch.datasets.dataset import iter_passages, read_queries
    from corefsearch.io.trec import read_run
    from corefsearch.reader.rerank import ReaderOptions, rerank_hits
    from corefsearch.search.run_writer import RunWriter

    queries = read_queries(args.queries)
    run = read_run(args.run)
    missing = [q.id for q in queries if q.id not in run]
    if missing:
        sys.exit(f"{args.run}: no ranking for {len(missing)} of the {len(queries)} queries (first: {missing[0]})")
    options = ReaderOptions(args.reader, rerank_k=args.rerank_k, fusion=args.rerank_fusion, device=args.device)
    options.validate()
    reader = options.load()
    fusion, _ = options.fusion_for(reader.config)
    ranked_hits = {q.id: [Hit(pid, score) for pid, score in sorted(run[q.id].items(), key=lambda x: -x[1])]
                   for q in queries}
    wanted = {h.passage_id for hits in ranked_hits.values() for h in hits[:args.rerank_k]}
    texts = {p.id: {"text": p.text} for p in iter_passages(args.dataset / "passages.jsonl") if p.id in wanted}
    started = time.perf_counter()
    results, spans = [], []
    for query in track(queries, "Re-ranking"):
        ranked, read = rerank_hits(reader, query, ranked_hits[query.id], texts, args.rerank_k, fusion)
        results.append((query, ranked))
        spans.extend(hit.span_record(query.id) for hit in read)
    seconds = time.perf_counter() - started
    writer = RunWriter(args.out, None)
    writer.write_spans(spans)
    writer.write_run(results, f"rerank-{reader.config.head}" + ("-rrf" if fusion == "rrf" else ""))
    writer.write_metadata({"first_stage": str(args.run.resolve()), "reader": {
        "model": str(args.reader.resolve()), "rerank_k": args.rerank_k, "fusion": fusion,
        "seconds": round(seconds, 3), "ms_per_query": round(1000 * seconds / len(queries), 2)}})
    print(f"re-ranked {len(queries)} queries in {seconds:.1f} s ({1000 * seconds / len(queries):.1f} ms/query); "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
