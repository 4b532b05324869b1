"""Average-linkage agglomerative clustering of mention vectors on cosine distance, stopped at τ.

Hsu & Horwood (2022, §3.2) cluster the encoder's vectors with scikit-learn's agglomerative
clustering (average linkage, cosine, distance threshold τ). Two ways here, giving the same partition
when every pair is a neighbour:

- :func:`cluster_dense`: scipy's ``linkage(method="average", metric="cosine")`` and
  ``fcluster(criterion="distance", t=τ)``: every pair, O(n²) memory and time; the reference, and
  the right tool within a topic (hundreds of mentions).
- :func:`cluster_knn`: the same linkage over a sparse k-nearest-neighbour graph (FAISS: exact up to
  ``EXACT_UNTIL`` vectors, an inverted file above), so that a whole corpus (``--scope corpus``, up
  to millions of mentions) clusters in O(n·k) memory. The
  average similarity of two clusters is the sum of their members' pair similarities over
  ``|A|·|B|``, and **a pair that is not an edge of the graph counts as similarity 0 (cosine distance
  1)**, i.e. as an unrelated mention. With ``k ≥ n − 1`` every pair is an edge and the result is
  exactly that of :func:`cluster_dense`; with smaller k the linkage is that of the graph. τ must be
  below 1 here (at τ ≥ 1 two clusters with no edge between them, distance 1, would merge).

Neither scipy nor scikit-learn clusters a sparse graph with average linkage without the n×n
distance matrix (scikit-learn's ``connectivity`` option still builds it), so :func:`cluster_knn` is
written by hand: a heap of candidate merges, per-cluster-pair sums of similarities in dicts, merged
smaller-into-larger. Two facts keep it small. A merge needs an average similarity ≥ 1 − τ, and an
average is never above its largest term, so two clusters can only merge when some edge between them
has similarity ≥ 1 − τ: the final clusters lie within the connected components of those edges, and
each component is clustered alone with only its own edges. And only candidate pairs at or above
the threshold go into the heap (a merge recomputes the averages of the merged cluster's neighbours).
Pair similarities are recomputed in float64 from the vectors, so FAISS's float32 scores only choose
the neighbours.

Identical vectors (the same story syndicated to many outlets: ``cluster`` encodes identical inputs
once, so their vectors are bit for bit equal) are merged before the graph is built, into one node
weighted by its number of copies. This is exact for average linkage: copies are at distance 0 and
merge before anything else, and a cluster of w copies has, to every other cluster, the average
distance of one copy. The pair sums then start at ``w_x · w_y · s`` and the sizes at ``w``. The kNN
graph is built over the distinct vectors, so a mention's k neighbours are k other stories rather than
its own copies.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import numpy as np

from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.faiss_gpu import GPU_MAX_K, faiss_on_gpu, set_nprobe, to_gpu

# Up to this many vectors the neighbours are exact (FAISS IndexFlatIP: n² inner products, 16 s for
# 20,000 vectors of 2,048 dimensions on 2 cores); above, an inverted file (IndexIVFFlat: 4·√n lists
# from spherical k-means, IVF_PROBES of them searched per vector), whose cost grows with n^1.5.
# HNSW was slower than the flat index at 20,000 such vectors in a measurement on this hardware
# (graph construction at d = 2,048), so it is not used.
EXACT_UNTIL = 20_000
IVF_PROBES = 32
IVF_TRAIN_PER_LIST = 40  # k-means training sample: 40 vectors per list (FAISS warns below 39)
IVF_ITERATIONS = 10
IVF_SEED = 13
NORM_BLOCK = 16_384  # rows per block when computing norms in float64


def normalised(vectors: Any) -> np.ndarray:
    """The rows of ``vectors`` (n × d) scaled to unit length, float32; zero or non-finite rows are refused."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        raise InputError(f"mention vectors must be a matrix (n × d), got shape {matrix.shape}")
    norms = np.empty(len(matrix))
    for start in range(0, len(matrix), NORM_BLOCK):  # float64 in blocks: no n × d float64 copy
        block = matrix[start:start + NORM_BLOCK].astype(np.float64)
        norms[start:start + NORM_BLOCK] = np.sqrt(np.einsum("ij,ij->i", block, block))
    bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
    if bad.size:
        raise InputError(f"mention vector {int(bad[0])} is zero or not finite; it has no cosine distance")
    return matrix / norms.astype(np.float32)[:, None]


