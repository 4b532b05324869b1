"""Plain documents, without any mention annotation, as users have them: a folder (sub-folders too) of
``.txt`` and ``.md`` files, one such file, a table of texts (``.csv``, ``.tsv``, ``.jsonl``) or a
``corpus.jsonl``.

Files. Each ``.txt`` or ``.md`` file under the folder is one document, read in sorted order of its
path; its ``doc_id`` is its path relative to the folder without the suffix (``2024/05/fire`` for
``2024/05/fire.txt``), so ids stay unique across sub-folders and stable as files are added. Hidden files
and folders (``.git``, ``.DS_Store``) are passed over; any other file, an empty one or one that is not
UTF-8 text is skipped with a line naming it and why. The title (``--title``):

- ``auto`` (default): line 1 is the title when it reads as a headline: more text follows it, it is a
  Markdown heading (``# …``) or it is short (at most 200 characters and 30 words) and does not end as a
  sentence does (``.``, ``!``, ``?``, ``…``, ``:``, ``;``, ``,``, a closing quote or bracket after one of
  those). Otherwise (``A landslide closed the coast road.`` on line 1, or a one-line file) every line is
  text. A headline that ends in ``?`` is kept as text: the rule never drops a sentence, at the cost of
  reading some titles as text.
- ``first-line``: line 1 is always the title (a file with nothing after it is refused).
- ``none``: every line is text; no title.

A title is kept on every passage of its document (searched with it), never as a passage of its own.

Tables. A ``.csv``/``.tsv`` (Python's ``csv``: quoted fields may hold commas, tabs and line breaks; a
header row names the columns) or ``.jsonl`` file (each also ``.gz``) holds one document a row:
``--text-field`` (default: the first of :data:`TEXT_FIELDS` it has, any case), ``--id-field``
(:data:`ID_FIELDS`; without one, ids are ``NAME-N``, the file's name and the row's number),
``--title-field`` (:data:`TITLE_FIELDS`; without one, no titles), and ``split`` and ``topic`` when
present. A row whose text is empty is skipped with a line naming it. A ``corpus.jsonl`` (the generic
format's corpus file, ``{"doc_id", "title"?, "text", ...}``), given as a file or as a folder that holds
it and no mentions, is read as ``generic`` reads it unless a field option is given.

The documents carry no mentions: the dataset built of them has passages, and no queries, qrels or
clusters. Every error names ``FILE`` (and ``LINE``); what was read (how titles were taken, which
columns, what was skipped) is filled into a :class:`TextReport` for the summary and the manifest.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from corefsearch.datasets.tables import table_records, table_suffix
from corefsearch.io.read import closing_iterator, read_jsonl, text_lines

TEXT_SUFFIX = ".txt"
TEXT_SUFFIXES = (".txt", ".md")
PASSAGE_MODES = ("sentence", "document")
SPLIT_BY = ("clusters", "corpus")
TITLE_MODES = ("auto", "first-line", "none")
DEFAULT_TITLE = "auto"
# Lines naming skipped files or rows, at most; the rest are counted.
SKIPPED_LINES = 20
_MAX_TITLE_CHARS, _MAX_TITLE_WORDS = 200, 30
_SENTENCE_END = re.compile(r"[.!?…:;,][\"'”’»)\]]*$")
_MARKDOWN_HEADING = re.compile(r"^#{1,6}\s+")


@dataclass
class TextOptions:
    """How plain documents are read: ``title`` (:data:`TITLE_MODES`; None: auto) for files, the columns
    of a table (None: the first of the usual names it has)."""

    title: str | None = None
    text_field: str | None = None
    id_field: str | None = None
    title_field: str | None = None

    def check(self) -> None:
        if self.title is not None and self.title not in TITLE_MODES:
            raise InputError(f"--title must be one of {', '.join(TITLE_MODES)}, got {self.title!r}")
        for option, value in (("--text-field", self.text_field), ("--id-field", self.id_field),
                              ("--title-field", self.title_field)):
            if value is not None and not value.strip():
                raise InputError(f"{option} names a column; got an empty name")

    @property
    def fields_given(self) -> bool:
        return any(value is not None for value in (self.text_field, self.id_field, self.title_field))

    def resolved(self) -> dict[str, str | None]:
        """For the manifest (and ``add``, which reads new documents as the dataset's were read)."""
        return {"title": self.title or DEFAULT_TITLE, "text_field": self.text_field, "id_field": self.id_field,
                "title_field": self.title_field}


@dataclass
class TextReport:
    """Filled while plain documents are read: the layout, how titles were taken, the columns, what was skipped."""

    layout: str = ""  # "files", "table" or "corpus"
    title_mode: str = DEFAULT_TITLE
    documents: int = 0
    titled: int = 0  # files whose line 1 was taken as the title
    untitled: int = 0  # files read whole (no title line)
    one_line: int = 0  # of those, files of a single line of text
    hidden: int = 0  # hidden files passed over
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file or row, why)
    columns: dict[str, str] = field(default_factory=dict)  # table: {"text": "body", "id": "id", "title": ...}
    # :meth:`record`, filled in place once every document is read: a manifest written after the reading holds it.
    record_dict: dict[str, Any] = field(default_factory=dict)

    def skip(self, what: str, why: str) -> None:
        self.skipped.append((what, why))
        if len(self.skipped) <= SKIPPED_LINES:
            warnings.warn(f"{what}: skipped: {why}", stacklevel=3)
        elif len(self.skipped) == SKIPPED_LINES + 1:
            warnings.warn(f"more than {SKIPPED_LINES} skipped; the summary counts them all", stacklevel=3)

    def lines(self) -> list[str]:
        """What the build summary says of how the documents were read."""
        lines = []
        if self.layout == "files":
            if self.title_mode == "auto":
                why = [f"{n:,} {what}" for n, what in ((self.untitled - self.one_line, "whose line 1 is a sentence"),
                                                       (self.one_line, "of one line")) if n]
                lines.append(f"Titles (--title auto): {self.titled:,} of {self.documents:,} file(s) open with a "
                             f"headline, taken as the title; {self.untitled:,} read whole, every line text"
                             + (f" ({', '.join(why)})" if why else "") + ". --title first-line or none to choose.")
            elif self.title_mode == "first-line":
                lines.append(f"Titles (--title first-line): line 1 of each of the {self.documents:,} file(s).")
            else:
                lines.append(f"Titles (--title none): none; every line of the {self.documents:,} file(s) is text.")
        elif self.layout == "table":
            named = ", ".join(f"{role} from {column!r}" if column else f"{role}: none" for role, column in
                              self.columns.items())
            lines.append(f"Columns: {named}.")
        if self.skipped:
            lines.append(f"Skipped {len(self.skipped):,}: " + "; ".join(
                f"{what} ({why})" for what, why in self.skipped[:3]) + ("; …" if len(self.skipped) > 3 else "") + ".")
        if self.hidden:
            lines.append(f"Passed over {self.hidden:,} hidden file(s).")
        return lines

    def record(self) -> dict[str, Any]:
        """For the dataset's manifest."""
        return {"layout": self.layout, "title": self.title_mode if self.layout == "files" else None,
                "titled": self.titled, "untitled": self.untitled, "skipped": len(self.skipped),
                "columns": self.columns or None}

    def sync(self) -> None:
        self.record_dict.clear()
        self.record_dict.update(self.record())


