"""The retriever's training loss: NLL of the positive passage against in-batch negatives (DPR).

Every query of a batch is scored (dot product) against every passage of the batch — the
positives of all examples and their hard negatives, each distinct passage once. The loss is
the cross-entropy of the query's own positive among them. Better than the paper, passages
that must not count as negatives are masked out (score −∞) instead: an in-batch passage
relevant to the query (another mention of its cluster, or the query's own passage).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from corefsearch.dense.examples import StoredPassage, TrainingExample, layout_batch

if TYPE_CHECKING:
    import torch

    from corefsearch.dense.arguments import RetrieverTrainingArguments
    from corefsearch.dense.model import BiEncoder


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


def batch_loss(model: BiEncoder, batch: Sequence[TrainingExample], relevant: dict[str, list[str]],
               clusters: dict[str, frozenset[str]], store: dict[str, StoredPassage],
               args: RetrieverTrainingArguments) -> torch.Tensor:
    """:func:`in_batch_nll` of a batch of examples: the queries encoded with their mention marked, the batch's
    passages each once (:func:`~corefsearch.dense.examples.layout_batch`), passages of the query's cluster masked."""
    import torch

    layout = layout_batch(batch, relevant, clusters)
    query_inputs = model.query_encoder.query_batch([e.query for e in batch], args.max_query_len)
    passage_inputs = model.passage_encoder.passage_batch([store[pid].title for pid in layout.passage_ids],
                                                         [store[pid].text for pid in layout.passage_ids],
                                                         args.max_passage_len)
    query_vectors = model.query_encoder.forward(query_inputs)
    passage_vectors = model.passage_encoder.forward(passage_inputs)
    positive = torch.tensor(layout.positive_index, dtype=torch.long, device=query_vectors.device)
    mask = torch.tensor(layout.mask, dtype=torch.bool, device=query_vectors.device)
    return in_batch_nll(query_vectors, passage_vectors, positive, mask)
