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

``--compare-evidence``: what earns a pair the bonus β (``cluster --evidence``): the same head lemma, or a link
of ``--method lemma-heuristic``'s rule at sentence overlap J 0.05 and 0; in the default document grouping
(predicted topics) and in the gold ECB+ subtopics (topic + ``ecb``/``ecbplus`` by the document id, as a
``--topics`` file gives them); the best τ per β and evidence on dev, then the test split once for what dev
chose in each arm, beside the encoder's own τ and β and the lemma and lemma-heuristic methods. Prints the
tables (``--markdown FILE``: also writes them there); RESULTS.md is left to the reader.
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

from corefsearch.cluster.agreement import ecbplus_subtopic  # noqa: E402
from corefsearch.cluster.baselines import mention_head_lemmas, same_lemma  # noqa: E402
from corefsearch.cluster.encoder import split_records, threshold_grid, threshold_sweep  # noqa: E402
from corefsearch.cluster.heuristic import blocks_of, closure, links, mention_contexts  # noqa: E402
from corefsearch.cluster.mentions import read_split_mentions  # noqa: E402
from corefsearch.cluster.model import MentionEncoder  # noqa: E402
from corefsearch.cluster.topics import mention_groups  # noqa: E402
from corefsearch.evaluate.coref import score_partitions  # noqa: E402

SECTION = "## Clustering knobs on dev (bench/cluster_dev.py)"
SCOPES = ("topic", "predicted-topic")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class SplitMentions:
    """One split's mentions, gold key, types, head lemmas and vectors: what both comparisons read."""

    def __init__(self, dataset: Path, split: str, encoder: MentionEncoder, batch_size: int) -> None:
        self.found = read_split_mentions(dataset, split)
        records = split_records(dataset, split)
        self.ids = [r.mention_id for r in records]
        self.key = {r.mention_id: r.cluster_id for r in records}
        self.types = {m.mention_id: m.type for m in self.found.mentions}
        self.mentions = self.found.mentions
        log(f"{split}: {len(self.ids):,} mentions; parsing for head lemmas")
        self.lemmas = mention_head_lemmas(self.mentions, self.found.passage_texts)
        log(f"{split}: encoding")
        self.vectors = encoder.encode(records, batch_size=batch_size)


class Split(SplitMentions):
    """One split's mentions, gold key, lemmas, vectors and groups per scope."""

    def __init__(self, dataset: Path, split: str, encoder: MentionEncoder, batch_size: int) -> None:
        super().__init__(dataset, split, encoder, batch_size)
        self.groups = {scope: mention_groups(self.mentions, scope, dataset) for scope in SCOPES}

    def lemma_f1(self, scope: str) -> float:
        return score_partitions(self.key, same_lemma(self.mentions, self.groups[scope], self.lemmas)).conll_f1

    def sweep(self, scope: str, weight: float, taus: list[float]) -> dict[float, float]:
        cuts = threshold_sweep(self.ids, self.vectors, self.groups[scope], self.types, taus, self.lemmas, weight)
        return {tau: score_partitions(self.key, response).conll_f1 for tau, response in cuts.items()}


# --- --compare-evidence -----------------------------------------------------------------------------------

GROUPINGS = ("predicted-topic", "gold subtopics")
EVIDENCES = (("lemma", None), ("lemma-heuristic", 0.05), ("lemma-heuristic", 0.0))


def evidence_name(evidence: str, overlap: float | None) -> str:
    return "same head lemma" if evidence == "lemma" else f"lemma-heuristic link, J {overlap:g}"


