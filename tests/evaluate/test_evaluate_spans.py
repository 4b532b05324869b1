"""Tests of the reader's span evaluation (corefsearch.evaluate.spans): SQuAD v1.1 normalisation,
hand-computed EM and F1 on a hand-built dataset, the overlap rule, bad spans files, the
reports and ``corefsearch evaluate --spans``."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from corefsearch.base.artefacts import DATASET
from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.evaluate import (
    METRICS,
    evaluate_files,
    exact_match,
    normalize_answer,
    read_spans,
    render_table,
    score_spans,
    to_json,
    token_f1,
    write_per_query_csv,
)
from corefsearch.io.trec import RunRow, write_qrels, write_run

runner = CliRunner(env={"COLUMNS": "250"})

# --- SQuAD v1.1 normalisation and scores -------------------------------------------------------


@pytest.mark.parametrize(("text", "normalised"), [
    ("The Quick, brown fox!", "quick brown fox"),       # case, punctuation, leading article
    ("an apple a day", "apple day"),                    # every article
    ("theatre and anthem", "theatre and anthem"),       # articles only as whole words
    ("  spread \t out\n", "spread out"),                # white space collapsed
    ("U.S.-led", "usled"),                              # punctuation removed, not replaced by a space
    ("", ""),
])
def test_normalize_answer(text: str, normalised: str) -> None:
    assert normalize_answer(text) == normalised


def test_exact_match_and_f1() -> None:
    assert exact_match("The Storm.", "storm") == 1.0
    assert exact_match("storms", "storm") == 0.0
    assert token_f1("the storm", "Storm!") == 1.0
    # pred [earthquake, damaged], gold [lima, earthquake]: 1 shared; P = R = 1/2
    assert token_f1("earthquake damaged", "Lima earthquake") == pytest.approx(0.5)
    # bag overlap: pred [x, y, y], gold [y]: 1 shared; P = 1/3, R = 1 -> 2·(1/3)/(4/3) = 1/2
    assert token_f1("x y y", "y") == pytest.approx(0.5)
    assert token_f1("", "storm") == 0.0
    assert token_f1("a the", "an") == 0.0  # only articles: no tokens at all


# --- a hand-built dataset ----------------------------------------------------------------------
#
# P1 mentions "earthquake" twice, in two clusters: lima-quake (first) and quito-tremor (second).
# P2 "Lima earthquake" is lima-quake; P5 "TREMOR" is quito-tremor; P3 and P4 mention nothing.
# q1 asks for lima-quake, q2 for quito-tremor (test split), q3 for lima-quake (dev split).

P1 = "Officials said the earthquake struck Lima. An earthquake was felt in Quito."
P2 = "The Lima earthquake damaged the old cathedral."
P3 = "The earthquake in Lima was strong."
P4 = "Markets were calm."
P5 = "In Quito, the TREMOR, residents said, lasted long."


def _span(text: str, phrase: str, occurrence: int = 1) -> tuple[int, int]:
    start = -1
    for _ in range(occurrence):
        start = text.index(phrase, start + 1)
    return start, start + len(phrase)


def _mention(mention_id: str, text: str, phrase: str, cluster_id: str, occurrence: int = 1) -> dict[str, Any]:
    start, end = _span(text, phrase, occurrence)
    return {"mention_id": mention_id, "start": start, "end": end, "cluster_id": cluster_id, "type": "event"}


PASSAGES = [
    {"id": "P1", "doc_id": "d1", "title": "", "text": P1,
     "mentions": [_mention("m1", P1, "earthquake", "lima-quake"),
                  _mention("m2", P1, "earthquake", "quito-tremor", occurrence=2)]},
    {"id": "P2", "doc_id": "d2", "title": "", "text": P2,
     "mentions": [_mention("m3", P2, "Lima earthquake", "lima-quake")]},
    {"id": "P3", "doc_id": "d3", "title": "", "text": P3, "mentions": []},
    {"id": "P4", "doc_id": "d4", "title": "", "text": P4, "mentions": []},
    {"id": "P5", "doc_id": "d5", "title": "", "text": P5,
     "mentions": [_mention("m5", P5, "TREMOR", "quito-tremor")]},
]


def _query(qid: str, cluster_id: str) -> dict[str, Any]:
    text = "The quake shook the region."
    start, end = _span(text, "quake")
    return {"id": qid, "passage_id": "Q" + qid, "text": text, "start": start, "end": end, "mention": "quake",
            "cluster_id": cluster_id, "type": "event"}


QRELS = [("q1", "P1", 1), ("q1", "P2", 1), ("q1", "P3", 0), ("q2", "P1", 1), ("q2", "P5", 1), ("q3", "P2", 1)]


def _record(qid: str, passage_id: str, text: str, phrase: str, occurrence: int = 1,
            score: float = 1.0) -> dict[str, Any]:
    start, end = _span(text, phrase, occurrence)
    return {"qid": qid, "passage_id": passage_id, "start": start, "end": end, "text": phrase, "score": score}


# (q1, P1) "the earthquake" overlaps m1                 -> EM 1, F1 1 (article dropped)
# (q1, P2) "earthquake damaged" overlaps m3 "Lima earthquake" -> EM 0, F1 1/2
# (q1, P3) relevance 0: ignored, although its text would match nothing anyway
# (q1, P4) not judged: ignored
# (q2, P1) the FIRST "earthquake": same words as gold m2, but it overlaps only m1 (lima-quake) -> 0, 0
# (q2, P5) "the TREMOR," overlaps m5 "TREMOR"            -> EM 1, F1 1 (case, punctuation, article)
# 4 scored pairs: EM = 2/4, F1 = (1 + 1/2 + 0 + 1)/4 = 5/8; per query q1 EM 1/2 F1 3/4, q2 EM 1/2 F1 1/2.
SPANS = [
    _record("q1", "P1", P1, "the earthquake"),
    _record("q1", "P2", P2, "earthquake damaged"),
    _record("q1", "P3", P3, "earthquake"),
    _record("q1", "P4", P4, "Markets"),
    _record("q2", "P1", P1, "earthquake"),
    _record("q2", "P5", P5, "the TREMOR,"),
]


@dataclass
class Files:
    dataset: Path
    qrels: Path
    run: Path
    spans: Path


def _write_jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path: Path) -> Files:
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "manifest.json").write_text(json.dumps({"kind": DATASET.kind}) + "\n", encoding="utf-8")
    _write_jsonl(dataset / "passages.jsonl", PASSAGES)
    _write_jsonl(dataset / "queries" / "test.jsonl", [_query("q1", "lima-quake"), _query("q2", "quito-tremor")])
    _write_jsonl(dataset / "queries" / "dev.jsonl", [_query("q3", "lima-quake")])
    qrels = tmp_path / "qrels.txt"
    write_qrels(qrels, QRELS)
    run = tmp_path / "reader.trec"
    rows = [("q1", "P1"), ("q1", "P2"), ("q1", "P3"), ("q1", "P4"), ("q2", "P5"), ("q2", "P1"), ("q3", "P4")]
    write_run(run, [RunRow(qid, pid, rank, 10.0 - rank, "t") for rank, (qid, pid) in enumerate(rows, start=1)])
    spans = _write_jsonl(tmp_path / "reader.trec.spans.jsonl", SPANS)
    return Files(dataset, qrels, run, spans)


def _qrels_dict() -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for qid, pid, relevance in QRELS:
        qrels.setdefault(qid, {})[pid] = relevance
    return qrels


def test_hand_computed_em_and_f1(files: Files) -> None:
    scores = score_spans(files.spans, files.dataset, _qrels_dict())
    assert scores.n_pairs == 4
    assert scores.em == pytest.approx(2 / 4)
    assert scores.f1 == pytest.approx(5 / 8)
    assert scores.per_query["q1"] == pytest.approx({"EM": 1 / 2, "F1": 3 / 4})
    assert scores.per_query["q2"] == pytest.approx({"EM": 1 / 2, "F1": 1 / 2})
    assert "q3" not in scores.per_query  # no span for q3: nothing to score
    assert scores.warnings == []


def test_identical_text_elsewhere_scores_zero(files: Files) -> None:
    qrels = {"q2": {"P1": 1}}
    first = _record("q2", "P1", P1, "earthquake")  # the lima-quake one
    second = _record("q2", "P1", P1, "earthquake", occurrence=2)  # the gold quito-tremor mention
    for record, expected in ((first, 0.0), (second, 1.0)):
        _write_jsonl(files.spans, [record])
        scores = score_spans(files.spans, files.dataset, qrels)
        assert (scores.em, scores.f1) == (expected, expected)
    # overlapping the gold mention by one character is enough to be scored against it
    start, end = _span(P1, "earthquake", occurrence=2)
    _write_jsonl(files.spans, [{"qid": "q2", "passage_id": "P1", "start": end - 1, "end": end + 4,
                                "text": P1[end - 1:end + 4], "score": 0.5}])
    scores = score_spans(files.spans, files.dataset, qrels)
    assert scores.em == 0.0 and scores.f1 == 0.0  # "e was": no shared token after normalisation
    _write_jsonl(files.spans, [{"qid": "q2", "passage_id": "P1", "start": start - 3, "end": end,
                                "text": P1[start - 3:end], "score": 0.5}])
    assert score_spans(files.spans, files.dataset, qrels).em == 1.0  # "An earthquake"


def test_non_relevant_pairs_are_ignored(files: Files) -> None:
    # only the non-relevant (q1, P3) and unjudged (q1, P4) pairs: nothing is scored
    _write_jsonl(files.spans, [SPANS[2], SPANS[3]])
    scores = score_spans(files.spans, files.dataset, _qrels_dict())
    assert scores.n_pairs == 0 and scores.em == 0.0 and scores.f1 == 0.0 and scores.per_query == {}
    assert any("none of the 2 spans" in warning for warning in scores.warnings)


def test_pairs_outside_the_run_warn(files: Files) -> None:
    run = {"q1": {"P1": 2.0, "P2": 1.0}}
    scores = score_spans(files.spans, files.dataset, _qrels_dict(), run)
    assert scores.n_pairs == 4  # still scored
    assert any("4 of 6 spans are for (query, passage) pairs not in the run" in w and "q2" in w
               for w in scores.warnings)


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "invalid JSON"),
    ('["a list"]', "expected a JSON object"),
    ({"passage_id": "P1", "start": 0, "end": 3, "text": "Off", "score": 1.0}, "lacks the field 'qid'"),
    ({"qid": "q1", "passage_id": "P1", "start": "0", "end": 3, "text": "Off", "score": 1.0},
     "start must be an integer"),
    ({"qid": "q1", "passage_id": "P1", "start": 0.0, "end": 3, "text": "Off", "score": 1.0},
     "start must be an integer"),
    ({"qid": "q1", "passage_id": "P1", "start": False, "end": 3, "text": "Off", "score": 1.0},
     "start must be an integer"),
    ({"qid": 1, "passage_id": "P1", "start": 0, "end": 3, "text": "Off", "score": 1.0}, "qid must be a string"),
    ({"qid": "q1", "passage_id": "P1", "start": 0, "end": 3, "text": "Off", "score": "high"},
     "score must be a number"),
    ({"qid": "q1", "passage_id": "P1", "start": 5, "end": 3, "text": "", "score": 1.0}, "not a span"),
    ({"qid": "q1", "passage_id": "P1", "start": -1, "end": 3, "text": "", "score": 1.0}, "not a span"),
    (SPANS[0], "already have a span on line 1"),
])
def test_bad_record_names_file_and_line(files: Files, line: Any, message: str) -> None:
    _write_jsonl(files.spans, [SPANS[0], line])
    where = re.escape(str(files.spans))
    with pytest.raises(InputError, match=f"^{where}:2: .*{message}"):
        read_spans(files.spans)
    with pytest.raises(InputError, match=f"^{where}:2: "):
        score_spans(files.spans, files.dataset, _qrels_dict())


@pytest.mark.parametrize(("record", "message"), [
    ({"qid": "q9", "passage_id": "P1", "start": 0, "end": 3, "text": "Off", "score": 1.0}, "unknown query id 'q9'"),
    ({"qid": "q1", "passage_id": "P9", "start": 0, "end": 3, "text": "Off", "score": 1.0},
     "unknown passage id 'P9'"),
    ({"qid": "q1", "passage_id": "P4", "start": 0, "end": 99, "text": "Markets were calm.", "score": 1.0},
     "do not fit passage P4 of 18 characters"),
    ({"qid": "q1", "passage_id": "P4", "start": 0, "end": 7, "text": "Stocks!", "score": 1.0},
     "is not passage P4's text"),
])
def test_records_checked_against_the_dataset(files: Files, record: dict[str, Any], message: str) -> None:
    _write_jsonl(files.spans, [SPANS[0], SPANS[1], record])
    with pytest.raises(InputError, match=f"^{re.escape(str(files.spans))}:3: .*{message}"):
        score_spans(files.spans, files.dataset, _qrels_dict())


# --- evaluate_files and the reports -------------------------------------------------------------


def _row(table: str, label: str) -> str:
    """The cells of the table row labelled ``label``, without rich's box characters."""
    for line in table.splitlines():
        cells = line.replace("│", " ").replace("┃", " ").strip()
        if cells.startswith(label + " "):
            return cells
    raise AssertionError(f"no row {label!r} in\n{table}")


