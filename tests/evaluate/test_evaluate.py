"""Tests of corefsearch.evaluate: hand-computed metrics, agreement with pytrec_eval, the
CoreSearch definitions, missing queries, significance and the report outputs."""

from __future__ import annotations

import csv
import io
import json
import math
import random

import pytest
from rich.console import Console

from corefsearch.base.errors import InputError
from corefsearch.evaluate import (
    METRICS,
    Evaluation,
    evaluate_files,
    evaluate_run,
    paired_test,
    rank_documents,
    render_table,
    to_json,
    write_per_query_csv,
)
from corefsearch.io.trec import RunRow, write_qrels, write_run

# --- a tiny hand-checked example --------------------------------------------------------------
#
# q1: 3 relevant (a, b, c); a at rank 1, b at rank 4, c at rank 60; x judged non-relevant.
# q2: 1 relevant (e) at rank 3.
# q3: 2 relevant (f, g); the run has no results for q3.
# q9: only in the run (not in the qrels).

QRELS = {
    "q1": {"a": 1, "b": 1, "c": 1, "x": 0},
    "q2": {"e": 1},
    "q3": {"f": 1, "g": 1},
}


def _tiny_run() -> dict[str, dict[str, float]]:
    q1 = {"a": 100.0, "x": 99.0, "n2": 98.0, "b": 97.0}  # ranks 1-4
    q1.update({f"m{i:02d}": 90.0 - i for i in range(55)})  # ranks 5-59
    q1["c"] = 1.0  # rank 60
    q2 = {"n1": 0.9, "n2": 0.8, "e": 0.7}
    return {"q1": q1, "q2": q2, "q9": {"z": 1.0}}


def test_hand_computed_trec_values() -> None:
    ev = evaluate_run(_tiny_run(), QRELS, name="tiny")
    q1, q2, q3 = (ev.per_query[q] for q in ("q1", "q2", "q3"))
    assert list(ev.aggregate) == list(METRICS)  # no infAP: no relevance -1 in the qrels
    assert ev.n_queries == 3
    # q1: first relevant at rank 1 -> RR 1; AP@10 = (1/1 + 2/4) / 3 (c at 60 is beyond 10).
    assert q1["MRR@10"] == pytest.approx(1.0)
    assert q1["mAP@10"] == pytest.approx((1 / 1 + 2 / 4) / 3)
    # AP@50 likewise: c at rank 60 is still cut off.
    assert q1["mAP@50"] == pytest.approx((1 / 1 + 2 / 4) / 3)
    # R@10 = R@50 = 2/3 (a, b); R@100 = 3/3 (c at rank 60).
    assert q1["R@10"] == pytest.approx(2 / 3)
    assert q1["R@50"] == pytest.approx(2 / 3)
    assert q1["R@100"] == pytest.approx(1.0)
    # q2: first relevant at rank 3 -> RR 1/3; AP@10 = (1/3) / 1; R@10 = 1/1.
    assert q2["MRR@10"] == pytest.approx(1 / 3)
    assert q2["mAP@10"] == pytest.approx(1 / 3)
    assert q2["R@10"] == pytest.approx(1.0)
    # q3 is missing from the run: 0 for every metric.
    assert q3 == dict.fromkeys(METRICS, 0.0)
    # Means over all 3 qrels queries (q3 included as 0, q9 ignored).
    assert ev.aggregate["MRR@10"] == pytest.approx((1 + 1 / 3 + 0) / 3)  # 4/9
    assert ev.aggregate["mAP@10"] == pytest.approx(((1 + 2 / 4) / 3 + 1 / 3 + 0) / 3)  # 5/18
    # macro recall: (2/3 + 1 + 0) / 3 = 5/9
    assert ev.aggregate["R@10"] == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert ev.aggregate["R@100"] == pytest.approx((1 + 1 + 0) / 3)


