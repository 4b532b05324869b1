"""The answer as a cluster (``query --cluster``) on detected mentions: per-query B³ F1 of its top 10, and its cut.

``query --cluster`` answers "where else is this event mentioned?" with a set of mentions: the query's,
and in each of the top 10 hits the candidate mention the mention encoder scores highest, kept when its
score reaches the encoder's answer cut. This bench asks a dataset's queries
by id through the engine that ``query`` and ``serve`` use (the candidates are the dataset's stored
predicted mentions: ``--candidates detected``), and scores each answer against the query's gold
cluster with the per-query B³ of ``evaluate --cluster-k`` (``corefsearch.evaluate.query_clusters``).
A detected mention counts as the gold mention it matches: ``strict``, the same span; ``overlap``, the
gold mention it overlaps most (as ``evaluate --cluster-k`` aligns a reader's spans). Otherwise it is a
mention of no gold cluster.

The answer's cut (each hit's best candidate joins at this score or above: ``corefsearch.search.cluster_answer``)
is the encoder's ``answer_cut``; ``--cuts`` scores a grid on ``--split`` (dev): the mentions are encoded once per
query, each cut only re-scores. ``--test``: the test split once, at the encoder's cut and at dev's choice. (Until
2026-11-29 the answer was average linkage at the encoder's clustering τ, and this grid was of τ.)

Run: ``python bench/answer_clusters.py --index INDEX --dataset DATASET_WITH_PREDICTED_MENTIONS
--mention-encoder DIR [--max-queries 400] [--test]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")

CUTS = [0.75, 0.8, 0.84, 0.88, 0.92, 0.96]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def open_engine(index: Path, dataset: Path, encoder: str, device: str) -> Any:
    """The engine with the hybrid dev chose ("Hybrid: which BM25 to fuse"), as the second-round bench uses."""
    from corefsearch.fusion import FusionOptions
    from corefsearch.search.engine import SearchEngine
    from corefsearch.search.options import ExpansionOptions, RetrievalOptions, SearchOptions
    from corefsearch.sparse.search import BM25Options

    return SearchEngine.open(index, SearchOptions(
        bm25=BM25Options(query_format="sentence", fields={"sentence": 1.0, "document": 0.1}),
        retrieval=RetrievalOptions(retriever="hybrid", device=device,
                                   fusion=FusionOptions(method="interpolate", alpha=0.5)),
        expansion=ExpansionOptions(encoder=encoder)), dataset)


class Recorder:
    """Wraps ``cluster_answer`` in its module (``corefsearch.search.cluster_answer``, whose ``cluster_of_hits``
    the engine calls): keeps each query's inputs, and caches the encoder's vectors so that re-clustering at
    another cut encodes nothing again."""

    def __init__(self) -> None:
        import corefsearch.search.cluster_answer as answer_module

        self.module = answer_module
        self.original = answer_module.cluster_answer
        self.calls: list[tuple[Any, Any, str, list[Any]]] = []
        answer_module.cluster_answer = self  # type: ignore[assignment]

    def __call__(self, encoder: Any, query: Any, query_context: str, found: Sequence[Any],
                 cut: float | None = None, cached: Any = None) -> dict[str, Any]:
        self.calls.append((encoder, query, query_context, list(found)))
        return self.original(encoder, query, query_context, found, cut, cached)


class CachedEncoder:
    """The mention encoder with a cache of ``encode`` by record (each answer re-scored at many cuts)."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.config = encoder.config
        self.cache: dict[Any, Any] = {}

    def encode(self, records: Sequence[Any]) -> Any:
        import numpy as np

        keys = [(r.passage_id, r.start, r.end, r.sentence, r.context) for r in records]
        missing = [(key, r) for key, r in zip(keys, records, strict=True) if key not in self.cache]
        if missing:
            for (key, _), vector in zip(missing, self.encoder.encode([r for _, r in missing]), strict=True):
                self.cache[key] = vector
        return np.stack([self.cache[key] for key in keys])


def gold_index(dataset: Path) -> tuple[dict[str, str], dict[str, list[str]], dict[str, list[tuple[str, int, int]]]]:
    from corefsearch.datasets.dataset import Dataset
    from corefsearch.evaluate.query_clusters import cluster_index

    data = Dataset(dataset)
    cluster_of, members = cluster_index(data)
    passages = {p.id: [(m.mention_id, m.start, m.end) for m in p.mentions] for p in data.passages() if p.mentions}
    return cluster_of, members, passages