def has_records(path: Path) -> bool:
    """Whether the JSONL file ``path`` exists and holds at least one record (blank lines are none)."""
    if not Path(path).is_file():
        return False
    with closing_iterator(read_jsonl(path)) as records:
        return next(records, None) is not None


def text_files(folder: Path, report: TextReport | None = None) -> list[tuple[Path, str]]:
    """``(file, doc_id)`` for the ``.txt`` and ``.md`` files under ``folder`` (sub-folders too), in sorted
    order of their relative paths; other files are skipped with a line, hidden ones passed over. None is an
    error, as are two files that would have the same id."""
    folder = Path(folder)
    report = report if report is not None else TextReport()
    found: list[tuple[Path, str]] = []
    others: list[tuple[Path, str]] = []
    owner: dict[str, Path] = {}
    for path in sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).parts):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            report.hidden += path.is_file()
            continue
        if not path.is_file():
            continue
        if path.suffix.lower() not in TEXT_SUFFIXES:
            others.append((path, "a table: give it as INPUT to read its rows" if table_suffix(path) or
                           path.name == CORPUS_FILE else f"not a {' or '.join(TEXT_SUFFIXES)} file"))
            continue
        doc_id = safe_id(relative.with_suffix("").as_posix()) if relative.with_suffix("").name.strip() else ""
        if not doc_id:
            raise InputError(f"{path}: a file named only {path.suffix} has no document id (its name without "
                             f"{path.suffix})")
        if doc_id in owner:
            raise InputError(f"{path}: its document id {doc_id} is also that of {owner[doc_id]} (the path without "
                             "its suffix); rename one of them")
        owner[doc_id] = path
        found.append((path, doc_id))
    if not found:
        held = f"; it holds {len(others):,} other file(s), e.g. {others[0][0].name}" if others else ""
        raise MissingArtefactError(f"{folder}: holds no {' or '.join(TEXT_SUFFIXES)} file (sub-folders included) and "
                                   f"no {CORPUS_FILE}{held}; --format text reads a folder of text files (one document "
                                   "each), a table of texts (.csv, .tsv, .jsonl) or a corpus.jsonl")
    for path, why in others:
        report.skip(str(path), why)
    return found


