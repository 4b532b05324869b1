"""The clusterer's batches: the ``topic-batch`` objective's batches of one topic's mentions, drawn per epoch
(:func:`topic_batches`) or gathered around what the encoder confuses (:func:`hard_topic_batches`). The
``pairs`` objective's batches are its drawn pairs (``pairs.py``), shuffled per epoch by the trainer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from corefsearch.cluster.inputs import MentionRecord
from corefsearch.training.common import epoch_rng


def topic_batches(records: Sequence[MentionRecord], size: int, seed: int, epoch: int) -> list[list[str]]:
    """The ``topic-batch`` objective's batches of ``epoch``: each train topic's mentions (records without a
    topic form one pool) in a seeded order of their clusters (members kept together, in id order), cut into
    ``ceil(n / size)`` batches of near-equal size; the batches of all topics in a seeded order. The number
    of batches depends on the topic sizes only, so every epoch has as many."""
    topics: dict[str, dict[str, list[str]]] = {}
    for r in sorted(records, key=lambda r: r.mention_id):
        topics.setdefault(r.topic or "", {}).setdefault(r.cluster_id, []).append(r.mention_id)
    rng = epoch_rng(seed, epoch)
    batches: list[list[str]] = []
    for topic in sorted(topics):
        order = sorted(topics[topic])
        rng.shuffle(order)
        mentions = [m for cluster_id in order for m in topics[topic][cluster_id]]
        count = math.ceil(len(mentions) / size)
        cuts = [round(i * len(mentions) / count) for i in range(count + 1)]
        batches += [mentions[cuts[i]:cuts[i + 1]] for i in range(count)]
    rng.shuffle(batches)
    return batches


def hard_topic_batches(records: Sequence[MentionRecord], vectors: np.ndarray, size: int, seed: int,
                       epoch: int) -> list[list[str]]:
    """The ``topic-batch`` batches of ``epoch`` re-mined with the encoder (``--remine-negatives``): each
    topic's mentions are cut into as many batches, of the same sizes, as :func:`topic_batches` makes, but a
    batch gathers a mention (drawn in a seeded order) with its nearest mentions of the topic not yet in a
    batch (cosine of ``vectors``, the unit vectors of ``records`` in order; ties by mention id). A batch
    then holds the mentions the encoder confuses: their coreferent ones and the hard negatives. The
    batches depend on the vectors, the seed and the epoch only."""
    topics: dict[str, list[int]] = {}
    order = sorted(range(len(records)), key=lambda i: records[i].mention_id)
    for i in order:
        topics.setdefault(records[i].topic or "", []).append(i)
    rng = epoch_rng(seed, epoch)
    batches: list[list[str]] = []
    for topic in sorted(topics):
        rows = topics[topic]
        similarity = vectors[rows] @ vectors[rows].T
        count = math.ceil(len(rows) / size)
        cuts = [round(i * len(rows) / count) for i in range(count + 1)]
        seeds = list(range(len(rows)))
        rng.shuffle(seeds)
        left = np.ones(len(rows), dtype=bool)
        for b in range(count):
            first = next(i for i in seeds if left[i])
            candidates = np.flatnonzero(left)
            # nearest first; the drawn mention itself leads (a unit vector is nearest to itself)
            ranked = candidates[np.lexsort((candidates, -similarity[first, candidates]))]
            chosen = [first] + [int(j) for j in ranked if j != first][:cuts[b + 1] - cuts[b] - 1]
            left[chosen] = False
            batches.append([records[rows[j]].mention_id for j in chosen])
    rng.shuffle(batches)
    return batches
