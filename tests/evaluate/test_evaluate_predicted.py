"""`corefsearch evaluate --clusters` over predicted mentions: response mentions matched to the gold mentions by
exact span, twinless mentions scored as the CoNLL reference scorer v8 does (values computed by hand below),
both singleton settings, the match counts, and the one-line errors."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import CLUSTER_DOCS, write_jsonl
from helpers import write_cluster_dataset as write_dataset
from typer.testing import CliRunner

from corefsearch.base.artefacts import PREDICTED_MENTIONS, manifest_record, write_manifest
from corefsearch.cli import app
from corefsearch.cluster.run import cluster_dataset
from corefsearch.evaluate.coref_files import evaluate_cluster_settings

runner = CliRunner(env={"COLUMNS": "250"})
DOC_SPLITS = {"a": "train", "b": "train", "c": "dev", "d": "test"}  # the splits of CLUSTER_SPLITS, by document


def span(mention_id: str, passage_id: str, word: str, cluster_id: str, **extra: Any) -> dict[str, Any]:
    """A clusters-file line of a predicted mention: ``word`` in a passage of the mention clusterer's dataset."""
    doc_id, number = passage_id.rsplit("-", 1)
    start = CLUSTER_DOCS[doc_id][1][int(number)].index(word)
    return {"mention_id": mention_id, "cluster_id": cluster_id, "passage_id": passage_id, "doc_id": doc_id,
            "start": start, "end": start + len(word), **extra}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """The mention clusterer's dataset, each passage recording its document's split (dev: documents c1, c2)."""
    root = write_dataset(tmp_path / "ds")
    lines = [json.loads(line) for line in (root / "passages.jsonl").read_text().splitlines()]
    write_jsonl(root / "passages.jsonl", [{**line, "split": DOC_SPLITS[line["doc_id"][0]]} for line in lines])
    return root


# The dev key: quake {c1-earthquake, c2-quake}, die {c1-killed, c2-died}, rescue {c2-came} (5 gold mentions).
# The response finds earthquake, quake and killed (their exact spans), misses died and came, and adds the
# twinless struck, rescuers and village; "fire" lies in a train passage (left out, with a warning).
RESPONSE = [span("r-e", "c1-0", "earthquake", "A", detector="heuristic"), span("r-q", "c2-0", "quake", "A"),
            span("r-r", "c2-0", "rescuers", "A"), span("r-k", "c1-1", "killed", "B"),
            span("r-s", "c1-0", "struck", "B"), span("r-v", "c1-1", "village", "C"), span("r-f", "a1-0", "fire", "A")]


def f1(recall: float, precision: float) -> float:
    return 2 * recall * precision / (recall + precision) if recall + precision else 0.0


# Key K = {e,q} {k,d} {c}; response R = {e,q,r} {k,s} {v} (r, s, v twinless; d, c without a twin).
KEPT = {
    # MUC R: {e,q} one part: 1 of 1 link; {k,d}: k in B, d missing: 0 of 1; {c}: 0 of 0 -> 1/2.
    #     P: {e,q,r} -> {e,q},{r}: 1 of 2; {k,s} -> {k},{s}: 0 of 1; {v}: 0 of 0 -> 1/3.
    "MUC": (1 / 2, 1 / 3),
    # B³ R: (2²/2 + 1²/2 + 0) / 5 = 1/2;  P: (2²/3 + 1²/2 + 0) / 6 = 11/36.
    "B3": (1 / 2, 11 / 36),
    # CEAF-e: φ4({e,q},{e,q,r}) = 4/5, φ4({k,d},{k,s}) = 2/4; 1.3 over 3 key and 3 response clusters.
    "CEAF-e": (1.3 / 3, 1.3 / 3),
    # LEA R: (2·1/1 + 2·0/1 + 1·0) / 5 = 2/5 (the singleton {c} is unresolved);
    #     P: (3·1/3 + 2·0/1 + 1·0) / 6 = 1/6 (the twinless singleton {v} is a wrong self-link).
    "LEA": (2 / 5, 1 / 6),
}
# Singletons dropped from both sides: K = {e,q} {k,d}; R = {e,q,r} {k,s}.
DROPPED = {
    "MUC": (1 / 2, 1 / 3),  # singletons hold no link: as kept
    "B3": ((2 + 1 / 2) / 4, (4 / 3 + 1 / 2) / 5),  # 5/8, 11/30
    "CEAF-e": (1.3 / 2, 1.3 / 2),
    "LEA": (2 / 4, 1 / 5),
}


