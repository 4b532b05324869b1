"""BM25 benchmark: every query formulation, with and without RM3, on three collections.

Settings (each built with ``build_dataset``, indexed with ``build_lucene_index``, searched
with ``BM25Searcher`` at k = 500, evaluated with ``evaluate_run`` under both metric
definitions):

1. ``ecbplus-test``: ECB+ event mentions, test topics 36-45; collection = the sentences of
   the test topics only.
2. ``ecbplus-all``: the same queries and qrels, collection = the sentences of all 43 topics
   (the 33 train/dev topics act as distractors).
3. ``wec-dev``: WEC-Eng validated Dev, every cluster in the test split; collection = the
   mention paragraphs.

Coreferent mention retrieval (Sankepally et al. 2018), ``--only cmr``: ECB+ entity and event
mentions (test split; collection = all 43 topics), the paper's query forms (mention, sentence,
document) with and without Rocchio, and field-weighted BM25 over the sentence / title /
document fields, scored with infAP (the paper's measure) besides MRR@10, mAP@10 and R@k.

Prints the tables as markdown and writes them into ``bench/RESULTS.md`` under the sections
``## BM25 (bench/bm25.py)`` and ``## Coreferent mention retrieval (bench/bm25.py --only cmr)``,
replacing each section it ran if present and keeping the others.

Run: ``python bench/bm25.py [--out-dir DIR] [--threads 2] [--results bench/RESULTS.md] [--only KEY|cmr]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import pickle
import platform
import shlex
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

# Progress bars off unless asked for: the benchmark prints its own one-line steps.
os.environ.setdefault("COREFSEARCH_QUIET", "1")

from corefsearch.base.schema import Document  # noqa: E402
from corefsearch.datasets.build import BuildOptions, BuildSummary, build_dataset  # noqa: E402
from corefsearch.datasets.dataset import Dataset  # noqa: E402
from corefsearch.datasets.ecbplus import TEST_TOPICS, read_ecbplus  # noqa: E402
from corefsearch.datasets.wec import read_wec  # noqa: E402
from corefsearch.evaluate import DEFINITIONS, METRICS, Evaluation, evaluate_run, parse_metrics  # noqa: E402
from corefsearch.io.trec import read_qrels, read_run, write_run
from corefsearch.search.run_writer import run_rows
from corefsearch.sparse.formulation import QUERY_FORMATS, formulate  # noqa: E402
from corefsearch.sparse.index import LUCENE_DIR, IndexSummary, build_lucene_index  # noqa: E402
from corefsearch.sparse.search import BM25Options, BM25Searcher

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"
ECBPLUS = DATA / "ecbplus" / "ECBplus.tar.gz"
WEC_DEV = DATA / "wec-eng" / "Dev_Event_gold_mentions_validated.json.gz"
SECTION = "## BM25 (bench/bm25.py)"
K = 500
SPLIT = "test"
WARM_UP_QUERIES = 300
# The CoreSearch paper's BM25 on the CoreSearch test set (another corpus: context only).
PAPER_BM25 = {"MRR@10": 62.45, "R@100": 57.9}


@dataclass
class Setting:
    key: str
    title: str
    documents: Callable[[], Iterable[Document]]
    options: BuildOptions


@dataclass
class RunResult:
    name: str
    query_format: str
    rm3: bool
    path: Path
    rows: int
    seconds: float
    queries: int
    empty: int = 0
    evaluations: dict[str, Evaluation] = field(default_factory=dict)

    @property
    def queries_per_second(self) -> float:
        return self.queries / self.seconds if self.seconds else float("inf")


@dataclass
class SettingResult:
    setting: Setting
    build: BuildSummary
    build_seconds: float
    index: IndexSummary
    formulation_seconds: dict[str, float]
    ner_load_seconds: float
    runs: list[RunResult]
    warnings: list[str]


def settings() -> list[Setting]:
    ecb_source = {"format": "ecbplus", "input": str(ECBPLUS), "mention_type": "event"}
    wec_source = {"format": "wec", "input": str(WEC_DEV)}
    return [
        Setting("ecbplus-test", "ECB+ events, test split; collection = test topics (36-45) only",
                functools.partial(read_ecbplus, ECBPLUS, mention_type="event"),
                BuildOptions(splits=("test",), source=ecb_source)),
        Setting("ecbplus-all", "ECB+ events, test split; collection = all 43 topics",
                functools.partial(read_ecbplus, ECBPLUS, mention_type="event"),
                BuildOptions(source=ecb_source)),
        Setting("wec-dev", "WEC-Eng validated Dev, every cluster a test cluster",
                functools.partial(read_wec, WEC_DEV),
                BuildOptions(split_ratios=(0, 0, 1), source=wec_source)),
    ]


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def run_name(query_format: str, rm3: bool) -> str:
    return query_format + (" + RM3" if rm3 else "")


def timed(func: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = func()
    return value, time.perf_counter() - started


def run_setting(setting: Setting, root: Path, threads: int) -> SettingResult:
    from corefsearch.base.nlp import ner_pipeline, sentencizer

    dataset_dir, index_dir, runs_dir = root / "dataset", root / "index", root / "runs"
    caught: list[str] = []
    log(f"{setting.key}: building the dataset")
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        build, build_seconds = timed(lambda: build_dataset(setting.documents(), dataset_dir, setting.options,
                                                           overwrite=True, source_name=setting.key))
    caught += [f"build: {record.message}" for record in records]
    log(f"{setting.key}: indexing {build.passages:,} passages ({threads} threads)")
    index = build_lucene_index(dataset_dir, index_dir, threads=threads, overwrite=True)
    dataset = Dataset(dataset_dir)
    queries = dataset.queries(SPLIT)
    qrels = read_qrels(dataset.qrels_path(SPLIT))

    # Load the spaCy pipelines and warm the JVM's search classes up before anything is timed.
    _, ner_load_seconds = timed(ner_pipeline)
    sentencizer()
    # A first search of a few queries is not enough: the JIT needs a few hundred queries at
    # full depth, with and without RM3, before timings settle.
    for rm3 in (False, True):
        warm = BM25Searcher(index_dir, BM25Options(query_format="mention", rm3=rm3, threads=threads))
        for _ in warm.search(queries[:WARM_UP_QUERIES], K):
            pass

    # Formulation alone (NER for mention+entities, sentence splitting for sentence); the
    # search timings below include it again.
    formulation_seconds = {fmt: timed(lambda fmt=fmt: formulate(queries, fmt))[1] for fmt in QUERY_FORMATS}

    runs_dir.mkdir(parents=True, exist_ok=True)
    runs: list[RunResult] = []
    for query_format in QUERY_FORMATS:
        for rm3 in (False, True):
            options = BM25Options(query_format=query_format, rm3=rm3, threads=threads)
            path = runs_dir / f"{options.tag}.trec"
            searcher = BM25Searcher(index_dir, options)
            rows, seconds = timed(lambda s=searcher, o=options, p=path: write_run(p, run_rows(s.search(queries, K),
                                                                                               o.tag)))
            result = RunResult(run_name(query_format, rm3), query_format, rm3, path, rows, seconds, len(queries))
            run = read_run(path)
            result.empty = sum(1 for query in queries if not run.get(query.id))
            for definition in DEFINITIONS:
                evaluation = evaluate_run(run, qrels, definition=definition, name=result.name)
                result.evaluations[definition] = evaluation
                # Both definitions warn alike (missing queries); say it once per run.
                caught += [f"{result.name}: {message}" for message in evaluation.warnings]
            log(f"{setting.key}: {result.name}: {seconds:.1f} s ({result.queries_per_second:.0f} queries/s), "
                f"MRR@10 {100 * result.evaluations['trec'].aggregate['MRR@10']:.2f}")
            runs.append(result)
    return SettingResult(setting, build, build_seconds, index, formulation_seconds, ner_load_seconds, runs,
                         list(dict.fromkeys(caught)))


# --- machine ------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def java_runtime() -> str:
    try:
        from corefsearch.sparse.java import ensure_java

        ensure_java()
        # pyserini.pyclass puts Anserini (and Lucene) on the JVM's class path before it starts.
        from pyserini.pyclass import autoclass

        system = autoclass("java.lang.System")
        lucene = autoclass("org.apache.lucene.util.Version").LATEST.toString()
        return (f"{system.getProperty('java.vm.name')} {system.getProperty('java.runtime.version')} "
                f"({system.getProperty('java.vendor')}), Lucene {lucene}")
    except Exception as err:  # the machine line must not sink the benchmark
        return f"unknown ({err})"


def machine() -> dict[str, str]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "CPUs": f"{os.cpu_count()} (usable by this process: {usable})",
        "CPU model": cpu_model(),
        "Python": f"{platform.python_implementation()} {platform.python_version()} ({platform.system()} "
                  f"{platform.machine()})",
        "Java runtime": java_runtime(),
        "pyserini": version("pyserini"),
        "corefsearch": version("corefsearch"),
    }


# --- tables -------------------------------------------------------------------------------------


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> str:
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def metrics_table(result: SettingResult, definition: str) -> str:
    values = [[round(100 * run.evaluations[definition].aggregate[m], 2) for m in METRICS] for run in result.runs]
    best = [max(column) for column in zip(*values, strict=True)]
    rows = []
    for run, row in zip(result.runs, values, strict=True):
        cells = [f"**{v:.2f}**" if v == b else f"{v:.2f}" for v, b in zip(row, best, strict=True)]
        rows.append([run.name, *cells])
    return markdown_table(["Run", *METRICS], rows, ["l", *"r" * len(METRICS)])


def counts_table(results: Sequence[SettingResult]) -> str:
    rows = []
    for result in results:
        build, split = result.build, result.build.splits[SPLIT]
        rows.append([f"`{result.setting.key}`", f"{build.documents:,}", f"{build.passages:,}",
                     f"{build.mentions:,}", f"{build.clusters:,}", f"{split.clusters:,}", f"{split.queries:,}",
                     f"{split.relevant_pairs:,}", f"{split.relevant_pairs / split.queries:.1f}"])
    header = ["Setting", "documents", "passages", "mentions", "clusters", "test clusters with queries",
              "test queries", "relevant pairs", "relevant / query"]
    return markdown_table(header, rows, ["l", *"r" * (len(header) - 1)])


def index_table(results: Sequence[SettingResult]) -> str:
    rows = [[f"`{r.setting.key}`", f"{r.index.passages:,}", f"{r.build_seconds:.1f}", f"{r.index.seconds:.1f}",
             f"{r.index.passages_per_second:,.0f}"] for r in results]
    return markdown_table(["Setting", "passages", "build s", "index s", "passages/s"], rows, "lrrrr")


def search_table(results: Sequence[SettingResult]) -> str:
    header = ["Run"] + [f"`{r.setting.key}` q/s (s)" for r in results]
    rows = []
    for position, run in enumerate(results[0].runs):
        cells = [run.name]
        for result in results:
            other = result.runs[position]
            cells.append(f"{other.queries_per_second:,.0f} ({other.seconds:.1f})")
        rows.append(cells)
    return markdown_table(header, rows, ["l", *"r" * len(results)])


def formulation_table(results: Sequence[SettingResult]) -> str:
    header = ["Formulation step"] + [f"`{r.setting.key}` s" for r in results]
    rows = [["spaCy NER model load (once per process)",
             *(f"{r.ner_load_seconds:.2f}" if i == 0 else "cached" for i, r in enumerate(results))]]
    for fmt in QUERY_FORMATS:
        rows.append([fmt, *(f"{r.formulation_seconds[fmt]:.2f}" for r in results)])
    return markdown_table(header, rows, ["l", *"r" * len(results)])


# --- reading ------------------------------------------------------------------------------------


def value(result: SettingResult, name: str, metric: str, definition: str = "trec") -> float:
    run = next(r for r in result.runs if r.name == name)
    return 100 * run.evaluations[definition].aggregate[metric]


def best_run(result: SettingResult, metric: str, definition: str = "trec") -> str:
    return max(result.runs, key=lambda r: r.evaluations[definition].aggregate[metric]).name


def _span(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:+.2f}" if f"{low:+.2f}" == f"{high:+.2f}" else f"{low:+.2f} to {high:+.2f}"


def _direction(values: Sequence[float]) -> str:
    if all(v > 0 for v in values):
        return "raises"
    if all(v < 0 for v in values):
        return "lowers"
    return "moves both ways"


CONTEXT_FORMATS = ("mention+entities", "sentence", "context")


def other_topic_share(run_path: Path, depth: int = 10) -> float:
    """Share of the top-``depth`` hits of an ECB+ run that come from outside the test topics."""
    run = read_run(run_path)
    hits = other = 0
    for scores in run.values():
        for passage_id in sorted(scores, key=lambda doc: -scores[doc])[:depth]:
            hits += 1
            other += int(passage_id.split("_", 1)[0]) not in TEST_TOPICS
    return other / hits if hits else 0.0


def _mean_abs(values: Sequence[float]) -> float:
    return sum(abs(v) for v in values) / len(values) if values else 0.0


def _keys(results: Sequence[SettingResult]) -> str:
    return " and ".join(f"`{r.setting.key}`" for r in results)


def reading(results: Sequence[SettingResult]) -> str:
    by_key = {r.setting.key: r for r in results}
    parts = []
    # Best runs.
    bests = []
    for result in results:
        mrr, recall = best_run(result, "MRR@10"), best_run(result, "R@100")
        text = f"`{result.setting.key}` {mrr} ({value(result, mrr, 'MRR@10'):.2f})"
        text += (f", best R@100 {recall} ({value(result, recall, 'R@100'):.2f})" if recall != mrr
                 else ", also best on R@100")
        bests.append(text)
    parts.append("Best MRR@10 (trec definition): " + "; ".join(bests) + ".")
    # The formulations against each other (plain BM25).
    behind = [r for r in results
              if max(value(r, f, "MRR@10") for f in CONTEXT_FORMATS) - value(r, "mention", "MRR@10") > 5]
    level = [r for r in results if r not in behind]
    if behind:
        others = [value(r, f, "MRR@10") for r in behind for f in CONTEXT_FORMATS]
        spread = max(max(value(r, f, "MRR@10") for f in CONTEXT_FORMATS)
                     - min(value(r, f, "MRR@10") for f in CONTEXT_FORMATS) for r in behind)
        empty = [next(run.empty for run in r.runs if run.name == "mention") for r in behind]
        parts.append(
            f"On {_keys(behind)} the bare mention is far behind (plain BM25 MRR@10 "
            + " / ".join(f"{value(r, 'mention', 'MRR@10'):.2f}" for r in behind)
            + f" against {min(others):.2f}–{max(others):.2f} for mention+entities, sentence and context, which "
            f"are within {spread:.2f} points of each other in each setting): a bare verb, or a pronoun that "
            f"analyses to nothing (up to {max(empty)} queries retrieve no passage), does not say which event is "
            "meant; the entities, sentence or passage add its participants, place and time.")
    for result in level:
        mention = value(result, "mention", "MRR@10")
        scores = {f: value(result, f, "MRR@10") for f in CONTEXT_FORMATS}
        worst = min(scores, key=scores.__getitem__)
        parts.append(
            f"On `{result.setting.key}` the bare mention is as good as any ({mention:.2f} against "
            f"{min(scores.values()):.2f}–{max(scores.values()):.2f}, {worst} the lowest)"
            + (": WEC-Eng mentions are Wikipedia link anchors that often name the event itself "
               "(\"Family Values Tour 1998\"), so context mostly adds noise." if result.setting.key.startswith("wec")
               else "."))
    # RM3.
    deltas, deep_all, top_all = [], [], []
    for result in results:
        def change(metric: str, result: SettingResult = result) -> list[float]:
            return [value(result, run_name(f, True), metric) - value(result, run_name(f, False), metric)
                    for f in QUERY_FORMATS]

        mrr, rec, deep = change("MRR@10"), change("R@100"), change("R@500")
        deep_all += deep
        top_all += mrr
        deltas.append(f"`{result.setting.key}` MRR@10 {_span(mrr)}, R@100 {_span(rec)}, R@500 {_span(deep)}")
    parts.append("RM3 minus plain BM25 over the four formulations, in points: " + "; ".join(deltas) + "."
                 + (" RM3 raises deep recall everywhere (expansion terms reach relevant passages that share "
                    "few words with the query)" if all(v > 0 for v in deep_all) else " RM3")
                 + (", moves MRR@10 less on average" if _mean_abs(top_all) < _mean_abs(deep_all) else "")
                 + " and slows search down (see Speed).")
    # Distractor topics.
    if "ecbplus-test" in by_key and "ecbplus-all" in by_key:
        test, full = by_key["ecbplus-test"], by_key["ecbplus-all"]

        def diff(names: Iterable[str], metric: str) -> list[float]:
            return [value(full, name, metric) - value(test, name, metric) for name in names]

        context_runs = [run_name(f, rm3) for f in CONTEXT_FORMATS for rm3 in (False, True)]
        mention_runs = [run_name("mention", rm3) for rm3 in (False, True)]
        shares = [other_topic_share(run.path) for run in full.runs if run.name in context_runs]
        rises = [d for d in diff([r.name for r in test.runs], "MRR@10") if d > 0]
        parts.append(
            f"Indexing all 43 ECB+ topics instead of the 10 test topics ({test.build.passages:,} → "
            f"{full.build.passages:,} passages, same queries and qrels) hurts the bare mention most "
            f"(MRR@10 {_span(diff(mention_runs, 'MRR@10'))}, R@100 {_span(diff(mention_runs, 'R@100'))}). "
            f"The six other runs change little at the top (MRR@10 {_span(diff(context_runs, 'MRR@10'))}) and lose "
            f"some depth (R@100 {_span(diff(context_runs, 'R@100'))}): only {100 * min(shares):.0f}–"
            f"{100 * max(shares):.0f} % of their top-10 hits come from the other topics, which are about other "
            "events, while the hard distractors (the other sub-topic of the same topic) are in both collections."
            + (f" Where MRR@10 rises (by at most {max(rises):.2f}), the larger collection's term statistics "
               "(IDF, average length) re-order the test passages themselves." if rises else ""))
    # Micro vs macro recall.
    gaps = {r.setting.key: [value(r, run.name, "R@100", "coresearch") - value(r, run.name, "R@100")
                            for run in r.runs] for r in results}
    lower = all(g < 0 for values in gaps.values() for g in values)
    parts.append("The coresearch definition differs only in recall, micro-averaged: R@100 "
                 + "; ".join(f"`{key}` {_span(values)}" for key, values in gaps.items())
                 + " points from the per-query mean"
                 + (", lower: queries with many relevant passages (large clusters) have lower recall and weigh "
                    "more in the micro average." if lower else "."))
    parts.append(f"For context only: the CoreSearch paper's BM25 on the CoreSearch test set has MRR@10 "
                 f"{PAPER_BM25['MRR@10']:.2f} and R@100 {PAPER_BM25['R@100']:.1f}, on another corpus (WEC-Eng "
                 "event clusters in a large Wikipedia passage collection, mostly distractors); on collections of "
                 f"{min(r.build.passages for r in results):,}–{max(r.build.passages for r in results):,} passages "
                 "the numbers here are not comparable to it.")
    return " ".join(parts)


def report(results: Sequence[SettingResult], info: dict[str, str], command: str, started: dt.datetime,
           total_seconds: float, out_dir: Path, threads: int) -> str:
    lines = [SECTION, "",
             f"- Date: {started:%Y-%m-%d %H:%M} (local time), total run time {total_seconds / 60:.1f} min",
             *(f"- {key}: {text}" for key, text in info.items()),
             f"- Command: `{command}`",
             f"- k = {K}; BM25 k1 = 0.9, b = 0.4; RM3 fbTerms = 10, fbDocs = 10, original query weight 0.5 "
             f"(Anserini defaults); indexing and search threads = {threads}.",
             f"- Runs and datasets were written to `{out_dir}` (not kept in the repository).",
             "",
             "Settings (queries, qrels and clusters of the test split; clusters with queries = clusters "
             "whose mentions lie in ≥ 2 passages):",
             "",
             *(f"- `{r.setting.key}`: {r.setting.title}." for r in results),
             "",
             counts_table(results),
             ""]
    for result in results:
        lines += [f"### `{result.setting.key}`: {result.setting.title}", ""]
        for definition in DEFINITIONS:
            note = ("trec_eval semantics; R@k averaged per query" if definition == "trec"
                    else "the CoreSearch paper's code; R@k micro-averaged over queries")
            lines += [f"Metrics ×100, `{definition}` definition ({note}); best of each column in bold:", "",
                      metrics_table(result, definition), ""]
        if result.warnings:
            lines += ["Warnings (from building and from `evaluate_run`, alike under both definitions):", "",
                      *(f"- {w}" for w in result.warnings), ""]
    lines += ["### Speed", "",
              f"Indexing ({threads} threads; build = reading the corpus and writing the dataset):", "",
              index_table(results), "",
              f"Search, queries per second and seconds per run ({threads} threads; wall time of "
              "`BM25Searcher.search` + writing the run file, which includes query formulation — spaCy NER "
              "for mention+entities, sentence splitting for sentence — and one Anserini `SearchCollection` "
              f"call per 1,000 queries for k = {K}; the spaCy models were loaded and the JVM warmed up with "
              f"{WARM_UP_QUERIES} `mention` queries, plain and RM3, on each index "
              "before timing):", "",
              search_table(results), "",
              "Query formulation alone (the same step timed on its own; included in the search times above):",
              "",
              formulation_table(results), "",
              "### Reading", "",
              reading(results), ""]
    return "\n".join(lines)


def write_section(path: Path, section: str, title: str = SECTION) -> None:
    """Put ``section`` in ``path`` in place of the old one (up to the next ``## `` heading), or append it."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n\nSee bench/README.md.\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == title), None)
    new = section.rstrip("\n").splitlines()
    if start is None:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", *new]
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        tail = lines[end:]
        lines = lines[:start] + new + ([""] + tail if tail else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)


# --- coreferent mention retrieval (Sankepally et al. 2018) -------------------------------------

CMR_SECTION = "## Coreferent mention retrieval (bench/bm25.py --only cmr)"
CMR_METRICS = ("MRR@10", "mAP@10", "R@10", "R@100", "R@500", "infAP")
# The paper's mean infAP over its 84 TAC 2014 entity queries (Table 2), for context only.
PAPER_CMR = {"mention": 0.31, "doc": 0.39, "QE": 0.40}
PAPER_DOC_FIELDS = {"sentence": 1.0, "document": 0.1}  # the paper's doc system: document text at 10 %
TITLE_FIELDS = {"sentence": 1.0, "title": 0.5, "document": 0.2}


def cmr_settings() -> list[Setting]:
    settings_ = []
    for kind in ("entity", "event"):
        source = {"format": "ecbplus", "input": str(ECBPLUS), "mention_type": kind}
        settings_.append(Setting(f"cmr-ecbplus-{kind}", f"ECB+ {kind} mentions, test split; collection = all 43 "
                                 "topics", functools.partial(read_ecbplus, ECBPLUS, mention_type=kind),
                                 BuildOptions(source=source)))
    return settings_


def _fields_name(fields: dict[str, float]) -> str:
    return ", ".join(f"{name} {weight:g}" for name, weight in fields.items())


def cmr_runs(threads: int) -> list[tuple[str, BM25Options]]:
    runs = []
    for query_format in ("mention", "sentence", "document"):
        for rocchio in (False, True):
            runs.append((query_format + (" + Rocchio" if rocchio else ""),
                         BM25Options(query_format=query_format, rocchio=rocchio, threads=threads)))
    for query_format, fields in (("mention", PAPER_DOC_FIELDS), ("mention", TITLE_FIELDS),
                                 ("sentence", PAPER_DOC_FIELDS), ("sentence", TITLE_FIELDS)):
        runs.append((f"{query_format}, fields {_fields_name(fields)}",
                     BM25Options(query_format=query_format, fields=dict(fields), threads=threads)))
    return runs


@dataclass
class CmrResult:
    setting: Setting
    build: BuildSummary
    index: IndexSummary
    index_bytes: int
    runs: list[RunResult]
    warnings: list[str]


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_cmr_setting(setting: Setting, root: Path, threads: int) -> CmrResult:
    dataset_dir, index_dir, runs_dir = root / "dataset", root / "index", root / "runs"
    caught: list[str] = []
    log(f"{setting.key}: building the dataset")
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        build = build_dataset(setting.documents(), dataset_dir, setting.options, overwrite=True,
                              source_name=setting.key)
        log(f"{setting.key}: indexing {build.passages:,} passages with fields ({threads} threads)")
        index = build_lucene_index(dataset_dir, index_dir, threads=threads, overwrite=True, fields=True)
    caught += [f"build/index: {record.message}" for record in records]
    dataset = Dataset(dataset_dir)
    queries = dataset.queries(SPLIT)
    qrels = read_qrels(dataset.qrels_path(SPLIT))
    metrics = parse_metrics(CMR_METRICS)
    # Warm the JVM's search classes up before timing (see run_setting).
    for rocchio in (False, True):
        warm = BM25Searcher(index_dir, BM25Options(query_format="mention", rocchio=rocchio, threads=threads))
        for _ in warm.search(queries[:WARM_UP_QUERIES], K):
            pass
    runs_dir.mkdir(parents=True, exist_ok=True)
    runs: list[RunResult] = []
    for name, options in cmr_runs(threads):
        path = runs_dir / f"{options.tag}.trec"
        searcher = BM25Searcher(index_dir, options)
        rows, seconds = timed(lambda s=searcher, o=options, p=path: write_run(p, run_rows(s.search(queries, K), o.tag)))
        result = RunResult(name, options.query_format, False, path, rows, seconds, len(queries))
        run = read_run(path)
        result.empty = sum(1 for query in queries if not run.get(query.id))
        evaluation = evaluate_run(run, qrels, definition="trec", name=name, metrics=metrics)
        result.evaluations["trec"] = evaluation
        caught += [f"{name}: {message}" for message in evaluation.warnings]
        log(f"{setting.key}: {name}: {seconds:.1f} s ({result.queries_per_second:.0f} queries/s), "
            f"infAP {100 * evaluation.aggregate['infAP']:.2f}")
        runs.append(result)
    return CmrResult(setting, build, index, _folder_bytes(index_dir / LUCENE_DIR), runs, list(dict.fromkeys(caught)))


def cmr_table(result: CmrResult) -> str:
    values = [[round(100 * run.evaluations["trec"].aggregate[m], 2) for m in CMR_METRICS] for run in result.runs]
    best = [max(column) for column in zip(*values, strict=True)]
    rows = []
    for run, row in zip(result.runs, values, strict=True):
        cells = [f"**{v:.2f}**" if v == b else f"{v:.2f}" for v, b in zip(row, best, strict=True)]
        rows.append([run.name, *cells, f"{run.queries_per_second:,.0f}"])
    return markdown_table(["Run", *CMR_METRICS, "queries/s"], rows, ["l", *"r" * (len(CMR_METRICS) + 1)])


def cmr_reading(results: Sequence[CmrResult]) -> str:
    parts = []
    for result in results:
        def infap(name: str, result: CmrResult = result) -> float:
            run = next(r for r in result.runs if r.name == name)
            return 100 * run.evaluations["trec"].aggregate["infAP"]

        best = max(result.runs, key=lambda r: r.evaluations["trec"].aggregate["infAP"])
        rocchio = [infap(f"{f} + Rocchio") - infap(f) for f in ("mention", "sentence", "document")]
        doc_system = infap(f"mention, fields {_fields_name(PAPER_DOC_FIELDS)}") - infap("mention")
        parts.append(
            f"`{result.setting.key}`: best infAP {best.name} ({infap(best.name):.2f}); Rocchio minus plain over "
            f"mention / sentence / document: {' / '.join(f'{d:+.2f}' for d in rocchio)} points; the paper's doc "
            f"system (mention query, sentence 1 + document 0.1) minus the bare mention: {doc_system:+.2f}.")
    parts.append(
        "The ECB+ qrels are complete (every passage holding a mention of the query's cluster is relevant, the "
        "rest non-relevant, no −1), so infAP equals AP at depth 500 here; the column is there because infAP is "
        "the paper's measure and the same code gives the inferred value on qrels with unjudged (−1) pairs. For "
        "context only: the paper's mean infAP on its TAC 2014 entity collection is "
        f"{PAPER_CMR['mention']:.2f} (mention), {PAPER_CMR['doc']:.2f} (doc) and {PAPER_CMR['QE']:.2f} (QE = doc + "
        "Rocchio), another corpus and task set-up, not comparable. Its QE expands over both fields; Anserini's "
        "Rocchio re-ranks over `contents` only, so here Rocchio runs without field weights "
        "(`search` refuses `--fields` with `--rocchio`).")
    return " ".join(parts)


def cmr_report(results: Sequence[CmrResult], info: dict[str, str], command: str, started: dt.datetime,
               total_seconds: float, out_dir: Path, threads: int) -> str:
    lines = [CMR_SECTION, "",
             f"- Date: {started:%Y-%m-%d %H:%M} (local time), total run time {total_seconds / 60:.1f} min",
             *(f"- {key}: {text}" for key, text in info.items()),
             f"- Command: `{command}`",
             f"- k = {K}; BM25 k1 = 0.9, b = 0.4; Rocchio with Pyserini's defaults (top 10 terms of the top 10 "
             "passages, alpha 1, beta 0.75, gamma 0, no negatives); fields: `sentence` = the passage, `title`, "
             "`document` = the document's other passages (`corefsearch index`); trec_eval semantics; "
             f"indexing and search threads = {threads}.",
             f"- Runs and datasets were written to `{out_dir}` (not kept in the repository).",
             "",
             "Query forms: mention = the mention words; sentence = the sentence holding it; document = the whole "
             "document of the query's passage (title, the passage, the document's other passages, read from the "
             "index). Fields `sentence 1, document 0.1` with the mention query is the paper's doc system.",
             ""]
    rows = []
    for r in results:
        split = r.build.splits[SPLIT]
        rows.append([f"`{r.setting.key}`", f"{r.build.documents:,}", f"{r.build.passages:,}",
                     f"{split.queries:,}", f"{split.relevant_pairs:,}", f"{r.index.seconds:.1f}",
                     f"{r.index_bytes / 1e6:.1f}"])
    lines += [markdown_table(["Setting", "documents", "passages", "test queries", "relevant pairs",
                              "index s (with fields)", "index MB"], rows, "lrrrrrr"), ""]
    for result in results:
        lines += [f"### `{result.setting.key}`: {result.setting.title}", "",
                  "Metrics ×100 (`trec` definition), best of each column in bold; queries/s = wall time of "
                  "`BM25Searcher.search` + writing the run:", "", cmr_table(result), ""]
        if result.warnings:
            lines += ["Warnings:", "", *(f"- {w}" for w in result.warnings), ""]
    lines += ["### Reading", "", cmr_reading(results), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="Where datasets, indexes and runs go (default: a new temporary folder, kept).")
    parser.add_argument("--threads", type=int, default=2, help="Indexing and search threads (default 2).")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md",
                        help="Markdown file to write the section into (default bench/RESULTS.md).")
    parser.add_argument("--only", action="append", choices=[*(s.key for s in settings()), "cmr"],
                        help="Run only this setting (repeatable; for trying the script out), or `cmr`: only the "
                             "coreferent mention retrieval runs (ECB+ entities and events).")
    args = parser.parse_args(argv)

    for path in (ECBPLUS, WEC_DEV):
        if not path.is_file():
            parser.error(f"missing vendored data file {path}")
    out_dir = (args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-bm25-"))).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", *(sys.argv if argv is None else ["bench/bm25.py", *argv])])
    started, clock = dt.datetime.now(), time.perf_counter()
    log(f"writing datasets, indexes and runs to {out_dir}")

    results = [run_setting(setting, out_dir / setting.key, args.threads)
               for setting in settings() if not args.only or setting.key in args.only]
    bm25_seconds = time.perf_counter() - clock
    cmr_results = [run_cmr_setting(setting, out_dir / setting.key, args.threads)
                   for setting in cmr_settings() if not args.only or "cmr" in args.only]
    info = machine()
    # Everything measured, for re-rendering the tables without searching again.
    with (out_dir / "results.pickle").open("wb") as handle:
        pickle.dump({"results": results, "cmr_results": cmr_results, "info": info}, handle)
    total = time.perf_counter() - clock
    if results:
        section = report(results, info, command, started, bm25_seconds, out_dir, args.threads)
        print(section)
        write_section(args.results, section)
    if cmr_results:
        section = cmr_report(cmr_results, info, command, started, total - bm25_seconds, out_dir, args.threads)
        print(section)
        write_section(args.results, section, CMR_SECTION)
    log(f"done in {total / 60:.1f} min; wrote {args.results}; runs in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
