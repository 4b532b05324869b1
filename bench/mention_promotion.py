"""What a mention encoder adds to a ranking, with and without the dataset's annotated mentions.

The second round from the encoder (``search --rounds 2 --expand-from encoder``) marks, in each top passage,
the dataset mention nearest to the query mention: an annotated mention. On a collection whose passages are
only partly annotated (ECB+ annotates some sentences of each document), knowing which passages hold an
annotated mention of the query's type already tells which can be relevant at all. This script measures how
much of a ranking's gain that knowledge alone gives, and how much the encoder's judgement adds with and
without it. No second search is run: each row only reorders the first round's top D.

Rows, for one first round (``--first-run``, a TREC run of ``--split``):

- ``annotated first``: the passages of the top D that hold an annotated mention of the query's type first,
  in the first round's order (an oracle: it reads the annotations; no model).
- ``encoder, annotated mentions``: of the top D, the passages whose annotated mention nearest to the query
  mention has a cosine ≥ g first (what the second round's gate and its expansion lists' heads do).
- ``encoder, reader's spans``: the same on the span a reader marked in each passage (``--spans``), which reads
  no annotation.
- ``encoder, spaCy candidates``: the same on every token spaCy tags VERB or NOUN (the project's small English
  pipeline), which reads no annotation either.

``order``: ``first`` keeps the first round's order among the promoted passages; ``cosine`` sorts them by
cosine. Scored with ``corefsearch evaluate``'s scorer (MRR@10, mAP@10, R@10, R@100, ×100).

Run: ``python bench/mention_promotion.py --dataset D --mention-encoder M --first-run RUN [--spans
RUN.spans.jsonl] [--split dev] [--depths 5,10,20] [--gates=-1,0.8,0.9] [--candidates] [--oracle-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")

METRICS = ("MRR@10", "mAP@10", "R@10", "R@100")
CANDIDATE_POS = ("VERB", "NOUN")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def metrics(ranked: dict[str, list[str]], qrels: Any) -> dict[str, float]:
    """MRR@10, mAP@10, R@10 and R@100 ×100 of ranked passage ids (``corefsearch evaluate``'s scorer)."""
    from corefsearch.evaluate.ranking import evaluate_run

    run = {qid: {pid: float(len(ids) - i) for i, pid in enumerate(ids)} for qid, ids in ranked.items()}
    aggregate = evaluate_run(run, qrels).aggregate
    return {m: 100 * float(aggregate[m]) for m in METRICS}


def score(ranked: dict[str, list[str]], qrels: Any) -> str:
    return " | ".join(f"{value:.2f}" for value in metrics(ranked, qrels).values())


def promote(first: dict[str, list[str]], depth: int, chosen: Callable[[str, str], float | None],
            gate: float, order: str) -> dict[str, list[str]]:
    """Each query's top ``depth`` passages whose ``chosen`` cosine is ≥ ``gate`` first (``None``: no mention)."""
    out = {}
    for qid, ids in first.items():
        head = [(pid, cos) for pid in ids[:depth] if (cos := chosen(qid, pid)) is not None and cos >= gate]
        if order == "cosine":
            head.sort(key=lambda item: -item[1])
        keep = {pid for pid, _ in head}
        out[qid] = [pid for pid, _ in head] + [pid for pid in ids if pid not in keep]
    return out


def annotated_first(first: dict[str, list[str]], queries: Mapping[str, Any],
                    mentions: Mapping[str, list[dict[str, Any]]], depth: int) -> dict[str, list[str]]:
    """The oracle: of each query's top ``depth`` passages, those holding an annotated mention (``mentions``: a
    passage's ``mentions`` records of passages.jsonl) of the query's type, other than the query's own, first."""

    def annotated(qid: str, pid: str) -> float | None:
        query = queries[qid]
        return 1.0 if any(m.get("type") == query.type and m["mention_id"] != qid
                          for m in mentions.get(pid, ())) else None

    return promote(first, depth, annotated, 0, "first")


def passage_mentions(dataset: Path) -> dict[str, list[dict[str, Any]]]:
    """``{passage id: its annotated mentions}`` of the dataset's passages.jsonl."""
    with (dataset / "passages.jsonl").open(encoding="utf-8") as handle:
        return {row["id"]: row.get("mentions", []) for row in map(json.loads, handle)}


class Passages:
    """The dataset's passages: text, document, topic, annotated mentions; a document's context as the mention
    encoder reads it (its first two passages, ``corefsearch.cluster.inputs``)."""

    def __init__(self, dataset: Path) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        with (dataset / "passages.jsonl").open(encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                self.rows[row["id"]] = row
        self.heads: dict[str, list[tuple[int, str]]] = {}
        from corefsearch.cluster.inputs import passage_position

        for pid, row in self.rows.items():
            number = passage_position(pid, row["doc_id"])
            if number is not None and number < 2:
                self.heads.setdefault(row["doc_id"], []).append((number, row["text"]))

    def context(self, doc_id: str) -> str:
        return " ".join(text for _, text in sorted(self.heads.get(doc_id, [])))

    def record(self, key: str, pid: str, start: int, end: int) -> Any:
        from corefsearch.cluster.inputs import MentionRecord

        row = self.rows[pid]
        text = row["text"]
        return MentionRecord(key, "", row["doc_id"], row.get("topic"), pid, text[start:end], start, end, text,
                             self.context(row["doc_id"]))


def span_cosines(expander: Any, queries: dict[str, Any], first: dict[str, list[str]], depth: int,
                 passages: Passages, spans_of: dict[tuple[str, str], list[tuple[int, int]]]
                 ) -> dict[tuple[str, str], float]:
    """``{(query, passage): the highest cosine of the query mention to any of the passage's spans}``."""
    import numpy as np

    wanted = {(pid, span) for qid, ids in first.items() for pid in ids[:depth] for span in spans_of.get((qid, pid), ())}
    keys = sorted(wanted)
    log(f"encoding {len(keys):,} spans")
    vectors = dict(zip(keys, expander.encoder.encode([passages.record(f"s{i}", pid, *span)
                                                       for i, (pid, span) in enumerate(keys)]), strict=True))
    cosines = {}
    for qid, ids in first.items():
        own = expander._query_vector(queries[qid])
        for pid in ids[:depth]:
            spans = spans_of.get((qid, pid), ())
            if spans:
                cosines[qid, pid] = float(np.max(np.stack([vectors[pid, s] for s in spans]) @ own))
    return cosines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--mention-encoder", type=Path, required=True)
    parser.add_argument("--first-run", type=Path, required=True, help="the first round: a TREC run of --split")
    parser.add_argument("--spans", type=Path, default=None, help="a reader's spans of the same run (RUN.spans.jsonl)")
    parser.add_argument("--candidates", action="store_true", help="also the spaCy candidates' rows")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--depths", default="5,10,20")
    parser.add_argument("--gates", default="-1,0.8,0.9")
    parser.add_argument("--orders", default="first,cosine")
    parser.add_argument("--oracle-only", action="store_true",
                        help="only the first round and the oracle rows (no encoder)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    from corefsearch.datasets.dataset import read_queries
    from corefsearch.io.trec import read_qrels, read_run
    from corefsearch.search.candidates import open_candidates
    from corefsearch.search.second_round import EncoderExpansion

    depths = [int(x) for x in args.depths.split(",")]
    gates = [float(x) for x in args.gates.split(",")]
    orders = args.orders.split(",")
    queries = {q.id: q for q in read_queries(args.dataset / "queries" / f"{args.split}.jsonl")}
    qrels = read_qrels(args.dataset / "qrels" / f"{args.split}.txt")
    ran = read_run(args.first_run)
    first = {qid: [pid for pid, _ in sorted(ran.get(qid, {}).items(), key=lambda x: -x[1])][:100] for qid in queries}
    passages = Passages(args.dataset)
    deepest = max(depths)

    print(f"{args.split}, {len(queries):,} queries, first round {args.first_run.name}, ×100\n")
    print("| run | D | gate | order | MRR@10 | mAP@10 | R@10 | R@100 |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    print(f"| first round | | | | {score(first, qrels)} |", flush=True)

    mentions = {pid: row.get("mentions", []) for pid, row in passages.rows.items()}
    for depth in depths:
        ranked = annotated_first(first, queries, mentions, depth)
        print(f"| annotated first (oracle) | {depth} | | first | {score(ranked, qrels)} |", flush=True)

    if args.oracle_only:
        return 0
    expander = EncoderExpansion.load(args.mention_encoder, open_candidates("gold", args.dataset), args.device)
    log("encoding the annotated mentions of the top passages")
    chosen = expander.nearest([(queries[qid], ids[:deepest]) for qid, ids in first.items()])
    gold = {(qid, pid): cos for qid in first for pid, cos in expander.similarities(queries[qid], chosen[qid]).items()}
    sources: list[tuple[str, dict[tuple[str, str], float]]] = [("encoder, annotated mentions", gold)]
    if args.spans is not None:
        from corefsearch.evaluate.spans import read_spans

        spans_of: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for span in read_spans(args.spans):
            if span.start < span.end:
                spans_of[span.qid, span.passage_id] = [(span.start, span.end)]
        sources.append(("encoder, reader's spans", span_cosines(expander, queries, first, deepest, passages,
                                                                  spans_of)))
    if args.candidates:
        from corefsearch.base.nlp import lemma_pipeline

        wanted = sorted({pid for ids in first.values() for pid in ids[:deepest]})
        log(f"tagging {len(wanted):,} passages")
        tokens = {pid: [(t.idx, t.idx + len(t.text)) for t in doc if t.pos_ in CANDIDATE_POS]
                  for pid, doc in zip(wanted, lemma_pipeline().pipe([passages.rows[p]["text"] for p in wanted],
                                                                     batch_size=256), strict=True)}
        candidates = {(qid, pid): tokens[pid] for qid, ids in first.items() for pid in ids[:deepest]}
        sources.append(("encoder, spaCy candidates", span_cosines(expander, queries, first, deepest, passages,
                                                                    candidates)))
    for label, cosines in sources:
        for depth in depths:
            for gate in gates:
                for order in orders:
                    ranked = promote(first, depth, lambda q, p, c=cosines: c.get((q, p)), gate, order)
                    print(f"| {label} | {depth} | {gate:g} | {order} | {score(ranked, qrels)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
