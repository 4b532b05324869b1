"""The second round's and the cluster answer's candidate mentions (``--candidates detected|gold|reader``):
detected ones on passages without any annotation, gold ones only when asked (and refused on a CoreSearch-format
dataset), stored predicted mentions read instead of detecting again, and never a silent first round."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import BROKEN_PREDICTED, break_predicted, flat, plain_news_collection, save_mention_encoder
from typer.testing import CliRunner

from corefsearch.base.errors import CorefSearchError, InputError
from corefsearch.base.schema import Query
from corefsearch.cli import app
from corefsearch.search.candidates import (
    DetectedCandidates,
    GoldCandidates,
    StoredCandidates,
    check_gold_allowed,
    open_candidates,
)
from corefsearch.search.options import ExpansionOptions, SearchOptions

java = pytest.mark.java
runner = CliRunner(env={"COLUMNS": "250"})
CONTEXT = "Aftershocks followed the earthquake that struck northern California on Monday."


def invoke(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The news corpus as plain .txt files (no annotation at all), built and indexed with Lucene."""
    return plain_news_collection(tmp_path_factory.mktemp("plain"))


def test_detected_candidates_come_from_passages_without_annotations(plain: tuple[Path, Path]) -> None:
    dataset, _ = plain
    from corefsearch.datasets.dataset import Dataset

    passages = [p for p in Dataset(dataset).passages()][:6]
    detected = open_candidates("detected", dataset)
    assert isinstance(detected, DetectedCandidates) and detected.reference == "heuristic"
    found = detected.of([p.id for p in passages] + ["no-such-passage"])
    assert found and "no-such-passage" not in found
    for passage_id, candidates in found.items():
        text = next(p.text for p in passages if p.id == passage_id)
        for candidate in candidates:
            record = candidate.record
            assert record.sentence == text and text[record.start:record.end] == record.text
            assert candidate.type in ("event", "entity")
    # Gold candidates on the same passages: there are none to give.
    assert GoldCandidates(dataset).of([p.id for p in passages]) == {}
    # A query of a passage in the dataset reads its document's head passages as its context.
    query = Query("q", passages[1].id, passages[1].text, 0, 3, passages[1].text[:3], "")
    assert detected.query_record(query).context.startswith(passages[0].text)


@java
def test_query_with_a_second_round_and_a_cluster_on_plain_documents(plain: tuple[Path, Path], tiny_base: Path,
                                                                    tmp_path: Path) -> None:
    _, index = plain
    encoder = save_mention_encoder(tiny_base, tmp_path / "encoder")
    base = ["query", "--index", index, "--mention", "earthquake", "--context", CONTEXT, "--k", 5, "--device", "cpu",
            "--query-format", "mention", "--mention-encoder", encoder, "--rounds", 2, "--expand", 3,
            "--expand-min-similarity", -1]
    answer = json.loads(invoke(*base, "--cluster", "--json").stdout)
    expansion = answer["expansion"]
    assert expansion["candidates"] == "detected" and expansion["detector"] == "heuristic"
    assert expansion["queries"] and "note" not in expansion
    assert answer["cluster"]["candidates"] == "detected" and answer["cluster"]["passages_without_mentions"] < 5
    # Gold candidates where nothing is annotated: none, and said, never a silent first round.
    gold = json.loads(invoke(*base, "--candidates", "gold", "--json").stdout)["expansion"]
    assert gold["candidates"] == "gold" and gold["queries"] == []
    assert "the answer is the first round's" in gold["note"] and gold["passages_without_candidates"] > 0
    shown = invoke(*base, "--candidates", "gold")
    assert "Note: no coreferring mention found in the top 3 passages" in flat(shown.output)


