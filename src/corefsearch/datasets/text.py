"""Plain documents, without any mention annotation: a folder of ``.txt`` files or a ``corpus.jsonl``.

A ``.txt`` file is one document: its name without ``.txt`` is the ``doc_id``, its first line the
title, the rest its text (surrounding white space stripped). Files are read one at a time, in sorted
order. A ``corpus.jsonl`` (the generic format's corpus file, ``{"doc_id", "title"?, "text", ...}``),
given as a file or as a folder that holds it and no mentions, is read as ``generic`` reads it. The
documents carry no mentions: the dataset built of them has passages, and no queries, qrels or clusters.
Every error names ``FILE`` (and ``LINE``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.schema import Document, safe_id
from corefsearch.base.segmentation import DEFAULT_SENTENCES, SENTENCE_MODES
from corefsearch.datasets.generic import (
    CORPUS_FILE,
    MENTIONS_FILE,
    _chunks,
    _CorpusRecord,
    _document_split,
    _read_corpus,
    _units,
)
from corefsearch.io.read import closing_iterator, read_jsonl, text_lines

TEXT_SUFFIX = ".txt"
PASSAGE_MODES = ("sentence", "document")
SPLIT_BY = ("clusters", "corpus")


def has_records(path: Path) -> bool:
    """Whether the JSONL file ``path`` exists and holds at least one record (blank lines are none)."""
    if not Path(path).is_file():
        return False
    with closing_iterator(read_jsonl(path)) as records:
        return next(records, None) is not None


def text_files(folder: Path) -> list[Path]:
    """The ``.txt`` files of ``folder`` (not of its subfolders), in sorted order; none is an error."""
    files = sorted(path for path in Path(folder).iterdir() if path.name.endswith(TEXT_SUFFIX) and path.is_file())
    if not files:
        raise MissingArtefactError(f"{folder}: holds no {TEXT_SUFFIX} file and no {CORPUS_FILE}; --format text reads "
                                   f"a folder of {TEXT_SUFFIX} files (one document each: the title on the first "
                                   f"line, the text after it) or a {CORPUS_FILE}")
    return files


def _text_record(path: Path) -> _CorpusRecord:
    """One ``.txt`` file as a corpus record: the first line the title, the rest the text."""
    title = ""
    body: list[str] = []
    last = 0
    with closing_iterator(text_lines(path)) as lines:
        for last, line in lines:
            if last == 1:
                title = line.strip()
            else:
                body.append(line)
    text = "".join(body).strip()
    doc_id = path.name[:-len(TEXT_SUFFIX)]
    if not doc_id.strip():
        raise InputError(f"{path}: a file named only {TEXT_SUFFIX} has no document id (its name without "
                         f"{TEXT_SUFFIX})")
    if not text:
        raise InputError(f"{path}:{max(last, 1)}: document {doc_id} has no text after its title (line 1); a "
                         f"{TEXT_SUFFIX} file holds the title on its first line and the text after it")
    return _CorpusRecord(1, safe_id(doc_id), title, text)


def _text_records(files: list[Path]) -> Iterator[_CorpusRecord]:
    for path in files:
        yield _text_record(path)


def _corpus_records(path: Path) -> Iterator[_CorpusRecord]:
    """The records of a ``corpus.jsonl``; a document whose text is empty (or white space) is an error."""
    with closing_iterator(_read_corpus(path)) as records:
        for record in records:
            if not record.text.strip():
                raise InputError(f"{path}:{record.line}: document {record.doc_id} has an empty text; every "
                                 "document needs text to make passages of")
            yield record


def corpus_source(path: Path) -> Path | None:
    """The ``corpus.jsonl`` that ``--format text`` reads at ``path`` (the file itself, or the one in the
    folder), or ``None`` for a folder of ``.txt`` files."""
    path = Path(path)
    if path.is_file():
        if path.name.endswith(TEXT_SUFFIX):
            raise InputError(f"{path}: --format text reads a folder of {TEXT_SUFFIX} files (or a {CORPUS_FILE}); "
                             f"give the folder that holds {path.name}")
        return path
    if not path.is_dir():
        raise MissingArtefactError(f"{path}: no such file or folder")
    corpus = path / CORPUS_FILE
    if not corpus.is_file():
        return None
    if has_records(path / MENTIONS_FILE):
        raise InputError(f"{path}: holds {MENTIONS_FILE}, the mentions of its documents; build it with --format "
                         f"generic to keep them (--format text reads documents without mentions)")
    return corpus


def read_text(path: Path, passage: str = "sentence", *, sentences: str = DEFAULT_SENTENCES,
              split_by: str = "clusters") -> Iterator[Document]:
    """Yield the plain documents at ``path`` (a folder of ``.txt`` files, a ``corpus.jsonl``, or a folder
    holding one and no mentions), without mentions.

    Units are the sentences of each text (``passage="sentence"``; ``sentences`` picks how they are
    found, see ``segmentation.py``) or the whole text (``passage="document"``). ``split_by="corpus"``
    gives each document the ``split`` of its corpus line (a ``.txt`` file has none). Streamed: a few
    hundred documents in memory at a time.
    """
    if passage not in PASSAGE_MODES:
        raise InputError(f"passage must be one of {PASSAGE_MODES}, got {passage!r}")
    if sentences not in SENTENCE_MODES:
        raise InputError(f"--sentences must be one of {', '.join(SENTENCE_MODES)}, got {sentences!r}")
    if split_by not in SPLIT_BY:
        raise InputError(f"--split-by must be one of {', '.join(SPLIT_BY)}, got {split_by!r}")
    corpus = corpus_source(path)
    if corpus is None:
        if split_by == "corpus":
            raise InputError(f"--split-by corpus: the {TEXT_SUFFIX} files of {path} carry no split; give a "
                             f"{CORPUS_FILE} whose documents have a 'split' field")
        records = _text_records(text_files(Path(path)))
        where = Path(path)
    else:
        records = _corpus_records(corpus)
        where = corpus
    with closing_iterator(records):
        for chunk in _chunks(records):
            for record, units in zip(chunk, _units(chunk, passage, sentences), strict=True):
                yield Document(doc_id=record.doc_id, text=record.text, title=record.title, units=units,
                               split=_document_split(where, record, split_by), topic=record.topic)
