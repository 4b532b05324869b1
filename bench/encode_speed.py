"""Dense encoding speed on the CPU: sentence-transformers' backends against corefsearch's, and what
the faster backends cost in MRR@10.

One run, one model, one set of texts, one thread count:

- **speed**: passages per second encoding a seeded sample of ``--passages`` ECB+ passages (all
  topics, as bench/dense.py builds the collection; ``title [SEP] text`` cut to the retriever's passage
  length, 180 tokens by default; batches of 32, the CPU default of ``index --dense``; or the passages of
  ``--passages-file``) by sentence-transformers' ``SentenceTransformer.encode`` with its torch, ONNX and
  dynamic int8 ONNX backends (``backend="onnx"``, ``export_dynamic_quantized_onnx_model`` with each
  ``--peer-int8`` config), and by corefsearch's passage encoder on the same weights with ``--backend
  torch``, and ``onnx`` / ``onnx-int8`` of each export of ``--exports`` (``linear`` and ``all``:
  ``export-onnx --quantize-ops``; ``fused-*``: with ``--fuse``). corefsearch's rows time
  :func:`encode_as_indexed`: the passages encoded as ``index --dense`` and ``add`` encode them, through
  ``corefsearch.dense.chunks.encode_chunk`` (chunks of 8,192 passages, each in batches sorted by token
  count). sentence-transformers runs in a worker process (bench/peer_worker.py) in its own
  environment, ``--peer-python`` (its ONNX backend needs ``optimum[onnxruntime]``, which pins older
  transformers than corefsearch's: ``python3 -m venv work/peer-venv && work/peer-venv/bin/pip install
  'sentence-transformers[onnx]'``); the worker times ``encode`` alone. The rows take turns,
  ``--repeats`` rounds in an order rotated each round (a load the machine carries falls on every row
  alike); the median and the best round are reported, after one untimed warm-up batch each, with the
  load average at the start of each round.
- **quality**: MRR@10 of the dense retriever (the same encoder) with each of corefsearch's rows on
  ECB+ test queries (a seeded sample of ``--queries``; 0: none) over the test-topic collection
  (exact inner-product search, FAISS ``IndexFlatIP``, the query's own passage left out, as
  ``corefsearch search`` does). ``--mrr-passages N`` cuts the collection to N passages (the sampled
  queries' own and relevant passages, then a seeded sample of the rest): for a quick check only, the
  MRR of a cut collection is not the benchmark's.

The encoder is ``--encoder``: a retriever folder (copied and exported once per export), or a
Hugging Face model folder or, by default, the bundled all-MiniLM-L6-v2, as the zero-shot retriever
(mean pooling, no markers), exported with ``export-onnx MODEL --out OUT_DIR/encoder-EXPORT``. Writes
``## Dense encoding speed (bench/encode_speed.py)`` into ``--results`` (bench/RESULTS.md), replacing
that section.

Run: ``python bench/encode_speed.py [--out-dir DIR] [--passages 2000] [--queries 500] [--threads 2]``.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import machine, markdown_table, write_section  # noqa: E402
from peer_worker import Peer, default_python  # noqa: E402

from corefsearch.datasets.build import BuildOptions, build_dataset  # noqa: E402
from corefsearch.datasets.dataset import Dataset  # noqa: E402
from corefsearch.datasets.ecbplus import read_ecbplus  # noqa: E402
from corefsearch.dense.encoder import DEFAULT_BATCH_SIZE  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ECBPLUS = ROOT / "data" / "ecbplus" / "ECBplus.tar.gz"
SECTION = "## Dense encoding speed (bench/encode_speed.py)"
# corefsearch's exports: --quantize-ops of the int8 file, fused (export-onnx --fuse) or not
EXPORTS = ("linear", "all", "fused-linear", "fused-all")
TORCH_ROW = "corefsearch torch"
PEER = "sentence-transformers"
BATCH = DEFAULT_BATCH_SIZE  # passages per batch: index --dense's on the CPU


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def load_average() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def dataset(root: Path, name: str, options: BuildOptions) -> Path:
    out = root / name
    if not (out / "manifest.json").exists():
        log(f"building the ECB+ dataset {name}")
        build_dataset(read_ecbplus(ECBPLUS), out, options, overwrite=True, source_name=name)
    return out


def exported_encoder(root: Path, encoder: str, export: str) -> Path:
    """A retriever folder with a current ONNX export (fp32 and int8) of the kind ``export`` names: a
    copy of the retriever folder ``encoder``, or the zero-shot retriever of ``encoder`` (``default`` or
    a Hugging Face model folder), in ``root``."""
    import json
    import shutil

    from corefsearch.base.errors import CorefSearchError
    from corefsearch.base.models import model_kind
    from corefsearch.dense.model import BiEncoder
    from corefsearch.export.onnx import export_onnx

    # one copy per encoder and export (the default's name as before)
    folder = root / (f"encoder-{export}" if encoder == "default" else f"encoder-{Path(encoder).name}-{export}")
    fuse, ops = export.startswith("fused-"), export.removeprefix("fused-")
    try:
        for backend in ("onnx", "onnx-int8"):
            BiEncoder.load(str(folder), "cpu").use_backend(backend)
        record = json.loads(next(folder.glob("*_encoder/onnx/export.json")).read_text())
        if record["quantization"]["ops"] == ops and (record.get("fusion") is not None) == fuse:
            return folder
    except (CorefSearchError, StopIteration, KeyError, TypeError):
        pass
    shutil.rmtree(folder, ignore_errors=True)  # an earlier, interrupted or stale copy
    if encoder != "default" and model_kind(encoder) == "retriever":
        shutil.copytree(encoder, folder, ignore=shutil.ignore_patterns("onnx"))
        summary = export_onnx(folder, log=log, quantize_ops=ops, fuse=fuse)
    else:
        summary = export_onnx(encoder, out=folder, log=log, quantize_ops=ops, fuse=fuse)
    for file in summary.files:
        log(f"wrote {file.path} ({file.megabytes:.1f} MB, max abs diff to torch {file.max_abs_diff:.2e})")
    return folder


def load(folder: Path, backend: str, threads: int) -> Any:
    from corefsearch.dense.model import BiEncoder

    model = BiEncoder.load(str(folder), "cpu")
    model.use_backend(backend, threads=threads)
    return model


def encode_as_indexed(model: Any, titles: list[str], texts: list[str], batch: int) -> Any:
    """The passages' vectors as ``index --dense`` and ``add`` encode them: chunks of ``CHUNK_SIZE``
    passages, each through ``chunks.encode_chunk``. The call the speed rows time."""
    import numpy as np

    from corefsearch.dense.chunks import CHUNK_SIZE, chunk_vectors

    timer = [0.0]
    return np.concatenate([chunk_vectors(model, titles[at:at + CHUNK_SIZE], texts[at:at + CHUNK_SIZE], batch, timer)
                           for at in range(0, len(texts), CHUNK_SIZE)])


def our_rows(folders: dict[str, Path]) -> dict[str, tuple[Path, str]]:
    """corefsearch's rows: name → (retriever folder, backend); one fp32 row per graph (fused or not)."""
    rows = {TORCH_ROW: (folders[next(iter(folders))], "torch")}
    for export, folder in folders.items():
        fp32 = "corefsearch onnx" + (" fused" if export.startswith("fused-") else "")
        rows.setdefault(fp32, (folder, "onnx"))
        rows[f"corefsearch onnx-int8 {export}"] = (folder, "onnx-int8")
    return rows


