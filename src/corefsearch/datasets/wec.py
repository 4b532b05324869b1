"""WEC-Eng (Eirew et al., NAACL 2021): a JSON list of event mention records.

Each record carries its mention's paragraph (``mention_context``, a token list) and the
Wikipedia article it comes from (``doc_id``). One :class:`Document` is made per article:
its distinct paragraphs, in first-seen order, are its units.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Document, Mention, safe_id
from corefsearch.io.read import closing_iterator, read_json_array

REQUIRED_FIELDS = ("coref_chain", "doc_id", "mention_context", "tokens_number", "tokens_str", "mention_id")


def iter_json_array(path: Path) -> Iterator[tuple[int, Any]]:
    """Stream ``(index, item)`` from a file holding one JSON list (see :func:`corefsearch.io.read.read_json_array`)."""
    return read_json_array(path, "mention records")


def squash(text: str) -> str:
    """Text without any white space, to compare mention strings across tokenisations."""
    return "".join(text.split())


@dataclass
class _Article:
    # token tuple -> unit index; a dict keeps first-seen order.
    contexts: dict[tuple[str, ...], int] = field(default_factory=dict)
    # (mention_id, cluster_id, unit index, first token, last token)
    mentions: list[tuple[str, str, int, int, int]] = field(default_factory=list)


def _field(path: Path, index: int, record: dict[str, Any], name: str) -> Any:
    if name not in record:
        raise InputError(f"{path}: record {index} lacks the field {name!r}")
    return record[name]


def _check_record(path: Path, index: int, record: Any) -> tuple[str, str, str, tuple[str, ...], int, int]:
    """Validate one record; return (article, mention_id, cluster_id, context, first, last)."""
    if not isinstance(record, dict):
        raise InputError(f"{path}: record {index} is a {type(record).__name__}, not a JSON object")
    values = {name: _field(path, index, record, name) for name in REQUIRED_FIELDS}
    article, raw_id, chain = values["doc_id"], values["mention_id"], values["coref_chain"]
    context, numbers, tokens_str = values["mention_context"], values["tokens_number"], values["tokens_str"]
    where = f"{path}: record {index}"
    if not isinstance(article, str) or not article.strip():
        raise InputError(f"{where}: field 'doc_id' must be a non-empty string, got {article!r}")
    if not isinstance(raw_id, (str, int)) or isinstance(raw_id, bool):
        raise InputError(f"{where}: field 'mention_id' must be a string or integer, got {raw_id!r}")
    if not isinstance(chain, (str, int)) or isinstance(chain, bool):
        raise InputError(f"{where}: field 'coref_chain' must be a string or integer, got {chain!r}")
    if not isinstance(context, list) or not all(isinstance(t, str) for t in context):
        raise InputError(f"{where}: field 'mention_context' must be a list of strings")
    if (not isinstance(numbers, list) or not numbers
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers)):
        raise InputError(f"{where}: field 'tokens_number' must be a non-empty list of integers")
    if not isinstance(tokens_str, str):
        raise InputError(f"{where}: field 'tokens_str' must be a string")
    mention_id = safe_id(raw_id)
    # min/max rather than [0]/[-1] so an unsorted index list still gives the covering span.
    first, last = min(numbers), max(numbers)
    if first < 0 or last >= len(context):
        raise InputError(f"{where}: mention {mention_id}: tokens_number {numbers} outside its "
                         f"mention_context of {len(context)} tokens")
    span = " ".join(context[first:last + 1])
    if squash(span) != squash(tokens_str):
        raise InputError(f"{where}: mention {mention_id}: tokens {first}-{last} read {span!r}, "
                         f"not tokens_str {tokens_str!r}")
    return article, mention_id, str(chain), tuple(context), first, last


def read_wec(path: Path) -> Iterator[Document]:
    """Yield one :class:`Document` per Wikipedia article of a WEC-Eng mention file (plain or ``.gz``).

    The text is the article's distinct mention contexts (tokens joined by single spaces)
    separated by newlines; each context is a unit. Mentions are event mentions with the
    WEC ``coref_chain`` as their cluster; ``split`` is left to ``build``.
    """
    path = Path(path)
    articles: dict[str, _Article] = {}
    seen_ids: dict[str, int] = {}
    # Grouping needs every article in memory (records of one article are not contiguous),
    # but the file itself is parsed as a stream.
    with closing_iterator(iter_json_array(path)) as records:
        for index, record in records:
            article, mention_id, cluster_id, context, first, last = _check_record(path, index, record)
            if mention_id in seen_ids:
                raise InputError(f"{path}: record {index}: mention id {mention_id} repeats record "
                                 f"{seen_ids[mention_id]}")
            seen_ids[mention_id] = index
            entry = articles.setdefault(article, _Article())
            unit = entry.contexts.setdefault(context, len(entry.contexts))
            entry.mentions.append((mention_id, cluster_id, unit, first, last))

    for title, entry in articles.items():
        contexts = list(entry.contexts)
        # Character offset of every token of every context, in the joined text.
        token_starts: list[list[int]] = []
        units: list[tuple[int, int]] = []
        offset = 0
        for tokens in contexts:
            starts = []
            position = offset
            for token in tokens:
                starts.append(position)
                position += len(token) + 1
            token_starts.append(starts)
            end = offset + len(" ".join(tokens))
            units.append((offset, end))
            offset = end + 1  # the "\n" between contexts
        text = "\n".join(" ".join(tokens) for tokens in contexts)
        mentions = []
        for mention_id, cluster_id, unit, first, last in entry.mentions:
            start = token_starts[unit][first]
            end = token_starts[unit][last] + len(contexts[unit][last])
            mentions.append(Mention(mention_id=mention_id, doc_id=title, start=start, end=end,
                                    cluster_id=cluster_id, type="event"))
        document = Document(doc_id=title, text=text, title=title, units=units, mentions=mentions, split=None)
        document.validate(where=str(path))
        yield document
