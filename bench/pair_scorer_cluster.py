"""The pair scorer (``train pair-scorer``) beside the mention encoder alone, on one split, under several scopes,
reading each candidate pair once.

``cluster --method encoder --pair-scorer`` scores the candidate pairs of one scope; on a shared CPU reading the
pairs is nearly all of its time, and the candidates of ``topic`` and ``predicted-topic`` are mostly the same
pairs. This script encodes the split's mentions once, takes the union of every scope's candidate pairs
(``corefsearch.cluster.candidates``, as the scorer's config says), scores them once (a pair's probability does
not depend on the scope), then clusters each scope as ``cluster`` does: the encoder alone at its τ and β
(``encoder.cluster_vectors``) and the scorer's linkage at its threshold (``candidates.assignment_of``). Writes
``{mention_id, cluster_id}`` files to ``--out-dir`` (score them with ``corefsearch evaluate --clusters``) and
prints CoNLL F1 (singletons kept). ``--sweep`` also prints every threshold and linkage (for dev only).

Run: ``python bench/pair_scorer_cluster.py --dataset DATASET --model ENCODER_DIR --pair-scorer SCORER_DIR
--split test --out-dir DIR [--scopes predicted-topic,topic] [--sweep]``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from corefsearch.base.schema import safe_id
from corefsearch.cluster.baselines import mention_head_lemmas
from corefsearch.cluster.candidates import LINKAGES, assignment_of, candidate_pairs, probability_grid
from corefsearch.cluster.encoder import cluster_vectors, split_records
from corefsearch.cluster.mentions import read_split_mentions
from corefsearch.cluster.model import MentionEncoder
from corefsearch.cluster.topics import mention_groups
from corefsearch.evaluate.coref import score_partitions
from corefsearch.pair_scorer.model import PairScorer, lemma_candidates


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def write(path: Path, assignment: dict[str, str]) -> None:
    path.write_text("".join(json.dumps({"mention_id": m, "cluster_id": safe_id(c)}) + "\n"
                            for m, c in sorted(assignment.items())), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True, help="mention encoder (train clusterer)")
    parser.add_argument("--pair-scorer", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--scopes", default="predicted-topic,topic")
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sweep", action="store_true", help="print every threshold and linkage (dev)")
    a = parser.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    scopes = a.scopes.split(",")

    found = read_split_mentions(a.dataset, a.split)
    records = split_records(a.dataset, a.split)
    ids = [r.mention_id for r in records]
    key = {r.mention_id: r.cluster_id for r in records}
    types = {m.mention_id: m.type for m in found.mentions}
    encoder = MentionEncoder.load(a.model)
    scorer = PairScorer.load(a.pair_scorer)
    config = scorer.config
    log(f"{a.split}: {len(records):,} mentions; encoder τ {encoder.config.threshold}, β {encoder.config.lemma_weight}; "
        f"scorer {config.linkage} at p > {config.threshold}, candidates: same lemma {config.same_lemma}, "
        f"neighbours {config.neighbours}, both orders {config.both_orders}")
    started = time.perf_counter()
    vectors = encoder.encode(records, batch_size=a.batch_size)
    log(f"encoded in {time.perf_counter() - started:.0f} s")
    lemmas = mention_head_lemmas(found.mentions, found.passage_texts)
    groups = {scope: mention_groups(found.mentions, scope, a.dataset) for scope in scopes}
    pairs = {}
    for scope in scopes:
        scope_lemmas, extra = lemma_candidates(config, found, groups[scope], types)
        pairs[scope] = candidate_pairs(ids, groups[scope], types, lemmas=scope_lemmas, vectors=vectors,
                                       k=config.neighbours, extra=extra)
    union = np.unique(np.concatenate(list(pairs.values())), axis=0)
    log(f"candidate pairs: {', '.join(f'{s} {len(p):,}' for s, p in pairs.items())}; union {len(union):,}")
    started = time.perf_counter()
    probabilities = scorer.score(records, union, a.batch_size)
    seconds = time.perf_counter() - started
    log(f"scored {len(union):,} pairs in {seconds:.0f} s ({len(union) / seconds:.1f} pairs/s)")
    row = {tuple(p): i for i, p in enumerate(union.tolist())}
    print(f"| scope | candidate pairs | coreferent kept | encoder alone (τ {encoder.config.threshold:g}, "
          f"β {encoder.config.lemma_weight:g}) | pair scorer ({config.linkage}, p > {config.threshold:g}) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    clusters = np.asarray([key[m] for m in ids], dtype=object)
    for scope in scopes:
        chosen = pairs[scope]
        p = probabilities[[row[tuple(x)] for x in chosen.tolist()]]
        coreferent = int((clusters[chosen[:, 0]] == clusters[chosen[:, 1]]).sum()) if len(chosen) else 0
        alone = cluster_vectors(ids, vectors, groups[scope], types, float(encoder.config.threshold), scope,
                                lemmas=lemmas, lemma_weight=float(encoder.config.lemma_weight))
        scored = assignment_of(ids, groups[scope], types, chosen, p, float(config.threshold), config.linkage)
        write(a.out_dir / f"encoder-{a.split}-{scope}.jsonl", alone)
        write(a.out_dir / f"scorer-{a.split}-{scope}.jsonl", scored)
        print(f"| {scope} | {len(chosen):,} | {coreferent:,} | {100 * score_partitions(key, alone).conll_f1:.2f} | "
              f"{100 * score_partitions(key, scored).conll_f1:.2f} |", flush=True)
        if a.sweep:
            for linkage in LINKAGES:
                line = [f"{t:g}: {100 * score_partitions(key, assignment_of(ids, groups[scope], types, chosen, p, t, linkage)).conll_f1:.2f}"  # noqa: E501
                        for t in probability_grid()]
                print(f"  {scope} {linkage}: " + ", ".join(line), flush=True)


if __name__ == "__main__":
    main()