def answer_ids(qid: str, answer: dict[str, Any], passages: dict[str, list[tuple[str, int, int]]],
               alignment: str) -> set[str]:
    """The query's id and, per answered mention, the gold mention it stands for (module docstring)."""
    ids = {qid}
    for document in answer["documents"]:
        for mention in document["mentions"]:
            pid, start, end = mention["passage_id"], mention["start"], mention["end"]
            best, overlap = None, 0
            for mention_id, gold_start, gold_end in passages.get(pid, ()):
                if alignment == "strict":
                    if (gold_start, gold_end) == (start, end):
                        best = mention_id
                        break
                    continue
                shared = min(end, gold_end) - max(start, gold_start)
                if shared > overlap:
                    best, overlap = mention_id, shared
            ids.add(best if best is not None else f"{pid}:{start}-{end}")
    return ids


def score(calls: list[tuple[Any, Any, str, list[Any]]], encoder: Any, cut: float | None,
          gold: tuple[dict[str, str], dict[str, list[str]], dict[str, list[tuple[str, int, int]]]],
          original: Any) -> dict[str, float]:
    from corefsearch.evaluate.query_clusters import query_b_cubed

    cluster_of, members, passages = gold
    totals = {"strict": [0.0, 0.0, 0.0], "overlap": [0.0, 0.0, 0.0]}
    size = 0
    for _, query, context, found in calls:
        answer = original(encoder, query, context, found, cut)
        size += answer["size"]
        for alignment, sums in totals.items():
            values = query_b_cubed(query.id, answer_ids(query.id, answer, passages, alignment), cluster_of, members)
            for i, name in enumerate(("B3 P", "B3 R", "B3 F1")):
                sums[i] += values[name]
    n = max(len(calls), 1)
    row = {f"{name} ({alignment})": 100 * sums[i] / n for alignment, sums in totals.items()
           for i, name in enumerate(("B3 P", "B3 R", "B3 F1"))}
    row["answer size"] = size / n
    return row


def ask(engine: Any, recorder: Recorder, queries: Sequence[Any], label: str) -> float:
    started = time.perf_counter()
    recorder.calls.clear()
    for i, query in enumerate(queries, 1):
        engine.query(qid=query.id, k=10, cluster=True)
        if i % 100 == 0:
            log(f"{label}: {i:,} of {len(queries):,} queries answered")
    return time.perf_counter() - started


def table(rows: list[tuple[str, dict[str, float]]]) -> None:
    names = list(rows[0][1])
    print("| cut | " + " | ".join(names) + " |\n| --- |" + " ---: |" * len(names))
    for label, values in rows:
        print(f"| {label} | " + " | ".join(f"{values[m]:.2f}" for m in names) + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--dataset", type=Path, required=True, help="with predicted_mentions.jsonl (`detect`)")
    parser.add_argument("--mention-encoder", default="event-encoder-ecbplus", help="a shipped name or a folder")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--max-queries", type=int, default=400, help="a seeded sample of each split's queries")
    parser.add_argument("--cuts", default=",".join(str(t) for t in CUTS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--test", action="store_true")
    args = parser.parse_args(argv)

    from corefsearch.datasets.dataset import read_queries

    recorder = Recorder()
    engine = open_engine(args.index, args.dataset, args.mention_encoder, args.device)
    gold = gold_index(args.dataset)
    taus = [float(t) for t in args.cuts.split(",")]

    def sample(split: str) -> list[Any]:
        queries = read_queries(args.dataset / "queries" / f"{split}.jsonl")
        return random.Random(13).sample(queries, min(args.max_queries, len(queries)))

    queries = sample(args.split)
    seconds = ask(engine, recorder, queries, args.split)
    encoder = CachedEncoder(recorder.calls[0][0]) if recorder.calls else None
    if encoder is None:
        raise SystemExit("no answer was clustered")
    own_tau = float(encoder.config.answer_cut)
    print(f"\n{args.split}: {len(queries):,} queries ({seconds:.0f} s to answer them, k 10, cluster); the encoder's "
          f"answer cut {own_tau:g}, β {encoder.config.lemma_weight:g}; ×100\n")
    rows = [(f"{tau:g}" + (" (the encoder's)" if tau == own_tau else ""),
             score(recorder.calls, encoder, tau, gold, recorder.original)) for tau in taus]
    table(rows)
    best = max(zip(taus, rows, strict=True), key=lambda x: x[1][1]["B3 F1 (strict)"])[0]
    print(f"\nDev chose the cut {best:g} (B3 F1, strict alignment).")
    if args.test:
        queries = sample("test")
        seconds = ask(engine, recorder, queries, "test")
        encoder = CachedEncoder(recorder.calls[0][0])
        print(f"\ntest, once: {len(queries):,} queries ({seconds:.0f} s), ×100\n")
        table([(f"{tau:g}" + (" (the encoder's)" if tau == own_tau else "") + (" (dev's choice)" if tau == best
                                                                                else ""),
                score(recorder.calls, encoder, tau, gold, recorder.original))
               for tau in dict.fromkeys([own_tau, best])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
