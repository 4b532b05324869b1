"""File I/O shared by every stage: streaming JSONL with line-numbered errors, atomic writes
of files and directories, and TREC run and qrels files."""

from __future__ import annotations

import array
import contextlib
import functools
import gzip
import hashlib
import inspect
import json
import math
import os
import re
import secrets
import shutil
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from corefsearch.errors import InputError, MissingArtefactError

F = TypeVar("F", bound=Callable[..., Any])
IterableT = TypeVar("IterableT", bound=Iterable[Any])


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
    :func:`clean_stale_temporaries` knows). ``secrets``: the seeded ``random`` of a training run is
    neither drawn from nor the same in two processes."""
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


# --- TREC files -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRow:
    qid: str
    doc_id: str
    rank: int
    score: float
    tag: str


def trec_eval_scores(scores: Iterable[float]) -> list[float]:
    """The scores as trec_eval compares them: in a C ``float`` (``TEXT_RESULTS.sim`` in trec_eval's
    ``trec_format.h``, which pytrec_eval fills too), so scores equal in single precision tie.
    (``array('f')`` makes the same C conversion, nearest float, infinity beyond the range.)"""
    return array.array("f", scores).tolist()


def trec_eval_score(score: float) -> float:
    """One score as trec_eval compares it (see ``trec_eval_scores``)."""
    return trec_eval_scores((score,))[0]


def trec_eval_order(scores: Mapping[str, float]) -> list[str]:
    """Doc ids best first in trec_eval's order: score descending, ties by doc id descending.

    trec_eval ignores the rank column and sorts each query's results itself (``comp_sim_docno``
    in ``form_res_rels.c``: ``sim`` descending, then ``strcmp(docno2, docno1)``); Python's string
    order is strcmp's on UTF-8 bytes. pytrec_eval runs the same code.
    """
    as_read = dict(zip(scores, trec_eval_scores(scores.values()), strict=True))
    return sorted(as_read, key=lambda doc: (as_read[doc], doc), reverse=True)


# The score column of a run: 6 decimals. Written by hand below (not Python's float formatting)
# where a tied score is lowered by whole steps of the last decimal.
_SCORE_DECIMALS = 6


def _float_below(value: float) -> float:
    """The next C ``float`` below ``value`` (itself a C float)."""
    if value == math.inf:
        return float(struct.unpack("f", struct.pack("I", 0x7F7FFFFF))[0])  # the largest float
    if value == 0.0:
        return -float(struct.unpack("f", struct.pack("I", 1))[0])  # the smallest negative one
    bits = struct.unpack("I", struct.pack("f", value))[0]
    return float(struct.unpack("f", struct.pack("I", bits - 1 if value > 0 else bits + 1))[0])


def _decimal_text(steps: int) -> str:
    """``steps`` × 10⁻⁶ written with 6 decimals, exactly."""
    whole, part = divmod(abs(steps), 10**_SCORE_DECIMALS)
    return f"{'-' if steps < 0 else ''}{whole}.{part:0{_SCORE_DECIMALS}d}"


def _score_below(limit: float) -> str:
    """The largest 6-decimal score that trec_eval reads as less than ``limit`` (a C float)."""
    from fractions import Fraction

    # every decimal at or below the float under `limit` reads as at most that float ...
    steps = math.floor(Fraction(_float_below(limit)) * 10**_SCORE_DECIMALS)
    # ... and a few just above it may still read as less than `limit` (a float step spans
    # several decimal steps above 8): take the closest to the original score
    while trec_eval_score((steps + 1) / 10**_SCORE_DECIMALS) < limit:
        steps += 1
    return _decimal_text(steps)


def _query_lines(rows: list[RunRow]) -> Iterator[str]:
    """One query's run lines in trec_eval's order with ranks 1..n and no two scores that tie for trec_eval.

    Anserini does the same to its BM25 runs (``ScoreTiesAdjusterReranker``): ties are ordered,
    then each score that still equals the one above it (as trec_eval reads it) is lowered by
    the least step that separates them. Tools that break ties otherwise (ir-measures' RR@k sorts
    tied doc ids ascending) then see the same ranking as trec_eval, and trec_eval's ranking,
    hence every metric, is the one of the scores as given.
    """
    texts = [f"{row.score:.{_SCORE_DECIMALS}f}" for row in rows]
    as_read = trec_eval_scores(float(text) for text in texts)
    if len({row.doc_id for row in rows}) != len(rows):
        twice = next(row.doc_id for i, row in enumerate(rows) if any(r.doc_id == row.doc_id for r in rows[:i]))
        raise ValueError(f"query {rows[0].qid}: passage {twice} would be written twice (trec_eval refuses that)")
    # trec_eval_order of the scores as written
    order = sorted(range(len(rows)), key=lambda i: (as_read[i], rows[i].doc_id), reverse=True)
    above = math.inf  # the score above, as trec_eval reads it
    for rank, i in enumerate(order, start=1):
        row, text, value = rows[i], texts[i], as_read[i]
        if value >= above:
            text = _score_below(above)
            value = trec_eval_score(float(text))
        above = value
        yield f"{row.qid} Q0 {row.doc_id} {rank} {text} {row.tag}\n"


def write_run(path: Path, rows: Iterable[RunRow]) -> int:
    """Write a TREC run file ``qid Q0 doc_id rank score tag`` atomically; return the line count.

    Each query's rows must come together; they are written in trec_eval's order of their
    scores (``trec_eval_order`` of the 6-decimal scores) with ranks 1..n (the given ranks and
    order are not used), and scores that tie for trec_eval are separated by the least step
    (see ``_query_lines``), so every evaluation tool ranks the file as trec_eval does. A score
    that is not a finite number is an ``InputError`` (trec_eval refuses the file).
    """
    count = 0
    done: set[str] = set()
    with atomic_file(path) as handle:
        group: list[RunRow] = []

        def flush() -> None:
            nonlocal count
            if group:
                handle.writelines(_query_lines(group))
                count += len(group)
                done.add(group[0].qid)
                group.clear()

        for row in rows:
            if not math.isfinite(row.score):
                raise InputError(f"query {row.qid}: passage {row.doc_id} has the score {row.score}, which "
                                 "trec_eval refuses; the model that scored it is broken (retrain or reload it)")
            if group and row.qid != group[0].qid:
                flush()
            if row.qid in done:
                raise ValueError(f"query {row.qid}: its run rows must come together")
            group.append(row)
        flush()
    return count


def _trec_lines(path: Path, layout: str) -> Iterator[tuple[int, list[str]]]:
    """``(line_number, columns)`` of a whitespace-separated TREC file with the given column layout."""
    expected = len(layout.split())
    for line_number, line in text_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != expected:
            raise InputError(f"{path}:{line_number}: expected {expected} columns '{layout}', found {len(parts)}")
        yield line_number, parts


def read_run(path: Path) -> dict[str, dict[str, float]]:
    """Read a TREC run into ``{qid: {doc_id: score}}`` (the shape ir-measures and pytrec_eval take).

    Refused, as trec_eval refuses them: a score that is not a finite number and a passage listed
    twice for one query. A run without results is an error too (there is nothing to evaluate).
    """
    run: dict[str, dict[str, float]] = {}
    for line_number, (qid, _, doc_id, rank, score, _tag) in _trec_lines(path, "qid Q0 doc_id rank score tag"):
        try:
            int(rank)
            value = float(score)
        except ValueError:
            raise InputError(f"{path}:{line_number}: rank must be an integer and score a number") from None
        if not math.isfinite(value):
            raise InputError(f"{path}:{line_number}: score {score} is not a finite number")
        results = run.setdefault(qid, {})
        if doc_id in results:
            raise InputError(f"{path}:{line_number}: passage {doc_id} is listed twice for query {qid}")
        results[doc_id] = value
    if not run:
        raise InputError(f"{path}: holds no results (an empty run); write a run with `corefsearch search`")
    return run


def write_qrels(path: Path, qrels: Iterable[tuple[str, str, int]]) -> int:
    """Write TREC qrels ``qid 0 doc_id relevance`` atomically."""
    count = 0
    with atomic_file(path) as handle:
        for qid, doc_id, relevance in qrels:
            handle.write(f"{qid} 0 {doc_id} {relevance}\n")
            count += 1
    return count


_INTEGER = re.compile(r"[+-]?[0-9]+")


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Read TREC qrels into ``{qid: {doc_id: relevance}}``; relevance −1 marks an unjudged pair.

    Relevance is any integer, as for trec_eval (0 and below: not relevant; −1: unjudged for
    infAP); "1.5" or "yes" is refused, as is a pair judged twice with different values.
    """
    qrels: dict[str, dict[str, int]] = {}
    for line_number, (qid, _, doc_id, relevance) in _trec_lines(path, "qid 0 doc_id relevance"):
        if not _INTEGER.fullmatch(relevance):
            raise InputError(f"{path}:{line_number}: relevance must be an integer, got {relevance!r}")
        value = int(relevance)
        judged = qrels.setdefault(qid, {})
        if judged.get(doc_id, value) != value:
            raise InputError(f"{path}:{line_number}: passage {doc_id} of query {qid} is judged twice, "
                             f"{judged[doc_id]} and {value}")
        judged[doc_id] = value
    return qrels