def test_stored_predicted_mentions_are_read_not_detected_again(plain: tuple[Path, Path], tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    shutil.copytree(plain[0], dataset)
    invoke("detect", dataset, "--model", "heuristic")
    stored = open_candidates("detected", dataset)
    assert isinstance(stored, StoredCandidates) and stored.detector == "heuristic"
    detected = open_candidates("detected", dataset, detector="heuristic")  # asked for: detected at query time
    assert isinstance(detected, DetectedCandidates)
    ids = [line.split('"passage_id": "')[1].split('"')[0]
           for line in (dataset / "predicted_mentions.jsonl").read_text().splitlines()[:5]]
    spans = {pid: sorted((c.record.start, c.record.end, c.type) for c in found)
             for pid, found in stored.of(ids).items()}
    assert spans == {pid: sorted((c.record.start, c.record.end, c.type) for c in found)
                     for pid, found in detected.of(ids).items()}


@pytest.mark.parametrize("state", BROKEN_PREDICTED)
def test_stored_predicted_mentions_broken_in_any_way_are_refused_not_detected_again(
        plain: tuple[Path, Path], tmp_path: Path, state: str) -> None:
    # one file without the other, or a changed file: the line every command gives (never a silent detection)
    dataset = tmp_path / "dataset"
    shutil.copytree(plain[0], dataset)
    invoke("detect", dataset, "--model", "heuristic")
    expected = break_predicted(dataset, state)
    with pytest.raises(CorefSearchError) as raised:
        open_candidates("detected", dataset)
    assert str(raised.value) == expected
    # a detector asked for reads nothing stored
    assert isinstance(open_candidates("detected", dataset, detector="heuristic"), DetectedCandidates)


@java
def test_query_names_broken_predicted_mentions_in_one_line(tiny_base: Path, tmp_path: Path) -> None:
    dataset, index = plain_news_collection(tmp_path / "plain")
    encoder = save_mention_encoder(tiny_base, tmp_path / "encoder")
    for state in BROKEN_PREDICTED:
        invoke("detect", dataset, "--model", "heuristic", "--overwrite")  # detect --overwrite repairs any state
        expected = break_predicted(dataset, state)
        result = runner.invoke(app, [str(a) for a in (
            "query", "--index", index, "--mention", "earthquake", "--context", CONTEXT, "--k", 3, "--device", "cpu",
            "--query-format", "mention", "--mention-encoder", encoder, "--rounds", 2, "--expand", 2)])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert result.stderr.strip().splitlines() == [f"error: {expected}"]


def test_gold_candidates_are_refused_on_a_coresearch_dataset(tiny_dataset: Path, tmp_path: Path) -> None:
    dataset = tmp_path / "coresearch"
    shutil.copytree(tiny_dataset, dataset)
    manifest = json.loads((dataset / "manifest.json").read_text())
    manifest["options"]["source"]["format"] = "coresearch"
    (dataset / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="CoreSearch-format dataset, whose distractor passages carry no annotated"):
        check_gold_allowed(dataset)
    with pytest.raises(InputError, match="--candidates gold"):
        open_candidates("gold", dataset)
    check_gold_allowed(tiny_dataset)  # an annotated corpus of another format: allowed when asked
    # An unknown source is refused at the door (SearchOptions.check), before anything opens; never opened either.
    with pytest.raises(InputError, match="--candidates must be one of"):
        SearchOptions(expansion=ExpansionOptions(rounds=2, candidates="annotations")).check()
    with pytest.raises(InputError):
        open_candidates("annotations", tiny_dataset)


class _Config:
    threshold = 0.1
    lemma_weight = 0.2
    answer_threshold: float | None = None

    @property
    def answer_cut(self) -> float:
        return self.answer_threshold if self.answer_threshold is not None else 1 - self.threshold


class _Encoder:
    """The query at cosine 0.75 to each found mention (``angles`` gives others by mention text), the found
    mentions on either side of it."""

    config = _Config()
    angles: dict[str, float] = {}

    def encode(self, records: list) -> list:
        import numpy as np

        out = []
        for i, r in enumerate(records):
            angle = 0.0 if r.mention_id == "query" else np.arccos(self.angles.get(r.text, 0.75))
            out.append(np.array([np.cos(angle), np.sin(angle) * (1 if i % 2 else -1)]))
        return np.array(out)


def test_the_cluster_answer_applies_the_encoders_lemma_weight() -> None:
    from corefsearch.search.cluster_answer import FoundMention, cluster_answer

    text = "The fire spread overnight."
    query = Query("adhoc", "", text, 4, 8, "fire", "")
    same = FoundMention("p1", "d1", "t", "A fire broke out.", 2, 6, 1, "")
    other = FoundMention("p2", "d2", "t", "Crews fought the blaze.", 17, 22, 2, "")
    answer = cluster_answer(_Encoder(), query, text, [same, other])
    # The cut is 1 - τ = 0.9; cosine 0.75 is below it, and the same head lemma adds β 0.2: "fire" (0.95) is in.
    assert answer["size"] == 2 and [m["mention"] for d in answer["documents"] for m in d["mentions"]] == ["fire"]
    assert answer["threshold"] == pytest.approx(0.9)
    assert [m["mention"] for m in answer["near_misses"]] == ["blaze"]
    _Config.lemma_weight = 0.0
    try:
        assert cluster_answer(_Encoder(), query, text, [same, other])["size"] == 1
    finally:
        _Config.lemma_weight = 0.2


def test_the_answer_takes_each_passages_best_mention_above_the_cut_with_its_score() -> None:
    from corefsearch.search.cluster_answer import FoundMention, cluster_answer

    text = "The blaze spread overnight."
    query = Query("adhoc", "", text, 4, 9, "blaze", "")
    passage = "Firefighters said the fire that burned the mill was out."
    found = [FoundMention("p1", "d1", "t", passage, 22, 26, 2, ""),  # fire: 0.97
             FoundMention("p1", "d1", "t", passage, 32, 38, 2, ""),  # burned: 0.93, the same passage's second
             FoundMention("p2", "d2", "t", "The inferno was put out.", 4, 11, 1, ""),  # inferno: 0.91
             FoundMention("p3", "d3", "t", "Another storm hit the port.", 8, 13, 3, "")]  # storm: 0.6
    _Encoder.angles = {"fire": 0.97, "burned": 0.93, "inferno": 0.91, "storm": 0.6}
    _Config.answer_threshold = 0.9
    try:
        answer = cluster_answer(_Encoder(), query, text, found)
    finally:
        _Encoder.angles, _Config.answer_threshold = {}, None
    members = [m for d in answer["documents"] for m in d["mentions"]]
    # One member a passage (its best), ranked by score whatever its hit's rank, each with its score; the query
    # mention counts in the size.
    assert [(m["mention"], m["rank"]) for m in members] == [("fire", 2), ("inferno", 1)]
    assert [m["score"] for m in members] == pytest.approx([0.97, 0.91], abs=1e-4)
    assert answer["size"] == 3 and answer["threshold"] == 0.9
    assert [m["mention"] for m in answer["near_misses"]] == ["burned", "storm"]  # by score, below or beside
    assert [m["score"] for m in answer["near_misses"]] == pytest.approx([0.93, 0.6], abs=1e-4)
    # Nothing at the cut: the query mention alone, every candidate a near miss.
    _Config.answer_threshold = 0.99
    try:
        alone = cluster_answer(_Encoder(), query, text, found)
    finally:
        _Config.answer_threshold = None
    assert alone["size"] == 1 and alone["documents"] == [] and len(alone["near_misses"]) == 4


class _Source:
    """A candidate source that holds the given spans of each passage (all of the query's type)."""

    name, detector, reference = "detected", "heuristic", "heuristic"

    def __init__(self, spans: dict[str, list[tuple[int, int]]], texts: dict[str, str]) -> None:
        self.spans, self.texts = spans, texts

    def of(self, passage_ids: list[str]) -> dict[str, list[Any]]:
        from corefsearch.cluster.inputs import MentionRecord
        from corefsearch.search.candidates import Candidate

        return {pid: [Candidate(MentionRecord(f"{pid}:{a}-{b}", "", "d", None, pid, self.texts[pid][a:b], a, b,
                                              self.texts[pid], ""), "event") for a, b in self.spans[pid]]
                for pid in passage_ids if pid in self.spans}


class _Expansion:
    def __init__(self, source: _Source) -> None:
        self.candidates, self.known = source, {}

    def similarities(self, query: Query, records: dict[Any, Any]) -> dict[Any, float]:
        return {key: _Encoder.angles.get(record.text, 0.75) for key, record in records.items()}


def test_an_answer_without_members_says_why() -> None:
    from types import SimpleNamespace

    from corefsearch.search.cluster_answer import cluster_of_hits

    text = "The blaze spread overnight."
    query = Query("adhoc", "", text, 4, 9, "blaze", "")
    hits = [SimpleNamespace(passage_id="p1", title="t", text="Another storm hit the port.", rank=1)]
    context = lambda pid: ("d", "")  # noqa: E731
    # No candidate in any hit, and no reader: the query mention alone, and the note says none was found.
    none = cluster_of_hits(_Encoder(), lambda: _Expansion(_Source({}, {})), query, hits, {}, context)
    assert none["size"] == 1 and none["note"].startswith("no mention found in the top 1 passages")
    # A candidate under the cut: the query mention alone; the note names the cut, the candidate is a near miss.
    _Encoder.angles = {"storm": 0.6}
    try:
        under = cluster_of_hits(_Encoder(), lambda: _Expansion(_Source({"p1": [(8, 13)]},
                                                                      {"p1": hits[0].text})), query, hits, {}, context)
    finally:
        _Encoder.angles = {}
    assert under["size"] == 1 and under["documents"] == [] and under["candidates_scored"] == 1
    assert "reaches the cut 0.9" in under["note"] and [m["mention"] for m in under["near_misses"]] == ["storm"]
    assert under["near_misses"][0]["score"] == pytest.approx(0.6, abs=1e-4)


def test_a_detector_runs_on_the_device_resolved(plain: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import corefsearch.search.candidates as candidates

    asked: list[str] = []
    monkeypatch.setattr(candidates, "load_detector", lambda reference, device: asked.append(device) or object())
    open_candidates("detected", plain[0], detector="some-folder", device="auto")
    assert asked == ["cpu"]  # auto resolved (this machine has no GPU), never handed on as "auto"


def test_an_ad_hoc_querys_document_is_its_context(plain: tuple[Path, Path]) -> None:
    query = Query("adhoc", "", CONTEXT, 25, 35, "earthquake", "")
    record = open_candidates("detected", plain[0]).query_record(query)
    assert record.context == CONTEXT and record.sentence == CONTEXT and record.text == "earthquake"
