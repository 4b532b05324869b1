"""A corpus of your own: ``corpus.jsonl`` and ``mentions.jsonl`` in one folder.

``corpus.jsonl``: ``{"doc_id", "title"?, "text", "split"?, "topic"?}`` per line (``split``: train, dev
or test, used with ``split_by="corpus"``; ``topic``: a non-empty string or integer naming the
document's topic, kept on its passages for ``corefsearch cluster --scope topic``). ``mentions.jsonl``:
``{"mention_id", "doc_id", "start", "end", "cluster_id", "type"?}`` with character offsets
into the document's text, ``end`` exclusive, ``type`` "event" (default) or "entity".
Every error names ``FILE:LINE``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from corefsearch.base.errors import InputError
from corefsearch.base.schema import MENTION_TYPES, SPLITS, Document, Mention, RecordFields, safe_id
from corefsearch.base.segmentation import DEFAULT_SENTENCES, SENTENCE_MODES, keep_mentions_whole, sentence_units
from corefsearch.io.read import closing_iterator, read_jsonl

CORPUS_FILE = "corpus.jsonl"
MENTIONS_FILE = "mentions.jsonl"
PASSAGE_MODES = ("sentence", "document")
MENTION_TYPE_CHOICES = ("all", "event", "entity")
SPLIT_BY = ("clusters", "corpus")
# Documents handed to spaCy at once: large enough for its batching, small enough to stream.
CHUNK_SIZE = 256


@dataclass
class _CorpusRecord:
    line: int
    doc_id: str
    title: str
    text: str
    split: str | None = None
    topic: str | None = None


def _read_corpus(path: Path) -> Iterator[_CorpusRecord]:
    seen: dict[str, int] = {}
    with closing_iterator(read_jsonl(path)) as records:
        for line, record in records:
            fields = RecordFields(record, f"{path}:{line}")
            doc_id = safe_id(fields.ident("doc_id"))
            if doc_id in seen:
                raise InputError(f"{path}:{line}: duplicate doc_id {doc_id} (first on line {seen[doc_id]})")
            seen[doc_id] = line
            fields.subject = f"document {doc_id}"
            text = fields.string("text")
            title = fields.string("title", "")
            split = record.get("split")
            if split is not None and split not in SPLITS:
                raise InputError(f"{path}:{line}: document {doc_id}: field 'split' must be one of "
                                 f"{', '.join(SPLITS)}, got {split!r}")
            topic = fields.ident("topic", None)
            yield _CorpusRecord(line, doc_id, title, text, split, None if topic is None else topic.strip())


def _read_mentions(path: Path) -> dict[str, list[tuple[int, Mention]]]:
    """All mentions, grouped by document, each with its line number for later errors."""
    by_doc: dict[str, list[tuple[int, Mention]]] = {}
    seen: dict[str, int] = {}
    with closing_iterator(read_jsonl(path)) as records:
        for line, record in records:
            fields = RecordFields(record, f"{path}:{line}")
            mention_id = safe_id(fields.ident("mention_id"))
            if mention_id in seen:
                raise InputError(f"{path}:{line}: duplicate mention_id {mention_id} "
                                 f"(first on line {seen[mention_id]})")
            seen[mention_id] = line
            fields.subject = f"mention {mention_id}"
            doc_id = safe_id(fields.ident("doc_id"))
            cluster_id = safe_id(fields.ident("cluster_id"))
            start, end = fields.integer("start"), fields.integer("end")
            if not 0 <= start < end:
                raise fields.error(f"offsets [{start}, {end}) are not a non-empty span (end is exclusive)")
            kind = fields.choice("type", MENTION_TYPES, "event")
            mention = Mention(mention_id=mention_id, doc_id=doc_id, start=start, end=end,
                              cluster_id=cluster_id, type=kind)
            by_doc.setdefault(doc_id, []).append((line, mention))
    return by_doc


def _chunks(records: Iterator[_CorpusRecord]) -> Iterator[list[_CorpusRecord]]:
    while chunk := list(islice(records, CHUNK_SIZE)):
        yield chunk


def _whole_text(text: str) -> list[tuple[int, int]]:
    return [(0, len(text))] if text.strip() else []


def _units(chunk: list[_CorpusRecord], passage: str, sentences: str) -> list[list[tuple[int, int]]]:
    if passage == "document":
        return [_whole_text(record.text) for record in chunk]
    return sentence_units([record.text for record in chunk], sentences, batch_size=CHUNK_SIZE)


def _document_split(path: Path, record: _CorpusRecord, split_by: str) -> str | None:
    """The document's own split with ``split_by="corpus"``; ``None`` (split by clusters) otherwise."""
    if split_by != "corpus":
        return None
    if record.split is None:
        raise InputError(f"{path}:{record.line}: document {record.doc_id} has no field 'split'; --split-by corpus "
                         f"takes each document's split ({', '.join(SPLITS)}) from {CORPUS_FILE}: add it to "
                         "every document, or split by clusters (--split-by clusters)")
    return record.split


