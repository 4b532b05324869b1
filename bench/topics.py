"""Document grouping of ``cluster --scope predicted-topic``: candidate recipes scored against the ECB+
gold topics and subtopics (a topic's ``ecb`` and ``ecbplus`` halves), on train and dev; the recipe
chosen there (best mean ARI against the subtopics over train and dev) is then scored on test once.

Each split's documents are those that hold mentions of the split, as ``corefsearch cluster`` groups
them (``read_split_mentions`` + ``document_texts``). Candidates: agglomerative (average linkage on
TF-IDF cosine distance, ``--topic-method agglomerative-tfidf``) cut at each ``--thresholds`` value, which
needs no number of topics, and
K-means with k given (the gold number of subtopics, then of topics: as Barhom et al. 2019, an
oracle a corpus of one's own does not have, so reported but never chosen).

Prints the table and, unless ``--no-write``, puts it into ``bench/RESULTS.md`` as the subsection
``### Document grouping (bench/topics.py)`` right after the header lines of
``## Whole-corpus coreference (bench/cluster.py)``, replacing an older copy.

Run: ``python bench/topics.py --dataset NAME=DATASET [--dataset ...] [--thresholds 0.7,0.8,...]``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")

from bm25 import markdown_table  # noqa: E402

from corefsearch.cluster.agreement import Agreement, agreement, ecbplus_subtopics  # noqa: E402
from corefsearch.cluster.mentions import document_texts, read_split_mentions  # noqa: E402
from corefsearch.cluster.topics import TFIDF_TOPIC_THRESHOLD, predicted_topics  # noqa: E402

PARENT = "## Whole-corpus coreference (bench/cluster.py)"
TITLE = "### Document grouping (bench/topics.py)"


@dataclass
class SplitDocs:
    texts: dict[str, str]
    topics: dict[str, str]
    subtopics: dict[str, str]


@dataclass(frozen=True)
class Recipe:
    method: str
    threshold: float | None = None
    k_rule: str | None = None  # kmeans: "subtopics" or "topics", the gold count given

    @property
    def name(self) -> str:
        if self.method == "kmeans":
            return f"kmeans, k = gold {self.k_rule}"
        return f"agglomerative {self.threshold:g}"

    def run(self, docs: SplitDocs) -> dict[str, str]:
        if self.method == "kmeans":
            k = len(set((docs.subtopics if self.k_rule == "subtopics" else docs.topics).values()))
            return predicted_topics(docs.texts, method="kmeans", n_topics=k)
        return predicted_topics(docs.texts, threshold=float(self.threshold or TFIDF_TOPIC_THRESHOLD),
                                method="agglomerative-tfidf")


def load(dataset: Path, split: str) -> SplitDocs:
    found = read_split_mentions(dataset, split)
    topics = {m.doc_id: str(m.topic) for m in found.mentions}
    subtopics = ecbplus_subtopics(topics)
    if subtopics is None:
        raise SystemExit(f"{dataset}: not ECB+ document ids; no subtopics")
    return SplitDocs(document_texts(dataset, set(topics)), topics, subtopics)


def scores(recipe: Recipe, docs: SplitDocs) -> tuple[Agreement, Agreement]:
    grouping = recipe.run(docs)
    return agreement(grouping, docs.topics), agreement(grouping, docs.subtopics)


def cells(pair: tuple[Agreement, Agreement]) -> list[str]:
    topic, sub = pair
    return [f"{topic.ari:.3f}", f"{sub.ari:.3f}", f"{sub.v_measure:.3f}", f"{sub.groups} / {sub.reference_groups}"]


def machine_line() -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpus} CPU cores (shared with other jobs)"


def insert_subsection(path: Path, section: str) -> None:
    """Put ``section`` right after the header lines of :data:`PARENT` (before its first table or ``###``),
    in place of an older copy; the rest of the file is kept."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if TITLE in lines:  # drop the old copy, up to the next heading
        start = lines.index(TITLE)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("## ", "### "))), len(lines))
        del lines[start:end]
    parent = lines.index(PARENT)
    at = parent + 1
    while at < len(lines) and (not lines[at].strip() or lines[at].startswith("- ")):
        at += 1  # the blank lines and "- Date: ..." lines under the header
    new = section.rstrip("\n").splitlines()
    lines[at:at] = [*new, ""]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", action="append", required=True, help="NAME=DATASET (ECB+, any mention type)")
    parser.add_argument("--thresholds", default="0.7,0.75,0.775,0.8,0.825,0.85,0.875,0.9")
    parser.add_argument("--no-test", action="store_true", help="train and dev only")
    parser.add_argument("--results", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    started = time.time()
    datasets = [(name, Path(path)) for name, path in (item.split("=", 1) for item in args.dataset)]
    recipes = [Recipe("agglomerative", float(t)) for t in args.thresholds.split(",")]
    recipes += [Recipe("kmeans", k_rule="subtopics"), Recipe("kmeans", k_rule="topics")]
    rows, dev_means = [], {}
    for name, path in datasets:
        splits = {split: load(path, split) for split in ("train", "dev")}
        for recipe in recipes:
            found = {split: scores(recipe, docs) for split, docs in splits.items()}
            mean = (found["train"][1].ari + found["dev"][1].ari) / 2
            if recipe.method == "agglomerative":
                dev_means[recipe] = dev_means.get(recipe, 0.0) + mean / len(datasets)
            rows.append([name, recipe.name, "yes" if recipe.method == "kmeans" else "no",
                         *cells(found["train"]), *cells(found["dev"]), f"{mean:.3f}"])
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    chosen = max(dev_means, key=lambda r: (dev_means[r], -(r.threshold or 0)))
    for row in rows:
        row.append("**chosen**" if row[1] == chosen.name else "")
    header = ["Data", "Recipe", "k given", "train ARI topics", "train ARI subtopics", "train V subtopics",
              "train groups / subtopics", "dev ARI topics", "dev ARI subtopics", "dev V subtopics",
              "dev groups / subtopics", "mean ARI subtopics", "kept"]
    table = markdown_table(header, rows, ["l", "l", "l", *"r" * 9, "l"])
    test_rows, tested = [], 0
    if not args.no_test:
        old = Recipe("agglomerative", 0.9)
        for name, path in datasets:
            docs = load(path, "test")
            for recipe in dict.fromkeys([chosen, old]):
                tested += 1
                test_rows.append([name, recipe.name + (" (chosen)" if recipe == chosen else " (former default)"),
                                  *cells(scores(recipe, docs))])
    date = subprocess.run(["date", "-u"], capture_output=True, text=True).stdout.strip()
    command = "python bench/topics.py " + " ".join(f"--dataset {shlex.quote(d)}" for d in args.dataset) + \
        f" --thresholds {args.thresholds}" + (" --no-test" if args.no_test else "")
    section = [TITLE, "",
               f"- Date: {date}; run time {time.time() - started:.0f} s; machine: {machine_line()}",
               f"- Command: `{command}`",
               "- Documents: those holding mentions of the split, as `cluster` groups them. Scores against the gold "
               "topics and the gold subtopics (a topic's `ecb` and `ecbplus` halves): adjusted Rand index (ARI), "
               "V-measure (V); groups: predicted groups / gold subtopics.",
               "- Chosen on train and dev only: the best mean ARI against the subtopics over train and dev (averaged "
               "over the data sets) among the recipes that need no number of topics (K-means with k given is an "
               f"oracle, for context). Chosen: **{chosen.name}**.",
               f"- Test scored {tested} time(s) in all: the chosen recipe and the former default (0.9), once each "
               "per data set, after the choice.", "", table, ""]
    if test_rows:
        section += ["Test, once:", "", markdown_table(["Data", "Recipe", "ARI topics", "ARI subtopics",
                                                       "V subtopics", "groups / subtopics"], test_rows,
                                                      ["l", "l", *"r" * 4]), ""]
    text = "\n".join(section)
    print(text)
    if not args.no_write:
        insert_subsection(args.results, text)


if __name__ == "__main__":
    main()
