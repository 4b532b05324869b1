"""Training pairs of the contrastive mention encoder (Hsu & Horwood 2022, §3.3).

Positives: every pair of mentions within a gold cluster, as in the paper; a cluster of m mentions
has m(m−1)/2 of them, so a large cluster (WEC has clusters of thousands) gives a seeded sample of
``max_positives_per_cluster`` pairs instead, lest a few clusters make up the whole training set.
Negatives: ``negatives_per_positive`` per positive (a ratio; fractions accumulate over positives),
each anchored on one mention of the positive (alternately the first and the second), from two sources:

- hard: a share ``hard_fraction`` of them (the first slots of each positive): the nearest neighbours
  of the anchor (a list the caller gives: BM25 or kNN over the encoder's vectors) that are not in
  its cluster, in neighbour order; when neither mention of the positive has one left, the slot
  takes a topic negative;
- topic: a random mention of the anchor's topic in another cluster (the paper draws all its
  negatives within gold topics, which teaches the lexical ambiguity of a topic); mentions
  without a topic form one pool (the whole corpus).

A pair is never drawn twice; an anchor without a fresh candidate (a topic of one cluster, or all its
pairs drawn) gets no negative, so the ratio is then a little short. Everything is seeded
(``random.Random(seed)``) and iterates clusters and mentions in sorted order, so the same inputs
give the same pairs in the same order.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError

TOPIC_TRIES = 20  # random draws from the topic pool before looking through all of it


@dataclass(frozen=True)
class MentionPair:
    """Two mention ids and whether they corefer (1) or not (0)."""

    first: str
    second: str
    label: int


def positive_pairs(mention_ids: Sequence[str], cap: int, rng: random.Random) -> list[tuple[str, str]]:
    """Every pair of ``mention_ids`` (sorted), or ``cap`` distinct pairs drawn at random when there are more."""
    ids = sorted(mention_ids)
    m = len(ids)
    total = m * (m - 1) // 2
    if total <= cap:
        return list(itertools.combinations(ids, 2))
    if total <= 4 * cap:  # few enough to list
        return sorted(rng.sample(list(itertools.combinations(ids, 2)), cap))
    chosen: set[tuple[int, int]] = set()
    while len(chosen) < cap:  # cap < total / 4: rejection stays cheap
        i, j = rng.sample(range(m), 2)
        chosen.add((min(i, j), max(i, j)))
    return [(ids[i], ids[j]) for i, j in sorted(chosen)]


def coreferent_pairs(cluster_ids: Sequence[str]) -> int:
    """How many coreferent pairs mentions of these clusters make (one cluster id per mention): the
    positives :func:`training_pairs` would draw without a cap."""
    sizes: dict[str, int] = {}
    for cluster_id in cluster_ids:
        sizes[cluster_id] = sizes.get(cluster_id, 0) + 1
    return sum(m * (m - 1) // 2 for m in sizes.values())


def training_pairs(clusters: Mapping[str, Sequence[str]], topics: Mapping[str, str | None] | None = None,
                   neighbours: Mapping[str, Sequence[str]] | None = None, negatives_per_positive: float = 3.0,
                   max_positives_per_cluster: int = 200, hard_fraction: float = 0.5, seed: int = 0
                   ) -> list[MentionPair]:
    """Positive and negative pairs over ``clusters`` (cluster id → mention ids).

    ``topics``: mention id → topic (None or missing: the one pool of topic-less mentions);
    ``neighbours``: mention id → its nearest mentions, nearest first (ids outside ``clusters`` are
    ignored). Positives come cluster by cluster (sorted ids), each followed by its negatives."""
    if negatives_per_positive < 0 or not math.isfinite(negatives_per_positive):
        raise InputError(f"--negatives-per-positive must be a number ≥ 0, got {negatives_per_positive}")
    at_least_one("the cap on positive pairs per cluster", max_positives_per_cluster)
    if not 0 <= hard_fraction <= 1:
        raise InputError(f"the share of hard negatives must be between 0 and 1, got {hard_fraction}")
    topics = topics or {}
    neighbours = neighbours or {}
    rng = random.Random(seed)
    cluster_of: dict[str, str] = {}
    for cluster_id in sorted(clusters):
        for mention_id in clusters[cluster_id]:
            if mention_id in cluster_of:
                raise InputError(f"mention {mention_id} is in clusters {cluster_of[mention_id]} and {cluster_id}")
            cluster_of[mention_id] = cluster_id
    pools: dict[str | None, list[str]] = {}
    for mention_id in sorted(cluster_of):
        pools.setdefault(topics.get(mention_id), []).append(mention_id)
    hard_left = {m: [n for n in neighbours.get(m, ()) if n in cluster_of and cluster_of[n] != cluster_of[m]]
                 for m in sorted(cluster_of) if m in neighbours}
    used: set[frozenset[str]] = set()
    pairs: list[MentionPair] = []
    done = 0  # positives so far, for the fractional ratios
    for cluster_id in sorted(clusters):
        for first, second in positive_pairs(clusters[cluster_id], max_positives_per_cluster, rng):
            used.add(frozenset((first, second)))
            pairs.append(MentionPair(first, second, 1))
            wanted = _share(done, negatives_per_positive)
            hard = _share(done, negatives_per_positive * hard_fraction)
            for number in range(wanted):
                anchors = (first, second) if number % 2 == 0 else (second, first)
                anchor, other = anchors[0], None
                if number < hard:  # the hard slots come first; either mention of the pair may anchor them
                    for candidate in anchors:
                        other = _next_hard(candidate, hard_left.get(candidate, []), used)
                        if other is not None:
                            anchor = candidate
                            break
                if other is None:
                    other = _topic_negative(anchor, pools[topics.get(anchor)], cluster_of, used, rng)
                if other is not None:
                    used.add(frozenset((anchor, other)))
                    pairs.append(MentionPair(anchor, other, 0))
            done += 1
    return pairs


def _share(done: int, ratio: float) -> int:
    """How many of ``ratio`` per item fall to item number ``done`` (fractions accumulate over items)."""
    return math.floor((done + 1) * ratio + 1e-9) - math.floor(done * ratio + 1e-9)


def _next_hard(anchor: str, candidates: list[str], used: set[frozenset[str]]) -> str | None:
    while candidates:
        other = candidates.pop(0)
        if frozenset((anchor, other)) not in used:
            return other
    return None


def _topic_negative(anchor: str, pool: list[str], cluster_of: Mapping[str, str], used: set[frozenset[str]],
                    rng: random.Random) -> str | None:
    def fresh(other: str) -> bool:
        return cluster_of[other] != cluster_of[anchor] and frozenset((anchor, other)) not in used

    for _ in range(TOPIC_TRIES):
        other = pool[rng.randrange(len(pool))]
        if fresh(other):
            return other
    start = rng.randrange(len(pool))  # a crowded topic: look through it all, from a random place
    return next((other for other in pool[start:] + pool[:start] if fresh(other)), None)