def test_evaluate_files_with_spans(files: Files, tmp_path: Path) -> None:
    ev, = evaluate_files([files.run], files.qrels, spans_paths=[files.spans], dataset=files.dataset)
    assert list(ev.aggregate) == [*METRICS, "EM", "F1"]
    assert ev.aggregate["EM"] == pytest.approx(0.5) and ev.aggregate["F1"] == pytest.approx(5 / 8)
    assert ev.n_span_pairs == 4
    assert ev.per_query["q1"]["F1"] == pytest.approx(3 / 4)
    assert "EM" not in ev.per_query["q3"] and "MRR@10" in ev.per_query["q3"]

    console = Console(file=io.StringIO(), width=200, color_system=None)
    render_table([ev], console)
    text = console.file.getvalue()
    assert "Ranking and span metrics ×100" in " ".join(text.split())  # the title wraps to the table's width
    assert _row(text, "EM").split()[1] == "50.00" and _row(text, "F1").split()[1] == "62.50"
    assert _row(text, "span pairs").split()[2] == "4"

    data = to_json([ev])["reader"]
    assert data["EM"] == pytest.approx(0.5) and data["F1"] == pytest.approx(5 / 8) and data["span_pairs"] == 4

    path = tmp_path / "per-query.csv"
    write_per_query_csv([ev], path)
    with path.open(newline="", encoding="utf-8") as handle:
        rows = {row["qid"]: row for row in csv.DictReader(handle)}
    assert list(rows["q1"]) == ["run", "qid", *METRICS, "EM", "F1"]
    assert float(rows["q1"]["EM"]) == pytest.approx(0.5) and float(rows["q2"]["F1"]) == pytest.approx(0.5)
    assert rows["q3"]["EM"] == rows["q3"]["F1"] == ""


