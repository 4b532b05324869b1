"""The mention pairs a pair scorer reads, and the clusters of the scored pairs (Ahmed et al. 2023).

A cross-encoder cannot read all n² pairs of a topic, so only candidate pairs are scored, within each
(group, mention type) block as every clustering here: the pairs whose mentions share a head lemma, each
mention's k nearest mentions of its block under a mention encoder (cosine of its vectors), and any pairs
a caller adds (``extra``: e.g. the pairs a lemma heuristic keeps). A pair that is not a candidate counts
as probability 0.

Two clusterings of the scored pairs, chosen on dev with the probability threshold t:

- ``components``: the connected components of the pairs with p > t (Ahmed et al.'s);
- ``average``: average linkage with distance 1 − p, where a pair that is not a candidate is at distance 1,
  merging while the closest average distance is below 1 − t (the sparse-graph linkage of
  ``agglomerative.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from corefsearch.base.errors import InputError
from corefsearch.base.schema import safe_id
from corefsearch.cluster.agglomerative import canonical_labels, graph_average_linkage

LINKAGES = ("components", "average")


def blocks(mention_ids: Sequence[str], groups: Mapping[str, str], types: Mapping[str, str]
           ) -> dict[tuple[str, str], np.ndarray]:
    """Row numbers of ``mention_ids`` per (group, mention type), in row order."""
    found: dict[tuple[str, str], list[int]] = {}
    for row, mention_id in enumerate(mention_ids):
        found.setdefault((groups[mention_id], types[mention_id]), []).append(row)
    return {key: np.asarray(rows, dtype=np.int64) for key, rows in found.items()}


def candidate_pairs(mention_ids: Sequence[str], groups: Mapping[str, str], types: Mapping[str, str], *,
                    lemmas: Mapping[str, str] | None = None, vectors: np.ndarray | None = None, k: int = 0,
                    extra: Iterable[tuple[str, str]] = ()) -> np.ndarray:
    """The candidate pairs ``(i, j)``, ``i < j``, rows of ``mention_ids``, sorted: within one (group, type),
    pairs with the same head lemma (``lemmas``), each mention's ``k`` nearest by the unit ``vectors`` (row i
    of ``mention_ids``), and the ``extra`` pairs of ids (those across blocks are left out)."""
    if k and vectors is None:
        raise InputError("nearest-neighbour candidate pairs need the mention encoder's vectors")
    row_of = {m: i for i, m in enumerate(mention_ids)}
    found: set[tuple[int, int]] = set()
    for rows in blocks(mention_ids, groups, types).values():
        if len(rows) < 2:
            continue
        if lemmas is not None:
            by_lemma: dict[str, list[int]] = {}
            for row in rows.tolist():
                by_lemma.setdefault(lemmas[mention_ids[row]], []).append(row)
            for members in by_lemma.values():
                found.update((a, b) for i, a in enumerate(members) for b in members[i + 1:])
        if k:
            assert vectors is not None
            block = np.asarray(vectors[rows], dtype=np.float32)
            similarity = block @ block.T
            np.fill_diagonal(similarity, -np.inf)
            nearest = np.argsort(-similarity, axis=1, kind="stable")[:, :min(k, len(rows) - 1)]
            for row, hits in zip(rows.tolist(), nearest.tolist(), strict=True):
                found.update((min(row, int(rows[h])), max(row, int(rows[h]))) for h in hits)
    for first, second in extra:
        a, b = row_of.get(first), row_of.get(second)
        if a is None or b is None or a == b:
            continue
        if (groups[first], types[first]) == (groups[second], types[second]):
            found.add((min(a, b), max(a, b)))
    return np.asarray(sorted(found), dtype=np.int64).reshape(-1, 2)


def cluster_scored(n: int, pairs: np.ndarray, probabilities: np.ndarray, threshold: float,
                   linkage: str = "average") -> np.ndarray:
    """Cluster labels (0.., by first appearance) of ``n`` mentions from their scored candidate ``pairs``
    (see the module docstring); pairs not given are probability 0."""
    if linkage not in LINKAGES:
        raise InputError(f"the linkage must be one of {', '.join(LINKAGES)}, got {linkage!r}")
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    if linkage == "average":
        return graph_average_linkage(n, pairs[:, 0], pairs[:, 1], probabilities, 1.0 - threshold)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    linked = probabilities > threshold
    graph = coo_matrix((np.ones(int(linked.sum()), dtype=np.int8), (pairs[linked, 0], pairs[linked, 1])),
                       shape=(n, n))
    return canonical_labels(connected_components(graph, directed=False)[1])


def assignment_of(mention_ids: Sequence[str], groups: Mapping[str, str], types: Mapping[str, str],
                  pairs: np.ndarray, probabilities: np.ndarray, threshold: float, linkage: str) -> dict[str, str]:
    """``{mention_id: GROUP/TYPE/N}``: the scored pairs clustered within each (group, type) block (every
    candidate pair lies inside one)."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    assignment: dict[str, str] = {}
    block_of = np.zeros(len(mention_ids), dtype=np.int64)
    local = np.zeros(len(mention_ids), dtype=np.int64)
    found = blocks(mention_ids, groups, types)
    for number, rows in enumerate(found.values()):
        block_of[rows] = number
        local[rows] = np.arange(len(rows))
    pair_block = block_of[pairs[:, 0]] if len(pairs) else np.zeros(0, dtype=np.int64)
    for number, ((group, mention_type), rows) in enumerate(found.items()):
        chosen = pair_block == number
        labels = cluster_scored(len(rows), local[pairs[chosen]], probabilities[chosen], threshold, linkage)
        for row, label in zip(rows.tolist(), labels.tolist(), strict=True):
            assignment[mention_ids[row]] = safe_id(f"{group}/{mention_type}/{label}")
    return assignment


def probability_grid(low: float = 0.05, high: float = 0.95, step: float = 0.05) -> list[float]:
    """Pair thresholds from ``low`` to ``high`` by ``step``, rounded to 4 decimals."""
    count = int(round((high - low) / step))
    return [round(low + i * step, 4) for i in range(count + 1)]
