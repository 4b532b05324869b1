"""CoreSearch release converter, on small files written to the release schema.

The real release (Hugging Face biu-nlp/CoreSearch) cannot be downloaded here; these files
follow its documented record layout: inclusive word indices, distractors with goldChain -1.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.datasets.coresearch import read_coresearch

FLOOD = ["Heavy", "rain", "caused", "the", "Great", "Dayton", "Flood", "of", "1913", "."]
LEVEE = ["After", "the", "1913", "flood", ",", "Dayton", "built", "levees", "."]
QUAKE = ["The", "1906", "San", "Francisco", "earthquake", "destroyed", "much", "of", "the", "city", "."]
RIVER = ["The", "Great", "Miami", "River", "runs", "through", "Dayton", "."]


def mention(record_id: str, chain: int, context: list[str], start: int, end: int,
            **extra: Any) -> dict[str, Any]:
    return {"id": record_id, "goldChain": chain, "mention": " ".join(context[start:end + 1]),
            "startIndex": start, "endIndex": end, "context": context, "mention_head": context[end], **extra}


def distractor(record_id: str, context: list[str]) -> dict[str, Any]:
    return {"id": record_id, "goldChain": -1, "mention": "NA", "startIndex": -1, "endIndex": -1,
            "context": context}


def write(path: Path, records: list[Any]) -> None:
    path.write_text(json.dumps(records), encoding="utf-8")


def write_split(folder: Path, split: str, passages: list[Any], queries: list[Any],
                clusters: list[Any] | None = None) -> None:
    write(folder / f"{split}_all_passages.json", passages)
    write(folder / f"{split}_queries.json", queries)
    if clusters is None:
        clusters = [
            {"clusterId": 1913, "clusterTitle": "Great Dayton Flood", "mentionIds": ["p1", "p2", "q1"]},
            {"clusterId": 1906, "clusterTitle": "1906 San Francisco earthquake", "mentionIds": ["q9"]},
        ]
    write(folder / f"{split}_gold_clusters.json", clusters)


@pytest.fixture
def release(tmp_path: Path) -> Path:
    folder = tmp_path / "release"
    folder.mkdir()
    write_split(
        folder, "Dev",
        passages=[
            mention("p1", 1913, FLOOD, 4, 8, title="Great Dayton Flood"),  # "Great Dayton Flood of 1913"
            mention("p2", 1913, LEVEE, 2, 3),  # "1913 flood": end index is inclusive
            distractor("d1", RIVER),
        ],
        queries=[
            mention("p1", 1913, FLOOD, 4, 8),  # the same mention as passage p1
            mention("q9", 1906, QUAKE, 1, 4),  # a query that is not among the passages
        ])
    write_split(folder, "Test", passages=[mention("t1", 1913, LEVEE, 3, 3)], queries=[])
    return folder


def test_documents(release: Path) -> None:
    docs = list(read_coresearch(release, splits=("dev",)))
    assert [d.doc_id for d in docs] == ["p1", "p2", "d1", "q9"]
    by_id = {d.doc_id: d for d in docs}
    for doc in docs:
        doc.validate()
        assert doc.split == "dev"
        assert doc.units == [(0, len(doc.text))]

    p1 = by_id["p1"]
    assert p1.text == " ".join(FLOOD)
    assert p1.title == "Great Dayton Flood"
    [m] = p1.mentions
    assert (m.mention_id, m.doc_id, m.cluster_id, m.type) == ("p1", "p1", "1913", "event")
    assert p1.text[m.start:m.end] == "Great Dayton Flood of 1913"

    [m] = by_id["p2"].mentions
    assert by_id["p2"].text[m.start:m.end] == "1913 flood"
    assert by_id["p2"].title == ""

    assert by_id["d1"].mentions == []
    assert by_id["d1"].text == " ".join(RIVER)

    [m] = by_id["q9"].mentions
    assert (by_id["q9"].text[m.start:m.end], m.cluster_id) == ("1906 San Francisco earthquake", "1906")


def test_splits_and_default(release: Path) -> None:
    docs = list(read_coresearch(release, splits=("dev", "test")))
    assert [(d.doc_id, d.split) for d in docs][-1] == ("t1", "test")
    [m] = docs[-1].mentions
    assert docs[-1].text[m.start:m.end] == "flood"
    # Train is absent: the default asks for it, and the error lists what is there.
    with pytest.raises(InputError, match=r"no CoreSearch files for split 'train'.*Dev_all_passages\.json"):
        list(read_coresearch(release))


def test_gzipped_files_and_white_space_in_mention(tmp_path: Path) -> None:
    context = ["Miss", "America", "'s", "Outstanding", "Teen", "2019"]
    record = mention("p1", 1913, context, 0, 5)
    record["mention"] = "Miss America's Outstanding Teen 2019"  # tokenised differently: still equal
    for kind, records in (("all_passages", [record]), ("queries", []),
                          ("gold_clusters", [{"clusterId": "1913", "clusterTitle": "x", "mentionIds": []}])):
        with gzip.open(tmp_path / f"Train_{kind}.json.gz", "wt", encoding="utf-8") as handle:
            json.dump(records, handle)
    [doc] = read_coresearch(tmp_path, splits=["train"])
    assert doc.split == "train" and len(doc.mentions) == 1


def test_mismatching_mention_names_file_and_id(release: Path) -> None:
    bad = mention("p7", 1913, FLOOD, 4, 6)
    bad["mention"] = "Great Dayton Flood of 1913"  # endIndex read as exclusive would give this mismatch
    write(release / "Dev_all_passages.json", [mention("p1", 1913, FLOOD, 4, 8), bad])
    with pytest.raises(InputError, match=r"Dev_all_passages\.json: record p7: .*'Great Dayton Flood'"):
        list(read_coresearch(release, splits=["dev"]))


def test_unknown_cluster(release: Path) -> None:
    write(release / "Dev_queries.json", [mention("q5", 1999, QUAKE, 1, 4)])
    with pytest.raises(InputError, match=r"Dev_queries\.json: record q5: goldChain 1999 is not a cluster"):
        list(read_coresearch(release, splits=["dev"]))


def test_missing_file(release: Path) -> None:
    (release / "Dev_gold_clusters.json").unlink()
    with pytest.raises(InputError, match=r"split 'dev' lacks Dev_gold_clusters\.json"):
        list(read_coresearch(release, splits=["dev"]))


def test_missing_field_and_bad_indices(release: Path) -> None:
    record = mention("p3", 1913, FLOOD, 4, 8)
    del record["context"]
    write(release / "Dev_all_passages.json", [record])
    with pytest.raises(InputError, match=r"Dev_all_passages\.json: record 0 lacks the field 'context'"):
        list(read_coresearch(release, splits=["dev"]))
    write(release / "Dev_all_passages.json", [mention("p3", 1913, FLOOD, 4, 8) | {"endIndex": 10}])
    with pytest.raises(InputError, match=r"record p3: startIndex 4 and endIndex 10 .* do not fit"):
        list(read_coresearch(release, splits=["dev"]))


def test_bad_json_and_folder(release: Path) -> None:
    (release / "Dev_queries.json").write_text('[{"id": "q1", ', encoding="utf-8")
    with pytest.raises(InputError, match=r"Dev_queries\.json: invalid JSON"):
        list(read_coresearch(release, splits=["dev"]))
    with pytest.raises(MissingArtefactError):
        list(read_coresearch(release / "nowhere"))
    with pytest.raises(InputError, match="unknown CoreSearch split"):
        list(read_coresearch(release, splits=["validation"]))


def test_cli_builds_a_partial_release(release: Path, tmp_path: Path) -> None:
    # Only Dev and Test are in the fixture: asking for those splits must not need Train files.
    from typer.testing import CliRunner

    from corefsearch.cli import app

    out = tmp_path / "dataset"
    result = CliRunner().invoke(app, ["build-dataset", str(release), "--format", "coresearch",
                                      "--splits", "dev,test", "--out", str(out)])
    assert result.exit_code == 0, result.output
    queries = [json.loads(line) for line in (out / "queries" / "dev.jsonl").read_text().splitlines()]
    # Cluster 1913 has mentions in p1 and p2 (the query record p1 is the passage p1); the
    # fixture also puts one in the Test file (t1), which is relevant too.
    assert sorted(q["id"] for q in queries) == ["p1", "p2"]
    assert sorted((out / "qrels" / "dev.txt").read_text().splitlines()) == [
        "p1 0 p2-0 1", "p1 0 t1-0 1", "p2 0 p1-0 1", "p2 0 t1-0 1"]
    missing = CliRunner().invoke(app, ["build-dataset", str(release), "--format", "coresearch",
                                       "--out", str(tmp_path / "all")])
    assert missing.exit_code == 1 and "split 'train'" in missing.output