def _check_tau(tau: float) -> None:
    if not (np.isfinite(tau) and 0 <= tau <= 2):
        raise InputError(f"--threshold (τ, a cosine distance) must be between 0 and 2, got {tau}")


def canonical_labels(labels: Any) -> np.ndarray:
    """``labels`` renumbered 0, 1, ... in order of first appearance (the same partition)."""
    _, first, inverse = np.unique(np.asarray(labels), return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))
    return order[inverse].astype(np.int64)


def condensed_mask(n: int, pairs: Any) -> np.ndarray:
    """A boolean vector in scipy's ``pdist`` order over ``n`` rows, true at the row pairs of ``pairs``
    (an m × 2 array or sequence of ``(i, j)``, either order, i ≠ j)."""
    mask = np.zeros(n * (n - 1) // 2, dtype=bool)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if len(pairs):
        i, j = pairs.min(axis=1), pairs.max(axis=1)
        if (i == j).any() or i.min() < 0 or j.max() >= n:
            raise ValueError(f"linked pairs must be two different rows of {n}")
        mask[n * i - i * (i + 1) // 2 + (j - i - 1)] = True
    return mask


def _check_evidence(labels: Sequence[str] | None, linked: Any) -> None:
    if labels is not None and linked is not None:
        raise ValueError("the bonus goes to pairs with equal labels or to linked pairs, not both")


def pair_distances(vectors: Any, labels: Sequence[str] | None = None, bonus: float = 0.0,
                   linked: Any = None) -> np.ndarray:
    """The condensed matrix (scipy's ``pdist`` order) of the rows' cosine distances, where a pair whose
    ``labels`` are equal (a mention pair with the same head lemma) is ``bonus`` closer than the others.
    ``linked`` instead of ``labels``: a boolean vector in the same order (:func:`condensed_mask`), the pairs
    that earn the bonus (e.g. those a rule links), whatever their labels.

    scipy's linkage refuses negative distances, so rather than taking ``bonus`` off the equal pairs it is
    added to all the others: every average is then ``bonus`` higher than with the bonus taken off (an
    average of distances each raised by ``bonus``, less ``bonus`` for the equal pairs), the merges are the
    same, and the tree is cut at τ + ``bonus`` (:func:`cut_tree`). A clip at 0 instead would tie every
    close same-lemma pair, and average linkage would depend on the order of the ties. With no bonus
    these are exactly the distances ``linkage(vectors, metric="cosine")`` computes."""
    from scipy.spatial.distance import pdist

    _check_evidence(labels, linked)
    distances = pdist(normalised(vectors).astype(np.float64), metric="cosine")
    if bonus and labels is not None:
        codes = np.unique(np.asarray(labels, dtype=object), return_inverse=True)[1]
        different = pdist(codes[:, None].astype(np.float64), metric="hamming") != 0
        distances = distances + bonus * different
    elif bonus and linked is not None:
        linked = np.asarray(linked, dtype=bool)
        if linked.shape != distances.shape:
            raise ValueError(f"linked: {linked.shape[0] if linked.ndim == 1 else linked.shape} flags for "
                             f"{len(distances)} pairs")
        distances = distances + bonus * ~linked
    return distances


def linkage_tree(vectors: Any, labels: Sequence[str] | None = None, bonus: float = 0.0,
                 linked: Any = None) -> np.ndarray:
    """scipy's average-linkage tree of the rows over :func:`pair_distances` (at least two rows); cut it
    with :func:`cut_tree` and the same ``bonus``."""
    from scipy.cluster.hierarchy import linkage

    return linkage(pair_distances(vectors, labels, bonus, linked), method="average")


def cut_tree(tree: np.ndarray, tau: float, bonus: float = 0.0) -> np.ndarray:
    """Cluster labels (0.., by first appearance) of ``tree`` cut at τ (at τ + ``bonus``, the tree's offset)."""
    from scipy.cluster.hierarchy import fcluster

    return canonical_labels(fcluster(tree, t=tau + bonus, criterion="distance"))


def cluster_dense(vectors: Any, tau: float, labels: Sequence[str] | None = None, bonus: float = 0.0,
                  linked: Any = None) -> np.ndarray:
    """Cluster labels (0.., by first appearance) of average linkage on cosine distance over all pairs,
    merging while the average distance of the closest two clusters is ≤ ``tau``; pairs with equal
    ``labels``, or the pairs flagged in ``linked``, are ``bonus`` closer (:func:`pair_distances`)."""
    _check_tau(tau)
    _check_evidence(labels, linked)
    if len(np.asarray(vectors)) < 2:
        return np.zeros(len(normalised(vectors)), dtype=np.int64)  # (normalised: a zero vector is refused)
    bonus = bonus if labels is not None or linked is not None else 0.0
    return cut_tree(linkage_tree(vectors, labels, bonus, linked), tau, bonus)


def knn_edges(vectors: Any, k: int, device: str = "cpu") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The undirected kNN graph of the rows: ``(a, b, similarity)`` with ``a < b``, each pair once, the
    cosine similarity in float64. Neighbours from FAISS: an exact ``IndexFlatIP`` on the normalised
    vectors up to ``EXACT_UNTIL`` of them, an inverted file (``IndexIVFFlat``, seeded) above; on the GPU
    of ``device`` when FAISS can (``corefsearch.base.faiss_gpu``)."""
    import faiss

    at_least_one("--k", k)
    matrix = normalised(vectors)
    n, dimension = matrix.shape
    if n < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    want = min(k, n - 1) + 1  # +1: a vector is its own first neighbour
    lists = int(4 * np.sqrt(n)) if n > EXACT_UNTIL else 0
    if lists:
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dimension), dimension, lists, faiss.METRIC_INNER_PRODUCT)
    else:
        index = faiss.IndexFlatIP(dimension)
    if want <= GPU_MAX_K and faiss_on_gpu(device):
        index = to_gpu(index, device)  # an inverted file is trained there too
    if lists:
        index.cp.niter, index.cp.seed, index.cp.spherical = IVF_ITERATIONS, IVF_SEED, True
        sample = np.random.default_rng(IVF_SEED).choice(n, min(n, IVF_TRAIN_PER_LIST * lists), replace=False)
        index.train(matrix[np.sort(sample)])
        set_nprobe(index, min(IVF_PROBES, lists))
    index.add(matrix)
    _, neighbours = index.search(matrix, want)
    rows = np.repeat(np.arange(n, dtype=np.int64), want)
    cols = neighbours.reshape(-1).astype(np.int64)
    keep = (cols >= 0) & (cols != rows)
    a, b = np.minimum(rows[keep], cols[keep]), np.maximum(rows[keep], cols[keep])
    keys = np.unique(a * n + b)
    a, b = keys // n, keys % n
    sims = np.empty(len(a))
    step = max(1, 4_000_000 // max(dimension, 1))  # bounded scratch memory
    for start in range(0, len(a), step):
        left = matrix[a[start:start + step]].astype(np.float64)
        right = matrix[b[start:start + step]].astype(np.float64)
        sims[start:start + step] = np.einsum("ij,ij->i", left, right)
    return a, b, sims


def cluster_knn(vectors: Any, tau: float, k: int = 50, labels: Sequence[str] | None = None,
                bonus: float = 0.0, device: str = "cpu", linked: Any = None) -> np.ndarray:
    """Cluster labels (0.., by first appearance) of average linkage over the kNN graph (pairs that are
    not edges count as cosine distance 1), merging while the closest average distance is ≤ ``tau``.
    An edge whose two ends have equal ``labels`` is ``bonus`` more similar (as in :func:`pair_distances`;
    a pair that is not an edge gets no bonus, and identical vectors, merged into one node, take the
    label of the first). ``linked`` instead of ``labels``: the row pairs that earn the bonus (an m × 2
    array of ``(i, j)``), an edge flagged when the first rows of its two nodes are such a pair.
    ``device``: where FAISS finds the neighbours (see :func:`knn_edges`)."""
    _check_tau(tau)
    _check_evidence(labels, linked)
    at_least_one("--k", k)
    if tau >= 1:
        raise InputError(f"--threshold {tau}: over the kNN graph τ must be below 1 (a cosine distance of 1 is what "
                         "a pair that is not an edge counts as, so τ ≥ 1 would merge unrelated mentions); use "
                         "all-pairs clustering for such thresholds")
    matrix = normalised(vectors)
    n = len(matrix)
    if n < 2:
        return np.zeros(n, dtype=np.int64)
    matrix, copy_of, weights = distinct_rows(matrix)
    n = len(matrix)
    a, b, sims = knn_edges(matrix, k, device)
    if bonus and labels is not None:
        codes = np.unique(np.asarray(labels, dtype=object), return_inverse=True)[1]
        node_codes = codes[np.unique(copy_of, return_index=True)[1]]  # the label of each node's first row
        sims = sims + bonus * (node_codes[a] == node_codes[b])
    elif bonus and linked is not None:
        sims = sims + bonus * _linked_edges(a, b, copy_of, linked, len(copy_of))
    labels = np.arange(n, dtype=np.int64)
    if n >= 2:
        _cluster_graph(a, b, sims, tau, weights, labels)
    return canonical_labels(labels[copy_of])


def _linked_edges(a: np.ndarray, b: np.ndarray, copy_of: np.ndarray, linked: Any, rows: int) -> np.ndarray:
    """For each node edge ``(a, b)``: whether the first rows of its two nodes are a pair of ``linked``."""
    pairs = np.asarray(linked, dtype=np.int64).reshape(-1, 2)
    if not len(pairs) or not len(a):
        return np.zeros(len(a), dtype=bool)
    if pairs.min() < 0 or pairs.max() >= rows:
        raise ValueError(f"linked pairs must be rows of {rows}")
    first = np.unique(copy_of, return_index=True)[1]  # each node's first row
    left, right = first[a], first[b]
    keys = np.minimum(left, right) * rows + np.maximum(left, right)
    wanted = np.minimum(pairs[:, 0], pairs[:, 1]) * rows + np.maximum(pairs[:, 0], pairs[:, 1])
    return np.isin(keys, wanted)


def graph_average_linkage(n: int, a: np.ndarray, b: np.ndarray, similarities: np.ndarray, tau: float) -> np.ndarray:
    """Cluster labels (0.., by first appearance) of ``n`` nodes by average linkage over the edges ``(a[i], b[i])``
    with ``similarities`` (a pair that is no edge counts as similarity 0), merging while the closest average
    distance ``1 − similarity`` is ≤ ``tau`` (< 1). The linkage of :func:`cluster_knn` over given edges (a pair
    scorer's probabilities)."""
    if not 0 <= tau < 1:
        raise InputError(f"over a graph of scored pairs the distance threshold must be in [0, 1), got {tau}")
    labels = np.arange(n, dtype=np.int64)
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if n >= 2 and len(a):
        _cluster_graph(np.minimum(a, b), np.maximum(a, b), np.asarray(similarities, dtype=np.float64), tau,
                       np.ones(n, dtype=np.int64), labels)
    return canonical_labels(labels)


def distinct_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(distinct, copy_of, weights)``: the distinct rows of ``matrix`` in order of first appearance,
    for each row the index of its distinct row, and how many rows each distinct row stands for."""
    import hashlib

    rows = np.ascontiguousarray(matrix)
    slot: dict[bytes, int] = {}
    first: list[int] = []
    copy_of = np.empty(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):  # a 16-byte digest per row instead of a sorted copy of the matrix
        key = hashlib.blake2b(row.tobytes(), digest_size=16).digest()
        if key not in slot:
            slot[key] = len(first)
            first.append(i)
        copy_of[i] = slot[key]
    # Two different rows with one 128-bit digest: about n² / 2¹²⁹, i.e. never at any corpus size.
    distinct = rows[np.asarray(first, dtype=np.int64)]
    return distinct, copy_of, np.bincount(copy_of, minlength=len(first)).astype(np.int64)


def _cluster_graph(a: np.ndarray, b: np.ndarray, sims: np.ndarray, tau: float, weights: np.ndarray,
                   labels: np.ndarray) -> None:
    """Average linkage over the graph's edges, one connected component of strong edges at a time."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(labels)
    least = 1.0 - tau
    strong = sims >= least
    graph = coo_matrix((np.ones(int(strong.sum()), dtype=np.int8), (a[strong], b[strong])), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    inside = component[a] == component[b]
    a, b, sims = a[inside], b[inside], sims[inside]
    order = np.argsort(component[a], kind="stable")
    a, b, sims = a[order], b[order], sims[order]
    bounds = np.flatnonzero(np.diff(component[a])) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(a)], strict=True):
        if hi > lo:
            _average_linkage(a[lo:hi], b[lo:hi], sims[lo:hi], tau, weights, labels)


def _average_linkage(a: np.ndarray, b: np.ndarray, sims: np.ndarray, tau: float, weights: np.ndarray,
                     labels: np.ndarray) -> None:
    """Average linkage over one component's edges; writes the merged cluster's representative into ``labels``.

    Clusters are named by one member (the representative); ``links[c][d]`` is the sum of the pair
    similarities between clusters c and d over the edges, each edge counted ``weights[c] · weights[d]``
    times (a node of w identical vectors stands for w mentions). Heap entries ``(distance, c, d,
    version_c, version_d)`` are stale once c or d has changed since they were pushed."""
    links: dict[int, dict[int, float]] = {}
    for x, y, s in zip(a.tolist(), b.tolist(), sims.tolist(), strict=True):
        total = s * float(weights[x] * weights[y])
        links.setdefault(x, {})[y] = total
        links.setdefault(y, {})[x] = total
    size = {c: int(weights[c]) for c in links}
    version = dict.fromkeys(links, 0)
    members: dict[int, list[int]] = {c: [c] for c in links}
    heap: list[tuple[float, int, int, int, int]] = []
    for x, y, s in zip(a.tolist(), b.tolist(), sims.tolist(), strict=True):
        if 1.0 - s <= tau:
            heap.append((1.0 - s, min(x, y), max(x, y), 0, 0))
    heapq.heapify(heap)
    while heap:
        _, c, d, vc, vd = heapq.heappop(heap)
        if version.get(c) != vc or version.get(d) != vd:  # stale: c or d merged since
            continue
        if len(links[c]) < len(links[d]):  # keep the cluster with more links, fold the other into it
            c, d = d, c
        for x, s in links.pop(d).items():
            if x == c:
                continue
            links[c][x] = links[c].get(x, 0.0) + s
            neighbour = links[x]
            neighbour[c] = neighbour.get(c, 0.0) + neighbour.pop(d)
        del links[c][d]
        size[c] += size.pop(d)
        members[c].extend(members.pop(d))
        del version[d]
        version[c] += 1
        for x, s in links[c].items():
            distance = 1.0 - s / (size[c] * size[x])
            if distance <= tau:
                heapq.heappush(heap, (distance, min(c, x), max(c, x), version[min(c, x)], version[max(c, x)]))
    for representative, group in members.items():
        labels[group] = representative
