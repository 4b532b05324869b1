"""Span decoding: the best (start, end) token spans of a window by start + end logit."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def span_scores(start_logits: torch.Tensor, end_logits: torch.Tensor, n_tokens: torch.Tensor,
                max_span_len: int) -> torch.Tensor:
    """``(W, T, T)`` scores ``start[s] + end[e]`` of every span of every window; ``-inf`` where
    ``e < s``, the span is longer than ``max_span_len`` or runs past the window's ``n_tokens``
    passage tokens. Logits are over the passage tokens only (``(W, T)``, padded)."""
    import torch

    length = start_logits.shape[1]
    positions = torch.arange(length, device=start_logits.device)
    width = positions[None, :] - positions[:, None]  # e - s
    allowed = (width >= 0) & (width < max_span_len)
    inside = positions[None, :] < n_tokens[:, None]  # (W, T)
    valid = allowed[None] & inside[:, :, None] & inside[:, None, :]
    scores = start_logits[:, :, None] + end_logits[:, None, :]
    return scores.masked_fill(~valid, float("-inf"))


def top_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, n_tokens: torch.Tensor, max_span_len: int,
              k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``k`` best spans per window: starts, ends (``(W, k)`` token indices, inclusive) and
    scores; a window with fewer valid spans repeats its best one. ``end >= start`` and
    ``end - start < max_span_len`` always hold; a window without passage tokens gets span (0, 0)
    with score ``-inf``."""
    import torch

    scores = span_scores(start_logits, end_logits, n_tokens, max_span_len)
    windows, length, _ = scores.shape
    flat = scores.reshape(windows, length * length)
    k = min(k, length * length)
    values, indices = flat.topk(k, dim=1)
    # Fill the invalid picks (fewer than k valid spans) with the window's best span.
    invalid = torch.isinf(values) & (values < 0)
    indices = torch.where(invalid, indices[:, :1].expand_as(indices), indices)
    values = torch.where(invalid, values[:, :1].expand_as(values), values)
    starts, ends = indices // length, indices % length
    empty = torch.isinf(values[:, 0]) & (values[:, 0] < 0)
    starts = starts.masked_fill(empty[:, None], 0)
    ends = ends.masked_fill(empty[:, None], 0)
    return starts, ends, values
