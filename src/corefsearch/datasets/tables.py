"""Tables of plain documents (``--format text`` on a ``.csv``, ``.tsv`` or ``.jsonl`` file, each also
``.gz``): one document a row, its text, id and title taken from columns (see :mod:`corefsearch.datasets.text`).

CSV and TSV are read with Python's ``csv`` (quoted cells may hold the delimiter and line breaks), JSON
Lines with the project's reader; the columns are picked once, from the header or the first record.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.errors import InputError
from corefsearch.base.schema import SPLITS, RecordFields, safe_id
from corefsearch.datasets.generic import _CorpusRecord
from corefsearch.io.read import closing_iterator, open_text, read_jsonl

if TYPE_CHECKING:
    from corefsearch.datasets.text import TextOptions, TextReport

# Table files by suffix (also with ``.gz``): the CSV delimiter, or None for JSON Lines.
TABLE_SUFFIXES: dict[str, str | None] = {".csv": ",", ".tsv": "\t", ".jsonl": None}
# Column names tried, in order and in any case, when no --*-field is given: those of common exports
# (the generic format, BEIR's corpus.jsonl, Pyserini's JsonCollection, news and CMS dumps).
ID_FIELDS = ("doc_id", "docid", "id", "_id", "uuid", "url")
TEXT_FIELDS = ("text", "contents", "content", "body", "article", "document", "abstract")
TITLE_FIELDS = ("title", "headline", "heading", "subject", "name")


def table_suffix(path: Path) -> str | None:
    """The table kind of ``path`` (``.csv``, ``.tsv``, ``.jsonl``; also under ``.gz``), or None."""
    suffixes = [suffix.lower() for suffix in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    return suffixes[-1] if suffixes and suffixes[-1] in TABLE_SUFFIXES else None


def _table_name(path: Path) -> str:
    name = Path(path).name
    suffix = table_suffix(path) or ""
    return name[:name.lower().rfind(suffix)] if suffix else Path(name).stem


def _pick_column(columns: list[str], given: str | None, candidates: tuple[str, ...], option: str,
                 where: str, required: bool) -> str | None:
    if given is not None:
        if given not in columns:
            raise InputError(f"{where}: has no column {given!r} ({option}); its columns: "
                             f"{', '.join(map(repr, columns[:20]))}")
        return given
    lowered = {column.lower(): column for column in reversed(columns)}
    for candidate in candidates:
        if candidate in lowered:
            return lowered[candidate]
    if required:
        raise InputError(f"{where}: no text column: none of {', '.join(candidates)} among its columns "
                         f"({', '.join(map(repr, columns[:20]))}); name it with {option}")
    return None


def _csv_rows(path: Path, delimiter: str) -> Iterator[tuple[int, dict[str, Any], list[str]]]:
    """``(line, row, columns)`` of a CSV/TSV file with a header row; quoted cells may span lines."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # whole articles in one cell
    handle = open_text(path)
    try:
        reader = csv.reader(handle, delimiter=delimiter)
        try:
            header = next(reader, None)
        except csv.Error as err:
            raise InputError(f"{path}:1: not a readable header row ({err})") from None
        if header is None or not any(cell.strip() for cell in header):
            raise InputError(f"{path}: no header row; a table's first row names its columns")
        columns = [cell.strip() for cell in header]
        while True:
            line = reader.line_num + 1
            try:
                cells = next(reader, None)
            except csv.Error as err:
                raise InputError(f"{path}:{line}: not a readable row ({err})") from None
            if cells is None:
                return
            if not any(cell.strip() for cell in cells):
                continue
            if len(cells) > len(columns):
                raise InputError(f"{path}:{line}: {len(cells)} cells for {len(columns)} columns (a cell holding the "
                                 f"delimiter {delimiter!r} must be quoted)")
            yield line, dict(zip(columns, cells, strict=False)), columns
    except UnicodeDecodeError as err:
        raise InputError(f"{path}:{reader.line_num + 1}: not UTF-8 text ({err.reason}); save it as UTF-8") from None
    finally:
        handle.close()


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any], list[str]]]:
    with closing_iterator(read_jsonl(path)) as records:
        for line, record in records:
            yield line, record, list(record)


def table_records(path: Path, options: TextOptions, report: TextReport) -> Iterator[_CorpusRecord]:
    """The rows of a table file as corpus records (see the module doc)."""
    delimiter = TABLE_SUFFIXES[table_suffix(path) or ".jsonl"]
    rows = _jsonl_rows(path) if delimiter is None else _csv_rows(path, delimiter)
    name = _table_name(path)
    picked: tuple[str | None, str | None, str | None] | None = None
    seen: dict[str, int] = {}
    with closing_iterator(rows):
        for number, (line, row, columns) in enumerate(rows, start=1):
            where = f"{path}:{line}"
            if picked is None:  # the columns are those of the header (a table) or of the first record (JSONL)
                picked = (_pick_column(columns, options.text_field, TEXT_FIELDS, "--text-field", where, True),
                          _pick_column(columns, options.id_field, ID_FIELDS, "--id-field", where, False),
                          _pick_column(columns, options.title_field, TITLE_FIELDS, "--title-field", where, False))
                report.columns = {"text": picked[0] or "", "id": picked[1] or "", "title": picked[2] or ""}
            text_column, id_column, title_column = picked
            fields = RecordFields(row, where)
            if id_column is None:
                doc_id = safe_id(f"{name}-{number}")
            else:
                if id_column not in row:
                    raise InputError(f"{where}: lacks the id column {id_column!r}")
                doc_id = safe_id(fields.ident(id_column))
            fields.subject = f"document {doc_id}"
            if doc_id in seen:
                raise InputError(f"{where}: duplicate id {doc_id} (first on line {seen[doc_id]}; column {id_column!r})")
            seen[doc_id] = line
            text = fields.string(text_column, "") if text_column in row else ""
            if not text.strip():
                report.skip(f"{where} ({doc_id})", f"empty text in column {text_column!r}")
                continue
            title = fields.string(title_column, "") if title_column is not None else ""
            split = row.get("split") or None
            if split is not None and split not in SPLITS:
                raise InputError(f"{where}: document {doc_id}: column 'split' must be one of {', '.join(SPLITS)}, "
                                 f"got {split!r}")
            topic = row.get("topic")
            topic = None if topic is None or not str(topic).strip() else str(topic).strip()
            report.documents += 1
            yield _CorpusRecord(line, doc_id, title.strip(), text.strip(), split, topic)
    if picked is None or not report.documents:
        raise InputError(f"{path}: holds no row with text; nothing to read")
