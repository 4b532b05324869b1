"""End-to-end benchmark: the best retriever, then the DPR and the integrated readers re-ranking its top 50.

ECB+ events, test queries, collection = all 43 topics (15,812 passages). The retriever is the
best of bench/dense.py: BM25 (mention + named entities, RM3) fused by RRF with the dense
retriever trained with mention markers; it retrieves the top 500 for sampled train and dev
queries and the test queries. Five readers are trained on that run (train queries; dev queries
select the epoch): DPR and integrated heads, each with and without markers, and the integrated
head with markers started from the retriever's query encoder. Each re-ranks the retriever's top
50 of a seeded sample of test queries; the rows are evaluated on those same queries: BM25, the
retriever alone, retriever + each reader, and each reader's ranks fused with the retriever's
(RRF). Columns: MRR@10, mAP@10, mAP@50, R@10, R@50 (trec definition), span EM and F1 (SQuAD
normalisation; the relevant re-ranked passages, a prediction counting only where it overlaps
the gold mention) and CPU seconds per query to re-rank 50 passages (one thread per job).

CPU budget: the readers train ``--epochs`` epochs on ``--train-queries`` sampled train queries
with ``--negatives`` negatives each (the paper: every query, 23 negatives, GPUs); the trainings
and the re-ranking jobs run ``--jobs`` at a time on one thread each. Every option is printed
with the results. It reuses the ECB+ all-topics dataset, Lucene index, trained retriever (with
markers) and dense index of a bench/dense.py working folder given as ``--dense-dir``; what is
missing there is made with bench/dense.py's own steps and settings (about 25 minutes on 2 cores).

Writes ``## End to end with readers (bench/e2e.py)`` in bench/RESULTS.md.

Run: ``python bench/e2e.py [--dense-dir D] [--out-dir DIR] [--train-queries 800] [--negatives 11]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import machine, markdown_table, write_section  # noqa: E402

from corefsearch.datasets.dataset import read_queries  # noqa: E402
from corefsearch.io import read_run, write_qrels  # noqa: E402

SECTION = "## End to end with readers (bench/e2e.py)"
METRICS = ("MRR@10", "mAP@10", "mAP@50", "R@10", "R@50")
K, RERANK_K = 500, 50
# (row name, head, markers, encoder the reader starts from: the bundled base model, or the
# trained retriever's query encoder, which already knows the markers and the events)
READERS = (("DPR reader, markers", "dpr", True, "base"), ("DPR reader, no markers", "dpr", False, "base"),
           ("integrated reader, markers", "integrated", True, "base"),
           ("integrated reader, no markers", "integrated", False, "base"),
           ("integrated reader, markers, from the retriever's encoder", "integrated", True, "retriever"))
CLI = [sys.executable, "-m", "corefsearch.cli"]


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def timings(root: Path) -> dict[str, float]:
    """Wall seconds of every job run in ``root`` so far (kept across invocations)."""
    path = root / "timings.json"
    return json.loads(path.read_text()) if path.exists() else {}


def run_jobs(jobs: list[tuple[str, list[str]]], parallel: int, root: Path) -> None:
    """Run CLI commands ``parallel`` at a time, one thread each; their wall seconds go to ``timings.json``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COREFSEARCH_QUIET": "1"}
    pending, running = list(jobs), []
    while pending or running:
        while pending and len(running) < parallel:
            name, command = pending.pop(0)
            log(f"start {name}: {shlex.join(command[3:])}")
            handle = (root / f"{name.replace(' ', '_').replace(',', '')}.log").open("w")
            running.append((name, subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT),
                            time.perf_counter(), handle))
        time.sleep(2)
        for item in list(running):
            name, process, started, handle = item
            if process.poll() is None:
                continue
            handle.close()
            running.remove(item)
            if process.returncode != 0:
                raise SystemExit(f"{name} failed; see {handle.name}")
            seconds = time.perf_counter() - started
            log(f"done {name} in {seconds / 60:.1f} min")
            record_timing(root, name, seconds)


