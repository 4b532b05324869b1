"""The JSON files that corefsearch writes beside its artefacts: every kind of manifest (dataset,
Lucene and dense index, dense shard, run metadata, ONNX export, training record) with its one
writer (:func:`manifest_record` + :func:`write_manifest`) and its one reader (:func:`read_manifest`),
the versions they record, and model configurations. A damaged or foreign file is a one-line
:class:`~corefsearch.base.errors.InputError` naming the file and what to run, never a traceback.

Written by hand: ``json`` gives the parse error and ``dataclasses`` the fields; what is added
here is the message (file, line, remedy) and the refusal of keys a configuration does not know
(a typo, or a file written by a newer corefsearch, would otherwise be dropped or crash later).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, TypeVar

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.io.write import write_json

T = TypeVar("T")


def read_json_file(path: Path, remedy: str, what: str = "JSON file") -> Any:
    """The parsed JSON of ``path``; ``InputError("PATH:LINE: not valid JSON (why); REMEDY")`` when it
    is not JSON (or not UTF-8 text), ``MissingArtefactError`` when it is not there."""
    path = Path(path)
    if not path.exists():
        raise MissingArtefactError(f"{path}: no such file; {remedy}")
    if path.is_dir():
        raise InputError(f"{path}: a folder where a {what} is expected; {remedy}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not a {what} (byte {err.start} is not UTF-8); {remedy}") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what} ({err.strerror}); {remedy}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: not a valid {what} ({err.msg} at column {err.colno}); "
                         f"{remedy}") from None


def read_json_object(path: Path, remedy: str, what: str = "JSON file") -> dict[str, Any]:
    """Like :func:`read_json_file`, and the top level must be a JSON object."""
    record = read_json_file(path, remedy, what)
    if not isinstance(record, dict):
        raise InputError(f"{path}: not a {what} (a JSON {type(record).__name__} where an object is expected); "
                         f"{remedy}")
    return record


def _type_ok(value: Any, default: Any) -> bool:
    """Whether ``value`` has the JSON type of a field whose default is ``default``."""
    if default is None or value is None:
        return True  # optional fields (and a null kept for a field that has a value by default)
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if isinstance(default, str):
        return isinstance(value, str)
    return True


def config_from_json(cls: type[T], path: Path, remedy: str, what: str = "configuration") -> T:
    """The dataclass ``cls`` from the JSON object in ``path``.

    Unknown keys are refused (naming them), and so are values whose JSON type differs from the
    field's default (a string where a number goes); missing keys take the defaults. The
    dataclass's own ``validate()``, if it has one, is run and its message prefixed with the file.
    """
    record = read_json_object(path, remedy, f"corefsearch {what}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(record) - set(fields))
    if unknown:
        raise InputError(f"{path}: unknown key(s) {', '.join(unknown)} in the {what} (known: {', '.join(fields)}); "
                         f"was it written by a newer corefsearch, or edited? {remedy}")
    for name, value in record.items():
        field = fields[name]
        default = field.default if field.default is not dataclasses.MISSING else None
        if not _type_ok(value, default):
            raise InputError(f"{path}: {name} is {json.dumps(value)}, expected a {type(default).__name__}; {remedy}")
    try:
        config = cls(**record)
    except TypeError as err:
        raise InputError(f"{path}: not a {what} ({err}); {remedy}") from None
    validate = getattr(config, "validate", None)
    if validate is not None:
        try:
            validate()
        except InputError as err:
            raise InputError(f"{path}: {err}; {remedy}") from None
    return config


# --- manifests: one writer and one reader for every kind --------------------------------------------

def now() -> str:
    """The time an artefact is written, as its manifest records it (UTC, ISO 8601, seconds)."""
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def versions(*packages: str, python: bool = False) -> dict[str, str]:
    """``{"corefsearch": …, "python": …, package: version, …}`` of the installed distributions (read from
    their metadata: nothing is imported); a package that is not installed is left out. ``faiss`` is the
    installed FAISS distribution (faiss-cpu or faiss-gpu)."""
    import platform
    from importlib import metadata

    from corefsearch import __version__

    found = {"corefsearch": __version__}
    if python:
        found["python"] = platform.python_version()
    for package in packages:
        for distribution in (("faiss-cpu", "faiss-gpu", "faiss") if package == "faiss" else (package,)):
            try:
                found[package] = metadata.version(distribution)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


@dataclasses.dataclass(frozen=True)
class ManifestKind:
    """One kind of manifest: the ``kind`` it records, what messages call it, its format version (the
    layout of the artefact it describes: a reader refuses another)."""

    kind: str
    what: str
    format_version: int | None = None


# Every manifest corefsearch writes, by kind (the README's "File formats" describes each).
DATASET = ManifestKind("corefsearch-dataset", "dataset manifest", 1)
LUCENE_INDEX = ManifestKind("corefsearch-lucene-index", "Lucene index manifest", 2)
DENSE_INDEX = ManifestKind("corefsearch-dense-index", "dense index manifest", 1)
DENSE_SHARD = ManifestKind("corefsearch-dense-shard", "dense shard manifest", 1)
DENSE_PARTIAL = ManifestKind("corefsearch-dense-partial", "record of an interrupted dense encoding", 1)
RUN = ManifestKind("corefsearch-run", "run metadata")
ONNX_EXPORT = ManifestKind("corefsearch-onnx-export", "ONNX export record")
PREDICTED_MENTIONS = ManifestKind("corefsearch-predicted-mentions", "predicted mentions manifest", 1)
DETECTOR = ManifestKind("corefsearch-detector", "mention detector configuration", 1)


def training_kind(model: str) -> ManifestKind:
    """The record of a training run of ``model`` (retriever, reader, clusterer): ``training_args.json``."""
    return ManifestKind(f"corefsearch-{model}-training", f"{model} training record")


def manifest_record(kind: ManifestKind, fields: dict[str, Any], created: bool = True) -> dict[str, Any]:
    """A manifest: ``kind``, ``format_version`` (when the kind has one), ``corefsearch_version`` and
    ``created`` (unless ``created=False``: a record compared with another, as a resumable run's) first,
    then the kind's own ``fields`` in their order."""
    from corefsearch import __version__

    head: dict[str, Any] = {"kind": kind.kind}
    if kind.format_version is not None:
        head["format_version"] = kind.format_version
    head["corefsearch_version"] = __version__
    if created:
        head["created"] = now()
    return {**head, **fields}


def write_manifest(path: Path, record: dict[str, Any]) -> None:
    """Write a manifest (from :func:`manifest_record`, or one read and updated) atomically: indented
    JSON, UTF-8 as is, one final newline."""
    if not isinstance(record.get("kind"), str):
        raise ValueError("a manifest starts with its kind (build it with manifest_record)")
    write_json(Path(path), record)


def read_manifest(path: Path, kind: ManifestKind, remedy: str, missing: str | None = None) -> dict[str, Any]:
    """The manifest at ``path``, which must be one of ``kind``: missing (``missing``, else "no WHAT at
    PATH"), unreadable or of another kind is one line ending in ``remedy``."""
    path = Path(path)
    if not path.exists():
        raise MissingArtefactError(missing or f"no {kind.what} at {path.parent}; {remedy}")
    manifest = read_json_object(path, remedy, kind.what)
    if manifest.get("kind") != kind.kind:
        raise InputError(f"{path}: not a corefsearch {kind.what}; {remedy}")
    return manifest


def find_manifest(path: Path, kind: ManifestKind) -> dict[str, Any] | None:
    """The manifest at ``path`` when it is there, readable and of ``kind``; else ``None``: for a
    writer that then starts over (or refuses to replace what it does not recognise)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and record.get("kind") == kind.kind else None
