"""Plain documents: a folder of .txt files or a corpus.jsonl without mentions (--format text), and generic
corpora whose mentions.jsonl is missing or empty; the dataset of passages they build."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.datasets.build import BuildOptions, build_dataset
from corefsearch.datasets.dataset import Dataset
from corefsearch.datasets.sources import SourceOptions, plain_source, read_source
from corefsearch.datasets.text import read_text

runner = CliRunner(env={"COLUMNS": "250"})

QUAKE = "Un séisme a frappé Lima lundi. Les secours sont arrivés à l'aube.\n\nLe bilan reste incertain."
FLOOD = "The Great Miami River overflowed on Tuesday. Residents of Dayton fled."


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def txt_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "quake-lima.txt").write_text(f"Séisme à Lima  \n{QUAKE}\n", encoding="utf-8")
    (folder / "flood.txt").write_text(f"River floods Dayton\r\n\r\n{FLOOD}\r\n", encoding="utf-8")
    (folder / "notes.md").write_text("not a document\n", encoding="utf-8")
    return folder


def corpus_records() -> list[dict[str, Any]]:
    return [{"doc_id": "flood", "title": "River floods Dayton", "text": FLOOD, "topic": "floods"},
            {"doc_id": "quake-lima", "title": "Séisme à Lima", "text": QUAKE}]


def build(path: Path, out: Path, source_format: str = "text", **source: Any) -> Dataset:
    """Build the dataset of ``path`` as the command line does (the source declared plain when it is)."""
    distractors = source.pop("distractors", ())
    options = BuildOptions(passage=source.pop("passage", "sentence"),
                           source={"format": source_format, "input": str(path),
                                   "mentions": "none" if plain_source(source_format, path) else "gold"})
    documents = read_source(source_format, path, SourceOptions(passage=options.passage, **source))
    with warnings.catch_warnings():
        warnings.simplefilter("error" if options.source["mentions"] == "none" else "ignore")  # plain: no warning
        build_dataset(documents, out, options, distractors=distractors)
    return Dataset(out)


def test_a_folder_of_txt_files_is_read_in_sorted_order(txt_folder: Path) -> None:
    docs = list(read_text(txt_folder))
    assert [d.doc_id for d in docs] == ["flood", "quake-lima"]
    flood, quake = docs
    assert flood.title == "River floods Dayton" and flood.text == FLOOD  # CRLF, blank line and ends stripped
    assert quake.title == "Séisme à Lima" and quake.text == QUAKE  # non-ASCII kept as it is
    assert [quake.text[s:e] for s, e in quake.units] == [
        "Un séisme a frappé Lima lundi.", "Les secours sont arrivés à l'aube.", "Le bilan reste incertain."]
    assert all(not d.mentions and d.split is None for d in docs)
    assert [d.units for d in read_text(txt_folder, "document")] == [[(0, len(d.text))] for d in docs]


def test_newline_sentences(txt_folder: Path) -> None:
    quake = list(read_text(txt_folder, sentences="newline"))[1]
    assert [quake.text[s:e] for s, e in quake.units] == [
        "Un séisme a frappé Lima lundi. Les secours sont arrivés à l'aube.", "Le bilan reste incertain."]


def test_corpus_jsonl_as_a_file_or_in_a_folder(tmp_path: Path, txt_folder: Path) -> None:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", corpus_records())
    from_file, from_folder = list(read_text(corpus)), list(read_text(tmp_path))
    assert from_file == from_folder
    assert [(d.doc_id, d.title, d.text, d.units) for d in from_file] == [
        (d.doc_id, d.title, d.text, d.units) for d in read_text(txt_folder)]
    assert [d.topic for d in from_file] == ["floods", None]


def test_the_dataset_of_plain_documents(txt_folder: Path, tmp_path: Path) -> None:
    dataset = build(txt_folder, tmp_path / "out")
    passages = list(dataset.passages())
    assert [p.id for p in passages] == ["flood-0", "flood-1", "quake-lima-0", "quake-lima-1", "quake-lima-2"]
    assert passages[2].title == "Séisme à Lima" and passages[2].text == "Un séisme a frappé Lima lundi."
    assert all(not p.mentions for p in passages)
    assert dataset.clusters() == [] and dataset.clusters_path.read_text() == ""
    for split in ("train", "dev", "test"):  # empty split files: every reader of a dataset copes
        assert dataset.queries(split) == [] and dataset.qrels_path(split).read_text() == ""
    assert dataset.manifest["options"]["source"]["mentions"] == "none"
    assert dataset.manifest["counts"]["mentions"] == 0 and dataset.manifest["counts"]["documents"] == 2
    assert not dataset.has_gold_mentions
    with pytest.raises(InputError, match="^evaluate: .* is a dataset of plain documents, without gold mentions"):
        dataset.require_gold("evaluate")


def test_a_dataset_with_mentions_passes_the_check(news_corpus: Any, tmp_path: Path) -> None:
    dataset = build(news_corpus.folder, tmp_path / "out", "generic")
    assert dataset.has_gold_mentions and dataset.require_gold("search") is dataset
    assert dataset.manifest["options"]["source"]["mentions"] == "gold"


def test_plain_documents_not_declared_so_are_still_refused(txt_folder: Path, tmp_path: Path) -> None:
    documents = read_source("text", txt_folder, SourceOptions())
    with pytest.raises(InputError, match="hold no mention to make queries of"):
        build_dataset(documents, tmp_path / "out", BuildOptions(source={"format": "text"}))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mentions", [None, "", "\n  \n"])
def test_generic_without_mentions_builds_the_same_plain_dataset(tmp_path: Path, mentions: str | None) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_jsonl(folder / "corpus.jsonl", corpus_records())
    if mentions is not None:
        (folder / "mentions.jsonl").write_text(mentions, encoding="utf-8")
    note = plain_source("generic", folder)
    assert note is not None and "mentions.jsonl is " + ("missing" if mentions is None else "empty") in note
    generic = build(folder, tmp_path / "generic", "generic")
    text = build(folder / "corpus.jsonl", tmp_path / "text")
    assert generic.passages_path.read_text() == text.passages_path.read_text()
    assert not generic.has_gold_mentions


def test_generic_without_mentions_takes_distractors(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_jsonl(folder / "corpus.jsonl", corpus_records())
    distractors = write_jsonl(tmp_path / "more.jsonl", [{"doc_id": "extra", "text": "Markets rose on Monday."}])
    dataset = build(folder, tmp_path / "out", "generic", passage="document", distractors=[distractors])
    assert [p.id for p in dataset.passages()] == ["flood-0", "quake-lima-0", "extra-0"]
    assert dataset.manifest["counts"]["distractor_passages"] == 1 and not dataset.has_gold_mentions


def test_split_by_corpus(tmp_path: Path, txt_folder: Path) -> None:
    records = [record | {"split": split} for record, split in zip(corpus_records(), ("train", "test"), strict=True)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", records)
    assert [d.split for d in read_text(corpus, split_by="corpus")] == ["train", "test"]
    with pytest.raises(InputError, match=r"--split-by corpus: the \.txt files of .* carry no split"):
        list(read_text(txt_folder, split_by="corpus"))


def test_mention_options_are_refused(txt_folder: Path) -> None:
    with pytest.raises(InputError, match="--mention-type event: --format text reads documents without mentions"):
        read_source("text", txt_folder, SourceOptions(mention_type="event"))
    with pytest.raises(InputError, match="holds mentions.jsonl"):
        write_jsonl(txt_folder / "corpus.jsonl", corpus_records())
        write_jsonl(txt_folder / "mentions.jsonl", [{"mention_id": "m", "doc_id": "flood", "start": 0, "end": 3,
                                                     "cluster_id": "c"}])
        list(read_text(txt_folder))


def _not_utf8(folder: Path) -> None:
    (folder / "b.txt").write_bytes("Titre\nUne phrase très courte.\n".encode("latin-1"))


def _no_text(folder: Path) -> None:
    (folder / "b.txt").write_text("A title and nothing else\n\n   \n", encoding="utf-8")


def _empty_file(folder: Path) -> None:
    (folder / "b.txt").write_bytes(b"")


def _empty_corpus_text(folder: Path) -> None:
    write_jsonl(folder / "corpus.jsonl", [{"doc_id": "a", "text": "Fine."}, {"doc_id": "b", "text": " \n"}])


def _no_txt(folder: Path) -> None:
    (folder / "a.txt").unlink()
    (folder / "readme.md").write_text("nothing here\n", encoding="utf-8")


def _unknown_documents(folder: Path) -> None:
    write_jsonl(folder / "corpus.jsonl", [{"doc_id": "a", "text": "Fine here."}])
    write_jsonl(folder / "mentions.jsonl", [{"mention_id": "m1", "doc_id": "a", "start": 0, "end": 4, "cluster_id": 1},
                                            {"mention_id": "m2", "doc_id": "z", "start": 0, "end": 4, "cluster_id": 1}])


@pytest.mark.parametrize(("make", "source_format", "message"), [
    (_not_utf8, "text", r"b\.txt:2: not UTF-8 text \(byte 0xe8 at column 14\)"),
    (_no_text, "text", r"b\.txt:3: document b has no text after its title \(line 1\)"),
    (_empty_file, "text", r"b\.txt:1: document b has no text after its title"),
    (_empty_corpus_text, "text", r"corpus\.jsonl:2: document b has an empty text"),
    (_empty_corpus_text, "generic", r"corpus\.jsonl:2: document b has an empty text"),
    (_no_txt, "text", r"holds no \.txt file and no corpus\.jsonl"),
    (_unknown_documents, "generic", r"mentions\.jsonl:2: mention m2 names doc_id z, which is not in"),
])
def test_errors_are_one_line_naming_the_file(tmp_path: Path, make: Any, source_format: str, message: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("Title\nSome text here.\n", encoding="utf-8")
    make(folder)
    result = runner.invoke(app, ["build-dataset", str(folder), "--format", source_format, "--out",
                                 str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("error: ")
    assert re.search(message, result.output), result.output
    assert not (tmp_path / "out").exists()


def test_the_command_line_says_plain_in_one_line(txt_folder: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["build-dataset", str(txt_folder), "--format", "text", "--passage", "window",
                                 "--window", "2", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert result.output.count("plain documents") == 1 and "warning" not in result.output
    passages = [json.loads(line) for line in (tmp_path / "out" / "passages.jsonl").read_text().splitlines()]
    assert [p["text"] for p in passages[2:]] == [
        "Un séisme a frappé Lima lundi. Les secours sont arrivés à l'aube.",
        "Les secours sont arrivés à l'aube.\n\nLe bilan reste incertain.", "Le bilan reste incertain."]
