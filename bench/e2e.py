"""End-to-end benchmark: the best retriever, then the DPR and the integrated readers re-ranking its top 50.

ECB+ events, collection = all 43 topics (15,812 passages), every test query (1,556) unless
``--test-queries N`` asks for a seeded sample. The retriever is the hybrid bench/hybrid.py chose on
dev: the dense retriever of bench/dense.py trained with mention markers, and BM25 with the
mention's sentence as the query over the sentence and document fields (weights 1 and 0.1), their
min-max normalised scores interpolated with dense weight 0.5; it retrieves the top 500 for the
train, dev and test queries. The readers of
``--readers`` (default: the integrated head with markers started from the trained retriever's query
encoder, the recipe the README gives, and the same from the bundled base for comparison) are trained by
``corefsearch train reader`` on its run of the train queries (all unless ``--train-queries N``),
searched as at inference (same retriever, k 500), with the positive and the negatives drawn from
its top 50 (``--negatives-from 50``, the depth they re-rank), the recipe options passed through;
``--dev-queries`` dev queries select the epoch and the fusion (the reader alone or RRF with the
retriever's ranks). Each reader re-ranks the retriever's top 50 of the test queries (``search
--reader``) and the rows are evaluated on those same queries: BM25, the retriever alone, each
reader alone and fused with the retriever's ranks (RRF), the fusion chosen on dev marked.
Both BM25 rows are shown: the paper's form (mention + named entities, RM3) and the strongest on dev
(the sentence over the fields). Columns: MRR@10, mAP@10, mAP@50, R@10, R@50 (trec definition), span EM and F1 (SQuAD
normalisation; the relevant re-ranked passages, a prediction counting only where it overlaps the
gold mention) and each row's MRR@10 over BM25's.

Also reported: each reader's training time; the seconds per query to re-rank 50 passages with
the torch, ONNX fp32 and ONNX int8 backends (``corefsearch export-onnx``, ``search --backend``)
for the readers of ``--onnx-readers``, on ``--rerank-threads`` threads with nothing else running,
with each backend's quality on the same queries; and the learning curve the recipe is chosen
from: the integrated reader with markers trained on ``--curve`` train queries (``train reader
--max-train-queries N``, same recipe) and on all of them, against its dev MRR@10 by both fusions
(``dev_curve.json``).

Jobs are CLI subprocesses, as many at a time as fit in ``--jobs`` x ``--threads`` cores (a
training takes ``--threads`` threads, a retrieval one, a timed re-ranking ``--rerank-threads``).
It reuses the ECB+ all-topics dataset, Lucene index, trained retriever (with markers) and dense
index of a bench/dense.py working folder given as ``--dense-dir``; what is missing there is made
with bench/dense.py's own steps and settings (about 25 minutes on 2 cores). With ``--out-dir``,
what is already there is reused, so an interrupted run can be started again (an interrupted
training resumes from its checkpoint); a reader there trained with other options or on another
run is refused. Wall times of every job and of every invocation are kept in the working folder
and reported, against ``--budget-minutes`` when given.

Writes ``## End to end with readers (bench/e2e.py)`` in bench/RESULTS.md (``--results``).

Run: ``python bench/e2e.py [--dense-dir D] [--out-dir DIR] [--readers integrated-markers,dpr-markers]
[--negatives 11] [--epochs 1] [--curve 400,800,1600] [--budget-minutes 240]``.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import machine, markdown_table, write_section  # noqa: E402

from corefsearch.datasets.dataset import read_queries  # noqa: E402
from corefsearch.io.trec import read_run, write_qrels
from corefsearch.io.write import sha256_file

SECTION = "## End to end with readers (bench/e2e.py)"
METRICS = ("MRR@10", "mAP@10", "mAP@50", "R@10", "R@50")
COLUMNS = (*METRICS, "EM", "F1")
K, RERANK_K = 500, 50
# --readers key: (row name, head, markers, encoder the reader starts from: the bundled base model,
# or the trained retriever's query encoder, which already knows the markers and the events)
READERS = {
    "integrated-markers": ("integrated reader, markers", "integrated", True, "base"),
    "dpr-markers": ("DPR reader, markers", "dpr", True, "base"),
    "integrated-no-markers": ("integrated reader, no markers", "integrated", False, "base"),
    "dpr-no-markers": ("DPR reader, no markers", "dpr", False, "base"),
    "integrated-markers-from-retriever": ("integrated reader, markers, from the retriever's encoder", "integrated",
                                          True, "retriever"),
}
CURVE_READER = "integrated-markers"  # the learning curve's reader (the aims are about it)
BACKENDS = ("torch", "onnx", "onnx-int8")
BM25_ROW = "BM25 mention+entities + RM3"  # the paper's form: each ratio column is against it
FIELDS_ROW = "BM25 sentence fields (sentence 1, document 0.1)"  # the strongest BM25 form on dev
RETRIEVER_ROW = "retriever: hybrid (dense markers + BM25 sentence fields, interpolation α 0.5)"
# The hybrid dev chose (bench/hybrid.py): the dense retriever with markers and the field-weighted
# sentence query, min-max normalised scores interpolated with the dense weight 0.5.
HYBRID = ("--retriever", "hybrid", "--query-format", "sentence", "--fields", "sentence=1,document=0.1",
          "--fusion", "interpolate", "--alpha", "0.5")
CLI = [sys.executable, "-m", "corefsearch.cli"]


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def timings(root: Path) -> dict[str, float]:
    """Wall seconds of every job run in ``root`` so far (kept across invocations)."""
    path = root / "timings.json"
    return json.loads(path.read_text()) if path.exists() else {}


@dataclass
class Job:
    """A CLI command run as a subprocess on ``threads`` threads, once the jobs named in ``after`` are done."""

    name: str
    command: list[str]
    threads: int = 1
    after: tuple[str, ...] = ()


def run_jobs(jobs: Sequence[Job], cores: int, root: Path) -> None:
    """Run ``jobs``, as many at a time as fit in ``cores`` (a job takes its ``threads``; torch and
    ONNX Runtime read them from OMP_NUM_THREADS). The first job (in list order) whose ``after`` jobs
    are done starts as soon as its threads are free, and the jobs behind it wait: a job that needs
    every core is not overtaken for ever by one-thread jobs, and a timed one runs alone. A job named
    in ``after`` but not in ``jobs`` counts as done (an earlier invocation ran it). A failed job stops
    the benchmark, naming its log; the wall seconds of each job go to ``timings.json``."""
    names = {job.name for job in jobs}
    pending, running, done = list(jobs), [], set()
    while pending or running:
        while pending:
            ready = next((job for job in pending if all(a in done or a not in names for a in job.after)), None)
            busy = sum(job.threads for job, *_ in running)
            if ready is None or (running and busy + ready.threads > cores):
                break
            pending.remove(ready)
            threads = str(ready.threads)
            env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "COREFSEARCH_QUIET": "1"}
            log(f"start {ready.name} ({ready.threads} thread{'s' if ready.threads > 1 else ''}): "
                f"{shlex.join(ready.command[3:])}")
            handle = (root / f"{ready.name.replace(' ', '_').replace(',', '')}.log").open("w")
            running.append((ready, subprocess.Popen(ready.command, env=env, stdout=handle, stderr=subprocess.STDOUT),
                            time.perf_counter(), handle))
        if not running:  # a job waits for one that is neither done nor pending: cannot happen, but never spin
            raise SystemExit(f"cannot start {pending[0].name}: it waits for {', '.join(pending[0].after)}")
        time.sleep(2)
        for item in list(running):
            job, process, started, handle = item
            if process.poll() is None:
                continue
            handle.close()
            running.remove(item)
            if process.returncode != 0:
                for _, other, _, other_handle in running:  # the benchmark stops: so do its other jobs,
                    other.send_signal(signal.SIGINT)  # as on Ctrl-C (a training checkpoints, to resume)
                    try:
                        other.wait(timeout=300)
                    except subprocess.TimeoutExpired:
                        other.kill()
                    other_handle.close()
                raise SystemExit(f"{job.name} failed; see {handle.name}")
            seconds = time.perf_counter() - started
            log(f"done {job.name} in {seconds / 60:.1f} min")
            record_timing(root, job.name, seconds)
            done.add(job.name)


def search(index: Path, queries: Path, out: Path, extra: Sequence[str] = (), threads: int = 1) -> list[str]:
    return [*CLI, "search", "--index", str(index), "--queries", str(queries), "--out", str(out), "--k", str(K),
            *HYBRID, "--device", "cpu",
            "--threads", str(threads), *extra]


def searched(run: Path, queries: Path) -> bool:
    """Whether ``run`` was written, to the end, for exactly the queries of ``queries`` (its
    ``RUN.meta.json``, written last, holds their checksum)."""
    meta = Path(f"{run}.meta.json")
    if not (run.exists() and meta.exists()):
        return False
    return json.loads(meta.read_text(encoding="utf-8")).get("queries_sha256") == sha256_file(queries)


def fuse_with_retriever(reranked: Path, retrieved: Path, qids: set[str], root: Path) -> Path:
    """``search --reader … --rerank-fusion rrf`` from the reader's spans and the retriever's run,
    without reading the passages again."""
    from corefsearch.base.schema import Hit
    from corefsearch.evaluate.metrics import rank_documents
    from corefsearch.io.read import read_jsonl
    from corefsearch.io.trec import RunRow, write_run
    from corefsearch.reader.read import ReaderHit
    from corefsearch.reader.rerank import order_reranked

    read: dict[str, list[ReaderHit]] = {}
    for _, record in read_jsonl(Path(f"{reranked}.spans.jsonl")):
        read.setdefault(record["qid"], []).append(ReaderHit(record["passage_id"], record["score"], record["start"],
                                                            record["end"], record["text"]))
    run = read_run(retrieved)
    rows = []
    for qid in sorted(qids):
        ranked = [Hit(pid, run[qid][pid]) for pid in rank_documents(run.get(qid, {}))]
        mine = sorted(read.get(qid, []), key=lambda h: -h.score)
        # The passages the reader read head the retriever's list: passages tied in score at the
        # re-ranking depth may be ordered otherwise in the run file than in the search that read them.
        read_ids = {h.passage_id for h in mine}
        hits = [h for h in ranked if h.passage_id in read_ids] + [h for h in ranked if h.passage_id not in read_ids]
        fused = order_reranked(mine, hits, RERANK_K, fusion="rrf")
        rows += [RunRow(qid, hit.passage_id, rank, hit.score, "rrf") for rank, hit in enumerate(fused, 1)]
    out = root / f"{reranked.stem}-rrf.trec"
    write_run(out, rows)
    return out


def invocations(root: Path) -> list[dict[str, Any]]:
    """The invocations of the benchmark in ``root`` so far: start, minutes, arguments."""
    path = root / "invocations.json"
    return json.loads(path.read_text()) if path.exists() else []


def record_invocation(root: Path, started: dt.datetime, clock: float, argv: list[str]) -> None:
    recorded = [*invocations(root), {"started": started.isoformat(timespec="seconds"),
                                     "minutes": round((time.perf_counter() - clock) / 60, 2), "arguments": argv}]
    (root / "invocations.json").write_text(json.dumps(recorded, indent=2) + "\n")


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
    lucene_index = lucene(dataset, dense_dir, fields=True)
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


def sample_queries(dataset: Path, split: str, size: int | None, root: Path) -> Path:
    """The queries of ``split``: the dataset's own file when ``size`` is None (all) or not smaller,
    else a seeded sample of ``size`` (in file order) as ``ROOT/SPLIT-sample-SIZE.jsonl``."""
    source = dataset / "queries" / f"{split}.jsonl"
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    if size is None or size >= len(lines):
        return source
    chosen = sorted(random.Random(13).sample(range(len(lines)), size))
    out = root / f"{split}-sample-{size}.jsonl"
    out.write_text("".join(lines[i] for i in chosen), encoding="utf-8")
    return out


def count_or_all(text: str) -> int | None:
    """``all`` (None) or a positive count."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'all', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number or 'all', got {text!r}")
    return value