def search(index: Path, queries: Path, out: Path, extra: Sequence[str] = ()) -> list[str]:
    return [*CLI, "search", "--index", str(index), "--queries", str(queries), "--out", str(out), "--k", str(K),
            "--retriever", "hybrid", "--query-format", "mention+entities", "--rm3", "--device", "cpu",
            "--threads", "1", *extra]


def fuse_with_retriever(reranked: Path, retrieved: Path, qids: set[str], root: Path) -> Path:
    """``search --reader … --rerank-fusion rrf`` from the reader's spans and the retriever's run,
    without reading the passages again."""
    from corefsearch.evaluate.ranking import rank_documents
    from corefsearch.io import RunRow, read_jsonl, write_run
    from corefsearch.pipeline import order_reranked
    from corefsearch.reader.read import ReaderHit
    from corefsearch.sparse.search import Hit

    read: dict[str, list[ReaderHit]] = {}
    for _, record in read_jsonl(Path(f"{reranked}.spans.jsonl")):
        read.setdefault(record["qid"], []).append(ReaderHit(record["passage_id"], record["score"], record["start"],
                                                            record["end"], record["text"]))
    run = read_run(retrieved)
    rows = []
    for qid in sorted(qids):
        hits = [Hit(pid, run[qid][pid]) for pid in rank_documents(run.get(qid, {}))]
        mine = sorted(read.get(qid, []), key=lambda h: -h.score)
        fused = order_reranked(mine, hits, RERANK_K, fusion="rrf")
        rows += [RunRow(qid, hit.passage_id, rank, hit.score, "rrf") for rank, hit in enumerate(fused, 1)]
    out = root / f"{reranked.stem}-rrf.trec"
    write_run(out, rows)
    return out


def record_timing(root: Path, name: str, seconds: float) -> None:
    recorded = timings(root) | {name: seconds}
    (root / "timings.json").write_text(json.dumps(recorded, indent=2) + "\n")


def prepare_retriever(dense_dir: Path, root: Path) -> tuple[Path, Path, Path, Path]:
    """The ECB+ all-topics dataset, its Lucene index, the retriever trained with markers and its
    flat dense index, as bench/dense.py makes them (the same folders, settings and seed)."""
    from dense import ECBPLUS, build, dense_index, lucene, train

    from corefsearch.datasets.build import BuildOptions
    from corefsearch.datasets.ecbplus import read_ecbplus
    from corefsearch.dense.model import BiEncoder

    dense_dir.mkdir(parents=True, exist_ok=True)
    dataset = build("ecb-all", read_ecbplus(ECBPLUS), BuildOptions(), dense_dir)
    lucene_index = lucene(dataset, dense_dir)
    settings = argparse.Namespace(epochs=1, positives_per_query=1, batch_size=16, lr=3e-5, pooling="mean",
                                  max_steps=None, dev_max_queries=300)
    model_dir = dense_dir / "model-ecb-markers"
    if not (model_dir / "corefsearch_retriever.json").exists():
        log("training the dense retriever with markers (bench/dense.py settings)")
        started = time.perf_counter()
        train(dataset, lucene_index, model_dir, True, settings)
        record_timing(root, "train retriever (2 threads)", time.perf_counter() - started)
    flat = dense_dir / f"{dataset.name}-dense_trained_markers-flat"
    if not (flat / "dense" / "manifest.json").exists():
        log("encoding the passages with the trained retriever")
        started = time.perf_counter()
        dense_index(dataset, BiEncoder.load(model_dir, device="cpu"), "dense_trained_markers", dense_dir)
        record_timing(root, "encode passages (2 threads)", time.perf_counter() - started)
    return dataset, lucene_index, model_dir, flat