def test_two_runs_with_spans_compare(files: Files) -> None:
    # the same run twice: the table's paired test runs on the queries both scored, with no error
    evaluations = evaluate_files([files.run, files.run], files.qrels, spans_paths=[files.spans, files.spans],
                                 dataset=files.dataset)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    render_table(evaluations, console)
    assert _row(console.file.getvalue(), "F1").split() == ["F1", "62.50", "62.50"]


def test_evaluate_files_spans_arguments(files: Files) -> None:
    with pytest.raises(InputError, match="one spans file per run.*2 run\\(s\\) but 1 spans"):
        evaluate_files([files.run, files.run], files.qrels, spans_paths=[files.spans], dataset=files.dataset)
    with pytest.raises(InputError, match="--dataset"):
        evaluate_files([files.run], files.qrels, spans_paths=[files.spans])
    with pytest.raises(InputError, match="--spans"):
        evaluate_files([files.run], files.qrels, dataset=files.dataset)


def test_without_spans_nothing_changes(files: Files) -> None:
    ev, = evaluate_files([files.run], files.qrels)
    assert list(ev.aggregate) == list(METRICS) and ev.n_span_pairs is None
    assert list(to_json([ev])["reader"]) == list(METRICS)


# --- the command line ---------------------------------------------------------------------------


