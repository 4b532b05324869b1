"""Generic corpus.jsonl + mentions.jsonl converter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corefsearch.base.errors import InputError
from corefsearch.datasets.generic import read_distractors, read_generic

FLOOD_1 = ("Torrential rain swept across Ohio on Tuesday. The Great Miami River overflowed its levees "
           "in Dayton, flooding the downtown area. Officials said hundreds of residents were evacuated.")
FLOOD_2 = ("Recovery began on Friday in Dayton. The flood, the worst the city has seen in a century, "
           "left thousands without power.")
QUAKE = ("A magnitude 6.4 earthquake struck northern California early Sunday. "
         "No deaths were reported after the quake, according to the county sheriff.")


def span(text: str, phrase: str) -> tuple[int, int]:
    start = text.index(phrase)
    return start, start + len(phrase)


def write_jsonl(path: Path, records: list[Any]) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records),
                    encoding="utf-8")


def corpus_records() -> list[dict[str, Any]]:
    return [{"doc_id": "news-1", "title": "Dayton floods", "text": FLOOD_1},
            {"doc_id": "news-2", "text": FLOOD_2},
            {"doc_id": "news-3", "title": "California quake", "text": QUAKE}]


def mention_records() -> list[dict[str, Any]]:
    records = []
    for mention_id, doc_id, text, phrase, cluster, kind in [
        ("m1", "news-1", FLOOD_1, "overflowed", "dayton-flood", "event"),
        ("m2", "news-1", FLOOD_1, "flooding", "dayton-flood", "event"),
        ("m3", "news-2", FLOOD_2, "flood", "dayton-flood", None),
        ("m4", "news-1", FLOOD_1, "Dayton", "dayton", "entity"),
        ("m5", "news-3", QUAKE, "earthquake", "ca-quake", "event"),
        ("m6", "news-3", QUAKE, "quake,", "ca-quake", "event"),
    ]:
        start, end = span(text, phrase)
        record: dict[str, Any] = {"mention_id": mention_id, "doc_id": doc_id, "start": start, "end": end,
                                  "cluster_id": cluster}
        if kind:
            record["type"] = kind
        records.append(record)
    records[-1]["end"] -= 1  # "quake", without the comma
    return records


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_jsonl(tmp_path / "corpus.jsonl", corpus_records())
    write_jsonl(tmp_path / "mentions.jsonl", mention_records())
    return tmp_path


def test_sentence_units(folder: Path) -> None:
    docs = list(read_generic(folder))
    assert [d.doc_id for d in docs] == ["news-1", "news-2", "news-3"]
    news1, news2, news3 = docs
    assert news1.title == "Dayton floods" and news2.title == ""
    assert [news1.text[s:e] for s, e in news1.units] == [
        "Torrential rain swept across Ohio on Tuesday.",
        "The Great Miami River overflowed its levees in Dayton, flooding the downtown area.",
        "Officials said hundreds of residents were evacuated."]
    assert len(news2.units) == 2 and len(news3.units) == 2
    for doc in docs:
        doc.validate()
        assert doc.split is None
    assert [(m.mention_id, news1.text[m.start:m.end], m.type) for m in news1.mentions] == [
        ("m1", "overflowed", "event"), ("m2", "flooding", "event"), ("m4", "Dayton", "entity")]
    assert [(news2.text[m.start:m.end], m.type, m.cluster_id) for m in news2.mentions] == [
        ("flood", "event", "dayton-flood")]
    assert [news3.text[m.start:m.end] for m in news3.mentions] == ["earthquake", "quake"]


def test_document_units(folder: Path) -> None:
    docs = list(read_generic(folder, passage="document"))
    assert [d.units for d in docs] == [[(0, len(d.text))] for d in docs]
    assert sum(len(d.mentions) for d in docs) == 6


def test_many_documents_are_chunked(tmp_path: Path) -> None:
    # More documents than one spaCy chunk, to cover the chunk boundary.
    write_jsonl(tmp_path / "corpus.jsonl",
                [{"doc_id": f"d{i}", "text": f"Story {i} begins. It ends here."} for i in range(600)])
    write_jsonl(tmp_path / "mentions.jsonl",
                [{"mention_id": "m", "doc_id": "d599", "start": 0, "end": 5, "cluster_id": 1}])
    docs = list(read_generic(tmp_path))
    assert len(docs) == 600 and all(len(d.units) == 2 for d in docs)
    assert docs[-1].mentions[0].cluster_id == "1"


def test_distractors(folder: Path) -> None:
    docs = list(read_distractors(folder / "corpus.jsonl"))
    assert [(d.doc_id, d.units, d.mentions) for d in docs] == [
        (d.doc_id, [(0, len(d.text))], []) for d in docs]
    assert len(docs) == 3


def test_unknown_passage_mode(folder: Path) -> None:
    with pytest.raises(InputError, match="passage must be one of"):
        list(read_generic(folder, passage="paragraph"))


def corpus_with(line: int, record: Any) -> list[Any]:
    records: list[Any] = corpus_records()
    records.insert(line - 1, record)
    return records


def mentions_with(line: int, record: Any) -> list[Any]:
    records: list[Any] = mention_records()
    records.insert(line - 1, record)
    return records


GOOD_MENTION = {"mention_id": "mx", "doc_id": "news-2", "start": 0, "end": 8, "cluster_id": "c"}

CORPUS_ERRORS = [
    ('{"doc_id": "news-9", "text": "Broken', "invalid JSON"),
    ({"title": "No id", "text": "Some text."}, "lacks the field 'doc_id'"),
    ({"doc_id": "news-9", "title": "No text"}, "news-9 lacks the field 'text'"),
    ({"doc_id": "news-9", "text": ["not", "a", "string"]}, "news-9: field 'text' must be a string"),
    ({"doc_id": "news-9", "title": 5, "text": "Fine."}, "news-9: field 'title' must be a string"),
    ({"doc_id": "news-1", "text": "Again."}, "duplicate doc_id news-1"),
]


@pytest.mark.parametrize(("record", "message"), CORPUS_ERRORS)
def test_corpus_errors(folder: Path, record: Any, message: str) -> None:
    write_jsonl(folder / "corpus.jsonl", corpus_with(3, record))
    with pytest.raises(InputError) as err:
        list(read_generic(folder))
    assert "corpus.jsonl:3" in str(err.value)
    assert message in str(err.value)


MENTION_ERRORS = [
    ('{"mention_id": "mx", ', "invalid JSON"),
    ({k: v for k, v in GOOD_MENTION.items() if k != "mention_id"}, "lacks the field 'mention_id'"),
    ({k: v for k, v in GOOD_MENTION.items() if k != "cluster_id"}, "lacks the field 'cluster_id'"),
    ({k: v for k, v in GOOD_MENTION.items() if k != "end"}, "mention mx lacks the field 'end'"),
    (GOOD_MENTION | {"start": "0"}, "mention mx: field 'start' must be an integer"),
    (GOOD_MENTION | {"doc_id": None}, "field 'doc_id' must be a non-empty string or integer"),
    (GOOD_MENTION | {"type": "state"}, "mention mx: type must be one of"),
    (GOOD_MENTION | {"start": 8, "end": 8}, "mention mx: offsets [8, 8) are not a non-empty span"),
    (GOOD_MENTION | {"mention_id": "m2"}, "duplicate mention_id m2"),
    (GOOD_MENTION | {"doc_id": "news-7"}, "mention mx names doc_id news-7"),
    (GOOD_MENTION | {"start": 100, "end": 500}, "mention mx: offsets [100, 500) do not fit document news-2"),
    (GOOD_MENTION | {"start": 8, "end": 9}, "mention mx: offsets [8, 9) cover only white space"),
]


@pytest.mark.parametrize(("record", "message"), MENTION_ERRORS)
def test_mention_errors(folder: Path, record: Any, message: str) -> None:
    assert FLOOD_2[8] == " "
    write_jsonl(folder / "mentions.jsonl", mentions_with(4, record))
    with pytest.raises(InputError) as err:
        list(read_generic(folder))
    assert "mentions.jsonl:4" in str(err.value)
    assert message in str(err.value)


def test_distractor_errors(folder: Path) -> None:
    write_jsonl(folder / "corpus.jsonl", corpus_with(2, {"doc_id": "news-1", "text": "Again."}))
    with pytest.raises(InputError, match=r"corpus\.jsonl:2: duplicate doc_id news-1"):
        list(read_distractors(folder / "corpus.jsonl"))
