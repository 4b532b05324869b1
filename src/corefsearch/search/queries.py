"""The query of one question: a mention (and which occurrence) in a context, a selection by character
offsets (the page's mouse selection), or a query of a dataset by its id."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Query
from corefsearch.datasets.lookup import find_query


def adhoc_query_record(mention: str, context: str | None = None, occurrence: int | None = None) -> Query:
    """A query for ``mention`` at its ``occurrence``-th place (1-based) in ``context``."""
    if not mention.strip():
        raise InputError("--mention is empty")
    text = context if context is not None else mention
    starts = [m.start() for m in re.finditer(re.escape(mention), text)]
    if not starts:
        raise InputError(f"the mention {mention!r} does not occur in the context")
    if occurrence is None:
        occurrence = 1
    if not 1 <= occurrence <= len(starts):
        raise InputError(f"--occurrence {occurrence}: the mention occurs {len(starts)} time(s) in the context")
    start = starts[occurrence - 1]
    return Query("adhoc", "", text, start, start + len(mention), mention, "")


def selection_query_record(context: str | None, start: int | None, end: int | None,
                           mention: str | None = None) -> Query:
    """A query for the characters ``context[start:end]`` (a selection; white space at its edges left out).
    ``mention``, when given too, must be the selected text."""
    if context is None:
        raise InputError("start and end are character offsets into the context: give the context too")
    if start is None or end is None:
        raise InputError("a selection needs both start and end (character offsets into the context)")
    if isinstance(start, bool) or isinstance(end, bool) or not isinstance(start, int) or not isinstance(end, int):
        raise InputError(f"start and end must be integers, got {start!r} and {end!r}")
    if not 0 <= start <= end <= len(context):
        raise InputError(f"the selection [{start}, {end}) lies outside the context of {len(context)} characters")
    selected = context[start:end]
    if not selected.strip():
        raise InputError(f"the selection [{start}, {end}) is empty" if start == end else
                         f"the selection [{start}, {end}) holds only white space")
    start += len(selected) - len(selected.lstrip())
    end -= len(selected) - len(selected.rstrip())
    if mention is not None and mention.strip() != context[start:end]:
        raise InputError(f"the mention {mention!r} is not the selected text {context[start:end]!r} "
                         f"(characters {start} to {end} of the context)")
    return Query("adhoc", "", context, start, end, context[start:end], "")


def query_of(mention: str | None, context: str | None, occurrence: int | None, start: int | None, end: int | None,
             dataset: Path | None, qid: str | None) -> tuple[Query, int, Any]:
    """The query to answer, how often its mention occurs in its text, and (``qid``) its ``DatasetQuery``."""
    if qid is None:
        if start is not None or end is not None:
            if occurrence is not None:
                raise InputError("give the mention's place as start and end offsets or as an occurrence, not both")
            query = selection_query_record(context, start, end, mention)
        elif mention is None:
            raise InputError("give --mention (and --context), or a dataset query with --dataset DATASET --qid ID")
        else:
            query = adhoc_query_record(mention, context, occurrence)
        return query, len(re.findall(re.escape(query.mention), query.text)), None
    given = [option for option, value in (("--mention", mention), ("--context", context),
                                          ("--occurrence", occurrence), ("start", start), ("end", end))
             if value is not None]
    if given:
        raise InputError(f"--qid takes the query's mention and context from the dataset: leave out {given[0]}")
    if dataset is None:
        raise InputError("--qid needs the dataset it is a query of: add --dataset DATASET")

    found = find_query(dataset, qid)
    return found.query, 1, found