def read_generic(folder: Path, passage: str = "sentence", *, sentences: str = DEFAULT_SENTENCES,
                 mention_type: str = "all", split_by: str = "clusters",
                 require_mentions: bool = True) -> Iterator[Document]:
    """Yield the documents of ``folder/corpus.jsonl`` with their mentions from ``folder/mentions.jsonl``.

    Units are the sentences of each text (``passage="sentence"``; ``sentences`` picks how they
    are found, see ``segmentation.py``) or the whole text (``passage="document"``); sentences a
    mention straddles are joined, so no mention is lost at a sentence boundary. Only mentions of
    ``mention_type`` (``event``, ``entity`` or ``all``) are kept; the others are still checked.
    ``split_by="corpus"`` gives each document the ``split`` of its corpus line (required on
    every line); ``"clusters"`` leaves the split to ``build`` (a seeded shuffle of the clusters).
    Mentions are held in memory; the corpus is streamed.
    """
    if passage not in PASSAGE_MODES:
        raise InputError(f"passage must be one of {PASSAGE_MODES}, got {passage!r}")
    if sentences not in SENTENCE_MODES:
        raise InputError(f"--sentences must be one of {', '.join(SENTENCE_MODES)}, got {sentences!r}")
    if mention_type not in MENTION_TYPE_CHOICES:
        raise InputError(f"--mention-type must be one of {', '.join(MENTION_TYPE_CHOICES)}, got {mention_type!r}")
    if split_by not in SPLIT_BY:
        raise InputError(f"--split-by must be one of {', '.join(SPLIT_BY)}, got {split_by!r}")
    folder = Path(folder)
    if folder.is_file():
        raise InputError(f"{folder}: the generic format is a folder holding {CORPUS_FILE} and {MENTIONS_FILE}, "
                         "not a file")
    corpus_path, mentions_path = folder / CORPUS_FILE, folder / MENTIONS_FILE
    # require_mentions=False (`corefsearch add`): a folder without mentions.jsonl holds documents without mentions.
    mentions = _read_mentions(mentions_path) if require_mentions or mentions_path.exists() else {}
    counts = {kind: 0 for kind in MENTION_TYPES}
    with closing_iterator(_read_corpus(corpus_path)) as records:
        for chunk in _chunks(records):
            for record, units in zip(chunk, _units(chunk, passage, sentences), strict=True):
                document = Document(doc_id=record.doc_id, text=record.text, title=record.title,
                                    units=units, split=_document_split(corpus_path, record, split_by),
                                    topic=record.topic)
                for line, mention in mentions.pop(record.doc_id, []):
                    mention.validate(record.text, where=f"{mentions_path}:{line}")
                    counts[mention.type] += 1
                    if mention_type in ("all", mention.type):
                        document.mentions.append(mention)
                if passage == "sentence":
                    document.units = keep_mentions_whole(units, ((m.start, m.end) for m in document.mentions))
                yield document
    # Whatever is left names a document the corpus does not have.
    if mentions:
        line, mention = min((entries[0] for entries in mentions.values()), key=lambda entry: entry[0])
        raise InputError(f"{mentions_path}:{line}: mention {mention.mention_id} names doc_id "
                         f"{mention.doc_id}, which is not in {corpus_path}")
    if mention_type != "all" and not counts[mention_type] and sum(counts.values()):
        found = ", ".join(f"{n:,} {kind}" for kind, n in counts.items() if n)
        raise InputError(f"{mentions_path}: no mention has type {mention_type} (--mention-type {mention_type}); "
                         f"it holds {found} mention(s) (a mention without 'type' is an event)")


def read_distractors(path: Path) -> Iterator[Document]:
    """Documents without mentions from a ``corpus.jsonl``-style file, each text one unit.

    Used for ``--distractors``: passages that mention none of the clusters.
    """
    count = 0
    with closing_iterator(_read_corpus(Path(path))) as records:
        for record in records:
            count += 1
            yield Document(doc_id=record.doc_id, text=record.text, title=record.title,
                           units=_whole_text(record.text), split=None)
    if count == 0:
        raise InputError(f"{path}: holds no documents; give --distractors a corpus.jsonl-style file with "
                         "one {\"doc_id\", \"text\"} object a line")
