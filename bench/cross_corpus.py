"""How far models trained on ECB+ carry to other corpora, against the baselines, on each corpus.

For every corpus (by default ECB+ events, WEC-Eng Dev, MEANTIME events and MEANTIME entities, read
from ``data/``; ``--corpus NAME=FORMAT:PATH[:TYPE]`` adds one of yours) the script builds the dataset,
indexes it (Lucene with fields, and dense with each retriever), and scores on the test queries:

* **retrieval** (MRR@10, R@100, trec definitions, ×100): BM25 in the paper's form (mention + named
  entities, RM3), BM25 over the sentence fields (``sentence=1,document=0.1``), the dense retriever,
  and the hybrid dev chose on ECB+ (dense + BM25 fields, interpolation α 0.5);
* **clustering** of the test split's gold mentions (CoNLL F1, singletons kept, ×100): singletons,
  lemma, and the mention encoder with its own τ and β (within the corpus's topics when it has
  them, else over the whole split);

first with the ECB+-trained models (``--retriever``, ``--clusterer``, and ``--reader``: the hybrid's
top 50 re-ranked by it and fused with the hybrid by RRF), then, for a corpus with
train and dev queries (``--train-own``), with the same recipes trained on its own train split:
the retriever with the options recorded in ``--retriever``'s ``training_args.json``, the clusterer
with ``--clusterer``'s. ``--entity-clusterer`` (an ECB+ entity clusterer) clusters the entity
corpora's mentions in the ECB+ rows instead of ``--clusterer``. Every step writes into ``--work``
and is skipped when its output is there, so an interrupted run resumes. All through the CLI
(``python -m corefsearch``), as a user runs it.

Run: ``python bench/cross_corpus.py --work W --retriever R --clusterer C [--reader READER]
[--entity-clusterer E] [--train-own] [--results F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
FIELDS = "sentence=1,document=0.1"
RUNS = {  # name -> search options (the index and queries are added)
    "BM25 mention+entities + RM3": ["--retriever", "bm25", "--query-format", "mention+entities", "--rm3"],
    "BM25 sentence fields": ["--retriever", "bm25", "--query-format", "sentence", "--fields", FIELDS],
    "dense": ["--retriever", "dense"],
    "hybrid (dense + BM25 fields, α 0.5)": ["--retriever", "hybrid", "--query-format", "sentence",
                                            "--fields", FIELDS, "--fusion", "interpolate", "--alpha", "0.5"],
}
HYBRID = "hybrid (dense + BM25 fields, α 0.5)"
OWN_RUNS = ("dense", HYBRID)  # the runs that use the trained retriever
DEFAULT_CORPORA = {
    # name: (format, path, build options)
    "ECB+ events": ("ecbplus", DATA / "ecbplus" / "ECBplus.tar.gz", ["--mention-type", "event"]),
    "WEC-Eng Dev": ("wec", DATA / "wec-eng" / "Dev_Event_gold_mentions_validated.json.gz",
                    ["--split-ratios", "0,0,1"]),
    "MEANTIME events": ("cdcr-json", DATA / "meantime", ["--mention-type", "event"]),
    "MEANTIME entities": ("cdcr-json", DATA / "meantime", ["--mention-type", "entity"]),
}
# ECB+ clustering is scored, as in bench/cluster.py, on every gold chain (singletons and
# within-document chains too) of the validated sentences; its retrieval dataset keeps the
# cross-document chains of every sentence, as elsewhere.
CLUSTER_BUILD = {"ECB+ events": ["--chains", "all", "--validated-only"]}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cli(*args: str, log_to: Path | None = None) -> str:
    """Run ``python -m corefsearch ARGS``; its stdout (stderr to ``log_to``), or exit on failure."""
    command = [sys.executable, "-m", "corefsearch", *args]
    log(" ".join(command[2:]))
    env = {**os.environ, "COREFSEARCH_QUIET": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if log_to is not None:
        with log_to.open("a") as handle:
            handle.write(f"$ {' '.join(command[2:])}\n{done.stdout}{done.stderr}\n")
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(command[2:])}\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return done.stdout


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def build(work: Path, name: str, source: tuple[str, Path, list[str]], extra: list[str], tag: str) -> Path:
    out = work / slug(name) / tag
    if not (out / "manifest.json").exists():
        source_format, path, options = source
        cli("build-dataset", str(path), "--format", source_format, "--out", str(out), "--overwrite", *options,
            *extra, log_to=work / "log.txt")
    return out


def queries_of(dataset: Path, split: str) -> int:
    path = dataset / "queries" / f"{split}.jsonl"
    return sum(1 for line in path.open() if line.strip()) if path.exists() else 0


def index(work: Path, dataset: Path, folder: Path, retriever: Path) -> Path:
    if not (folder / "lucene").exists():
        cli("index", str(dataset), "--out", str(folder), "--fields", "--threads", "2", log_to=work / "log.txt")
    if not (folder / "dense").exists():
        cli("index", str(dataset), "--out", str(folder), "--dense", "--encoder", str(retriever), "--device", "cpu",
            log_to=work / "log.txt")
    return folder


READER_RUN = "hybrid + reader, RRF"


def retrieval(work: Path, dataset: Path, folder: Path, k: int,
              reader: Path | None = None) -> dict[str, dict[str, float]]:
    scores = {}
    runs = dict(RUNS)
    if reader is not None:  # the reader re-ranks the hybrid's top 50, fused with it by RRF
        runs[READER_RUN] = [*RUNS[HYBRID], "--reader", str(reader), "--rerank-k", "50", "--rerank-fusion", "rrf"]
    for run_name, options in runs.items():
        # The reader's run is named after the reader too, so that another reader is not read from the cache.
        name = slug(run_name) + (f"-{slug(str(reader))}" if run_name == READER_RUN and reader is not None else "")
        run = folder.parent / f"runs-{folder.name}" / f"{name}.trec"
        run.parent.mkdir(parents=True, exist_ok=True)
        if not run.exists():
            cli("search", "--index", str(folder), "--queries", str(dataset / "queries" / "test.jsonl"), "--out",
                str(run), "--k", str(k), "--threads", "2", "--device", "cpu", *options, log_to=work / "log.txt")
        table = json.loads(cli("evaluate", str(run), "--qrels", str(dataset / "qrels" / "test.txt"),
                               "--output-format", "json"))
        row = next(iter(table.values()))  # {run name: {metric: value}}
        scores[run_name] = {metric: 100 * float(row[metric]) for metric in ("MRR@10", "R@100")}
    return scores


def has_topics(dataset: Path) -> bool:
    with (dataset / "passages.jsonl").open() as handle:
        return "topic" in json.loads(handle.readline())


def clustering(work: Path, dataset: Path, clusterer: Path, tag: str) -> dict[str, float]:
    scope = "topic" if has_topics(dataset) else "corpus"
    scores = {}
    for method in ("singletons", "lemma", "encoder"):
        out = dataset.parent / "clusters" / f"{method}-{tag}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():
            extra = ["--model", str(clusterer), "--device", "cpu"] if method == "encoder" else []
            cli("cluster", str(dataset), "--out", str(out), "--method", method, "--split", "test", "--scope", scope,
                *extra, log_to=work / "log.txt")
        result = json.loads(cli("evaluate", "--clusters", str(out), "--dataset", str(dataset), "--split", "test",
                                "--output-format", "json"))
        scores[method] = 100 * float(result["CoNLL F1"])
    return scores


# Recorded options that `train clusterer` does not take on its command line (fixed in the code).
NOT_FLAGS = {"retriever": set(), "clusterer": {"weight_decay", "warmup", "mlp_hidden", "mlp_out", "max_length"}}


def training_options(model: Path, kind: str) -> list[str]:
    """The recipe a model was trained with, as CLI options (from its ``training_args.json``)."""
    options = json.loads((model / "training_args.json").read_text())["options"]
    flags: list[str] = []
    for key, value in options.items():
        if value is None or key in {"base_model", "max_steps", "seed"} | NOT_FLAGS[kind]:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):  # --markers/--no-markers; the other switches are off by default
            flags += (["--markers" if value else "--no-markers"] if key == "markers" else [flag] if value else [])
            continue
        flags += [flag, str(value)]
    return flags


def train_own(work: Path, name: str, dataset: Path, cluster_dataset: Path, retriever: Path,
              clusterer: Path) -> tuple[Path, Path]:
    own_retriever = work / slug(name) / "retriever"
    own_clusterer = work / slug(name) / "clusterer"
    lucene_index = work / slug(name) / "index-ecb"
    if not (own_retriever / "corefsearch_retriever.json").exists():
        cli("train", "retriever", str(dataset), "--index", str(lucene_index), "--out", str(own_retriever),
            "--device", "cpu", "--threads", "2", *training_options(retriever, "retriever"), log_to=work / "log.txt")
    if not (own_clusterer / "corefsearch_clusterer.json").exists():
        cli("train", "clusterer", str(cluster_dataset), "--out", str(own_clusterer), "--device", "cpu",
            "--threads", "2", *training_options(clusterer, "clusterer"), log_to=work / "log.txt")
    return own_retriever, own_clusterer


def table(results: dict[str, Any], k: int) -> str:
    lines = ["### Retrieval, test queries, ×100 (MRR@10 / R@100)", ""]
    corpora = list(results)
    lines.append("| run | " + " | ".join(f"{c} ({results[c]['queries']:,} q)" for c in corpora) + " |")
    lines.append("| --- |" + " ---: |" * len(corpora))
    rows = [(f"{run} (ECB+ retriever)" if run in OWN_RUNS else run, "retrieval", run) for run in RUNS]
    if any(READER_RUN in results[c]["retrieval"] for c in corpora):
        rows.append((f"{READER_RUN} (ECB+ retriever and reader)", "retrieval", READER_RUN))
    rows += [(f"{run} (own retriever)", "retrieval_own", run) for run in OWN_RUNS]
    for label, key, run in rows:
        cells = []
        for corpus in corpora:
            scores = results[corpus].get(key, {}).get(run)
            cells.append("–" if scores is None else f"{scores['MRR@10']:.2f} / {scores['R@100']:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "### Clustering the test split's gold mentions, CoNLL F1 ×100 (singletons kept)", ""]
    lines.append("| method | " + " | ".join(f"{c} ({results[c]['scope']})" for c in corpora) + " |")
    lines.append("| --- |" + " ---: |" * len(corpora))
    for label, key, method in (("singletons", "clustering", "singletons"), ("lemma", "clustering", "lemma"),
                               ("encoder (ECB+ clusterer)", "clustering", "encoder"),
                               ("encoder (own clusterer)", "clustering_own", "encoder")):
        cells = []
        for corpus in corpora:
            value = results[corpus].get(key, {}).get(method)
            cells.append("–" if value is None else f"{value:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"- {corpus}: the ECB+ clusterer is {results[corpus]['clusterer']}" for corpus in corpora
              if "clusterer" in results[corpus]]
    lines += ["", f"k = {k}. Aims: the hybrid never below the better BM25 row on any corpus; the clusterer never "
              "below lemma."]
    for corpus in corpora:
        retrieval_scores = results[corpus]["retrieval"]
        best_bm25 = max(retrieval_scores[run]["MRR@10"] for run in list(RUNS)[:2])
        hybrid = retrieval_scores[HYBRID]["MRR@10"]
        clusters = results[corpus]["clustering"]
        lines.append(f"- {corpus}: hybrid {hybrid:.2f} vs best BM25 {best_bm25:.2f} "
                     f"({'met' if hybrid >= best_bm25 else 'missed'}); encoder {clusters['encoder']:.2f} vs lemma "
                     f"{clusters['lemma']:.2f} ({'met' if clusters['encoder'] >= clusters['lemma'] else 'missed'})")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--retriever", type=Path, required=True, help="ECB+-trained retriever folder")
    parser.add_argument("--clusterer", type=Path, required=True, help="ECB+-trained mention encoder folder")
    parser.add_argument("--reader", type=Path, default=None,
                        help="ECB+-trained reader folder: adds the hybrid re-ranked by it (top 50, RRF)")
    parser.add_argument("--entity-clusterer", type=Path, default=None,
                        help="ECB+-trained mention encoder for the entity corpora (default: --clusterer)")
    parser.add_argument("--corpus", action="append", default=[],
                        help="NAME=FORMAT:PATH[:TYPE] (TYPE: event | entity), repeatable: a corpus of yours")
    parser.add_argument("--only", default="", help="comma-separated corpus names to run (default: all)")
    parser.add_argument("--train-own", action="store_true",
                        help="also train both models on each corpus with train and dev queries")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--results", type=Path, help="write the tables (markdown) here too")
    args = parser.parse_args()
    corpora = dict(DEFAULT_CORPORA)
    for spec in args.corpus:
        name, _, rest = spec.partition("=")
        parts = rest.split(":")
        if not name or len(parts) < 2:
            sys.exit(f"--corpus takes NAME=FORMAT:PATH[:TYPE], got {spec!r}")
        corpora[name] = (parts[0], Path(parts[1]), ["--mention-type", parts[2]] if len(parts) > 2 else [])
    if args.only:
        corpora = {name: corpora[name] for name in args.only.split(",")}
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results: dict[str, Any] = {}
    for name, source in corpora.items():
        log(f"== {name}")
        dataset = build(args.work, name, source, [], "dataset")
        cluster_dataset = build(args.work, name, source, CLUSTER_BUILD.get(name, []), "dataset-clusters") \
            if name in CLUSTER_BUILD else dataset
        folder = index(args.work, dataset, args.work / slug(name) / "index-ecb", args.retriever)
        entry: dict[str, Any] = {"queries": queries_of(dataset, "test"),
                                 "scope": "topics" if has_topics(cluster_dataset) else "whole split"}
        entry["retrieval"] = retrieval(args.work, dataset, folder, args.k, args.reader)
        entities = "entity" in source[2]
        ecb_clusterer = args.entity_clusterer if entities and args.entity_clusterer else args.clusterer
        entry["clusterer"] = str(ecb_clusterer)
        entry["clustering"] = clustering(args.work, cluster_dataset, ecb_clusterer,
                                         "ecb-entities" if ecb_clusterer != args.clusterer else "ecb")
        if name == "ECB+ events":  # its own models are the ECB+ models
            entry["retrieval_own"] = {run: entry["retrieval"][run] for run in OWN_RUNS}
            entry["clustering_own"] = {"encoder": entry["clustering"]["encoder"]}
        elif args.train_own and queries_of(dataset, "train") and queries_of(dataset, "dev"):
            own_retriever, own_clusterer = train_own(args.work, name, dataset, cluster_dataset, args.retriever,
                                                     args.clusterer)
            own_folder = index(args.work, dataset, args.work / slug(name) / "index-own", own_retriever)
            own_scores = retrieval(args.work, dataset, own_folder, args.k)
            entry["retrieval_own"] = {run: own_scores[run] for run in OWN_RUNS}
            entry["clustering_own"] = {"encoder": clustering(args.work, cluster_dataset, own_clusterer,
                                                             "own")["encoder"]}
        results[name] = entry
        (args.work / "results.json").write_text(json.dumps(results, indent=1))
    header = (f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}. Machine: {os.cpu_count()} CPU cores "
              f"({platform.processor() or platform.machine()}), no GPU. Wall time of this invocation: "
              f"{(time.time() - started) / 60:.1f} min (steps already in --work are not redone).\n"
              f"- Command: `python bench/cross_corpus.py {' '.join(sys.argv[1:])}`\n\n")
    text = header + table(results, args.k)
    print(text)
    if args.results:
        args.results.write_text(text)


if __name__ == "__main__":
    main()