def _looks_like_title(line: str, markdown: bool) -> bool:
    """Whether line 1 (``line``, stripped) reads as a headline rather than as the text's first sentence."""
    if markdown and _MARKDOWN_HEADING.match(line):
        return True
    if len(line) > _MAX_TITLE_CHARS or len(line.split()) > _MAX_TITLE_WORDS:
        return False
    return _SENTENCE_END.search(line) is None


def _file_record(path: Path, doc_id: str, mode: str, report: TextReport, alone: bool) -> _CorpusRecord | None:
    """One text file as a corpus record (None: skipped, said in a line; ``alone``: the only file given, whose
    faults are errors)."""
    lines: list[str] = []
    try:
        with closing_iterator(text_lines(path)) as read:
            lines = [line for _, line in read]
    except InputError as err:
        if alone or not any(kind in str(err) for kind in ("not UTF-8 text", "not a text file")):
            raise
        report.skip(str(path), str(err).removeprefix(f"{path}").lstrip(":0123456789 "))
        return None
    markdown = path.suffix.lower() == ".md"
    first = lines[0].strip() if lines else ""
    rest = "".join(lines[1:]).strip()
    if mode == "auto":
        titled = bool(first) and bool(rest) and _looks_like_title(first, markdown)
    else:
        titled = mode == "first-line"
    if titled:
        title, text = (_MARKDOWN_HEADING.sub("", first) if markdown else first), rest
    else:
        title, text = "", "".join(lines).strip()
    if not text:
        if mode == "first-line" and first:
            raise InputError(f"{path}:{max(len(lines), 1)}: document {doc_id} has no text after its title (line 1; "
                             "--title first-line); --title auto reads a file of one line as its text")
        if alone:
            raise InputError(f"{path}: holds no text; nothing to read")
        report.skip(str(path), "empty")
        return None
    if titled:
        report.titled += 1
    else:
        report.untitled += 1
        report.one_line += sum(1 for line in lines if line.strip()) == 1
    report.documents += 1
    return _CorpusRecord(1, doc_id, title, text)


