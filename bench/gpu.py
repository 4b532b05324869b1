"""On a GPU: encoding, training, re-ranking and quality in fp32 and in reduced precision, side by side.

Every row is measured in one run on one card (``--device``, default cuda), the peers in the same
process on the same inputs:

- **encoding**: passages/s encoding ``--passages`` real passages (the dataset's, cycled; no title,
  cut to 180 tokens) with corefsearch's passage encoder (the bundled all-MiniLM-L6-v2 as the
  zero-shot retriever; fp32 and ``--precision auto``, batches of :func:`default_batch_size` sorted by
  token count, encoded as ``index --dense`` encodes: bench/encode_speed.py's ``encode_as_indexed``)
  against sentence-transformers ``SentenceTransformer.encode`` on the same weights (fp32, and fp16
  after ``.half()``, its usual GPU setting; batch 1,024, ``max_seq_length`` 180). Aim: ≥ 1.0× the
  fp16 peer and ≥ 10,000 passages/s.
- **training**: seconds per step of each trainer (``--steps`` steps after 3 warm-up steps, the CLI's
  defaults otherwise) in fp32 and bf16, each precision's second run of two, taking turns: the retriever
  (in-batch negatives), the reader on ``--run``, the clusterer on the dataset's gold mentions (it must hold
  every chain: ``--chains all``).
- **re-ranking**: ms per query re-ranking the top 50 of ``--run`` for ``--queries`` test queries with
  ``--reader``, one query at a time (``rerank_hits``) and ``--batch-queries`` together
  (``rerank_many``, what ``search --reader`` does), fp32 and auto; the largest score difference
  between the two orders of work is printed (they must agree). Aim: ≤ 10 ms/query batched.
- **quality**: MRR@10 on the test queries of the reader's re-ranking (RRF with the run, as recorded
  in the reader) in fp32 and auto, and of the retriever's exact dense search (``--retriever``) over
  the dataset's passages in fp32 and auto. Aim: auto within 0.3 of fp32.

Without a GPU (``--device cpu``) the same rows run at a small size as a check of the script; only a
GPU's rows go into bench/RESULTS.md. Prints markdown tables.

Run: ``python bench/gpu.py --dataset D --run D-test.trec --train-run D-train.trec --retriever R --reader M
[--passages 100000] [--queries 500] [--steps 50] [--batch-queries 16] [--device cuda]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")

MAX_LENGTH = 180


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def synchronise(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, work: Callable[[], Any]) -> tuple[Any, float]:
    synchronise(device)
    started = time.perf_counter()
    value = work()
    synchronise(device)
    return value, time.perf_counter() - started


def encoding_rows(texts: list[str], device: str, reduced: str) -> list[tuple[str, float]]:
    """passages/s of corefsearch (fp32, auto) and sentence-transformers (fp32, fp16 on a GPU)."""
    from encode_speed import encode_as_indexed
    from sentence_transformers import SentenceTransformer

    from corefsearch.base.models import default_model_path
    from corefsearch.base.precision import resolve, using
    from corefsearch.dense.encoder import default_batch_size
    from corefsearch.dense.store import load_encoder

    ours = load_encoder("default", device)
    batch = default_batch_size(device)
    titles = [""] * len(texts)
    rows = []
    for precision in ("fp32", reduced):
        with using(precision):
            encode_as_indexed(ours, titles[:batch], texts[:batch], batch)  # warm-up
            _, seconds = timed(device, lambda: encode_as_indexed(ours, titles, texts, batch))
        rows.append((f"corefsearch, {resolve(precision, device)}", len(texts) / seconds))
    peer = SentenceTransformer(default_model_path(), device=device)
    peer.max_seq_length = MAX_LENGTH
    for half in (False, True) if device.startswith("cuda") else (False,):
        if half:
            peer = peer.half()
        peer.encode(texts[:batch], batch_size=batch)
        _, seconds = timed(device, lambda peer=peer: peer.encode(texts, batch_size=batch, convert_to_numpy=True))
        rows.append((f"sentence-transformers, {'fp16' if half else 'fp32'}", len(texts) / seconds))
    return rows


def training_rows(dataset: Path, train_run: Path, steps: int, device: str, reduced: str, work: Path
                  ) -> list[tuple[str, str, float]]:
    """Median seconds per step of each trainer, fp32 and bf16 (``steps`` steps after 3 warm-up ones, each precision's
    second run)."""
    from corefsearch.cluster.train import ClustererTrainingArguments, train_clusterer
    from corefsearch.dense.train import RetrieverTrainingArguments, train_retriever
    from corefsearch.reader.train import ReaderTrainingArguments, train_reader

    shared = {"max_steps": steps + 3, "device": device, "epochs": 1, "checkpoint_every": 0, "log_every": 0}
    quiet = {"log": lambda _: None}
    trainers: dict[str, Callable[..., Any]] = {
        "retriever": lambda out, p, on_step: train_retriever(dataset, out, RetrieverTrainingArguments(
            precision=p, hard_negatives=0, dev_max_queries=1, **shared), on_step=on_step, **quiet),
        "reader": lambda out, p, on_step: train_reader(dataset, train_run, out, ReaderTrainingArguments(
            precision=p, dev_max_queries=1, **shared), on_step=on_step, **quiet),
        "clusterer": lambda out, p, on_step: train_clusterer(dataset, out, ClustererTrainingArguments(
            precision=p, **shared), on_step=on_step, **quiet),
    }
    rows = []
    for name, train in trainers.items():
        # Each precision runs twice, taking turns, and the second run is the one kept: a first bf16 run on the
        # H100 paid up to 2.4 s on some of its steps (a median 3× fp32's), the second ran at fp32's pace
        # (bench/RESULTS.md, "On a GPU").
        timings: dict[str, float] = {}
        for turn, precision in enumerate(("fp32", reduced, "fp32", reduced)):
            log(f"training the {name}, {precision}")
            times: list[float] = []
            last = [time.perf_counter()]

            def on_step(step: int, _: float, times: list[float] = times, last: list[float] = last) -> None:
                synchronise(device)
                now = time.perf_counter()
                if step > 3:
                    times.append(now - last[0])
                last[0] = now

            train(work / f"{name}-{precision}-{turn}", precision, on_step)
            timings[precision] = statistics.median(times) if times else float("nan")
        rows += [(name, precision, seconds) for precision, seconds in timings.items()]
    return rows


def rerank_rows(dataset: Path, run_path: Path, reader_dir: Path, n_queries: int, batch_queries: int, device: str,
                reduced: str) -> tuple[list[tuple[str, str, float]], dict[str, Any], dict[str, float]]:
    """ms/query one at a time and batched, in fp32 and auto; the runs (for MRR@10); the largest score
    difference between one at a time and batched."""
    from corefsearch.base.precision import resolve, using
    from corefsearch.base.schema import Hit
    from corefsearch.datasets.dataset import iter_passages, read_queries
    from corefsearch.io.trec import read_run
    from corefsearch.reader.rerank import ReaderOptions, rerank_hits, rerank_many

    run = read_run(run_path)
    queries = [q for q in read_queries(dataset / "queries" / "test.jsonl") if q.id in run][:n_queries]
    options = ReaderOptions(reader_dir, rerank_k=50, device=device)
    reader = options.load()
    fusion, _ = options.fusion_for(reader.config)
    hits = {q.id: [Hit(p, s) for p, s in sorted(run[q.id].items(), key=lambda x: -x[1])] for q in queries}
    wanted = {h.passage_id for ranked in hits.values() for h in ranked[:50]}
    texts = {p.id: {"text": p.text} for p in iter_passages(dataset / "passages.jsonl") if p.id in wanted}
    block = [(q, hits[q.id]) for q in queries]
    rows, runs, gaps = [], {}, {}
    for precision in ("fp32", reduced):
        with using(precision):
            rerank_many(reader, block[:batch_queries], texts, 50, fusion)  # warm-up
            alone, seconds_alone = timed(device, lambda: [rerank_hits(reader, q, h, texts, 50, fusion)
                                                          for q, h in block])
            together, seconds_together = timed(device, lambda: [
                pair for at in range(0, len(block), batch_queries)
                for pair in rerank_many(reader, block[at:at + batch_queries], texts, 50, fusion)])
        name = resolve(precision, device)
        rows += [(name, "one query at a time", 1000 * seconds_alone / len(block)),
                 (name, f"{batch_queries} queries together", 1000 * seconds_together / len(block))]
        for (one, _), (both, _) in zip(alone, together, strict=True):
            scores = {h.passage_id: h.score for h in both}
            gaps[name] = max([gaps.get(name, 0.0), *(abs(scores[h.passage_id] - h.score) for h in one)])
        runs[name] = {q.id: {h.passage_id: h.score for h in ranked} for q, (ranked, _) in
                      zip(queries, together, strict=True)}
    return rows, runs, gaps


def mrr_at_10(run: dict[str, dict[str, float]], qrels_path: Path) -> float:
    """MRR@10 over the queries of ``run`` (the qrels of the others left out)."""
    from corefsearch.evaluate.ranking import evaluate_run
    from corefsearch.io.trec import read_qrels

    qrels = {q: r for q, r in read_qrels(qrels_path).items() if q in run}
    return float(evaluate_run(run, qrels).aggregate["MRR@10"])


def dense_quality(dataset: Path, retriever: Path, device: str, reduced: str, work: Path) -> dict[str, float]:
    """MRR@10 of exact dense search over the dataset in fp32 and auto (index and queries in that precision)."""
    from corefsearch.base.precision import resolve, using
    from corefsearch.datasets.dataset import read_queries
    from corefsearch.dense.indexing import build_dense_index
    from corefsearch.dense.search import DenseSearcher

    queries = read_queries(dataset / "queries" / "test.jsonl")
    scores = {}
    for precision in ("fp32", reduced):
        with using(precision):
            index = work / f"dense-{precision}"
            build_dense_index(dataset, index, str(retriever), device=device, overwrite=True)
            searcher = DenseSearcher(index, str(retriever), device=device)
            run = {q.id: {h.passage_id: h.score for h in hits} for q, hits in searcher.search(queries, 10)}
        scores[resolve(precision, device)] = mrr_at_10(run, dataset / "qrels" / "test.txt")
    return scores


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True, help="dataset (ECB+ events, every chain)")
    parser.add_argument("--run", type=Path, required=True, help="first-stage TREC run of the test queries")
    parser.add_argument("--train-run", type=Path, required=True, help="TREC run of the train queries (reader)")
    parser.add_argument("--retriever", type=Path, required=True)
    parser.add_argument("--reader", type=Path, required=True)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-queries", type=int, default=16)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="auto", help="the reduced precision set beside fp32 (on a CPU: bf16)")
    parser.add_argument("--only", default="encoding,training,reranking,quality")
    args = parser.parse_args(argv)
    import torch

    from corefsearch.datasets.dataset import iter_passages

    only = set(args.only.split(","))
    card = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    print(f"Device: {card}; {time.strftime('%Y-%m-%d')}; torch {torch.__version__}\n")
    work = Path(tempfile.mkdtemp(prefix="corefsearch-gpu-"))
    if "encoding" in only:
        pool = [p.text for p in iter_passages(args.dataset / "passages.jsonl")]
        texts = [pool[i % len(pool)] for i in range(args.passages)]
        log(f"encoding {len(texts):,} passages")
        rows = encoding_rows(texts, args.device, args.precision)
        peer = rows[-1][1]
        print(table(["encoder", "passages/s", "× last peer row"],
                    [[name, f"{rate:,.0f}", f"{rate / peer:.2f}"] for name, rate in rows]) + "\n")
    if "training" in only:
        rows = training_rows(args.dataset, args.train_run, args.steps, args.device, args.precision, work)
        print(table(["trainer", "precision", "s/step", "steps/s"],
                    [[n, p, f"{s:.3f}", f"{1 / s:.1f}"] for n, p, s in rows]) + "\n")
    if "reranking" in only or "quality" in only:
        log("re-ranking")
        rows, runs, gaps = rerank_rows(args.dataset, args.run, args.reader, args.queries, args.batch_queries,
                                      args.device, args.precision)
        print(table(["precision", "re-ranking 50 passages", "ms/query"], [[p, w, f"{ms:.1f}"] for p, w, ms in rows]))
        print("\nLargest score difference, one at a time against together: "
              + ", ".join(f"{p} {g:.2e}" for p, g in gaps.items()) + "\n")
        qrels = args.dataset / "qrels" / "test.txt"
        quality = [[f"reader over the top 50 of {args.run.name}", p, str(len(r)), f"{100 * mrr_at_10(r, qrels):.2f}"]
                   for p, r in runs.items()]
        if "quality" in only:
            log("dense quality")
            dense = dense_quality(args.dataset, args.retriever, args.device, args.precision, work)
            quality += [["dense retriever, exact", p, "all test", f"{100 * s:.2f}"] for p, s in dense.items()]
        print(table(["model", "precision", "queries", "MRR@10 ×100"], quality) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