def test_coresearch_micro_recall_differs_from_macro() -> None:
    trec = evaluate_run(_tiny_run(), QRELS, "trec")
    paper = evaluate_run(_tiny_run(), QRELS, "coresearch")
    # micro: (2 + 1 + 0 found) / (3 + 1 + 2 relevant) = 3/6, against macro 5/9
    assert paper.aggregate["R@10"] == pytest.approx(3 / 6)
    assert trec.aggregate["R@10"] == pytest.approx(5 / 9)
    # R@100: micro (3 + 1 + 0) / 6 = 4/6, macro (1 + 1 + 0) / 3 = 2/3 -- equal by chance here
    assert paper.aggregate["R@100"] == pytest.approx(4 / 6)
    # per-query output still gives each query's own ratio, equal to trec_eval's
    for qid in QRELS:
        for metric in METRICS:
            assert paper.per_query[qid][metric] == pytest.approx(trec.per_query[qid][metric])
    # MRR and mAP have the same (macro) definition in both
    for metric in ("MRR@10", "mAP@10", "mAP@50"):
        assert paper.aggregate[metric] == pytest.approx(trec.aggregate[metric])


def test_missing_and_extra_queries_warn_with_counts() -> None:
    ev = evaluate_run(_tiny_run(), QRELS)
    assert any("1 of 3 run queries are not in the qrels" in w and "q9" in w for w in ev.warnings)
    assert any("1 of 3 qrels queries have no results" in w and "q3" in w for w in ev.warnings)
    assert "q9" not in ev.per_query


@pytest.mark.parametrize("definition", ["trec", "coresearch"])
def test_missing_query_counts_zero(definition: str) -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    full = evaluate_run({"q1": {"a": 1.0}, "q2": {"b": 1.0}}, qrels, definition)
    half = evaluate_run({"q1": {"a": 1.0}}, qrels, definition)
    empty = evaluate_run({"q1": {"a": 1.0}, "q2": {}}, qrels, definition)  # empty list = missing
    assert full.aggregate["MRR@10"] == 1.0
    # q2 missing -> (1 + 0) / 2, not 1/1 as plain pytrec_eval would report
    for metric in METRICS:
        assert half.aggregate[metric] == pytest.approx(0.5)
        assert empty.aggregate[metric] == pytest.approx(0.5)
    assert half.per_query["q2"] == dict.fromkeys(METRICS, 0.0)


def test_unknown_definition_and_empty_qrels() -> None:
    with pytest.raises(InputError, match="unknown metric definition"):
        evaluate_run({}, QRELS, definition="sklearn")
    with pytest.raises(InputError, match="no queries"):
        evaluate_run({"q1": {"a": 1.0}}, {})


@pytest.mark.parametrize("definition", ["trec", "coresearch"])
def test_ties_broken_by_doc_id_descending(definition: str) -> None:
    # "a" and "b" tie; trec_eval puts the larger doc id first: b (rank 1), a (rank 2).
    qrels = {"q": {"a": 1}}
    ev = evaluate_run({"q": {"a": 0.5, "b": 0.5}}, qrels, definition)
    assert rank_documents({"a": 0.5, "b": 0.5, "c": 0.9}) == ["c", "b", "a"]
    assert ev.per_query["q"]["MRR@10"] == pytest.approx(1 / 2)  # RR@10 (MS MARCO provider) agrees
    assert ev.per_query["q"]["mAP@10"] == pytest.approx(1 / 2)


def test_infap_only_with_unjudged() -> None:
    run = {"q1": {"a": 3.0, "u": 2.0, "b": 1.0}}
    assert "infAP" not in evaluate_run(run, {"q1": {"a": 1, "b": 1, "n": 0}}).aggregate
    for definition in ("trec", "coresearch"):
        ev = evaluate_run(run, {"q1": {"a": 1, "b": 1, "u": -1}}, definition)
        assert list(ev.aggregate) == [*METRICS, "infAP"]
        assert "infAP" in ev.per_query["q1"]
        # relevant at 1 and 3, u unjudged: AP counts u as non-relevant = (1/1 + 2/3) / 2
        assert ev.aggregate["mAP@10"] == pytest.approx((1 + 2 / 3) / 2)
        assert 0.0 < ev.aggregate["infAP"] <= 1.0


# --- agreement with pytrec_eval on random data --------------------------------------------------


def _random_data(seed: int = 13, n_queries: int = 50):
    rng = random.Random(seed)
    docs = [f"d{i:03d}" for i in range(700)]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        qid = f"q{q}"
        relevant = rng.sample(docs, rng.randint(1, 12))
        judged = {doc: 1 for doc in relevant}
        judged.update({doc: 0 for doc in rng.sample(docs, 5) if doc not in judged})
        qrels[qid] = judged
        retrieved = rng.sample(docs, rng.randint(20, 600))
        # one decimal -> many score ties, to exercise the tie-breaking
        run[qid] = {doc: round(rng.random(), 1) for doc in retrieved}
    return run, qrels