def _file_records(source: Path, files: list[tuple[Path, str]], mode: str,
                  report: TextReport) -> Iterator[_CorpusRecord]:
    for path, doc_id in files:
        record = _file_record(path, doc_id, mode, report, alone=path == source)
        if record is not None:
            yield record
    if not report.documents:
        raise InputError(f"{source}: none of its {len(files):,} text file(s) holds text; nothing to read")


def _corpus_records(path: Path, report: TextReport | None = None) -> Iterator[_CorpusRecord]:
    """The records of a ``corpus.jsonl``; a document whose text is empty (or white space) is an error."""
    with closing_iterator(_read_corpus(path)) as records:
        for record in records:
            if not record.text.strip():
                raise InputError(f"{path}:{record.line}: document {record.doc_id} has an empty text; every "
                                 "document needs text to make passages of")
            if report is not None:
                report.documents += 1
            yield record


def corpus_source(path: Path) -> Path | None:
    """The ``corpus.jsonl`` or table file that ``--format text`` reads at ``path`` (the file itself, or the
    folder's ``corpus.jsonl``), or ``None`` for a folder of text files or one text file."""
    path = Path(path)
    if path.is_file():
        if path.suffix.lower() in TEXT_SUFFIXES:
            return None
        if path.name != CORPUS_FILE and table_suffix(path) is None:
            raise InputError(f"{path}: --format text reads .txt and .md files (or a folder of them), a table "
                             f"(.csv, .tsv, .jsonl, also .gz) or a {CORPUS_FILE}; {path.name} is none of those")
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
              split_by: str = "clusters", options: TextOptions | None = None,
              report: TextReport | None = None) -> Iterator[Document]:
    """Yield the plain documents at ``path`` (see the module doc), without mentions; ``report`` is filled as
    they are read.

    Units are the sentences of each text (``passage="sentence"``; ``sentences`` picks how they are
    found, see ``segmentation.py``) or the whole text (``passage="document"``). ``split_by="corpus"``
    gives each document the ``split`` of its record (a text file has none). Streamed: a few hundred
    documents in memory at a time.
    """
    options = options or TextOptions()
    report = report if report is not None else TextReport()
    options.check()
    if passage not in PASSAGE_MODES:
        raise InputError(f"passage must be one of {PASSAGE_MODES}, got {passage!r}")
    if sentences not in SENTENCE_MODES:
        raise InputError(f"--sentences must be one of {', '.join(SENTENCE_MODES)}, got {sentences!r}")
    if split_by not in SPLIT_BY:
        raise InputError(f"--split-by must be one of {', '.join(SPLIT_BY)}, got {split_by!r}")
    path = Path(path)
    corpus = corpus_source(path)
    records: Iterator[_CorpusRecord]
    if corpus is None:
        if options.fields_given:
            raise InputError(f"--text-field, --id-field and --title-field name a table's columns; {path} is "
                             f"{'a text file' if path.is_file() else 'a folder of text files'}")
        if split_by == "corpus":
            raise InputError(f"--split-by corpus: the text files of {path} carry no split; give a table or "
                             f"{CORPUS_FILE} whose documents have a 'split' field")
        report.layout, report.title_mode = "files", options.title or DEFAULT_TITLE
        files = [(path, safe_id(path.stem))] if path.is_file() else text_files(path, report)
        records = _file_records(path, files, report.title_mode, report)
        where = path
    else:
        if options.title is not None:
            raise InputError(f"--title applies to text files; the titles of {corpus.name} come from its "
                             "--title-field column")
        if corpus.name == CORPUS_FILE and not options.fields_given:
            report.layout = "corpus"
            records = _corpus_records(corpus, report)
        else:
            report.layout = "table"
            records = table_records(corpus, options, report)
        where = corpus
    with closing_iterator(records):
        for chunk in _chunks(records):
            for record, units in zip(chunk, _units(chunk, passage, sentences), strict=True):
                yield Document(doc_id=record.doc_id, text=record.text, title=record.title, units=units,
                               split=_document_split(where, record, split_by), topic=record.topic)
    report.sync()
