"""Whole-corpus coreference on ECB+: the clustering methods of ``corefsearch cluster`` scored with
MUC, B³, CEAF-e, LEA and CoNLL F1 (``corefsearch evaluate --clusters``).

Datasets: ECB+ built with every gold mention (``--chains all``: cross-document chains,
within-document chains and singletons) of the validated sentences (``--validated-only``, the
usual ECB+ CDCR set-up of Cybulska & Vossen 2015 and Barhom et al. 2019), events and entities
separately; the test split (topics 36-45) is clustered. Rows: every method given (``singletons``,
``lemma``, and ``encoder`` for each ``--model``, on its mention type) under each scope (``topic``: gold topics;
``predicted-topic``: TF-IDF document clustering first; ``corpus``: every mention of the split at
once), each scored with singletons kept and dropped. Each clustering runs as its own
``corefsearch cluster`` process under ``/usr/bin/time``, so its seconds and peak memory are what a
user sees (start-up, spaCy and model loading included).

Prints the tables and writes them into ``bench/RESULTS.md`` under the section
``## Whole-corpus coreference (bench/cluster.py)``, replacing that section if present.

Run: ``python bench/cluster.py [--out-dir DIR] [--model [TYPE=]MODEL_DIR ...] [--types event,entity]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")

from bm25 import machine, markdown_table, write_section  # noqa: E402

from corefsearch.evaluate.coref import METRIC_NAMES  # noqa: E402
from corefsearch.evaluate.coref_files import evaluate_clusters  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ECBPLUS = REPO / "data" / "ecbplus" / "ECBplus.tar.gz"
SECTION = "## Whole-corpus coreference (bench/cluster.py)"
SCOPES = ("topic", "predicted-topic", "corpus")
CLI = [sys.executable, "-m", "corefsearch.cli"]
# Published CoNLL F1 on ECB+ test events, predicted topics, singletons kept (Hsu & Horwood 2022, Table 2;
# the lemma baseline as they report it) and at corpus level without singletons: for context only.
PUBLISHED = "lemma 75.7; Hsu & Horwood 77.9 (BERT-base), 81.8 (RoBERTa-base), 83.3 (RoBERTa-large); corpus level " \
            "without singletons 65.2"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed_run(command: list[str]) -> tuple[float, int, str]:
    """Run ``command`` under ``/usr/bin/time``; its wall seconds, peak resident memory in kB and stdout."""
    with tempfile.TemporaryDirectory() as folder:
        stats = Path(folder) / "time.txt"
        result = subprocess.run(["/usr/bin/time", "-o", str(stats), "-f", "%e %M", *command],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"failed: {shlex.join(command)}\n{result.stderr}")
        seconds, peak = stats.read_text().split()[-2:]
        return float(seconds), int(peak), result.stdout


def timed_command(command: list[str]) -> tuple[float, int]:
    """Run ``command`` under ``/usr/bin/time``; its wall seconds and peak resident memory in kB."""
    seconds, peak, _ = timed_run(command)
    return seconds, peak


def build(root: Path, mention_type: str) -> Path:
    out = root / f"ecbplus-{mention_type}-all-chains"
    if not (out / "manifest.json").exists():
        log(f"building the ECB+ {mention_type} dataset (all chains, validated sentences)")
        subprocess.run([*CLI, "build-dataset", str(ECBPLUS), "--format", "ecbplus", "--mention-type", mention_type,
                        "--chains", "all", "--validated-only", "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def parse_model(text: str) -> tuple[str | None, Path]:
    """``TYPE=DIR`` (a model for one mention type) or ``DIR`` (for every type)."""
    kind, sep, folder = text.partition("=")
    return (kind, Path(folder)) if sep and kind in ("event", "entity") else (None, Path(text))


def methods(models: list[tuple[str | None, Path]], mention_type: str) -> list[tuple[str, list[str]]]:
    rows = [("singletons", ["--method", "singletons"]), ("lemma", ["--method", "lemma"])]
    rows += [(f"encoder {model.name}", ["--method", "encoder", "--model", str(model)])
             for kind, model in models if kind in (None, mention_type)]
    return rows


def model_lines(models: list[tuple[str | None, Path]]) -> list[str]:
    """What each encoder is: its training budget and dev curve, from the files ``train clusterer`` wrote."""
    lines = []
    for kind, model in models:
        args = json.loads((model / "training_args.json").read_text(encoding="utf-8"))
        curve = json.loads((model / "dev_curve.json").read_text(encoding="utf-8"))
        options = args.get("options", args)
        dev = ", ".join(f"epoch {e['epoch']} (step {e['step']}): {100 * e['CoNLL F1']:.2f} at τ {e['threshold']:g}"
                        for e in curve if e.get("CoNLL F1") is not None)
        lines.append(f"- encoder {model.name} ({kind or 'every type'}): `train clusterer` from "
                     f"{options.get('base_model') or 'the bundled all-MiniLM-L6-v2'}, "
                     f"{args['counts']['train_pairs']:,} pairs of {args['counts']['train_mentions']:,} train mentions, "
                     f"{sum(e.get('seconds', 0) for e in curve) / 60:.0f} min on the CPU (dev evaluations included); "
                     f"options {json.dumps(options, sort_keys=True)}; dev CoNLL F1 (gold topics): {dev}; "
                     f"kept τ {args.get('threshold')}")
    return lines


def run(root: Path, models: list[tuple[str | None, Path]], types: list[str]) -> tuple[list[str], list[list[str]]]:
    header = ["Mentions", "Method", "Scope", "Singletons", *(f"{m} F1" for m in METRIC_NAMES), "CoNLL F1", "s",
              "peak MB"]
    rows: list[list[str]] = []
    for mention_type in types:
        dataset = build(root, mention_type)
        for name, options in methods(models, mention_type):
            for scope in SCOPES:
                out = root / "clusters" / f"{mention_type}-{name.replace(' ', '_')}-{scope}.jsonl"
                out.parent.mkdir(parents=True, exist_ok=True)
                log(f"{mention_type}: {name}, scope {scope}")
                seconds, peak = timed_command([*CLI, "cluster", str(dataset), "--out", str(out), "--split", "test",
                                               "--scope", scope, *options])
                for singletons in ("keep", "drop"):
                    scores = evaluate_clusters(out, dataset, split="test", singletons=singletons).scores
                    f1 = [score.f1 for score in scores.metrics().values()]
                    rows.append([mention_type, name, scope, singletons, *(f"{100 * v:.2f}" for v in f1),
                                 f"{100 * scores.conll_f1:.2f}", f"{seconds:.1f}", f"{peak / 1024:.0f}"])
    return header, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None, help="Datasets and clusterings (default: a temp dir).")
    parser.add_argument("--model", type=parse_model, action="append", default=[],
                        help="A model folder from `corefsearch train clusterer`, as DIR (every mention type) or "
                             "TYPE=DIR (event or entity only); repeatable.")
    parser.add_argument("--types", default="event,entity", help="Mention types, comma-separated.")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args(argv)
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-cluster-bench-"))
    started = time.perf_counter()
    header, rows = run(root, args.model, [t.strip() for t in args.types.split(",") if t.strip()])
    minutes = (time.perf_counter() - started) / 60
    lines = [SECTION, "",
             f"- Date: {dt.datetime.now().strftime('%Y-%m-%d %H:%M')} (local time), total run time {minutes:.1f} min",
             *(f"- {key}: {value}" for key, value in machine().items()),
             f"- Command: `{shlex.join(['python', 'bench/cluster.py', *(sys.argv[1:] if argv is None else argv)])}`",
             "- Data: ECB+ with every gold mention (`build-dataset --chains all --validated-only`), test split "
             "(topics 36-45); F1 ×100; s and peak MB: the whole `corefsearch cluster` process (`/usr/bin/time`).",
             *model_lines(args.model),
             f"- Published, for context (events, predicted topics, singletons kept): {PUBLISHED}.",
             "", markdown_table(header, rows, "lllll" + "r" * (len(header) - 5)), ""]
    section = "\n".join(lines)
    print(section)
    write_section(args.results, section, SECTION)


if __name__ == "__main__":
    main()
