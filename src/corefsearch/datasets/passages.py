"""A dataset's passages file read by id without loading it: :class:`PassageFile` keeps each passage's
byte offset, so a retriever with no stored texts (a dense index) shows a passage by reading one line."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.errors import InputError, MissingArtefactError

if TYPE_CHECKING:
    pass


class PassageFile:
    """Passages of a dataset's ``passages.jsonl`` by id, and the passages of each document in order.

    The file is read once (at the first lookup), checked against ``checksum`` (the one the index
    recorded), and the byte offset of each passage kept; a lookup then reads one line. The file
    is read again (and checked again) when its size or modification time changes. Written by
    hand: no library keeps a byte-offset index of a JSONL file.
    """

    def __init__(self, path: Path, checksum: str | None, what: str, missing: str | None = None,
                 changed: str | None = None) -> None:
        self.path = Path(path)
        self.checksum = checksum
        self.what = what  # e.g. "the index INDEX": the passages' owner, for the messages
        self.missing = missing or (f"the dense index stores no passage texts and its dataset's {self.path} is gone; "
                                   "build the Lucene index beside it (`corefsearch index DATASET --out INDEX`) "
                                   "to show them")
        self.changed = changed or (f"{self.path} changed since the dense index was built; "
                                   "rebuild the index (--overwrite)")
        self._stat: tuple[int, int] | None = None
        self._offsets: dict[str, int] = {}
        self._document_of: dict[str, int] = {}
        self._documents: list[tuple[str, list[int]]] = []

    def _scan(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            raise MissingArtefactError(self.missing) from None
        if self._stat == (stat.st_size, stat.st_mtime_ns):
            return
        offsets: dict[str, int] = {}
        document_of: dict[str, int] = {}
        documents: list[tuple[str, list[int]]] = []
        where: dict[str, int] = {}
        digest = hashlib.sha256()
        offset = 0
        with self.path.open("rb") as handle:
            for line in handle:
                digest.update(line)
                if line.strip():
                    try:
                        record = json.loads(line)
                        passage_id, doc_id = str(record["id"]), str(record.get("doc_id", record["id"]))
                    except (ValueError, KeyError, TypeError):
                        passage_id = doc_id = ""
                    if passage_id:
                        offsets[passage_id] = offset
                        if doc_id not in where:
                            where[doc_id] = len(documents)
                            documents.append((doc_id, []))
                        document_of[passage_id] = where[doc_id]
                        documents[where[doc_id]][1].append(offset)
                offset += len(line)
        if self.checksum is not None and digest.hexdigest() != self.checksum:
            raise InputError(self.changed)
        self._offsets, self._document_of, self._documents = offsets, document_of, documents
        self._stat = (stat.st_size, stat.st_mtime_ns)

    def _read(self, offsets: Sequence[int]) -> list[dict[str, Any]]:
        records = []
        with self.path.open("rb") as handle:
            for offset in offsets:
                handle.seek(offset)
                record = json.loads(handle.readline())
                records.append({"id": str(record["id"]), "title": record.get("title", ""),
                                "text": record.get("text", ""), "doc_id": str(record.get("doc_id", record["id"]))})
        return records

    def __contains__(self, passage_id: str) -> bool:
        self._scan()
        return passage_id in self._offsets

    def passage(self, passage_id: str) -> dict[str, Any]:
        """``{"id", "title", "text"}``; an unknown id is an ``InputError``."""
        self._scan()
        if passage_id not in self._offsets:
            raise InputError(f"passage {passage_id} is not in {self.what}")
        record = self._read([self._offsets[passage_id]])[0]
        return {"id": record["id"], "title": record["title"], "text": record["text"]}

    def document(self, passage_id: str) -> tuple[str, list[dict[str, Any]]]:
        """The document id of a passage and every passage of that document, in order
        (``{"id", "title", "text", "doc_id"}`` each)."""
        self._scan()
        if passage_id not in self._document_of:
            raise InputError(f"passage {passage_id} is not in {self.what}")
        doc_id, offsets = self._documents[self._document_of[passage_id]]
        return doc_id, self._read(offsets)
