"""Bad input through the command line: a one-line message naming the file and line, the record
or what to run, exit code != 0 and no traceback; interrupted builds leave nothing half-written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corefsearch.cli import app

# A wide console, so that rich does not wrap long temporary paths in the messages.
runner = CliRunner(env={"COLUMNS": "250"})


def fails(*args: object, code: int = 1) -> str:
    """Run the CLI, expect a clean failure; return everything it printed."""
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.output
    assert result.stdout == ""  # messages go to stderr
    return " ".join(result.stderr.split())


def succeeds(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    return result


def replace_line(path: Path, number: int, new: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[number - 1] = new
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def generic_build(corpus: Any, out: Path) -> list[str]:
    return ["build-dataset", corpus.folder, "--format", "generic", "--out", out]


# --- build-dataset ----------------------------------------------------------------------------


def test_malformed_corpus_line(news_corpus: Any, tmp_path: Path) -> None:
    replace_line(news_corpus.folder / "corpus.jsonl", 3, '{"doc_id": "quake-1", "text": "A magnitude')
    message = fails(*generic_build(news_corpus, tmp_path / "ds"))
    assert f"error: {news_corpus.folder / 'corpus.jsonl'}:3: invalid JSON" in message
    assert not (tmp_path / "ds").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["news"]  # no partial folder


@pytest.mark.parametrize(("offsets", "why"), [((230, 260), "do not fit document flood-1"),
                                              ((45, 46), "cover only white space")])
def test_mention_offsets_that_do_not_match(news_corpus: Any, tmp_path: Path, offsets: tuple[int, int],
                                           why: str) -> None:
    mentions = news_corpus.folder / "mentions.jsonl"
    record = {"mention_id": "levee-breach", "doc_id": "flood-1", "start": offsets[0], "end": offsets[1],
              "cluster_id": "dayton-flood"}
    with mentions.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    assert news_corpus.documents["flood-1"]["text"][45] == " "
    message = fails(*generic_build(news_corpus, tmp_path / "ds"))
    assert f"{mentions}:12: mention levee-breach: offsets [{offsets[0]}, {offsets[1]})" in message
    assert why in message
    assert not (tmp_path / "ds").exists()


def test_message_with_square_brackets_is_printed_as_it_is(news_corpus: Any, tmp_path: Path) -> None:
    # Identifiers are the user's: rich must not read "[...]" in them as markup (nor fail on it).
    mentions = news_corpus.folder / "mentions.jsonl"
    for mention_id in ("flood[dayton]", "flood[/dayton]"):
        record = {"mention_id": mention_id, "doc_id": "flood-1", "start": 0, "end": 999, "cluster_id": "c"}
        mentions.write_text(json.dumps(record) + "\n", encoding="utf-8")
        message = fails(*generic_build(news_corpus, tmp_path / "ds"))
        assert f"mention {mention_id}: offsets [0, 999)" in message


def test_unknown_format_and_missing_input(news_corpus: Any, tmp_path: Path) -> None:
    message = fails("build-dataset", news_corpus.folder, "--format", "brat", "--out", tmp_path / "ds")
    assert "--format must be one of ecbplus, wec, coresearch, generic, cdcr-json, conll" in message
    message = fails("build-dataset", tmp_path / "nowhere", "--format", "generic", "--out", tmp_path / "ds")
    assert "no such file or folder" in message
    assert "--split-ratios takes comma-separated numbers" in fails(
        *generic_build(news_corpus, tmp_path / "ds"), "--split-ratios", "80%,10%,10%")
    assert not (tmp_path / "ds").exists()


def test_build_onto_an_existing_directory(news_corpus: Any, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    succeeds(*generic_build(news_corpus, out), "--split-ratios", "0,0,1")
    manifest = (out / "manifest.json").read_text()
    message = fails(*generic_build(news_corpus, out), "--passage", "document")
    assert f"{out} already exists (use --overwrite to replace it)" in message
    assert (out / "manifest.json").read_text() == manifest
    succeeds(*generic_build(news_corpus, out), "--passage", "document", "--overwrite")
    assert json.loads((out / "manifest.json").read_text())["options"]["passage"] == "document"


# --- index, search and query --------------------------------------------------------------------


def test_index_of_a_missing_dataset(tmp_path: Path) -> None:
    message = fails("index", tmp_path / "dataset", "--out", tmp_path / "index")
    assert "not a corefsearch dataset" in message and "corefsearch build-dataset" in message
    assert not (tmp_path / "index").exists()


@pytest.mark.java
def test_search_with_a_missing_index(subset_dataset: Path, tmp_path: Path) -> None:
    message = fails("search", "--index", tmp_path / "index", "--queries", subset_dataset / "queries" / "test.jsonl",
                    "--out", tmp_path / "run.txt")
    assert f"no Lucene index at {tmp_path / 'index'}" in message
    assert f"corefsearch index DATASET --out {tmp_path / 'index'}" in message
    assert not (tmp_path / "run.txt").exists()


@pytest.mark.java
def test_search_with_a_missing_dataset(subset_index: Path, tmp_path: Path) -> None:
    queries = tmp_path / "dataset" / "queries" / "test.jsonl"
    message = fails("search", "--index", subset_index, "--queries", queries, "--out", tmp_path / "run.txt")
    assert str(queries) in message and "corefsearch build-dataset" in message


@pytest.mark.java
def test_query_with_a_missing_index(tmp_path: Path) -> None:
    message = fails("query", "--index", tmp_path / "index", "--mention", "earthquake")
    assert "corefsearch index" in message


@pytest.mark.java
def test_queries_file_with_a_broken_line(subset_dataset: Path, subset_index: Path, tmp_path: Path) -> None:
    queries = tmp_path / "queries.jsonl"
    lines = (subset_dataset / "queries" / "test.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    queries.write_text("\n".join([lines[0], lines[1][:40], lines[2]]) + "\n", encoding="utf-8")
    message = fails("search", "--index", subset_index, "--queries", queries, "--out", tmp_path / "run.txt")
    assert f"{queries}:2: invalid JSON" in message
    # A record whose offsets do not give its mention names the query.
    record = json.loads(lines[1]) | {"mention": "tsunami"}
    queries.write_text("\n".join([lines[0], json.dumps(record)]) + "\n", encoding="utf-8")
    message = fails("search", "--index", subset_index, "--queries", queries, "--out", tmp_path / "run.txt")
    assert f"{queries}:2: query {record['id']}:" in message and "not the mention 'tsunami'" in message
    assert not (tmp_path / "run.txt").exists()


@pytest.mark.java
def test_empty_queries_file(subset_index: Path, tmp_path: Path) -> None:
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n", encoding="utf-8")
    message = fails("search", "--index", subset_index, "--queries", queries, "--out", tmp_path / "run.txt")
    assert f"{queries}: holds no queries" in message


@pytest.mark.java
@pytest.mark.parametrize("k", ["0", "-1"])
def test_k_below_one(subset_dataset: Path, subset_index: Path, tmp_path: Path, k: str) -> None:
    message = fails("query", "--index", subset_index, "--mention", "earthquake", "--k", k)
    assert f"--k must be at least 1, got {k}" in message
    message = fails("search", "--index", subset_index, "--queries", subset_dataset / "queries" / "test.jsonl",
                    "--out", tmp_path / "run.txt", "--k", k)
    assert f"--k must be at least 1, got {k}" in message
    assert list(tmp_path.iterdir()) == []  # no run file, not even a temporary one


@pytest.mark.java
def test_index_of_another_dataset(subset_index: Path, news_corpus: Any, tmp_path: Path) -> None:
    succeeds(*generic_build(news_corpus, tmp_path / "ds"), "--split-ratios", "0,0,1")
    message = fails("search", "--index", subset_index, "--queries", tmp_path / "ds" / "queries" / "test.jsonl",
                    "--out", tmp_path / "run.txt")
    assert "was built from other passages" in message and "--overwrite" in message


@pytest.mark.java
def test_query_mention_not_in_the_context(subset_index: Path) -> None:
    message = fails("query", "--index", subset_index, "--mention", "tsunami",
                    "--context", "A strong earthquake struck Aceh on Tuesday.")
    assert "the mention 'tsunami' does not occur in the context" in message


@pytest.mark.java
def test_query_occurrence_out_of_range(subset_index: Path) -> None:
    context = "The earthquake struck at dawn. A second earthquake followed at noon."
    message = fails("query", "--index", subset_index, "--mention", "earthquake", "--context", context,
                    "--occurrence", "3")
    assert "--occurrence 3: the mention occurs 2 time(s) in the context" in message
    succeeds("query", "--index", subset_index, "--mention", "earthquake", "--context", context, "--occurrence", "2",
             "--json")


# --- evaluate ---------------------------------------------------------------------------------


@pytest.fixture
def qrels(tmp_path: Path) -> Path:
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 p1 1\nq1 0 p2 1\nq2 0 p3 1\n", encoding="utf-8")
    return path


def test_run_with_queries_absent_from_the_qrels(qrels: Path, tmp_path: Path) -> None:
    run = tmp_path / "bm25.run"
    run.write_text("q1 Q0 p1 1 3.5 bm25\nq1 Q0 p9 2 2.0 bm25\nq7 Q0 p1 1 4.0 bm25\nq8 Q0 p2 1 1.0 bm25\n")
    result = succeeds("evaluate", run, "--qrels", qrels, "--output-format", "json")
    warnings = " ".join(result.stderr.split())
    assert "warning: bm25: 2 of 3 run queries are not in the qrels and were ignored (q7, q8)" in warnings
    assert "1 of 2 qrels queries have no results in the run" in warnings
    scores = json.loads(result.stdout)["bm25"]
    assert scores["MRR@10"] == pytest.approx(0.5) and scores["R@10"] == pytest.approx(0.25)


def test_run_file_with_a_malformed_line(qrels: Path, tmp_path: Path) -> None:
    run = tmp_path / "bm25.run"
    run.write_text("q1 Q0 p1 1 3.5 bm25\nq1 Q0 p2 2 bm25\n")
    message = fails("evaluate", run, "--qrels", qrels)
    assert f"{run}:2: " in message and "6 columns 'qid Q0 doc_id rank score tag', found 5" in message
    run.write_text("q1 Q0 p1 1 3.5 bm25\nq1 Q0 p2 two 2.0 bm25\n")
    assert f"{run}:2: rank must be an integer" in fails("evaluate", run, "--qrels", qrels)


def test_bad_qrels_and_options(qrels: Path, tmp_path: Path) -> None:
    run = tmp_path / "bm25.run"
    run.write_text("q1 Q0 p1 1 3.5 bm25\n")
    qrels.write_text("q1 0 p1 1\nq1 0 p2 yes\n")
    assert f"{qrels}:2: relevance must be an integer" in fails("evaluate", run, "--qrels", qrels)
    qrels.write_text("q1 0 p1 1\n")
    assert "unknown metric definition 'paper'" in fails("evaluate", run, "--qrels", qrels, "--definition", "paper")
    assert "--output-format must be table, json or csv" in fails("evaluate", run, "--qrels", qrels,
                                                                  "--output-format", "xml")
    assert f"{tmp_path / 'other.run'}: no such file" in fails("evaluate", tmp_path / "other.run", "--qrels", qrels)


# --- interrupted index ------------------------------------------------------------------------


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, calls: int, error: BaseException) -> list[int]:
    from corefsearch.sparse.java import ensure_java

    ensure_java()
    from pyserini.index.lucene import LuceneIndexer

    added: list[int] = []
    original = LuceneIndexer.add_batch_raw

    def add_batch_raw(self: Any, docs: list[str]) -> None:
        if len(added) == calls:
            raise error
        added.append(len(docs))
        original(self, docs)

    monkeypatch.setattr(LuceneIndexer, "add_batch_raw", add_batch_raw)
    return added


@pytest.mark.java
@pytest.mark.parametrize("error", [KeyboardInterrupt(), OSError("No space left on device")])
def test_interrupted_index_leaves_no_lucene_folder(subset_dataset: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    from corefsearch.sparse.index import build_lucene_index

    added = _interrupt_after(monkeypatch, 2, error)
    with pytest.raises(type(error)):
        build_lucene_index(subset_dataset, tmp_path / "index", batch_size=100)
    assert added == [100, 100]  # interrupted midway, at the third batch
    assert not (tmp_path / "index").exists()  # neither lucene/ nor a hidden partial folder, nor the folder made


@pytest.mark.java
def test_interrupted_index_through_the_cli_keeps_the_old_index(subset_dataset: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "index"
    shutil.copytree(subset_dataset, tmp_path / "dataset")
    succeeds("index", tmp_path / "dataset", "--out", index)
    manifest = (index / "lucene" / "manifest.json").read_text()
    _interrupt_after(monkeypatch, 0, KeyboardInterrupt())
    message = fails("index", tmp_path / "dataset", "--out", index, "--overwrite", code=130)
    assert "interrupted" in message
    assert (index / "lucene" / "manifest.json").read_text() == manifest
    assert sorted(p.name for p in index.iterdir()) == ["lucene"]
    message = fails("index", tmp_path / "dataset", "--out", index)
    assert f"{index / 'lucene'} already exists (use --overwrite to replace it)" in message


# --- option combinations: refused in one line before anything loads --------------------------------------------


@pytest.fixture
def nothing_loads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An index folder whose dense index was built with the bundled default encoder; opening it (or any
    index) fails the test, so a refusal can only come from the options' own check."""
    from corefsearch.base.artefacts import DENSE_INDEX
    from corefsearch.search import engine, pipeline

    def loads(*_: object, **__: object) -> None:
        raise AssertionError("the index was opened before the options were checked")

    for module, name in ((pipeline, "search_to_run"), (pipeline, "adhoc_query")):
        monkeypatch.setattr(module, name, loads)
    monkeypatch.setattr(engine.SearchEngine, "open", classmethod(loads))
    index = tmp_path / "index"
    (index / "dense").mkdir(parents=True)
    (index / "dense" / "manifest.json").write_text(json.dumps({"kind": DENSE_INDEX.kind, "format_version":
                                                               DENSE_INDEX.format_version,
                                                               "encoder": {"reference": "default"}}))
    return index


