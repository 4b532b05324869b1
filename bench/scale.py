"""A million passages on one machine: build-dataset, index, BM25 and dense search as the collection
grows, each against raw Pyserini or raw FAISS on the same data.

Collections (``--sizes``, in passages; default 100,000, 300,000 and 1,000,000) in the generic input
format (``corpus.jsonl`` + ``mentions.jsonl``), streamed to disk, seeded (``--seed``), nothing
downloaded:

- the real ECB+ documents (``data/ecbplus``: all 43 topics, one sentence a line, title = the headline,
  with their gold event mentions of cross-document chains and each document's topic split), test
  topics first, then dev, then train, as many whole documents as fit;
- then distractor documents (no mentions, ``split`` test) until exactly N passages: each has as many
  sentences as a randomly drawn ECB+ document, drawn at random from a pool of real sentences (every
  ECB+ sentence and every sentence of the WEC-Eng Dev paragraphs in ``data/wec-eng``, cut by spaCy's
  rule-based sentencizer), its first sentence as its title; so the vocabulary, the sentence lengths
  and the term statistics are those of real news and Wikipedia text.

Every collection is built with ``build-dataset --format generic --sentences newline --split-by corpus``
(one passage per line, so the dataset has exactly N passages; the test queries are those of the ECB+
test topics in it). Per size, each step runs as a child process under ``/usr/bin/time`` (wall seconds,
peak resident memory of the whole process, the JVM included):

- ``corefsearch build-dataset`` and ``corefsearch index`` (BM25: Lucene through Pyserini, 2 threads);
- raw Pyserini indexing of the same passages: ``python -m pyserini.index.lucene --collection
  JsonCollection --generator DefaultLuceneDocumentGenerator --storePositions --storeDocvectors
  --storeRaw`` with the same threads (run through ``corefsearch.cli.pyserini_cli``, which only sets Java up),
  on one JSONL file holding exactly the records corefsearch hands Anserini (``id``, ``contents`` =
  title + newline + text, ``title``, ``text``), written beforehand from ``passages.jsonl`` and timed apart;
- BM25 search in one warm process: a seeded sample of ``--queries`` test queries, formulated as
  ``corefsearch search`` does by default (``mention+entities``: the mention plus the named entities spaCy
  finds in its passage; formulation timed apart), searched at k = 500 one query at a time by the
  retriever ``corefsearch.search.retriever.open_retriever`` opens (``search_one``, the query's own passage left
  out) and by raw Pyserini's ``LuceneSearcher.search`` (k = 500, each hit read as (docid, score)) on the
  same index, the two taking turns query by query (which goes first alternates) after an untimed
  warm-up pass; then the whole sample as one batch (corefsearch's ``search_batch``, Anserini's
  ``SearchCollection``; raw: ``LuceneSearcher.batch_search``, hits read back), ``--threads`` threads.

Dense, at ``--dense-size`` passages (default the largest size; the collection of that size):

- the encoder: a seeded sample of ``--sample`` real passages of that collection encoded by the bundled
  all-MiniLM-L6-v2 (``corefsearch.dense.store.load_encoder("default")``, torch on the CPU,
  ``--threads`` threads, batches of 32, the index's passage length; through ``chunks.encode_chunk``, as
  ``index --dense`` encodes): its passages/s, and the projected hours for the whole collection; the
  sampled test queries encoded by its query encoder;
- the vectors: ``--dense-size`` unit vectors made from the sample, row i = sample vector ``i mod S`` plus
  seeded Gaussian noise of norm about σ = ``--jitter`` (renormalised), as ``bench/cluster_scale.py`` does,
  so that every vector is distinct (the encoder's geometry, not the encoder's vectors of those passages;
  encoding a million passages takes hours on a CPU);
- corefsearch's indexes: the vectors saved as one dense shard of the dataset (``INDEX/dense-shards/``,
  the layout ``index --dense --shard`` writes) and ``corefsearch index DATASET --dense --merge-shards 1
  --faiss flat|hnsw|ivfpq`` run under ``/usr/bin/time``: the FAISS index built by corefsearch's own code
  (``dense/faiss_index.py``, parameters from the collection size); raw FAISS builds the same index from the
  same vectors with the same parameters (IVF-PQ trained on the same rows) in a child of its own;
- search: each query vector searched one at a time at k = 500 by the ``DenseSearcher`` that
  ``open_retriever`` opens (``search_vectors``: FAISS, ids and the query's own passage left out; it asks
  FAISS for 501) and by raw ``index.search`` (k = 500) on the same index file with the same search
  parameters (HNSW efSearch = max(128, k), IVF-PQ nprobe), taking turns after a warm-up; FAISS on
  ``--threads`` threads. Also the latency of ``search_one`` (query encoding included), and for HNSW and
  IVF-PQ the overlap of their top 500 with the exact (flat) top 500.

The out dir (``--out-dir``, default a new temporary folder) keeps the corpora, datasets, indexes,
vectors and the measurements of each step (``measurements.json``): run again with the same
``--out-dir``, the steps already done are not run again and their recorded measurements are reported
(marked ``*``). Writes ``## A million passages on one machine (bench/scale.py)`` into ``--results``
(bench/RESULTS.md), replacing that section.

Run: ``python bench/scale.py [--sizes 100000,300000,1000000] [--dense-size N] [--sample 20000]
[--queries 1000] [--skip-dense] [--out-dir DIR] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import machine, markdown_table, write_section  # noqa: E402
from cluster import CLI, log, timed_run  # noqa: E402
from encode_speed import encode_as_indexed  # noqa: E402

from corefsearch.dense.encoder import DEFAULT_BATCH_SIZE  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ECBPLUS = REPO / "data" / "ecbplus" / "ECBplus.tar.gz"
WEC = REPO / "data" / "wec-eng" / "Dev_Event_gold_mentions_validated.json.gz"
SECTION = "## A million passages on one machine (bench/scale.py)"
K = 500
FAISS_TYPES = ("flat", "hnsw", "ivfpq")
MEMORY_AIM_MB = 2048
BM25_P50_AIM_MS = 20.0
HNSW_P50_AIM_MS = 5.0
OVERHEAD_AIM = 1.1
SPLIT_ORDER = {"test": 0, "dev": 1, "train": 2}


# --- the collections --------------------------------------------------------------------------------


def one_line(text: str) -> str:
    """A sentence on one line: white space (line breaks of every kind included) made single spaces."""
    return " ".join(text.split())


def ecbplus_documents() -> list[dict[str, Any]]:
    """The ECB+ documents as generic-format records (one sentence a line) with their mentions;
    test topics first, then dev, then train (each in file order)."""
    from corefsearch.datasets.ecbplus import read_ecbplus

    documents = []
    for doc in read_ecbplus(ECBPLUS):
        lines = doc.text.split("\n")
        if any(not line or line != line.strip() or len(line.splitlines()) != 1 for line in lines):
            raise SystemExit(f"{ECBPLUS}: document {doc.doc_id}: a line is not one passage of --sentences newline")
        documents.append({"doc_id": doc.doc_id, "title": doc.title, "text": doc.text, "split": doc.split,
                          "topic": doc.topic, "passages": len(lines),
                          "mentions": [{"mention_id": m.mention_id, "doc_id": doc.doc_id, "start": m.start,
                                        "end": m.end, "cluster_id": m.cluster_id, "type": m.type}
                                       for m in doc.mentions]})
    documents.sort(key=lambda d: SPLIT_ORDER[d["split"]])  # stable: file order within a split
    return documents


def sentence_pool(documents: Sequence[dict[str, Any]]) -> list[str]:
    """Every ECB+ sentence and every sentence of the WEC-Eng Dev paragraphs (spaCy's sentencizer), once each."""
    from corefsearch.base.nlp import sentence_spans
    from corefsearch.datasets.wec import read_wec

    pool = [line for doc in documents for line in doc["text"].split("\n")]
    paragraphs = [doc.text[start:end] for doc in read_wec(WEC) for start, end in doc.units]
    for paragraph, spans in zip(paragraphs, sentence_spans(paragraphs), strict=True):
        pool.extend(one_line(paragraph[start:end]) for start, end in spans)
    return [sentence for sentence in dict.fromkeys(pool) if sentence]


@functools.lru_cache(maxsize=1)
def sources() -> tuple[list[dict[str, Any]], list[str]]:
    """The ECB+ documents and the sentence pool, read once per run."""
    documents = ecbplus_documents()
    return documents, sentence_pool(documents)


def write_corpus(folder: Path, size: int, seed: int) -> dict[str, int]:
    """Write the generic-format corpus of ``size`` passages into ``folder`` (see the module doc);
    its counts. Written under temporary names and renamed at the end: a killed run is not reused."""
    documents, pool = sources()
    lengths = [doc["passages"] for doc in documents]
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    counts = {"passages": 0, "documents": 0, "ecbplus_documents": 0, "mentions": 0, "distractor_documents": 0,
              "sentence_pool": len(pool)}
    corpus_tmp, mentions_tmp = folder / "corpus.jsonl.tmp", folder / "mentions.jsonl.tmp"
    with corpus_tmp.open("w", encoding="utf-8") as corpus, mentions_tmp.open("w", encoding="utf-8") as mentions:
        for doc in documents:
            if counts["passages"] + doc["passages"] > size:
                break
            corpus.write(json.dumps({key: doc[key] for key in ("doc_id", "title", "text", "split", "topic")},
                                    ensure_ascii=False) + "\n")
            mentions.writelines(json.dumps(m, ensure_ascii=False) + "\n" for m in doc["mentions"])
            counts["passages"] += doc["passages"]
            counts["ecbplus_documents"] += 1
            counts["mentions"] += len(doc["mentions"])
        while counts["passages"] < size:
            n = min(rng.choice(lengths), size - counts["passages"])
            sentences = [pool[rng.randrange(len(pool))] for _ in range(n)]
            corpus.write(json.dumps({"doc_id": f"distractor-{counts['distractor_documents']:07d}",
                                     "title": sentences[0], "text": "\n".join(sentences), "split": "test"},
                                    ensure_ascii=False) + "\n")
            counts["passages"] += n
            counts["distractor_documents"] += 1
    counts["documents"] = counts["ecbplus_documents"] + counts["distractor_documents"]
    corpus_tmp.replace(folder / "corpus.jsonl")
    mentions_tmp.replace(folder / "mentions.jsonl")
    return counts


# --- measurements kept in the out dir -----------------------------------------------------------------


class Measurements:
    """``measurements.json`` of one folder: each step's measurements, so that a rerun reuses them."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "measurements.json"
        self.data: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8")) if self.path.exists() else {}
        self.reused: set[str] = set(self.data)

    def get(self, step: str) -> Any:
        return self.data.get(step)

    def put(self, step: str, value: Any) -> Any:
        self.data[step] = value
        self.reused.discard(step)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.path)
        return value

    def mark(self, step: str) -> str:
        return "*" if step in self.reused else ""


def timed(command: list[str]) -> dict[str, Any]:
    """Run ``command`` under ``/usr/bin/time``: its seconds, peak memory (MB) and the last line of its output."""
    seconds, peak_kb, out = timed_run(command)
    lines = out.strip().splitlines()
    return {"seconds": seconds, "peak_mb": peak_kb / 1024, "last": lines[-1] if lines else ""}


def folder_mb(folder: Path) -> float:
    """Disk use of ``folder``: each file once, hard links counted once (a dense index links its
    Pyserini-named ``index``/``docid`` to ``faiss.index``/``ids.txt``)."""
    sizes = {(f.stat().st_dev, f.stat().st_ino): f.stat().st_size for f in folder.rglob("*") if f.is_file()}
    return sum(sizes.values()) / 2 ** 20


def step(measurements: Measurements, name: str, done: bool, run: Any) -> dict[str, Any]:
    """The measurements of step ``name``: recorded ones when its output is there (``done``), else run it."""
    recorded = measurements.get(name)
    if done and recorded is not None:
        log(f"{name}: done before, reusing its measurements")
        return recorded  # type: ignore[no-any-return]
    return measurements.put(name, run())  # type: ignore[no-any-return]


# --- one collection: build, index, BM25 ---------------------------------------------------------------


def collection(root: Path, size: int, seed: int, sentences: str) -> tuple[Path, Measurements]:
    """The corpus and dataset of ``size`` passages in ``root/scale-SIZE`` (made once)."""
    folder = root / f"scale-{size}"
    folder.mkdir(parents=True, exist_ok=True)
    measurements = Measurements(folder)
    corpus, dataset = folder / "corpus", folder / "dataset"

    def generate() -> dict[str, Any]:
        log(f"writing a corpus of {size:,} passages")
        started = time.perf_counter()
        counts = write_corpus(corpus, size, seed)
        return {**counts, "seed": seed, "seconds": time.perf_counter() - started}

    recorded = measurements.get("corpus")
    if recorded is not None and recorded.get("seed") != seed:
        raise SystemExit(f"{corpus} was written with --seed {recorded.get('seed')}: use another --out-dir")
    step(measurements, "corpus", (corpus / "corpus.jsonl").exists(), generate)

    def build() -> dict[str, Any]:
        log(f"build-dataset, {size:,} passages")
        shutil.rmtree(dataset, ignore_errors=True)
        result = timed([*CLI, "build-dataset", str(corpus), "--format", "generic", "--sentences", sentences,
                        "--split-by", "corpus", "--out", str(dataset)])
        manifest = json.loads((dataset / "manifest.json").read_text(encoding="utf-8"))
        counts = manifest["counts"]
        return {**result, "passages": counts["passages"], "documents": counts["documents"],
                "mentions": counts["mentions"], "test_queries": counts["splits"]["test"]["queries"],
                "mb": folder_mb(dataset)}

    fresh_corpus = "corpus" not in measurements.reused
    step(measurements, "build-dataset", (dataset / "manifest.json").exists() and not fresh_corpus, build)
    return dataset, measurements


def pyserini_collection(dataset: Path, folder: Path) -> float:
    """The passages as one Pyserini JsonCollection file (the records corefsearch hands Anserini); seconds."""
    from corefsearch.datasets.dataset import iter_passages
    from corefsearch.sparse.index import MAIN_KEYS, passage_contents

    started = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with (folder / "passages.jsonl").open("w", encoding="utf-8") as handle:
        for p in iter_passages(dataset / "passages.jsonl"):
            record = {"id": p.id, "contents": passage_contents(p.title, p.text), "title": p.title, "text": p.text}
            handle.write(json.dumps({key: record[key] for key in MAIN_KEYS}, ensure_ascii=False) + "\n")
    return time.perf_counter() - started


def sparse_rows(root: Path, size: int, args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """Build, index (corefsearch and raw Pyserini) and search one collection; its measurements."""
    dataset, measurements = collection(root, size, args.seed, args.sentences)
    folder = dataset.parent
    index, raw_input, raw_index = folder / "index", folder / "pyserini-input", folder / "pyserini-index"

    def lucene() -> dict[str, Any]:
        log(f"corefsearch index, {size:,} passages")
        shutil.rmtree(index, ignore_errors=True)
        result = timed([*CLI, "index", str(dataset), "--out", str(index), "--threads", str(args.threads)])
        return {**result, "mb": folder_mb(index / "lucene")}

    fresh_dataset = "build-dataset" not in measurements.reused
    step(measurements, "index", (index / "lucene" / "manifest.json").exists() and not fresh_dataset, lucene)

    def raw() -> dict[str, Any]:
        log(f"raw Pyserini indexing, {size:,} passages")
        convert = pyserini_collection(dataset, raw_input)
        shutil.rmtree(raw_index, ignore_errors=True)
        result = timed([sys.executable, "-m", "corefsearch.cli.pyserini_cli", "pyserini.index.lucene",
                        "--collection", "JsonCollection", "--input", str(raw_input), "--index", str(raw_index),
                        "--generator", "DefaultLuceneDocumentGenerator", "--threads", str(args.threads),
                        "--storePositions", "--storeDocvectors", "--storeRaw"])
        shutil.rmtree(raw_input, ignore_errors=True)  # a copy of the passages: not kept
        return {**result, "convert_seconds": convert, "mb": folder_mb(raw_index)}

    step(measurements, "pyserini-index", any(raw_index.glob("segments_*")) and not fresh_dataset, raw)

    def search() -> dict[str, Any]:
        log(f"BM25 search, {size:,} passages")
        result = timed([sys.executable, str(Path(__file__).resolve()), "--child", "bm25", str(index), str(dataset),
                        "--queries", str(args.queries), "--threads", str(args.threads), "--seed", str(args.seed)])
        return {**json.loads(result["last"]), "peak_mb": result["peak_mb"]}

    step(measurements, f"bm25-search-{args.queries}", {"index", "pyserini-index"} <= measurements.reused, search)
    return dataset, {name: measurements.get(name) for name in measurements.data} | {"_marks": measurements}


def sampled_queries(dataset: Path, n: int, seed: int) -> list[Any]:
    """A seeded sample of ``n`` test queries of ``dataset`` (all when fewer), in file order."""
    from corefsearch.datasets.dataset import Dataset

    queries = Dataset(dataset).queries("test")
    keep = sorted(random.Random(seed).sample(range(len(queries)), min(n, len(queries))))
    return [queries[i] for i in keep]


def percentiles(seconds: Sequence[float]) -> dict[str, float]:
    """p50 and p95 (ms, nearest rank on the sorted sample), the mean (ms) and queries per second."""
    ordered = sorted(seconds)
    if not ordered:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "mean_ms": float("nan"), "qps": float("nan")}

    def rank(q: float) -> float:  # nearest rank
        return 1000 * ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return {"p50_ms": 1000 * statistics.median(ordered), "p95_ms": rank(0.95),
            "mean_ms": 1000 * statistics.fmean(ordered), "qps": len(ordered) / sum(ordered)}


def bm25_child(index: Path, dataset: Path, n: int, threads: int, seed: int) -> dict[str, Any]:
    """Child process: BM25 latency and throughput of corefsearch's retriever against raw Pyserini."""
    from corefsearch.search.retriever import open_retriever
    from corefsearch.sparse.search import BM25Options

    queries = sampled_queries(dataset, n, seed)
    if not queries:
        return {"queries": 0}
    retriever: Any = open_retriever(index, BM25Options(threads=threads))  # query format: search's default
    started = time.perf_counter()
    strings = retriever.formulate(queries)
    formulate_seconds = time.perf_counter() - started
    retriever.warm()
    from pyserini.search.lucene import LuceneSearcher  # after open_retriever: Java is set up as corefsearch does

    raw = LuceneSearcher(str(index / "lucene" / "index"))
    raw.set_bm25(retriever.options.k1, retriever.options.b)

    def ours(i: int) -> list[str]:
        return [hit.passage_id for hit in retriever.search_one(queries[i], K, query_string=strings[i])]

    def theirs(i: int) -> list[str]:
        return [docid for docid, _ in ((h.docid, h.score) for h in raw.search(strings[i], k=K))]

    for i in range(min(len(queries), 200)):  # warm-up: JIT, caches, page cache
        ours(i), theirs(i)
    times: dict[str, list[float]] = {"ours": [], "raw": []}
    same_top = 0
    for i in range(len(queries)):
        found = {}
        for name in (("ours", "raw") if i % 2 == 0 else ("raw", "ours")):
            began = time.perf_counter()
            found[name] = ours(i) if name == "ours" else theirs(i)
            times[name].append(time.perf_counter() - began)
        own = queries[i].passage_id
        same_top += found["ours"][:100] == [pid for pid in found["raw"] if pid != own][:100]
    qids = [q.id for q in queries]
    began = time.perf_counter()
    retriever.search_batch(strings, qids, K, [q.passage_id for q in queries])
    batch_ours = time.perf_counter() - began
    began = time.perf_counter()
    results = raw.batch_search(strings, qids, k=K, threads=threads)
    _ = {qid: [(h.docid, h.score) for h in hits] for qid, hits in results.items()}
    batch_raw = time.perf_counter() - began
    return {"queries": len(queries), "formulate_seconds": formulate_seconds, "ours": percentiles(times["ours"]),
            "raw": percentiles(times["raw"]), "same_top100": same_top, "batch_ours_qps": len(queries) / batch_ours,
            "batch_raw_qps": len(queries) / batch_raw, "passages": retriever.num_passages}


# --- dense -----------------------------------------------------------------------------------------------


def jittered_blocks(vectors: Any, size: int, sigma: float, seed: int) -> Iterator[Any]:
    """``size`` unit vectors in blocks: row i is row ``i % len(vectors)`` plus Gaussian noise of norm about σ
    (as bench/cluster_scale.py's ``jittered``, streamed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    dimension = vectors.shape[1]
    for start in range(0, size, 8192):
        rows = np.arange(start, min(size, start + 8192))
        moved = vectors[rows % len(vectors)] + rng.standard_normal((len(rows), dimension), dtype=np.float32) * \
            np.float32(sigma / np.sqrt(dimension))
        yield (moved / np.linalg.norm(moved, axis=1, keepdims=True)).astype(np.float32)


def encode_child(dataset: Path, out: Path, sample: int, n_queries: int, threads: int, seed: int) -> dict[str, Any]:
    """Child process: encode a seeded sample of the dataset's passages and the sampled test queries with
    the bundled default encoder; save the vectors and the encoder's record; the throughput."""
    import numpy as np
    import torch

    from corefsearch.datasets.dataset import iter_passages
    from corefsearch.dense.chunks import encoder_record, scan_passages
    from corefsearch.dense.store import load_encoder

    torch.set_num_threads(threads)
    _, count = scan_passages(dataset / "passages.jsonl")
    rows = set(random.Random(seed).sample(range(count), min(sample, count)))
    titles, texts = [], []
    for row, passage in enumerate(iter_passages(dataset / "passages.jsonl")):
        if row in rows:
            titles.append(passage.title)
            texts.append(passage.text)
    model = load_encoder("default", "cpu")
    length = model.config.max_passage_len
    batch = DEFAULT_BATCH_SIZE
    encode_as_indexed(model, titles[:batch], texts[:batch], batch)  # warm-up
    began = time.perf_counter()
    vectors = encode_as_indexed(model, titles, texts, batch)  # as index --dense encodes
    passage_seconds = time.perf_counter() - began
    queries = sampled_queries(dataset, n_queries, seed)
    query_vectors = model.query_encoder.encode_queries(queries, max_length=model.config.max_query_len)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "sample.npy", np.ascontiguousarray(vectors, dtype=np.float32))
    np.save(out / "queries.npy", np.ascontiguousarray(query_vectors, dtype=np.float32))
    (out / "queries.json").write_text(json.dumps([[q.id, q.passage_id] for q in queries]), encoding="utf-8")
    (out / "encoder.json").write_text(json.dumps(encoder_record(model)), encoding="utf-8")
    return {"sample": len(texts), "seconds": passage_seconds, "passages_per_second": len(texts) / passage_seconds,
            "max_length": length, "queries": len(queries), "dimension": int(vectors.shape[1])}


