"""The command line end to end on a real subset of ECB+ (test topics 36-37):
build-dataset -> index -> search (two query formats) -> evaluate, and the ad-hoc query."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corefsearch.cli import app
from corefsearch.evaluate import METRICS

java = pytest.mark.java

# A wide console, so that rich does not wrap long temporary paths in the output.
runner = CliRunner(env={"COLUMNS": "250"})


def invoke(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    return result


@dataclass
class Pipeline:
    dataset: Path
    index: Path
    runs: dict[str, Path]  # query format -> run file

    @property
    def qrels(self) -> Path:
        return self.dataset / "qrels" / "test.txt"


@pytest.fixture(scope="module")
def pipeline(ecbplus_subset: Path, tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    root = tmp_path_factory.mktemp("cli")
    dataset, index = root / "dataset", root / "index"
    invoke("build-dataset", ecbplus_subset, "--format", "ecbplus", "--out", dataset, "--splits", "test")
    invoke("index", dataset, "--out", index)
    runs = {}
    for query_format in ("mention", "mention+entities"):
        runs[query_format] = root / f"{query_format}.run"
        invoke("search", "--index", index, "--queries", dataset / "queries" / "test.jsonl",
               "--out", runs[query_format], "--k", "100", "--query-format", query_format)
    return Pipeline(dataset, index, runs)


def read_run(path: Path) -> dict[str, list[tuple[str, int, float, str]]]:
    run: dict[str, list[tuple[str, int, float, str]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        qid, q0, pid, rank, score, tag = line.split()
        assert q0 == "Q0"
        run[qid].append((pid, int(rank), float(score), tag))
    return run


def read_qrels(path: Path) -> dict[str, set[str]]:
    qrels: dict[str, set[str]] = defaultdict(set)
    for line in path.read_text().splitlines():
        qid, _, pid, relevance = line.split()
        if int(relevance) > 0:
            qrels[qid].add(pid)
    return qrels


def ranked(hits: list[tuple[str, int, float, str]]) -> list[str]:
    # trec_eval's order: score descending, then passage id descending.
    return [pid for pid, _, _, _ in sorted(hits, key=lambda h: (h[2], h[0]), reverse=True)]


@java
def test_build_dataset_and_index(pipeline: Pipeline, ecbplus_subset: Path) -> None:
    manifest = json.loads((pipeline.dataset / "manifest.json").read_text())
    assert manifest["options"]["splits"] == ["test"]
    assert manifest["options"]["source"]["format"] == "ecbplus"
    assert manifest["options"]["source"]["input"] == str(ecbplus_subset)
    assert manifest["counts"]["documents"] == 41  # topics 36 (20 files) and 37 (21 files)
    passages = (pipeline.dataset / "passages.jsonl").read_text().splitlines()
    assert len(passages) == manifest["counts"]["passages"]
    lucene = json.loads((pipeline.index / "lucene" / "manifest.json").read_text())
    assert lucene["passages"] == len(passages)
    assert lucene["passages_sha256"] == manifest["checksums"]["passages.jsonl"].removeprefix("sha256:")


@java
def test_search_writes_trec_runs(pipeline: Pipeline) -> None:
    queries = [json.loads(line) for line in (pipeline.dataset / "queries" / "test.jsonl").read_text().splitlines()]
    own = {q["id"]: q["passage_id"] for q in queries}
    for query_format, path in pipeline.runs.items():
        run = read_run(path)
        # A query whose words are all stop words ("It") finds nothing and has no line.
        assert set(run) <= set(own) and len(run) >= 0.95 * len(own)
        for qid, hits in run.items():
            assert 1 <= len(hits) <= 100
            assert [rank for _, rank, _, _ in hits] == list(range(1, len(hits) + 1))
            assert own[qid] not in [pid for pid, _, _, _ in hits]
            assert {tag for _, _, _, tag in hits} == {f"bm25-{query_format.replace('+', '_')}"}
            scores = [score for _, _, score, _ in hits]
            assert scores == sorted(scores, reverse=True)
    assert read_run(pipeline.runs["mention"]) != read_run(pipeline.runs["mention+entities"])


@java
def test_search_records_run_metadata(pipeline: Pipeline) -> None:
    for query_format, path in pipeline.runs.items():
        meta = json.loads(path.with_name(path.name + ".meta.json").read_text())
        manifest = json.loads((pipeline.index / "lucene" / "manifest.json").read_text())
        assert meta["kind"] == "corefsearch-run" and meta["options"]["query_format"] == query_format
        assert meta["passages_sha256"] == manifest["passages_sha256"]
        assert meta["rows"] == sum(1 for _ in path.open())


@java
def test_evaluate_table(pipeline: Pipeline) -> None:
    result = invoke("evaluate", pipeline.runs["mention"], "--qrels", pipeline.qrels)
    for metric in METRICS:
        assert metric in result.stdout
    assert "(trec definitions)" in " ".join(result.stdout.split()) and "mention" in result.stdout
    assert str(len(read_qrels(pipeline.qrels))) in result.stdout  # the "queries" row


@java
def test_evaluate_json(pipeline: Pipeline) -> None:
    result = invoke("evaluate", pipeline.runs["mention"], "--qrels", pipeline.qrels, "--output-format", "json")
    scores = json.loads(result.stdout)
    assert list(scores) == ["mention"]
    values = scores["mention"]
    assert list(values) == ["MRR@10", "mAP@10", "mAP@50", "R@10", "R@50", "R@100", "R@500"]
    assert all(0.0 <= value <= 1.0 for value in values.values())
    # Recomputed by hand from the files: MRR@10 and per-query-averaged recall.
    run, qrels = read_run(pipeline.runs["mention"]), read_qrels(pipeline.qrels)
    reciprocal, recall = [], []
    for qid, relevant in qrels.items():
        order = ranked(run.get(qid, []))
        first = next((rank for rank, pid in enumerate(order[:10], start=1) if pid in relevant), None)
        reciprocal.append(1 / first if first else 0.0)
        recall.append(len(relevant & set(order[:100])) / len(relevant))
    assert values["MRR@10"] == pytest.approx(sum(reciprocal) / len(reciprocal))
    assert values["R@100"] == pytest.approx(sum(recall) / len(recall))
    assert 0 < values["R@10"] <= values["R@50"] <= values["R@100"] == values["R@500"]


@java
def test_evaluate_two_runs_side_by_side(pipeline: Pipeline) -> None:
    runs = [pipeline.runs["mention"], pipeline.runs["mention+entities"]]
    table = invoke("evaluate", *runs, "--qrels", pipeline.qrels).stdout
    header = next(line for line in table.splitlines() if "Metric" in line)
    assert header.index("Metric") < header.index("mention ") < header.index("mention+entities")
    mrr_row = next(line for line in table.splitlines() if "MRR@10" in line)
    assert len([cell for cell in mrr_row.split() if cell[0].isdigit()]) == 2
    scores = json.loads(invoke("evaluate", *runs, "--qrels", pipeline.qrels, "--output-format", "json").stdout)
    assert list(scores) == ["mention", "mention+entities"]
    assert scores["mention"] != scores["mention+entities"]


@java
def test_evaluate_coresearch_definition(pipeline: Pipeline) -> None:
    args = ["evaluate", pipeline.runs["mention"], "--qrels", pipeline.qrels, "--definition", "coresearch"]
    table = " ".join(invoke(*args).stdout.split())
    assert "(coresearch definitions)" in table and "R@k micro-averaged" in table
    paper = json.loads(invoke(*args, "--output-format", "json").stdout)["mention"]
    trec = json.loads(invoke("evaluate", pipeline.runs["mention"], "--qrels", pipeline.qrels,
                             "--output-format", "json").stdout)["mention"]
    assert paper["MRR@10"] == pytest.approx(trec["MRR@10"])
    # The paper's recall is micro-averaged: all relevant found / all relevant.
    run, qrels = read_run(pipeline.runs["mention"]), read_qrels(pipeline.qrels)
    found = sum(len(relevant & set(ranked(run.get(qid, []))[:100])) for qid, relevant in qrels.items())
    assert paper["R@100"] == pytest.approx(found / sum(len(relevant) for relevant in qrels.values()))
    assert paper["R@100"] != pytest.approx(trec["R@100"])


@java
def test_evaluate_per_query_csv(pipeline: Pipeline, tmp_path: Path) -> None:
    out = tmp_path / "per-query.csv"
    invoke("evaluate", pipeline.runs["mention"], pipeline.runs["mention+entities"], "--qrels", pipeline.qrels,
           "--per-query", out)
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    qids = set(read_qrels(pipeline.qrels))
    assert list(rows[0]) == ["run", "qid", *METRICS]
    for name in ("mention", "mention+entities"):
        mine = [row for row in rows if row["run"] == name]
        assert {row["qid"] for row in mine} == qids and len(mine) == len(qids)
        assert all(0.0 <= float(row[metric]) <= 1.0 for row in mine for metric in METRICS)


@java
def test_query_json(pipeline: Pipeline) -> None:
    passages = {}
    for line in (pipeline.dataset / "passages.jsonl").read_text().splitlines():
        record = json.loads(line)
        passages[record["id"]] = record
    target = next(p for p in passages.values() if p["mentions"] and len(p["text"].split()) >= 15
                  and sum(other["text"] == p["text"] for other in passages.values()) == 1)
    mention = target["text"][target["mentions"][0]["start"]:target["mentions"][0]["end"]]
    context = f"Witnesses described the scene. {target['text']}"
    for query_format in ("mention+entities", "sentence"):
        result = invoke("query", "--index", pipeline.index, "--mention", mention, "--context", context,
                        "--k", "5", "--query-format", query_format, "--json")
        answer = json.loads(result.stdout)
        assert answer["query"]["mention"] == mention and answer["query"]["context"] == context
        assert context[answer["query"]["start"]:answer["query"]["end"]] == mention
        assert 1 <= len(answer["hits"]) <= 5
        for rank, hit in enumerate(answer["hits"], start=1):
            assert hit["rank"] == rank
            assert hit["text"] == passages[hit["passage_id"]]["text"]
        if query_format == "sentence":
            assert answer["hits"][0]["passage_id"] == target["id"]


@java
def test_query_table(pipeline: Pipeline) -> None:
    result = invoke("query", "--index", pipeline.index, "--mention", "earthquake", "--k", "3")
    assert "Query mention: earthquake" in result.stdout


@java
def test_query_table_shows_brackets_verbatim(pipeline: Pipeline) -> None:
    # Rich reads "[...]" as markup; user text must be printed as it is, not styled or rejected.
    context = "The [/quake] struck [Jakarta] at dawn."
    result = invoke("query", "--index", pipeline.index, "--mention", "[/quake]", "--context", context, "--k", "2")
    assert "Query mention: [/quake]" in result.stdout
    assert "BM25 query: [/quake] Jakarta" in result.stdout


def test_help_and_version() -> None:
    result = invoke("--help")
    for command in ("build-dataset", "index", "search", "query", "evaluate"):
        assert command in result.stdout
    assert "Usage" in invoke("search", "--help").stdout
    assert invoke("--version").stdout.startswith("corefsearch ")


def test_module_entry_point_help() -> None:
    done = subprocess.run([sys.executable, "-m", "corefsearch.cli", "--help"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "build-dataset" in done.stdout and "evaluate" in done.stdout


def test_cli_import_is_light() -> None:
    code = "import corefsearch.cli, sys; print('torch' in sys.modules, 'pyserini' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(("args", "message"), [
    (["search", "--bogus"], "No such option: --bogus"),
    (["train", "reader", "DATASET", "--run", "r", "--out", "o", "--epochs", "x"], "Invalid value for '--epochs'"),
    (["evaluate", "--qrels"], "Option '--qrels' requires an argument"),
])
def test_a_usage_error_is_one_line_with_exit_code_2(args: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", "corefsearch.cli", *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert "--help`" in lines[0]


def test_summary_lines_are_not_wrapped_when_piped(pipeline: Pipeline, tmp_path: Path) -> None:
    out = tmp_path / "a-rather-long-directory-name-so-that-the-summary-line-passes-eighty-columns" / "run.trec"
    out.parent.mkdir()
    done = subprocess.run([sys.executable, "-m", "corefsearch.cli", "search", "--index", str(pipeline.index),
                           "--queries", str(pipeline.dataset / "queries" / "test.jsonl"), "--k", "5",
                           "--query-format", "mention", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    summary = [line for line in done.stdout.splitlines() if line.startswith("Searched ")]
    assert len(summary) == 1 and summary[0].endswith(str(out))
