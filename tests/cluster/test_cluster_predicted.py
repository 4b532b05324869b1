"""corefsearch cluster --mentions predicted: a detector's mentions (DATASET/predicted_mentions.jsonl, written
here by hand) clustered by every method and scope, the span on each output line, the split rule (the
passages' own split, or --split all) and the one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    BROKEN_PREDICTED,
    CLUSTER_DOCS,
    break_predicted,
    cluster_words,
    partition,
    save_mention_encoder,
    save_tiny_bert,
    write_jsonl,
)
from helpers import write_cluster_dataset as write_dataset
from typer.testing import CliRunner

from corefsearch.base.artefacts import PREDICTED_MENTIONS, manifest_record, write_manifest
from corefsearch.base.errors import CorefSearchError, InputError
from corefsearch.cli import app
from corefsearch.cluster.predicted import detector_name, read_predicted_mentions
from corefsearch.cluster.run import cluster_dataset
from corefsearch.datasets.dataset import Dataset

runner = CliRunner(env={"COLUMNS": "250"})
DOC_SPLITS = {"a": "train", "b": "train", "c": "dev", "d": "test"}  # the splits of CLUSTER_SPLITS, by document


def predicted(mention_id: str, passage_id: str, word: str, kind: str = "event", occurrence: int = 0) -> dict[str, Any]:
    """A predicted mention of the ``occurrence``-th ``word`` in a passage of the mention clusterer's dataset."""
    doc_id, number = passage_id.rsplit("-", 1)
    text = CLUSTER_DOCS[doc_id][1][int(number)]
    start = -1
    for _ in range(occurrence + 1):
        start = text.index(word, start + 1)
    return {"mention_id": mention_id, "passage_id": passage_id, "doc_id": doc_id, "start": start,
            "end": start + len(word), "type": kind, "score": 0.9, "text": word}


def write_predicted(dataset: Path, mentions: list[dict[str, Any]], detector: str = "heuristic") -> Path:
    write_jsonl(dataset / "predicted_mentions.jsonl", mentions)
    write_manifest(dataset / "predicted_mentions.json", manifest_record(
        PREDICTED_MENTIONS, {"detector": {"name": detector}, "counts": {"mentions": len(mentions)}}))
    return dataset


def gold_as_predicted(dataset: Path, split: str) -> list[dict[str, Any]]:
    """Every gold mention of the passages of ``split``, written as a detector would (same ids and spans)."""
    records, seen = [], set()
    for passage in Dataset(dataset).passages():
        for m in passage.mentions:
            if passage.split == split and m.mention_id not in seen:
                seen.add(m.mention_id)
                records.append({"mention_id": m.mention_id, "passage_id": passage.id, "doc_id": passage.doc_id,
                                "start": m.start, "end": m.end, "type": m.type, "score": 1.0,
                                "text": passage.text[m.start:m.end]})
    return records


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assignment_of(path: Path) -> dict[str, str]:
    return {line["mention_id"]: line["cluster_id"] for line in read_lines(path)}


@pytest.fixture
def no_split_dataset(tmp_path: Path) -> Path:
    """The mention clusterer's dataset as written (topics, passages without a split)."""
    return write_dataset(tmp_path / "plain")


@pytest.fixture
def split_dataset(tmp_path: Path) -> Path:
    """The same dataset with each passage recording its document's split, as ECB+ passages do."""
    root = write_dataset(tmp_path / "split")
    lines = read_lines(root / "passages.jsonl")
    write_jsonl(root / "passages.jsonl", [{**line, "split": DOC_SPLITS[line["doc_id"][0]]} for line in lines])
    return root


# "mill" twice in one document (topic fire); "man" (court) and "men" (quake) share the lemma man across topics.
HAND_MENTIONS = [predicted("p-fire", "a1-0", "fire"), predicted("p-mill-1", "a1-0", "mill", "entity"),
                 predicted("p-mill-2", "a1-1", "mill", "entity"), predicted("p-blaze", "a2-0", "blaze"),
                 predicted("p-man", "b1-0", "man", "entity"), predicted("p-men", "c2-1", "men", "entity"),
                 predicted("p-quake", "c2-0", "quake")]