def row_name(name: str, batch: int, batches: Sequence[int]) -> str:
    return f"{name}, batch {batch}" if len(batches) > 1 else name


def speed(rows: dict[str, tuple[Path, str]], peer: Any, titles: list[str], texts: list[str], threads: int,
          repeats: int, batches: Sequence[int]) -> dict[str, list[float]]:
    """Seconds per round of each row (corefsearch's and the peer's) at each batch size, rows taking turns
    in a rotated order."""
    joined = [f"{title} [SEP] {text}" if title else text for title, text in zip(titles, texts, strict=True)]
    timers: dict[str, Callable[[], float]] = {}
    warm = max(batches)
    for name, (folder, backend) in rows.items():
        model = load(folder, backend, threads)
        encode_as_indexed(model, titles[:warm], texts[:warm], warm)  # warm-up, untimed
        for batch in batches:
            def timer(m: Any = model, ti: list[str] = titles, te: list[str] = texts, b: int = batch) -> float:
                began = time.perf_counter()
                encode_as_indexed(m, ti, te, b)
                return time.perf_counter() - began

            timers[row_name(name, batch, batches)] = timer
    if peer is not None:
        peer.hold(joined[:warm])
        for row in peer.rows:
            peer.run(row, batch=warm)  # warm-up, untimed
        peer.hold(joined)
        for row in peer.rows:
            for batch in batches:
                timers[row_name(f"{PEER} {row}", batch, batches)] = (lambda r, b: lambda: peer.run(r, batch=b))(row,
                                                                                                              batch)
    names = list(timers)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            seconds[name].append(timers[name]())
        log(f"round {round_ + 1} of {repeats} (load {load_average()}): "
            + ", ".join(f"{n} {len(texts) / s[-1]:.0f}/s" for n, s in seconds.items()))
    return seconds


