"""The CDCR-JSON reader (``{split}_text.txt`` + ``{split}_{kind}_gold_mentions.json``) and MEANTIME."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.datasets.cdcr_json import CdcrReport, read_cdcr_json, read_statistics, statistics_rows

MEANTIME = Path(__file__).resolve().parents[2] / "data" / "meantime"

# Two documents of one topic; token ids count through each document (as in MEANTIME).
TEXT = {
    "train": [("d1", 0, ["Police", "arrested", "the", "mayor", "of", "Zürich", "."]),
              ("d1", 1, ["The", "arrest", "came", "late", "."]),
              ("d2", 0, ["The", "mayor", "was", "detained", "on", "Friday"])],
    "test": [("d3", 0, ["Storm", "hits", "coast", "."])],
}


def _text_lines(split: str) -> str:
    lines: list[str] = []
    last_doc, following = None, 0
    for doc, sentence, tokens in TEXT[split]:
        first = following if doc == last_doc else 0
        for offset, token in enumerate(tokens):
            lines.append(f"{doc}\t{sentence}\t{first + offset}\t{token}")
        following, last_doc = first + len(tokens), doc
        lines.append("")
    return "\n".join(lines) + "\n"


def _event(doc: str, sent: int, ids: list[int], chain: Any, m_id: str, **extra: Any) -> dict[str, Any]:
    return {"doc_id": doc, "sent_id": str(sent), "tokens_ids": ids, "coref_chain": chain, "m_id": m_id,
            "topic": "t1", "event_entity": "event", **extra}


def _write(folder: Path, events: dict[str, list[dict[str, Any]]] | None = None,
           entities: dict[str, list[dict[str, Any]]] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    events = events if events is not None else {
        "train": [_event("d1", 0, [1], "ARREST", "1"), _event("d1", 1, [8], "ARREST", "2"),
                  _event("d2", 0, [3], "ARREST", "3"), _event("d1", 1, [9], "Singleton_9_d1", "4")],
        "test": [_event("d3", 0, [1], "HIT", "1")]}
    entities = entities if entities is not None else {
        "train": [{**_event("d1", 0, [2, 3, 4, 5], "MAYOR", "10"), "event_entity": "entity"},  # multi-token
                  {**_event("d2", 0, [0, 1], "MAYOR", "11"), "event_entity": "entity"},
                  {**_event("d1", 0, [5], "ZURICH", "12"), "event_entity": "entity"}],  # non-ASCII, nested
        "test": [{**_event("d3", 0, [2], "COAST", "2"), "event_entity": "entity"}]}
    for split in TEXT:
        (folder / f"{split}_text.txt").write_text(_text_lines(split), encoding="utf-8")
        (folder / f"{split}_event_gold_mentions.json").write_text(json.dumps(events.get(split, []), indent=1),
                                                                   encoding="utf-8")
        (folder / f"{split}_entity_gold_mentions.json").write_text(json.dumps(entities.get(split, [])),
                                                                    encoding="utf-8")
    return folder


def _read(folder: Path, **kwargs: Any) -> dict[str, Any]:
    return {doc.doc_id: doc for doc in read_cdcr_json(folder, **kwargs)}


def test_text_is_rebuilt_from_tokens_and_offsets_map_back_to_them(tmp_path: Path) -> None:
    docs = _read(_write(tmp_path / "c"), splits=("train", "test"), mention_type="all")
    d1 = docs["d1"]
    assert d1.text == "Police arrested the mayor of Zürich .\nThe arrest came late ."
    assert d1.title == "Police arrested the mayor of Zürich ."
    assert d1.units == [(0, 37), (38, 60)]
    assert d1.split == "train" and d1.topic == "t1" and docs["d3"].split == "test"
    by_id = {m.mention_id: (d1.text[m.start:m.end], m.cluster_id, m.type) for m in d1.mentions}
    assert by_id == {"d1_event_1": ("arrested", "ARREST", "event"), "d1_event_2": ("arrest", "ARREST", "event"),
                     "d1_event_4": ("came", "Singleton_9_d1", "event"),
                     "d1_entity_10": ("the mayor of Zürich", "MAYOR", "entity"),
                     "d1_entity_12": ("Zürich", "ZURICH", "entity")}


def test_the_last_token_of_a_document_and_token_ids_that_restart_in_each_sentence(tmp_path: Path) -> None:
    events = {"train": [_event("d1", 1, [1], "E", "1"), _event("d1", 0, [0], "E", "2")], "test": []}
    folder = _write(tmp_path / "c", events=events, entities={})
    # Token ids restarting in every sentence (the ECB+ files of the format) read the same way.
    (folder / "train_text.txt").write_text("d1\t0\t0\tA\nd1\t0\t1\tb\nd1\t1\t0\tC\nd1\t1\t1\tend\n"
                                           "d2\t0\t0\tx\n", encoding="utf-8")
    docs = _read(folder, splits=("train",))
    d1 = docs["d1"]
    assert [d1.text[m.start:m.end] for m in d1.mentions] == ["A", "end"]
    assert d1.mentions[-1].end == len(d1.text)


def test_mention_type_picks_the_files_read(tmp_path: Path) -> None:
    folder = _write(tmp_path / "c")
    events = _read(folder, splits=("train",))
    assert {m.type for d in events.values() for m in d.mentions} == {"event"}
    (folder / "train_event_gold_mentions.json").unlink()
    entities = _read(folder, splits=("train",), mention_type="entity")  # the event file is not needed
    assert {m.type for d in entities.values() for m in d.mentions} == {"entity"}


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: (f / "dev_text.txt").unlink(missing_ok=True), "dev_text.txt: no such file; split dev"),
    (lambda f: (f / "train_text.txt").write_text("d1\t0\t0\n", encoding="utf-8"),
     "train_text.txt:1: expected 4 tab-separated columns"),
    (lambda f: (f / "train_text.txt").write_text("d1\t0\t1\tA\nd1\t0\t0\tB\n", encoding="utf-8"),
     "train_text.txt:2: token id 0 of document d1 is out of order"),
    (lambda f: (f / "train_text.txt").write_text("d1\t0\tx\tA\n", encoding="utf-8"),
     "train_text.txt:1: token id must be a non-negative integer"),
    (lambda f: (f / "train_text.txt").write_text("d1\t0\t0\tA\nd2\t0\t0\tB\nd1\t1\t1\tC\n", encoding="utf-8"),
     "train_text.txt:3: document d1 comes back"),
    (lambda f: (f / "train_text.txt").write_text("d1\t0\t0\tA\nd1\t1\t1\tB\nd1\t0\t2\tC\n", encoding="utf-8"),
     "train_text.txt:3: sentence 0 of document d1 comes back"),
])
def test_malformed_text_names_the_file_and_line(tmp_path: Path, change: Any, message: str) -> None:
    folder = _write(tmp_path / "c")
    change(folder)
    splits = ("train", "dev", "test") if "dev_" in message else ("train",)
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        _read(folder, splits=splits)


@pytest.mark.parametrize(("record", "message"), [
    (_event("d1", 0, [40], "E", "1"), r"record 0: mention 1 of document d1: its tokens \[40\] are not in "
                                      "sentence 0 of document d1"),
    (_event("d9", 0, [0], "E", "1"), "record 0: mention 1 of document d9: document d9 is not in"),
    (_event("d1", 7, [0], "E", "1"), "sentence 7 is not in document d1"),
    (_event("d1", 0, [0], ["E"], "1"), "field 'coref_chain' must be a non-empty string or number"),
    (_event("d1", 0, [0], None, "1"), "field 'coref_chain' must be a non-empty string or number"),
    (_event("d1", 0, [], "E", "1"), "field 'tokens_ids' must be a non-empty list of integers"),
    (_event("d1", 0, ["0"], "E", "1"), "field 'tokens_ids' must be a non-empty list of integers"),
    (_event("d1", 0, [0], "E", "1", event_entity="entity"), "field 'event_entity' is 'entity' in a file of event"),
    ({"doc_id": "d1", "tokens_ids": [0], "coref_chain": "E"},
     "record 0: mention 0 of document d1 lacks the field 'sent_id'"),
])
def test_malformed_mention_records_name_the_file_and_record(tmp_path: Path, record: dict[str, Any],
                                                            message: str) -> None:
    folder = _write(tmp_path / "c", events={"train": [record]})
    with pytest.raises(InputError, match=message):
        _read(folder, splits=("train",))


def test_a_mention_with_a_token_outside_its_sentence_keeps_the_rest_and_warns(tmp_path: Path) -> None:
    folder = _write(tmp_path / "c", events={"train": [_event("d1", 0, [1, 8], "E", "1"),
                                                      _event("d1", 1, [8], "E", "2")]})
    with pytest.warns(UserWarning, match=r"1 mention\(s\) name tokens outside their own sentence.*record 0"):
        docs = _read(folder, splits=("train",))
    mention = docs["d1"].mentions[0]
    assert docs["d1"].text[mention.start:mention.end] == "arrested"


def test_a_duplicate_mention_id_is_refused(tmp_path: Path) -> None:
    folder = _write(tmp_path / "c", events={"train": [_event("d1", 0, [1], "E", "1"), _event("d1", 1, [8], "E", "1")]})
    with pytest.raises(InputError, match="record 1: mention 1 of document d1: m_id 1 occurs twice"):
        _read(folder, splits=("train",))


def test_meantime_counts_equal_its_statistics_file() -> None:
    report = CdcrReport()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        documents = list(read_cdcr_json(MEANTIME, mention_type="all", report=report))
    assert len(documents) == 120
    assert [str(w.message).split(":")[0] for w in caught] == [
        "1 mention(s) name tokens outside their own sentence, and keep only those in it"]
    rows = statistics_rows(MEANTIME, report)
    published = read_statistics(MEANTIME / "statistics")
    assert len(rows) == 4 * 10  # train, dev, test and all; every quantity of the file
    assert {(split, quantity) for split, quantity, _, _ in rows} == {
        (split, quantity) for split, counts in published.items() for quantity in counts}
    assert all(read == count for _, _, read, count in rows)
    assert published["all"]["Event mentions"] == 2107 and published["all"]["Entity mentions"] == 2866
    assert sum(len(d.mentions) for d in documents) == 2107 + 2866


def test_build_dataset_reads_meantime_and_reports_its_counts(tmp_path: Path) -> None:
    out = tmp_path / "mt"
    result = CliRunner().invoke(app, ["build-dataset", str(MEANTIME), "--format", "cdcr-json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "20 of 20 counts as the corpus's statistics file gives them" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["documents"] == 120 and manifest["counts"]["mentions"] == 2107
    queries = [json.loads(line) for line in (out / "queries" / "test.jsonl").read_text().splitlines()]
    assert queries and all(q["text"][q["start"]:q["end"]] == q["mention"] for q in queries)
    topics = {json.loads(line).get("topic") for line in (out / "passages.jsonl").read_text().splitlines()}
    assert topics == {"apple", "airbus", "gm", "stock"}


def test_build_dataset_names_a_missing_split_file(tmp_path: Path) -> None:
    folder = _write(tmp_path / "c")
    result = CliRunner().invoke(app, ["build-dataset", str(folder), "--format", "cdcr-json",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert "dev_text.txt: no such file" in result.output
    assert not (tmp_path / "out").exists()