class EvidenceSplit(SplitMentions):
    """One split's mentions, key, head lemmas, heuristic contexts, vectors, groups and links per J."""

    def __init__(self, dataset: Path, split: str, encoder: MentionEncoder, batch_size: int) -> None:
        super().__init__(dataset, split, encoder, batch_size)
        found = self.found
        log(f"{split}: parsing for the rule's contexts")
        self.contexts = mention_contexts(found.mentions, found.passage_texts)
        subtopics = {m.doc_id: ecbplus_subtopic(m.doc_id) for m in found.mentions}
        missing = sorted(doc for doc, group in subtopics.items() if group is None)
        if missing:
            raise SystemExit(f"{split}: {missing[0]} is not an ECB+ document id; no subtopic")
        self.subtopics = {doc: str(group) for doc, group in subtopics.items()}
        self.groups = {"predicted-topic": mention_groups(found.mentions, "predicted-topic", dataset),
                       "gold subtopics": mention_groups(found.mentions, "predicted-topic", dataset,
                                                        doc_topics=self.subtopics)}
        self.links = {(grouping, overlap): links(self.contexts, blocks_of(self.ids, self.groups[grouping],
                                                                          self.types), overlap)
                      for grouping in GROUPINGS for overlap in (0.05, 0.0)}
        for (grouping, overlap), found_links in self.links.items():
            log(f"{split} {grouping}: {len(found_links):,} pairs linked at J {overlap:g}")

    def sweep(self, grouping: str, evidence: str, overlap: float | None, weight: float,
              taus: list[float]) -> dict[float, float]:
        lemmas = self.lemmas if evidence == "lemma" else None
        found_links = self.links[grouping, overlap] if evidence != "lemma" else None
        cuts = threshold_sweep(self.ids, self.vectors, self.groups[grouping], self.types, taus, lemmas, weight,
                               found_links)
        return {tau: score_partitions(self.key, response).conll_f1 for tau, response in cuts.items()}

    def method_f1(self, grouping: str, method: str) -> float:
        groups = self.groups[grouping]
        if method == "lemma":
            response = same_lemma(self.mentions, groups, self.lemmas)
        else:
            blocks = blocks_of(self.ids, groups, self.types)
            response = closure(blocks, self.links[grouping, 0.05], self.contexts)
        return score_partitions(self.key, response).conll_f1


