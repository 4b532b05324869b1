"""Reading every text and JSON file a user gives: UTF-8 checks, line-numbered JSONL and streamed JSON
arrays, so that a bad record is one line naming FILE:LINE."""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from corefsearch.base.errors import InputError, MissingArtefactError

IterableT = TypeVar("IterableT", bound=Iterable[Any])

# --- reading: every text and JSON file the user gives goes through these -----------------------

# Files often given by mistake where text is expected, by their first bytes: named in the error.
_MAGIC = ((b"\x1f\x8b", "gzip-compressed data (a gzipped file must be named *.gz)"), (b"PK\x03\x04", "a zip archive"),
          (b"\x89PNG", "a PNG image"), (b"%PDF", "a PDF document"), (b"\xff\xd8\xff", "a JPEG image"),
          (b"BZh", "bzip2-compressed data"), (b"\xfd7zXZ\x00", "xz-compressed data"),
          (b"\x28\xb5\x2f\xfd", "zstd-compressed data"), (b"\xff\xfe", "UTF-16 text (save it as UTF-8)"),
          (b"\xfe\xff", "UTF-16 text (save it as UTF-8)"), (b"SQLite format 3", "an SQLite database"))
# A NUL byte, or a byte that is not UTF-8 (decoded with "surrogateescape" to U+DC80..U+DCFF).
_UNREADABLE = re.compile("[\x00\udc80-\udcff]")
_UTF8_BOM = b"\xef\xbb\xbf"


def _kind_of(path: Path) -> str | None:
    """What a binary file is, from its first bytes (``None`` when unknown or for ``*.gz``)."""
    if path.suffix == ".gz":
        return None
    try:
        with path.open("rb") as handle:
            head = handle.read(16)
    except OSError:
        return None
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)


def check_file(path: Path) -> Path:
    """``path`` as a :class:`Path`, if it is a file: a missing one or a folder is a clear error."""
    path = Path(path)
    if not path.exists():
        raise MissingArtefactError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, expected a file")
    return path


def open_text(path: Path, errors: str = "strict") -> IO[str]:
    """Open a UTF-8 text file for reading, transparently un-gzipping ``*.gz``.

    A UTF-8 byte order mark (written by Windows tools) is skipped and any line ends (LF, CRLF,
    CR) read as ``"\\n"``. Readers go through :func:`text_lines`, which names ``FILE:LINE`` for
    bytes that are not text.
    """
    path = check_file(path)
    try:
        if path.suffix == ".gz":
            return gzip.open(path, "rt", encoding="utf-8-sig", errors=errors)
        return path.open(encoding="utf-8-sig", errors=errors)
    except OSError as err:
        raise InputError(f"{path}: cannot read it ({err.strerror or err})") from None