def mrr(rows: dict[str, tuple[Path, str]], collection: Path, n_queries: int, mrr_passages: int | None,
        threads: int, batch: int) -> tuple[dict[str, float], int, int]:
    """MRR@10 of each of corefsearch's rows: exact inner-product search over the (maybe cut) collection."""
    import faiss
    import numpy as np

    from corefsearch.evaluate import evaluate_run
    from corefsearch.io.trec import read_qrels

    data = Dataset(collection)
    queries = data.queries("test")
    queries = [queries[i] for i in sorted(random.Random(13).sample(range(len(queries)), min(n_queries,
                                                                                        len(queries))))]
    qrels = read_qrels(collection / "qrels" / "test.txt")
    passages = list(data.passages())
    if mrr_passages is not None and mrr_passages < len(passages):
        wanted = {q.passage_id for q in queries} | {p for q in queries for p in qrels.get(q.id, {})}
        rest = [i for i, p in enumerate(passages) if p.id not in wanted]
        keep = {i for i, p in enumerate(passages) if p.id in wanted}
        keep |= set(random.Random(13).sample(rest, max(0, min(len(rest), mrr_passages - len(keep)))))
        passages = [passages[i] for i in sorted(keep)]
    ids = [p.id for p in passages]
    scores = {}
    for name, (folder, backend) in rows.items():
        model = load(folder, backend, threads)
        log(f"MRR@10 with {name}: encoding {len(passages):,} passages and {len(queries):,} queries")
        vectors = encode_as_indexed(model, [p.title for p in passages], [p.text for p in passages], batch)
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        query_vectors = model.query_encoder.encode_queries(queries, max_length=model.config.max_query_len)
        found_scores, rows = index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), 11)
        run = {}
        for query, row_scores, row_ids in zip(queries, found_scores, rows, strict=True):
            hits = [(ids[r], float(s)) for s, r in zip(row_scores, row_ids, strict=True)
                    if r >= 0 and ids[r] != query.passage_id]
            run[query.id] = dict(hits[:10])
        scores[name] = evaluate_run(run, {q.id: qrels.get(q.id, {}) for q in queries}, "trec",
                                    backend).aggregate["MRR@10"]
        log(f"MRR@10 with {name}: {100 * scores[name]:.2f}")
    return scores, len(queries), len(passages)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None, help="Datasets and the exported encoders.")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--encoder", default="default",
                        help="A retriever folder, or a Hugging Face model folder taken zero-shot (default: the bundled "
                             "all-MiniLM-L6-v2, zero-shot).")
    parser.add_argument("--exports", default=",".join(EXPORTS),
                        help="corefsearch's exports to time, comma-separated: linear | all (--quantize-ops of the "
                             "int8 file) | fused-linear | fused-all (with --fuse).")
    parser.add_argument("--passages", type=int, default=2000, help="Passages timed (a seeded sample).")
    parser.add_argument("--passages-file", type=Path, default=None,
                        help="Time these passages (JSON lines with title and text) instead of ECB+'s.")
    parser.add_argument("--queries", type=int, default=500,
                        help="ECB+ test queries for MRR@10 (a seeded sample; 0: no MRR).")
    parser.add_argument("--mrr-passages", type=int, default=None,
                        help="Cut the MRR collection to N passages (a quick check only; default: all test topics).")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-sizes", default=str(BATCH),
                        help="Batch sizes to time every row at, comma-separated (the first also encodes for MRR@10; "
                             "the ratio column is against the peer's fastest row at any of them).")
    parser.add_argument("--repeats", type=int, default=3, help="Timed rounds (the median and the best are reported).")
    parser.add_argument("--peer-python", default=None,
                        help="The Python of sentence-transformers' environment (default: work/peer-venv/bin/python if "
                             "there is one, else this one; its ONNX rows need optimum[onnxruntime]); 'none': no peer.")
    parser.add_argument("--peer-int8", default="avx512_vnni,avx2",
                        help="sentence-transformers' int8 quantisation configs to time, comma-separated.")
    args = parser.parse_args(argv)
    started = dt.datetime.now()
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-encode-speed-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"working in {root}; load average {load_average()}")

    import torch

    from corefsearch.base.models import default_model_path, model_kind
    from corefsearch.dense.model import BiEncoder

    torch.set_num_threads(args.threads)
    try:
        batches = [int(b) for b in args.batch_sizes.split(",") if b]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1:
        parser.error(f"--batch-sizes takes positive integers, comma-separated, got {args.batch_sizes!r}")
    exports = [e for e in args.exports.split(",") if e]
    unknown = sorted(set(exports) - set(EXPORTS))
    if unknown or not exports:
        parser.error(f"--exports takes {', '.join(EXPORTS)}, got {args.exports!r}")
    folders = {export: exported_encoder(root, args.encoder, export) for export in exports}
    rows = our_rows(folders)
    max_length = BiEncoder.load(str(next(iter(folders.values()))), "cpu").config.max_passage_len  # the peer's too
    # sentence-transformers loads the encoder folder itself (it holds modules.json, see st_export):
    # the bundled model for the default, the model folder, or the retriever's passage encoder.
    if args.encoder == "default":
        st_folder = default_model_path()
    elif model_kind(args.encoder) == "retriever":
        shared = BiEncoder.load(args.encoder, "cpu").config.shared_encoder
        st_folder = str(Path(args.encoder) / ("query_encoder" if shared else "passage_encoder"))
    else:
        st_folder = args.encoder
    if args.passages_file is not None:
        from corefsearch.io.read import read_jsonl

        sample = [record for _, record in read_jsonl(args.passages_file)][:args.passages]
        titles, texts = [r.get("title") or "" for r in sample], [r["text"] for r in sample]
    else:
        passages = list(Dataset(dataset(root, "ecb-all", BuildOptions())).passages())
        sample = [passages[i] for i in sorted(random.Random(13).sample(range(len(passages)),
                                                                       min(args.passages, len(passages))))]
        titles, texts = [p.title for p in sample], [p.text for p in sample]
    peer = None
    if args.peer_python != "none":
        python = args.peer_python or default_python(ROOT)
        log(f"starting sentence-transformers' worker ({python})")
        peer = Peer(python, "encode", st_folder, root, args.threads, max_length, BATCH, args.peer_int8)
        for row, why in peer.skipped.items():
            log(f"no {PEER} {row} row: {why}")
    try:
        log(f"timing {len(texts):,} passages on {args.threads} threads, {args.repeats} rounds")
        seconds = speed(rows, peer, titles, texts, args.threads, args.repeats, batches)
    finally:
        if peer is not None:
            peer.close()
    scores, n_queries, n_passages = {}, 0, 0
    if args.queries > 0:
        test_topics = dataset(root, "ecb-test", BuildOptions(splits=("test",)))
        scores, n_queries, n_passages = mrr(rows, test_topics, args.queries, args.mrr_passages, args.threads,
                                             batches[0])
    section = report(args, seconds, len(texts), scores, n_queries, n_passages, started, st_folder, peer, max_length)
    print(section)
    write_section(args.results, section, SECTION)
    log(f"wrote {args.results}")
    return 0


