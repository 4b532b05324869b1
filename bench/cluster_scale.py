"""How ``corefsearch cluster --method encoder --scope corpus`` grows with the number of mentions.

Corpora of n mentions (``--sizes``) are made of real ECB+ mentions repeated into distinct
documents: every document of ECB+ (all 43 topics, every gold event mention of the validated
sentences, 6,833 mentions) is copied again and again under new document ids until n mentions. Each
corpus is built with ``build-dataset --format generic --sentences newline --split-by corpus`` (every
document in the test split) and clustered whole (``--scope corpus``: the kNN graph with ``--k``
neighbours, FAISS exact up to 20,000 mentions and an inverted file above) by one ``corefsearch
cluster`` process under ``/usr/bin/time``: its seconds and peak memory are what a user sees, and
the command's own report splits them into encoding and clustering.

The copies are what make a 200,000-mention run affordable on 2 CPU cores: ``cluster`` encodes
identical inputs once (the 6,833 distinct ones; encoding each of 200,000 distinct mentions would
take hours at the rate of the first row), so this measures the clustering's growth (kNN graph and
average linkage) at full size and the encoder at the size of ECB+. No metrics are reported: the
copies make them meaningless.

The copies are also exact duplicates for the clustering: ``cluster`` merges identical vectors into
one weighted node before the kNN graph (exact for average linkage), so the first table's kNN and
linkage work on the distinct vectors only. The second table measures the kNN graph and the linkage
on n *distinct* vectors (``--distinct``, default on): the encoder's vectors of the ECB+ mentions,
each copy moved by Gaussian noise (σ = ``--jitter`` per unit vector, so that a copy keeps a cosine of
about 1/√(1+σ²) with its original: a paraphrase of the same mention rather than a duplicate) and
clustered by ``cluster_knn`` in a child process under ``/usr/bin/time``; this is the growth a corpus
of n different mentions would see, without encoding n mentions.

Prints the table and writes it into ``bench/RESULTS.md`` under
``## Whole-corpus coreference at scale (bench/cluster_scale.py)``, replacing that section if present.

Run: ``python bench/cluster_scale.py --model MODEL_DIR [--sizes 25000,50000,100000,200000] [--k 50]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")

import numpy as np  # noqa: E402
from bm25 import machine, markdown_table, write_section  # noqa: E402
from cluster import CLI, build, log  # noqa: E402
from cluster import timed_run as timed  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Whole-corpus coreference at scale (bench/cluster_scale.py)"
STAGES = re.compile(r"\(encode ([0-9.]+) s, cluster ([0-9.]+) s\)(?:; ([0-9,]+) distinct)?")


def source_documents(dataset: Path) -> list[tuple[str, list[dict]]]:
    """Each document of ``dataset`` as one text (its passages, in order, one per line) with its gold
    mentions at their offsets in that text."""
    passages: dict[str, list[tuple[int, dict]]] = {}
    with (dataset / "passages.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            passage = json.loads(line)
            passages.setdefault(passage["doc_id"], []).append((int(passage["id"].rsplit("-", 1)[1]), passage))
    documents = []
    for doc_id in sorted(passages):
        lines_of_doc, mentions, offset = [], [], 0
        for _, passage in sorted(passages[doc_id], key=lambda item: item[0]):
            text = passage["text"]
            if "\n" in text or "\r" in text:  # a line break inside a sentence would split it in two
                raise SystemExit(f"{dataset}: passage {passage['id']} has a line break")
            mentions += [{**m, "start": offset + m["start"], "end": offset + m["end"]} for m in passage["mentions"]]
            lines_of_doc.append(text)
            offset += len(text) + 1
        documents.append(("\n".join(lines_of_doc), mentions))
    return documents


def synthetic_corpus(dataset: Path, folder: Path, size: int) -> int:
    """Write ``corpus.jsonl`` and ``mentions.jsonl`` (generic format) of copies of the documents of
    ``dataset`` under new ids, copy after copy, until ``size`` mentions; the number written."""
    documents = [doc for doc in source_documents(dataset) if doc[1]]
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as corpus, \
            (folder / "mentions.jsonl").open("w", encoding="utf-8") as mentions:
        for number in range(size):
            text, gold = documents[number % len(documents)]
            doc_id = f"copy{number // len(documents)}-{number % len(documents)}"
            corpus.write(json.dumps({"doc_id": doc_id, "text": text, "split": "test"}) + "\n")
            for i, m in enumerate(gold):
                mentions.write(json.dumps({"mention_id": f"{doc_id}-{i}", "doc_id": doc_id, "start": m["start"],
                                           "end": m["end"], "cluster_id": m["cluster_id"], "type": m["type"]})
                               + "\n")
            written += len(gold)
            if written >= size:
                break
    return written


def source_vectors(model: Path, source: Path, cache: Path) -> np.ndarray:
    """The encoder's vectors of every mention of ``source`` (all splits), cached in ``cache``."""
    if cache.exists():
        return np.load(cache)
    from corefsearch.cluster.encoder import split_records
    from corefsearch.cluster.model import MentionEncoder

    records = [r for split in ("train", "dev", "test") for r in split_records(source, split)]
    log(f"encoding the {len(records):,} source mentions for the distinct-vector rows")
    vectors = MentionEncoder.load(model).encode(records, batch_size=64)
    np.save(cache, vectors)
    return vectors


