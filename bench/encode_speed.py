"""Dense encoding speed on the CPU: sentence-transformers against corefsearch's backends, and what
the faster backends cost in MRR@10 (issue 13, part 2).

One run, one model, one set of texts, one thread count:

- **speed**: passages per second encoding a seeded sample of ``--passages`` ECB+ passages (all
  topics, as bench/dense.py builds the collection; ``title [SEP] text`` cut to 180 tokens, batches
  of 64) by ``SentenceTransformer.encode`` on the bundled all-MiniLM-L6-v2, and by corefsearch's
  passage encoder on the same weights with ``--backend torch``, ``onnx`` and ``onnx-int8``. The rows
  take turns, ``--repeats`` rounds in an order rotated each round (a load the machine carries falls
  on every row alike); the median round is reported, after one untimed warm-up batch each.
- **quality**: MRR@10 of the dense retriever (the same encoder) with each backend on ECB+ test
  queries (a seeded sample of ``--queries``) over the test-topic collection (exact inner-product
  search, FAISS ``IndexFlatIP``, the query's own passage left out, as ``corefsearch search`` does).
  ``--mrr-passages N`` cuts the collection to N passages (the sampled queries' own and relevant
  passages, then a seeded sample of the rest): for a quick check only, the MRR of a cut collection is
  not the benchmark's.

The encoder is ``--encoder`` (a retriever folder; exported with ``corefsearch export-onnx`` when it
has no current export) or, by default, the bundled all-MiniLM-L6-v2 as the zero-shot retriever
(mean pooling, no markers), exported once into ``OUT_DIR/minilm-onnx`` with ``export-onnx default
--out``. Writes ``## Dense encoding speed (bench/encode_speed.py)`` into ``--results``
(bench/RESULTS.md), replacing that section.

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

from corefsearch.datasets.build import BuildOptions, build_dataset  # noqa: E402
from corefsearch.datasets.dataset import Dataset  # noqa: E402
from corefsearch.datasets.ecbplus import read_ecbplus  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ECBPLUS = ROOT / "data" / "ecbplus" / "ECBplus.tar.gz"
SECTION = "## Dense encoding speed (bench/encode_speed.py)"
BACKENDS = ("torch", "onnx", "onnx-int8")
ST_ROW = "sentence-transformers `encode`"
MAX_LENGTH = 180
BATCH = 64


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def dataset(root: Path, name: str, options: BuildOptions) -> Path:
    out = root / name
    if not (out / "manifest.json").exists():
        log(f"building the ECB+ dataset {name}")
        build_dataset(read_ecbplus(ECBPLUS), out, options, overwrite=True, source_name=name)
    return out


def exported_encoder(root: Path, encoder: Path | None) -> Path:
    """A retriever folder with a current ONNX export of every encoder (fp32 and int8)."""
    from corefsearch.base.errors import CorefSearchError
    from corefsearch.dense.model import BiEncoder
    from corefsearch.export.onnx import export_onnx

    folder = encoder if encoder is not None else root / "minilm-onnx"
    try:
        for backend in ("onnx", "onnx-int8"):
            BiEncoder.load(str(folder), "cpu").use_backend(backend)
        return folder
    except CorefSearchError:
        pass
    if encoder is None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)  # an earlier, interrupted or stale copy
        summary = export_onnx("default", out=folder, log=log)
    else:
        summary = export_onnx(folder, log=log)
    for file in summary.files:
        log(f"wrote {file.path} ({file.megabytes:.1f} MB, max abs diff to torch {file.max_abs_diff:.2e})")
    return folder


def load(folder: Path, backend: str, threads: int) -> Any:
    from corefsearch.dense.model import BiEncoder

    model = BiEncoder.load(str(folder), "cpu")
    model.use_backend(backend, threads=threads)
    return model


def speed(folder: Path, titles: list[str], texts: list[str], threads: int, repeats: int,
          sentence_transformer: str) -> dict[str, list[float]]:
    """Seconds per round of each row, rows taking turns in a rotated order."""
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(sentence_transformer, device="cpu")
    reference.max_seq_length = MAX_LENGTH
    joined = [f"{title} [SEP] {text}" if title else text for title, text in zip(titles, texts, strict=True)]
    encoders: dict[str, Callable[[list[str], list[str]], Any]] = {
        ST_ROW: lambda _, t: reference.encode(t, batch_size=BATCH, show_progress_bar=False)}
    for backend in BACKENDS:
        model = load(folder, backend, threads)
        encoders[backend] = (lambda m: lambda ti, te: m.passage_encoder.encode_passages(
            ti, te, max_length=MAX_LENGTH, batch_size=BATCH))(model)
    rows = list(encoders)
    for name in rows:  # warm-up, untimed
        encoders[name](titles[:BATCH], joined[:BATCH] if name == ST_ROW else texts[:BATCH])
    seconds: dict[str, list[float]] = {name: [] for name in rows}
    for round_ in range(repeats):
        for name in rows[round_ % len(rows):] + rows[:round_ % len(rows)]:
            began = time.perf_counter()
            encoders[name](titles, joined if name == ST_ROW else texts)
            seconds[name].append(time.perf_counter() - began)
        log(f"round {round_ + 1}: " + ", ".join(f"{n} {len(texts) / s[-1]:.0f}/s" for n, s in seconds.items()))
    return seconds


def mrr(folder: Path, collection: Path, n_queries: int, mrr_passages: int | None,
        threads: int) -> tuple[dict[str, float], int, int]:
    """MRR@10 of each backend: exact inner-product search over the (maybe cut) collection."""
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
    for backend in BACKENDS:
        model = load(folder, backend, threads)
        log(f"MRR@10 with {backend}: encoding {len(passages):,} passages and {len(queries):,} queries")
        vectors = model.passage_encoder.encode_passages([p.title for p in passages], [p.text for p in passages],
                                                        max_length=model.config.max_passage_len, batch_size=BATCH)
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        query_vectors = model.query_encoder.encode_queries(queries, max_length=model.config.max_query_len)
        found_scores, rows = index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), 11)
        run = {}
        for query, row_scores, row_ids in zip(queries, found_scores, rows, strict=True):
            hits = [(ids[r], float(s)) for s, r in zip(row_scores, row_ids, strict=True)
                    if r >= 0 and ids[r] != query.passage_id]
            run[query.id] = dict(hits[:10])
        scores[backend] = evaluate_run(run, {q.id: qrels.get(q.id, {}) for q in queries}, "trec",
                                       backend).aggregate["MRR@10"]
        log(f"MRR@10 with {backend}: {100 * scores[backend]:.2f}")
    return scores, len(queries), len(passages)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None, help="Datasets and the exported encoder.")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--encoder", type=Path, default=None,
                        help="A retriever folder (default: the bundled all-MiniLM-L6-v2, zero-shot, exported).")
    parser.add_argument("--passages", type=int, default=2000, help="Passages timed (a seeded sample).")
    parser.add_argument("--queries", type=int, default=500, help="ECB+ test queries for MRR@10 (a seeded sample).")
    parser.add_argument("--mrr-passages", type=int, default=None,
                        help="Cut the MRR collection to N passages (a quick check only; default: all test topics).")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="Timed rounds (the median is reported).")
    args = parser.parse_args(argv)
    started = dt.datetime.now()
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-encode-speed-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"working in {root}")

    import torch

    from corefsearch.base.models import default_model_path

    torch.set_num_threads(args.threads)
    folder = exported_encoder(root, args.encoder)
    # sentence-transformers loads the encoder folder itself (it holds modules.json, see st_export):
    # the bundled model for the default, the retriever's passage encoder otherwise.
    from corefsearch.dense.model import BiEncoder

    model = BiEncoder.load(str(folder), "cpu")
    st_folder = (default_model_path() if args.encoder is None
                 else str(folder / ("query_encoder" if model.config.shared_encoder else "passage_encoder")))
    all_topics = dataset(root, "ecb-all", BuildOptions())
    passages = list(Dataset(all_topics).passages())
    sample = [passages[i] for i in sorted(random.Random(13).sample(range(len(passages)),
                                                                   min(args.passages, len(passages))))]
    titles, texts = [p.title for p in sample], [p.text for p in sample]
    log(f"timing {len(texts):,} passages on {args.threads} threads, {args.repeats} rounds")
    seconds = speed(folder, titles, texts, args.threads, args.repeats, st_folder)
    test_topics = dataset(root, "ecb-test", BuildOptions(splits=("test",)))
    scores, n_queries, n_passages = mrr(folder, test_topics, args.queries, args.mrr_passages, args.threads)
    section = report(args, seconds, len(texts), scores, n_queries, n_passages, args.encoder is None, started,
                     st_folder)
    print(section)
    write_section(args.results, section, SECTION)
    log(f"wrote {args.results}")
    return 0


def report(args: argparse.Namespace, seconds: dict[str, list[float]], n_texts: int, scores: dict[str, float],
           n_queries: int, n_passages: int, default: bool, started: dt.datetime, st_folder: str) -> str:
    import onnxruntime
    import sentence_transformers
    import torch

    rate = {name: n_texts / statistics.median(values) for name, values in seconds.items()}
    torch_mrr = scores.get("torch")
    lines = []
    for name in seconds:
        mrr_cells = ["—", "—"]
        if name in scores and torch_mrr is not None:
            mrr_cells = [f"{100 * scores[name]:.2f}", f"{100 * (scores[name] - torch_mrr):+.2f}"]
        label = name if name == ST_ROW else f"corefsearch `--backend {name}`"
        lines.append([label, f"{rate[name]:,.0f}", f"{rate[name] / rate[ST_ROW]:.2f}×", *mrr_cells])
    encoder = ("the bundled all-MiniLM-L6-v2 as the zero-shot retriever (mean pooling, no markers; exported by "
               "`corefsearch export-onnx default --out DIR`)" if default else f"`{args.encoder}`")
    cut = (f" cut to {n_passages:,} passages (`--mrr-passages`: the queries' own and relevant passages plus a seeded "
           "sample; a quick check, not the benchmark's collection)" if args.mrr_passages is not None
           else f" ({n_passages:,} passages)")
    info = machine()
    command = (f"python bench/encode_speed.py --passages {args.passages} --queries {args.queries} --threads "
               f"{args.threads} --repeats {args.repeats}"
               + (f" --mrr-passages {args.mrr_passages}" if args.mrr_passages is not None else "")
               + (f" --encoder {args.encoder}" if args.encoder is not None else ""))
    parts = [
        SECTION, "",
        f"Run {started:%Y-%m-%d %H:%M} by `{command}`. Encoder: {encoder}. Speed: {n_texts:,} ECB+ passages (a "
        f"seeded sample of the all-topics collection), `title [SEP] text` cut to {MAX_LENGTH} tokens, batches of "
        f"{BATCH}, {args.threads} threads, the median of {args.repeats} rounds in rotated order; "
        f"sentence-transformers {sentence_transformers.__version__} encodes the same weights ({st_folder}) with "
        f"its own pooling (and, for all-MiniLM-L6-v2, normalisation). MRR@10: {n_queries:,} ECB+ test queries (a "
        f"seeded sample) over the test-topic collection{cut}, exact inner-product search, own passage left out. "
        f"torch {torch.__version__}, ONNX Runtime {onnxruntime.__version__}.",
        "",
        markdown_table(["Encoder", "passages/s", "× sentence-transformers", "MRR@10", "Δ MRR@10 vs torch"], lines,
                       ["l", "r", "r", "r", "r"]),
        "",
        f"Machine: {info['CPU model']}, {info['CPUs']}; load average at the end (1, 5, 15 min): "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} (other work on the machine shares its cores: compare "
        "rows of one run, not runs).", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