def test_cli_evaluate_spans(files: Files) -> None:
    result = runner.invoke(app, ["evaluate", str(files.run), "--qrels", str(files.qrels),
                                 "--spans", str(files.spans), "--dataset", str(files.dataset)])
    assert result.exit_code == 0, result.output
    assert _row(result.stdout, "EM").split() == ["EM", "50.00"]
    assert _row(result.stdout, "F1").split() == ["F1", "62.50"]
    assert _row(result.stdout, "span pairs").split() == ["span", "pairs", "4"]

    result = runner.invoke(app, ["evaluate", str(files.run), "--qrels", str(files.qrels), "--spans", str(files.spans),
                                 "--dataset", str(files.dataset), "--output-format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reader"]["span_pairs"] == 4


def test_cli_spans_without_dataset_fails_clearly(files: Files) -> None:
    result = runner.invoke(app, ["evaluate", str(files.run), "--qrels", str(files.qrels), "--spans", str(files.spans)])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and result.stdout == ""
    message = " ".join(result.stderr.split())
    assert message.startswith("error:") and "--dataset" in message


def test_cli_bad_spans_line(files: Files) -> None:
    _write_jsonl(files.spans, [SPANS[0], {"qid": "q1"}])
    result = runner.invoke(app, ["evaluate", str(files.run), "--qrels", str(files.qrels),
                                 "--spans", str(files.spans), "--dataset", str(files.dataset)])
    assert result.exit_code == 1
    assert f"error: {files.spans}:2: spans record lacks the field 'passage_id'" in " ".join(result.stderr.split())
