"""Coreference metrics: MUC, B³, CEAF-e, LEA and the CoNLL F1, each as recall, precision and F1.

Written by hand: no maintained PyPI package computes all five (``scorch`` has MUC, B³ and
CEAF but not LEA; the PyPI ``coval`` is an unrelated project), and the definitions are short.
The tests check these functions against the metric papers' worked examples and against
``scorch`` on hundreds of random partitions.

Key and response are partitions of mentions, given as ``{mention_id: cluster_id}`` maps (or,
for the single metrics, as lists of clusters, each a set of mention ids). Mentions that are only
in one of them are handled as the CoNLL reference scorer v8 (Pradhan et al. 2014) does, without
any mention manipulation:

- key mentions missing from the response lower recall (and, for MUC, split their key cluster);
- response mentions not in the key ("twinless") lower precision in B³, CEAF-e and LEA, and in
  MUC each splits its response cluster when that is partitioned by the key's clusters;
- a ratio whose denominator is 0 is 0, and F1 is 0 when recall + precision is 0 (so MUC is 0
  when every key cluster is a singleton: it has no links to find).

Definitions:

- MUC (Vilain et al. 1995): R = Σ_k (|k| − |p(k)|) / Σ_k (|k| − 1), p(k) the partition of k by
  the response's clusters (a mention of k the response lacks is a part of its own); P likewise
  with the roles swapped.
- B³ (Bagga & Baldwin 1998): R = Σ_k Σ_r |k∩r|² / |k| over Σ_k |k|; P symmetric.
- CEAF-e (Luo 2005): the one-to-one alignment of key and response clusters that maximises
  Σ φ4(k, r), φ4 = 2|k∩r| / (|k| + |r|) (Kuhn-Munkres, ``scipy.optimize.linear_sum_assignment``);
  R = that sum / |K|, P = that sum / |R|.
- LEA (Moosavi & Strube 2016): R = Σ_k |k| · Σ_r link(k∩r)/link(k) over Σ_k |k|, link(n) =
  n(n−1)/2; a singleton has one self-link, resolved when its mention is a singleton of the other
  side too (as the authors' own scorer does); P symmetric.
- CoNLL F1: the mean of the MUC, B³ and CEAF-e F1.

``singletons="drop"`` removes the singleton clusters of both key and response before scoring
(the usual ECB+ evaluation "without singletons").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

SINGLETONS = ("keep", "drop")
METRIC_NAMES = ("MUC", "B3", "CEAF-e", "LEA")
# CEAF-e: the largest component (key clusters × response clusters) aligned on a dense matrix (32 MB)
DENSE_CELLS = 4_000_000

Clusters = Sequence[Collection[str]]


@dataclass(frozen=True)
class Score:
    """Recall, precision and F1 of one metric (fractions)."""

    recall: float
    precision: float
    f1: float

    def to_json(self) -> dict[str, float]:
        return {"recall": self.recall, "precision": self.precision, "f1": self.f1}


@dataclass(frozen=True)
class CorefScores:
    """Every metric of one response against one key, with the mention counts scored."""

    muc: Score
    b_cubed: Score
    ceaf_e: Score
    lea: Score
    key_mentions: int
    response_mentions: int
    key_clusters: int
    response_clusters: int

    @property
    def conll_f1(self) -> float:
        return (self.muc.f1 + self.b_cubed.f1 + self.ceaf_e.f1) / 3

    def metrics(self) -> dict[str, Score]:
        """``{name: score}`` in the order of :data:`METRIC_NAMES`."""
        return dict(zip(METRIC_NAMES, (self.muc, self.b_cubed, self.ceaf_e, self.lea), strict=True))


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def _score(recall: float, precision: float) -> Score:
    total = recall + precision
    return Score(recall, precision, 2 * recall * precision / total if total else 0.0)


def clusters_of(assignment: Mapping[str, str]) -> list[frozenset[str]]:
    """The clusters of a ``{mention_id: cluster_id}`` map, in order of first appearance."""
    members: dict[str, list[str]] = defaultdict(list)
    for mention, cluster in assignment.items():
        members[cluster].append(mention)
    return [frozenset(mentions) for mentions in members.values()]


def drop_singletons(clusters: Iterable[Collection[str]]) -> list[frozenset[str]]:
    return [frozenset(cluster) for cluster in clusters if len(cluster) > 1]


def _index(clusters: Clusters) -> dict[str, int]:
    """``{mention: position of its cluster}``; a mention in two clusters is an error."""
    where: dict[str, int] = {}
    for position, cluster in enumerate(clusters):
        for mention in cluster:
            if mention in where:
                raise ValueError(f"mention {mention!r} is in two clusters: not a partition")
            where[mention] = position
    return where


def _overlaps(cluster: Collection[str], other: Mapping[str, int]) -> Counter[int]:
    """``{cluster of the other side: |cluster ∩ it|}`` (mentions the other side lacks left out)."""
    return Counter(other[mention] for mention in cluster if mention in other)


def _muc_side(clusters: Clusters, other: Mapping[str, int]) -> float:
    numerator = denominator = 0
    for cluster in clusters:
        overlaps = _overlaps(cluster, other)
        missing = len(cluster) - sum(overlaps.values())  # each a part of its own
        numerator += len(cluster) - (len(overlaps) + missing)
        denominator += len(cluster) - 1
    return _ratio(numerator, denominator)


def muc(key: Clusters, response: Clusters) -> Score:
    """MUC (Vilain et al. 1995)."""
    return _score(_muc_side(key, _index(response)), _muc_side(response, _index(key)))


def _b_cubed_side(clusters: Clusters, other: Mapping[str, int]) -> float:
    numerator = 0.0
    for cluster in clusters:
        numerator += sum(common * common for common in _overlaps(cluster, other).values()) / len(cluster)
    return _ratio(numerator, sum(len(cluster) for cluster in clusters))


def b_cubed(key: Clusters, response: Clusters) -> Score:
    """B³ (Bagga & Baldwin 1998), mention-weighted."""
    return _score(_b_cubed_side(key, _index(response)), _b_cubed_side(response, _index(key)))


def _alignment_similarity(key: Clusters, response: Clusters) -> float:
    """The largest Σ φ4 over one-to-one alignments of key and response clusters.

    Only clusters that share a mention have φ4 > 0, so the bipartite overlap graph is cut into
    its connected components and each is solved on its own (a dense K×R matrix of a corpus with
    tens of thousands of clusters would not fit in memory): Kuhn-Munkres on a dense matrix
    (``linear_sum_assignment``) for components of at most :data:`DENSE_CELLS` cells, the sparse
    Jonker-Volgenant solver over the overlapping pairs only for larger ones (a poor corpus-level
    clustering can chain most clusters into one component).
    """

    response_index = _index(response)
    edges: dict[int, Counter[int]] = {k: _overlaps(cluster, response_index) for k, cluster in enumerate(key)}
    # union-find over key clusters (k) and response clusters (len(key) + r)
    parent = list(range(len(key) + len(response)))

    def find(node: int) -> int:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for k, overlaps in edges.items():
        for r in overlaps:
            parent[find(k)] = find(len(key) + r)
    components: dict[int, list[int]] = defaultdict(list)
    for k, overlaps in edges.items():
        if overlaps:
            components[find(k)].append(k)
    total = 0.0
    for members in components.values():
        columns = sorted({r for k in members for r in edges[k]})
        position = {r: j for j, r in enumerate(columns)}
        entries = [(i, position[r], 2 * common / (len(key[k]) + len(response[r])))
                   for i, k in enumerate(members) for r, common in edges[k].items()]
        if len(members) * len(columns) <= DENSE_CELLS:
            total += _dense_assignment(entries, len(members), len(columns))
        else:
            total += _sparse_assignment(entries, len(members), len(columns))
    return total


def _dense_assignment(entries: list[tuple[int, int, float]], rows: int, columns: int) -> float:
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    similarity = np.zeros((rows, columns))
    for row, column, value in entries:
        similarity[row, column] = value
    chosen_rows, chosen_columns = linear_sum_assignment(similarity, maximize=True)
    return float(similarity[chosen_rows, chosen_columns].sum())


def _sparse_assignment(entries: list[tuple[int, int, float]], rows: int, columns: int) -> float:
    """The maximum-similarity one-to-one alignment over the given pairs only.

    ``min_weight_full_bipartite_matching`` matches every row (the smaller side here) and needs
    non-zero weights: each pair costs 2 − φ4 (≥ 1, as φ4 ≤ 1), and each row gets a private dummy
    column costing 2 (left unaligned), so a full matching always exists and its cost is
    2·rows − Σ φ4 of the aligned pairs.
    """
    import numpy as np
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    row_index = np.array([row for row, _, _ in entries] + list(range(rows)))
    column_index = np.array([column for _, column, _ in entries] + [columns + row for row in range(rows)])
    cost = np.array([2.0 - value for _, _, value in entries] + [2.0] * rows)
    graph = coo_array((cost, (row_index, column_index)), shape=(rows, columns + rows)).tocsr()
    chosen_rows, chosen_columns = min_weight_full_bipartite_matching(graph)
    aligned = chosen_columns < columns
    return float(np.sum(2.0 - np.asarray(graph[chosen_rows[aligned], chosen_columns[aligned]]).ravel()))


def ceaf_e(key: Clusters, response: Clusters) -> Score:
    """Entity-based CEAF with φ4 (Luo 2005)."""
    similarity = _alignment_similarity(key, response)
    return _score(_ratio(similarity, len(key)), _ratio(similarity, len(response)))


def _links(size: int) -> int:
    return size * (size - 1) // 2


def _lea_side(clusters: Clusters, other_clusters: Clusters, other: Mapping[str, int]) -> float:
    numerator = 0.0
    for cluster in clusters:
        if len(cluster) == 1:  # a self-link, resolved when the other side has the same singleton
            (mention,) = cluster
            resolved = 1.0 if mention in other and len(other_clusters[other[mention]]) == 1 else 0.0
        else:
            common = sum(_links(count) for count in _overlaps(cluster, other).values())
            resolved = common / _links(len(cluster))
        numerator += len(cluster) * resolved
    return _ratio(numerator, sum(len(cluster) for cluster in clusters))


def lea(key: Clusters, response: Clusters) -> Score:
    """LEA, the link-based entity-aware metric (Moosavi & Strube 2016)."""
    return _score(_lea_side(key, response, _index(response)), _lea_side(response, key, _index(key)))


def score_clusters(key: Clusters, response: Clusters, singletons: str = "keep") -> CorefScores:
    """Every metric of ``response`` against ``key`` (lists of clusters)."""
    if singletons not in SINGLETONS:
        raise ValueError(f"singletons must be keep or drop, got {singletons!r}")
    key_list = [frozenset(cluster) for cluster in key if cluster]
    response_list = [frozenset(cluster) for cluster in response if cluster]
    if singletons == "drop":
        key_list, response_list = drop_singletons(key_list), drop_singletons(response_list)
    return CorefScores(muc=muc(key_list, response_list), b_cubed=b_cubed(key_list, response_list),
                       ceaf_e=ceaf_e(key_list, response_list), lea=lea(key_list, response_list),
                       key_mentions=sum(len(c) for c in key_list),
                       response_mentions=sum(len(c) for c in response_list),
                       key_clusters=len(key_list), response_clusters=len(response_list))


def score_partitions(key: Mapping[str, str], response: Mapping[str, str], singletons: str = "keep") -> CorefScores:
    """Every metric of ``response`` against ``key``, both ``{mention_id: cluster_id}`` maps."""
    return score_clusters(clusters_of(key), clusters_of(response), singletons)