def reader_keys(text: str) -> list[str]:
    """Comma-separated keys of READERS (``none``: no reader)."""
    keys = [key.strip() for key in text.split(",") if key.strip() and key.strip().lower() != "none"]
    unknown = [key for key in keys if key not in READERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown reader {unknown[0]!r}; choose among {', '.join(READERS)}")
    return list(dict.fromkeys(keys))


def counts(text: str) -> list[int]:
    """Comma-separated positive counts, e.g. ``400,800,1600`` (``none``: no point), sorted."""
    values = set()
    for part in text.split(","):
        if part.strip() and part.strip().lower() != "none":
            value = count_or_all(part)
            if value is None:
                raise argparse.ArgumentTypeError("the curve's points are numbers of train queries; all is always "
                                                 "its last point (the reader of --readers integrated-markers)")
            values.add(value)
    return sorted(values)


def recipe(args: argparse.Namespace, key: str, max_train_queries: int | None) -> dict[str, Any]:
    """The options of ``train reader`` for reader ``key``, as its ``training_args.json`` records them."""
    _, head, markers, _ = READERS[key]
    return {"head": head, "markers": markers, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
            "negatives": args.negatives, "negatives_from": RERANK_K, "span_weight": args.span_weight,
            "ranking_loss": args.ranking_loss, "max_steps": args.max_steps, "max_train_queries": max_train_queries,
            "dev_max_queries": args.dev_queries}


def train_command(dataset: Path, run: Path, out: Path, options: dict[str, Any], threads: int,
                  base_model: Path | None) -> list[str]:
    """``corefsearch train reader`` with ``options`` (from ``recipe``). ``--overwrite`` retrains a
    folder whose training never finished: an interrupted run with the same options resumes from
    its checkpoint (``.OUT.training/``), one with other options is discarded."""
    command = [*CLI, "train", "reader", str(dataset), "--run", str(run), "--out", str(out),
               "--head", options["head"], "--markers" if options["markers"] else "--no-markers"]
    for key, value in options.items():
        if key not in ("head", "markers") and value is not None:
            command += [f"--{key.replace('_', '-')}", str(value)]
    command += ["--threads", str(threads), "--device", "cpu", "--overwrite"]
    return command + (["--base-model", str(base_model)] if base_model is not None else [])


def check_reader(folder: Path, options: dict[str, Any], run: Path, run_sha256: str) -> None:
    """Refuse a reader in ``folder`` trained with other options than ``options`` or on another run:
    reusing it would report it under this invocation's settings."""
    record = json.loads((folder / "training_args.json").read_text(encoding="utf-8"))
    found = record.get("options", {})
    differences = [f"{key} {found.get(key)!r} instead of {value!r}" for key, value in options.items()
                   if found.get(key) != value]
    if record.get("run_sha256") != f"sha256:{run_sha256}":
        differences.append(f"another run than {run}")
    if differences:
        raise SystemExit(f"{folder} was trained with other settings ({'; '.join(differences)}): give another "
                         f"--out-dir, or delete {folder} to train it again")


def onnx_exported(folder: Path) -> bool:
    """Whether ``folder`` holds an ONNX export (fp32 and int8) of the weights it holds now."""
    from corefsearch.base.errors import CorefSearchError
    from corefsearch.base.onnx_backend import check_onnx_export

    try:
        for backend in ("onnx", "onnx-int8"):
            check_onnx_export(folder, backend)
    except CorefSearchError:
        return False
    return True


def pct(value: float) -> str:
    return f"{100 * value:.2f}"


def reading(values: dict[str, dict[str, float]], rows_of: dict[str, tuple[str, str]], chosen: dict[str, str],
            speed: list[dict[str, Any]], curve: list[dict[str, Any]], rerank_threads: int) -> str:
    """What the tables say, in words (generated from the numbers), against the aims stated in bench/README.md."""
    bm25, retriever = values[BM25_ROW], values[RETRIEVER_ROW]
    sentences = [f"On these queries BM25 has MRR@10 {pct(bm25['MRR@10'])} and the retriever "
                 f"{pct(retriever['MRR@10'])} ({retriever['MRR@10'] / bm25['MRR@10']:.2f}× BM25)."]

    def against(row: dict[str, float], metric: str) -> str:
        return f"{pct(row[metric])} ({100 * (row[metric] - retriever[metric]):+.2f} against the retriever)"

    for key, (alone, fused) in rows_of.items():
        sentences.append(f"The {READERS[key][0]} re-ranking the top {RERANK_K}, alone: MRR@10 "
                         f"{against(values[alone], 'MRR@10')}, mAP@10 {against(values[alone], 'mAP@10')}; fused "
                         f"with the retriever's ranks (RRF): MRR@10 {against(values[fused], 'MRR@10')}; the dev "
                         f"queries chose {'RRF' if chosen[key] == 'rrf' else 'the reader alone'}.")
    if CURVE_READER in rows_of:
        alone = values[rows_of[CURVE_READER][0]]
        met = alone["MRR@10"] >= retriever["MRR@10"] and alone["mAP@10"] >= retriever["mAP@10"]
        sentences.append("Aim 1, the integrated reader with markers alone at least the retriever's MRR@10 and "
                         f"mAP@10: {'met' if met else 'missed'}.")
    end_to_end = [name for name in values if name not in (BM25_ROW, FIELDS_ROW)]  # the retriever (+ readers)
    best = max(end_to_end, key=lambda name: values[name]["MRR@10"])
    ratio = values[best]["MRR@10"] / bm25["MRR@10"]
    sentences.append(f"Aim 2, the best end-to-end row at least 1.3× BM25's MRR@10 (the paper: 1.44×): the best "
                     f"row is {best} at {ratio:.2f}×, {'met' if ratio >= 1.3 else 'missed'}.")
    spans = {name: row["F1"] for name, row in values.items() if "F1" in row}
    if spans:
        best_span = max(spans, key=spans.get)
        sentences.append(f"Aim 3, span F1 at least 70: the best F1 is {pct(spans[best_span])} ({best_span}, EM "
                         f"{pct(values[best_span]['EM'])}), {'met' if spans[best_span] >= 0.70 else 'missed'}.")
    for key in dict.fromkeys(row["key"] for row in speed):
        mine = {row["backend"]: row for row in speed if row["key"] == key}
        fits = [backend for backend, row in mine.items() if row["seconds"] <= 0.5
                and ("torch" not in mine or 100 * (mine["torch"]["MRR@10"] - row["MRR@10"]) <= 0.5)]
        sentences.append(
            f"Speed of the {READERS[key][0]} on {rerank_threads} thread{'s' if rerank_threads > 1 else ''}, "
            + ", ".join(f"{backend} {row['seconds']:.3f} s/query (MRR@10 {pct(row['MRR@10'])})"
                        for backend, row in mine.items())
            + "; aim 4, at most 0.5 s per query with at most 0.5 points of MRR@10 lost to torch: "
            + (f"met by {', '.join(fits)}." if fits else "missed."))
    if len(curve) > 1:
        first, last = curve[0], curve[-1]
        sentences.append(
            f"Learning curve (dev, the integrated reader with markers): MRR@10 alone {pct(first['MRR@10'])} at "
            f"{first['queries']:,} train queries to {pct(last['MRR@10'])} at {last['queries']:,} "
            f"({100 * (last['MRR@10'] - first['MRR@10']):+.2f}), with RRF {pct(first['MRR@10 rrf'])} to "
            f"{pct(last['MRR@10 rrf'])}, against the retriever's {pct(last['retriever'])} on the same dev queries.")
    return " ".join(sentences)


def restrict_run(run: dict[str, dict[str, float]], qids: set[str]) -> dict[str, dict[str, float]]:
    return {qid: hits for qid, hits in run.items() if qid in qids}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dense-dir", type=Path, default=None,
                        help="working folder of bench/dense.py (default: OUT_DIR/dense; what is missing is made)")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="working folder (default: a new temporary one); what is there is reused")
    parser.add_argument("--readers", type=reader_keys,
                        default=reader_keys("integrated-markers-from-retriever,integrated-markers"),
                        help=f"readers to train and report, comma-separated among {', '.join(READERS)} "
                             "(default: integrated-markers-from-retriever,integrated-markers)")
    parser.add_argument("--onnx-readers", type=reader_keys, default=reader_keys("integrated-markers"),
                        help="readers (among --readers) also timed with ONNX fp32 and int8 (default: "
                             "integrated-markers; none: torch only)")
    parser.add_argument("--test-queries", type=count_or_all, default=None,
                        help="test queries: all (default) or a seeded sample of N")
    parser.add_argument("--train-queries", type=count_or_all, default=None,
                        help="train queries searched and trained on: all (default) or a seeded sample of N")
    parser.add_argument("--dev-queries", type=int, default=200,
                        help="dev queries (a seeded sample) that select the epoch and the fusion")
    parser.add_argument("--curve", type=counts, default=counts("400,800,1600"),
                        help="the learning curve's train query counts below all (default 400,800,1600; none: no "
                             "curve)")
    parser.add_argument("--negatives", type=int, default=11)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5e-5)
    # 2: chosen on dev among the 1-epoch recipes (bench/RESULTS.md, "Readers on a GPU")
    parser.add_argument("--span-weight", type=float, default=2.0)
    parser.add_argument("--ranking-loss", choices=("softmax", "softmax+pairwise"), default="softmax")
    parser.add_argument("--max-steps", type=int, default=None, help="train reader --max-steps (quick runs)")
    parser.add_argument("--jobs", type=int, default=2, help="trainings at a time (default 2)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads of each training (default 1); the benchmark uses --jobs x --threads cores")
    parser.add_argument("--rerank-threads", type=int, default=None,
                        help="threads of each re-ranking, which runs alone (default: every core of the benchmark)")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="the wall-clock budget to state, with the time used, in the results")
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args(argv)
    cores = args.jobs * args.threads
    rerank_threads = args.rerank_threads or cores
    if min(args.jobs, args.threads, rerank_threads, args.dev_queries) < 1:
        parser.error("--jobs, --threads, --rerank-threads and --dev-queries must be at least 1")
    if rerank_threads > cores:
        parser.error(f"--rerank-threads {rerank_threads} is more than the benchmark's {cores} cores "
                     "(--jobs x --threads)")
    onnx_readers = [key for key in args.onnx_readers if key in args.readers]
    started = dt.datetime.now()
    clock = time.perf_counter()
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-e2e-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"working in {root}")
    # Every invocation's wall time goes to ROOT/invocations.json when it ends (finished, failed or
    # interrupted), so that the results state the time all of them took.
    atexit.register(record_invocation, root, started, clock, sys.argv[1:] if argv is None else list(argv))

    from corefsearch.datasets.dataset import Dataset
    from corefsearch.evaluate import evaluate_files, evaluate_run
    from corefsearch.io.trec import read_qrels

    dataset, lucene_index, retriever, flat = prepare_retriever(args.dense_dir or root / "dense", root)
    index = root / "index"  # the Lucene and the dense index of bench/dense.py side by side
    index.mkdir(exist_ok=True)
    for kind, source in (("lucene", lucene_index / "lucene"), ("dense", flat / "dense")):
        if not (index / kind).exists():
            (index / kind).symlink_to(source.resolve(), target_is_directory=True)

    # The retriever's runs, at k 500: train + dev (reader training, as at inference), test (the rows).
    queries = {"train": sample_queries(dataset, "train", args.train_queries, root),
               "dev": sample_queries(dataset, "dev", args.dev_queries, root),
               "test": sample_queries(dataset, "test", args.test_queries, root)}
    every_test = dataset / "queries" / "test.jsonl"
    runs = {split: root / f"hybrid-{path.stem}.trec" for split, path in queries.items()}
    bm25_run = root / f"bm25-{queries['test'].stem}.trec"
    fields_run = root / f"bm25-fields-{queries['test'].stem}.trec"
    jobs = [Job(f"retrieve {split}", search(index, queries[split], runs[split])) for split in queries
            if not searched(runs[split], queries[split])]
    if not searched(bm25_run, queries["test"]):
        jobs.append(Job("retrieve test BM25", [*CLI, "search", "--index", str(index), "--queries",
                                               str(queries["test"]), "--out", str(bm25_run), "--k", str(K),
                                               "--query-format", "mention+entities", "--rm3", "--threads", "1"]))
    if not searched(fields_run, queries["test"]):
        jobs.append(Job("retrieve test BM25 fields", [*CLI, "search", "--index", str(index), "--queries",
                                                      str(queries["test"]), "--out", str(fields_run), "--k", str(K),
                                                      "--query-format", "sentence", "--fields",
                                                      "sentence=1,document=0.1", "--threads", "1"]))
    run_jobs(jobs, cores, root)
    training_run = root / f"hybrid-{queries['train'].stem}+{queries['dev'].stem}.trec"
    training_run.write_text(runs["train"].read_text() + runs["dev"].read_text())
    run_sha256 = sha256_file(training_run)
    train_count = len(read_queries(queries["train"]))
    curve_points = [n for n in args.curve if n < train_count]  # all of them is the curve's last point
    if len(curve_points) < len(args.curve):
        log(f"curve points at or above the {train_count:,} train queries dropped (all of them is the last point)")

    test_ids = {query.id for query in read_queries(queries["test"])}
    tag = "all" if queries["test"] == every_test else f"sample-{len(test_ids)}"
    qrels_all = read_qrels(dataset / "qrels" / "test.txt")
    test_qrels = root / f"test-{tag}.qrels"
    write_qrels(test_qrels, [(q, d, r) for q, judged in qrels_all.items() if q in test_ids
                             for d, r in judged.items()])

    # The readers (and the curve's points): train the missing ones; export and re-rank with each backend.
    trained = list(dict.fromkeys([*args.readers, *([CURVE_READER] if args.curve else [])]))
    models = {key: root / f"reader-{key}" for key in trained}
    curve_models = {n: root / f"curve-{CURVE_READER}-{n}" for n in curve_points}
    trainings = [(f"train {key}", models[key], key, None) for key in trained]
    trainings += [(f"train curve {n}", curve_models[n], CURVE_READER, n) for n in reversed(curve_points)]
    backends = {key: BACKENDS if key in onnx_readers else ("torch",) for key in args.readers}
    reranked = {(key, backend): root / f"rerank-{key}-{backend}-test-{tag}.trec"
                for key in args.readers for backend in backends[key]}
    jobs = []
    for name, folder, key, max_train_queries in trainings:
        options = recipe(args, key, max_train_queries)
        if (folder / "corefsearch_reader.json").exists():
            check_reader(folder, options, training_run, run_sha256)
            continue
        if max_train_queries is None:  # re-rankings (runs, spans, metadata) by an earlier reader of this folder
            for backend in BACKENDS:
                for path in root.glob(f"rerank-{key}-{backend}-test-*"):
                    path.unlink()
        base = retriever if READERS[key][3] == "retriever" else None  # a retriever folder: its query encoder
        jobs.append(Job(name, train_command(dataset, training_run, folder, options, args.threads, base),
                        args.threads))
    for key in onnx_readers:
        if not onnx_exported(models[key]):
            jobs.append(Job(f"export-onnx {key}", [*CLI, "export-onnx", str(models[key])], 1, (f"train {key}",)))
    for (key, backend), path in reranked.items():
        if not searched(path, queries["test"]):
            jobs.append(Job(f"rerank {key} {backend} test-{tag}", search(
                index, queries["test"], path, ["--reader", str(models[key]), "--rerank-k", str(RERANK_K),
                                               # the reader's order alone; the RRF rows are fused below
                                               "--rerank-fusion", "reader", "--backend", backend],
                rerank_threads), rerank_threads,
                (f"train {key}", *([f"export-onnx {key}"] if backend != "torch" else []))))
    run_jobs(jobs, cores, root)

    # Rows: BM25, the retriever, each reader alone and fused by RRF with the retriever's ranks.
    def scores(run: Path, spans: Path | None = None) -> dict[str, float]:
        evaluation = evaluate_files([run], test_qrels, spans_paths=[spans] if spans else None,
                                    dataset=dataset if spans else None)[0]
        return {m: evaluation.aggregate[m] for m in (COLUMNS if spans else METRICS)}

    qrels = read_qrels(test_qrels)
    values: dict[str, dict[str, float]] = {}
    for name, path in ((BM25_ROW, bm25_run), (FIELDS_ROW, fields_run), (RETRIEVER_ROW, runs["test"])):
        evaluation = evaluate_run(restrict_run(read_run(path), test_ids), qrels, "trec", name)
        values[name] = {m: evaluation.aggregate[m] for m in METRICS}
    rows_of: dict[str, tuple[str, str]] = {}
    chosen: dict[str, str] = {}
    for key in args.readers:
        name, path = READERS[key][0], reranked[(key, "torch")]
        spans = Path(f"{path}.spans.jsonl")
        rows_of[key] = (f"retriever + {name}", f"retriever + {name}, RRF with the retriever")
        values[rows_of[key][0]] = scores(path, spans)
        values[rows_of[key][1]] = scores(fuse_with_retriever(path, runs["test"], test_ids, root), spans)
        record = json.loads((models[key] / "training_args.json").read_text(encoding="utf-8"))
        chosen[key] = (record.get("fusion") or {}).get("chosen", "reader")
    marked = {rows_of[key][0 if fusion == "reader" else 1] for key, fusion in chosen.items()}
    best = {m: max(v.get(m, float("-inf")) for v in values.values()) for m in COLUMNS}
    bm25_mrr, fields_mrr = values[BM25_ROW]["MRR@10"], values[FIELDS_ROW]["MRR@10"]
    rows = []
    for name, metrics in values.items():
        cells = [("–" if m not in metrics else f"**{pct(metrics[m])}**" if metrics[m] == best[m] else pct(metrics[m]))
                 for m in COLUMNS]
        label = f"{name} (fusion chosen on dev)" if name in marked else name
        rows.append([label, *cells, f"{metrics['MRR@10'] / bm25_mrr:.2f}×", f"{metrics['MRR@10'] / fields_mrr:.2f}×"])

    # Speed: seconds per query to re-rank 50 (the reader's part of `search`), and each backend's quality.
    speed: list[dict[str, Any]] = []
    for (key, backend), path in reranked.items():
        meta = json.loads(Path(f"{path}.meta.json").read_text(encoding="utf-8"))
        speed.append({"key": key, "backend": backend, "seconds": meta["reader"]["seconds"] / meta["n_queries"],
                      **scores(path, Path(f"{path}.spans.jsonl"))})
    speed_rows = []
    for row in speed:
        torch_row = next(r for r in speed if r["key"] == row["key"] and r["backend"] == "torch")
        speed_rows.append([READERS[row["key"]][0], row["backend"], str(rerank_threads), f"{row['seconds']:.3f}",
                           f"{torch_row['seconds'] / row['seconds']:.2f}×", pct(row["MRR@10"]),
                           "–" if row is torch_row else f"{100 * (row['MRR@10'] - torch_row['MRR@10']):+.2f}",
                           pct(row["mAP@10"]),
                           pct(row["EM"]), pct(row["F1"])])

    # Training: time, steps and dev curve of every reader; the learning curve of the integrated reader.
    times = timings(root)
    training_rows = []
    curve: list[dict[str, Any]] = []
    for name, folder, key, max_train_queries in trainings:
        record = json.loads((folder / "training_args.json").read_text(encoding="utf-8"))
        dev_curve = json.loads((folder / "dev_curve.json").read_text(encoding="utf-8"))
        seconds, steps = times.get(name), record["counts"]["total_steps"]
        fusion = record.get("fusion") or {}
        label = READERS[key][0] + (f", {max_train_queries:,} train queries (curve)" if max_train_queries else "")
        training_rows.append([
            label, f"{record['counts']['train_queries']:,}", f"{steps:,}", str(args.threads),
            f"{seconds / 60:.1f}" if seconds else "(not timed)", fusion.get("chosen", "reader"),
            "; ".join("retriever " + pct(p["MRR@10"]) if p["epoch"] == 0 else
                      f"epoch {p['epoch']} {pct(p['MRR@10'])} / "
                      + (pct(p["MRR@10 rrf"]) if p.get("MRR@10 rrf") is not None else "–")
                      for p in dev_curve if p.get("MRR@10") is not None)])
        if key == CURVE_READER and (max_train_queries is not None or args.curve):
            kept = next((p for p in dev_curve if p["epoch"] == record.get("best_epoch")), None)
            if kept is not None and kept.get("MRR@10") is not None:
                curve.append({"queries": record["counts"]["train_queries"], "all": max_train_queries is None,
                              "steps": steps, "seconds": seconds,
                              "epoch": kept["epoch"], "MRR@10": kept["MRR@10"],
                              "MRR@10 rrf": kept.get("MRR@10 rrf"), "fusion": fusion.get("chosen", "reader"),
                              "retriever": dev_curve[0]["MRR@10"]})
    curve.sort(key=lambda point: point["queries"])
    curve_rows = [[f"{p['queries']:,}" + (" (all)" if p["all"] else ""), f"{p['steps']:,}",
                   f"{p['seconds'] / 60:.1f}" if p["seconds"] else "–",
                   str(p["epoch"]), pct(p["MRR@10"]), pct(p["MRR@10 rrf"]) if p["MRR@10 rrf"] is not None else "–",
                   p["fusion"]] for p in curve]

    # Wall time: this invocation, every invocation in this folder, each kind of job.
    total_minutes = (time.perf_counter() - clock) / 60
    earlier = invocations(root)  # this one is recorded on exit
    elapsed = sum(item["minutes"] for item in earlier) + total_minutes
    phases = {"build the retriever": ("train retriever", "encode"), "search at k 500": ("retrieve",),
              "train the readers": ("train ",), "export to ONNX": ("export-onnx",), "re-rank the test queries":
              ("rerank",)}
    phase_minutes = dict.fromkeys(phases, 0.0)
    for name, seconds in times.items():  # each job in the first phase it belongs to ("train retriever" first)
        phase = next((phase for phase, prefixes in phases.items() if name.startswith(prefixes)), None)
        if phase is not None:
            phase_minutes[phase] += seconds / 60
    budget = ""
    if args.budget_minutes is not None:
        over = elapsed - args.budget_minutes
        budget = f"; budget {args.budget_minutes:.0f} min: " + (f"over by {over:.0f} min" if over > 0 else "within it")

    info = machine()
    command = shlex.join(sys.argv[1:] if argv is None else list(argv))
    test_total = len(read_queries(every_test))
    text_lines = [
        SECTION, "",
        f"- Date: {started:%Y-%m-%d %H:%M} (local time). Wall time: this invocation {total_minutes:.1f} min; all "
        f"{len(earlier) + 1} invocation(s) in this working folder {elapsed:.1f} min{budget}. Jobs' wall time summed "
        "(jobs overlap on the cores): " + "; ".join(f"{phase} {minutes:.1f} min" for phase, minutes
                                                     in phase_minutes.items() if minutes) + ".",
        f"- Cores used: {cores} ({args.jobs} training job(s) at a time × {args.threads} thread(s); searches one thread "
        f"each; re-rankings on {rerank_threads} thread(s), "
        + ("each alone)." if rerank_threads == cores else f"{cores // rerank_threads} at a time).")]
    text_lines += [f"- {key}: {value}" for key, value in info.items()]
    text_lines += [
        f"- Command: `python bench/e2e.py {command}`",
        f"- Collection: ECB+ events, every topic ({Dataset(dataset).manifest['counts']['passages']:,} passages); "
        + (f"rows on all {test_total:,} test queries." if tag == "all" else
           f"rows on a seeded sample of {len(test_ids):,} of the {test_total:,} test queries."),
        "- Retriever: the dense retriever with markers of bench/dense.py and BM25 over the sentence and "
        "document fields (sentence query, weights 1 and 0.1), min-max normalised and interpolated with dense "
        f"weight 0.5 (the hybrid bench/hybrid.py chose on dev), top {K}; the readers re-rank its top {RERANK_K}; "
        "the rest keeps the "
        "retriever's order below them.",
        "- Readers (`corefsearch train reader`): cross-encoders on all-MiniLM-L6-v2 (bundled; \"from the retriever's "
        f"encoder\": the trained retriever's query encoder instead), {args.epochs} epoch(s) on "
        f"{train_count:,} train queries ({'all' if args.train_queries is None else 'a seeded sample'}), searched "
        f"like the test queries (hybrid, k {K}); 1 positive + {args.negatives} negatives from the run's top "
        f"{RERANK_K} per query, {args.batch_size} queries per step, lr {args.lr:g} (head 1e-3), span weight "
        f"{args.span_weight:g}, ranking loss {args.ranking_loss}"
        + (f", at most {args.max_steps} steps" if args.max_steps else "")
        + f", warm-up 10 %, query window 64, max span 10, integrated FFNN hidden 128; the best epoch by dev MRR@10 "
        f"on {min(args.dev_queries, len(read_queries(queries['dev']))):,} dev queries kept, and the fusion (reader "
        "alone or RRF) with the better dev MRR@10 recorded.",
        "- EM/F1: over the relevant passages among the re-ranked 50 (SQuAD normalisation; a predicted span "
        "counts only where it overlaps the query cluster's mention in that passage).",
        f"- Working folder: `{root}` (not kept in the repository).", "",
        f"### ECB+ test queries ({len(test_ids):,}), metrics ×100 (trec), best in bold", "",
        markdown_table(["Run", *COLUMNS, "MRR@10 / BM25 m+e+RM3", "MRR@10 / BM25 fields"], rows,
                       ["l"] + ["r"] * (len(COLUMNS) + 2)), "",
        "Reader rows: re-ranked with torch, by the reader's score alone, and the same scores fused with the "
        "retriever's ranks by RRF (`--rerank-fusion rrf`); \"fusion chosen on dev\" marks the one `search` uses "
        "by default with that reader.", "",
    ]
    if speed_rows:
        text_lines += [
            f"### Re-ranking {RERANK_K} passages: seconds per query by backend", "",
            markdown_table(["reader", "backend", "threads", "s/query", "speed-up vs torch", "MRR@10",
                            "Δ MRR@10 vs torch", "mAP@10", "EM", "F1"], speed_rows,
                           ["l", "l", "r", "r", "r", "r", "r", "r", "r", "r"]), "",
            f"s/query: the reader's part of `search --reader --backend B` (reading every window of the top "
            f"{RERANK_K} and ordering them; not the retrieval), over the {len(test_ids):,} test queries, on "
            f"{rerank_threads} thread(s), "
            + ("with no other job running" if rerank_threads == cores else
               f"{cores // rerank_threads} re-rankings at a time") + ". ONNX: `corefsearch export-onnx` (fp32, and "
            "int8 by dynamic quantisation); quality on the same queries, the reader's order alone.", ""]
    text_lines += [
        "### Reader training", "",
        markdown_table(["reader", "train queries", "steps", "threads", "minutes", "fusion chosen on dev",
                        "dev MRR@10 (retriever first; per epoch: alone / RRF)"], training_rows,
                       ["l", "r", "r", "r", "r", "l", "l"]), "",
        "Minutes: wall time of `train reader` (loading, steps, dev evaluation after each epoch), "
        f"{args.jobs} at a time on {args.threads} thread(s) each (a training resumed from a checkpoint: the last "
        "invocation only).", ""]
    if curve_rows:
        text_lines += [
            "### Learning curve: train queries vs dev MRR@10 (integrated reader, markers)", "",
            f"Each point is one `train reader --max-train-queries N` with the recipe above (the last: all "
            f"{train_count:,}); dev MRR@10 at the epoch kept, by the reader alone and fused by RRF, on the same "
            f"dev queries, where the retriever alone has {pct(curve[-1]['retriever'])}.", "",
            markdown_table(["train queries", "steps", "minutes", "epoch kept", "dev MRR@10 alone", "dev MRR@10 RRF",
                            "fusion chosen"], curve_rows, ["r", "r", "r", "r", "r", "r", "l"]), ""]
    text_lines += ["### Reading", "", reading(values, rows_of, chosen, speed, curve, rerank_threads), ""]
    section = "\n".join(text_lines) + "\n"
    print(section)
    write_section(args.results, section, SECTION)
    log(f"done in {total_minutes:.1f} min (all invocations in {root}: {elapsed:.1f} min{budget})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
