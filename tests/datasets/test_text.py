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
    with pytest.raises(InputError, match=r"--split-by corpus: the text files of .* carry no split"):
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
    (folder / "readme.pdf").write_bytes(b"%PDF-1.4")


def _unknown_documents(folder: Path) -> None:
    write_jsonl(folder / "corpus.jsonl", [{"doc_id": "a", "text": "Fine here."}])
    write_jsonl(folder / "mentions.jsonl", [{"mention_id": "m1", "doc_id": "a", "start": 0, "end": 4, "cluster_id": 1},
                                            {"mention_id": "m2", "doc_id": "z", "start": 0, "end": 4, "cluster_id": 1}])


@pytest.mark.parametrize(("make", "source_format", "message"), [
    (_no_text, "first-line", r"b\.txt:3: document b has no text after its title \(line 1; --title first-line\)"),
    (_empty_corpus_text, "text", r"corpus\.jsonl:2: document b has an empty text"),
    (_empty_corpus_text, "generic", r"corpus\.jsonl:2: document b has an empty text"),
    (_no_txt, "text", r"holds no \.txt or \.md file \(sub-folders included\) and no corpus\.jsonl"),
    (_unknown_documents, "generic", r"mentions\.jsonl:2: mention m2 names doc_id z, which is not in"),
])
def test_errors_are_one_line_naming_the_file(tmp_path: Path, make: Any, source_format: str, message: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("Title\nSome text here.\n", encoding="utf-8")
    make(folder)
    title = ["--title", source_format] if source_format == "first-line" else []
    result = runner.invoke(app, ["build-dataset", str(folder), "--format", "text" if title else source_format,
                                 *title, "--out", str(tmp_path / "out")])
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


# --- documents as users have them: no title line, one line, sub-folders, Markdown, tables ------------------------

LANDSLIDE = "A landslide closed the coast road at Porthallow on Monday.\nEngineers cleared it by noon.\n"


def texts_of(folder: Path, **options: Any) -> dict[str, tuple[str, list[str]]]:
    """``{doc_id: (title, sentences)}`` of the documents at ``folder``."""
    from corefsearch.datasets.text import TextOptions

    return {d.doc_id: (d.title, [d.text[s:e] for s, e in d.units])
            for d in read_text(folder, options=TextOptions(**options))}


def test_a_file_without_a_title_line_keeps_its_lead_sentence(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "slide.txt").write_text(LANDSLIDE, encoding="utf-8")
    assert texts_of(folder) == {"slide": ("", ["A landslide closed the coast road at Porthallow on Monday.",
                                               "Engineers cleared it by noon."])}
    assert texts_of(folder, title="none") == texts_of(folder)
    assert texts_of(folder, title="first-line") == {  # asked for: the first line is the title
        "slide": ("A landslide closed the coast road at Porthallow on Monday.", ["Engineers cleared it by noon."])}


@pytest.mark.parametrize(("first", "is_title"), [
    ("River floods Dayton", True), ("Is the bridge safe?", False), ("Storm: the day after", True),
    ("He said: \"It's over.\"", False), ("Markets fell, then rose", True), ("Fire at the mill (update)", True),
    ("word " * 31, False), ("", False)])
def test_auto_titles_are_headlines_never_sentences(tmp_path: Path, first: str, is_title: bool) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text(f"{first}\nThe text follows here.\n", encoding="utf-8")
    title, sentences = texts_of(folder)["a"]
    assert (bool(title) and title == first.strip()) is is_title
    assert sentences[-1] == "The text follows here." and (is_title or not first.strip() or
                                                           sentences[0].startswith(first.strip()[:10]))


def test_a_one_line_file_is_a_document(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "scraped.txt").write_text("Storm batters coast. Power lines were down on Sunday.", encoding="utf-8")
    (folder / "headline.txt").write_text("Storm batters coast\n", encoding="utf-8")  # one line, no full stop
    assert texts_of(folder) == {"headline": ("", ["Storm batters coast"]),
                                "scraped": ("", ["Storm batters coast.", "Power lines were down on Sunday."])}
    with pytest.raises(InputError, match=r"headline\.txt:1: document headline has no text after its title .*"
                                         "--title auto reads a file of one line as its text"):
        texts_of(folder, title="first-line")


def test_sub_folders_are_read_and_the_id_is_the_relative_path(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    for sub in ("2024/bbc", "2025", ".git"):
        (folder / sub).mkdir(parents=True)
    (folder / "2024" / "bbc" / "slide.txt").write_text(LANDSLIDE, encoding="utf-8")
    (folder / "2025" / "slide.txt").write_text("Mill fire\n\nA fire broke out at the mill.\n", encoding="utf-8")
    (folder / "ferry.md").write_text("## Ferry strike ends\n\nCrews returned on Tuesday.\n", encoding="utf-8")
    (folder / ".git" / "HEAD.txt").write_text("ref: main\n", encoding="utf-8")
    (folder / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    (folder / "blank.txt").write_text("\n \n", encoding="utf-8")
    (folder / "latin.txt").write_bytes("Été\nUne phrase très courte.\n".encode("latin-1"))
    from corefsearch.datasets.text import TextReport

    report = TextReport()
    with pytest.warns(UserWarning) as caught:
        docs = list(read_text(folder, report=report))
    assert [d.doc_id for d in docs] == ["2024/bbc/slide", "2025/slide", "ferry"]
    assert [(d.title, d.text) for d in docs] == [
        ("", LANDSLIDE.strip()), ("Mill fire", "A fire broke out at the mill."),
        ("Ferry strike ends", "Crews returned on Tuesday.")]
    skipped = sorted(str(w.message) for w in caught)
    assert len(skipped) == 3 and all(": skipped: " in line and "\n" not in line for line in skipped)
    assert any("blank.txt: skipped: empty" in s for s in skipped)
    assert any("latin.txt: skipped: not UTF-8 text" in s for s in skipped)
    assert any("photo.jpg: skipped: not a .txt or .md file" in s for s in skipped)
    assert report.hidden == 1 and report.titled == 2 and report.untitled == 1
    lines = report.lines()
    assert lines[0].startswith("Titles (--title auto): 2 of 3 file(s) open with a headline")
    assert lines[1].startswith("Skipped 3: ") and lines[2] == "Passed over 1 hidden file(s)."


def test_two_files_with_one_id_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("One text.\n", encoding="utf-8")
    (folder / "a.md").write_text("Another text.\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"a\.txt: its document id a is also that of .*a\.md"):
        list(read_text(folder))


def test_one_text_file_is_a_collection_of_one(tmp_path: Path) -> None:
    path = tmp_path / "slide.txt"
    path.write_text(LANDSLIDE, encoding="utf-8")
    assert texts_of(path) == texts_of(_folder_with(tmp_path / "f", path))
    path.write_text(" \n", encoding="utf-8")
    with pytest.raises(InputError, match=r"slide\.txt: holds no text"):
        texts_of(path)


def _folder_with(folder: Path, path: Path) -> Path:
    folder.mkdir()
    (folder / path.name).write_bytes(path.read_bytes())
    return folder


def test_a_csv_with_quoted_commas_and_line_breaks(tmp_path: Path) -> None:
    import csv

    from corefsearch.datasets.text import TextReport

    path = tmp_path / "export.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["ID", "Headline", "Body", "URL"])
        writer.writerow(["a1", "Quake hits Lima", 'A quake, "the big one", hit Lima.\nHundreds fled, the BBC said.',
                         "http://example.org/1"])
        writer.writerow(["a2", "Nothing", "  ", "http://example.org/2"])
        writer.writerow(["a3", "", "Markets fell, then rose.", "http://example.org/3"])
    report = TextReport()
    with pytest.warns(UserWarning, match=r"export\.csv:4 \(a2\): skipped: empty text in column 'Body'"):
        docs = list(read_text(path, report=report))
    assert [(d.doc_id, d.title, [d.text[s:e] for s, e in d.units]) for d in docs] == [
        ("a1", "Quake hits Lima", ['A quake, "the big one", hit Lima.', "Hundreds fled, the BBC said."]),
        ("a3", "", ["Markets fell, then rose."])]
    assert report.columns == {"text": "Body", "id": "ID", "title": "Headline"}
    assert report.lines()[0] == "Columns: text from 'Body', id from 'ID', title from 'Headline'."
    tsv = tmp_path / "export.tsv"
    tsv.write_text("body\tsource\nA storm hit Lima.\tAP\nRain fell, and fell.\tAFP\n", encoding="utf-8")
    assert [(d.doc_id, d.title, d.text) for d in read_text(tsv)] == [
        ("export-1", "", "A storm hit Lima."), ("export-2", "", "Rain fell, and fell.")]
    from corefsearch.datasets.text import TextOptions

    named = list(read_text(tsv, options=TextOptions(text_field="body", id_field="source", title_field="source")))
    assert [(d.doc_id, d.title) for d in named] == [("AP", "AP"), ("AFP", "AFP")]


def test_a_jsonl_table_of_common_exports(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "beir.jsonl", [{"_id": "d1", "title": "Quake", "text": "A quake hit."},
                                                 {"_id": "d2", "text": "Rain fell."}])
    assert [(d.doc_id, d.title, d.text) for d in read_text(path)] == [("d1", "Quake", "A quake hit."),
                                                                      ("d2", "", "Rain fell.")]
    pyserini = write_jsonl(tmp_path / "docs.jsonl", [{"id": "p1", "contents": "A quake hit."}])
    assert [(d.doc_id, d.text) for d in read_text(pyserini)] == [("p1", "A quake hit.")]


@pytest.mark.parametrize(("content", "options", "message"), [
    ("id,text\na,One.\na,Two.\n", {}, r"t\.csv:3: duplicate id a \(first on line 2; column 'id'\)"),
    ("id,words\na,One.\n", {}, r"t\.csv:2: no text column: none of text, contents.* name it with --text-field"),
    ("id,text\na,One.\n", {"text_field": "body"}, r"t\.csv:2: has no column 'body' \(--text-field\)"),
    ("id,text\na,One.,extra\n", {}, r"t\.csv:2: 3 cells for 2 columns"),
    ("\n", {}, r"t\.csv: no header row"),
    ("id,text\n", {}, r"t\.csv: holds no row with text"),
])
def test_table_errors_name_the_file_and_line(tmp_path: Path, content: str, options: dict, message: str) -> None:
    from corefsearch.datasets.text import TextOptions

    path = tmp_path / "t.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        list(read_text(path, options=TextOptions(**options)))


def test_options_that_do_not_apply_are_refused(tmp_path: Path, txt_folder: Path) -> None:
    from corefsearch.datasets.text import TextOptions

    table = write_jsonl(tmp_path / "t.jsonl", [{"id": "a", "text": "One."}])
    with pytest.raises(InputError, match="--title applies to text files"):
        list(read_text(table, options=TextOptions(title="none")))
    with pytest.raises(InputError, match="name a table's columns; .* is a folder of text files"):
        list(read_text(txt_folder, options=TextOptions(text_field="body")))
    with pytest.raises(InputError, match="--title must be one of auto, first-line, none"):
        list(read_text(txt_folder, options=TextOptions(title="second-line")))
    with pytest.raises(InputError, match="apply to --format text only"):
        read_source("generic", tmp_path, SourceOptions(title="none"))


def test_the_same_text_in_four_layouts_gives_the_same_passages(tmp_path: Path) -> None:
    """Title lines; no title lines; one line per document; nested folders: the passages' texts are the same."""
    documents = {"fire-1": ("Fire destroys warehouse", "A fire destroyed the warehouse on Tuesday. Nobody was hurt."),
                 "fire-2": ("Blaze in Dunmore", "The blaze was put out by dawn.\nInvestigators came.")}
    layouts = {name: tmp_path / name for name in ("titled", "untitled", "one-line", "nested")}
    for folder in layouts.values():
        folder.mkdir()
    for doc_id, (title, text) in documents.items():
        (layouts["titled"] / f"{doc_id}.txt").write_text(f"{title}\n{text}\n", encoding="utf-8")
        (layouts["untitled"] / f"{doc_id}.txt").write_text(f"{text}\n", encoding="utf-8")
        (layouts["one-line"] / f"{doc_id}.txt").write_text(text.replace("\n", " "), encoding="utf-8")
        (layouts["nested"] / "2024" / doc_id).mkdir(parents=True)
        (layouts["nested"] / "2024" / doc_id / "story.txt").write_text(f"{title}\n{text}\n", encoding="utf-8")
    read = {name: list(read_text(folder)) for name, folder in layouts.items()}
    sentences = {name: [[d.text[s:e] for s, e in d.units] for d in docs] for name, docs in read.items()}
    assert sentences["titled"] == sentences["untitled"] == sentences["nested"] == sentences["one-line"]
    assert [d.title for d in read["titled"]] == [d.title for d in read["nested"]] == [t for t, _ in documents.values()]
    assert [d.doc_id for d in read["nested"]] == ["2024/fire-1/story", "2024/fire-2/story"]


def test_the_command_line_says_how_titles_were_taken(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "slide.txt").write_text(LANDSLIDE, encoding="utf-8")
    (folder / "fire.txt").write_text("Mill fire\nA fire broke out.\n", encoding="utf-8")
    result = runner.invoke(app, ["build-dataset", str(folder), "--format", "text", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert ("Titles (--title auto): 1 of 2 file(s) open with a headline, taken as the title; 1 read whole, every "
            "line text (1 whose line 1 is a sentence)") in " ".join(result.output.split())
    manifest = Dataset(tmp_path / "out").manifest["options"]["source"]
    assert manifest["title"] == "auto" and manifest["read"] == {
        "layout": "files", "title": "auto", "titled": 1, "untitled": 1, "skipped": 0, "columns": None}
