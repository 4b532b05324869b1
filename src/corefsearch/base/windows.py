"""The query window: a mention's passage cut to a few tokens grown evenly around the mention,
with boundary tokens around it when the model has them (both encoders and readers read queries so)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corefsearch.base.errors import InputError


@dataclass(frozen=True)
class QueryWindow:
    """The query's tokens (no special tokens; markers included when used) and where the
    mention's first and last tokens (not the markers) are among them."""

    ids: list[int]
    mention_first: int
    mention_last: int


def query_window(tokenizer: Any, text: str, start: int, end: int, budget: int,
                 marker_ids: tuple[int, int] | None) -> QueryWindow:
    """At most ``budget`` tokens of ``text`` grown evenly around the mention ``[start, end)``."""
    # The whole text is tokenized before the window is cut: no "longer than the maximum" warning.
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
    inside = [i for i, (s, e) in enumerate(offsets) if s < end and e > start and e > s]
    if not inside:
        raise InputError(f"the mention at characters [{start}, {end}) has no tokens")
    first, last = inside[0], inside[-1] + 1
    budget -= 2 if marker_ids else 0
    if last - first >= budget:
        last = first + max(1, budget)
    room = budget - (last - first)
    left = min(first, room // 2)
    right = min(len(ids) - last, room - left)
    left = min(first, room - right)
    mention = ids[first:last]
    before = ids[first - left:first]
    if marker_ids:
        body = [*before, marker_ids[0], *mention, marker_ids[1], *ids[last:last + right]]
        return QueryWindow(body, left + 1, left + len(mention))
    body = [*before, *mention, *ids[last:last + right]]
    return QueryWindow(body, left, left + len(mention) - 1)
