"""BM25 query formulations of the CoreSearch paper (Eirew et al. 2022, §5).

``mention``: the mention words only; ``mention+entities``: the mention plus the named
entities spaCy finds in its context (the paper's best); ``sentence``: the sentence holding
the mention; ``context``: the whole query passage; ``document``: the whole document of the
query's passage (Sankepally et al. 2018's document query form), which the caller supplies
(:meth:`corefsearch.sparse.search.BM25Searcher.formulate` reads it from the Lucene index).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from corefsearch.base.errors import InputError
from corefsearch.base.nlp import entities, sentence_spans
from corefsearch.base.schema import Query

QUERY_FORMATS = ("mention", "mention+entities", "sentence", "context", "document")


def _overlaps(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    return a_start < b_end and b_start < a_end


def formulate(queries: Sequence[Query], query_format: str,
              documents: Callable[[Sequence[Query]], list[str]] | None = None) -> list[str]:
    """The BM25 query string of each query; ``documents`` gives the document text of each query
    for the ``document`` format."""
    if query_format not in QUERY_FORMATS:
        raise InputError(f"--query-format must be one of {', '.join(QUERY_FORMATS)}, got {query_format!r}")
    if query_format == "document":
        if documents is None:
            raise InputError("--query-format document needs the Lucene index (it holds each passage's document)")
        return documents(queries)
    if query_format == "mention":
        return [q.mention for q in queries]
    if query_format == "context":
        return [q.text for q in queries]
    if query_format == "sentence":
        strings = []
        for query, spans in zip(queries, sentence_spans(q.text for q in queries), strict=True):
            # A mention that a sentence boundary cuts gets every sentence it touches.
            touched = [(s, e) for s, e in spans if _overlaps(s, e, query.start, query.end)]
            if not touched:
                strings.append(query.mention)
            else:
                strings.append(query.text[touched[0][0]:touched[-1][1]])
        return strings

    # Queries from one passage share its text: run NER once per distinct text.
    texts = list(dict.fromkeys(q.text for q in queries))
    found_in = dict(zip(texts, entities(texts), strict=True))
    strings = []
    for query in queries:
        # The mention first; each name once, and not again where the mention recurs as a name.
        terms = [query.mention]
        for start, end, _label in found_in[query.text]:
            name = query.text[start:end]
            if not _overlaps(start, end, query.start, query.end) and name not in terms:
                terms.append(name)
        strings.append(" ".join(terms))
    return strings