@pytest.mark.parametrize(("scope", "merged", "groups"), [
    ("topic", [{"p-mill-1", "p-mill-2"}], 3),
    ("corpus", [{"p-mill-1", "p-mill-2"}, {"p-man", "p-men"}], 1),
])
def test_lemma_over_predicted_mentions_of_every_passage(no_split_dataset: Path, tmp_path: Path, scope: str,
                                                        merged: list[set[str]], groups: int) -> None:
    write_predicted(no_split_dataset, HAND_MENTIONS)
    out = tmp_path / "c.jsonl"
    summary = cluster_dataset(no_split_dataset, out, method="lemma", split="all", scope=scope, mentions="predicted")
    ids = {m["mention_id"] for m in HAND_MENTIONS}
    expected = {frozenset(group) for group in merged} | {frozenset({m}) for m in ids - set().union(*merged)}
    assert partition(assignment_of(out)) == expected
    assert (summary.mentions, summary.groups, summary.mention_kind, summary.detector) == (7, groups, "predicted",
                                                                                        "heuristic")
    # each line says where its mention is, so that a scorer can match it to the gold mentions
    by_id = {m["mention_id"]: m for m in HAND_MENTIONS}
    for line in read_lines(out):
        source = by_id[line["mention_id"]]
        assert {k: line[k] for k in ("passage_id", "doc_id", "start", "end")} == {
            k: source[k] for k in ("passage_id", "doc_id", "start", "end")}
        assert line["detector"] == "heuristic"
    if scope == "topic":
        assert assignment_of(out)["p-mill-1"] == "fire/entity/mill"


def test_the_split_is_the_passages_own(split_dataset: Path, tmp_path: Path) -> None:
    write_predicted(split_dataset, HAND_MENTIONS)  # a and b documents are train, c dev
    cluster_dataset(split_dataset, tmp_path / "train.jsonl", method="singletons", split="train", scope="corpus",
                    mentions="predicted")
    assert set(assignment_of(tmp_path / "train.jsonl")) == {"p-fire", "p-mill-1", "p-mill-2", "p-blaze", "p-man"}
    cluster_dataset(split_dataset, tmp_path / "all.jsonl", method="singletons", split="all", scope="corpus",
                    mentions="predicted")
    assert len(assignment_of(tmp_path / "all.jsonl")) == len(HAND_MENTIONS)
    found = read_predicted_mentions(split_dataset, "dev")
    assert [m.mention_id for m in found.mentions] == ["p-men", "p-quake"]
    assert set(found.passage_texts) == {"c2-1", "c2-0"} and (found.kind, found.split) == ("predicted", "dev")


def test_the_default_split_is_test_or_all_without_passage_splits(split_dataset: Path, no_split_dataset: Path,
                                                                 tmp_path: Path) -> None:
    write_predicted(split_dataset, [*HAND_MENTIONS, predicted("p-fell", "d1-0", "fell")])
    summary = cluster_dataset(split_dataset, tmp_path / "s.jsonl", method="lemma", mentions="predicted")
    assert (summary.split, set(assignment_of(tmp_path / "s.jsonl"))) == ("test", {"p-fell"})
    write_predicted(no_split_dataset, HAND_MENTIONS)
    summary = cluster_dataset(no_split_dataset, tmp_path / "n.jsonl", method="lemma", mentions="predicted")
    assert (summary.split, summary.mentions) == ("all", len(HAND_MENTIONS))
    gold = cluster_dataset(no_split_dataset, tmp_path / "g.jsonl", method="lemma")  # gold mentions: test
    assert (gold.split, gold.mention_kind, gold.mentions) == ("test", "gold", 3)


