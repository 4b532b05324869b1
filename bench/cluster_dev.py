"""The clustering knobs of a trained mention encoder, chosen on dev: the lemma weight β (two mentions
with the same head lemma are β closer in cosine distance) × the threshold τ, in gold and predicted
topics, against the lemma baseline on the same mentions; then, for what dev chose, the test split once.

Why: ``train clusterer`` picks τ on dev for β = 0 (the encoder alone, Hsu & Horwood 2022). The
lemma baseline is strong on ECB+ (same-lemma mentions within a topic usually corefer), and the
encoder separates same-lemma mentions of different events and joins synonyms; β lets dev decide
how much of each the clustering takes. Every number here is CoNLL F1 ×100 with singletons kept
(``corefsearch evaluate --clusters``'s scorer).

Prints the dev table (best τ per β and scope) and the test row of the dev choice, and writes them
into ``bench/RESULTS.md`` under ``## Clustering knobs on dev (bench/cluster_dev.py)``.

Run: ``python bench/cluster_dev.py --dataset DATASET --model MODEL_DIR [--weights 0,0.1,...]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")

from bm25 import machine, markdown_table, write_section  # noqa: E402

from corefsearch.cluster.baselines import mention_head_lemmas, same_lemma  # noqa: E402
from corefsearch.cluster.encoder import split_records, threshold_grid, threshold_sweep  # noqa: E402
from corefsearch.cluster.mentions import read_split_mentions  # noqa: E402
from corefsearch.cluster.model import MentionEncoder  # noqa: E402
from corefsearch.cluster.topics import mention_groups  # noqa: E402
from corefsearch.evaluate.coref import score_partitions  # noqa: E402

SECTION = "## Clustering knobs on dev (bench/cluster_dev.py)"
SCOPES = ("topic", "predicted-topic")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Split:
    """One split's mentions, gold key, lemmas, vectors and groups per scope."""

    def __init__(self, dataset: Path, split: str, encoder: MentionEncoder, batch_size: int) -> None:
        found = read_split_mentions(dataset, split)
        records = split_records(dataset, split)
        self.ids = [r.mention_id for r in records]
        self.key = {r.mention_id: r.cluster_id for r in records}
        self.types = {m.mention_id: m.type for m in found.mentions}
        log(f"{split}: {len(self.ids):,} mentions; parsing for head lemmas")
        self.lemmas = mention_head_lemmas(found.mentions, found.passage_texts)
        log(f"{split}: encoding")
        self.vectors = encoder.encode(records, batch_size=batch_size)
        self.groups = {scope: mention_groups(found.mentions, scope, dataset) for scope in SCOPES}
        self.mentions = found.mentions

    def lemma_f1(self, scope: str) -> float:
        return score_partitions(self.key, same_lemma(self.mentions, self.groups[scope], self.lemmas)).conll_f1

    def sweep(self, scope: str, weight: float, taus: list[float]) -> dict[float, float]:
        cuts = threshold_sweep(self.ids, self.vectors, self.groups[scope], self.types, taus, self.lemmas, weight)
        return {tau: score_partitions(self.key, response).conll_f1 for tau, response in cuts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True, help="dataset with every gold mention (--chains all)")
    parser.add_argument("--model", type=Path, required=True, help="mention encoder from `train clusterer`")
    parser.add_argument("--weights", default="0,0.05,0.1,0.15,0.2,0.25,0.3,0.4,0.5")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--results", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    started = time.time()
    weights = [float(w) for w in args.weights.split(",")]
    taus = threshold_grid(0.0125, 0.95, 0.0125)
    encoder = MentionEncoder.load(args.model, "cpu")
    dev = Split(args.dataset, "dev", encoder, args.batch_size)
    rows = []
    best: tuple[float, str, float, float] | None = None  # (dev F1, scope, β, τ)
    for scope in SCOPES:
        rows.append([scope, "lemma baseline", "–", "–", f"{100 * dev.lemma_f1(scope):.2f}"])
        for weight in weights:
            scores = dev.sweep(scope, weight, taus)
            tau = max(scores, key=lambda t: (scores[t], -t))
            rows.append([scope, "encoder" if weight == 0 else "encoder + lemma", f"{weight:g}", f"{tau:g}",
                         f"{100 * scores[tau]:.2f}"])
            if best is None or scores[tau] > best[0]:
                best = (scores[tau], scope, weight, tau)
            log(f"dev {scope} β {weight:g}: {100 * scores[tau]:.2f} at τ {tau:g}")
    assert best is not None
    _, scope, weight, tau = best
    test = Split(args.dataset, "test", encoder, args.batch_size)
    test_rows = []
    for test_scope in SCOPES:
        chosen = test.sweep(test_scope, weight, [tau])[tau]
        alone_scores = test.sweep(test_scope, 0.0, [float(encoder.config.threshold or tau)])
        test_rows.append([test_scope, f"{100 * test.lemma_f1(test_scope):.2f}",
                          f"{100 * next(iter(alone_scores.values())):.2f}",
                          f"{100 * chosen:.2f}"])
    header = ["scope", "clustering", "β", "τ (best on dev)", "dev CoNLL F1"]
    lines = [
        f"- Date: {dt.datetime.now().strftime('%Y-%m-%d %H:%M')} (local time), run time "
        f"{(time.time() - started) / 60:.1f} min",
        *(f"- {name}: {value}" for name, value in machine().items()),
        f"- Command: `python bench/cluster_dev.py --dataset {args.dataset} --model {args.model} "
        f"--weights {args.weights}`",
        f"- Encoder: {args.model} (its own τ {encoder.config.threshold}); τ grid 0.0125–0.95 by 0.0125; CoNLL F1 ×100, "
        "singletons kept. Dev chose: " f"scope {scope}, β {weight:g}, τ {tau:g}.",
        "", "### Dev", "", markdown_table(header, rows, "llrrr"), "",
        "### Test, once, with what dev chose", "",
        markdown_table(["scope", "lemma baseline", f"encoder alone (τ {encoder.config.threshold})",
                        f"encoder + lemma (β {weight:g}, τ {tau:g})"], test_rows, "lrrr"), ""]
    print("\n".join(lines))
    if not args.no_write:
        write_section(args.results, SECTION + "\n\n" + "\n".join(lines), SECTION)


if __name__ == "__main__":
    main()
