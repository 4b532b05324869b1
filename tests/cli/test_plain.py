"""A dataset of plain documents on the command line: build-dataset --format text -> index (BM25 and dense)
-> query, add, and the one line with which each command that needs gold mentions refuses it."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
from helpers import NEWS_DOCUMENTS, write_jsonl, write_texts
from typer.testing import CliRunner

from corefsearch.cli import app
from corefsearch.datasets.dataset import Dataset

java = pytest.mark.java
runner = CliRunner(env={"COLUMNS": "250"})


def invoke(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    return result


def refused(*args: object) -> str:
    """The one line of a command that cannot run on a dataset of plain documents."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("error: ") and "is a dataset of plain documents" in result.output
    return str(result.output)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The news corpus's documents as .txt files, built into a dataset of plain documents."""
    root = tmp_path_factory.mktemp("plain")
    texts = write_texts(root / "texts", NEWS_DOCUMENTS)
    result = invoke("build-dataset", texts, "--format", "text", "--out", root / "dataset")
    assert "plain documents (--format text)" in result.output and "warning" not in result.output
    assert "no mentions (find them with `corefsearch detect`)" in result.output
    assert "Queries come from" not in result.output  # no split table of zeros for a plain collection
    return root / "dataset"


def passage_ids(dataset: Path) -> list[str]:
    return [p.id for p in Dataset(dataset).passages()]


