"""The retriever's training loss: NLL of the positive passage against in-batch negatives (DPR).

Every query of a batch is scored (dot product) against every passage of the batch — the
positives of all examples and their hard negatives, each distinct passage once. The loss is
the cross-entropy of the query's own positive among them. Better than the paper, passages
that must not count as negatives are masked out (score −∞) instead: an in-batch passage
relevant to the query (another mention of its cluster, or the query's own passage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def in_batch_nll(query_vectors: torch.Tensor, passage_vectors: torch.Tensor, positive_index: torch.Tensor,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean negative log-likelihood of each query's positive passage.

    ``query_vectors`` is ``[B, d]``, ``passage_vectors`` ``[P, d]``, ``positive_index`` ``[B]``
    (the column of each query's positive) and ``mask`` ``[B, P]`` booleans, ``True`` where a
    passage is neither the positive nor a negative of that query (it is left out of the
    softmax). A query's positive is never masked, whatever ``mask`` says.
    """
    import torch

    scores = query_vectors @ passage_vectors.T
    if mask is not None:
        rows = torch.arange(scores.shape[0], device=scores.device)
        keep_positive = torch.zeros_like(mask, dtype=torch.bool)
        keep_positive[rows, positive_index] = True
        scores = scores.masked_fill(mask.to(torch.bool) & ~keep_positive, float("-inf"))
    return torch.nn.functional.cross_entropy(scores, positive_index)