def _unreadable(path: Path, line_number: int, line: str, column: int) -> InputError:
    where = f"{path}:{line_number}"
    kind = _kind_of(path)
    if kind is not None:
        return InputError(f"{where}: not a text file: this is {kind}")
    if line[column] == "\x00":
        return InputError(f"{where}: binary data, not text (a NUL byte at column {column + 1})")
    byte = ord(line[column]) - 0xDC00
    return InputError(f"{where}: not UTF-8 text (byte 0x{byte:02x} at column {column + 1}); save the file as UTF-8")


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` of a UTF-8 text file (see :func:`open_text`).

    A line holding a NUL byte or bytes that are not UTF-8 is an :class:`InputError` naming
    ``FILE:LINE`` (and the kind of file, for a gzip, zip, image... given by mistake), as are a
    damaged ``*.gz`` and a file that cannot be read.
    """
    path = Path(path)
    line_number = 0
    # Undecodable bytes are kept (as lone surrogates) so that the error can name their line;
    # strict decoding would fail on a whole buffer, not a line.
    with open_text(path, errors="surrogateescape") as handle:
        try:
            for line_number, line in enumerate(handle, start=1):
                bad = _UNREADABLE.search(line)
                if bad is not None:
                    raise _unreadable(path, line_number, line, bad.start())
                yield line_number, line
        except gzip.BadGzipFile:
            raise InputError(f"{path}: not gzip data, although its name ends in .gz") from None
        except (EOFError, zlib.error) as err:
            raise InputError(f"{path}:{line_number + 1}: damaged or truncated gzip data ({err})") from None
        except OSError as err:
            raise InputError(f"{path}:{line_number + 1}: cannot read it ({err.strerror or err})") from None


class _NotJson(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number")


# Python's json accepts NaN and Infinity, which are not JSON (and no score or offset may be one).
_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` for each non-blank line; bad JSON is ``FILE:LINE: why``."""
    with closing_iterator(text_lines(path)) as lines:
        for line_number, line in lines:
            if line.strip():
                yield line_number, json_record(line, f"{path}:{line_number}")


@contextlib.contextmanager
def closing_iterator(items: IterableT) -> Iterator[IterableT]:
    """``items``, closed when the block ends (if it has ``close``: a generator, and with it the file
    it reads), also when an error or a Ctrl-C stops the loop over it.

    Left to the garbage collector, a suspended generator is closed in a finaliser, where Python
    drops any exception: a Ctrl-C landing there would be lost and the command would carry on.
    """
    try:
        yield items
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


def json_record(line: str, where: str) -> dict[str, Any]:
    """One JSON Lines record (an object; no NaN or Infinity); bad JSON is ``WHERE: why``."""
    try:
        record = _JSON.decode(line)
    except json.JSONDecodeError as err:
        raise InputError(f"{where}: invalid JSON ({err.msg} at column {err.colno})") from None
    except _NotJson as err:
        raise InputError(f"{where}: invalid JSON ({err})") from None
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object, got {json_type(record)}")
    return record


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages ("a list", not "list")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def open_json_bytes(path: Path) -> IO[bytes]:
    """Open a JSON file as bytes (ijson's fast C backend wants bytes), un-gzipping ``*.gz``."""
    path = check_file(path)
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    except OSError as err:
        raise InputError(f"{path}: cannot read it ({err.strerror or err})") from None


def _first_byte(path: Path, handle: IO[bytes]) -> bytes:
    """Skip a UTF-8 BOM and white space at the start of ``handle``; return (without consuming) the
    first byte of the JSON text, ``b""`` for an empty file."""
    peek = handle.peek  # type: ignore[attr-defined]  # BufferedReader and GzipFile both have it
    try:
        if peek(3)[:3] == _UTF8_BOM:
            handle.read(3)
        while (byte := peek(1)[:1]) in (b" ", b"\t", b"\r", b"\n"):
            handle.read(1)
    except gzip.BadGzipFile:
        raise InputError(f"{path}: not gzip data, although its name ends in .gz") from None
    except (EOFError, zlib.error) as err:
        raise InputError(f"{path}: damaged or truncated gzip data ({err})") from None
    return byte


def _json_error(path: Path, index: int, err: Exception) -> InputError:
    # ijson's messages span several lines (with a picture of the spot) and may be bytes.
    raw = err.args[0] if err.args else str(err)
    first = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)).strip().splitlines()
    why = first[0] if first else type(err).__name__
    if "UTF8" in why or "utf-8" in why.lower():
        # Name the line: the text reader finds the first undecodable byte.
        for _ in text_lines(path):
            pass
    kind = _kind_of(path)
    if kind is not None:
        return InputError(f"{path}: not a JSON file: this is {kind}")
    return InputError(f"{path}: invalid JSON after record {index} ({why})")


def read_json_array(path: Path, what: str = "records") -> Iterator[tuple[int, Any]]:
    """Stream ``(index, item)`` from a file holding one JSON list, never loading it whole.

    A file holding something else than a list (an object, nothing), a UTF-8 BOM (skipped),
    bytes that are not UTF-8 (``FILE:LINE``) and a damaged ``*.gz`` are handled here.
    """
    import ijson

    path = Path(path)
    with open_json_bytes(path) as handle:
        first = _first_byte(path, handle)
        if first == b"":
            raise InputError(f"{path}: empty file, expected a JSON list of {what}")
        if first == b"{":
            raise InputError(f"{path}: holds a JSON object, expected a JSON list of {what} ([{{...}}, ...])")
        items = ijson.items(handle, "item", use_float=True)
        index = 0
        while True:
            # Only parsing and decompression errors are translated; the caller's own errors pass.
            try:
                item = next(items)
            except StopIteration:
                if first != b"[":  # a lone number or string parses as a document without items
                    raise InputError(f"{path}: expected a JSON list of {what}") from None
                return
            except ijson.JSONError as err:
                raise _json_error(path, index, err) from None
            except gzip.BadGzipFile:
                raise InputError(f"{path}: not gzip data, although its name ends in .gz") from None
            except (EOFError, zlib.error) as err:
                raise InputError(f"{path}: damaged gzip file after record {index} ({err})") from None
            yield index, item
            index += 1