@pytest.mark.parametrize("scope", ["topic", "corpus"])
@pytest.mark.parametrize("method", ["lemma", "singletons"])
def test_gold_spans_as_predicted_mentions_cluster_as_the_gold_mentions(split_dataset: Path, tmp_path: Path,
                                                                       method: str, scope: str) -> None:
    write_predicted(split_dataset, gold_as_predicted(split_dataset, "dev"))
    cluster_dataset(split_dataset, tmp_path / "gold.jsonl", method=method, split="dev", scope=scope)
    cluster_dataset(split_dataset, tmp_path / "pred.jsonl", method=method, split="dev", scope=scope,
                    mentions="predicted")
    assert assignment_of(tmp_path / "pred.jsonl") == assignment_of(tmp_path / "gold.jsonl")
    assert len(assignment_of(tmp_path / "gold.jsonl")) == 5


@pytest.mark.usefixtures("one_thread_each_test")
@pytest.mark.parametrize("scope", ["topic", "predicted-topic", "corpus"])
def test_encoder_over_gold_spans_as_predicted_mentions_equals_gold(split_dataset: Path, tmp_path: Path,
                                                                   scope: str) -> None:
    """The encoder reads a predicted mention as it reads a gold one (its passage, its document's head)."""
    base = save_tiny_bert(tmp_path / "bert", cluster_words(), seed=0, max_positions=160)
    model = save_mention_encoder(base, tmp_path / "encoder")
    write_predicted(split_dataset, gold_as_predicted(split_dataset, "train"))
    options: dict[str, Any] = {"method": "encoder", "split": "train", "scope": scope, "model": model,
                               "threshold": 0.02, "device": "cpu"}
    gold = cluster_dataset(split_dataset, tmp_path / "gold.jsonl", **options)
    pred = cluster_dataset(split_dataset, tmp_path / "pred.jsonl", mentions="predicted", **options)
    assert assignment_of(tmp_path / "pred.jsonl") == assignment_of(tmp_path / "gold.jsonl")
    assert (pred.mentions, pred.encoded, pred.mention_kind) == (gold.mentions, gold.encoded, "predicted") == (
        8, 8, "predicted")


def test_ecbplus_gold_spans_as_predicted_mentions(subset_dataset: Path, tmp_path: Path) -> None:
    dataset = Path(shutil.copytree(subset_dataset, tmp_path / "ecb"))  # the session's dataset stays as it is
    write_predicted(dataset, gold_as_predicted(dataset, "test"))
    cluster_dataset(dataset, tmp_path / "gold.jsonl", method="lemma", split="test", scope="topic")
    cluster_dataset(dataset, tmp_path / "pred.jsonl", method="lemma", split="test", scope="topic",
                    mentions="predicted")
    assert assignment_of(tmp_path / "pred.jsonl") == assignment_of(tmp_path / "gold.jsonl")


def test_cli_prints_the_kind_and_the_detector(no_split_dataset: Path, tmp_path: Path) -> None:
    write_predicted(no_split_dataset, HAND_MENTIONS, detector="tagger-v1")
    result = runner.invoke(app, ["cluster", str(no_split_dataset), "--out", str(tmp_path / "c.jsonl"), "--method",
                                 "lemma", "--scope", "corpus", "--split", "all", "--mentions", "predicted",
                                 "--conll", str(tmp_path / "c.conll")])
    assert result.exit_code == 0, result.output
    assert "Clustered 7 predicted mentions (detector tagger-v1, --split all) into 5 clusters" in " ".join(
        result.output.split())
    assert {line["detector"] for line in read_lines(tmp_path / "c.jsonl")} == {"tagger-v1"}
    assert (tmp_path / "c.conll").read_text().count("\n") == 7 + 2


def test_detector_name_of_a_manifest() -> None:
    assert detector_name({"detector": {"name": "heuristic"}}) == "heuristic"
    assert detector_name({"detector": "spacy"}) == "spacy"
    assert detector_name({"detector": {"path": "models/d"}}) is None and detector_name({}) is None


# --- errors: one line each -------------------------------------------------------------------------------------