@java
def test_index_and_query_a_plain_dataset(plain: Path, tiny_base: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    invoke("index", plain, "--out", index)
    invoke("index", plain, "--out", index, "--dense", "--encoder", tiny_base, "--device", "cpu")
    context = "Aftershocks followed the earthquake that struck northern California."
    for retriever in ("bm25", "dense", "hybrid"):
        result = invoke("query", "--index", index, "--mention", "earthquake", "--context", context, "--k", 3,
                        "--retriever", retriever, "--device", "cpu", "--json")
        hits = json.loads(result.stdout)["hits"]
        assert len(hits) == 3 and {hit["passage_id"] for hit in hits} <= set(passage_ids(plain))
        if retriever == "bm25":
            assert hits[0]["passage_id"].startswith("quake-")


@java
def test_add_plain_documents_to_a_plain_dataset(plain: Path, tmp_path: Path) -> None:
    dataset, index = tmp_path / "dataset", tmp_path / "index"
    shutil.copytree(plain, dataset)
    invoke("index", dataset, "--out", index)
    corpus = tmp_path / "more"
    corpus.mkdir()
    write_jsonl(corpus / "corpus.jsonl", [{"doc_id": "storm-1", "title": "Storm reaches Lima",
                                           "text": "A tropical storm reached Lima overnight. Schools closed."}])
    invoke("add", dataset, "--corpus", corpus, "--index", index)
    assert passage_ids(dataset) == [*passage_ids(plain), "storm-1-0", "storm-1-1"]
    assert not Dataset(dataset).has_gold_mentions
    hits = json.loads(invoke("query", "--index", index, "--mention", "storm", "--k", 2, "--json").stdout)["hits"]
    assert hits[0]["passage_id"] == "storm-1-0"


def test_mentions_added_to_a_plain_dataset_make_it_a_dataset_with_gold_mentions(
        news_corpus: Any, tmp_path: Path) -> None:
    from corefsearch.search.add import add_documents

    texts = write_texts(tmp_path / "texts", [{"doc_id": "storm-1", "title": "Storm", "text": "A storm hit Lima."}])
    invoke("build-dataset", texts, "--format", "text", "--out", tmp_path / "dataset")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no --index
        summary = add_documents(tmp_path / "dataset", news_corpus.folder)
    dataset = Dataset(tmp_path / "dataset")
    assert summary.mentions > 0 and summary.new_queries > 0
    assert dataset.has_gold_mentions and dataset.manifest["counts"]["mentions"] == summary.mentions
    assert dataset.manifest["options"]["source"]["mentions"] == "none"  # the options it was built with


def test_commands_that_need_gold_mentions_refuse_it_in_one_line(plain: Path, tmp_path: Path) -> None:
    run = tmp_path / "hand.trec"
    run.write_text("q1 Q0 flood-1-0 1 2.0 hand\n", encoding="utf-8")
    line = refused("search", "--index", tmp_path / "index", "--queries", plain / "queries" / "test.jsonl",
                   "--out", tmp_path / "out.trec")
    assert line.startswith("error: search: ") and "corefsearch query INDEX --mention" in line
    assert not (tmp_path / "out.trec").exists()
    line = refused("evaluate", run, "--qrels", plain / "qrels" / "test.txt")
    assert line.startswith("error: evaluate: ") and "qrels of a dataset with gold mentions" in line
    for what, extra in (("retriever", []), ("reader", ["--run", run]), ("clusterer", [])):
        line = refused("train", what, plain, "--out", tmp_path / what, *extra)
        assert line.startswith(f"error: train {what}: ") and "a corpus with gold mentions" in line
        assert not (tmp_path / what).exists()
    line = refused("cluster", plain, "--out", tmp_path / "clusters.jsonl", "--method", "lemma")
    assert line.startswith("error: cluster: ")
    assert f"corefsearch detect {plain} --model heuristic" in line
    assert f"corefsearch cluster {plain} --mentions predicted" in line
    line = refused("query", "--index", tmp_path / "index", "--dataset", plain, "--qid", "flooding")
    assert "ask it with --mention TEXT --context TEXT" in line


@pytest.mark.parametrize("mentions", [None, "", "\n \n"], ids=["missing", "empty", "blank"])
def test_build_dataset_generic_without_mentions_says_so_in_one_line(tmp_path: Path, mentions: str | None) -> None:
    # A user who meant to give mentions learns in one line that none were read, and that there are no queries.
    folder = tmp_path / "corpus"
    write_jsonl(folder / "corpus.jsonl", NEWS_DOCUMENTS)
    if mentions is not None:
        (folder / "mentions.jsonl").write_text(mentions, encoding="utf-8")
    result = invoke("build-dataset", folder, "--format", "generic", "--out", tmp_path / "dataset")
    why = "missing" if mentions is None else "empty"
    assert "Traceback" not in result.output and "warning" not in result.output
    assert result.stderr.strip().splitlines() == [
        f"{folder / 'mentions.jsonl'} is {why}: {folder} is read as plain documents; the dataset holds its passages, "
        "without mentions, queries or qrels"]
    dataset = Dataset(tmp_path / "dataset")
    assert not dataset.has_gold_mentions and dataset.manifest["options"]["source"]["mentions"] == "none"
    assert all(dataset.queries_path(split).read_text(encoding="utf-8") == "" for split in ("train", "dev", "test"))


def test_queries_of_your_own_in_a_plain_dataset_are_not_refused(plain: Path, tmp_path: Path) -> None:
    from corefsearch.search.pipeline import _check_split_queries

    dataset = tmp_path / "dataset"
    shutil.copytree(plain, dataset)
    queries = dataset / "queries" / "test.jsonl"
    text = "The flood, the worst the city has seen in a century, left thousands without power."
    queries.write_text(json.dumps({"id": "q1", "passage_id": "flood-2-1", "text": text, "start": 4, "end": 9,
                                   "mention": "flood", "cluster_id": "x"}) + "\n", encoding="utf-8")
    _check_split_queries(queries)  # no error: searched as any queries file
    queries.write_text("\n", encoding="utf-8")
    with pytest.raises(Exception, match="is a dataset of plain documents"):
        _check_split_queries(queries)


def test_add_takes_text_files_and_tables_read_as_the_dataset_was(tmp_path: Path) -> None:
    texts = write_texts(tmp_path / "texts", [{"doc_id": "storm-1", "title": "Storm", "text": "A storm hit Lima."}])
    invoke("build-dataset", texts, "--format", "text", "--title", "none", "--out", tmp_path / "dataset")
    more = tmp_path / "more"
    (more / "2025").mkdir(parents=True)
    (more / "2025" / "flood.txt").write_text("River floods Dayton\nThe river rose on Tuesday.\n", encoding="utf-8")
    result = runner.invoke(app, ["add", str(tmp_path / "dataset"), "--corpus", str(more)])
    assert result.exit_code == 0, result.output
    assert "Titles (--title none)" in result.output  # as the dataset's documents were read
    passages = list(Dataset(tmp_path / "dataset").passages())
    assert [(p.id, p.title, p.text) for p in passages[-2:]] == [
        ("2025/flood-0", "", "River floods Dayton"), ("2025/flood-1", "", "The river rose on Tuesday.")]
    (more / "2025" / "quake.txt").write_text("Quake hits Lima\nThe ground shook.\n", encoding="utf-8")
    (more / "2025" / "flood.txt").unlink()
    result = runner.invoke(app, ["add", str(tmp_path / "dataset"), "--corpus", str(more), "--title", "auto"])
    assert result.exit_code == 0, result.output
    last = [(p.id, p.title) for p in Dataset(tmp_path / "dataset").passages()][-1]
    assert last == ("2025/quake-0", "Quake hits Lima")
    table = tmp_path / "more.csv"
    table.write_text('id,headline,body\nr1,Rain,"Rain fell, and fell."\n', encoding="utf-8")
    result = runner.invoke(app, ["add", str(tmp_path / "dataset"), "--corpus", str(table)])
    assert result.exit_code == 0, result.output
    assert "Columns: text from 'body', id from 'id', title from 'headline'." in result.output
    assert [(p.id, p.title) for p in Dataset(tmp_path / "dataset").passages()][-1] == ("r1-0", "Rain")
    again = runner.invoke(app, ["add", str(tmp_path / "dataset"), "--corpus", str(table)])
    assert again.exit_code == 1 and "document r1 is already in the dataset" in again.output


@java
def test_documents_in_sub_folders_are_searched_and_served_by_their_path(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from corefsearch.search.engine import SearchEngine, SearchOptions
    from corefsearch.serve.app import create_app

    texts = tmp_path / "texts"
    (texts / "2024" / "bbc").mkdir(parents=True)
    (texts / "2024" / "bbc" / "fire.txt").write_text("Mill fire\nA fire broke out at the mill. Crews came.\n",
                                                     encoding="utf-8")
    (texts / "flood.txt").write_text("The river rose on Tuesday.\n", encoding="utf-8")
    invoke("build-dataset", texts, "--format", "text", "--out", tmp_path / "dataset")
    invoke("index", tmp_path / "dataset", "--out", tmp_path / "index", "--threads", 1)
    hits = json.loads(invoke("query", "--index", tmp_path / "index", "--mention", "fire", "--k", 1,
                             "--json").stdout)["hits"]
    assert hits[0]["passage_id"] == "2024/bbc/fire-0"
    engine = SearchEngine.open(tmp_path / "index", SearchOptions(), tmp_path / "dataset")
    with TestClient(create_app(engine)) as client:
        served = client.get("/passages/2024%2Fbbc%2Ffire-1")
        assert served.status_code == 200, served.text
        assert served.json()["doc_id"] == "2024/bbc/fire" and served.json()["text"] == "Crews came."
        assert client.get("/passages/2024/bbc/fire-0").json()["title"] == "Mill fire"