def check(values: dict[str, Any], expected: dict[str, tuple[float, float]]) -> None:
    for name, (recall, precision) in expected.items():
        assert (values[name]["recall"], values[name]["precision"], values[name]["f1"]) == pytest.approx(
            (recall, precision, f1(recall, precision)), abs=1e-12), name
    assert values["CoNLL F1"] == pytest.approx(sum(f1(*expected[n]) for n in ("MUC", "B3", "CEAF-e")) / 3)


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


def test_twinless_mentions_both_settings_by_hand(dataset: Path, tmp_path: Path) -> None:
    clusters = write_jsonl(tmp_path / "pred.jsonl", RESPONSE)
    result = evaluate("--clusters", clusters, "--dataset", dataset, "--split", "dev", "--output-format", "json")
    assert result.exit_code == 0, result.output
    kept, dropped = json.loads(result.stdout)  # predicted mentions: both settings unless --singletons says one
    assert (kept["singletons"], dropped["singletons"]) == ("keep", "drop")
    check(kept, KEPT)
    check(dropped, DROPPED)
    for values in (kept, dropped):
        assert (values["mentions"], values["detector"]) == ("predicted", "heuristic")
        assert (values["predicted_mentions"], values["matched_mentions"], values["gold_mentions"]) == (6, 3, 5)
    assert (kept["key_mentions"], kept["response_mentions"], dropped["key_mentions"],
            dropped["response_mentions"]) == (5, 6, 4, 5)
    assert "1 mention(s) in passages of other splits than dev ignored (e.g. r-f)" in result.stderr
    one = evaluate("--clusters", clusters, "--dataset", dataset, "--split", "dev", "--singletons", "drop",
                   "--output-format", "json")
    assert one.exit_code == 0, one.output
    check(json.loads(one.stdout), DROPPED)  # one setting asked: one object, as for gold mentions


def test_table_and_csv_report_the_matching(dataset: Path, tmp_path: Path) -> None:
    clusters = write_jsonl(tmp_path / "pred.jsonl", RESPONSE)
    table = evaluate("--clusters", clusters, "--dataset", dataset, "--split", "dev")
    assert table.exit_code == 0, table.output
    text = " ".join(table.stdout.split())
    assert ("predicted mentions (detector heuristic): 3 of 6 match a gold mention's span exactly; "
            "5 gold mentions") in text
    assert "predicted mentions, singletons kept" in text and "predicted mentions, singletons dropped" in text
    rows = list(csv.DictReader(io.StringIO(evaluate("--clusters", clusters, "--dataset", dataset, "--split", "dev",
                                                    "--output-format", "csv").stdout)))
    assert [(r["singletons"], r["mentions"], r["predicted_mentions"], r["matched_mentions"]) for r in rows] == [
        ("keep", "predicted", "6", "3"), ("drop", "predicted", "6", "3")]
    assert float(rows[1]["LEA_P"]) == pytest.approx(1 / 5)


