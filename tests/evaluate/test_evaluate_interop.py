"""Run files and evaluation as the field's tools see them: run files in trec_eval's own order
(score as a C float descending, then passage id descending) with no score ties left, so that
`corefsearch evaluate`, pytrec_eval, ir-measures and the trec_eval binary agree on every metric;
`evaluate --metrics`, `--output-format csv`, `--plot`, the significance footnote; and
`query --dataset --qid`."""

from __future__ import annotations

import array
import csv
import io
import json
import math
import random
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.evaluate import (
    METRICS,
    cutoff_curve,
    evaluate_files,
    evaluate_run,
    parse_metrics,
    plot_curves,
    rank_documents,
    render_table,
    to_csv,
    write_per_query_csv,
)
from corefsearch.evaluate.trec_eval_binary import extract_trec_eval
from corefsearch.io.trec import RunRow, read_qrels, read_run, trec_eval_order, write_qrels, write_run

java = pytest.mark.java
runner = CliRunner(env={"COLUMNS": "250"})

EXTRA = ["nDCG@10", "P@5", "P@10", "RR", "AP", "R@1000", "infAP"]
# Our metric -> trec_eval / pytrec_eval measure (MRR@10: recip_rank within the top 10).
TREC_EVAL = {"MRR@10": "recip_rank", "mAP@10": "map_cut_10", "mAP@50": "map_cut_50", "R@10": "recall_10",
             "R@50": "recall_50", "R@100": "recall_100", "R@500": "recall_500", "nDCG@10": "ndcg_cut_10",
             "P@5": "P_5", "P@10": "P_10", "RR": "recip_rank", "AP": "map", "R@1000": "recall_1000",
             "infAP": "infAP"}
PYTREC_MEASURES = {"recip_rank", "map_cut.10,50", "recall.10,50,100,500,1000", "ndcg_cut.10", "P.5,10", "map",
                   "infAP"}
ALL = [*METRICS, *EXTRA]


def c_float(value: float) -> float:
    return array.array("f", [value])[0]


def listed(path: Path) -> dict[str, list[tuple[str, int, str]]]:
    """``{qid: [(passage, rank, score text), ...]}`` in file order."""
    rows: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        qid, q0, doc, rank, score, _tag = line.split()
        assert q0 == "Q0"
        rows[qid].append((doc, int(rank), score))
    return rows


def assert_trec_eval_ready(path: Path, scores: dict[str, dict[str, float]]) -> None:
    """The file lists each query in trec_eval's order of ``scores`` (as written, 6 decimals), ranks
    1..n, and no two of its scores tie as trec_eval reads them."""
    for qid, rows in listed(path).items():
        expected = trec_eval_order({doc: float(f"{score:.6f}") for doc, score in scores[qid].items()})
        assert [doc for doc, _, _ in rows] == expected, qid
        assert [rank for _, rank, _ in rows] == list(range(1, len(rows) + 1))
        as_read = [c_float(float(text)) for _, _, text in rows]
        assert all(a > b for a, b in zip(as_read, as_read[1:], strict=False)), qid


