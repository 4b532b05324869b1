"""Whole-corpus coreference over predicted mentions: ECB+ test, raw text in (Cattan et al. 2021's setting).

For each mention type, the ECB+ dataset with every gold mention of the validated sentences
(``--chains all --validated-only``, as bench/cluster.py builds it) is copied once per ``--detector``
(``heuristic`` or a folder from ``train detector``), ``corefsearch detect --mention-type TYPE`` writes its
predicted mentions, and ``corefsearch cluster --mentions predicted --split test`` clusters them with each
method (``lemma``, and ``encoder`` for each ``--model``) under each scope (gold topics, predicted topics,
the whole corpus). ``evaluate --clusters`` matches the predicted spans to the gold mentions exactly and
scores twinless mentions as the reference scorer does, singletons kept and dropped. The same methods over
the gold mentions are scored in the same run beside them (``--gold-rows``).

Writes ``## Predicted mentions: whole-corpus coreference (bench/predicted_clusters.py)`` into ``--results``.

Run: ``python bench/predicted_clusters.py --detector heuristic --detector trained=DIR [--model event=DIR]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cluster import CLI, REPO, SCOPES, build, log, machine, markdown_table, parse_model, timed_command, write_section

from corefsearch.evaluate.coref_files import evaluate_clusters

SECTION = "## Predicted mentions: whole-corpus coreference (bench/predicted_clusters.py)"


def named(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    return (name, value) if sep else (text, text)


def with_predictions(root: Path, gold: Path, mention_type: str, name: str, detector: str) -> tuple[Path, int]:
    """A copy of the dataset ``gold`` holding ``detector``'s mentions of ``mention_type``; its predicted count."""
    import json

    copy = root / f"{gold.name}-{name}"
    if not (copy / "predicted_mentions.json").exists():
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(gold, copy)
        log(f"{mention_type}: detecting with {name}")
        timed_command([*CLI, "detect", str(copy), "--model", detector, "--mention-type", mention_type])
    counts = json.loads((copy / "predicted_mentions.json").read_text())["counts"]
    return copy, counts[mention_type]


def score(rows: list[list[str]], dataset: Path, out: Path, labels: list[str], seconds: float) -> None:
    for singletons in ("keep", "drop"):
        evaluation = evaluate_clusters(out, dataset, split="test", singletons=singletons)
        scores = evaluation.scores
        rows.append([*labels, singletons, *(f"{100 * s.f1:.2f}" for s in scores.metrics().values()),
                     f"{100 * scores.conll_f1:.2f}", f"{seconds:.1f}"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument("--detector", action="append", default=[], help="NAME=DETECTOR_DIR or heuristic")
    parser.add_argument("--model", type=parse_model, action="append", default=[],
                        help="A mention encoder from `train clusterer`, TYPE=DIR or DIR; repeatable.")
    parser.add_argument("--types", default="event,entity")
    parser.add_argument("--scopes", default=",".join(SCOPES))
    parser.add_argument("--gold-rows", action="store_true", help="Also cluster the gold mentions (same methods).")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args(argv)
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-predicted-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    scopes = [s for s in args.scopes.split(",") if s]
    header = ["Type", "Mentions", "Method", "Scope", "Singletons", "MUC F1", "B3 F1", "CEAF-e F1", "LEA F1",
              "CoNLL F1", "s"]
    rows: list[list[str]] = []
    notes: list[str] = []
    for mention_type in [t for t in args.types.split(",") if t]:
        gold = build(root, mention_type)
        methods = [("lemma", ["--method", "lemma"])]
        methods += [(f"encoder {m.name}", ["--method", "encoder", "--model", str(m)])
                    for kind, m in args.model if kind in (None, mention_type)]
        sources = [(f"predicted: {name}", *with_predictions(root, gold, mention_type, name, detector))
                   for name, detector in map(named, args.detector)]
        if args.gold_rows:
            sources.append(("gold", gold, 0))
        for label, dataset, count in sources:
            if count:
                notes.append(f"- {mention_type}, {label}: {count:,} predicted mentions over all splits")
            for method, options in methods:
                for scope in scopes:
                    out = root / "clusters" / f"{dataset.name}-{method.replace(' ', '_')}-{scope}.jsonl"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    log(f"{mention_type}: {label}, {method}, {scope}")
                    mentions = ["--mentions", "gold" if label == "gold" else "predicted"]
                    seconds, _ = timed_command([*CLI, "cluster", str(dataset), "--out", str(out), "--split", "test",
                                                "--scope", scope, *mentions, *options])
                    score(rows, dataset, out, [mention_type, label, method, scope], seconds)
    minutes = (time.perf_counter() - started) / 60
    given = sys.argv[1:] if argv is None else argv
    lines = [SECTION, "",
             f"- Date: {dt.datetime.now():%Y-%m-%d %H:%M} (local time), total run time {minutes:.1f} min",
             *(f"- {key}: {value}" for key, value in machine().items()),
             f"- Command: `{shlex.join(['python', 'bench/predicted_clusters.py', *given])}`",
             "- Data: ECB+ validated sentences, every gold mention (`--chains all --validated-only`), test split "
             "(topics 36-45); predicted spans match gold ones exactly or count as twinless; F1 ×100; s: the whole "
             "`corefsearch cluster` process.", *notes,
             "", markdown_table(header, rows, "lllll" + "r" * (len(header) - 5)), ""]
    section = "\n".join(lines)
    print(section)
    write_section(args.results, section, SECTION)


if __name__ == "__main__":
    main()
