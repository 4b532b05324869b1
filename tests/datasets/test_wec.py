"""WEC-Eng converter, on the vendored validated Dev split and on tiny hand-written files."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from corefsearch.base.errors import InputError
from corefsearch.datasets.wec import read_wec

WEC_DEV = Path(__file__).resolve().parents[2] / "data" / "wec-eng" / "Dev_Event_gold_mentions_validated.json.gz"


def squash(text: str) -> str:
    return "".join(text.split())


@pytest.fixture(scope="module")
def dev_documents() -> list:
    return list(read_wec(WEC_DEV))


@pytest.fixture(scope="module")
def dev_records() -> dict[str, dict[str, Any]]:
    # The test may load the small Dev file whole, to check the converter against it.
    with gzip.open(WEC_DEV, "rt", encoding="utf-8") as handle:
        return {record["mention_id"]: record for record in json.load(handle)}


def test_dev_counts(dev_documents: list) -> None:
    mentions = [m for doc in dev_documents for m in doc.mentions]
    assert len(mentions) == 1250
    assert len({m.cluster_id for m in mentions}) == 233
    assert len(dev_documents) == 1194
    assert len({doc.doc_id for doc in dev_documents}) == 1194
    assert sum(len(doc.units) for doc in dev_documents) == 1247
    assert len({m.mention_id for m in mentions}) == 1250


def test_dev_mentions_match_tokens_str(dev_documents: list, dev_records: dict[str, dict[str, Any]]) -> None:
    for doc in dev_documents:
        doc.validate()
        assert doc.title == doc.doc_id
        assert doc.split is None
        for mention in doc.mentions:
            record = dev_records[mention.mention_id]
            assert mention.doc_id == doc.doc_id == record["doc_id"]
            assert mention.cluster_id == str(record["coref_chain"])
            assert mention.type == "event"
            assert squash(doc.text[mention.start:mention.end]) == squash(record["tokens_str"])


def test_dev_units_are_the_contexts(dev_documents: list, dev_records: dict[str, dict[str, Any]]) -> None:
    clusters_units: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for doc in dev_documents:
        # Units tile the text, separated by single newlines.
        assert "\n".join(doc.text[start:end] for start, end in doc.units) == doc.text
        for mention in doc.mentions:
            inside = [i for i, (start, end) in enumerate(doc.units)
                      if start <= mention.start < mention.end <= end]
            assert len(inside) == 1
            start, end = doc.units[inside[0]]
            assert doc.text[start:end] == " ".join(dev_records[mention.mention_id]["mention_context"])
            clusters_units[mention.cluster_id].add((doc.doc_id, inside[0]))
    assert sum(len(units) >= 2 for units in clusters_units.values()) == 216


def test_first_record() -> None:
    doc = next(iter(read_wec(WEC_DEV)))
    assert doc.doc_id == "House of Pain"
    mention = doc.mentions[0]
    assert (mention.mention_id, mention.cluster_id) == ("108172", "2293469")
    assert doc.text[mention.start:mention.end] == "Family Values Tour 1998"


# --- small files --------------------------------------------------------------------------------


def record(mention_id: str, article: str, context: list[str], numbers: list[int], tokens_str: str,
           chain: int = 7) -> dict[str, Any]:
    return {"coref_chain": chain, "coref_link": "x", "doc_id": article, "mention_context": context,
            "tokens_number": numbers, "tokens_str": tokens_str, "mention_id": mention_id, "mention_head": "x"}


CONTEXT_A = ["The", "1913", "Dayton", ",", "Ohio", "flood", "killed", "hundreds", "."]
CONTEXT_B = ["After", "the", "flood", ",", "the", "city", "built", "levees", "."]


def write_gz(path: Path, records: list[Any]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(records, handle)
    return path


def test_small_file_groups_contexts_by_article(tmp_path: Path) -> None:
    path = write_gz(tmp_path / "wec.json.gz", [
        record("m1", "Dayton", CONTEXT_A, [2, 3, 4, 5], "Dayton, Ohio flood"),
        record("m 2", "Levee", CONTEXT_B, [2], "flood", chain=7),
        record("m3", "Dayton", CONTEXT_B, [2], "flood", chain=8),
        record("m4", "Dayton", CONTEXT_A, [5], "flood"),
    ])
    docs = list(read_wec(path))
    assert [d.doc_id for d in docs] == ["Dayton", "Levee"]
    dayton = docs[0]
    assert dayton.text == " ".join(CONTEXT_A) + "\n" + " ".join(CONTEXT_B)
    assert [dayton.text[s:e] for s, e in dayton.units] == [" ".join(CONTEXT_A), " ".join(CONTEXT_B)]
    assert [(m.mention_id, dayton.text[m.start:m.end], m.cluster_id) for m in dayton.mentions] == [
        ("m1", "Dayton , Ohio flood", "7"), ("m3", "flood", "8"), ("m4", "flood", "7")]
    assert dayton.mentions[1].start > dayton.units[1][0]
    assert docs[1].mentions[0].mention_id == "m_2"  # safe_id


def test_plain_json_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "wec.json"
    path.write_text(json.dumps([record("m1", "Dayton", CONTEXT_A, [5], "flood")]), encoding="utf-8")
    assert [d.doc_id for d in read_wec(path)] == ["Dayton"]


def test_mismatching_tokens_str_names_the_mention(tmp_path: Path) -> None:
    path = write_gz(tmp_path / "bad.json.gz", [
        record("m1", "Dayton", CONTEXT_A, [5], "flood"),
        record("m2", "Dayton", CONTEXT_A, [6, 7], "the flood"),
    ])
    with pytest.raises(InputError, match=r"record 1: mention m2: .*'killed hundreds'.*'the flood'"):
        list(read_wec(path))


def test_missing_field_names_record_and_field(tmp_path: Path) -> None:
    bad = record("m2", "Dayton", CONTEXT_A, [5], "flood")
    del bad["tokens_number"]
    path = write_gz(tmp_path / "bad.json.gz", [record("m1", "Dayton", CONTEXT_A, [5], "flood"), bad])
    with pytest.raises(InputError, match=r"record 1 lacks the field 'tokens_number'"):
        list(read_wec(path))


@pytest.mark.parametrize(("numbers", "message"), [([9], "outside its mention_context"),
                                                  ([], "non-empty list of integers")])
def test_bad_token_numbers(tmp_path: Path, numbers: list[int], message: str) -> None:
    path = write_gz(tmp_path / "bad.json.gz", [record("m1", "Dayton", CONTEXT_A, numbers, "flood")])
    with pytest.raises(InputError, match=message):
        list(read_wec(path))


def test_duplicate_mention_id(tmp_path: Path) -> None:
    path = write_gz(tmp_path / "dup.json.gz", [record("m1", "Dayton", CONTEXT_A, [5], "flood"),
                                               record("m1", "Levee", CONTEXT_B, [2], "flood")])
    with pytest.raises(InputError, match="mention id m1 repeats record 0"):
        list(read_wec(path))


def test_truncated_json(tmp_path: Path) -> None:
    path = tmp_path / "cut.json.gz"
    text = json.dumps([record("m1", "Dayton", CONTEXT_A, [5], "flood")] * 2)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(text[: len(text) // 2])
    with pytest.raises(InputError, match="invalid JSON"):
        list(read_wec(path))


def test_not_a_list(tmp_path: Path) -> None:
    path = tmp_path / "obj.json"
    path.write_text(json.dumps([["not", "an", "object"]]), encoding="utf-8")
    with pytest.raises(InputError, match="record 0 is a list"):
        list(read_wec(path))
