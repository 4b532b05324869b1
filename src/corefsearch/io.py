"""File I/O shared by every stage: streaming JSONL with line-numbered errors, atomic writes
of files and directories, and TREC run and qrels files."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from corefsearch.errors import InputError, MissingArtefactError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def open_text(path: Path) -> IO[str]:
    """Open a text file for reading, transparently un-gzipping ``*.gz``."""
    path = Path(path)
    if not path.exists():
        raise MissingArtefactError(f"{path}: no such file")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` for each non-blank line; bad JSON is ``FILE:LINE: why``."""
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{path}:{line_number}: invalid JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(record, dict):
                raise InputError(f"{path}:{line_number}: expected a JSON object, got {type(record).__name__}")
            yield line_number, record


def dump_json_line(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Write to a temporary file beside ``path`` and rename it over ``path`` on success only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
        # mkstemp makes owner-only files; give the result the permissions of a normal file.
        os.chmod(tmp_name, 0o666 & ~_umask())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


@contextlib.contextmanager
def atomic_directory(path: Path, overwrite: bool = False) -> Iterator[Path]:
    """Build a directory under a temporary name beside ``path``; rename it into place at the end.

    An interrupted build leaves only a hidden ``.NAME.*.partial`` folder, never a directory
    at ``path`` that looks complete.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise InputError(f"{path} already exists (use --overwrite to replace it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_jsonl(path: Path, records: Iterable[Any]) -> int:
    """Write records (dicts or objects with ``to_json``) atomically; return how many."""
    count = 0
    with atomic_file(path) as handle:
        for record in records:
            handle.write(dump_json_line(record.to_json() if hasattr(record, "to_json") else record))
            count += 1
    return count


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented JSON, atomically."""
    with atomic_file(path) as handle:
        json.dump(value, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


# --- TREC files -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRow:
    qid: str
    doc_id: str
    rank: int
    score: float
    tag: str


def write_run(path: Path, rows: Iterable[RunRow]) -> int:
    """Write a TREC run file ``qid Q0 doc_id rank score tag`` atomically."""
    count = 0
    with atomic_file(path) as handle:
        for row in rows:
            handle.write(f"{row.qid} Q0 {row.doc_id} {row.rank} {row.score:.6f} {row.tag}\n")
            count += 1
    return count


def _trec_lines(path: Path, layout: str) -> Iterator[tuple[int, list[str]]]:
    """``(line_number, columns)`` of a whitespace-separated TREC file with the given column layout."""
    expected = len(layout.split())
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != expected:
                raise InputError(f"{path}:{line_number}: expected {expected} columns '{layout}', found {len(parts)}")
            yield line_number, parts


def read_run(path: Path) -> dict[str, dict[str, float]]:
    """Read a TREC run into ``{qid: {doc_id: score}}`` (the shape ir-measures and pytrec_eval take)."""
    run: dict[str, dict[str, float]] = {}
    for line_number, (qid, _, doc_id, rank, score, _tag) in _trec_lines(path, "qid Q0 doc_id rank score tag"):
        try:
            int(rank)
            value = float(score)
        except ValueError:
            raise InputError(f"{path}:{line_number}: rank must be an integer and score a number") from None
        run.setdefault(qid, {})[doc_id] = value
    return run


def write_qrels(path: Path, qrels: Iterable[tuple[str, str, int]]) -> int:
    """Write TREC qrels ``qid 0 doc_id relevance`` atomically."""
    count = 0
    with atomic_file(path) as handle:
        for qid, doc_id, relevance in qrels:
            handle.write(f"{qid} 0 {doc_id} {relevance}\n")
            count += 1
    return count


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Read TREC qrels into ``{qid: {doc_id: relevance}}``; relevance −1 marks an unjudged pair."""
    qrels: dict[str, dict[str, int]] = {}
    for line_number, (qid, _, doc_id, relevance) in _trec_lines(path, "qid 0 doc_id relevance"):
        try:
            qrels.setdefault(qid, {})[doc_id] = int(relevance)
        except ValueError:
            raise InputError(f"{path}:{line_number}: relevance must be an integer, got {relevance!r}") from None
    return qrels
