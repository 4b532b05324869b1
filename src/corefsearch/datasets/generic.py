"""A corpus of your own: ``corpus.jsonl`` and ``mentions.jsonl`` in one folder.

``corpus.jsonl``: ``{"doc_id", "title"?, "text"}`` per line. ``mentions.jsonl``:
``{"mention_id", "doc_id", "start", "end", "cluster_id", "type"?}`` with character offsets
into the document's text, ``end`` exclusive, ``type`` "event" (default) or "entity".
Every error names ``FILE:LINE``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from corefsearch.errors import InputError
from corefsearch.io import read_jsonl
from corefsearch.nlp import sentence_spans
from corefsearch.schema import MENTION_TYPES, Document, Mention, safe_id

CORPUS_FILE = "corpus.jsonl"
MENTIONS_FILE = "mentions.jsonl"
PASSAGE_MODES = ("sentence", "document")
# Documents handed to spaCy at once: large enough for its batching, small enough to stream.
CHUNK_SIZE = 256


@dataclass
class _CorpusRecord:
    line: int
    doc_id: str
    title: str
    text: str


def _ident(path: Path, line: int, record: dict[str, Any], name: str) -> str:
    """A required identifier field (string or integer), made TREC-safe."""
    if name not in record:
        raise InputError(f"{path}:{line}: lacks the field {name!r}")
    value = record[name]
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise InputError(f"{path}:{line}: field {name!r} must be a non-empty string or integer, "
                         f"got {value!r}")
    return safe_id(value)


def _read_corpus(path: Path) -> Iterator[_CorpusRecord]:
    seen: dict[str, int] = {}
    for line, record in read_jsonl(path):
        doc_id = _ident(path, line, record, "doc_id")
        if doc_id in seen:
            raise InputError(f"{path}:{line}: duplicate doc_id {doc_id} (first on line {seen[doc_id]})")
        seen[doc_id] = line
        if "text" not in record:
            raise InputError(f"{path}:{line}: document {doc_id} lacks the field 'text'")
        text = record["text"]
        if not isinstance(text, str):
            raise InputError(f"{path}:{line}: document {doc_id}: field 'text' must be a string")
        title = record.get("title")
        if title is None:
            title = ""
        if not isinstance(title, str):
            raise InputError(f"{path}:{line}: document {doc_id}: field 'title' must be a string")
        yield _CorpusRecord(line, doc_id, title, text)


def _read_mentions(path: Path) -> dict[str, list[tuple[int, Mention]]]:
    """All mentions, grouped by document, each with its line number for later errors."""
    by_doc: dict[str, list[tuple[int, Mention]]] = {}
    seen: dict[str, int] = {}
    for line, record in read_jsonl(path):
        mention_id = _ident(path, line, record, "mention_id")
        if mention_id in seen:
            raise InputError(f"{path}:{line}: duplicate mention_id {mention_id} "
                             f"(first on line {seen[mention_id]})")
        seen[mention_id] = line
        doc_id = _ident(path, line, record, "doc_id")
        cluster_id = _ident(path, line, record, "cluster_id")
        offsets = []
        for name in ("start", "end"):
            if name not in record:
                raise InputError(f"{path}:{line}: mention {mention_id} lacks the field {name!r}")
            value = record[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{path}:{line}: mention {mention_id}: field {name!r} must be an integer, "
                                 f"got {value!r}")
            offsets.append(value)
        start, end = offsets
        if not 0 <= start < end:
            raise InputError(f"{path}:{line}: mention {mention_id}: offsets [{start}, {end}) are not a "
                             "non-empty span (end is exclusive)")
        kind = record.get("type", "event")
        if kind not in MENTION_TYPES:
            raise InputError(f"{path}:{line}: mention {mention_id}: type must be one of {MENTION_TYPES}, "
                             f"got {kind!r}")
        mention = Mention(mention_id=mention_id, doc_id=doc_id, start=start, end=end,
                          cluster_id=cluster_id, type=kind)
        by_doc.setdefault(doc_id, []).append((line, mention))
    return by_doc


def _chunks(records: Iterator[_CorpusRecord]) -> Iterator[list[_CorpusRecord]]:
    while chunk := list(islice(records, CHUNK_SIZE)):
        yield chunk


def _whole_text(text: str) -> list[tuple[int, int]]:
    return [(0, len(text))] if text.strip() else []


def _units(chunk: list[_CorpusRecord], passage: str) -> list[list[tuple[int, int]]]:
    if passage == "document":
        return [_whole_text(record.text) for record in chunk]
    return list(sentence_spans([record.text for record in chunk], batch_size=CHUNK_SIZE))


def read_generic(folder: Path, passage: str = "sentence") -> Iterator[Document]:
    """Yield the documents of ``folder/corpus.jsonl`` with their mentions from ``folder/mentions.jsonl``.

    Units are the sentences of each text (``passage="sentence"``) or the whole text
    (``passage="document"``). Mentions are held in memory; the corpus is streamed.
    """
    if passage not in PASSAGE_MODES:
        raise InputError(f"passage must be one of {PASSAGE_MODES}, got {passage!r}")
    folder = Path(folder)
    corpus_path, mentions_path = folder / CORPUS_FILE, folder / MENTIONS_FILE
    mentions = _read_mentions(mentions_path)
    for chunk in _chunks(_read_corpus(corpus_path)):
        for record, units in zip(chunk, _units(chunk, passage), strict=True):
            document = Document(doc_id=record.doc_id, text=record.text, title=record.title,
                                units=units, split=None)
            for line, mention in mentions.pop(record.doc_id, []):
                mention.validate(record.text, where=f"{mentions_path}:{line}")
                document.mentions.append(mention)
            yield document
    # Whatever is left names a document the corpus does not have.
    if mentions:
        line, mention = min((entries[0] for entries in mentions.values()), key=lambda entry: entry[0])
        raise InputError(f"{mentions_path}:{line}: mention {mention.mention_id} names doc_id "
                         f"{mention.doc_id}, which is not in {corpus_path}")


def read_distractors(path: Path) -> Iterator[Document]:
    """Documents without mentions from a ``corpus.jsonl``-style file, each text one unit.

    Used for ``--distractors``: passages that mention none of the clusters.
    """
    for record in _read_corpus(Path(path)):
        yield Document(doc_id=record.doc_id, text=record.text, title=record.title,
                       units=_whole_text(record.text), split=None)
