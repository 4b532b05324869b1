"""Output guards: an output is checked before the work (not one of its inputs, parent exists), locked
while written, and the leftovers of killed runs are cleaned."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from corefsearch.base.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])

# --- outputs: checked before the work, locked while written, leftovers of killed runs cleaned -----------

# The inputs of a command, by the option (or argument) that names them: ``{"--queries": path, ...}`` or
# ``[("--distractors", path), ...]``; ``None`` values (options not given) are skipped.
Inputs = Mapping[str, "Path | str | None"] | Iterable[tuple[str, "Path | str | None"]]

# The random part of the temporaries' names: tempfile.mkstemp's (atomic_file), _unused_name's
# (atomic_directory), both drawn from corefsearch.io.write's _TEMP_ALPHABET.
_TEMP_PART = r"[a-z0-9_]{8}"


def _input_pairs(inputs: Inputs | None) -> list[tuple[str, Path]]:
    if inputs is None:
        return []
    pairs = inputs.items() if isinstance(inputs, Mapping) else inputs
    return [(label, Path(value)) for label, value in pairs if value is not None and str(value) != ""]


def _resolved(path: Path) -> Path:
    return Path(os.path.abspath(Path(path).expanduser())).resolve()


def check_no_overlap(path: Path, option: str, inputs: Inputs | None) -> None:
    """Refuse an output that is, contains or lies inside one of the inputs (symlinks and relative
    paths resolved): writing it would replace or delete what the command reads."""
    out = _resolved(path)
    for label, value in _input_pairs(inputs):
        source = _resolved(value)
        if out == source:
            how = "is"
        elif source.is_relative_to(out):
            how = "contains"
        elif out.is_relative_to(source):
            how = "lies inside"
        else:
            continue
        raise InputError(f"{option} {path} {how} the input {label} {value}: writing it would overwrite or delete "
                         f"that input; choose another {option}")


def _check_parent(path: Path, option: str) -> None:
    """The folder ``path`` goes in exists and is writable, or can be created."""
    parent = _resolved(path).parent
    ancestor = parent
    while not ancestor.exists():
        if ancestor.is_symlink():  # a dangling link
            raise InputError(f"{option} {path}: {ancestor} is a broken symbolic link")
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{option} {path}: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        what = "write in" if ancestor == parent else f"create {parent} in"
        raise InputError(f"{option} {path}: cannot {what} {ancestor} (permission denied)")


def check_output_file(path: Path, option: str = "--out", inputs: Inputs | None = None) -> None:
    """Before any work: ``path`` can be written as a file (not a folder, not under a file, in a
    writable folder) and is none of the ``inputs``."""
    path = Path(path)
    check_no_overlap(path, option, inputs)
    if path.is_dir():
        raise InputError(f"{option} {path} is a folder; give the path of a file to write")
    _check_parent(path, option)  # a file is replaced by a rename: its folder's permissions are what count


def check_output_dir(path: Path, option: str = "--out", inputs: Inputs | None = None) -> None:
    """Before any work: ``path`` can be written as a folder (not a file, not under a file, in a
    writable folder) and neither holds nor lies in any of the ``inputs``."""
    path = Path(path)
    check_no_overlap(path, option, inputs)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path} is a file; give the path of a folder to write")
    _check_parent(path, option)


def lock_path_for(path: Path) -> Path:
    """The lock file of an output: ``.NAME.lock`` beside it (outside it, so that the rename of a
    finished folder into place is not hindered)."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def output_lock(path: Path, option: str = "--out") -> Iterator[None]:
    """Hold an exclusive lock on the output ``path`` (file or folder) while it is written; a second
    corefsearch process writing the same output fails at once with one line.

    The lock is ``filelock``'s (``flock`` on POSIX). Its file is removed while still held, before the
    release: filelock notices a lock file unlinked under it and does not count that as holding the
    lock, so nothing is left beside the output. Under the lock, the leftovers of a killed run into
    the same output are cleaned up (:func:`clean_stale_temporaries`).
    """
    from filelock import FileLock, Timeout

    path = Path(path)
    lock_file = lock_path_for(path)
    lock = FileLock(str(lock_file))
    created: list[Path] = []  # folders made for the lock file, removed again when the run left them empty
    for attempt in range(3):
        created, folder = [], lock_file.parent
        while not folder.exists():
            created.append(folder)
            folder = folder.parent
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(blocking=False)
            break
        except Timeout:
            raise InputError(f"{path} is being written by another corefsearch process; wait for it or choose "
                             f"another {option}") from None
        except FileNotFoundError:  # another run removed the empty folder just now
            if attempt == 2:
                raise
    try:
        clean_stale_temporaries(path)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock_file)
        lock.release()
        for folder in created:  # deepest first; a folder the run wrote into is not empty
            with contextlib.suppress(OSError):
                folder.rmdir()


