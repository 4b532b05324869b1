"""Document grouping of ``cluster --scope predicted-topic`` on collections of different sizes: candidate
recipes scored on dev-type collections only, the default chosen there, then ECB+ test scored once.

Collections (each scored against its reference by adjusted Rand index, ARI, and V-measure):

- ECB+ dev, whole documents (every sentence; ``build-dataset --format ecbplus --chains all --mention-type all``)
  and validated sentences (``--validated-only``): the documents holding mentions of dev, as ``cluster`` groups
  them; reference: the subtopics (each topic's ``ecb`` and ``ecbplus`` halves), topics reported too;
- ECB+ dev subsets of 10-40 documents (``--subsets``, seeded): 2-8 subtopics, 2-6 documents of each; every
  other subset holds both halves of at least one topic (two similar events), the others subtopics at random.
  Whole documents, and the same documents' validated sentences; mean, minimum and share with ARI >= 0.8;
- MEANTIME (``--format cdcr-json``), all 120 documents; reference: its 4 topics (each holds many events, so an
  event-level grouping splits them: reported, not chosen on);
- the benchmark's plain collection (``bench/data/plain-events``, ``--format text``; its README and annotations skipped):
  33 documents; reference: the 5 events (``fire-*``, ``bridge-*``, ...), each ``other-*`` its own.

Recipes: average linkage on a cosine distance cut at a threshold, the similarity being TF-IDF's (the library's,
fitted on the collection), TF-IDF's with an IDF floor (as if 100 more documents held no word: it does not fall
to nothing on a small collection), the default encoder's (all-MiniLM-L6-v2, mean-pooled over each document's
first 256 tokens: ``topics.document_embeddings``), capitalised words' and 4-digit numbers' TF-IDF (a cheap
stand-in for names and dates), or a weighted mean of them.

Choosing rule (dev-type collections only): maximise the minimum of (ECB+ dev whole documents ARI against the
subtopics, plain ARI, mean ARI of the whole-document subsets); among the recipes within 0.01 of the best, the
one built from the library's parts only (its TF-IDF, the default encoder), then the highest minimum. Test
(ECB+ test, whole documents and validated sentences) is scored once, for the chosen recipe and the former
default (TF-IDF, 0.8).

Time: the seconds of each recipe on ECB+ dev whole documents (the encoder's share: encoding those documents,
once, model loaded), and the chosen recipe end to end (encoder loading included) on every ECB+ document.

Run: ``python bench/topics_sizes.py --ecb-full work/gsizes/ecb-full --ecb-validated work/gsizes/ecb-val
--meantime work/gsizes/meantime --plain work/gsizes/plain [--subsets 100] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")

import numpy as np  # noqa: E402
from bm25 import markdown_table  # noqa: E402
from topics import machine_line  # noqa: E402

from corefsearch.cluster.agreement import Agreement, agreement, ecbplus_subtopics  # noqa: E402
from corefsearch.cluster.mentions import document_texts, read_split_mentions  # noqa: E402
from corefsearch.cluster.topics import (  # noqa: E402
    DEFAULT_TOPIC_THRESHOLD,
    TOPIC_ENCODER_WEIGHT,
    average_linkage_labels,
    document_embeddings,
    predicted_topics,
    tfidf_vectors,
)
from corefsearch.datasets.dataset import Dataset  # noqa: E402

FLOOR_DOCS = 100  # the IDF floor: documents added that hold no word
_NAME = re.compile(r"\b(?:[A-Z][A-Za-z'\-]+|\d{4})\b")


@dataclass
class Collection:
    name: str
    texts: dict[str, str]
    reference: dict[str, str]
    vectors: Any  # the encoder's rows, in sorted document order
    topics: dict[str, str] | None = None  # ECB+: the gold topics (reported beside the subtopics)
    cache: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # each similarity's cost, computed once

    @property
    def ids(self) -> list[str]:
        return sorted(self.texts)

    def subset(self, name: str, doc_ids: list[str]) -> Collection:
        keep = sorted(d for d in doc_ids if d in self.texts)
        rows = [self.ids.index(d) for d in keep]
        return Collection(name, {d: self.texts[d] for d in keep}, {d: self.reference[d] for d in keep},
                          self.vectors[rows])


def names_text(text: str) -> str:
    """The capitalised words (not a line's first) and 4-digit numbers of ``text``, lower-cased."""
    words = []
    for line in text.split("\n"):
        words += [w.lower() for w in _NAME.findall(" ".join(line.split()[1:]))]
    return " ".join(words) or "nonamesatall"


def floored_tfidf(texts: list[str]) -> Any:
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.preprocessing import normalize

    counts = CountVectorizer(stop_words="english").fit_transform(texts).astype(np.float64)
    df = np.asarray((counts > 0).sum(axis=0)).ravel()
    idf = np.log((1 + counts.shape[0] + FLOOR_DOCS) / (1 + df)) + 1
    counts.data = 1 + np.log(counts.data)
    return normalize(counts.multiply(idf).tocsr())


def similarity(collection: Collection, part: str) -> Any:
    if part not in collection.cache:
        started = time.perf_counter()
        texts = [collection.texts[d] for d in collection.ids]
        if part == "minilm":
            found = collection.vectors @ collection.vectors.T
        else:
            rows = {"tfidf": tfidf_vectors, "tfidf-floor": floored_tfidf,
                    "names": lambda t: tfidf_vectors([names_text(x) for x in t])}[part](texts)
            found = (rows @ rows.T).toarray()
        collection.cache[part] = found
        collection.seconds[part] = time.perf_counter() - started
    return collection.cache[part]


@dataclass(frozen=True)
class Recipe:
    parts: tuple[tuple[str, float], ...]  # (similarity, weight)
    threshold: float

    @property
    def name(self) -> str:
        mix = " + ".join(p if len(self.parts) == 1 else f"{w:g} {p}" for p, w in self.parts)
        return f"{mix} @ {self.threshold:g}"

    @property
    def library_parts_only(self) -> bool:
        return all(p in ("tfidf", "minilm") for p, _ in self.parts)

    def run(self, collection: Collection) -> dict[str, str]:
        ids = collection.ids
        if len(ids) < 2:
            return {d: "p1" for d in ids}
        total = sum(w * similarity(collection, p) for p, w in self.parts)
        labels = average_linkage_labels(total, self.threshold)
        return {d: str(label) for d, label in zip(ids, labels, strict=True)}


def recipes() -> list[Recipe]:
    found = [Recipe((("tfidf", 1.0),), t) for t in (0.75, 0.8, 0.825, 0.85, 0.875, 0.9, 0.95)]
    found += [Recipe((("tfidf-floor", 1.0),), t) for t in (0.8, 0.85, 0.9)]
    found += [Recipe((("minilm", 1.0),), t) for t in (0.35, 0.4, 0.425, 0.45, 0.475, 0.5)]
    found += [Recipe((("names", 1.0),), t) for t in (0.75, 0.8, 0.85)]
    w = TOPIC_ENCODER_WEIGHT
    found += [Recipe((("minilm", w), ("tfidf", 1 - w)), t) for t in (0.58, 0.6, 0.62, 0.64, 0.66, 0.68, 0.7)]
    found += [Recipe((("minilm", w), ("tfidf-floor", 1 - w)), t) for t in (0.6, 0.62, 0.64, 0.66)]
    found += [Recipe((("minilm", 0.4), ("tfidf", 0.3), ("names", 0.3)), t) for t in (0.6, 0.62, 0.65, 0.68)]
    return found


def ecb_collection(dataset: Path, split: str, name: str) -> Collection:
    found = read_split_mentions(dataset, split)
    topics = {m.doc_id: str(m.topic) for m in found.mentions}
    subtopics = ecbplus_subtopics(topics)
    if subtopics is None:
        raise SystemExit(f"{dataset}: not ECB+ document ids; no subtopics")
    texts = document_texts(dataset, set(topics))
    return Collection(name, texts, subtopics, document_embeddings([texts[d] for d in sorted(texts)]), topics)


def meantime_collection(dataset: Path) -> Collection:
    topics = {m.doc_id: str(m.topic) for split in ("train", "dev", "test")
              for m in read_split_mentions(dataset, split).mentions}
    texts = document_texts(dataset, set(topics))
    return Collection("MEANTIME (all)", texts, topics, document_embeddings([texts[d] for d in sorted(texts)]))


def plain_collection(dataset: Path) -> Collection:
    ids = {p.doc_id for p in Dataset(dataset).passages()}
    texts = document_texts(dataset, ids)
    events = {d: d if d.startswith("other-") else d.rsplit("-", 1)[0] for d in ids}
    return Collection("plain-events", texts, events, document_embeddings([texts[d] for d in sorted(texts)]))


def subset_ids(subtopics: dict[str, str], count: int, seed: int) -> list[list[str]]:
    """``count`` seeded subsets of 10-40 documents: 2-8 subtopics, 2-6 documents of each; every other one
    holds both halves of at least one topic."""
    rng = random.Random(seed)
    by: dict[str, list[str]] = {}
    for doc, sub in sorted(subtopics.items()):
        by.setdefault(sub, []).append(doc)
    names = sorted(by)
    topics = sorted({re.sub(r"ecb(plus)?$", "", s) for s in names})
    found: list[list[str]] = []
    while len(found) < count:
        k = rng.randint(2, 8)
        if len(found) % 2 == 0:
            chosen: list[str] = []
            for topic in rng.sample(topics, len(topics)):
                halves = [h for h in (topic + "ecb", topic + "ecbplus") if h in by]
                if len(chosen) + len(halves) <= k and (len(halves) == 2 or chosen):
                    chosen += halves
                if len(chosen) >= k:
                    break
        else:
            chosen = rng.sample(names, k)
        docs = [d for s in chosen for d in rng.sample(by[s], min(len(by[s]), rng.randint(2, 6)))]
        if 10 <= len(docs) <= 40 and len(chosen) >= 2:
            found.append(sorted(docs))
    return found


def cell(a: Agreement) -> list[str]:
    return [f"{a.ari:.3f}", f"{a.v_measure:.3f}", f"{a.groups} / {a.reference_groups}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ecb-full", type=Path, required=True, help="ECB+, every sentence (--chains all)")
    parser.add_argument("--ecb-validated", type=Path, required=True, help="ECB+, --validated-only --chains all")
    parser.add_argument("--meantime", type=Path, required=True, help="MEANTIME (--format cdcr-json)")
    parser.add_argument("--plain", type=Path, required=True, help="bench/data/plain-events (--format text)")
    parser.add_argument("--subsets", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-test", action="store_true", help="dev-type collections only")
    parser.add_argument("--out", type=Path, help="also write the text to this file")
    args = parser.parse_args()
    started = time.time()
    document_embeddings(["load the encoder"])  # loaded once, outside the timings below
    encode_start = time.time()
    full = ecb_collection(args.ecb_full, "dev", "ECB+ dev, whole documents")
    encode_s = time.time() - encode_start  # the encoder's share on ECB+ dev whole documents
    validated = ecb_collection(args.ecb_validated, "dev", "ECB+ dev, validated sentences")
    meantime, plain = meantime_collection(args.meantime), plain_collection(args.plain)
    picks = subset_ids(full.reference, args.subsets, args.seed)
    subs_full = [full.subset(f"f{i}", ids) for i, ids in enumerate(picks)]
    subs_val = [validated.subset(f"v{i}", ids) for i, ids in enumerate(picks)]
    sizes = [len(s.ids) for s in subs_full]
    print(f"{len(picks)} subsets: {min(sizes)}-{max(sizes)} documents, "
          f"{min(len(set(s.reference.values())) for s in subs_full)}-"
          f"{max(len(set(s.reference.values())) for s in subs_full)} subtopics", file=sys.stderr)
    rows, scores = [], {}
    for recipe in recipes():
        for part, _ in recipe.parts:
            similarity(full, part)  # each similarity computed (and timed) once
        t0 = time.perf_counter()
        on_full = recipe.run(full)
        seconds = time.perf_counter() - t0 + sum(full.seconds[p] for p, _ in recipe.parts)
        seconds += encode_s if any(p == "minilm" for p, _ in recipe.parts) else 0.0
        a_full, a_topics = agreement(on_full, full.reference), agreement(on_full, full.topics or {})
        a_val = agreement(recipe.run(validated), validated.reference)
        a_mt = agreement(recipe.run(meantime), meantime.reference)
        a_plain = agreement(recipe.run(plain), plain.reference)
        sf = np.array([agreement(recipe.run(s), s.reference).ari for s in subs_full])
        sv = np.array([agreement(recipe.run(s), s.reference).ari for s in subs_val])
        scores[recipe] = min(a_full.ari, a_plain.ari, float(sf.mean()))
        rows.append([recipe.name, *cell(a_full), f"{a_topics.ari:.3f}", f"{a_val.ari:.3f}", *cell(a_mt),
                     *cell(a_plain), f"{sf.mean():.3f}", f"{sf.min():.3f}", f"{(sf >= 0.8).mean():.2f}",
                     f"{sv.mean():.3f}", f"{sv.min():.3f}", f"{scores[recipe]:.3f}", f"{seconds:.2f}"])
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    best = max(scores.values())
    near = [r for r in scores if scores[r] >= best - 0.01]
    chosen = max(near, key=lambda r: (r.library_parts_only, scores[r]))
    for row, recipe in zip(rows, scores, strict=True):
        row.append("**chosen**" if recipe == chosen else "")
    header = ["Recipe", "ECB+ dev whole ARI sub", "V sub", "groups / sub", "ARI topics", "ECB+ dev validated ARI sub",
              "MEANTIME ARI topics", "V", "groups / topics", "plain ARI events", "V", "groups / events",
              "subsets whole mean ARI", "min", "share >= 0.8", "subsets validated mean ARI", "min",
              "rule: min(dev whole, plain, subsets mean)", "s (ECB+ dev whole)", "kept"]
    table = markdown_table(header, rows, ["l", *"r" * 18, "l"])
    former = Recipe((("tfidf", 1.0),), 0.8)
    default = Recipe((("minilm", TOPIC_ENCODER_WEIGHT), ("tfidf", 1 - TOPIC_ENCODER_WEIGHT)), DEFAULT_TOPIC_THRESHOLD)
    test_rows, tested = [], 0
    if not args.no_test:
        for path, label in ((args.ecb_full, "whole documents"), (args.ecb_validated, "validated sentences")):
            test = ecb_collection(path, "test", f"ECB+ test, {label}")
            for recipe in dict.fromkeys([chosen, former]):
                tested += 1
                grouping = recipe.run(test)
                a_sub, a_top = agreement(grouping, test.reference), agreement(grouping, test.topics or {})
                test_rows.append([test.name, recipe.name + (" (chosen)" if recipe == chosen else " (former default)"),
                                  *cell(a_sub), f"{a_top.ari:.3f}"])
    # The chosen recipe end to end, encoder loading included, on every ECB+ document (whole).
    every = document_texts(args.ecb_full, {p.doc_id for p in Dataset(args.ecb_full).passages()})
    t0 = time.time()
    predicted_topics(every)
    end_to_end = time.time() - t0
    date = subprocess.run(["date", "-u"], capture_output=True, text=True).stdout.strip()
    command = "python bench/topics_sizes.py " + " ".join(
        f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in vars(args).items()
        if v is not None and v is not False and k not in ("out", "no_test")) + (" --no-test" if args.no_test else "")
    section = [
        "### Document grouping across collection sizes (bench/topics_sizes.py)", "",
        f"- Date: {date}; run time {time.time() - started:.0f} s; machine: {machine_line()}",
        f"- Command: `{command}`",
        f"- Dev-type collections: ECB+ dev ({len(full.ids)} documents; whole documents and validated sentences; "
        f"reference: subtopics, topics too), {len(picks)} seeded ECB+ dev subsets ({min(sizes)}-{max(sizes)} "
        "documents, 2-8 subtopics, every other one with both halves of a topic; reference: subtopics), MEANTIME "
        f"({len(meantime.ids)} documents; reference: its topics, which hold many events: reported, not chosen "
        f"on), plain-events ({len(plain.ids)} documents; reference: events). ARI: adjusted Rand index, V: "
        "V-measure; groups: predicted / reference.",
        "- Rule: the best min(ECB+ dev whole ARI, plain ARI, mean subset ARI (whole)); within 0.01 of it, the "
        f"recipe of the library's parts only (its TF-IDF, the default encoder). Chosen: **{chosen.name}**; "
        f"the library's default (`predicted_topics`): {default.name}" + (", the same." if default == chosen else
                                                                       ": NOT the chosen one."),
        f"- Time: seconds on ECB+ dev whole documents ({len(full.ids)}; the encoder's share {encode_s:.1f} s, "
        f"model loaded). The chosen recipe end to end (`predicted_topics`, encoder loading included) on all "
        f"{len(every)} ECB+ documents, every sentence: {end_to_end:.1f} s.",
        f"- Test scored {tested} time(s) in all: the chosen recipe and the former default, once each per data set, "
        "after the choice.", "", table, ""]
    if test_rows:
        section += ["Test, once:", "", markdown_table(
            ["Data", "Recipe", "ARI subtopics", "V subtopics", "groups / subtopics", "ARI topics"], test_rows,
            ["l", "l", *"r" * 4]), ""]
    text = "\n".join(section)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
