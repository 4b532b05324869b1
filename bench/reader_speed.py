"""Reader inference speed: seconds per query to re-rank the BM25 top 50, per encoder backend.

ECB+ events, the all-topics collection (as bench/dense.py and bench/e2e.py build it), a seeded
sample of ``--queries`` test queries; BM25 is the paper's best formulation (mention + named
entities, RM3). Each query's top ``--rerank-k`` passages are re-ranked by the reader of
``--reader`` (default: a freshly initialised, untrained integrated reader with markers on the
bundled all-MiniLM-L6-v2, saved in the out dir: the speed does not depend on the training) with
each backend, on ``--threads`` threads:

- ``torch, batch 32``: the windows of a query in length-sorted passes of 32 (the default of
  version 0.1.0);
- ``torch, one pass``: every window of a query in one forward pass, padded to the longest;
- ``torch, length buckets``: the windows sorted by length and cut into a few passes, each padded
  to its own longest (``length_buckets``, the default of ``Reader``);
- ``onnx`` (and ``onnx fused``): the encoder on ONNX Runtime (``corefsearch export-onnx``; fp32;
  ``--fuse``), length buckets;
- ``onnx-int8 EXPORT``: its dynamic int8 quantisation, length buckets, for each export of
  ``--exports`` (``linear`` | ``all``: ``export-onnx --quantize-ops``; ``fused-*``: with ``--fuse``;
  each in a copy of the reader folder under the out dir);
- ``CrossEncoder torch|onnx|onnx-int8 (CONFIG)``: sentence-transformers' ``CrossEncoder.predict`` of
  the same (query sentence, passage) pairs, batches of ``--peer-batch``, cut to the reader's
  ``max_length``, with its torch, ONNX and dynamic int8 backends, on ``--peer-model`` (default the
  bundled all-MiniLM-L6-v2, the reader's default base, with a fresh one-label head: the speed does
  not depend on the weights), in a worker process in its own environment (``--peer-python``, see
  bench/peer_worker.py); the worker times ``predict`` alone.

Only ``Reader.read`` is timed (the passages' texts are read from the index beforehand; a first
query warms each backend up untimed; ``--dataset`` and ``--index`` take a built dataset and its
Lucene index instead of ECB+'s, ``--split`` its queries). The rows take turns query by query, in an order rotated
from one query to the next, so that a load the machine carries meanwhile falls on every row
alike. Reported: seconds per query (mean, p50, p95) and the
speed-up over ``torch, batch 32``; with a trained ``--reader``, the MRR@10 of each backend on the
same queries (``--qrels``, default the dataset's test qrels) and its difference to torch, the
quality lost to ONNX or int8. The reader's folder gets its ``onnx/`` export when it has none.

Prints the table and writes it into ``bench/RESULTS.md`` (``--results``) under
``## Reader inference speed (bench/reader_speed.py)``, replacing that section if present.

Run: ``python bench/reader_speed.py [--out-dir DIR] [--reader MODEL_DIR] [--queries 100] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
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
from peer_worker import Peer, default_python  # noqa: E402

from corefsearch.datasets.build import BuildOptions, build_dataset  # noqa: E402
from corefsearch.datasets.dataset import read_queries  # noqa: E402
from corefsearch.datasets.ecbplus import read_ecbplus  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ECBPLUS = ROOT / "data" / "ecbplus" / "ECBplus.tar.gz"
SECTION = "## Reader inference speed (bench/reader_speed.py)"
# (row name, backend, windows per forward pass at most: None = no cap, length buckets: False = none)
BACKENDS = (("torch, batch 32", "torch", 32, False), ("torch, one pass", "torch", None, False),
            ("torch, length buckets", "torch", None, True))
EXPORTS = ("linear", "all", "fused-linear", "fused-all")  # corefsearch's exports (see bench/encode_speed.py)
PEER = "CrossEncoder"
REFERENCE = "torch, batch 32"
TORCH_DEFAULT = "torch, length buckets"
UNTRAINED = "reader-untrained-integrated"


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def load_average() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass
class Row:
    name: str
    backend: str
    batch_size: int | None
    buckets: bool
    folder: Path | None = None  # the reader folder of an ONNX row (one per export)
    seconds: list[float] = field(default_factory=list)  # per query
    passes: list[int] = field(default_factory=list)  # per query: forward passes
    padded: list[int] = field(default_factory=list)  # per query: tokens read, padding included
    mrr: float | None = None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.seconds)

    def percentile(self, p: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def dataset_and_index(root: Path) -> tuple[Path, Path]:
    """The ECB+ events dataset of every topic (all splits) and its Lucene index, built once in ``root``."""
    from corefsearch.sparse.index import build_lucene_index

    dataset = root / "ecb-all"
    if not (dataset / "manifest.json").exists():
        log("building the ECB+ dataset (events, all topics)")
        build_dataset(read_ecbplus(ECBPLUS), dataset, BuildOptions(), overwrite=True, source_name="ecb-all")
    index = root / "ecb-all-index"
    if not (index / "lucene" / "manifest.json").exists():
        log("building its Lucene index")
        build_lucene_index(dataset, index, threads=2, overwrite=True)
    return dataset, index


def untrained_reader(root: Path, base: str | None = None) -> Path:
    """A freshly initialised integrated reader (markers) on ``base`` (default: the bundled all-MiniLM-L6-v2)."""
    from corefsearch.base.models import READER_CONFIG
    from corefsearch.reader.model import CrossEncoderReader, ReaderConfig

    folder = root / (UNTRAINED if base is None else f"{UNTRAINED}-{Path(base).name}")
    if not (folder / READER_CONFIG).exists():
        import torch

        torch.manual_seed(13)
        CrossEncoderReader.from_base(base, ReaderConfig(head="integrated", markers=True)).save(folder)
    return folder


def ensure_export(folder: Path, export: str, root: Path) -> Path:
    """A copy of the reader ``folder`` in ``root`` with a current export of the kind ``export`` names."""
    import json
    import shutil

    from corefsearch.base.errors import CorefSearchError
    from corefsearch.base.onnx_backend import check_onnx_export, weights_checksum
    from corefsearch.export.onnx import export_onnx

    copy = root / f"{folder.name}-{export}"  # one copy per reader and export
    fuse, ops = export.startswith("fused-"), export.removeprefix("fused-")
    try:
        if weights_checksum(copy) != weights_checksum(folder):
            raise KeyError("weights")  # a copy of another reader's weights
        check_onnx_export(copy, "onnx")
        check_onnx_export(copy, "onnx-int8")
        record = json.loads((copy / "onnx" / "export.json").read_text())
        if record["quantization"]["ops"] != ops or (record.get("fusion") is not None) != fuse:
            raise KeyError(export)
    except (CorefSearchError, KeyError, TypeError):
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("onnx"))
        summary = export_onnx(copy, quantize=True, log=log, quantize_ops=ops, fuse=fuse)
        for file in summary.files:
            log(f"wrote {file.path} ({file.megabytes:.1f} MB, max abs diff to torch {file.max_abs_diff:.2e})")
    return copy


def mrr_at_10(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> float:
    from corefsearch.evaluate import evaluate_run

    return evaluate_run(run, {qid: qrels.get(qid, {}) for qid in run}, "trec", "reader").aggregate["MRR@10"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None, help="Datasets, index and the untrained reader.")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--reader", type=Path, default=None, help="A reader folder (default: untrained, built).")
    parser.add_argument("--base-model", default=None,
                        help="Without --reader: the base of the untrained reader (default: the bundled "
                             "all-MiniLM-L6-v2; e.g. a smaller one from bench/layer_drop.py).")
    parser.add_argument("--qrels", type=Path, default=None,
                        help="With --reader: the qrels for MRR@10 (default: the dataset's qrels/test.txt).")
    parser.add_argument("--queries", type=int, default=100, help="Test queries (a seeded sample).")
    parser.add_argument("--rerank-k", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--exports", default=",".join(EXPORTS),
                        help="corefsearch's exports to time, comma-separated: linear | all | fused-linear | fused-all.")
    parser.add_argument("--dataset", type=Path, default=None, help="A built dataset (default: ECB+ events, built).")
    parser.add_argument("--index", type=Path, default=None, help="With --dataset: its Lucene index.")
    parser.add_argument("--split", default="test", help="The split whose queries are read.")
    parser.add_argument("--peer-python", default=None,
                        help="The Python of sentence-transformers' environment (default: work/peer-venv/bin/python if "
                             "there is one, else this one; its ONNX rows need optimum[onnxruntime]); 'none': no peer.")
    parser.add_argument("--peer-model", default=None,
                        help="The CrossEncoder's base model (default: the bundled all-MiniLM-L6-v2).")
    parser.add_argument("--peer-int8", default="avx512_vnni,avx2",
                        help="sentence-transformers' int8 quantisation configs to time, comma-separated.")
    parser.add_argument("--peer-batch", type=int, default=32, help="CrossEncoder.predict's batch size.")
    args = parser.parse_args(argv)
    started = dt.datetime.now()
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-reader-speed-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"working in {root}; load average {load_average()}")
    exports = [e for e in args.exports.split(",") if e]
    if not exports or set(exports) - set(EXPORTS):
        parser.error(f"--exports takes {', '.join(EXPORTS)}, got {args.exports!r}")

    import torch

    from corefsearch.io.trec import read_qrels
    from corefsearch.reader.inputs import PASS_OVERHEAD_TOKENS
    from corefsearch.reader.read import Reader
    from corefsearch.reader.rerank import order_reranked
    from corefsearch.sparse.search import BM25Options, BM25Searcher

    torch.set_num_threads(args.threads)
    dataset, index = (args.dataset, args.index) if args.dataset is not None else dataset_and_index(root)
    queries = read_queries(dataset / "queries" / f"{args.split}.jsonl")
    queries = [queries[i] for i in sorted(random.Random(13).sample(range(len(queries)), min(args.queries,
                                                                                        len(queries))))]
    searcher = BM25Searcher(index, BM25Options(query_format="mention+entities", rm3=True, threads=args.threads))
    retrieved = list(searcher.search(queries, args.rerank_k))
    texts = {h.passage_id: searcher.passage(h.passage_id)["text"] for _, hits in retrieved for h in hits}
    log(f"{len(retrieved)} test queries, BM25 top {args.rerank_k} retrieved")

    trained = args.reader is not None
    if trained and args.base_model is not None:
        parser.error("--base-model is for the untrained reader: not with --reader")
    folder = args.reader if trained else untrained_reader(root, args.base_model)
    qrels = read_qrels(args.qrels or dataset / "qrels" / f"{args.split}.txt") if trained else None
    rows = [Row(name, backend, batch, buckets) for name, backend, batch, buckets in BACKENDS]
    for export in exports:
        copy = ensure_export(folder, export, root)
        fp32 = "onnx" + (" fused" if export.startswith("fused-") else "")
        if fp32 not in [row.name for row in rows]:
            rows.append(Row(fp32, "onnx", None, True, copy))
        rows.append(Row(f"onnx-int8 {export}", "onnx-int8", None, True, copy))
    readers = {}
    first_query, first_hits = retrieved[0]
    for row in rows:
        readers[row.name] = Reader.load(row.folder or folder, "cpu", batch_size=row.batch_size, backend=row.backend,
                                        threads=args.threads, pass_overhead=PASS_OVERHEAD_TOKENS if row.buckets
                                        else None)
        readers[row.name].read(first_query, [(h.passage_id, texts[h.passage_id]) for h in first_hits])  # warm-up
    ours = len(rows)
    peer = None
    if args.peer_python != "none":
        from corefsearch.base.models import default_model_path

        python = args.peer_python or default_python(ROOT)
        log(f"starting sentence-transformers' worker ({python})")
        peer = Peer(python, "rerank", args.peer_model or default_model_path(), root, args.threads,
                    readers[rows[0].name].model.config.max_length, args.peer_batch, args.peer_int8)
        for name, why in peer.skipped.items():
            log(f"no {PEER} {name} row: {why}")
        first_pairs = [(first_query.text, texts[h.passage_id]) for h in first_hits]
        for name in peer.rows:
            peer.run(name, first_pairs)  # warm-up
            rows.append(Row(f"{PEER} {name}", name, None, False))
    windows: list[list[int]] = []  # per query: the length (tokens) of each of its windows
    runs: dict[str, dict[str, dict[str, float]]] = {row.name: {} for row in rows[:ours]}
    for number, (query, hits) in enumerate(retrieved):
        passages = [(h.passage_id, texts[h.passage_id]) for h in hits]
        query_windows = readers[rows[0].name].windows(query, passages)
        windows.append([len(w.input_ids) for w in query_windows])
        for row in rows[number % len(rows):] + rows[:number % len(rows)]:  # rotated: each row goes first in turn
            if row.name not in readers:  # the peer's
                row.seconds.append(peer.run(row.backend, [(query.text, text) for _, text in passages]))
                continue
            reader = readers[row.name]
            passes = reader.passes(query_windows)
            row.passes.append(len(passes))
            row.padded.append(sum(len(group) * max(windows[-1][i] for i in group) for group in passes))
            begin = time.perf_counter()
            read = reader.read(query, passages)
            row.seconds.append(time.perf_counter() - begin)
            runs[row.name][query.id] = {h.passage_id: h.score for h in order_reranked(read, hits, args.rerank_k)}
    if peer is not None:
        peer.close()
    for row in rows:
        if qrels is not None and row.name in runs:
            row.mrr = mrr_at_10(runs[row.name], qrels)
        log(f"{row.name}: {row.mean:.3f} s per query"
            + (f", {statistics.fmean(row.passes):.1f} passes" if row.passes else "")
            + (f", MRR@10 {100 * row.mrr:.2f}" if row.mrr else ""))
    bm25_mrr = None
    if qrels is not None:
        bm25_mrr = mrr_at_10({q.id: {h.passage_id: h.score for h in hits} for q, hits in retrieved}, qrels)
    section = report(rows, args, folder, trained, len(retrieved), windows, bm25_mrr, started, peer)
    print(section)
    write_section(args.results, section, SECTION)
    log(f"wrote {args.results}")
    return 0


def report(rows: list[Row], args: argparse.Namespace, folder: Path, trained: bool, n_queries: int,
           windows: list[list[int]], bm25_mrr: float | None, started: dt.datetime, peer: Any = None) -> str:
    import onnxruntime
    import torch

    reference = next(row for row in rows if row.name == REFERENCE)
    torch_mrr = next((row.mrr for row in rows if row.name == TORCH_DEFAULT), None)
    real = statistics.fmean(sum(w) for w in windows)
    peer_rows = [row for row in rows if row.name.startswith(PEER)]
    fastest = min(peer_rows, key=lambda row: row.mean) if peer_rows else None
    header = ["Backend", "passes/query", "tokens read / real", "s/query (mean)", "p50", "p95", "best",
              f"speed-up over {REFERENCE}", f"× {fastest.name if fastest else PEER} (mean)"]
    align = ["l", "r", "r", "r", "r", "r", "r", "r", "r"]
    if trained:
        header += ["MRR@10", "Δ MRR@10 vs torch"]
        align += ["r", "r"]
    lines = []
    for row in rows:
        ours = bool(row.passes)
        cells = [row.name, f"{statistics.fmean(row.passes):.1f}" if ours else "—",
                 f"{statistics.fmean(row.padded) / real:.2f}" if ours else "—",
                 f"{row.mean:.3f}", f"{row.percentile(50):.3f}", f"{row.percentile(95):.3f}", f"{min(row.seconds):.3f}",
                 f"{reference.mean / row.mean:.2f}×", f"{fastest.mean / row.mean:.2f}×" if fastest else "—"]
        if trained and row.mrr is not None and torch_mrr is not None:
            cells += [f"{100 * row.mrr:.2f}", f"{100 * (row.mrr - torch_mrr):+.2f}"]
        elif trained:
            cells += ["—", "—"]
        lines.append(cells)
    reader = (f"`{folder}` (--reader)" if trained
              else f"a freshly initialised integrated reader with markers on {args.base_model or 'all-MiniLM-L6-v2'} "
                   "(untrained: the speed does not depend on the weights; no MRR)")
    info = machine()
    data = ("ECB+ events, all-topics collection" if args.dataset is None else f"`{args.dataset}`")
    if peer is not None:
        versions = ", ".join(f"{k} {v}" for k, v in peer.versions.items() if k != "python")
        skipped = "".join(f" No `{PEER} {name}` row: {why}." for name, why in peer.skipped.items())
        peer_text = (f" {PEER} rows: sentence-transformers' `CrossEncoder.predict` of the same (query sentence, "
                     f"passage) pairs, batches of {args.peer_batch}, on {args.peer_model or 'all-MiniLM-L6-v2'} with "
                     f"a fresh one-label head, in a worker process ({versions}; ONNX: its own export through Optimum; "
                     f"int8: `export_dynamic_quantized_onnx_model` with the config named), `predict` alone "
                     f"timed.{skipped}")
    else:
        peer_text = " No CrossEncoder rows (`--peer-python none`)."
    parts = [
        SECTION, "",
        f"Run {started:%Y-%m-%d %H:%M} by `python bench/reader_speed.py --queries {args.queries} --threads "
        f"{args.threads} --exports {args.exports}{' --reader ' + str(folder) if trained else ''}"
        f"{' --base-model ' + str(args.base_model) if args.base_model else ''}`. {data}, "
        f"{n_queries} {args.split} queries (seeded sample); each re-ranks its BM25 (mention + entities, RM3) top "
        f"{args.rerank_k} with {reader}; the rows take turns query by query in a rotated order. ONNX rows: "
        f"`export-onnx --quantize-ops linear|all` (`fused-`: with `--fuse`).{peer_text} Only `Reader.read` is "
        f"timed, on {args.threads} threads (torch "
        f"{torch.__version__}, ONNX Runtime {onnxruntime.__version__}); windows per query: mean "
        f"{statistics.fmean(len(w) for w in windows):.1f}, max {max(len(w) for w in windows)}; tokens per window: "
        f"mean {statistics.fmean(n for w in windows for n in w):.0f}, the longest of a query (what one pass pads "
        f"to) mean {statistics.fmean(max(w) for w in windows):.0f}.",
        "", markdown_table(header, lines, align), "",
    ]
    if bm25_mrr is not None:
        parts += [f"BM25 alone on these queries: MRR@10 {100 * bm25_mrr:.2f}.", ""]
    parts += ["A cross-encoder reads the query window again with every passage: its attention is bidirectional, "
              "so no state of the query's tokens can be shared between passages.", "",
              f"Machine: {info['CPU model']}, {info['CPUs']}; load average at the end (1, 5, 15 min): "
              f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} (other work on the machine shares its cores: "
              "compare rows of one run, not runs).", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