def report(args: argparse.Namespace, seconds: dict[str, list[float]], n_texts: int, scores: dict[str, float],
           n_queries: int, n_passages: int, started: dt.datetime, st_folder: str, peer: Any,
           max_length: int) -> str:
    import onnxruntime
    import torch

    median = {name: n_texts / statistics.median(values) for name, values in seconds.items()}
    best = {name: n_texts / min(values) for name, values in seconds.items()}
    peer_rows = [name for name in seconds if name.startswith(PEER)]
    fastest = max(peer_rows, key=median.__getitem__) if peer_rows else None
    torch_mrr = scores.get(TORCH_ROW)
    lines = []
    for name in seconds:
        mrr_cells = ["—", "—"]
        base = name.rsplit(", batch ", 1)[0]
        if base in scores and torch_mrr is not None:
            mrr_cells = [f"{100 * scores[base]:.2f}", f"{100 * (scores[base] - torch_mrr):+.2f}"]
        ratio = f"{median[name] / median[fastest]:.2f}×" if fastest else "—"
        lines.append([name, f"{median[name]:,.0f}", f"{best[name]:,.0f}", ratio, *mrr_cells])
    encoder = ("the bundled all-MiniLM-L6-v2 as the zero-shot retriever (mean pooling, no markers; exported by "
               "`corefsearch export-onnx default --out DIR`)" if args.encoder == "default" else f"`{args.encoder}`")
    cut = (f" cut to {n_passages:,} passages (`--mrr-passages`: the queries' own and relevant passages plus a seeded "
           "sample; a quick check, not the benchmark's collection)" if args.mrr_passages is not None
           else f" ({n_passages:,} passages)")
    quality = (f"MRR@10: {n_queries:,} ECB+ test queries (a seeded sample) over the test-topic collection{cut}, exact "
               "inner-product search, own passage left out." if n_queries else "No MRR@10 (`--queries 0`).")
    info = machine()
    command = (f"python bench/encode_speed.py --passages {args.passages} --queries {args.queries} --threads "
               f"{args.threads} --repeats {args.repeats} --exports {args.exports} --batch-sizes {args.batch_sizes}"
               + (f" --passages-file {args.passages_file}" if args.passages_file is not None else "")
               + (f" --mrr-passages {args.mrr_passages}" if args.mrr_passages is not None else "")
               + (f" --encoder {args.encoder}" if args.encoder != "default" else ""))
    if peer is not None:
        versions = ", ".join(f"{k} {v}" for k, v in peer.versions.items() if k != "python")
        skipped = "".join(f" No `{PEER} {row}` row: {why}." for row, why in peer.skipped.items())
        peer_text = (f"{PEER} encodes the same weights ({st_folder}) with its own pooling (and, for "
                     f"all-MiniLM-L6-v2, normalisation) in a worker process ({versions}; its ONNX export is its "
                     f"own, through Optimum, and its int8 rows `export_dynamic_quantized_onnx_model` with each "
                     f"config named); the worker times `encode` alone.{skipped}")
    else:
        peer_text = "No sentence-transformers rows (`--peer-python none`)."
    parts = [
        SECTION, "",
        f"Run {started:%Y-%m-%d %H:%M} by `{command}`. Encoder: {encoder}. Speed: {n_texts:,} passages, `title "
        f"[SEP] text` cut to {max_length} tokens, batches of {args.batch_sizes}, {args.threads} threads, "
        f"{args.repeats} rounds in "
        f"rotated order (median and best round). corefsearch's rows: `--backend torch`, and `onnx` / `onnx-int8` "
        f"of each export (`export-onnx --quantize-ops linear|all`; `fused-`: with `--fuse`, the default for "
        f"BERT-style encoders; without it, `--no-fuse`), timed through `encode_chunk`, the function `index "
        f"--dense` and `add` encode with (batches of passages sorted by token count; sentence-transformers sorts "
        f"by characters). {peer_text} "
        f"{quality} torch {torch.__version__}, ONNX Runtime {onnxruntime.__version__}.",
        "",
        markdown_table(["Encoder", "passages/s (median)", "best", f"× {fastest or 'peer'} (median)", "MRR@10",
                        "Δ MRR@10 vs torch"], lines, ["l", "r", "r", "r", "r", "r"]),
        "",
        f"Machine: {info['CPU model']}, {info['CPUs']}; load average at the end (1, 5, 15 min): {load_average()} "
        "(other work on the machine shares its cores: compare rows of one run, not runs).", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