def cli_error(*args: object) -> str:
    result = runner.invoke(app, ["cluster", *(str(a) for a in args)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_dataset_without_predicted_mentions_says_what_to_run(split_dataset: Path, tmp_path: Path) -> None:
    message = cli_error(split_dataset, "--out", tmp_path / "c.jsonl", "--method", "lemma", "--mentions", "predicted")
    assert message == (f"error: {split_dataset} holds no predicted mentions; run `corefsearch detect {split_dataset} "
                       "--model MODEL|heuristic` first")
    assert not (tmp_path / "c.jsonl").exists()


@pytest.mark.parametrize("state", BROKEN_PREDICTED)
def test_predicted_mentions_broken_in_any_way_are_named_in_the_line_detect_gives(
        no_split_dataset: Path, tmp_path: Path, state: str) -> None:
    # one file without the other, or a mentions file changed since its manifest was written: the shared line
    write_predicted(no_split_dataset, HAND_MENTIONS)
    expected = break_predicted(no_split_dataset, state)
    out = tmp_path / "c.jsonl"
    assert cli_error(no_split_dataset, "--out", out, "--method", "singletons", "--scope", "corpus", "--split", "all",
                     "--mentions", "predicted") == f"error: {expected}"
    assert not out.exists()
    with pytest.raises(CorefSearchError) as raised:
        read_predicted_mentions(no_split_dataset, "all")
    assert str(raised.value) == expected


def test_split_rules_and_refused_combinations(split_dataset: Path, no_split_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    write_predicted(split_dataset, [m for m in HAND_MENTIONS if m["doc_id"][0] in "ac"])
    assert cli_error(split_dataset, "--out", out, "--method", "lemma", "--mentions", "predicted",
                     "--split", "test") == (
        f"error: {split_dataset / 'predicted_mentions.jsonl'}: no predicted mention lies in a passage of the test "
        "split (6 in passages of dev, train); choose another --split")
    write_predicted(no_split_dataset, HAND_MENTIONS)
    assert cli_error(no_split_dataset, "--out", out, "--mentions", "predicted", "--method", "lemma", "--split",
                     "test") == (
        f"error: {no_split_dataset / 'passages.jsonl'}: no passage records a split (a dataset of plain documents, "
        "or one split by clusters), so --split test selects none; cluster its predicted mentions with --split all")
    assert cli_error(no_split_dataset, "--out", out, "--mentions", "predicted", "--method", "gold") == (
        "error: --method gold gives the dataset's own clusters of its gold mentions: it cannot cluster --mentions "
        "predicted; choose lemma, lemma-heuristic, singletons or encoder")
    assert cli_error(no_split_dataset, "--out", out, "--method", "lemma", "--split", "all") == (
        "error: --split all: only with --mentions predicted (gold mentions are clustered by the split of their "
        "cluster in clusters.jsonl)")
    assert cli_error(no_split_dataset, "--out", out, "--method", "lemma", "--mentions", "found") == (
        "error: --mentions must be one of gold, predicted, got 'found'")
    assert "--split must be one of train, dev, test, all" in cli_error(
        no_split_dataset, "--out", out, "--method", "lemma", "--mentions", "predicted", "--split", "every")
    assert not out.exists()


@pytest.mark.parametrize(("change", "why"), [
    ({"text": "mil"}, "offsets [24, 28) do not slice its text 'mil' from the passage (passages.jsonl changed "
                      "since detection)"),
    ({"doc_id": "b1"}, "names document b1, but the passage is of a1"),
    ({"passage_id": "z9-0"}, "lies in passage z9-0, which"),
])
def test_predicted_mentions_that_do_not_fit_the_passages(no_split_dataset: Path, tmp_path: Path,
                                                         change: dict[str, str], why: str) -> None:
    write_predicted(no_split_dataset, [HAND_MENTIONS[0], {**HAND_MENTIONS[1], **change}])
    message = cli_error(no_split_dataset, "--out", tmp_path / "c.jsonl", "--method", "singletons", "--scope",
                        "corpus", "--split", "all", "--mentions", "predicted")
    assert why in message and "run `corefsearch detect" in message, message


def test_a_predicted_mention_id_twice_is_an_error(no_split_dataset: Path) -> None:
    write_predicted(no_split_dataset, [HAND_MENTIONS[0], HAND_MENTIONS[0]])
    with pytest.raises(InputError, match="predicted mention p-fire occurs twice"):
        read_predicted_mentions(no_split_dataset, "all")
