"""The second round's calibrated order (``corefsearch.search.calibration``, ``--expand-order calibrated``,
``corefsearch calibrate``): the EM finds the model that made the data, the order weighs the gate against the rank,
the floor keeps the first round's order, a calibration file is checked, and the options that need one are
refused before anything loads."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from helpers import flat, save_mention_encoder
from typer.testing import CliRunner

from corefsearch.base.errors import CorefSearchError, InputError
from corefsearch.base.schema import Hit, PredictedMention, Query
from corefsearch.cli import app
from corefsearch.io.trec import read_run
from corefsearch.search.calibration import (
    CALIBRATION_FILE,
    HeadCalibration,
    _prior,
    fit,
    pseudo_queries,
    save,
)
from corefsearch.search.options import ExpansionOptions, SearchOptions
from corefsearch.search.second_round import calibrated_head, second_round

runner = CliRunner()


def simulated(alpha: float, beta: float, a: float, b: float, queries: int, seed: int = 3) -> list[list[bool]]:
    """Top 10s drawn from the model itself: relevance by the rank prior, the gate by a or b."""
    rng = random.Random(seed)
    prior = _prior(alpha, beta)
    rows = []
    for _ in range(queries):
        row = []
        for p in prior:
            relevant = rng.random() < p
            row.append(rng.random() < (a if relevant else b))
        rows.append(row)
    return rows


def model(a: float = 0.8, b: float = 0.2, rate: float = 0.6, alpha: float = 0.5, beta: float = 1.0) -> HeadCalibration:
    return HeadCalibration(alpha, beta, a, b, rate, 100, 0.9)


def test_the_em_finds_the_model_that_made_the_data() -> None:
    found = fit(simulated(1.0, 1.5, 0.8, 0.2, 4000), 0.9)
    assert abs(found.a - 0.8) < 0.06 and abs(found.b - 0.2) < 0.06
    assert abs(_prior(found.alpha, found.beta, 1)[0] - _prior(1.0, 1.5, 1)[0]) < 0.08
    assert found.queries == 4000 and found.gate == 0.9
    # the top pass rate is read off the data as it is, not from the model
    rows = simulated(1.0, 1.5, 0.8, 0.2, 500, seed=5)
    assert fit(rows, 0.9).top_pass_rate == pytest.approx(sum(r[0] for r in rows) / 500)
    with pytest.raises(InputError, match="no query to calibrate on"):
        fit([], 0.9)


def test_the_order_weighs_the_gate_against_the_rank_and_keeps_ties_in_order() -> None:
    strong, weak = model(a=0.9, b=0.1), model(a=0.55, b=0.45)
    assert strong.posterior(3, True) > strong.posterior(3, False)
    assert strong.posterior(1, False) > strong.posterior(2, False)  # the rank prior falls
    # A strong gate moves a passing third passage above a failing first; a weak one does not.
    assert [i for i, _ in strong.order([False, False, True])] == [2, 0, 1]
    assert [i for i, _ in weak.order([False, False, True])] == [0, 1, 2]
    scores = [s for _, s in strong.order([False, True, False, True])]
    assert scores == sorted(scores, reverse=True)
    assert [i for i, _ in strong.order([True, True, True])] == [0, 1, 2]  # all passing: the first round's order


def test_under_the_floor_the_head_keeps_the_first_rounds_order() -> None:
    low = model(a=0.9, b=0.1, rate=0.2)
    assert not low.applies and low.describe()["applies"] is False
    assert [i for i, _ in low.order([False, False, True])] == [0, 1, 2]
    first = [Hit(p, 1.0 - i / 10) for i, p in enumerate(["q-own", "a", "b", "c"])]
    head = calibrated_head(first, {"c"}, low, 10, "q-own")
    assert [h.passage_id for h in head] == ["a", "b", "c"]  # the query's own passage left out
    assert [h.passage_id for h in calibrated_head(first, {"c"}, model(a=0.95, b=0.05), 10, "q-own")] == \
        ["c", "a", "b"]


class Lists:
    """A retriever whose searches answer from a dict."""

    def __init__(self, answers: dict[str, list[Hit]]) -> None:
        self.answers = answers

    def search(self, queries: list[Query], k: int):
        for query in queries:
            yield query, self.answers[query.id][:k]

    def passage(self, passage_id: str) -> dict:
        return {"id": passage_id, "text": ""}


def test_second_round_orders_its_head_by_the_calibration_and_fills_the_tail_from_the_searches() -> None:
    query = Query("q1", "own", "The fire destroyed the mill .", 4, 8, "fire", "c1")
    first = [(query, [Hit(p, 10.0 - i) for i, p in enumerate(["a", "b", "c", "d"])])]
    expansions = {"q1": [Query("q1>c", "c", "The blaze .", 4, 9, "blaze", "c1")]}
    answers = {"q1>c": [Hit("x", 5.0), Hit("a", 4.0)]}
    options = ExpansionOptions(rounds=2, expand=4, weight=4.0, head=4, order="calibrated")
    ranked = second_round(Lists(answers), first, expansions, options, 10, model(a=0.95, b=0.05))[0][1]
    assert [h.passage_id for h in ranked][:4] == ["c", "a", "b", "d"]  # the head: the first round's top 4
    assert [h.passage_id for h in ranked][4:] == ["x"]  # the tail: what the searches found
    assert [h.score for h in ranked] == sorted((h.score for h in ranked), reverse=True)
    kept = second_round(Lists(answers), first, expansions, options, 10, model(a=0.95, b=0.05, rate=0.1))[0][1]
    assert [h.passage_id for h in kept][:4] == ["a", "b", "c", "d"]  # under the floor
    gate = second_round(Lists(answers), first, expansions, ExpansionOptions(rounds=2, expand=4, weight=4.0, head=4),
                        10)[0][1]
    assert [h.passage_id for h in gate][:4] == ["c", "a", "b", "d"]


def test_a_calibration_file_round_trips_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    found = fit(simulated(0.5, 1.0, 0.7, 0.3, 200), 0.9, fitted_on={"queries": "200 simulated"})
    path = tmp_path / "c.json"
    save(found, path)
    assert HeadCalibration.load(path) == found
    assert not list(tmp_path.glob("*.partial*")) and not list(tmp_path.glob(".*"))
    record = json.loads(path.read_text())
    infinite = json.dumps({**record, "alpha": 0.0}).replace('"alpha": 0.0', '"alpha": Infinity')
    for broken, message in (("{", "not a calibration file"), ("[]", "not a calibration file of format"),
                            (json.dumps({**record, "a": "high"}), "missing or not a number"),
                            (json.dumps({**record, "b": 1.5}), "out of range"), (infinite, "out of range")):
        path.write_text(broken)
        with pytest.raises(InputError, match=message) as error:
            HeadCalibration.load(path)
        assert str(path) in str(error.value)
    with pytest.raises(InputError, match="corefsearch calibrate"):
        HeadCalibration.load(tmp_path / "none.json")


def test_pseudo_queries_are_the_collections_detected_mentions() -> None:
    passages = [("p1", "The fire spread ."), ("p2", "Crews fought the blaze .")]
    mentions = [PredictedMention("p1:4-8:event", "p1", "d1", 4, 8, "event", 0.9, "fire"),
                PredictedMention("p2:17-22:event", "p2", "d2", 17, 22, "event", 0.9, "blaze"),
                PredictedMention("p2:0-5:entity", "p2", "d2", 0, 5, "entity", 0.9, "Crews")]
    found = pseudo_queries(passages, mentions, 5, "event")
    assert sorted(q.id for q in found) == ["p1:4-8:event", "p2:17-22:event"]
    assert {q.mention for q in found} == {"fire", "blaze"} and all(q.type == "event" for q in found)
    assert pseudo_queries(passages, mentions, 1, "event") == pseudo_queries(passages, mentions, 1, "event")  # seeded
    with pytest.raises(InputError, match="no detected entity mention"):
        pseudo_queries(passages, mentions[:2], 3, "entity")


def test_the_order_options_are_checked_before_anything_loads(tmp_path: Path) -> None:
    for options, message in ((ExpansionOptions(rounds=2, order="best"), "--expand-order must be one of"),
                             (ExpansionOptions(rounds=2, order="gate", calibration=tmp_path),
                              "--expand-calibration is the"),
                             (ExpansionOptions(rounds=2, order="calibrated", head=0), "needs --expand-head > 0")):
        with pytest.raises(CorefSearchError, match=message):
            options.validate(has_reader=False)
    encoder = tmp_path / "encoder"
    encoder.mkdir()
    calibrated = ExpansionOptions(rounds=2, order="calibrated", encoder=encoder, candidates="gold")
    with pytest.raises(InputError, match="no second-round calibration there"):
        SearchOptions(expansion=calibrated).check(tmp_path)
    save(model(), tmp_path / CALIBRATION_FILE)
    checked = SearchOptions(expansion=ExpansionOptions(rounds=2, order="calibrated", encoder=encoder,
                                                        candidates="gold")).check(tmp_path)
    assert checked.expansion is not None and checked.expansion.calibration == tmp_path / CALIBRATION_FILE
    with pytest.raises(InputError, match="calibrated for the gate 0.9"):
        SearchOptions(expansion=ExpansionOptions(rounds=2, order="calibrated", encoder=encoder, candidates="gold",
                                                 min_similarity=0.8)).check(tmp_path)
    # auto (the default): calibrated where the index holds a calibration for the gate, else the gate's order
    auto = SearchOptions(expansion=ExpansionOptions(rounds=2, encoder=encoder, candidates="gold")).check(tmp_path)
    assert auto.expansion is not None and auto.expansion.order == "calibrated"
    other = SearchOptions(expansion=ExpansionOptions(rounds=2, encoder=encoder, candidates="gold",
                                                     min_similarity=0.8)).check(tmp_path)
    assert other.expansion is not None and other.expansion.order == "gate"
    bare = SearchOptions(expansion=ExpansionOptions(rounds=2, encoder=encoder, candidates="gold")).check(
        tmp_path / "elsewhere")
    assert bare.expansion is not None and bare.expansion.order == "gate"
    recorded = checked.expansion.describe()
    assert ExpansionOptions.from_metadata(recorded).order == "calibrated"
    assert ExpansionOptions.from_metadata({k: v for k, v in recorded.items() if k != "order"}).order == "gate"


def test_calibrate_then_search_with_the_calibrated_order(tiny_base: Path, tiny_dataset: Path, tmp_path: Path) -> None:
    dataset, tiny_index = tmp_path / "dataset", tmp_path / "index"
    shutil.copytree(tiny_dataset, dataset)
    detected = runner.invoke(app, ["detect", str(dataset), "--model", "heuristic", "--mention-type", "event"])
    assert detected.exit_code == 0, detected.output
    indexed = runner.invoke(app, ["index", str(dataset), "--out", str(tiny_index), "--threads", "1"])
    assert indexed.exit_code == 0, indexed.output
    encoder = save_mention_encoder(tiny_base, tmp_path / "encoder")
    out = tmp_path / "calibration.json"
    base = ["calibrate", "--index", str(tiny_index), "--dataset", str(dataset), "--mention-encoder", str(encoder),
            "--query-format", "mention", "--sample", "20", "--out", str(out)]
    # Every option is checked before anything loads.
    for extra, message in ((["--sample", "0"], "--sample"), (["--mention-type", "place"], "event or entity"),
                           (["--expand-min-similarity", "2"], "cosine similarity in [-1, 1]")):
        refused = runner.invoke(app, [*base, *extra])
        assert refused.exit_code == 1 and message in flat(refused.output) and not out.exists(), refused.output
    made = runner.invoke(app, [*base, "--expand-min-similarity", "-1"])
    assert made.exit_code == 0, made.output
    assert "Calibrated on 20 of the collection's detected event mentions" in flat(made.output)
    found = HeadCalibration.load(out)
    # the gate -1 passes every top passage that holds a detected mention (a few hold none)
    assert found.gate == -1 and 0.5 <= found.top_pass_rate <= 1.0 and found.queries == 20
    assert "detected event mentions" in found.fitted_on["queries"]
    again = runner.invoke(app, [*base, "--expand-min-similarity", "-1"])
    assert again.exit_code == 1 and "exists; add --overwrite" in flat(again.output)
    run = tmp_path / "run.trec"
    searched = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries",
                                   str(dataset / "queries" / "dev.jsonl"), "--out", str(run), "--k", "10",
                                   "--query-format", "mention", "--device", "cpu", "--rounds", "2", "--expand", "3",
                                   "--mention-encoder", str(encoder), "--expand-min-similarity", "-1",
                                   "--expand-order", "calibrated", "--expand-calibration", str(out)])
    assert searched.exit_code == 0, searched.output
    meta = json.loads(Path(f"{run}.meta.json").read_text())
    assert meta["expansion"]["order"] == "calibrated" and meta["expansion"]["calibration"] == str(out.resolve())
    assert meta["expansion"]["calibrated"]["top_pass_rate"] == round(found.top_pass_rate, 4)
    assert read_run(run)
    wrong = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries",
                                str(dataset / "queries" / "dev.jsonl"), "--out", str(tmp_path / "w.trec"),
                                "--rounds", "2", "--mention-encoder", str(encoder), "--expand-order", "calibrated",
                                "--expand-calibration", str(out)])
    assert wrong.exit_code == 1 and "calibrated for the gate -1" in flat(wrong.output)
    assert not (tmp_path / "w.trec").exists()
    # On a queries file: its queries, never its qrels.
    asked = tmp_path / "asked.json"
    on_queries = runner.invoke(app, [*base[:-2], "--out", str(asked), "--queries",
                                     str(dataset / "queries" / "dev.jsonl")])
    assert on_queries.exit_code == 0, on_queries.output
    assert HeadCalibration.load(asked).fitted_on["queries"].startswith("the ")
    assert "dev.jsonl" in flat(on_queries.output)
    # Without a calibration in the index, auto is the gate's order, and a search says so.
    plain = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries",
                                str(dataset / "queries" / "dev.jsonl"), "--out", str(tmp_path / "p.trec"), "--k", "10",
                                "--query-format", "mention",
                                "--device", "cpu", "--rounds", "2", "--expand", "3", "--mention-encoder", str(encoder),
                                "--expand-min-similarity", "-1"])
    assert plain.exit_code == 0 and "the gate's order: the index holds no calibration" in flat(plain.output)
    assert json.loads(Path(f"{tmp_path / 'p.trec'}.meta.json").read_text())["expansion"]["order"] == "gate"
    # One question takes the same order, and says what it holds.
    qid = json.loads((dataset / "queries" / "dev.jsonl").read_text().splitlines()[0])["id"]
    asked_one = runner.invoke(app, ["query", "--index", str(tiny_index), "--dataset", str(dataset), "--qid", qid,
                                    "--query-format", "mention", "--device", "cpu", "--json", "--rounds", "2",
                                    "--mention-encoder", str(encoder), "--expand-min-similarity", "-1",
                                    "--expand-order", "calibrated", "--expand-calibration", str(out)])
    assert asked_one.exit_code == 0, asked_one.output
    expansion = json.loads(asked_one.output)["expansion"]
    assert expansion["order"] == "calibrated" and expansion["calibrated"]["gate"] == -1
    alone = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries",
                                str(dataset / "queries" / "dev.jsonl"), "--out", str(tmp_path / "a.trec"),
                                "--expand-order", "calibrated"])
    assert alone.exit_code == 1 and "--expand-order: the second round's options; add --rounds 2" in flat(alone.output)