NO_EXPORT = "--backend {} runs an ONNX export of the encoder, and the bundled default encoder has none"


@pytest.mark.parametrize(("args", "expected"), [
    (["query", "--mention", "quake", "--cluster"],
     "--cluster clusters the mentions found with a mention encoder: add --mention-encoder DIR"),
    (["query", "--mention", "quake", "--rounds", "2"], "--rounds 2 with --candidates detected: the mention encoder"),
    (["search", "--queries", "q.jsonl", "--out", "run", "--rounds", "2", "--candidates", "reader"],
     "--candidates reader takes the spans of --reader"),
    (["query", "--mention", "quake", "--retriever", "dense", "--backend", "onnx"], NO_EXPORT.format("onnx")),
    (["search", "--queries", "q.jsonl", "--out", "run", "--retriever", "hybrid", "--backend", "onnx-int8",
      "--encoder", "default"], NO_EXPORT.format("onnx-int8")),
    (["serve", "--retriever", "bm25,dense", "--backend", "onnx"], NO_EXPORT.format("onnx")),
    (["query", "--mention", "quake", "--reader", "no-such-reader"], "no-such-reader"),
])
def test_option_combinations_are_refused_before_anything_loads(nothing_loads: Path, args: list[str],
                                                               expected: str) -> None:
    message = fails(args[0], "--index", nothing_loads, *args[1:])
    assert expected in message, message
