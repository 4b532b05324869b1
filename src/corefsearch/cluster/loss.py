"""The contrastive loss of the mention encoder (Hadsell et al. 2006, as Hsu & Horwood 2022 §3.3 use it).

``ℓ = y·d² + (1 − y)·max(0, m − d)²`` with ``d = 1 − cos(v_i, v_j)``: coreferent pairs (y = 1) are
pulled together; other pairs are pushed apart only while they are closer than the margin ``m``.
sentence-transformers' ``ContrastiveLoss`` is the reference implementation, but it halves both terms
and takes a SentenceTransformer model; the two lines here take the pair vectors the encoder gives
and follow the paper's formula exactly (the same optimum; only the scale of the gradients differs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corefsearch.base.errors import InputError

if TYPE_CHECKING:
    import torch

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
