"""`corefsearch evaluate --clusters CLUSTERS.jsonl --dataset DATASET`: the coreference metrics of a
clustering against a dataset's gold clusters of one split, and its bad-input errors."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import NEWS_DOCUMENTS, NewsCorpus, write_jsonl
from typer.testing import CliRunner

from corefsearch.cli import app
from corefsearch.evaluate.coref import score_partitions

runner = CliRunner(env={"COLUMNS": "250"})

# The test split holds the flood documents: dayton-flood {overflowed, flooding, flood},
# evacuation {evacuated, evacuated-2} and the singleton guard-deployment {deployed}.
TEST_KEY = {"overflowed": "dayton-flood", "flooding": "dayton-flood", "flood": "dayton-flood",
            "evacuated": "evacuation", "evacuated-2": "evacuation", "deployed": "guard-deployment"}
# flood is wrongly put with the evacuation; deployed stays alone
RESPONSE = {"overflowed": "A", "flooding": "A", "flood": "B", "evacuated": "B", "evacuated-2": "B", "deployed": "C"}


@pytest.fixture
def dataset(news_corpus: NewsCorpus, tmp_path: Path) -> Path:
    """The news corpus built with the flood documents as test and the quake documents as train."""
    documents = [dict(doc, split="test" if doc["doc_id"].startswith("flood") else "train") for doc in NEWS_DOCUMENTS]
    write_jsonl(news_corpus.folder / "corpus.jsonl", documents)
    out = tmp_path / "ds"
    result = runner.invoke(app, ["build-dataset", str(news_corpus.folder), "--format", "generic", "--out", str(out),
                                 "--split-by", "corpus", "--splits", "train,test"])
    assert result.exit_code == 0, result.output
    return out


def write_clusters(path: Path, assignment: dict[str, str], *extra: Any) -> Path:
    return write_jsonl(path, [{"mention_id": m, "cluster_id": c} for m, c in assignment.items()] + list(extra))


def evaluate(*args: object) -> Any:
    result = runner.invoke(app, ["evaluate", *(str(a) for a in args)])
    assert "Traceback" not in result.output
    return result


def fails(*args: object) -> str:
    result = evaluate(*args)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr.strip()


def test_json_scores_equal_the_library_and_hand_values(dataset: Path, tmp_path: Path) -> None:
    clusters = write_clusters(tmp_path / "clusters.jsonl", RESPONSE)
    result = evaluate("--clusters", clusters, "--dataset", dataset, "--output-format", "json")
    assert result.exit_code == 0, result.output
    values = json.loads(result.stdout)
    expected = score_partitions(TEST_KEY, RESPONSE)
    for name, score in expected.metrics().items():
        assert values[name] == pytest.approx(score.to_json())
    assert values["CoNLL F1"] == pytest.approx(expected.conll_f1)
    # MUC by hand: key links found 1 of 2 (dayton-flood) + 1 of 1 (evacuation); response links right:
    # 1 of 1 (A) + 1 of 2 (B)
    assert values["MUC"]["recall"] == pytest.approx(2 / 3) and values["MUC"]["precision"] == pytest.approx(2 / 3)
    assert (values["clusters"], values["split"], values["singletons"]) == ("clusters.jsonl", "test", "keep")
    assert (values["key_mentions"], values["response_mentions"]) == (6, 6)
    assert result.stderr == ""


def test_perfect_response_table_and_csv(dataset: Path, tmp_path: Path) -> None:
    clusters = write_clusters(tmp_path / "gold.jsonl", TEST_KEY)
    table = evaluate("--clusters", clusters, "--dataset", dataset)
    assert table.exit_code == 0, table.output
    for label in ("MUC", "B³", "CEAF-e", "LEA", "CoNLL"):
        line = next(line for line in table.stdout.splitlines() if label in line and "100.00" in line)
        assert line.count("100.00") == (1 if label == "CoNLL" else 3)
    rows = list(csv.DictReader(io.StringIO(evaluate("--clusters", clusters, "--dataset", dataset,
                                                    "--output-format", "csv").stdout)))
    assert len(rows) == 1
    assert float(rows[0]["CoNLL_F1"]) == 1.0 and float(rows[0]["LEA_F1"]) == 1.0
    assert rows[0]["key_mentions"] == "6"


def test_singletons_drop_and_other_splits(dataset: Path, tmp_path: Path) -> None:
    # the quake mentions are of the train split: ignored, with a warning that counts them
    clusters = write_clusters(tmp_path / "clusters.jsonl", {**RESPONSE, "earthquake": "Q", "quake": "Q"})
    result = evaluate("--clusters", clusters, "--dataset", dataset, "--singletons", "drop", "--output-format", "json")
    assert result.exit_code == 0, result.output
    assert "2 mention(s) of other splits than test ignored" in result.stderr
    values = json.loads(result.stdout)
    expected = score_partitions(TEST_KEY, RESPONSE, "drop")
    assert values["CoNLL F1"] == pytest.approx(expected.conll_f1)
    assert (values["key_mentions"], values["response_mentions"]) == (5, 5)  # deployed left out on both sides
    # the train split's key: only the quake mentions count; the flood ones are ignored
    train = evaluate("--clusters", clusters, "--dataset", dataset, "--split", "train", "--output-format", "json")
    assert train.exit_code == 0, train.output
    assert "6 mention(s) of other splits than train ignored" in train.stderr
    assert "3 of the 5 train mentions are not in clusters.jsonl" in train.stderr
    assert json.loads(train.stdout)["response_mentions"] == 2


def test_bad_clusters_files(dataset: Path, tmp_path: Path) -> None:
    duplicate = write_clusters(tmp_path / "dup.jsonl", RESPONSE, {"mention_id": "flood", "cluster_id": "Z"})
    assert fails("--clusters", duplicate, "--dataset", dataset) == (
        f"error: {duplicate}:7: mention flood occurs twice (first on line 3); each mention belongs to one cluster")
    unknown = write_clusters(tmp_path / "unknown.jsonl", {"overflowed": "A", "tsunami": "A"})
    assert fails("--clusters", unknown, "--dataset", dataset) == (
        f"error: {unknown}:2: mention 'tsunami' is not in the dataset (its clusters.jsonl has no such mention id)")
    no_cluster = write_jsonl(tmp_path / "fields.jsonl", [{"mention_id": "flood"}])
    assert fails("--clusters", no_cluster, "--dataset", dataset) == (
        f"error: {no_cluster}:1: mention flood lacks the field 'cluster_id'")
    wrong_type = write_jsonl(tmp_path / "type.jsonl", [{"mention_id": "flood", "cluster_id": 1.5}])
    assert "field 'cluster_id' must be a non-empty string or integer, got 1.5" in fails(
        "--clusters", wrong_type, "--dataset", dataset)
    not_json = write_jsonl(tmp_path / "bad.jsonl", ["{not json"])
    assert fails("--clusters", not_json, "--dataset", dataset).startswith(f"error: {not_json}:1: invalid JSON")
    other_split = write_clusters(tmp_path / "train-only.jsonl", {"earthquake": "Q"})
    assert fails("--clusters", other_split, "--dataset", dataset) == (
        f"error: {other_split} has no mention of the test split (1 of other splits); choose the split with --split")


def test_bad_dataset_and_option_combinations(dataset: Path, tmp_path: Path) -> None:
    clusters = write_clusters(tmp_path / "clusters.jsonl", RESPONSE)
    assert fails("--clusters", clusters, "--dataset", dataset, "--split", "dev") == (
        f"error: the dataset {dataset} has no mentions in the dev split (clusters.jsonl lists none); "
        "choose another --split")
    assert "is not a corefsearch dataset" in fails("--clusters", clusters, "--dataset", tmp_path)
    assert fails("--clusters", clusters) == (
        "error: --clusters needs --dataset DATASET (its clusters.jsonl holds the gold clusters)")
    run = tmp_path / "run.trec"
    run.write_text("overflowed Q0 flood-2-1 1 1.0 bm25\n", encoding="utf-8")
    assert fails(run, "--clusters", clusters, "--dataset", dataset) == (
        "error: give either RUN files (ranking metrics) or --clusters (coreference metrics), not both")
    assert fails("--clusters", clusters, "--dataset", dataset, "--qrels", run, "--plot", tmp_path / "p.png") == (
        "error: --qrels, --plot score runs, not a clustering: leave them out with --clusters")
    assert fails("--clusters", clusters, "--dataset", dataset, "--singletons", "some") == (
        "error: --singletons must be keep or drop, got 'some'")
    assert fails(run, "--qrels", run, "--singletons", "drop") == (
        "error: --singletons: only with --clusters (scoring a clustering), not with runs")
    assert fails() == "error: give the RUN file(s) to score (with --qrels), or a clustering with --clusters"
    assert fails(run) == "error: --qrels is required to score runs (e.g. --qrels DATASET/qrels/test.txt)"