@pytest.mark.parametrize("singletons", ["keep", "drop"])
def test_equal_mention_sets_score_as_gold_mentions(dataset: Path, tmp_path: Path, singletons: str) -> None:
    """The same partition of the dev mentions, once by gold ids and once by spans under other ids: equal scores."""
    gold_ids = {"c1-earthquake": "A", "c2-quake": "B", "c1-killed": "B", "c2-died": "A", "c2-came": "C"}
    words = {"c1-earthquake": ("c1-0", "earthquake"), "c2-quake": ("c2-0", "quake"), "c1-killed": ("c1-1", "killed"),
             "c2-died": ("c2-1", "died"), "c2-came": ("c2-0", "came")}
    by_id = write_jsonl(tmp_path / "ids.jsonl", [{"mention_id": m, "cluster_id": c} for m, c in gold_ids.items()])
    by_span = write_jsonl(tmp_path / "spans.jsonl", [span(f"p{i}", *words[m], c)
                                                     for i, (m, c) in enumerate(gold_ids.items())])
    (gold,) = evaluate_cluster_settings(by_id, dataset, "dev", singletons)
    (pred,) = evaluate_cluster_settings(by_span, dataset, "dev", singletons)
    assert pred.scores == gold.scores and pred.matching is not None and pred.matching.matched == 5
    assert 0 < gold.scores.conll_f1 < 1


def test_cluster_then_evaluate_predicted_mentions(dataset: Path, tmp_path: Path) -> None:
    """`cluster --mentions predicted` writes what `evaluate --clusters` matches: the dataset's own detections."""
    detections = [{k: line[k] for k in ("mention_id", "passage_id", "doc_id", "start", "end")} for line in RESPONSE]
    texts = {f"{d}-{n}": s for d, (_, sentences) in CLUSTER_DOCS.items() for n, s in enumerate(sentences)}
    write_jsonl(dataset / "predicted_mentions.jsonl", [
        {**m, "type": "event", "score": 1.0, "text": texts[m["passage_id"]][m["start"]:m["end"]]} for m in detections])
    write_manifest(dataset / "predicted_mentions.json", manifest_record(
        PREDICTED_MENTIONS, {"detector": {"name": "heuristic"}, "counts": {"mentions": len(detections)}}))
    cluster_dataset(dataset, tmp_path / "c.jsonl", method="singletons", split="dev", scope="corpus",
                    mentions="predicted")
    kept, dropped = evaluate_cluster_settings(tmp_path / "c.jsonl", dataset, "dev")
    assert kept.matching is not None and (kept.matching.predicted, kept.matching.matched) == (6, 3)
    assert kept.matching.detector == "heuristic"
    # every mention alone: B³ precision is the share of matched mentions (3 of 6), recall (1/2 + 1/2 + 1/2) / 5;
    # with singletons dropped no response is left
    assert kept.scores.b_cubed.precision == pytest.approx(3 / 6)
    assert kept.scores.b_cubed.recall == pytest.approx((1 / 2 + 1 / 2 + 1 / 2 + 0 + 0) / 5)
    assert dropped.scores.response_mentions == 0 and dropped.scores.conll_f1 == 0.0


def test_a_repeated_span_is_twinless(dataset: Path, tmp_path: Path) -> None:
    # the span of r-e again (as a detector finds it in two overlapping window passages): one twin only
    clusters = write_jsonl(tmp_path / "pred.jsonl", [*RESPONSE[:6], span("r-e2", "c1-0", "earthquake", "A")])
    kept, _ = evaluate_cluster_settings(clusters, dataset, "dev")
    assert kept.matching is not None and (kept.matching.predicted, kept.matching.matched) == (7, 3)
    assert "1 mention(s) repeat the span of a mention already matched to a gold one (e.g. r-e2 (the span of r-e)" in \
        kept.warnings[0]
    # B³ precision: A = {e, q, r, e2} holds 2 of quake (2²/4), B = {k, s} 1 of die (1²/2), C = {v} none; 7 mentions
    assert kept.scores.b_cubed.precision == pytest.approx((4 / 4 + 1 / 2) / 7)