def write_shard(dataset: Path, vectors_dir: Path, shard: Path, size: int, sigma: float, seed: int) -> None:
    """The jittered vectors as shard 0 of 1 of ``dataset``, in the layout ``index --dense --shard`` writes."""
    import numpy as np

    from corefsearch.base.artefacts import DENSE_SHARD, manifest_record, versions, write_manifest
    from corefsearch.datasets.dataset import iter_passages
    from corefsearch.dense.chunks import scan_passages

    sha, count = scan_passages(dataset / "passages.jsonl")
    if count != size:
        raise SystemExit(f"{dataset} has {count:,} passages, expected {size:,}")
    sample = np.load(vectors_dir / "sample.npy")
    encoder = json.loads((vectors_dir / "encoder.json").read_text(encoding="utf-8"))
    tmp = shard.with_name(shard.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    target = np.lib.format.open_memmap(tmp / "vectors.npy", mode="w+", dtype=np.float32,
                                       shape=(size, sample.shape[1]))
    offset = 0
    for block in jittered_blocks(sample, size, sigma, seed):
        target[offset:offset + len(block)] = block
        offset += len(block)
    target.flush()
    del target
    with (tmp / "ids.txt").open("w", encoding="utf-8") as handle:
        handle.writelines(f"{p.id}\n" for p in iter_passages(dataset / "passages.jsonl"))
    write_manifest(tmp / "manifest.json", manifest_record(DENSE_SHARD, {
        "dataset": str(dataset.resolve()), "passages_sha256": sha, "passages": count, "encoder": encoder,
        "shard": [0, 1], "rows": [0, count],
        "encoding": {"batch_size": DEFAULT_BATCH_SIZE, "chunk_size": count, "device": "cpu", "backend": "torch",
                     "encoded": 0, "resumed": 0, "seconds": 0.0, "passages_per_second": None,
                     "note": f"not encoded: {len(sample):,} encoded sample vectors jittered (sigma {sigma}) "
                             f"to {count:,} rows by bench/scale.py"},
        "versions": versions("faiss", "torch", "transformers", "numpy")}))
    shutil.rmtree(shard, ignore_errors=True)
    tmp.replace(shard)


def link_shard(shard: Path, index: Path) -> None:
    """``index/dense-shards/shard-0-of-1`` as hard links to ``shard`` (one copy of the vectors on disk)."""
    target = index / "dense-shards" / "shard-0-of-1"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for file in shard.iterdir():
        try:
            os.link(file, target / file.name)
        except OSError:
            shutil.copyfile(file, target / file.name)


def faiss_build_child(shard: Path, parameters_file: Path, out: Path, threads: int) -> dict[str, Any]:
    """Child process: raw FAISS builds the index of ``parameters_file`` (corefsearch's manifest) from
    the shard's vectors: the same class and parameters, IVF-PQ trained on the same rows."""
    import faiss
    import numpy as np

    faiss.omp_set_num_threads(threads)
    parameters = json.loads(parameters_file.read_text(encoding="utf-8"))["faiss"]
    vectors = np.load(shard / "vectors.npy", mmap_mode="r")
    count, dimension = vectors.shape
    began = time.perf_counter()
    if parameters["type"] == "flat":
        index = faiss.IndexFlatIP(dimension)
    elif parameters["type"] == "hnsw":
        index = faiss.IndexHNSWFlat(dimension, parameters["M"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = parameters["efConstruction"]
    else:
        quantizer = faiss.IndexFlatIP(dimension)
        index = faiss.IndexIVFPQ(quantizer, dimension, parameters["nlist"], parameters["m"], parameters["nbits"],
                                 faiss.METRIC_INNER_PRODUCT)
        # the rows corefsearch trains on (VectorFiles.sample: seed 0, without replacement, in row order)
        rows = np.sort(np.random.default_rng(0).choice(count, size=parameters["training_sample"], replace=False))
        index.train(np.ascontiguousarray(vectors[rows], dtype=np.float32))
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    faiss.write_index(index, str(out))
    return {"seconds": time.perf_counter() - began, "ntotal": int(index.ntotal)}


def dense_search_child(index: Path, vectors_dir: Path, threads: int, exact: Path | None,
                       save_exact: Path | None, device: str = "cpu") -> dict[str, Any]:
    """Child process: per-query latency of corefsearch's ``DenseSearcher`` against raw FAISS on the same index
    (both on the GPU of ``device`` where corefsearch puts the index there: raw FAISS by ``index_cpu_to_gpu``)."""
    import faiss
    import numpy as np

    from corefsearch.dense import faiss_index
    from corefsearch.search.options import RetrievalOptions
    from corefsearch.search.retriever import open_retriever

    faiss.omp_set_num_threads(threads)
    import torch

    torch.set_num_threads(threads)
    searcher: Any = open_retriever(index, retrieval=RetrievalOptions("dense", device=device))
    raw = faiss.read_index(str(index / "dense" / "faiss.index"))
    if getattr(searcher, "faiss_gpu", None) is not None:  # the peer on the same card, as a user would clone it
        options = faiss.GpuClonerOptions()
        options.useFloat16LookupTables = True  # what FAISS's GPU IVF-PQ needs for 64 sub-quantizers
        raw = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, raw, options)
    faiss_index.configure_search(raw, searcher.parameters, K)
    vectors = np.load(vectors_dir / "queries.npy")
    listed = json.loads((vectors_dir / "queries.json").read_text(encoding="utf-8"))
    own = [passage_id for _, passage_id in listed]

    def ours(i: int) -> list[str]:
        return [hit.passage_id for hit in searcher.search_vectors(vectors[i:i + 1], K, [own[i]])[0]]

    def theirs(i: int) -> Any:
        return raw.search(vectors[i:i + 1], K)[1][0]

    for i in range(min(len(vectors), 50)):  # warm-up
        ours(i), theirs(i)
    times: dict[str, list[float]] = {"ours": [], "raw": []}
    rows = np.full((len(vectors), K), -1, dtype=np.int64)
    found: Any = None
    for i in range(len(vectors)):
        for name in (("ours", "raw") if i % 2 == 0 else ("raw", "ours")):
            began = time.perf_counter()
            if name == "ours":
                ours(i)
            else:
                found = theirs(i)
            times[name].append(time.perf_counter() - began)
        rows[i, :len(found)] = found
    result: dict[str, Any] = {"queries": len(vectors), "ours": percentiles(times["ours"]),
                              "raw": percentiles(times["raw"])}
    if save_exact is not None:
        np.save(save_exact, rows)
    if exact is not None and exact.exists():
        truth = np.load(exact)
        result["overlap_with_flat"] = float(np.mean([len(set(a) & set(b) - {-1}) / K
                                                     for a, b in zip(rows, truth, strict=True)]))
    from corefsearch.datasets.dataset import Dataset

    wanted = {qid for qid, _ in listed}
    queries = [q for q in Dataset(Path(searcher.manifest["dataset"])).queries("test") if q.id in wanted]
    end_to_end = []
    for query in queries:
        began = time.perf_counter()
        searcher.search_one(query, K)
        end_to_end.append(time.perf_counter() - began)
    result["search_one"] = percentiles(end_to_end)
    return result


def dense_rows(root: Path, dataset: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Encoder throughput, then for each FAISS type corefsearch's build and search against raw FAISS."""
    folder = root / f"dense-{size}"
    folder.mkdir(parents=True, exist_ok=True)
    measurements = Measurements(folder)
    vectors_dir, shard = folder / "vectors", folder / "shard"

    def encode() -> dict[str, Any]:
        log(f"encoding {args.sample:,} sampled passages and {args.queries:,} queries with the default encoder")
        result = timed([sys.executable, str(Path(__file__).resolve()), "--child", "encode", str(dataset),
                        str(vectors_dir), "--sample", str(args.sample), "--queries", str(args.queries),
                        "--threads", str(args.threads), "--seed", str(args.seed)])
        return {**json.loads(result["last"]), "peak_mb": result["peak_mb"]}

    encode_name = f"encode-{args.sample}-{args.queries}"
    encoded = step(measurements, encode_name, (vectors_dir / "queries.npy").exists(), encode)

    def jitter() -> dict[str, Any]:
        log(f"writing {size:,} jittered vectors (sigma {args.jitter})")
        began = time.perf_counter()
        write_shard(dataset, vectors_dir, shard, size, args.jitter, args.seed)
        return {"seconds": time.perf_counter() - began, "sigma": args.jitter, "sample": encoded["sample"]}

    def encode_all() -> dict[str, Any]:
        log(f"corefsearch index --dense --shard 0/1: every one of the {size:,} passages, on {args.device}")
        result = timed([*CLI, "index", str(dataset), "--out", str(folder / "encoded"), "--dense", "--shard", "0/1",
                        "--encoder", "default", "--device", args.device, "--overwrite"])
        manifest = json.loads((shard / "manifest.json").read_text(encoding="utf-8"))
        return {**result, "encoding": manifest["encoding"]}

    if args.encode_all:  # the real vectors of every passage, as `index --dense --shard 0/1` writes them
        shard = folder / "encoded" / "dense-shards" / "shard-0-of-1"
        shard_name = f"encoded-all-{args.device}"
        work = encode_all
    else:
        shard_name, work = f"shard-{encoded['sample']}-{args.jitter}", jitter
    if measurements.get(shard_name) is None:  # other vectors: the indexes built from the old ones are stale
        for kind in FAISS_TYPES:
            shutil.rmtree(folder / f"index-{kind}", ignore_errors=True)
    vectors_made = step(measurements, shard_name, (shard / "manifest.json").exists(), work)
    rows: dict[str, Any] = {"encode": encoded, "types": {},
                            "encoded_all": vectors_made if args.encode_all else None}
    exact = folder / "flat-top500.npy"
    for kind in FAISS_TYPES:
        index = folder / f"index-{kind}"

        def build(kind: str = kind, index: Path = index) -> dict[str, Any]:
            log(f"corefsearch index --dense --merge-shards 1 --faiss {kind}, {size:,} vectors")
            link_shard(shard, index)
            result = timed([*CLI, "index", str(dataset), "--out", str(index), "--dense", "--merge-shards", "1",
                            "--faiss", kind, "--device", args.device, "--overwrite"])
            shutil.rmtree(index / "dense-shards", ignore_errors=True)
            manifest = json.loads((index / "dense" / "manifest.json").read_text(encoding="utf-8"))
            return {**result, "mb": folder_mb(index / "dense"), "faiss": manifest["faiss"]}

        built = step(measurements, f"build-{kind}", (index / "dense" / "manifest.json").exists(), build)
        if (index / "dense").is_dir():  # disk use as it is now (a reused measurement may predate folder_mb)
            built = {**built, "mb": folder_mb(index / "dense")}
        fresh = f"build-{kind}" not in measurements.reused

        def raw_build(kind: str = kind, index: Path = index) -> dict[str, Any]:
            log(f"raw FAISS build ({kind}), {size:,} vectors")
            out = folder / f"raw-{kind}.index"
            result = timed([sys.executable, str(Path(__file__).resolve()), "--child", "faiss-build", str(shard),
                            str(index / "dense" / "manifest.json"), str(out), "--threads", str(args.threads)])
            out.unlink(missing_ok=True)  # only its build time is wanted
            return {**json.loads(result["last"]), "process_seconds": result["seconds"], "peak_mb": result["peak_mb"]}

        raw_built = (step(measurements, f"raw-build-{kind}", not fresh, raw_build) if args.raw_build
                     else measurements.get(f"raw-build-{kind}"))

        def search(kind: str = kind, index: Path = index) -> dict[str, Any]:
            log(f"dense search ({kind}), {encoded['queries']:,} queries at k = {K}")
            command = [sys.executable, str(Path(__file__).resolve()), "--child", "dense-search", str(index),
                       str(vectors_dir), "--threads", str(args.threads), "--device", args.device]
            command += ["--save-exact", str(exact)] if kind == "flat" else ["--exact", str(exact)]
            result = timed(command)
            return {**json.loads(result["last"]), "peak_mb": result["peak_mb"]}

        searched = step(measurements, f"search-{kind}-{encoded['queries']}",
                        not fresh and "build-flat" in measurements.reused, search)
        rows["types"][kind] = {"build": built, "raw_build": raw_built, "search": searched,
                               "marks": {name: measurements.mark(name) for name in
                                         (f"build-{kind}", f"raw-build-{kind}",
                                          f"search-{kind}-{encoded['queries']}")}}
    rows["marks"] = {"encode": measurements.mark(encode_name)}
    return rows


# --- the report ----------------------------------------------------------------------------------------------


def ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}×" if ours and theirs else "—"


def number(value: float | None, digits: int = 1) -> str:
    return "—" if value is None or value != value else f"{value:,.{digits}f}"


def report(sizes: list[int], sparse: dict[int, dict[str, Any]], dense: dict[str, Any] | None, dense_size: int,
           args: argparse.Namespace, given: list[str], minutes: float) -> str:
    queries_step = f"bm25-search-{args.queries}"
    build_header = ["Passages", "Documents", "build-dataset s", "build-dataset peak MB", "index s", "index peak MB",
                    "index MB", "raw Pyserini index s", "raw peak MB", "index / raw"]
    build_rows, search_rows = [], []
    for size in sizes:
        m = sparse[size]
        marks = m["_marks"]
        build, index, raw, search = m["build-dataset"], m["index"], m["pyserini-index"], m[queries_step]
        build_rows.append([f"{build['passages']:,}", f"{build['documents']:,}",
                           f"{build['seconds']:.1f}{marks.mark('build-dataset')}", f"{build['peak_mb']:,.0f}",
                           f"{index['seconds']:.1f}{marks.mark('index')}", f"{index['peak_mb']:,.0f}",
                           f"{index['mb']:,.0f}", f"{raw['seconds']:.1f}{marks.mark('pyserini-index')}",
                           f"{raw['peak_mb']:,.0f}", ratio(index["seconds"], raw["seconds"])])
        if search.get("queries"):
            ours, theirs = search["ours"], search["raw"]
            search_rows.append([f"{build['passages']:,}", f"{search['queries']:,}{marks.mark(queries_step)}",
                                number(ours["p50_ms"]), number(ours["p95_ms"]), number(ours["qps"], 0),
                                number(theirs["p50_ms"]), number(theirs["p95_ms"]), number(theirs["qps"], 0),
                                ratio(ours["p50_ms"], theirs["p50_ms"]), ratio(ours["mean_ms"], theirs["mean_ms"]),
                                f"{search['same_top100']:,}/{search['queries']:,}",
                                number(search["batch_ours_qps"], 0), number(search["batch_raw_qps"], 0),
                                number(search["formulate_seconds"]), f"{search['peak_mb']:,.0f}"])
        else:
            search_rows.append([f"{build['passages']:,}", "0", *["—"] * 13])
    largest = sparse[max(sizes)]
    lines = [SECTION, "",
             f"- Date: {dt.datetime.now().strftime('%Y-%m-%d %H:%M')} (local time), total run time {minutes:.1f} min",
             *(f"- {key}: {value}" for key, value in machine().items()),
             f"- faiss: {faiss_version()}; threads: {args.threads} (Lucene indexing and batch search, FAISS, torch)",
             f"- Command: `{shlex.join(['python', 'bench/scale.py', *given])}`",
             f"- Collections: the real ECB+ documents with their gold event mentions, then distractor documents "
             f"whose sentences are drawn (seed {args.seed}) from {largest['corpus']['sentence_pool']:,} real ECB+ "
             "and WEC-Eng sentences (see the script's docstring); `build-dataset --format generic --sentences "
             f"{args.sentences} --split-by corpus`; one passage per sentence.",
             "- s and peak MB: the whole child process under `/usr/bin/time` (wall seconds, maximum resident set "
             "size, the JVM included). `*`: measured by an earlier run in the same out dir.", "",
             "### Building and indexing", "",
             "raw Pyserini: `python -m pyserini.index.lucene` (JsonCollection, DefaultLuceneDocumentGenerator, "
             f"--storePositions --storeDocvectors --storeRaw, --threads {args.threads}) on a file of exactly the "
             "records corefsearch indexes (writing it, not timed in the ratio: "
             + ", ".join(f"{m['pyserini-index']['convert_seconds']:.1f} s" for m in (sparse[s] for s in sizes))
             + "); index MB: `INDEX/lucene` on disk.", "",
             markdown_table(build_header, build_rows, "r" * len(build_header)), "",
             "### BM25 search", "",
             f"A seeded sample of the test queries (at most {args.queries:,}; ECB+ test topics), query strings "
             "formulated as `corefsearch search` does by default (`mention+entities`; the formulation, NER "
             "included, is timed apart: formulate s), searched at k = 500 one at a time in a warm process: "
             "corefsearch = `open_retriever(INDEX).search_one(query, 500)` (the query's own passage left out), "
             "raw = Pyserini `LuceneSearcher.search(query_string, k=500)` with hits read as (docid, score), taking "
             "turns. same top 100: queries whose first 100 passages are the same in both (raw without the query's "
             f"own passage). batch q/s: the whole sample at once on {args.threads} threads (corefsearch "
             "`search_batch`; raw `LuceneSearcher.batch_search`, hits read back).", "",
             markdown_table(["Passages", "Queries", "p50 ms", "p95 ms", "q/s", "raw p50 ms", "raw p95 ms", "raw q/s",
                             "p50 ratio", "mean ratio", "same top 100", "batch q/s", "raw batch q/s",
                             "formulate s", "search peak MB"], search_rows, "r" * 15), ""]
    if dense is not None:
        encode = dense["encode"]
        hours = dense_size / encode["passages_per_second"] / 3600
        lines += ["### Dense search", "",
                  f"Encoder: the bundled all-MiniLM-L6-v2 (torch, CPU, {args.threads} threads, batches of "
                  f"{DEFAULT_BATCH_SIZE}, through `encode_chunk` as `index --dense` encodes, "
                  f"passages cut to {encode['max_length']} tokens) encoded {encode['sample']:,} sampled passages of "
                  f"the {dense_size:,}-passage collection in {encode['seconds']:.1f} s: "
                  f"**{encode['passages_per_second']:,.0f} passages/s**{dense['marks']['encode']}, so "
                  f"{hours:,.1f} h for the whole collection on this machine. "
                  + (vectors_text(dense["encoded_all"], dense_size, args.device) if dense.get("encoded_all") else
                     f"The index holds {dense_size:,} "
                     f"vectors made from those {encode['sample']:,} (each plus seeded Gaussian noise of norm about "
                     f"σ = {args.jitter}, renormalised: distinct vectors with the encoder's geometry, not the "
                     f"encoder's vectors of every passage)")
                  + f"; the {encode['queries']:,} queries are the encoder's vectors of the sampled test queries.", "",
                  "build: `corefsearch index DATASET --dense --merge-shards 1 --faiss TYPE` on the vectors saved "
                  "as one shard (the whole process); raw: FAISS building the same index from the same vectors "
                  "(same class and parameters, IVF-PQ trained on the same rows). Search: one query at a time at "
                  "k = 500, corefsearch = `DenseSearcher.search_vectors` (FAISS plus ids and the query's own "
                  "passage left out; it asks FAISS for 501), raw = `index.search(vector, 500)` on the same index "
                  "file with the same search parameters, taking turns; `search_one`: the same with the query "
                  "encoded. overlap@500: the share of the exact (flat) top 500 found.", ""]
        header = ["Index", "parameters", "build s", "build peak MB", "index MB", "raw build s", "build ratio",
                  "p50 ms", "p95 ms", "raw p50 ms", "raw p95 ms", "p50 ratio", "mean ratio", "search_one p50 ms",
                  "overlap@500"]
        rows = []
        for kind, row in dense["types"].items():
            build, raw_build, search, marks = row["build"], row["raw_build"], row["search"], row["marks"]
            parameters = faiss_parameters_text(row)
            rows.append([kind, parameters, f"{build['seconds']:.1f}{marks[f'build-{kind}']}",
                         f"{build['peak_mb']:,.0f}", f"{build['mb']:,.0f}",
                         f"{raw_build['seconds']:.1f}" if raw_build else "—",
                         ratio(build["seconds"], raw_build["seconds"]) if raw_build else "—",
                         number(search["ours"]["p50_ms"], 2), number(search["ours"]["p95_ms"], 2),
                         number(search["raw"]["p50_ms"], 2), number(search["raw"]["p95_ms"], 2),
                         ratio(search["ours"]["p50_ms"], search["raw"]["p50_ms"]),
                         ratio(search["ours"]["mean_ms"], search["raw"]["mean_ms"]),
                         number(search["search_one"]["p50_ms"], 2),
                         f"{search['overlap_with_flat']:.3f}" if "overlap_with_flat" in search else "1 (exact)"])
        lines += [markdown_table(header, rows, "ll" + "r" * (len(header) - 2)), ""]
    lines += ["### Aims", "", *aims(sizes, sparse, dense, queries_step), ""]
    return "\n".join(lines)


def vectors_text(encoded: dict[str, Any], size: int, device: str) -> str:
    """The sentence on ``--encode-all``'s vectors: every passage encoded by ``index --dense``, and how fast."""
    encoding = encoded["encoding"]
    return (f"The index holds the vectors of every one of the {size:,} passages, encoded by `corefsearch index "
            f"--dense --shard 0/1 --encoder default --device {device}` (batches of {encoding['batch_size']:,} on "
            f"{encoding['device']}) in **{encoding['seconds'] / 60:.1f} min** of encoding "
            f"({encoding['passages_per_second']:,.0f} passages/s; {encoded['seconds'] / 60:.1f} min for the whole "
            f"process)")


def faiss_parameters_text(row: dict[str, Any]) -> str:
    """The index's parameters as corefsearch chose them (from its manifest), e.g. ``M 32, efConstruction 200``."""
    parameters = row.get("build", {}).get("faiss") or {}
    shown = [f"{key} {value:,}" if isinstance(value, int) else f"{key} {value}" for key, value in parameters.items()
             if key not in ("type", "class", "metric")]
    return ", ".join(shown) or ("exact" if parameters.get("type") == "flat" else "—")


def aims(sizes: list[int], sparse: dict[int, dict[str, Any]], dense: dict[str, Any] | None,
         queries_step: str) -> list[str]:
    """One line per aim, met or missed, at the largest size measured."""
    largest = max(sizes)
    m = sparse[largest]

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    peaks = [m["build-dataset"]["peak_mb"], m["index"]["peak_mb"]]
    lines = [f"- build-dataset and index peak memory ≤ {MEMORY_AIM_MB:,} MB at {largest:,} passages: "
             f"{peaks[0]:,.0f} and {peaks[1]:,.0f} MB ({verdict(max(peaks) <= MEMORY_AIM_MB)}); across sizes "
             + ", ".join(f"{s:,}: {sparse[s]['build-dataset']['peak_mb']:,.0f} / {sparse[s]['index']['peak_mb']:,.0f}"
                         for s in sizes) + " MB."]
    index_ratio = m["index"]["seconds"] / m["pyserini-index"]["seconds"]
    lines.append(f"- indexing ≤ {OVERHEAD_AIM}× raw Pyserini: {index_ratio:.2f}× "
                 f"({verdict(index_ratio <= OVERHEAD_AIM)}).")
    search = m[queries_step]
    if search.get("queries"):
        p50 = search["ours"]["p50_ms"]
        search_ratio = p50 / search["raw"]["p50_ms"]
        lines.append(f"- BM25 p50 ≤ {BM25_P50_AIM_MS:g} ms: {p50:.1f} ms ({verdict(p50 <= BM25_P50_AIM_MS)}); "
                     f"search ≤ {OVERHEAD_AIM}× raw Pyserini: {search_ratio:.2f}× at p50 "
                     f"({verdict(search_ratio <= OVERHEAD_AIM)}).")
    if dense is not None and "hnsw" in dense["types"]:
        p50 = dense["types"]["hnsw"]["search"]["ours"]["p50_ms"]
        lines.append(f"- HNSW p50 ≤ {HNSW_P50_AIM_MS:g} ms at k = 500: {p50:.2f} ms "
                     f"({verdict(p50 <= HNSW_P50_AIM_MS)}); dense search ≤ {OVERHEAD_AIM}× raw FAISS at p50: "
                     + ", ".join(f"{kind} {row['search']['ours']['p50_ms'] / row['search']['raw']['p50_ms']:.2f}×"
                                 for kind, row in dense["types"].items()) + ".")
    return lines


def faiss_version() -> str:
    from importlib.metadata import version

    try:
        return version("faiss-cpu")
    except Exception:  # noqa: BLE001  (another FAISS wheel)
        import faiss

        return str(faiss.__version__)


# --- main ------------------------------------------------------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    kind, *paths = args.child
    if kind == "bm25":
        result = bm25_child(Path(paths[0]), Path(paths[1]), args.queries, args.threads, args.seed)
    elif kind == "encode":
        result = encode_child(Path(paths[0]), Path(paths[1]), args.sample, args.queries, args.threads, args.seed)
    elif kind == "faiss-build":
        result = faiss_build_child(Path(paths[0]), Path(paths[1]), Path(paths[2]), args.threads)
    elif kind == "dense-search":
        result = dense_search_child(Path(paths[0]), Path(paths[1]), args.threads, args.exact, args.save_exact,
                                    args.device)
    else:
        raise SystemExit(f"unknown child {kind}")
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,300000,1000000", help="Passage counts, comma-separated.")
    parser.add_argument("--dense-size", type=int, default=None,
                        help="Vectors in the dense indexes (default: the largest size); its collection is built "
                             "if it is not one of --sizes.")
    parser.add_argument("--sample", type=int, default=20_000, help="Passages encoded by the real encoder.")
    parser.add_argument("--queries", type=int, default=1000, help="Test queries searched (a seeded sample).")
    parser.add_argument("--jitter", type=float, default=0.3, help="σ of the noise that makes the dense vectors.")
    parser.add_argument("--skip-dense", action="store_true", help="BM25 only.")
    parser.add_argument("--encode-all", action="store_true",
                        help="Dense: encode every passage of the collection (`index --dense --shard 0/1`; a GPU's "
                             "work) instead of jittering the vectors of --sample.")
    parser.add_argument("--device", default="auto", help="Dense: where the encoder and FAISS run (auto | cpu | cuda).")
    parser.add_argument("--raw-build", action=argparse.BooleanOptionalAction, default=True,
                        help="Also build each FAISS index with raw FAISS (the build ratio; HNSW at 1M takes a while).")
    parser.add_argument("--sentences", choices=("newline", "spacy"), default="newline",
                        help="build-dataset --sentences (newline: one passage per generated line).")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out-dir", type=Path, default=None, help="Corpora, datasets, indexes (default: temp); "
                                                                     "what is there is reused.")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--exact", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--save-exact", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if not sizes or min(sizes) < 1:
        raise SystemExit("--sizes takes positive passage counts")
    dense_size = args.dense_size or max(sizes)
    # Every child (corefsearch's own commands included) runs OpenMP (FAISS) and BLAS on --threads threads:
    # the two sides of each ratio on the same threads, and no oversubscribed spinning on a shared machine.
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(args.threads)
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"out dir {root}")
    started = time.perf_counter()
    sparse: dict[int, dict[str, Any]] = {}
    datasets: dict[int, Path] = {}
    for size in sizes:
        datasets[size], sparse[size] = sparse_rows(root, size, args)
    dense = None
    if not args.skip_dense:
        dataset = datasets.get(dense_size) or collection(root, dense_size, args.seed, args.sentences)[0]
        dense = dense_rows(root, dataset, dense_size, args)
    minutes = (time.perf_counter() - started) / 60
    given = sys.argv[1:] if argv is None else argv
    section = report(sizes, sparse, dense, dense_size, args, given, minutes)
    print(section)
    write_section(args.results, section, SECTION)


if __name__ == "__main__":
    main()