def sample_queries(dataset: Path, split: str, size: int, root: Path) -> Path:
    """A seeded sample of ``size`` queries of ``split`` (in file order) as ``ROOT/SPLIT-sample.jsonl``."""
    lines = (dataset / "queries" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    chosen = sorted(random.Random(13).sample(range(len(lines)), min(size, len(lines))))
    out = root / f"{split}-sample.jsonl"
    out.write_text("".join(lines[i] for i in chosen), encoding="utf-8")
    return out


def reading(values: dict[str, dict[str, float]], ratios: dict[str, float], dev: dict[str, list[float]]) -> str:
    """What the table says, in words (generated from the numbers)."""
    retriever = values["retriever: hybrid RRF (BM25 + dense markers)"]["MRR@10"]
    alone = {name: v["MRR@10"] for name, v in values.items() if "reader" in name and "RRF" not in name}
    fused = {name: v["MRR@10"] for name, v in values.items() if "RRF with the retriever" in name}
    best_alone, best_fused = max(alone, key=alone.get), max(fused, key=fused.get)

    def mrr(name: str) -> str:
        return f"{100 * values[f'retriever + {name}']['MRR@10']:.2f}"

    def points(value: float) -> str:
        return f"{100 * (value - retriever):+.2f}"

    spans = {name: v["F1"] for name, v in values.items() if "F1" in v and "RRF" not in name}
    best_span = max(spans, key=spans.get)
    integrated = "retriever + integrated reader, markers"
    retriever_dev = next(iter(dev.values()))[0]
    readers_dev = {name: curve[-1] for name, curve in dev.items()}
    return (
        f"The retriever alone has MRR@10 {100 * retriever:.2f} on these queries. Re-ranking its top {RERANK_K} "
        f"by a reader's score alone, the best is {best_alone.removeprefix('retriever + ')} "
        f"({100 * alone[best_alone]:.2f}, {points(alone[best_alone])} points against the retriever); fusing the "
        f"reader's ranks with the retriever's (RRF) the best is {best_fused.removeprefix('retriever + ')} "
        f"({100 * fused[best_fused]:.2f}, {points(fused[best_fused])}). Markers in the reader: integrated "
        f"{mrr('integrated reader, markers')} with against {mrr('integrated reader, no markers')} without, DPR "
        f"{mrr('DPR reader, markers')} against {mrr('DPR reader, no markers')}. Starting the integrated reader from "
        f"the trained retriever's query encoder instead of the base model: "
        f"{mrr(READERS[-1][0])} against {mrr('integrated reader, markers')}. The integrated reader's MRR@10 is "
        f"{ratios[integrated]:.2f}× BM25's (aim 1.3×; the paper 1.44× with readers trained on all of CoreSearch "
        f"on GPUs). Spans: the best F1 is {100 * spans[best_span]:.2f} "
        f"({best_span.removeprefix('retriever + ')}, EM {100 * values[best_span]['EM']:.2f}). The dev curves "
        f"say the same: after this training budget the readers' dev MRR@10 is "
        f"{100 * min(readers_dev.values()):.2f}–{100 * max(readers_dev.values()):.2f} against the retriever's "
        f"{100 * retriever_dev:.2f} on the same dev queries, so a reader trained this briefly ranks below the "
        "retriever that feeds it; fusing its ranks with the retriever's (`--rerank-fusion rrf`) keeps most of "
        "the retriever's ranking while adding the reader's spans."
    )


def restrict_run(run: dict[str, dict[str, float]], qids: set[str]) -> dict[str, dict[str, float]]:
    return {qid: hits for qid, hits in run.items() if qid in qids}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dense-dir", type=Path, default=None,
                        help="working folder of bench/dense.py (default: OUT_DIR/dense; what is missing is made)")
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument("--train-queries", type=int, default=800)
    parser.add_argument("--negatives", type=int, default=11)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--span-weight", type=float, default=1.0)
    parser.add_argument("--ranking-loss", choices=("softmax", "softmax+pairwise"), default="softmax")
    parser.add_argument("--dev-queries", type=int, default=60)
    parser.add_argument("--test-queries", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args(argv)
    started = dt.datetime.now()
    clock = time.perf_counter()
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-e2e-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"working in {root}")

    from corefsearch.datasets.dataset import Dataset
    from corefsearch.evaluate import evaluate_files, evaluate_run
    from corefsearch.io import read_qrels

    dataset, lucene_index, retriever, flat = prepare_retriever(args.dense_dir or root / "dense", root)
    index = root / "index"  # the Lucene and the dense index of bench/dense.py side by side
    index.mkdir(exist_ok=True)
    for kind, source in (("lucene", lucene_index / "lucene"), ("dense", flat / "dense")):
        if not (index / kind).exists():
            (index / kind).symlink_to(source.resolve(), target_is_directory=True)

    # The retriever's runs: train + dev (reader training), test (the rows).
    # Only the sampled train and dev queries are searched: the readers see no others.
    query_files = {"train": sample_queries(dataset, "train", args.train_queries, root),
                   "dev": sample_queries(dataset, "dev", args.dev_queries, root),
                   "test": dataset / "queries" / "test.jsonl"}
    runs = {split: root / f"hybrid-{split}.trec" for split in ("train", "dev", "test")}
    jobs = [(f"retrieve {split}", search(index, query_files[split], path))
            for split, path in runs.items() if not path.exists()]
    bm25_run = root / "bm25-test.trec"
    if not bm25_run.exists():
        jobs.append(("retrieve test BM25", [*CLI, "search", "--index", str(index), "--queries",
                                            str(dataset / "queries" / "test.jsonl"), "--out", str(bm25_run),
                                            "--k", str(K), "--query-format", "mention+entities", "--rm3",
                                            "--threads", "1"]))
    run_jobs(jobs, args.jobs, root)
    training_run = root / "hybrid-train-dev.trec"
    if not training_run.exists():
        training_run.write_text(runs["train"].read_text() + runs["dev"].read_text())

    # A seeded sample of the test queries, with its qrels.
    test_queries = Dataset(dataset).queries("test")
    test_sample = sample_queries(dataset, "test", args.test_queries, root)
    sample_ids = {query.id for query in read_queries(test_sample)}
    qrels_all = read_qrels(dataset / "qrels" / "test.txt")
    sample_qrels = root / "test-sample.qrels"
    write_qrels(sample_qrels, [(q, d, r) for q, judged in qrels_all.items() if q in sample_ids
                               for d, r in judged.items()])

    # The readers: train the missing ones; readers already trained re-rank meanwhile, then the new ones.
    models = {name: root / (f"reader-{head}-{'markers' if markers else 'no-markers'}"
                            + ("-from-retriever" if start == "retriever" else ""))
              for name, head, markers, start in READERS}
    reranked = {name: root / f"rerank-{models[name].name}.trec" for name, *_ in READERS}

    def rerank_jobs() -> list[tuple[str, list[str]]]:
        # The reader's order alone (explicitly: a reader records the fusion that won on dev, which
        # `search` would use by default); the RRF rows are fused below from the same scores.
        return [(f"rerank {name}", search(index, test_sample, reranked[name],
                                          ["--reader", str(models[name]), "--rerank-k", str(RERANK_K),
                                           "--rerank-fusion", "reader"]))
                for name, *_ in READERS
                if (models[name] / "corefsearch_reader.json").exists() and not reranked[name].exists()]

    jobs = []
    for name, head, markers, start in READERS:
        if (models[name] / "corefsearch_reader.json").exists():
            continue
        jobs.append((f"train {name}", [
            *CLI, "train", "reader", str(dataset), "--run", str(training_run), "--out", str(models[name]),
            "--head", head, "--markers" if markers else "--no-markers", "--epochs", str(args.epochs),
            "--batch-size", str(args.batch_size), "--lr", str(args.lr), "--negatives", str(args.negatives),
            # Negatives from the hybrid run's top 50: the retriever and depth the reader re-ranks at test time.
            "--negatives-from", str(RERANK_K), "--span-weight", str(args.span_weight),
            "--ranking-loss", args.ranking_loss,
            "--dev-max-queries", str(args.dev_queries), "--device", "cpu", "--overwrite",
            *(["--base-model", str(retriever / "query_encoder")] if start == "retriever" else [])]))
    run_jobs(jobs + rerank_jobs(), args.jobs, root)
    run_jobs(rerank_jobs(), args.jobs, root)

    # Rows.
    rows: list[list[str]] = []
    values: dict[str, dict[str, float]] = {}
    for name, path in (("BM25 mention+entities + RM3", bm25_run), ("retriever: hybrid RRF (BM25 + dense markers)",
                                                                   runs["test"])):
        evaluation = evaluate_run(restrict_run(read_run(path), sample_ids), read_qrels(sample_qrels), "trec", name)
        values[name] = {m: evaluation.aggregate[m] for m in METRICS}
    seconds_per_query: dict[str, float] = {}
    for name, *_ in READERS:
        spans = Path(f"{reranked[name]}.spans.jsonl")
        evaluation = evaluate_files([reranked[name]], sample_qrels, spans_paths=[spans], dataset=dataset)[0]
        values[f"retriever + {name}"] = {m: evaluation.aggregate[m] for m in (*METRICS, "EM", "F1")}
        meta = json.loads(Path(f"{reranked[name]}.meta.json").read_text())
        seconds_per_query[f"retriever + {name}"] = meta["reader"]["seconds"] / len(sample_ids)
    for name, *_ in READERS:  # the same reader scores, fused with the retriever's ranks (--rerank-fusion rrf)
        fused = fuse_with_retriever(reranked[name], runs["test"], sample_ids, root)
        spans = Path(f"{reranked[name]}.spans.jsonl")
        evaluation = evaluate_files([fused], sample_qrels, spans_paths=[spans], dataset=dataset)[0]
        values[f"retriever + {name}, RRF with the retriever"] = {m: evaluation.aggregate[m]
                                                                 for m in (*METRICS, "EM", "F1")}
    best = {m: max(v.get(m, float("-inf")) for v in values.values()) for m in (*METRICS, "EM", "F1")}
    for name, metrics in values.items():
        cells = []
        for m in (*METRICS, "EM", "F1"):
            if m not in metrics:
                cells.append("–")
                continue
            text = f"{100 * metrics[m]:.2f}"
            cells.append(f"**{text}**" if metrics[m] == best[m] else text)
        rate = seconds_per_query.get(name)
        rows.append([name, *cells, f"{rate:.2f}" if rate is not None else "–"])
    bm25_mrr = values["BM25 mention+entities + RM3"]["MRR@10"]
    ratios = {name: metrics["MRR@10"] / bm25_mrr for name, metrics in values.items() if "reader" in name}

    full = {name: evaluate_run(read_run(path), qrels_all, "trec", name).aggregate for name, path in
            (("BM25 mention+entities + RM3", bm25_run), ("retriever: hybrid RRF", runs["test"]))}

    training = []
    dev_curves: dict[str, list[float]] = {}
    for name, *_ in READERS:
        record = json.loads((models[name] / "training_args.json").read_text())
        curve = json.loads((models[name] / "dev_curve.json").read_text())
        dev_curves[name] = [point["MRR@10"] for point in curve]
        seconds = timings(root).get(f"train {name}")
        fusion = record.get("fusion", {}).get("chosen", "reader")  # recorded from dev (older readers: none)
        training.append([name, f"{record['counts']['train_queries']:,}", f"{record['counts']['total_steps']:,}",
                         f"{seconds / 60:.1f}" if seconds else "(earlier run)", fusion,
                         "; ".join(("retriever" if p["epoch"] == 0 else f"epoch {p['epoch']}")
                                   + f" {100 * p['MRR@10']:.2f}" for p in curve)])

    total_minutes = (time.perf_counter() - clock) / 60
    jobs_minutes = sum(timings(root).values()) / 60
    info = machine()
    text_lines = [SECTION, "", f"- Date: {started:%Y-%m-%d %H:%M} (local time); this invocation {total_minutes:.1f} "
                  f"min; the jobs of all invocations in this working folder {jobs_minutes:.1f} min of wall time, "
                  f"{args.jobs} at a time"]
    text_lines += [f"- {key}: {value}" for key, value in info.items()]
    text_lines += [
        f"- Command: `python bench/e2e.py {shlex.join(sys.argv[1:] if argv is None else list(argv))}`",
        f"- Collection: ECB+ all 43 topics ({Dataset(dataset).manifest['counts']['passages']:,} passages); "
        f"rows on a seeded sample of {len(sample_ids):,} of the {len(test_queries):,} test queries.",
        "- Retriever: BM25 (mention + named entities, RM3) and the dense retriever with markers of "
        f"bench/dense.py fused by RRF, top {K}; the readers re-rank its top {RERANK_K}; the rest keeps the "
        "retriever's order below them.",
        "- Readers (CPU budget): cross-encoders on all-MiniLM-L6-v2 (bundled; the reader \"from the retriever's "
        f"encoder\" starts from the trained retriever's query encoder instead), {args.epochs} epoch(s) on "
        f"{args.train_queries:,} sampled train queries, 1 positive + {args.negatives} negatives from the "
        f"retriever's top 50 per query (the run it re-ranks, at k {K}), {args.batch_size} queries per step, "
        f"lr {args.lr:g} (head 1e-3), span weight {args.span_weight:g}, ranking loss {args.ranking_loss}, "
        "warm-up 10 %, max length 256, query window 64, stride 128, max span 10, integrated FFNN hidden 128; "
        f"the best epoch on {args.dev_queries} dev queries kept. Jobs ran {args.jobs} at a time, one thread each.",
        "- EM/F1: over the relevant passages among the re-ranked 50 (SQuAD normalisation; a predicted span "
        "counts only where it overlaps the query cluster's mention in that passage).",
        f"- Working folder: `{root}` (not kept in the repository).", "",
        f"### ECB+ test sample ({len(sample_ids):,} queries), metrics ×100 (trec), best in bold", "",
        markdown_table(["Run", *METRICS, "EM", "F1", "CPU s/query (re-rank 50)"], rows,
                       ["l"] + ["r"] * (len(METRICS) + 3)), "",
        "MRR@10 relative to BM25 on the same queries: "
        + "; ".join(f"{name.removeprefix('retriever + ')} {ratio:.2f}×" for name, ratio in ratios.items())
        + " (aim for the integrated reader: 1.3×; the paper's ratio on CoreSearch: 1.44×).", "",
        f"All {len(test_queries):,} test queries, for reference: "
        + "; ".join(f"{name} MRR@10 {100 * agg['MRR@10']:.2f}, R@50 {100 * agg['R@50']:.2f}"
                    for name, agg in full.items()) + ".", "",
        "### Reader training", "",
        markdown_table(["reader", "train queries", "steps", "minutes", "fusion chosen on dev",
                        "dev MRR@10 (retriever first)"], training, ["l", "r", "r", "r", "l", "l"]), "",
    ]
    retrieval = {name: seconds for name, seconds in timings(root).items()
                 if name.startswith(("retrieve", "train retriever", "encode"))}
    if retrieval:
        text_lines += ["The retriever (wall time; search at k 500 on one thread, the sampled train and dev queries "
                       "only): " + "; ".join(f"{name} {seconds:.0f} s" for name, seconds in retrieval.items()), ""]
    text_lines += ["### Reading", "", reading(values, ratios, dev_curves), ""]
    section = "\n".join(text_lines) + "\n"
    print(section)
    write_section(args.results, section, SECTION)
    log(f"done in {total_minutes:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