def test_passages_without_a_split_are_scored_with_split_all(tmp_path: Path) -> None:
    plain = write_dataset(tmp_path / "plain")  # passages record no split: every gold mention is the key
    clusters = write_jsonl(tmp_path / "pred.jsonl", RESPONSE)
    assert fails("--clusters", clusters, "--dataset", plain, "--split", "dev") == (
        f"error: {plain / 'passages.jsonl'}: no passage records a split (a dataset of plain documents, or one split "
        "by clusters), so --split dev selects none; score with --split all")
    (kept,) = evaluate_cluster_settings(clusters, plain, "all", "keep")
    assert kept.matching is not None and (kept.matching.predicted, kept.matching.matched, kept.matching.gold) == (
        7, 4, 16)  # with every passage, "fire" (a train passage) matches a1-fire too
    default = evaluate("--clusters", clusters, "--dataset", plain, "--output-format", "json")  # all, by default
    assert default.exit_code == 0, default.output
    assert [(v["split"], v["matched_mentions"]) for v in json.loads(default.stdout)] == [("all", 4), ("all", 4)]


def test_bad_files_and_options(dataset: Path, tmp_path: Path) -> None:
    def file(name: str, *lines: Any) -> Path:
        return write_jsonl(tmp_path / name, list(lines))

    unknown = file("unknown.jsonl", RESPONSE[0], {**RESPONSE[1], "passage_id": "z9-0"})
    assert fails("--clusters", unknown, "--dataset", dataset, "--split", "dev") == (
        f"error: {unknown}:2: mention r-q: passage 'z9-0' is not in the dataset ({dataset / 'passages.jsonl'} has "
        "no such passage)")
    other_doc = file("doc.jsonl", {**RESPONSE[0], "doc_id": "c2"})
    assert fails("--clusters", other_doc, "--dataset", dataset, "--split", "dev") == (
        f"error: {other_doc}:1: mention r-e: names document c2, but passage c1-0 is of c1")
    too_long = file("long.jsonl", {**RESPONSE[0], "end": 99})
    assert "do not fit passage c1-0 (31 characters)" in fails("--clusters", too_long, "--dataset", dataset)
    mixed = file("mixed.jsonl", RESPONSE[0], {"mention_id": "c2-quake", "cluster_id": "A"})
    assert fails("--clusters", mixed, "--dataset", dataset, "--split", "dev") == (
        f"error: {mixed}:2: mention c2-quake: gives no span (passage_id, start, end), but line 1 does: a clusters "
        "file holds gold mentions (dataset ids) or predicted ones (each with its span), not both")
    mixed_gold = file("mixed-gold.jsonl", {"mention_id": "c2-quake", "cluster_id": "A"}, RESPONSE[0])
    assert "gives a span (passage_id, start, end), but line 1 does not" in fails(
        "--clusters", mixed_gold, "--dataset", dataset, "--split", "dev")
    twice = file("twice.jsonl", RESPONSE[0], {**RESPONSE[1], "mention_id": "r-e"})
    assert "mention r-e occurs twice (first on line 1)" in fails("--clusters", twice, "--dataset", dataset)
    no_span = file("empty-span.jsonl", {**RESPONSE[0], "end": RESPONSE[0]["start"]})
    assert "are not a non-empty span" in fails("--clusters", no_span, "--dataset", dataset, "--split", "dev")
    train_only = file("train.jsonl", RESPONSE[-1])
    assert fails("--clusters", train_only, "--dataset", dataset, "--split", "dev") == (
        f"error: {train_only} has no mention in a passage of the dev split (1 in passages of other splits); choose "
        "the split with --split")
    assert fails("--clusters", file("all.jsonl", {"mention_id": "c2-quake", "cluster_id": "A"}), "--dataset",
                 dataset, "--split", "all") == "error: --split must be one of train, dev, test, got 'all'"
    assert fails("--clusters", file("r.jsonl", *RESPONSE), "--dataset", dataset, "--singletons", "both") == (
        "error: --singletons must be keep or drop, got 'both'")
