"""The reader's training loss: the span cross-entropy of the gold mention in the positive passage plus the
cross-entropy of picking the positive among the query's passages (and, with ``softmax+pairwise``, a margin
ranking term between the positive and each negative).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corefsearch.base.schema import Passage
from corefsearch.reader.batches import ReaderExample, example_windows
from corefsearch.reader.inputs import PASS_OVERHEAD_TOKENS, length_buckets
from corefsearch.reader.spans import top_spans

if TYPE_CHECKING:
    import torch

    from corefsearch.reader.inputs import PairWindow
    from corefsearch.reader.model import CrossEncoderReader, ReaderOutput
    from corefsearch.reader.read import Reader

PAIRWISE_MARGIN = 1.0  # softmax+pairwise: the positive should score this much above each negative


def _passage_scores(model: CrossEncoderReader, output: ReaderOutput, windows: list[PairWindow],
                    gold_row: int | None, gold_tokens: tuple[int, int]) -> torch.Tensor:
    """The head's passage score of each window (the integrated head: of the gold span in the
    positive's window ``gold_row``, of the best start/end span, as at inference, in the others)."""
    import torch

    if model.config.head == "dpr":
        return model.head.select(output.hidden[:, 0]).squeeze(-1)

    with torch.no_grad():  # the negatives' spans: the best start/end span, as at inference
        starts, ends, _ = top_spans(output.start_logits, output.end_logits, output.n_tokens,
                                    model.config.max_span_len, 1)
    if gold_row is not None:  # the positive's: the gold mention
        starts[gold_row, 0], ends[gold_row, 0] = gold_tokens[0], gold_tokens[1]
    return model.coreference_scores(model.query_mention_vectors(output, windows),
                                    model.span_vectors(output, starts, ends))[:, 0]


def example_loss(reader: Reader, example: ReaderExample, passages: dict[str, Passage], span_weight: float = 1.0,
                 ranking_loss: str = "softmax", overhead: int | None = PASS_OVERHEAD_TOKENS) -> torch.Tensor | None:
    """``span_weight`` × (start + end cross-entropy of the gold span) + cross-entropy of picking the
    positive (+ with ``ranking_loss="softmax+pairwise"`` the mean margin ranking loss of the positive
    against each negative).

    The positive is read in the window that holds its gold span, each negative in its first
    window; the windows in the passes of :func:`length_buckets` (``overhead`` None: one pass padded
    to the longest window; the loss is the same, padding being masked). ``None`` when no window
    holds the whole gold span (a mention longer than a window)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    prepared = example_windows(reader, example, passages)
    if prepared is None:
        return None
    windows, gold_tokens = prepared
    model = reader.model
    groups = ([list(range(len(windows)))] if overhead is None
              else length_buckets([len(w.input_ids) for w in windows], overhead))
    scores: list[Any] = [None] * len(windows)
    span_loss = None
    for group in groups:
        batch = [windows[i] for i in group]
        output = model.forward(batch)
        gold_row = group.index(0) if 0 in group else None
        for row, score in zip(group, _passage_scores(model, output, batch, gold_row, gold_tokens), strict=True):
            scores[row] = score
        if gold_row is not None:
            device = output.hidden.device
            span_loss = (F.cross_entropy(output.start_logits[gold_row:gold_row + 1],
                                         torch.tensor([gold_tokens[0]], device=device))
                         + F.cross_entropy(output.end_logits[gold_row:gold_row + 1],
                                           torch.tensor([gold_tokens[1]], device=device)))
    assert span_loss is not None  # window 0 is in one of the groups
    passage_scores = torch.stack(scores)
    target = torch.zeros(1, dtype=torch.long, device=passage_scores.device)
    loss = span_weight * span_loss + F.cross_entropy(passage_scores[None, :], target)
    if ranking_loss == "softmax+pairwise":
        negatives = passage_scores[1:]
        loss = loss + F.margin_ranking_loss(passage_scores[0].expand_as(negatives), negatives,
                                            torch.ones_like(negatives), margin=PAIRWISE_MARGIN)
    return loss
