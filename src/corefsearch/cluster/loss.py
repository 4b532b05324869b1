"""The contrastive loss of the mention encoder (Hadsell et al. 2006, as Hsu & Horwood 2022 §3.3 use it).

``ℓ = y·d² + (1 − y)·max(0, m − d)²`` with ``d = 1 − cos(v_i, v_j)``: coreferent pairs (y = 1) are
pulled together; other pairs are pushed apart only while they are closer than the margin ``m``.
sentence-transformers' ``ContrastiveLoss`` is the reference implementation, but it halves both terms
and takes a SentenceTransformer model; the two lines here take the pair vectors the encoder gives
and follow the paper's formula exactly (the same optimum; only the scale of the gradients differs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from corefsearch.base.errors import InputError

if TYPE_CHECKING:
    import torch

    from corefsearch.cluster.inputs import MentionRecord
    from corefsearch.cluster.model import MentionEncoder
    from corefsearch.cluster.pairs import MentionPair

DEFAULT_MARGIN = 0.5


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``1 − cos`` of the rows of ``a`` and ``b`` (any norms; zero vectors count as distance 1)."""
    import torch.nn.functional as F

    return 1.0 - F.cosine_similarity(a, b, dim=-1)


def contrastive_loss(a: torch.Tensor, b: torch.Tensor, labels: torch.Tensor, margin: float = DEFAULT_MARGIN,
                     reduction: str = "mean") -> torch.Tensor:
    """The loss of the pairs ``(a[i], b[i])`` with labels 1 (coreferent) / 0; mean (or sum, or none)."""
    if not margin > 0:
        raise InputError(f"--margin must be positive, got {margin}")
    d = cosine_distance(a, b)
    y = labels.to(d.dtype)
    losses = y * d.pow(2) + (1 - y) * (margin - d).clamp(min=0).pow(2)
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.mean()


def batch_contrastive_loss(vectors: torch.Tensor, cluster_ids: Sequence[str], margin: float) -> torch.Tensor:
    """The contrastive loss over every pair of a batch's mention ``vectors``: the mean over the coreferent
    pairs plus the mean over the others (either mean left out when the batch has no such pair; zero, with a
    gradient of zero, for a batch of one mention)."""
    import torch

    n = len(cluster_ids)
    first, second = torch.triu_indices(n, n, offset=1, device=vectors.device)
    codes = {c: i for i, c in enumerate(dict.fromkeys(cluster_ids))}
    ids = torch.tensor([codes[c] for c in cluster_ids], device=vectors.device)
    labels = (ids[first] == ids[second]).long()
    losses = contrastive_loss(vectors[first], vectors[second], labels, margin, reduction="none")
    # Zero, but on the graph: a batch without pairs (a topic with one train mention, as when a train cluster
    # of MEANTIME entities has a mention in a dev document) has nothing to learn and must not stop the run.
    total = vectors.sum() * 0.0
    for label in (1, 0):
        chosen = labels == label
        if bool(chosen.any()):
            total = total + losses[chosen].mean()
    return total


def topic_batch_loss(encoder: MentionEncoder, mentions: Sequence[MentionRecord], margin: float) -> torch.Tensor:
    """The ``topic-batch`` objective: :func:`batch_contrastive_loss` of the batch's mentions, encoded together."""
    return batch_contrastive_loss(encoder.forward(mentions), [r.cluster_id for r in mentions], margin)


def pair_batch_loss(encoder: MentionEncoder, records: Mapping[str, MentionRecord], batch: Sequence[MentionPair],
                    margin: float) -> torch.Tensor:
    """The ``pairs`` objective: :func:`contrastive_loss` of the batch's pairs, each distinct mention encoded once."""
    import torch

    unique = list(dict.fromkeys(m for pair in batch for m in (pair.first, pair.second)))
    row = {mention_id: i for i, mention_id in enumerate(unique)}
    vectors = encoder.forward([records[m] for m in unique])
    device = vectors.device
    first = torch.tensor([row[p.first] for p in batch], device=device)
    second = torch.tensor([row[p.second] for p in batch], device=device)
    labels = torch.tensor([p.label for p in batch], device=device)
    return contrastive_loss(vectors[first], vectors[second], labels, margin)