def compare_evidence(args: argparse.Namespace) -> None:
    started = time.time()
    weights = [float(w) for w in args.weights.split(",") if float(w) > 0]
    taus = threshold_grid(0.0125, 0.95, 0.0125)
    encoder = MentionEncoder.load(args.model, "cpu")
    own_tau, own_beta = float(encoder.config.threshold or 0.1), float(encoder.config.lemma_weight)
    dev = EvidenceSplit(args.dataset, "dev", encoder, args.batch_size)
    # (grouping, evidence, J) -> {β: (best τ, dev F1)}
    table: dict[tuple[str, str, float | None], dict[float, tuple[float, float]]] = {}
    for grouping in GROUPINGS:
        scores = dev.sweep(grouping, "lemma", None, 0.0, taus)
        alone = max(scores, key=lambda t: (scores[t], -t))
        for evidence, overlap in EVIDENCES:
            table[grouping, evidence, overlap] = {0.0: (alone, scores[alone])}
            for weight in weights:
                scores_w = dev.sweep(grouping, evidence, overlap, weight, taus)
                tau = max(scores_w, key=lambda t: (scores_w[t], -t))
                table[grouping, evidence, overlap][weight] = (tau, scores_w[tau])
                log(f"dev {grouping} {evidence_name(evidence, overlap)} β {weight:g}: "
                    f"{100 * scores_w[tau]:.2f} at τ {tau:g}")
    dev_lines: list[str] = []
    chosen: dict[str, dict[str, tuple[str, float | None, float, float, float]]] = {}
    for grouping in GROUPINGS:
        header = ["β", *(evidence_name(e, j) for e, j in EVIDENCES)]
        rows = []
        # Each evidence's best β > 0 (β 0 is the encoder alone, the same in every column).
        best_cell = {(e, j): max(((w, cell) for w, cell in table[grouping, e, j].items() if w > 0),
                                 key=lambda item: (item[1][1], -item[0])) for e, j in EVIDENCES}
        alone_cell = table[grouping, "lemma", None][0.0]
        overall = max([(("lemma", None), (0.0, alone_cell)), *best_cell.items()], key=lambda item: item[1][1][1])
        for weight in [0.0, *weights]:
            cells = []
            for e, j in EVIDENCES:
                tau, f1 = table[grouping, e, j][weight]
                cell = f"{100 * f1:.2f} (τ {tau:g})"
                if weight == best_cell[e, j][0] or (weight == 0 and overall[1][0] == 0):
                    cell = f"**{cell}**"
                cells.append(cell)
            rows.append([f"{weight:g}" + (" (encoder alone)" if weight == 0 else ""), *cells])
        dev_lines += [f"Dev, {grouping} ({len(set(dev.groups[grouping].values()))} groups): CoNLL F1 ×100 at the "
                      "best τ for each β; bold: each evidence's best β > 0, and β 0 where it beats them all", "",
                      markdown_table(header, rows, "l" + "r" * len(EVIDENCES)), ""]
        chosen[grouping] = {}
        alone_tau, alone_f1 = table[grouping, "lemma", None][0.0]
        chosen[grouping]["encoder alone"] = ("lemma", None, 0.0, alone_tau, alone_f1)
        for (e, j), (weight, (tau, f1)) in best_cell.items():
            chosen[grouping][evidence_name(e, j)] = (e, j, weight, tau, f1)
        pick = overall[0]
        dev_lines.append(f"Dev's choice, {grouping}: {evidence_name(*pick)}, β {overall[1][0]:g}, "
                         f"τ {overall[1][1][0]:g} ({100 * overall[1][1][1]:.2f}).")
        dev_lines.append("")
        chosen[grouping]["_pick"] = (pick[0], pick[1], overall[1][0], overall[1][1][0], overall[1][1][1])
    log("test: scoring once")
    test = EvidenceSplit(args.dataset, "test", encoder, args.batch_size)
    test_rows = []
    scored = 0
    for grouping in GROUPINGS:
        for method in ("lemma", "lemma-heuristic"):
            test_rows.append([grouping, f"--method {method}" + (" (J 0.05)" if method != "lemma" else ""), "–",
                              "–", "–", f"{100 * test.method_f1(grouping, method):.2f}"])
            scored += 1
        own = test.sweep(grouping, "lemma", None, own_beta, [own_tau])[own_tau]
        scored += 1
        test_rows.append([grouping, "encoder, its own τ and β (same head lemma)", f"{own_beta:g}", f"{own_tau:g}",
                          "–", f"{100 * own:.2f}"])
        pick = chosen[grouping]["_pick"]
        for name, (e, j, weight, tau, f1) in chosen[grouping].items():
            if name == "_pick":
                continue
            f1_test = test.sweep(grouping, e, j, weight, [tau])[tau]
            scored += 1
            mark = " (dev's choice)" if (e, j, weight, tau) == pick[:4] else ""
            test_rows.append([grouping, f"encoder + {name}{mark}" if weight else "encoder alone (dev τ)",
                              f"{weight:g}", f"{tau:g}", f"{100 * f1:.2f}", f"{100 * f1_test:.2f}"])
    lines = [
        f"- Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M')} UTC, run time "
        f"{(time.time() - started) / 60:.1f} min; 2 CPU cores, shared with other jobs",
        f"- Command: `python bench/cluster_dev.py --compare-evidence --dataset {args.dataset} --model {args.model} "
        f"--weights {args.weights}`",
        f"- Encoder: {args.model} (its own τ {own_tau:g}, β {own_beta:g}); τ grid 0.0125–0.95 by 0.0125; "
        "CoNLL F1 ×100, singletons kept; test scored once per row below "
        f"({scored} configurations, one run).",
        "", *dev_lines,
        markdown_table(["grouping", "clustering", "β", "τ", "dev", "test"], test_rows, "llrrrr"), ""]
    text = "\n".join(lines)
    print(text)
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True, help="dataset with every gold mention (--chains all)")
    parser.add_argument("--model", type=Path, required=True, help="mention encoder from `train clusterer`")
    parser.add_argument("--weights", default="0,0.05,0.1,0.15,0.2,0.25,0.3,0.4,0.5")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--results", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--compare-evidence", action="store_true",
                        help="compare what earns the bonus β (same head lemma or the lemma-heuristic's links)")
    parser.add_argument("--markdown", type=Path, help="with --compare-evidence: also write the tables here")
    args = parser.parse_args()
    if args.compare_evidence:
        compare_evidence(args)
        return
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
