"""Dense retriever benchmark: zero-shot and trained bi-encoders against BM25, and hybrids.

ECB+ events: train on the train topics, select on dev, report the test queries in both
collection settings of bench/bm25.py (test topics only; all 43 topics). Rows: BM25 (the
paper's best formulation, mention + named entities, with RM3), the dense zero-shot base
model, dense trained without and with mention markers, and BM25 + dense hybrids (RRF and
interpolation). WEC-Eng Dev: the ECB+-trained model zero-shot, and a model trained on a
WEC cluster split (train/dev/test = 0.6/0.2/0.2 of the clusters), on that split's test
queries; and on all WEC-Eng Dev clusters as queries.

Speed, measured in the same run: passages encoded per second against
``sentence-transformers``' ``encode`` of the same model (a ratio), FAISS flat against HNSW
query latency and the overlap of their top 500, and training time per epoch.

CPU budget: training runs ``--epochs`` epochs with ``--positives-per-query`` positives per
query (the paper uses every positive for 5 epochs on GPUs); every option is printed with
the results. Writes ``## Dense retrieval (bench/dense.py)`` in bench/RESULTS.md.

Run: ``python bench/dense.py [--out-dir DIR] [--epochs 1] [--positives-per-query 1] [--lr 3e-5]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import machine, markdown_table, write_section  # noqa: E402
from encode_speed import encode_as_indexed  # noqa: E402

from corefsearch.datasets.build import BuildOptions, build_dataset  # noqa: E402
from corefsearch.datasets.dataset import Dataset  # noqa: E402
from corefsearch.datasets.ecbplus import read_ecbplus  # noqa: E402
from corefsearch.datasets.wec import read_wec  # noqa: E402
from corefsearch.dense.encoder import DEFAULT_BATCH_SIZE  # noqa: E402
from corefsearch.evaluate import evaluate_run  # noqa: E402
from corefsearch.io.trec import read_qrels

ROOT = Path(__file__).resolve().parents[1]
ECBPLUS = ROOT / "data" / "ecbplus" / "ECBplus.tar.gz"
WEC = ROOT / "data" / "wec-eng" / "Dev_Event_gold_mentions_validated.json.gz"
SECTION = "## Dense retrieval (bench/dense.py)"
METRICS = ("MRR@10", "mAP@10", "mAP@50", "R@10", "R@100", "R@500")
K = 500


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


@dataclass
class Row:
    name: str
    metrics: dict[str, float]
    queries_per_second: float


@dataclass
class Table:
    title: str
    queries: int
    passages: int
    rows: list[Row] = field(default_factory=list)


def build(name: str, documents: Any, options: BuildOptions, root: Path) -> Path:
    out = root / name
    if not (out / "manifest.json").exists():
        build_dataset(documents, out, options, overwrite=True, source_name=name)
    return out


def lucene(dataset: Path, root: Path, fields: bool = False) -> Path:
    """The Lucene index of ``dataset``; ``fields=True`` with the fields of field-weighted BM25."""
    from corefsearch.sparse.index import build_lucene_index

    out = root / (f"{dataset.name}-index" + ("-fields" if fields else ""))
    if not (out / "lucene" / "manifest.json").exists():
        build_lucene_index(dataset, out, threads=2, overwrite=True, fields=fields)
    return out


def dense_index(dataset: Path, model: Any, name: str, root: Path, faiss_type: str = "flat") -> tuple[Path, float]:
    from corefsearch.dense.indexing import build_dense_index

    out = root / f"{dataset.name}-{name}-{faiss_type}"
    if (out / "dense" / "manifest.json").exists():
        return out, float("nan")
    summary = build_dense_index(dataset, out, model, faiss_type=faiss_type, overwrite=True)
    return out, summary.passages_per_second


def evaluate(searcher: Any, queries: list[Any], qrels: dict[str, dict[str, int]], name: str) -> Row:
    started = time.perf_counter()
    run = {query.id: {hit.passage_id: hit.score for hit in hits} for query, hits in searcher.search(queries, K)}
    seconds = time.perf_counter() - started
    evaluation = evaluate_run(run, qrels, "trec", name)
    return Row(name, {m: evaluation.aggregate[m] for m in METRICS}, len(queries) / seconds)


def train(dataset: Path, index: Path, out: Path, markers: bool, args: argparse.Namespace) -> tuple[Path, Any]:
    from corefsearch.dense.train import RetrieverTrainingArguments, train_retriever

    if (out / "corefsearch_retriever.json").exists():
        return out, None
    training = RetrieverTrainingArguments(markers=markers, pooling=args.pooling, epochs=args.epochs,
                                          batch_size=args.batch_size, lr=args.lr,
                                          positives_per_query=args.positives_per_query, max_steps=args.max_steps,
                                          dev_max_queries=args.dev_max_queries, seed=13)
    summary = train_retriever(dataset, out, training, index=index, overwrite=True, log=log)
    return out, summary


def table_markdown(table: Table) -> str:
    values = [[100 * row.metrics[m] for m in METRICS] for row in table.rows]
    best = [max(column) for column in zip(*values, strict=True)]
    rows = []
    for row, row_values in zip(table.rows, values, strict=True):
        cells = [f"**{v:.2f}**" if v == b else f"{v:.2f}" for v, b in zip(row_values, best, strict=True)]
        rows.append([row.name, *cells, f"{row.queries_per_second:,.0f}"])
    header = ["Run", *METRICS, "queries/s"]
    return (f"### {table.title}\n\n{table.queries:,} queries, {table.passages:,} passages; metrics ×100 "
            "(trec definition), best in bold; queries/s includes query encoding and, for BM25, NER.\n\n"
            + markdown_table(header, rows, ["l"] + ["r"] * (len(header) - 1)))


def encode_speed(model_path: str, texts: list[str], titles: list[str]) -> dict[str, float]:
    """Passages per second: ours (encoded as ``index --dense`` encodes) against sentence-transformers on the
    same model and texts, both in batches of the CPU default."""
    import torch
    from sentence_transformers import SentenceTransformer

    from corefsearch.dense.model import BiEncoder

    torch.set_num_threads(2)
    ours, batch = BiEncoder.load(model_path, device="cpu"), DEFAULT_BATCH_SIZE
    encode_as_indexed(ours, titles[:batch], texts[:batch], batch)  # warm-up
    started = time.perf_counter()
    encode_as_indexed(ours, titles, texts, batch)
    ours_rate = len(texts) / (time.perf_counter() - started)
    reference = SentenceTransformer(model_path, device="cpu")
    reference.max_seq_length = ours.config.max_passage_len
    joined = [f"{title} [SEP] {text}" if title else text for title, text in zip(titles, texts, strict=True)]
    reference.encode(joined[:batch], batch_size=batch)
    started = time.perf_counter()
    reference.encode(joined, batch_size=batch)
    reference_rate = len(texts) / (time.perf_counter() - started)
    return {"corefsearch": ours_rate, "sentence-transformers": reference_rate, "ratio": ours_rate / reference_rate}


def faiss_comparison(flat_index: Path, queries: list[Any]) -> dict[str, float]:
    """Exact (flat) against HNSW search over the same passage vectors, at k = 500: latency per
    query and the overlap of the two top-500 lists. HNSW is built from the flat index's vectors
    with the parameters ``index --faiss hnsw`` uses."""
    import numpy as np

    from corefsearch.dense import faiss_index
    from corefsearch.dense.search import DenseSearcher

    flat = DenseSearcher(flat_index, device="cpu")
    vectors = flat.encode(queries)
    passages = flat.faiss.reconstruct_n(0, flat.faiss.ntotal)
    parameters = faiss_index.faiss_parameters("hnsw", passages.shape[1], len(passages))
    started = time.perf_counter()
    hnsw = faiss_index.build_index(parameters, passages.shape[1], len(passages), lambda: [passages],
                                   lambda n: passages[:n])
    build_seconds = time.perf_counter() - started
    timings, results = {}, {}
    for name, index, params in (("flat", flat.faiss, flat.parameters), ("hnsw", hnsw, parameters)):
        faiss_index.configure_search(index, params, K)
        index.search(np.ascontiguousarray(vectors[:8]), K)  # warm-up
        started = time.perf_counter()
        _, rows = index.search(np.ascontiguousarray(vectors), K)
        timings[name] = 1000 * (time.perf_counter() - started) / len(queries)
        results[name] = rows
    overlaps = [len(set(a[a >= 0]) & set(b[b >= 0])) / K for a, b in zip(results["flat"], results["hnsw"], strict=True)]
    return {"flat_ms": timings["flat"], "hnsw_ms": timings["hnsw"], "hnsw_build_s": build_seconds,
            "overlap": sum(overlaps) / len(overlaps)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--positives-per-query", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--pooling", default="mean")
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--dev-max-queries", type=int, default=300)
    args = parser.parse_args(argv)
    started = dt.datetime.now()
    clock = time.perf_counter()
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-dense-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"working in {root}")

    from corefsearch.dense.model import BiEncoder
    from corefsearch.dense.search import DenseSearcher
    from corefsearch.fusion import FusionOptions
    from corefsearch.search.hybrid import HybridSearcher
    from corefsearch.sparse.search import BM25Options, BM25Searcher

    # Datasets and Lucene indexes.
    ecb_all = build("ecb-all", read_ecbplus(ECBPLUS), BuildOptions(), root)
    ecb_test = build("ecb-test", read_ecbplus(ECBPLUS), BuildOptions(splits=("test",)), root)
    wec_split = build("wec-split", read_wec(WEC), BuildOptions(split_ratios=(0.6, 0.2, 0.2)), root)
    wec_all = build("wec-all", read_wec(WEC), BuildOptions(split_ratios=(0, 0, 1)), root)
    lucene_index = {d: lucene(d, root) for d in (ecb_all, ecb_test, wec_split, wec_all)}
    log("datasets and Lucene indexes ready")

    # Training (ECB+ twice: without and with markers; WEC once).
    trained: dict[str, Path] = {}
    training_info: dict[str, Any] = {}
    for name, dataset, markers in (("ecb-markers", ecb_all, True), ("ecb-no-markers", ecb_all, False),
                                   ("wec-markers", wec_split, True)):
        log(f"training {name}")
        begun = time.perf_counter()
        trained[name], summary = train(dataset, lucene_index[dataset], root / f"model-{name}", markers, args)
        if summary is not None:
            training_info[name] = {"seconds": time.perf_counter() - begun,
                                   "seconds_per_step": summary.seconds_per_step,
                                   "steps_per_epoch": summary.steps_per_epoch,
                                   "examples_per_epoch": summary.extras.examples_per_epoch,
                                   "dev_curve": summary.dev_curve, "best_epoch": summary.best_epoch}
    models = {"dense zero-shot": "default", "dense trained, no markers": str(trained["ecb-no-markers"]),
              "dense trained, markers": str(trained["ecb-markers"])}

    tables: list[Table] = []
    encode_rates: dict[str, float] = {}
    bm25_options = BM25Options(query_format="mention+entities", rm3=True, threads=2)
    for dataset, title in ((ecb_test, "ECB+ events, test queries; collection = test topics"),
                           (ecb_all, "ECB+ events, test queries; collection = all 43 topics")):
        queries = Dataset(dataset).queries("test")
        qrels = read_qrels(Dataset(dataset).qrels_path("test"))
        table = Table(title, len(queries), Dataset(dataset).manifest["counts"]["passages"])
        bm25 = BM25Searcher(lucene_index[dataset], bm25_options)
        table.rows.append(evaluate(bm25, queries, qrels, "BM25 mention+entities + RM3"))
        dense_searchers = {}
        for label, model in models.items():
            log(f"{dataset.name}: {label}")
            index_dir, rate = dense_index(dataset, BiEncoder.load(model, device="cpu"), label.replace(" ", "_")
                                          .replace(",", ""), root)
            encode_rates[f"{dataset.name} {label}"] = rate
            dense_searchers[label] = DenseSearcher(index_dir, device="cpu")
            table.rows.append(evaluate(dense_searchers[label], queries, qrels, label))
        best_dense = dense_searchers["dense trained, markers"]
        for fusion in (FusionOptions("rrf"), FusionOptions("interpolate", alpha=0.5)):
            hybrid = HybridSearcher(bm25, best_dense, fusion)
            table.rows.append(evaluate(hybrid, queries, qrels, f"hybrid BM25 + markers ({fusion.tag})"))
        tables.append(table)
    log("ECB+ done")

    wec_models = {"dense zero-shot": "default", "ECB+-trained (markers), zero-shot": str(trained["ecb-markers"]),
                  "WEC-trained (markers)": str(trained["wec-markers"])}
    for dataset, title, models_here in (
            (wec_split, "WEC-Eng Dev, cluster split 0.6/0.2/0.2, test clusters", wec_models),
            (wec_all, "WEC-Eng Dev, all clusters as queries",
             {k: v for k, v in wec_models.items() if not k.startswith("WEC-trained")})):
        queries = Dataset(dataset).queries("test")
        qrels = read_qrels(Dataset(dataset).qrels_path("test"))
        table = Table(title, len(queries), Dataset(dataset).manifest["counts"]["passages"])
        bm25 = BM25Searcher(lucene_index[dataset], BM25Options(query_format="mention", threads=2))
        table.rows.append(evaluate(bm25, queries, qrels, "BM25 mention"))
        for label, model in models_here.items():
            log(f"{dataset.name}: {label}")
            index_dir, rate = dense_index(dataset, BiEncoder.load(model, device="cpu"),
                                          "".join(c if c.isalnum() else "_" for c in label), root)
            encode_rates[f"{dataset.name} {label}"] = rate
            table.rows.append(evaluate(DenseSearcher(index_dir, device="cpu"), queries, qrels, label))
        tables.append(table)
    log("WEC done")

    # Speed against peers, in the same run.
    log("speed: encoding against sentence-transformers, FAISS flat against HNSW")
    passages = list(itertools.islice(Dataset(ecb_all).passages(), 1000))
    encode = encode_speed(str(trained["ecb-markers"] / "passage_encoder"), [p.text for p in passages],
                          [p.title for p in passages])
    faiss_speed = faiss_comparison(root / "ecb-all-dense_trained_markers-flat", Dataset(ecb_all).queries("test"))
    total = (time.perf_counter() - clock) / 60

    section = report(tables, training_info, encode, faiss_speed, args, started, total, root)
    print(section)
    write_section(args.results, section, SECTION)
    log(f"wrote {args.results}")
    return 0


def report(tables: list[Table], training: dict[str, Any], encode: dict[str, float], faiss_speed: dict[str, float],
           args: argparse.Namespace, started: dt.datetime, total_minutes: float, root: Path) -> str:
    info = machine()
    lines = [SECTION, "", f"- Date: {started:%Y-%m-%d %H:%M} (local time), total run time {total_minutes:.1f} min"]
    lines += [f"- {key}: {value}" for key, value in info.items()]
    lines += [f"- Command: `python bench/dense.py {shlex.join(sys.argv[1:])}`".replace("  ", " "),
              f"- Training (CPU budget): epochs {args.epochs}, positives per query {args.positives_per_query}, "
              f"batch {args.batch_size}, lr {args.lr:g}, pooling {args.pooling}, max steps {args.max_steps}, "
              "one BM25 hard negative from the top 20, in-batch negatives with same-cluster passages masked, "
              "AdamW, weight decay 0.01, warm-up 10 %; the best dev epoch kept (MRR@10 on "
              f"{args.dev_max_queries} dev queries). Base model: all-MiniLM-L6-v2 (bundled).",
              f"- k = {K}; dense search FAISS flat inner product; BM25 k1 0.9, b 0.4, RM3 10/10/0.5.",
              f"- Working folder: `{root}` (not kept in the repository).", ""]
    for table in tables:
        lines += [table_markdown(table), ""]
    lines += ["### Training", ""]
    rows = []
    for name, item in training.items():
        per_epoch = (item["seconds_per_step"] or 0) * item["steps_per_epoch"]
        curve = "; ".join(f"epoch {p.get('epoch')}: MRR@10 {100 * p['MRR@10']:.2f}, R@100 {100 * p['R@100']:.2f}"
                          for p in item["dev_curve"] if p.get("MRR@10") is not None)
        rows.append([name, f"{item['examples_per_epoch']:,}", f"{item['steps_per_epoch']:,}",
                     f"{item['seconds_per_step']:.2f}", f"{per_epoch / 60:.1f}", curve])
    lines += [markdown_table(["model", "examples/epoch", "steps/epoch", "s/step", "min/epoch", "dev curve"],
                             rows, ["l", "r", "r", "r", "r", "l"]), ""]
    lines += ["### Speed", "",
              markdown_table(["measure", "value"], [
                  [f"passages/s, corefsearch as `index --dense` encodes (`encode_chunk`; 1,000 ECB+ passages, "
                   f"batch {DEFAULT_BATCH_SIZE}, 2 threads)",
                   f"{encode['corefsearch']:,.0f}"],
                  ["passages/s, sentence-transformers `encode` (same model and texts)",
                   f"{encode['sentence-transformers']:,.0f}"],
                  ["ratio corefsearch / sentence-transformers", f"{encode['ratio']:.2f}"],
                  ["FAISS flat, ms per query (k 500, 15,812 passages)", f"{faiss_speed['flat_ms']:.3f}"],
                  ["FAISS HNSW (M 32, efConstruction 200, efSearch = k), ms per query",
                   f"{faiss_speed['hnsw_ms']:.3f}"],
                  ["FAISS HNSW build, seconds", f"{faiss_speed['hnsw_build_s']:.1f}"],
                  ["overlap of the flat and HNSW top 500", f"{100 * faiss_speed['overlap']:.2f} %"],
              ], ["l", "r"]), ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