def jittered(vectors: np.ndarray, size: int, sigma: float, seed: int = 13) -> np.ndarray:
    """``size`` unit vectors: row i is row ``i % len(vectors)`` plus Gaussian noise of norm about σ."""
    rng = np.random.default_rng(seed)
    dimension = vectors.shape[1]
    out = np.empty((size, dimension), dtype=np.float32)
    for start in range(0, size, 8192):  # in blocks: the peak memory is that of the result
        rows = np.arange(start, min(size, start + 8192))
        moved = vectors[rows % len(vectors)] + rng.standard_normal((len(rows), dimension), dtype=np.float32) * \
            np.float32(sigma / np.sqrt(dimension))
        out[rows] = moved / np.linalg.norm(moved, axis=1, keepdims=True)
    return out


def linkage_child(vectors_file: Path, size: int, sigma: float, k: int, tau: float) -> None:
    """Child process: kNN graph + average linkage of ``size`` jittered vectors; prints the timings."""
    from corefsearch.cluster import agglomerative

    vectors = jittered(np.load(vectors_file), size, sigma)
    # cluster_knn's steps, timed one by one: distinct rows, the kNN graph, the linkage
    started = time.perf_counter()
    matrix, copy_of, weights = agglomerative.distinct_rows(agglomerative.normalised(vectors))
    if len(matrix) != size:
        raise SystemExit("the jittered vectors are not all distinct")
    a, b, sims = agglomerative.knn_edges(matrix, k)
    knn_s = time.perf_counter() - started
    labels = np.arange(len(matrix), dtype=np.int64)
    agglomerative._cluster_graph(a, b, sims, tau, weights, labels)
    linkage_s = time.perf_counter() - started - knn_s
    labels = agglomerative.canonical_labels(labels[copy_of])
    print(json.dumps({"knn_s": knn_s, "linkage_s": linkage_s, "edges": len(a), "clusters": int(labels.max()) + 1}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="A mention encoder from `train clusterer`.")
    parser.add_argument("--sizes", default="25000,50000,100000,200000", help="Mention counts, comma-separated.")
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--out-dir", type=Path, default=None, help="Corpora, datasets, clusters (default: temp).")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    parser.add_argument("--cli-sizes", default=None,
                        help="Mention counts of the `corefsearch cluster` rows (default: --sizes).")
    parser.add_argument("--distinct", action=argparse.BooleanOptionalAction, default=True,
                        help="Also time the kNN graph and linkage on n distinct (jittered) vectors.")
    parser.add_argument("--jitter", type=float, default=0.3, help="σ of the distinct rows' noise.")
    parser.add_argument("--child", nargs=2, metavar=("VECTORS", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    tau = float(json.loads((args.model / "training_args.json").read_text(encoding="utf-8")).get("threshold", 0.2))
    if args.child:
        linkage_child(Path(args.child[0]), int(args.child[1]), args.jitter, args.k, tau)
        return
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-cluster-scale-"))
    started = time.perf_counter()
    source = build(root, "event")
    header = ["Mentions", "Documents", "build-dataset s", "distinct inputs", "cluster s", "encode s",
              "kNN + linkage s", "peak MB", "clusters"]
    rows = []
    for size in [int(s) for s in (args.cli_sizes or args.sizes).split(",") if s.strip()]:
        corpus = root / f"synthetic-{size}"
        dataset = root / f"synthetic-{size}-dataset"
        if not (corpus / "mentions.jsonl").exists():
            log(f"writing a corpus of {size:,} mentions")
            synthetic_corpus(source, corpus, size)
        documents = sum(1 for _ in (corpus / "corpus.jsonl").open(encoding="utf-8"))
        build_s = 0.0
        if not (dataset / "manifest.json").exists():
            log(f"building {dataset.name}")
            build_s, _, _ = timed([*CLI, "build-dataset", str(corpus), "--format", "generic", "--sentences",
                                   "newline", "--split-by", "corpus", "--passage", "sentence", "--out", str(dataset)])
        out = root / f"clusters-{size}.jsonl"
        log(f"clustering {size:,} mentions (--scope corpus, --k {args.k})")
        seconds, peak, report = timed([*CLI, "cluster", str(dataset), "--method", "encoder", "--model",
                                       str(args.model), "--scope", "corpus", "--k", str(args.k), "--split", "test",
                                       "--out", str(out)])
        stages = STAGES.search(" ".join(report.split()))
        encode_s, cluster_s = (float(stages[1]), float(stages[2])) if stages else (float("nan"), float("nan"))
        distinct = stages[3] if stages and stages[3] else "all"
        clusters = len({json.loads(line)["cluster_id"] for line in out.open(encoding="utf-8")})
        mentions = sum(1 for _ in out.open(encoding="utf-8"))
        rows.append([f"{mentions:,}", f"{documents:,}", f"{build_s:.1f}" if build_s else "(built before)", distinct,
                     f"{seconds:.1f}", f"{encode_s:.1f}", f"{cluster_s:.1f}", f"{peak / 1024:,.0f}", f"{clusters:,}"])
        log(" | ".join(rows[-1]))
    distinct_rows = []
    if args.distinct:
        cache = root / "source-vectors.npy"
        source_vectors(args.model, source, cache)
        for size in [int(s) for s in args.sizes.split(",") if s.strip()]:
            log(f"kNN graph + linkage of {size:,} distinct vectors")
            seconds, peak, report = timed([sys.executable, str(Path(__file__).resolve()), "--model", str(args.model),
                                           "--k", str(args.k), "--jitter", str(args.jitter),
                                           "--child", str(cache), str(size)])
            child = json.loads(report.strip().splitlines()[-1])
            distinct_rows.append([f"{size:,}", f"{child['edges']:,}", f"{child['knn_s']:.1f}",
                                  f"{child['linkage_s']:.1f}", f"{seconds:.1f}", f"{peak / 1024:,.0f}",
                                  f"{child['clusters']:,}"])
            log(" | ".join(distinct_rows[-1]))
    minutes = (time.perf_counter() - started) / 60
    given = sys.argv[1:] if argv is None else argv
    model_args = json.loads((args.model / "training_args.json").read_text(encoding="utf-8"))
    lines = [SECTION, "",
             f"- Date: {dt.datetime.now().strftime('%Y-%m-%d %H:%M')} (local time), total run time {minutes:.1f} min",
             *(f"- {key}: {value}" for key, value in machine().items()),
             f"- Command: `{shlex.join(['python', 'bench/cluster_scale.py', *given])}`",
             f"- Model: {args.model.name} (τ {model_args.get('threshold')}); --k {args.k}; encoding batch 64, CPU.",
             "- Data: copies of the ECB+ documents with their event mentions (see the script's docstring); "
             "s and peak MB: the whole `corefsearch cluster` process (`/usr/bin/time`); encode and kNN + "
             "linkage: the two steps as the command reports them.",
             "", markdown_table(header, rows, "r" * len(header)), ""]
    if distinct_rows:
        distinct_header = ["Distinct vectors", "kNN edges", "kNN s", "linkage s", "process s", "peak MB", "clusters"]
        lines += [f"kNN graph and average linkage alone on n distinct vectors (the encoder's vectors of the ECB+ "
                  f"mentions, copies moved by noise of σ {args.jitter}; `cluster_knn` at τ {tau}, --k {args.k}, "
                  "in one process under `/usr/bin/time`):", "",
                  markdown_table(distinct_header, distinct_rows, "r" * len(distinct_header)), ""]
    section = "\n".join(lines)
    print(section)
    write_section(args.results, section, SECTION)


if __name__ == "__main__":
    main()
