"""Sentence units of plain text (the generic corpus format), with line breaks as boundaries.

Two modes (``build-dataset --sentences``):

- ``spacy`` (the default): line breaks always end a sentence (a headline, a dateline, a
  byline stays its own unit), and spaCy's rule-based sentencizer splits each line further.
- ``newline``: every non-empty line is one sentence, nothing else splits (text that comes
  one sentence per line, e.g. from a corpus's own tokenised sentences).

Either way units are trimmed of white space at their edges, and afterwards
:func:`keep_mentions_whole` joins the units a mention straddles, so that a boundary the
sentencizer puts inside a mention ("No. 1", "U.S. Army") never loses that mention.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from corefsearch.base.errors import InputError
from corefsearch.base.nlp import sentence_spans

SENTENCE_MODES = ("spacy", "newline")
DEFAULT_SENTENCES = "spacy"

Span = tuple[int, int]


def line_spans(text: str) -> list[Span]:
    """Character spans of the non-empty lines of ``text``, white space at their edges trimmed.

    Lines end where :meth:`str.splitlines` ends them (``\\n``, ``\\r\\n``, ``\\r``, form feed,
    U+2028 …), so CRLF text and LF text give the same units.
    """
    spans = []
    position = 0
    for line in text.splitlines(keepends=True):
        start, end = position, position + len(line)
        position = end
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            spans.append((start, end))
    return spans


def sentence_units(texts: Sequence[str], mode: str = DEFAULT_SENTENCES, batch_size: int = 256) -> list[list[Span]]:
    """Sentence spans of each text (see the module docstring for the modes)."""
    if mode not in SENTENCE_MODES:
        raise InputError(f"--sentences must be one of {', '.join(SENTENCE_MODES)}, got {mode!r}")
    lines = [line_spans(text) for text in texts]
    if mode == "newline":
        return lines

    # Every line of every text goes through spaCy as a text of its own (batched), so no sentence
    # crosses a line break; the spans come back relative to the line and are shifted.
    pieces = (text[start:end] for text, spans in zip(texts, lines, strict=True) for start, end in spans)
    sentences = iter(sentence_spans(pieces, batch_size=batch_size))
    units: list[list[Span]] = []
    for spans in lines:
        document: list[Span] = []
        for line_start, _ in spans:
            document.extend((line_start + start, line_start + end) for start, end in next(sentences))
        units.append(document)
    return units


def keep_mentions_whole(units: Sequence[Span], mentions: Iterable[Span]) -> list[Span]:
    """``units`` with those a mention straddles joined into one, so that each mention lies inside a unit.

    A mention that overlaps one unit but reaches into the white space beside it widens that
    unit to hold it. Units stay in text order without overlap; with no straddling mention they
    come back unchanged. (A sweep over the units and mentions sorted by start: each span
    joins the current group when it starts before the group ends.)
    """
    spans = sorted([*((start, end, 1) for start, end in units), *((start, end, 0) for start, end in mentions)])
    joined: list[list[int]] = []
    for start, end, _ in spans:
        if joined and start < joined[-1][1]:
            joined[-1][1] = max(joined[-1][1], end)
        else:
            joined.append([start, end])
    return [(start, end) for start, end in joined]
