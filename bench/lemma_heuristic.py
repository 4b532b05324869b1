"""The published same-lemma heuristic (Ahmed et al. 2023; ``corefsearch cluster --method lemma-heuristic``) beside
the lemma baseline on ECB+ events, every gold mention of the validated sentences (``build-dataset --chains all
--validated-only``): CoNLL F1 with singletons kept (``corefsearch evaluate --clusters``) under each scope, with
the sentence-overlap filter (J 0.05) and without it (J 0), on test and dev; and the rule's pairs: pair recall (the
share of coreferent pairs within a group and type that the rule links directly) and the share of all such pairs it
links. Each clustering runs as its own ``corefsearch cluster`` process; the pair counts are computed here from the
same lemmas (``corefsearch.cluster.heuristic``).

Prints the table and writes it into ``bench/RESULTS.md`` as the subsection ``### The published same-lemma
heuristic (cluster --method lemma-heuristic)`` at the end of ``## Whole-corpus coreference (bench/cluster.py)``.

Run: ``python bench/lemma_heuristic.py --dataset DATASET [--out-dir DIR] [--splits test,dev]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")

from bm25 import markdown_table  # noqa: E402
from cluster import CLI, SCOPES, log, timed_run  # noqa: E402

from corefsearch.cluster.baselines import gold  # noqa: E402
from corefsearch.cluster.heuristic import (  # noqa: E402
    PairCounts,
    blocks_of,
    heuristic_clusters,
    mention_contexts,
    pair_counts,
)
from corefsearch.cluster.mentions import read_split_mentions  # noqa: E402
from corefsearch.cluster.topics import DEFAULT_TOPIC_THRESHOLD, mention_groups  # noqa: E402
from corefsearch.datasets.dataset import Dataset  # noqa: E402
from corefsearch.evaluate.coref_files import evaluate_clusters  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PARENT = "## Whole-corpus coreference (bench/cluster.py)"
TITLE = "### The published same-lemma heuristic (cluster --method lemma-heuristic)"
OVERLAPS = (0.05, 0.0)


def same_lemma_pairs(contexts: dict, blocks: dict[str, list[str]]) -> list[tuple[str, str]]:
    """The pairs ``--method lemma`` puts together directly: the same head lemma within a block."""
    pairs = []
    for ids in blocks.values():
        by_lemma: dict[str, list[str]] = defaultdict(list)
        for mention_id in ids:
            by_lemma[contexts[mention_id].lemma].append(mention_id)
        pairs += [(a, b) for group in by_lemma.values() for i, a in enumerate(group) for b in group[i + 1:]]
    return pairs


def pair_columns(counts: PairCounts) -> list[str]:
    return [f"{100 * counts.recall:.2f} ({counts.found:,}/{counts.coreferent:,})",
            f"{100 * counts.kept_share:.2f} ({counts.kept:,}/{counts.total:,})"]


def run(dataset: Path, root: Path, splits: list[str]) -> tuple[list[str], list[list[str]], list[str]]:
    header = ["Split", "Scope (groups)", "Method", "CoNLL F1", "Pair recall", "Pairs linked", "s"]
    rows: list[list[str]] = []
    commands: list[str] = []
    clusters = Dataset(dataset).clusters()
    for split in splits:
        found = read_split_mentions(dataset, split)
        key = gold(found.mentions, clusters)
        types = {m.mention_id: m.type for m in found.mentions}
        log(f"{split}: parsing {len(found.mentions):,} mentions' passages")
        contexts = mention_contexts(found.mentions, found.passage_texts)
        for scope in SCOPES:
            groups = mention_groups(found.mentions, scope, dataset, DEFAULT_TOPIC_THRESHOLD)
            blocks = blocks_of(contexts, groups, types)
            label = f"{scope} ({len(set(groups.values()))})"
            for name, options, pairs in [
                ("lemma", ["--method", "lemma"], same_lemma_pairs(contexts, blocks)),
                *((f"lemma-heuristic, J {overlap:g}", ["--method", "lemma-heuristic", "--sentence-overlap",
                                                        f"{overlap:g}"],
                   heuristic_clusters(contexts, groups, types, overlap).pairs) for overlap in OVERLAPS)]:
                out = root / f"{split}-{scope}-{name.replace(', ', '-').replace(' ', '')}.jsonl"
                command = ["cluster", str(dataset), "--out", str(out), "--split", split, "--scope", scope, *options]
                log(f"{split}: {name}, scope {scope}")
                seconds, _, _ = timed_run([*CLI, *command])
                commands.append(shlex.join(["corefsearch", *command]))
                f1 = evaluate_clusters(out, dataset, split=split, singletons="keep").scores.conll_f1
                rows.append([split, label, name, f"{100 * f1:.2f}", *pair_columns(pair_counts(pairs, blocks, key)),
                             f"{seconds:.1f}"])
    return header, rows, commands


def insert_subsection(path: Path, subsection: str) -> None:
    """Put ``subsection`` at the end of the ``PARENT`` section, in place of an older one."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(PARENT)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    if TITLE in lines[start:end]:
        old = lines.index(TITLE, start)
        stop = next((i for i in range(old + 1, end) if lines[i].startswith(("### ", "## "))), end)
        del lines[old:stop]
        end -= stop - old
    while end > start and not lines[end - 1].strip():
        end -= 1
    lines[end:end] = ["", *subsection.rstrip("\n").splitlines(), ""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True,
                        help="ECB+ events with every mention (`build-dataset ... --chains all --validated-only`).")
    parser.add_argument("--out-dir", type=Path, default=None, help="Clusterings (default: a temp dir).")
    parser.add_argument("--splits", default="test,dev")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args(argv)
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-heuristic-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    header, rows, commands = run(args.dataset, root, [s.strip() for s in args.splits.split(",") if s.strip()])
    minutes = (time.perf_counter() - started) / 60
    given = sys.argv[1:] if argv is None else argv
    lines = [TITLE, "",
             f"- Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M')} UTC, total run time "
             f"{minutes:.1f} min; {os.cpu_count()} CPU cores, shared with other jobs",
             f"- Command: `{shlex.join(['python', 'bench/lemma_heuristic.py', *given])}`"
             f"; each row runs `{commands[0]}` (its method and options), scored with `corefsearch evaluate --clusters "
             f"OUT --dataset {args.dataset} --split SPLIT` (singletons kept)",
             "- CoNLL F1 ×100. Pair recall: coreferent pairs within a group and type that the rule links directly "
             "(lemma: the same head lemma); pairs linked: the share of all pairs within a group and type; s: the "
             "whole `corefsearch cluster` process.",
             "", markdown_table(header, rows, "lllrrrr"), ""]
    subsection = "\n".join(lines)
    print(subsection)
    insert_subsection(args.results, subsection)


if __name__ == "__main__":
    main()