PYTREC = {"MRR@10": "recip_rank", "mAP@10": "map_cut_10", "mAP@50": "map_cut_50", "R@10": "recall_10",
          "R@50": "recall_50", "R@100": "recall_100", "R@500": "recall_500"}


def _pytrec_values(run, qrels) -> dict[str, dict[str, float]]:
    import pytrec_eval

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "map_cut.10,50", "recall.10,50,100,500"})
    raw = evaluator.evaluate(run)
    values = {}
    for qid, measures in raw.items():
        values[qid] = {ours: measures[theirs] for ours, theirs in PYTREC.items()}
        # pytrec_eval has no RR cut-off: RR@10 is RR when the first relevant is within rank 10
        rr = values[qid]["MRR@10"]
        values[qid]["MRR@10"] = rr if rr >= 1 / 10 - 1e-12 else 0.0
    return values


@pytest.mark.parametrize("definition", ["trec", "coresearch"])
def test_agrees_with_pytrec_eval_per_query(definition: str) -> None:
    run, qrels = _random_data()
    expected = _pytrec_values(run, qrels)
    ev = evaluate_run(run, qrels, definition)
    assert ev.n_queries == 50 and not ev.warnings
    assert set(ev.per_query) == set(expected)
    for qid, values in expected.items():
        for metric, value in values.items():
            # under "coresearch" this checks mAP@k == map_cut_k and per-query R@k == recall_k
            assert ev.per_query[qid][metric] == pytest.approx(value, abs=1e-9), (qid, metric)


def test_trec_aggregate_is_pytrec_mean_and_coresearch_recall_is_micro() -> None:
    run, qrels = _random_data()
    expected = _pytrec_values(run, qrels)
    trec = evaluate_run(run, qrels, "trec")
    paper = evaluate_run(run, qrels, "coresearch")
    for metric in METRICS:
        mean = sum(values[metric] for values in expected.values()) / len(expected)
        assert trec.aggregate[metric] == pytest.approx(mean, abs=1e-9)
    # micro recall weighs queries by their number of relevant docs
    found = total = 0
    for qid, judged in qrels.items():
        relevant = {doc for doc, rel in judged.items() if rel > 0}
        top = sorted(run[qid], key=lambda doc: (run[qid][doc], doc), reverse=True)[:100]
        found += len(relevant & set(top))
        total += len(relevant)
    assert paper.aggregate["R@100"] == pytest.approx(found / total)
    assert paper.aggregate["R@100"] != pytest.approx(trec.aggregate["R@100"])


# --- significance --------------------------------------------------------------------------------


def _ranked_run(qrels, relevant_rank: dict[str, int]) -> dict[str, dict[str, float]]:
    """Put each query's single relevant doc at the given rank behind fillers."""
    run = {}
    for qid, judged in qrels.items():
        rank = relevant_rank[qid]
        scores = {f"filler{i}": 100.0 - i for i in range(1, rank)}
        scores[next(iter(judged))] = 100.0 - rank
        run[qid] = scores
    return run


def test_paired_test() -> None:
    rng = random.Random(5)
    qrels = {f"q{i}": {f"rel{i}": 1} for i in range(40)}
    base = evaluate_run(_ranked_run(qrels, {q: rng.randint(3, 10) for q in qrels}), qrels, name="base")
    better = evaluate_run(_ranked_run(qrels, {q: rng.randint(1, 2) for q in qrels}), qrels, name="better")
    same = evaluate_run(_ranked_run(qrels, {q: 1 for q in qrels}), qrels, name="same")
    assert paired_test(base, base, "MRR@10") == 1.0
    assert paired_test(same, same, "R@10") == 1.0  # all-equal vectors: no NaN
    assert paired_test(base, better, "MRR@10") < 0.05
    with pytest.raises(ValueError, match="no metric"):
        paired_test(base, better, "infAP")


def test_paired_test_refuses_mixed_definitions() -> None:
    a = evaluate_run(_tiny_run(), QRELS, "trec")
    b = evaluate_run(_tiny_run(), QRELS, "coresearch")
    with pytest.raises(ValueError, match="different metric definitions"):
        paired_test(a, b, "R@10")
    assert paired_test(b, b, "R@10") == 1.0


