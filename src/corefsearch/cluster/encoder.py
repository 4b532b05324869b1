"""Clustering mentions with the contrastive mention encoder (``corefsearch cluster --method encoder``).

Every mention of the split is encoded once (:meth:`MentionEncoder.encode`); the vectors are then
clustered by average linkage on cosine distance, stopped at τ (``agglomerative.py``), separately
within each group of the scope and each mention type (events and entities never share a cluster,
as with the baselines): ``topic`` and ``predicted-topic`` cluster each group over all its pairs
(:func:`~corefsearch.cluster.agglomerative.cluster_dense`), ``corpus`` clusters the whole split
over the k-nearest-neighbour graph (:func:`~corefsearch.cluster.agglomerative.cluster_knn`), so
that memory and time grow with n·k rather than n².

:func:`threshold_sweep` is what ``train clusterer`` scores the dev split with after each epoch:
the same all-pairs clustering at a grid of thresholds, the linkage tree of each group built once
and cut at every τ (cutting the tree at τ is exactly what ``cluster_dense`` does).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from corefsearch.base.errors import InputError
from corefsearch.base.schema import safe_id
from corefsearch.cluster.agglomerative import cluster_dense, cluster_knn, condensed_mask, cut_tree, linkage_tree
from corefsearch.cluster.inputs import MentionRecord, mention_records

DEFAULT_K = 50
DEFAULT_BATCH_SIZE = 64
# What earns a mention pair the bonus β (--evidence): the same head lemma (--method lemma's rule), or a link of
# --method lemma-heuristic's rule (the lemma of one in the other's text, and overlapping sentences).
EVIDENCE = ("lemma", "lemma-heuristic")


def check_evidence(evidence: str) -> None:
    if evidence not in EVIDENCE:
        raise InputError(f"--evidence must be one of {', '.join(EVIDENCE)} (what earns a pair the bonus β), "
                         f"got {evidence!r}")


def split_records(dataset_dir: Path, split: str) -> list[MentionRecord]:
    """The encoder inputs of every gold mention of ``split``, sorted by mention id."""
    return sorted(mention_records(dataset_dir, split), key=lambda r: r.mention_id)


def _blocks(mention_ids: Sequence[str], groups: Mapping[str, str], types: Mapping[str, str]
            ) -> dict[tuple[str, str], np.ndarray]:
    """Row numbers of ``mention_ids`` per (group, mention type), in row order."""
    blocks: dict[tuple[str, str], list[int]] = {}
    for row, mention_id in enumerate(mention_ids):
        blocks.setdefault((groups[mention_id], types[mention_id]), []).append(row)
    return {key: np.asarray(rows, dtype=np.int64) for key, rows in blocks.items()}


def cluster_vectors(mention_ids: Sequence[str], vectors: Any, groups: Mapping[str, str], types: Mapping[str, str],
                    tau: float, scope: str, k: int = DEFAULT_K, lemmas: Mapping[str, str] | None = None,
                    lemma_weight: float = 0.0, device: str = "cpu",
                    links: Collection[tuple[str, str]] | None = None) -> dict[str, str]:
    """``{mention_id: cluster_id}`` of the mentions (row i of ``vectors`` is ``mention_ids[i]``), clustered
    within each (group, type): over the kNN graph with ``k`` neighbours for ``scope`` corpus, else over all
    pairs; two mentions with the same head lemma (``lemmas``) are ``lemma_weight`` closer. ``links`` instead
    of ``lemmas``: the mention id pairs that earn the bonus (e.g. those ``--method lemma-heuristic`` links).
    Clusters are named ``GROUP/TYPE/N``. ``device``: where FAISS builds the kNN graph."""
    matrix = np.asarray(vectors)
    if len(matrix) != len(mention_ids):
        raise ValueError(f"{len(mention_ids)} mention ids for {len(matrix)} vectors")
    linked_rows = _linked_rows(mention_ids, links, lemma_weight, lemmas)
    assignment: dict[str, str] = {}
    for (group, mention_type), rows in _blocks(mention_ids, groups, types).items():
        block = matrix if len(rows) == len(matrix) else matrix[rows]  # one block: no copy
        labels = _lemma_labels(mention_ids, rows, lemmas, lemma_weight) if linked_rows is None else None
        linked = _block_pairs(rows, linked_rows) if linked_rows is not None else None
        if scope == "corpus":
            found = cluster_knn(block, tau, k, labels, lemma_weight, device, linked)
        else:
            found = cluster_dense(block, tau, labels, lemma_weight,
                                  None if linked is None else condensed_mask(len(rows), linked))
        for row, label in zip(rows.tolist(), found.tolist(), strict=True):
            assignment[mention_ids[row]] = safe_id(f"{group}/{mention_type}/{label}")
    return assignment


def _lemma_labels(mention_ids: Sequence[str], rows: np.ndarray, lemmas: Mapping[str, str] | None,
                  lemma_weight: float) -> list[str] | None:
    if not lemma_weight:
        return None
    if lemmas is None:
        raise ValueError("a lemma weight needs the mentions' head lemmas")
    return [lemmas[mention_ids[row]] for row in rows.tolist()]


def _linked_rows(mention_ids: Sequence[str], links: Collection[tuple[str, str]] | None, lemma_weight: float,
                 lemmas: Mapping[str, str] | None) -> np.ndarray | None:
    """The rows of the pairs of ``links`` (k × 2), None without links or a bonus; a link to a mention
    that is not among ``mention_ids`` is left out."""
    if links is None or not lemma_weight:
        return None
    if lemmas is not None:
        raise ValueError("the bonus goes to the pairs with the same head lemma or to the linked pairs, not both")
    row = {mention_id: i for i, mention_id in enumerate(mention_ids)}
    pairs = [(row[a], row[b]) for a, b in links if a in row and b in row and a != b]
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def _block_pairs(rows: np.ndarray, linked_rows: np.ndarray) -> np.ndarray:
    """The pairs of ``linked_rows`` with both ends in ``rows`` (sorted), as positions within ``rows``."""
    if not len(linked_rows):
        return linked_rows
    inside = np.isin(linked_rows, rows).all(axis=1)
    return np.searchsorted(rows, linked_rows[inside])


def threshold_sweep(mention_ids: Sequence[str], vectors: Any, groups: Mapping[str, str], types: Mapping[str, str],
                    taus: Sequence[float], lemmas: Mapping[str, str] | None = None,
                    lemma_weight: float = 0.0, links: Collection[tuple[str, str]] | None = None
                    ) -> dict[float, dict[str, str]]:
    """``{τ: assignment}``: all-pairs average linkage within each (group, type) cut at every τ of ``taus``
    (the same partitions as :func:`cluster_vectors` with a topic scope; the tree is built once per group);
    ``links`` instead of ``lemmas`` as there."""
    matrix = np.asarray(vectors)
    linked_rows = _linked_rows(mention_ids, links, lemma_weight, lemmas)
    result: dict[float, dict[str, str]] = {tau: {} for tau in taus}
    for (group, mention_type), rows in _blocks(mention_ids, groups, types).items():
        if len(rows) < 2:
            cuts = {tau: np.zeros(len(rows), dtype=np.int64) for tau in taus}
        elif linked_rows is not None:
            tree = linkage_tree(matrix[rows], None, lemma_weight,
                                condensed_mask(len(rows), _block_pairs(rows, linked_rows)))
            cuts = {tau: cut_tree(tree, tau, lemma_weight) for tau in taus}
        else:
            tree = linkage_tree(matrix[rows], _lemma_labels(mention_ids, rows, lemmas, lemma_weight), lemma_weight)
            cuts = {tau: cut_tree(tree, tau, lemma_weight) for tau in taus}
        for tau, labels in cuts.items():
            for row, label in zip(rows.tolist(), labels.tolist(), strict=True):
                result[tau][mention_ids[row]] = safe_id(f"{group}/{mention_type}/{label}")
    return result


def threshold_grid(low: float = 0.025, high: float = 0.9, step: float = 0.025) -> list[float]:
    """τ from ``low`` to ``high`` (inclusive) by ``step``, rounded to 4 decimals."""
    if not 0 <= low <= high <= 2 or step <= 0:
        raise InputError(f"bad threshold grid {low}..{high} step {step}")
    count = int(round((high - low) / step))
    return [round(low + i * step, 4) for i in range(count + 1)]
