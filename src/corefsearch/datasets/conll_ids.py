"""The ids of the documents of a folder of CoNLL files (``build-dataset --format conll``).

A document's id is the value of its document column, ``NAME_PART`` where blocks of different parts
name it. Where two files name the same document (split files that each number their documents from
0, as ``train.conll`` and ``dev.conll`` both holding ``0_news_362``), the two are different documents
and every document id of the folder is ``FILE/NAME`` (``dev/0_news_362``), ``FILE`` the file's label as
in the cluster ids: whether or not the files are splits. Where no two files share a name the ids are
the names, so that a folder's dataset keeps its ids. One file naming a document twice (two blocks of
the same part, or of none) is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from corefsearch.base.errors import InputError
from corefsearch.base.schema import safe_id


class BlockNames(NamedTuple):
    """What the ids need of a ``#begin document`` block: its line, its part and its documents' names."""

    line: int
    part: str | None
    names: list[str]


class Collision(NamedTuple):
    """A document id given twice."""

    doc_id: str
    name: str  # the document column's value
    where: str  # FILE:LINE of the block that names it again
    first: str  # FILE:LINE of the block that named it first (in the same file where it is one)
    same_file: bool


def file_labels(files: list[Path]) -> list[str]:
    """What names each file in the cluster ids: its name without the last suffix, or all of it where two agree."""
    stems = [file.stem or file.name for file in files]
    return stems if len(set(stems)) == len(stems) else [file.name for file in files]


def _ids(files: list[Path], blocks: list[list[BlockNames]], labels: list[str] | None
         ) -> tuple[list[list[dict[str, str]]], list[Collision]]:
    """The id of each document of each block of each file, and the ids given twice. With ``labels`` each id is
    ``LABEL/NAME``, the documents of each file apart; without, the names run through all the files."""
    # Documents named in blocks of more than one part are one document per part.
    names: dict[tuple[int, str], int] = {}
    for index, file_blocks in enumerate(blocks):
        for block in file_blocks:
            for name in block.names:
                key = (index if labels else 0, name)
                names[key] = names.get(key, 0) + 1
    taken: dict[str, dict[int, str]] = {}  # document id -> file -> FILE:LINE of its first block naming it
    ids: list[list[dict[str, str]]] = []
    collisions: list[Collision] = []
    for index, (file, file_blocks) in enumerate(zip(files, blocks, strict=True)):
        ids.append([])
        for block in file_blocks:
            doc_ids = {}
            for name in block.names:
                full = (name if names[(index if labels else 0, name)] == 1 or block.part is None else
                        f"{name}_{block.part}")
                doc_id = safe_id(full if labels is None else f"{labels[index]}/{full}")
                where = f"{file}:{block.line}"
                holders = taken.setdefault(doc_id, {})
                if holders:
                    first = holders.get(index) or next(iter(holders.values()))
                    collisions.append(Collision(doc_id, name, where, first, index in holders))
                holders.setdefault(index, where)
                doc_ids[name] = doc_id
            ids[-1].append(doc_ids)
    return ids, collisions


def _refuse(collision: Collision) -> None:
    raise InputError(f"{collision.where}: document {collision.doc_id} is also in {collision.first}")


def document_ids(files: list[Path], blocks: list[list[BlockNames]]
                 ) -> tuple[list[list[dict[str, str]]], list[Collision]]:
    """Per file, per block, each document name's id; and the ids two files shared, which made every id
    ``FILE/NAME`` (none where the ids are the names)."""
    ids, collisions = _ids(files, blocks, None)
    within = [collision for collision in collisions if collision.same_file]
    if within:
        _refuse(within[0])
    if not collisions:
        return ids, []
    ids, again = _ids(files, blocks, file_labels(files))
    if again:
        _refuse(again[0])
    return ids, collisions