def pytrec_means(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """pytrec_eval's values, means over every qrels query (missing ones 0, as trec_eval -c)."""
    import pytrec_eval

    per_query = pytrec_eval.RelevanceEvaluator(qrels, PYTREC_MEASURES).evaluate(run)
    sums = dict.fromkeys(ALL, 0.0)
    for values in per_query.values():
        for metric in ALL:
            value = values[TREC_EVAL[metric]]
            sums[metric] += 0.0 if metric == "MRR@10" and value < 0.1 - 1e-12 else value
    return {metric: total / len(qrels) for metric, total in sums.items()}


def ir_measures_means(run_path: Path, qrels_path: Path) -> dict[str, float]:
    """ir-measures on the files as a user reads them, means over every qrels query."""
    import ir_measures

    from corefsearch.evaluate.metrics import ir_measures_name

    measures = {metric: ir_measures.parse_measure(ir_measures_name(metric)) for metric in ALL}
    by_measure = {str(measure): metric for metric, measure in measures.items()}
    qrels = list(ir_measures.read_trec_qrels(str(qrels_path)))
    sums = dict.fromkeys(ALL, 0.0)
    for value in ir_measures.iter_calc(list(measures.values()), qrels, ir_measures.read_trec_run(str(run_path))):
        sums[by_measure[str(value.measure)]] += value.value
    return {metric: total / len({q.query_id for q in qrels}) for metric, total in sums.items()}


def trec_eval_means(binary: Path, run: Path, qrels: Path) -> dict[str, float]:
    def call(*args: str) -> dict[str, float]:
        done = subprocess.run([str(binary), "-c", *args, str(qrels), str(run)], capture_output=True, text=True,
                              check=True, timeout=120)
        return {measure: float(value) for measure, _, value in (line.split() for line in done.stdout.splitlines())}

    values = call("-m", "map_cut.10,50", "-m", "recall.10,50,100,500,1000", "-m", "ndcg_cut.10", "-m", "P.5,10",
                  "-m", "recip_rank", "-m", "map", "-m", "infAP")
    top10 = call("-M", "10", "-m", "recip_rank")  # trec_eval sorts, then keeps 10 per query
    return {metric: top10["recip_rank"] if metric == "MRR@10" else values[TREC_EVAL[metric]] for metric in ALL}


# --- write_run: trec_eval's order, ranks 1..n, no ties ------------------------------------------------


def _tied_run(seed: int = 7) -> dict[str, dict[str, float]]:
    """Scores with many ties: one decimal, and pairs that differ only beyond a C float (at 20-30)."""
    rng = random.Random(seed)
    run: dict[str, dict[str, float]] = {}
    for q in range(30):
        docs = rng.sample([f"p{i:03d}" for i in range(400)], rng.randint(5, 200))
        scale = rng.choice([1.0, 25.0])
        run[f"q{q}"] = {doc: scale + round(rng.random(), 1) for doc in docs}
        if scale > 1:  # 6-decimal values that a C float cannot tell apart
            run[f"q{q}"][docs[0]] = 25.000001
            run[f"q{q}"][docs[1]] = 25.000002
    return run


def test_write_run_lists_trec_evals_order_without_ties(tmp_path: Path) -> None:
    run = _tied_run()
    rows = [RunRow(qid, doc, 0, score, "t") for qid, scores in run.items()
            for doc, score in random.Random(1).sample(sorted(scores.items()), len(scores))]  # any order in
    path = tmp_path / "tied.trec"
    assert write_run(path, rows) == len(rows)
    assert_trec_eval_ready(path, run)
    assert c_float(25.000001) == c_float(25.000002)  # the premise: trec_eval ties them
    written = read_run(path)
    for qid, scores in run.items():
        # lowered by whole steps of the last decimal, never past the next score
        assert all(0 <= scores[doc] - written[qid][doc] < 1e-3 for doc in scores)
    # trec_eval's ranking, hence every metric, is that of the scores as given
    qrels = {qid: {doc: 1 for doc in sorted(scores)[::7]} for qid, scores in run.items()}
    before, after = pytrec_means(run, qrels), pytrec_means(written, qrels)
    for metric in ALL:
        assert after[metric] == pytest.approx(before[metric], abs=1e-12), metric


def test_write_run_refuses_what_trec_eval_refuses(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="score nan"):
        write_run(tmp_path / "nan.trec", [RunRow("q1", "a", 1, math.nan, "t")])
    with pytest.raises(ValueError, match="written twice"):
        write_run(tmp_path / "twice.trec", [RunRow("q1", "a", 1, 2.0, "t"), RunRow("q1", "a", 2, 1.0, "t")])
    with pytest.raises(ValueError, match="must come together"):
        write_run(tmp_path / "split.trec", [RunRow("q1", "a", 1, 2.0, "t"), RunRow("q2", "a", 1, 1.0, "t"),
                                            RunRow("q1", "b", 2, 1.0, "t")])
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_ranking_compares_scores_as_c_floats() -> None:
    import pytrec_eval

    # 25.000002 > 25.000001 as doubles, but equal as C floats: trec_eval ranks "a" below "b"
    scores = {"a": 25.000002, "b": 25.000001}
    assert rank_documents(scores) == ["b", "a"]
    evaluator = pytrec_eval.RelevanceEvaluator({"q": {"a": 1}}, {"recip_rank"})
    assert evaluator.evaluate({"q": scores})["q"]["recip_rank"] == 0.5
    assert evaluate_run({"q": scores}, {"q": {"a": 1}}).per_query["q"]["MRR@10"] == 0.5


# --- agreement on a real BM25 run with many ties ---------------------------------------------------------


@pytest.fixture(scope="module")
def tied_bm25(subset_dataset: Path, subset_index: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Path, Path, dict[str, dict[str, float]]]:
    """A BM25 run of the subset's test queries (k = 200) with its scores cut to one decimal (ties
    everywhere), written by write_run; the qrels; and the tied scores."""
    from corefsearch.datasets.dataset import read_queries
    from corefsearch.sparse.search import BM25Searcher

    queries = read_queries(subset_dataset / "queries" / "test.jsonl")
    scores: dict[str, dict[str, float]] = {}
    for query, hits in BM25Searcher(subset_index).search(queries, 200):
        scores[query.id] = {hit.passage_id: round(hit.score, 1) for hit in hits}
    path = tmp_path_factory.mktemp("tied") / "bm25-tied.trec"
    write_run(path, [RunRow(qid, doc, 0, score, "bm25") for qid, docs in scores.items()
                     for doc, score in docs.items()])
    return path, subset_dataset / "qrels" / "test.txt", scores


@java
def test_tools_agree_on_every_metric(tied_bm25: tuple[Path, Path, dict[str, dict[str, float]]],
                                     tmp_path: Path) -> None:
    path, qrels_path, scores = tied_bm25
    ties = sum(len(docs) - len(set(docs.values())) for docs in scores.values())
    assert ties > 1000  # the run is full of ties, and the file has none left:
    assert_trec_eval_ready(path, scores)
    ours = evaluate_files([path], qrels_path, metrics=ALL)[0].aggregate
    qrels = read_qrels(qrels_path)
    columns = {"pytrec_eval on the tied scores": pytrec_means(scores, qrels),
               "pytrec_eval on the file": pytrec_means(read_run(path), qrels),
               "ir-measures on the file": ir_measures_means(path, qrels_path)}
    binary = extract_trec_eval(tmp_path)
    if binary is not None:  # trec_eval itself (prints 4 decimals)
        columns["trec_eval on the file"] = trec_eval_means(binary, path, qrels_path)
    for tool, values in columns.items():
        for metric in ALL:
            assert values[metric] == pytest.approx(ours[metric], abs=1e-4), (tool, metric)


@java
def test_search_writes_runs_in_trec_evals_order(subset_dataset: Path, subset_index: Path, tmp_path: Path) -> None:
    from corefsearch.search.options import SearchOptions
    from corefsearch.search.pipeline import search_to_run

    out = tmp_path / "bm25.trec"
    search_to_run(subset_index, subset_dataset / "queries" / "test.jsonl", out, SearchOptions(k=100))
    assert_trec_eval_ready(out, read_run(out))
    assert listed(out)  # a real run


# --- evaluate --metrics, CSV, significance footnote -----------------------------------------------------


def test_parse_metrics() -> None:
    assert parse_metrics("nDCG@10, P@5,RR,RR@10,AP@10,infAP") == ["nDCG@10", "P@5", "RR", "RR@10", "AP@10", "infAP"]
    assert parse_metrics("defaults,nDCG@10,MRR@10") == [*METRICS, "nDCG@10"]
    assert parse_metrics(["R@1000", "mAP@5"]) == ["R@1000", "mAP@5"]
    for bad in ("nDCG@10,foo", "ndcg@10", ""):
        with pytest.raises(InputError, match="--metrics") as info:
            parse_metrics(bad)
        assert "nDCG@10, P@5" in str(info.value) and "\n" not in str(info.value)


def _run_and_qrels() -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    rng = random.Random(3)
    run, qrels = {}, {}
    for q in range(40):
        docs = [f"d{i}" for i in range(300)]
        qrels[f"q{q}"] = {doc: 1 for doc in rng.sample(docs, rng.randint(1, 15))}
        run[f"q{q}"] = {doc: round(rng.random(), 2) for doc in rng.sample(docs, rng.randint(10, 300))}
    return run, qrels


@pytest.mark.parametrize("definition", ["trec", "coresearch"])
def test_extra_metrics_are_trec_evals_and_defaults_keep_the_definition(definition: str) -> None:
    run, qrels = _run_and_qrels()
    chosen = parse_metrics("defaults,nDCG@10,P@5,RR,AP,R@1000,infAP,MRR@50")
    ev = evaluate_run(run, qrels, definition, metrics=chosen)
    assert list(ev.aggregate) == chosen
    expected = pytrec_means(run, qrels)
    # R@1000 is one of ours (R@k): micro-averaged under "coresearch", like R@100 below
    for metric in ("nDCG@10", "P@5", "RR", "AP", "infAP", *(["R@1000"] if definition == "trec" else [])):
        assert ev.aggregate[metric] == pytest.approx(expected[metric], abs=1e-9), metric
        assert set(ev.per_query) == set(qrels) and all(metric in v for v in ev.per_query.values())
    default = evaluate_run(run, qrels, definition)
    for metric in METRICS:
        assert ev.aggregate[metric] == pytest.approx(default.aggregate[metric])
    if definition == "coresearch":  # R@k micro-averaged, as the default table under this definition
        found = sum(len(set(rank_documents(run[q])[:100]) & set(qrels[q])) for q in qrels)
        assert ev.aggregate["R@100"] == pytest.approx(found / sum(len(v) for v in qrels.values()))
    else:
        assert ev.aggregate["R@100"] == pytest.approx(expected["R@100"])


def test_csv_and_per_query_csv_carry_the_chosen_metrics(tmp_path: Path) -> None:
    run, qrels = _run_and_qrels()
    chosen = ["MRR@10", "nDCG@10", "P@5"]
    evaluations = [evaluate_run(run, qrels, name="a", metrics=chosen),
                   evaluate_run({q: {d: -s for d, s in docs.items()} for q, docs in run.items()}, qrels, name="b",
                                metrics=chosen)]
    rows = list(csv.DictReader(io.StringIO(to_csv(evaluations))))
    assert list(rows[0]) == ["run", *chosen, "queries"]
    assert [row["run"] for row in rows] == ["a", "b"]
    for row, evaluation in zip(rows, evaluations, strict=True):
        assert {m: float(row[m]) for m in chosen} == pytest.approx(evaluation.aggregate)
        assert row["queries"] == "40"
    write_per_query_csv(evaluations, tmp_path / "pq.csv")
    with (tmp_path / "pq.csv").open(newline="") as handle:
        per_query = list(csv.DictReader(handle))
    assert list(per_query[0]) == ["run", "qid", *chosen] and len(per_query) == 80
    assert float(per_query[0]["nDCG@10"]) == pytest.approx(evaluations[0].per_query["q0"]["nDCG@10"])


def test_significance_footnote_only_with_several_runs() -> None:
    run, qrels = _run_and_qrels()
    one = evaluate_run(run, qrels, name="a")
    two = evaluate_run({q: {d: -s for d, s in docs.items()} for q, docs in run.items()}, qrels, name="b")

    def text(evaluations: list[Any], definition: str = "trec") -> str:
        console = Console(file=io.StringIO(), width=200, color_system=None)
        render_table(evaluations, console)
        return console.file.getvalue()

    alone = text([one])
    assert "t-test" not in alone and "†" not in alone and "p <" not in alone
    assert "t-test" in text([one, two]) and "p < 0.05 vs a" in text([one, two])
    paper = evaluate_run(run, qrels, "coresearch", name="a")
    alone = " ".join(text([paper]).split())
    assert "micro-averaged" in alone and "t-test" not in alone and "tested on" not in alone


def _cli(*args: object) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def test_cli_metrics_csv_and_errors(tmp_path: Path) -> None:
    run, qrels = _run_and_qrels()
    run_path, qrels_path = tmp_path / "a.trec", tmp_path / "qrels.txt"
    write_run(run_path, [RunRow(q, d, 0, s, "t") for q, docs in run.items() for d, s in docs.items()])
    write_qrels(qrels_path, [(q, d, r) for q, docs in qrels.items() for d, r in docs.items()])
    result = _cli("evaluate", run_path, "--qrels", qrels_path, "--metrics", "MRR@10,nDCG@10,P@5", "--output-format",
                  "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == ["run", "MRR@10", "nDCG@10", "P@5", "queries"] and rows[0]["run"] == "a"
    table = _cli("evaluate", run_path, "--qrels", qrels_path, "--metrics", "defaults,nDCG@10").stdout
    assert "nDCG@10" in table and "R@500" in table and "t-test" not in table
    for args, message in ((["--metrics", "nDCG@10,bogus"], "--metrics: unknown metric 'bogus'"),
                          (["--output-format", "xml"], "--output-format must be table, json or csv")):
        result = _cli("evaluate", run_path, "--qrels", qrels_path, *args)
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert message in result.output and len(result.output.strip().splitlines()) == 1


# --- --plot ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("definition", ["trec", "coresearch"])
def test_curves_equal_the_evaluated_values(definition: str) -> None:
    run, qrels = _run_and_qrels()
    run["q0"] = {}  # a query without results counts 0 in both
    curve = cutoff_curve(run, qrels, definition, "a")
    assert curve.ks == list(range(1, max(len(docs) for docs in run.values()) + 1))  # 1..the longest list
    ev = evaluate_run(run, qrels, definition, metrics=["MRR@10", "MRR@50", "R@10", "R@50", "R@100"])
    for k in (10, 50):
        recall, mrr = curve.at(k)
        assert recall == pytest.approx(ev.aggregate[f"R@{k}"], abs=1e-12)
        assert mrr == pytest.approx(ev.aggregate[f"MRR@{k}"], abs=1e-12)
    assert curve.at(100)[0] == pytest.approx(ev.aggregate["R@100"], abs=1e-12)
    assert curve.recall == sorted(curve.recall) and curve.mrr == sorted(curve.mrr)  # never fall with k


def test_plot_writes_a_png(tmp_path: Path) -> None:
    run, qrels = _run_and_qrels()
    curves = [cutoff_curve(run, qrels, name="a"),
              cutoff_curve({q: {d: -s for d, s in docs.items()} for q, docs in run.items()}, qrels, name="b")]
    path = tmp_path / "plots" / "curves.png"
    plot_curves(curves, path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert sorted(p.name for p in path.parent.iterdir()) == ["curves.png"]  # no temporary or lock file left


def test_cli_plot(tmp_path: Path) -> None:
    run, qrels = _run_and_qrels()
    run_path, qrels_path = tmp_path / "a.trec", tmp_path / "qrels.txt"
    write_run(run_path, [RunRow(q, d, 0, s, "t") for q, docs in run.items() for d, s in docs.items()])
    write_qrels(qrels_path, [(q, d, r) for q, docs in qrels.items() for d, r in docs.items()])
    result = _cli("evaluate", run_path, "--qrels", qrels_path, "--plot", tmp_path / "curves.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "folder.png").mkdir()
    for target in (tmp_path / "folder.png", run_path):  # refused before any work, one line
        result = _cli("evaluate", run_path, "--qrels", qrels_path, "--plot", target)
        assert result.exit_code == 1 and "--plot" in result.output and "Traceback" not in result.output
    assert run_path.read_text().startswith("q0 Q0 ")  # the run was not overwritten


# --- query --dataset --qid ------------------------------------------------------------------------------


def _passages(dataset: Path) -> dict[str, dict[str, Any]]:
    records = (json.loads(line) for line in (dataset / "passages.jsonl").read_text(encoding="utf-8").splitlines())
    return {record["id"]: record for record in records}


@java
def test_query_by_qid_marks_relevant_hits_and_gold_mentions(subset_dataset: Path, subset_index: Path) -> None:
    qrels = read_qrels(subset_dataset / "qrels" / "test.txt")
    queries = [json.loads(line) for line in (subset_dataset / "queries" / "test.jsonl").read_text().splitlines()]
    passages = _passages(subset_dataset)
    # a query whose top 10 holds relevant passages
    for query in queries:
        result = _cli("query", "--index", subset_index, "--dataset", subset_dataset, "--qid", query["id"], "--k", "10",
                      "--json")
        assert result.exit_code == 0, result.output
        answer = json.loads(result.stdout)
        if any(hit["relevant"] for hit in answer["hits"]):
            break
    else:
        pytest.fail("no query of the subset has a relevant passage in its BM25 top 10")
    relevant = {doc for doc, rel in qrels[query["id"]].items() if rel > 0}
    assert answer["query"]["id"] == query["id"] and answer["query"]["split"] == "test"
    assert answer["query"]["mention"] == query["mention"] and answer["query"]["context"] == query["text"]
    assert answer["query"]["relevant_passages"] == len(relevant)
    for hit in answer["hits"]:
        assert hit["passage_id"] != query["passage_id"]  # its own passage is left out, as in search
        assert hit["relevant"] == (hit["passage_id"] in relevant)
        gold = sorted((m["start"], m["end"]) for m in passages[hit["passage_id"]]["mentions"]
                      if m["cluster_id"] == query["cluster_id"])
        assert [(g["start"], g["end"]) for g in hit["gold_mentions"]] == (gold if hit["relevant"] else [])
        for g in hit["gold_mentions"]:
            assert hit["text"][g["start"]:g["end"]] == g["text"]
    table = _cli("query", "--index", subset_index, "--dataset", subset_dataset, "--qid", query["id"], "--k", "10")
    assert table.exit_code == 0, table.output
    first = next(hit for hit in answer["hits"] if hit["relevant"])
    row = next(line for line in table.stdout.splitlines() if f" {first['passage_id']} " in line)
    assert "✓" in row
    assert f"⟦{first['gold_mentions'][0]['text']}⟧" in table.stdout
    found = sum(h["relevant"] for h in answer["hits"])
    assert f"{found} of the 10 hits {'is' if found == 1 else 'are'} relevant" in table.stdout


@java
def test_query_by_qid_errors(subset_dataset: Path, subset_index: Path) -> None:
    qid = json.loads((subset_dataset / "queries" / "test.jsonl").read_text().splitlines()[0])["id"]
    cases = [(["--qid", qid], "--qid needs the dataset"),
             (["--qid", qid, "--dataset", subset_dataset, "--mention", "trial"], "leave out --mention"),
             (["--qid", qid, "--dataset", subset_dataset, "--context", "a trial"], "leave out --context"),
             (["--qid", "no-such-query", "--dataset", subset_dataset],
              f"query 'no-such-query' is not in the dataset {subset_dataset}"),
             (["--dataset", subset_dataset, "--mention", "trial"], "add --qid"),
             ([], "give --mention")]
    for args, message in cases:
        result = _cli("query", "--index", subset_index, *args)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert message in " ".join(result.output.split()), (args, result.output)