@contextlib.contextmanager
def output_locks(paths: Iterable[tuple[Path | None, str]]) -> Iterator[None]:
    """:func:`output_lock` on several outputs ``(path, option)`` (``None`` paths skipped)."""
    with contextlib.ExitStack() as stack:
        seen: set[Path] = set()
        for path, option in paths:
            if path is None or _resolved(Path(path)) in seen:
                continue
            seen.add(_resolved(Path(path)))
            stack.enter_context(output_lock(Path(path), option))
        yield


def clean_stale_temporaries(path: Path) -> list[Path]:
    """Remove what a killed :func:`atomic_file` / :func:`atomic_directory` into ``path`` left beside
    it (``.NAME.<random>.tmp``, ``.NAME.<random>.partial``); a ``.NAME.old`` is put back as ``NAME``
    when a kill between the two renames left no ``NAME``, else removed. Call only while holding
    :func:`output_lock` on ``path``: a live writer's temporaries look the same. Returns what was removed."""
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        return []
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.{_TEMP_PART}\.(tmp|partial)$")
    removed = [entry for entry in folder.iterdir() if pattern.match(entry.name)]
    old = folder / f".{path.name}.old"
    if old.exists() or old.is_symlink():
        if not path.exists() and not path.is_symlink():
            os.replace(old, path)  # the previous complete output: restore it rather than lose it
        else:
            removed.append(old)
    for entry in removed:
        _remove(entry)
    return removed


def clean_temporaries_in(folder: Path) -> list[Path]:
    """Remove every :func:`atomic_file` temporary (``.NAME.<random>.tmp``) directly in ``folder``, a
    working folder that only the lock holder writes (a training run's, a dense encoding's chunks)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    pattern = re.compile(rf"^\..+\.{_TEMP_PART}\.tmp$")
    removed = [entry for entry in folder.iterdir() if pattern.match(entry.name) and not entry.is_dir()]
    for entry in removed:
        _remove(entry)
    return removed


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()


@dataclass(frozen=True)
class Output:
    """One output of a library entry point, for :func:`writes_outputs`: its path (``None``: not
    written this time), the option that names it, whether it is a ``file`` or a ``dir``, and the
    inputs it must not overlap."""

    path: Path | str | None
    option: str = "--out"
    kind: str = "file"
    inputs: Inputs | None = None


def writes_outputs(outputs: Callable[[dict[str, Any]], Iterable[Output]],
                   check: Callable[[dict[str, Any]], None] | None = None) -> Callable[[F], F]:
    """Decorate a library entry point that writes files or folders: before it runs, its arguments are
    checked by ``check(arguments)`` when given (``arguments``: the call's arguments by parameter name,
    defaults filled in; the one place an entry point's options are validated, before any output is
    touched), then each output that ``outputs(arguments)`` names is checked (:func:`check_output_file` /
    :func:`check_output_dir`), then locked for the whole call (:func:`output_lock`), which also cleans
    up what a killed run left there."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if check is not None:
                check(dict(bound.arguments))
            wanted = [o for o in outputs(dict(bound.arguments)) if o.path is not None and str(o.path) != ""]
            for output in wanted:
                check_output = check_output_dir if output.kind == "dir" else check_output_file
                check_output(Path(output.path), output.option, output.inputs)  # type: ignore[arg-type]
            with output_locks((Path(o.path), o.option) for o in wanted):  # type: ignore[arg-type]
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def looks_like_path(value: str | Path | None) -> bool:
    """Whether a model reference is meant as a folder rather than a Hugging Face name: it exists,
    holds a path separator, or starts with ``.`` or ``~``."""
    if value is None or str(value) in ("", "default"):
        return False
    text = str(value)
    return (isinstance(value, Path) or os.sep in text or (os.altsep is not None and os.altsep in text)
            or text.startswith((".", "~")) or Path(text).exists())


def model_input(value: str | Path | None) -> Path | None:
    """A model reference as an input path for :func:`check_no_overlap` (``None`` for a hub name)."""
    return Path(str(value)).expanduser() if looks_like_path(value) else None
