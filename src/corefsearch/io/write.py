"""Atomic writes of files and directories (temp file + rename), JSON lines and checksums: an
interrupted command never leaves a half-written output that looks complete."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from corefsearch.base.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])

# The random part of the temporaries' names: tempfile.mkstemp's (atomic_file), _unused_name's
# (atomic_directory), from the same characters (the pattern clean_stale_temporaries knows, in
# corefsearch.io.outputs).
_TEMP_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789_"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask



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
    # The name is drawn before the folder is made, and the folder made inside the try: a Ctrl-C that
    # lands just as it is made still removes it (tempfile.mkdtemp names it only once it returns).
    tmp = _unused_name(path, "partial")
    ours = True
    try:
        try:
            tmp.mkdir(mode=0o700)
        except FileExistsError:
            ours = False  # another process took the name since it was drawn: not ours to remove
            raise
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
        if ours:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def _unused_name(path: Path, suffix: str) -> Path:
    """``.NAME.<8 random characters>.SUFFIX`` beside ``path``, where nothing is yet (the form
    :func:`corefsearch.io.outputs.clean_stale_temporaries` knows). ``secrets``: the seeded ``random``
    of a training run is neither drawn from nor the same in two processes."""
    while True:
        random_part = "".join(secrets.choice(_TEMP_ALPHABET) for _ in range(8))
        candidate = path.with_name(f".{path.name}.{random_part}.{suffix}")
        if not candidate.exists() and not candidate.is_symlink():
            return candidate


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


