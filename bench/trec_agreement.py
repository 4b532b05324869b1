"""trec_eval agreement: one run scored by `corefsearch evaluate`, trec_eval itself, pytrec_eval and ir-measures.

Each tool is called as a user would call it on the run file: ``corefsearch evaluate --output-format
json`` (a subprocess), the trec_eval binary that ships inside Pyserini's Anserini jar (``-c``),
``pytrec_eval.RelevanceEvaluator`` on ``read_run``'s dict, and ``ir_measures`` on
``ir_measures.read_trec_run``. Means are over every qrels query, a query without results counting
0 (trec_eval's ``-c``; pytrec_eval and ir-measures report only the queries of the run, so their
per-query values are summed and divided by the number of qrels queries here). MRR@10 is
``recip_rank`` of the top 10: trec_eval with ``-M 10`` (its own ordering, then the cut), pytrec_eval's
``recip_rank`` where it is at least 1/10; ir-measures' ``RR@10``.

The run: ``--run RUN --qrels QRELS``, or by default the ECB+ BM25 run the README's demo writes
(``work/demo/runs/bm25-mention+entities.trec``, test queries, k = 500), taken from ``work/demo``
if the demo ran, else built into ``--out-dir`` with the demo's commands (about 2 minutes).

Prints the table and writes it into ``bench/RESULTS.md`` under the section
``## trec_eval agreement (bench/trec_agreement.py)``, replacing that section if present and
keeping the others.

Run: ``python bench/trec_agreement.py [--run RUN --qrels QRELS] [--out-dir DIR] [--results bench/RESULTS.md]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from bm25 import cpu_model, markdown_table, write_section

from corefsearch.evaluate.metrics import METRICS, ir_measures_name
from corefsearch.evaluate.trec_eval_binary import extract_trec_eval
from corefsearch.io.trec import read_qrels, read_run, trec_eval_order, trec_eval_scores

REPO = Path(__file__).resolve().parent.parent
ECBPLUS = REPO / "data" / "ecbplus" / "ECBplus.tar.gz"
DEMO = REPO / "work" / "demo"
DEMO_RUN = Path("runs") / "bm25-mention+entities.trec"
DEMO_QRELS = Path("ecbplus-events") / "qrels" / "test.txt"
SECTION = "## trec_eval agreement (bench/trec_agreement.py)"
TOLERANCE = 1e-4

# Every metric compared: the defaults, then ir-measures names; each with its trec_eval measure.
EXTRA = ("nDCG@10", "P@5", "P@10", "RR", "AP", "R@1000", "infAP")
TREC_EVAL = {"MRR@10": "recip_rank", "mAP@10": "map_cut_10", "mAP@50": "map_cut_50", "R@10": "recall_10",
             "R@50": "recall_50", "R@100": "recall_100", "R@500": "recall_500", "nDCG@10": "ndcg_cut_10",
             "P@5": "P_5", "P@10": "P_10", "RR": "recip_rank", "AP": "map", "R@1000": "recall_1000",
             "infAP": "infAP"}
TREC_EVAL_ARGS = ["-m", "map_cut.10,50", "-m", "recall.10,50,100,500,1000", "-m", "ndcg_cut.10", "-m", "P.5,10",
                  "-m", "recip_rank", "-m", "map", "-m", "infAP"]


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def corefsearch(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "corefsearch.cli", *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"corefsearch {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def demo_run(out_dir: Path) -> tuple[Path, Path]:
    """The README demo's BM25 run: from work/demo when it is there, else built with the demo's commands."""
    if (DEMO / DEMO_RUN).is_file() and (DEMO / DEMO_QRELS).is_file():
        return DEMO / DEMO_RUN, DEMO / DEMO_QRELS
    dataset, index = out_dir / "ecbplus-events", out_dir / "index"
    log(f"building the demo's ECB+ dataset, index and BM25 run in {out_dir}")
    corefsearch("build-dataset", str(ECBPLUS), "--format", "ecbplus", "--mention-type", "event", "--out",
                str(dataset), "--overwrite")
    corefsearch("index", str(dataset), "--out", str(index), "--overwrite")
    corefsearch("search", "--index", str(index), "--queries", str(dataset / "queries" / "test.jsonl"),
                "--query-format", "mention+entities", "--k", "500", "--out", str(out_dir / DEMO_RUN))
    return out_dir / DEMO_RUN, out_dir / DEMO_QRELS


def trec_eval_values(binary: Path, run: Path, qrels: Path, metrics: Sequence[str]) -> dict[str, float]:
    def call(*args: str) -> dict[str, float]:
        done = subprocess.run([str(binary), "-c", *args, str(qrels), str(run)], capture_output=True, text=True,
                              check=True)
        return {measure: float(value) for measure, _, value in (line.split() for line in done.stdout.splitlines())}

    values = call(*TREC_EVAL_ARGS)
    top10 = call("-M", "10", "-m", "recip_rank")  # trec_eval orders, then keeps 10 per query
    return {metric: top10["recip_rank"] if metric == "MRR@10" else values[TREC_EVAL[metric]] for metric in metrics}


def pytrec_eval_values(run: Path, qrels: Path, metrics: Sequence[str]) -> dict[str, float]:
    import pytrec_eval

    judged = read_qrels(qrels)
    evaluator = pytrec_eval.RelevanceEvaluator(judged, {"recip_rank", "map_cut.10,50", "recall.10,50,100,500,1000",
                                                        "ndcg_cut.10", "P.5,10", "map", "infAP"})
    per_query = evaluator.evaluate(read_run(run))
    sums = dict.fromkeys(metrics, 0.0)
    for values in per_query.values():
        for metric in metrics:
            value = values[TREC_EVAL[metric]]
            if metric == "MRR@10" and value < 1 / 10 - 1e-12:  # first relevant beyond rank 10
                value = 0.0
            sums[metric] += value
    return {metric: total / len(judged) for metric, total in sums.items()}


def ir_measures_values(run: Path, qrels: Path, metrics: Sequence[str]) -> dict[str, float]:
    import ir_measures

    measures = {metric: ir_measures.parse_measure(ir_measures_name(metric)) for metric in metrics}
    by_measure = {str(measure): metric for metric, measure in measures.items()}
    n_queries = len({qrel.query_id for qrel in ir_measures.read_trec_qrels(str(qrels))})
    sums = dict.fromkeys(metrics, 0.0)
    for value in ir_measures.iter_calc(list(measures.values()), ir_measures.read_trec_qrels(str(qrels)),
                                       ir_measures.read_trec_run(str(run))):
        sums[by_measure[str(value.measure)]] += value.value
    return {metric: total / n_queries for metric, total in sums.items()}


def corefsearch_values(run: Path, qrels: Path, metrics: Sequence[str]) -> dict[str, float]:
    data = json.loads(corefsearch("evaluate", str(run), "--qrels", str(qrels), "--metrics", ",".join(metrics),
                                  "--output-format", "json"))
    return next(iter(data.values()))


def file_facts(run: Path) -> dict[str, int]:
    """Rows, queries, score ties as trec_eval reads them, and queries whose file order is not trec_eval's."""
    listed: dict[str, list[str]] = {}
    with run.open(encoding="utf-8") as handle:
        for line in handle:
            parts = line.split()
            if parts:
                listed.setdefault(parts[0], []).append(parts[2])
    scores = read_run(run)
    ties = 0
    for docs in scores.values():
        as_read = sorted(trec_eval_scores(docs.values()))
        ties += sum(1 for a, b in zip(as_read, as_read[1:], strict=False) if a == b)
    reordered = sum(1 for qid, docs in listed.items() if docs != trec_eval_order(scores[qid]))
    return {"rows": sum(len(docs) for docs in listed.values()), "queries": len(listed), "ties": ties,
            "reordered": reordered}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, help="TREC run file (default: the README demo's ECB+ BM25 run).")
    parser.add_argument("--qrels", type=Path, help="TREC qrels of the run (with --run).")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="Where the demo run is built when work/demo lacks it, and trec_eval is extracted "
                             "(default: a new temporary folder).")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md",
                        help="Markdown file to write the section into (default bench/RESULTS.md).")
    args = parser.parse_args(argv)
    if (args.run is None) != (args.qrels is None):
        parser.error("give --run and --qrels together (or neither, for the demo's run)")

    out_dir = (args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-trec-"))).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now()
    run, qrels = (args.run, args.qrels) if args.run is not None else demo_run(out_dir)
    run, qrels = run.resolve(), qrels.resolve()
    metrics = [*METRICS, *EXTRA]

    log(f"scoring {run} against {qrels}")
    columns = {"corefsearch evaluate": corefsearch_values(run, qrels, metrics)}
    binary = extract_trec_eval(out_dir)
    trec_eval_version = "not available on this platform"
    if binary is not None:
        columns["trec_eval -c"] = trec_eval_values(binary, run, qrels, metrics)
        answer = subprocess.run([str(binary), "-v"], capture_output=True, text=True, check=False)
        trec_eval_version = (answer.stdout + answer.stderr).strip()
    columns["pytrec_eval"] = pytrec_eval_values(run, qrels, metrics)
    columns["ir_measures"] = ir_measures_values(run, qrels, metrics)
    facts = file_facts(run)

    rows, worst, worst_exact = [], 0.0, 0.0
    for metric in metrics:
        values = [column[metric] for column in columns.values()]
        exact = [column[metric] for name, column in columns.items() if not name.startswith("trec_eval")]
        spread, exact_spread = max(values) - min(values), max(exact) - min(exact)
        worst, worst_exact = max(worst, spread), max(worst_exact, exact_spread)
        rows.append([metric, *(f"{value:.6f}" for value in values), f"{spread:.1e}", f"{exact_spread:.1e}"])
    table = markdown_table(["Metric", *columns, "max abs diff", "without trec_eval (4 decimals)"], rows,
                           ["l", *("r" for _ in columns), "r", "r"])
    verdict = ("agree within 1e-4 on every metric" if worst <= TOLERANCE
               else f"DISAGREE by up to {worst:.1e} (more than 1e-4)")
    command = shlex.join(["python", *(sys.argv if argv is None else ["bench/trec_agreement.py", *argv])])
    try:
        shown = run.relative_to(REPO)
    except ValueError:
        shown = run
    lines = [SECTION, "",
             f"- Date: {started:%Y-%m-%d %H:%M} (local time); machine: {cpu_model()}, Python "
             f"{platform.python_version()}",
             f"- Command: `{command}`",
             f"- Run: `{shown}` ({facts['queries']:,} queries, {facts['rows']:,} lines), qrels `{qrels.name}` "
             f"({len(read_qrels(qrels)):,} queries)",
             f"- Tools: corefsearch {version('corefsearch')}, {trec_eval_version} (the binary in Pyserini "
             f"{version('pyserini')}'s Anserini jar), pytrec_eval-terrier {version('pytrec-eval-terrier')}, "
             f"ir-measures {version('ir-measures')}",
             f"- The file: {facts['ties']:,} pairs of equal scores as trec_eval reads them (C floats); "
             f"{facts['reordered']:,} queries listed in another order than trec_eval's (score descending, then "
             "passage id descending)",
             "",
             "Means over every qrels query (a query without results counts 0, trec_eval `-c`); trec_eval prints "
             "4 decimals. MRR@10: trec_eval `-M 10 -m recip_rank`, pytrec_eval `recip_rank` where ≥ 1/10, "
             "ir-measures `RR@10`.",
             "",
             table,
             "",
             f"The {len(columns)} {verdict} (largest difference {worst:.1e}, trec_eval's rounding to 4 decimals "
             f"included; {worst_exact:.1e} between the tools that print full precision).",
             ""]
    section = "\n".join(lines)
    print(section)
    write_section(args.results, section, SECTION)
    log(f"wrote {args.results}")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
