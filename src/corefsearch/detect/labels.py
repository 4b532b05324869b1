"""BIO tags from character spans and spans from tags, one tag sequence per mention type (so an event
inside an entity's span, as in "the *shooting* victim", is kept in both).

Tags are 0 = O, 1 = B, 2 = I; a token belongs to a span when its characters lie inside it. Decoding
starts a span at every B, and at an I that follows an O (the lenient rule of seqeval's IOB2 decoding
without strict mode), and extends it over the I tags that follow. Written by hand: the token offsets
are the tokenizer's, the spans must slice the passage text exactly, and no maintained library maps
between the two with per-type sequences.
"""

from __future__ import annotations

from collections.abc import Sequence

O_TAG, B_TAG, I_TAG = 0, 1, 2
IGNORE = -100  # special and padding tokens: no loss


def tags_for_spans(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """One tag per token (``offsets``: its ``(start, end)`` characters, ``(0, 0)`` for a special token,
    which gets :data:`IGNORE`) for the mentions ``spans`` of one type. A token that overlaps a span is B
    when it is the span's first token, else I. Of spans of one type that share a token, the longer
    (then the earlier) is kept: one BIO sequence holds no nesting."""
    tags = [IGNORE if start == end else O_TAG for start, end in offsets]
    for span_start, span_end in sorted(spans, key=lambda span: (span[0] - span[1], span[0])):
        inside = [i for i, (start, end) in enumerate(offsets)
                  if start != end and start < span_end and end > span_start]
        if not inside or any(tags[i] != O_TAG for i in inside):
            continue
        tags[inside[0]] = B_TAG
        for i in inside[1:]:
            tags[i] = I_TAG
    return tags


def spans_from_tags(tags: Sequence[int], offsets: Sequence[tuple[int, int]],
                    scores: Sequence[float] | None = None) -> list[tuple[int, int, float]]:
    """``(start, end, score)`` of each tagged span (characters; the score is the mean of its tokens'
    ``scores``, 1 without them). Special tokens (``start == end``) end a span."""
    found: list[tuple[int, int, float]] = []
    current: list[int] = []

    def close() -> None:
        if current:
            values = [scores[i] for i in current] if scores is not None else [1.0]
            found.append((offsets[current[0]][0], offsets[current[-1]][1], sum(values) / len(values)))
            current.clear()

    for i, tag in enumerate(tags):
        start, end = offsets[i]
        if start == end or tag in (O_TAG, IGNORE):
            close()
        elif tag == B_TAG:
            close()
            current.append(i)
        else:  # I: continues a span, or starts one after O
            current.append(i)
    close()
    return found


def trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    """``[start, end)`` without the white space at either end; None when nothing else is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None