# --- reports -------------------------------------------------------------------------------------


def _two_evaluations() -> list[Evaluation]:
    qrels = {f"q{i}": {f"rel{i}": 1} for i in range(30)}
    base = evaluate_run(_ranked_run(qrels, {q: 5 + i % 3 for i, q in enumerate(qrels)}), qrels, name="bm25")
    other = evaluate_run(_ranked_run(qrels, {q: 1 + i % 2 for i, q in enumerate(qrels)}), qrels, name="dense")
    return [base, other]


def test_render_table() -> None:
    console = Console(file=io.StringIO(), width=140, color_system=None)
    table = render_table(_two_evaluations(), console)
    text = console.file.getvalue()
    for metric in METRICS:
        assert metric in text
    assert "bm25" in text and "dense" in text
    assert "†" in text and "p < 0.05" in text
    # MRR@10 of the base: ranks 5, 6, 7 cycling -> (1/5 + 1/6 + 1/7) / 3 ×100 = 16.98
    assert "16.98" in text
    assert "queries" in text and "30" in text
    assert table.row_count == len(METRICS) + 1


def test_to_json_keys_and_fractions() -> None:
    evaluations = _two_evaluations()
    data = to_json(evaluations)
    json.dumps(data)  # serialisable
    assert list(data) == ["bm25", "dense"]
    assert list(data["bm25"]) == ["MRR@10", "mAP@10", "mAP@50", "R@10", "R@50", "R@100", "R@500"]
    assert data["bm25"]["MRR@10"] == pytest.approx((1 / 5 + 1 / 6 + 1 / 7) / 3)  # a fraction, not ×100


def test_per_query_csv(tmp_path) -> None:
    evaluations = _two_evaluations()
    path = tmp_path / "out" / "per_query.csv"
    assert write_per_query_csv(evaluations, path) == 60
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["run", "qid", *METRICS]
    assert len(rows) == 60
    first = rows[0]
    assert first["run"] == "bm25" and first["qid"] == "q0"
    assert float(first["MRR@10"]) == pytest.approx(1 / 5)
    assert not list(path.parent.glob(".*.tmp"))  # written atomically, no leftovers


# --- files ---------------------------------------------------------------------------------------


def test_evaluate_files_names_and_duplicate_stems(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_qrels(tmp_path / "qrels.txt", [("q1", "a", 1), ("q1", "b", 1), ("q2", "c", 1)])
    rows = [RunRow("q1", "a", 1, 2.0, "t"), RunRow("q1", "n", 2, 1.0, "t"), RunRow("q2", "c", 1, 1.0, "t")]
    paths = [tmp_path / "bm25.trec", tmp_path / "x" / "dense.txt", tmp_path / "y" / "dense.txt"]
    for path in paths:
        write_run(path, rows)
    evaluations = evaluate_files(paths, tmp_path / "qrels.txt", definition="coresearch")
    assert [e.name for e in evaluations] == ["bm25", "x/dense.txt", "y/dense.txt"]
    ev = evaluations[0]
    assert ev.definition == "coresearch"
    # q1: a at 1, b missing -> R@10 1/2; q2: c at 1 -> 1/1; micro (1 + 1) / (2 + 1) = 2/3
    assert ev.aggregate["R@10"] == pytest.approx(2 / 3)
    assert ev.aggregate["MRR@10"] == pytest.approx(1.0)
    with pytest.raises(InputError):
        evaluate_files([tmp_path / "bm25.trec"], tmp_path / "qrels.txt", definition="nope")


def test_nan_free_aggregates_with_no_relevant_query() -> None:
    # a query judged only non-relevant counts 0 (as trec_eval does) and is reported
    ev = evaluate_run({"q1": {"a": 1.0}, "q2": {"b": 1.0}}, {"q1": {"a": 1}, "q2": {"b": 0}}, "coresearch")
    assert all(not math.isnan(v) for v in ev.aggregate.values())
    assert ev.aggregate["MRR@10"] == pytest.approx(0.5)
    assert ev.aggregate["R@10"] == pytest.approx(1.0)  # micro: 1 found / 1 relevant
    assert any("no relevant document" in w for w in ev.warnings)
