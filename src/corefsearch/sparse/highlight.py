"""Matched-term highlighting: which words of a hit's text meet the terms of its BM25 query, as
Lucene analyses them (the analyzer the index was built with)."""

from __future__ import annotations

import functools
import re
from typing import Any

from corefsearch.sparse.java import ensure_java


@functools.lru_cache(maxsize=1)
def _lucene_analyzer() -> Any:
    ensure_java()
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    # The analyzer the index was built with (Anserini's default English, Porter stemmer).
    return Analyzer(get_lucene_analyzer())


def warm() -> None:
    """Load the analyzer now (it starts the JVM) rather than at the first highlight."""
    _lucene_analyzer()


def matched_spans(text: str, query_string: str) -> list[tuple[int, int]]:
    """Character spans of the words of ``text`` whose Lucene analysis meets the query's terms."""
    analyzer = _lucene_analyzer()
    terms = set(analyzer.analyze(query_string))
    spans = []
    for word in re.finditer(r"\w+", text):
        if terms.intersection(analyzer.analyze(word.group())):
            spans.append((word.start(), word.end()))
    return spans