# --- outputs: checked before the work, locked while written, leftovers of killed runs cleaned -----------

# The inputs of a command, by the option (or argument) that names them: ``{"--queries": path, ...}`` or
# ``[("--distractors", path), ...]``; ``None`` values (options not given) are skipped.
Inputs = Mapping[str, "Path | str | None"] | Iterable[tuple[str, "Path | str | None"]]

# The random part of the temporaries' names: tempfile.mkstemp's (atomic_file), _unused_name's
# (atomic_directory), from the same characters.
_TEMP_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789_"
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


def writes_outputs(outputs: Callable[[dict[str, Any]], Iterable[Output]]) -> Callable[[F], F]:
    """Decorate a library entry point that writes files or folders: before it runs, each output
    that ``outputs(arguments)`` names (``arguments``: the call's arguments by parameter name, defaults
    filled in) is checked (:func:`check_output_file` / :func:`check_output_dir`), then locked for the
    whole call (:func:`output_lock`), which also cleans up what a killed run left there."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            wanted = [o for o in outputs(dict(bound.arguments)) if o.path is not None and str(o.path) != ""]
            for output in wanted:
                check = check_output_dir if output.kind == "dir" else check_output_file
                check(Path(output.path), output.option, output.inputs)  # type: ignore[arg-type]
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
