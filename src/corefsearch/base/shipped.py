"""The models that ship with corefsearch: the registry, read from the cards of the shipped folders.

Each shipped model is a folder ``corefsearch/shipped/NAME/`` (installed with the package; the environment
variable ``COREFSEARCH_SHIPPED_DIR`` names another folder of them): a model folder like any trained one, plus
its machine-readable card ``corefsearch_card.json`` (name, kind, description, mention type, format, the
recipe that retrains it, the training data and their checksums, dev and test scores, limits, base model,
date) and its human card ``README.md``. A card that is missing, not JSON, lacks a field, or names a kind
whose settings file (``corefsearch_KIND.json``) the folder lacks is one line naming the file.

Every model option takes a shipped model's name as well as a folder or a Hugging Face name
(:func:`resolve_reference`, called where a reference enters the library, so that what a run records is the
folder); a folder of that name in the working directory comes first. A command that needs a model and is
given none takes the shipped one of its kind (:func:`shipped_default`) and says which.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from corefsearch.base.artefacts import read_json_object
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.model_files import MODEL_KIND_FILES

CARD_FILE = "corefsearch_card.json"
SHIPPED_DIR_ENV = "COREFSEARCH_SHIPPED_DIR"
PACKAGE_SHIPPED_DIR = Path(__file__).resolve().parents[1] / "shipped"
KINDS = tuple(MODEL_KIND_FILES)  # detector, clusterer, retriever, reader, pair-scorer
CARD_MENTION_TYPES = ("event", "entity", "all")  # or null: the model is not about one type
# How a message names each kind of model.
KIND_NOUNS = {"retriever": "retriever", "reader": "reader", "clusterer": "mention encoder",
              "detector": "mention detector", "pair-scorer": "pair scorer"}
# Names that a model option already gives a meaning: never a shipped model's.
RESERVED_NAMES = ("default", "heuristic")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
CARD_FIELDS = ("name", "kind", "description", "mention_type", "format", "recipe", "data", "scores", "limits",
               "base_model", "created")
REMEDY = "restore the model folder (reinstall corefsearch) or remove it"

R = TypeVar("R", bound="str | Path | None")


@dataclass(frozen=True)
class ShippedModel:
    """A shipped model: its card's fields, its folder ``path`` and the bytes of its files."""

    name: str
    kind: str
    description: str
    mention_type: str | None
    format: str
    recipe: tuple[str, ...]
    data: tuple[dict[str, str], ...]
    scores: dict[str, dict[str, float]]
    limits: str
    base_model: str
    created: str
    path: Path
    size_bytes: int

    @property
    def card_path(self) -> Path:
        return self.path / CARD_FILE

    def covers(self, mention_type: str | None) -> bool:
        """Whether the model is meant for mentions of ``mention_type`` (None: any model of its kind)."""
        return mention_type is None or self.mention_type in (None, "all", mention_type)

    def to_json(self) -> dict[str, Any]:
        """The card's fields, the folder, the card's path and the size (what ``corefsearch models --json`` prints)."""
        record = asdict(self)
        record.update(recipe=list(self.recipe), data=[dict(d) for d in self.data], path=str(self.path),
                      card=str(self.card_path))
        return record


def shipped_dir() -> Path:
    """The folder of the shipped models: ``COREFSEARCH_SHIPPED_DIR`` when set, else the package's own."""
    value = os.environ.get(SHIPPED_DIR_ENV)
    if not value:
        return PACKAGE_SHIPPED_DIR
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise MissingArtefactError(f"{SHIPPED_DIR_ENV}={value}: no such folder of shipped models; unset it to use "
                                   "the models that ship with corefsearch")
    return folder


def _model_folders(root: Path) -> list[Path]:
    """The folders of ``root`` that hold a shipped model each (hidden ones and ``__pycache__`` left out)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def shipped_models() -> list[ShippedModel]:
    """Every shipped model, by name; a bad card is one line naming its file."""
    return [read_card(folder) for folder in _model_folders(shipped_dir())]


def shipped_names() -> list[str]:
    """The names of the shipped models (the folders holding a card), reading no card and raising nothing:
    what an error about an unknown model lists."""
    try:
        root = shipped_dir()
    except MissingArtefactError:
        return []
    return [folder.name for folder in _model_folders(root) if (folder / CARD_FILE).is_file()]


def shipped_hint() -> str:
    """`` (shipped models: a, b)`` for a message about a model reference, or nothing when none is shipped."""
    names = shipped_names()
    return f" (shipped models: {', '.join(names)})" if names else ""


def shipped_model(name: str) -> ShippedModel:
    """The shipped model ``name``."""
    folder = shipped_dir() / name
    if not NAME.fullmatch(name) or not folder.is_dir():
        raise MissingArtefactError(f"no shipped model {name!r}" + (shipped_hint() or " (none is shipped)"))
    return read_card(folder)


def resolve_reference(reference: R) -> R:
    """A shipped model's name as its folder (of the same type: ``str`` or ``Path``); anything else unchanged:
    a folder, a Hugging Face name, ``default``, ``heuristic``, None. A folder of that name in the working
    directory comes before the shipped model."""
    if reference is None:
        return reference
    text = str(reference)
    if not NAME.fullmatch(text) or text in RESERVED_NAMES or Path(text).exists():
        return reference
    folder = shipped_dir() / text
    if not folder.is_dir():
        return reference
    path = read_card(folder).path
    return cast(R, path if isinstance(reference, Path) else str(path))


def default_shipped(kind: str, mention_type: str | None = None) -> ShippedModel | None:
    """The shipped model of ``kind`` for mentions of ``mention_type`` (``event``, ``entity``, ``all``; None:
    any), or None: one made for that type first, then one for every type, each kind's first by name."""
    if kind not in KINDS:
        raise InputError(f"no kind of model {kind!r}: one of {', '.join(KINDS)}")
    found = [m for m in shipped_models() if m.kind == kind and m.covers(mention_type)]
    exact = [m for m in found if mention_type is not None and m.mention_type == mention_type]
    general = [m for m in found if m.mention_type in (None, "all")]
    return next(iter(exact + general + found), None)


def shipped_default(kind: str, mention_type: str | None = None,
                    log: Callable[[str], None] | None = None) -> str | None:
    """The folder of :func:`default_shipped`, said through ``log`` ("Using the shipped mention encoder NAME
    (FOLDER)"), or None when none is shipped."""
    model = default_shipped(kind, mention_type)
    if model is None:
        return None
    if log is not None:
        log(f"Using the shipped {KIND_NOUNS[kind]} {model.name} ({model.path})")
    return str(model.path)


# --- the card ------------------------------------------------------------------------------------------------


def read_card(folder: Path) -> ShippedModel:
    """The shipped model of ``folder`` from its card, checked: every field, the name (the folder's), the kind
    (and the settings file it names)."""
    path = folder / CARD_FILE
    record = read_json_object(path, f"every shipped model folder holds its card; {REMEDY}", "model card")

    def bad(why: str) -> InputError:
        return InputError(f"{path}: {why}; {REMEDY}")

    check_card_fields(record, folder.name, bad)
    name, kind = record["name"], record["kind"]
    recipe = [record["recipe"]] if isinstance(record["recipe"], str) else record["recipe"]
    data, scores = record["data"], record["scores"]
    settings = folder / MODEL_KIND_FILES[kind]
    if not settings.is_file():
        raise MissingArtefactError(f"{settings}: no such file, and {path} says the folder holds a {kind} (whose "
                                   f"settings are in that file); {REMEDY}")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return ShippedModel(name, kind, record["description"], record["mention_type"], record["format"], tuple(recipe),
                        tuple(dict(d) for d in data), scores, record["limits"], record["base_model"],
                        record["created"], folder.resolve(), size)


# Fields a card being written may leave out: the writer fills them in (corefsearch.export.ship).
FILLED_IN = ("kind", "mention_type", "format", "base_model", "created")


def check_card_fields(record: dict[str, Any], folder_name: str, bad: Callable[[str], Exception],
                      complete: bool = True) -> None:
    """The one check of a card's fields (for :func:`read_card`, and for a card about to be written, ``complete``
    False: the fields of :data:`FILLED_IN` and the data's sha256s may be left out); ``bad(why)`` makes the error."""
    missing = [name for name in CARD_FIELDS if name not in record and (complete or name not in FILLED_IN)]
    if missing:
        raise bad(f"the card lacks {', '.join(missing)}")
    for name in ("name", "kind", "description", "format", "limits", "base_model", "created"):
        if name in record and (not isinstance(record[name], str) or not record[name].strip()):
            raise bad(f"{name} must be a non-empty string, got {record[name]!r}")
    name = record["name"]
    if name != folder_name:
        raise bad(f"the card's name {name!r} is not its folder's ({folder_name!r})")
    if not NAME.fullmatch(name) or name in RESERVED_NAMES:
        raise bad(f"{name!r} cannot name a shipped model (letters, digits, '.', '_' and '-'; not "
                  f"{' or '.join(RESERVED_NAMES)})")
    if "kind" in record and record["kind"] not in KINDS:
        raise bad(f"kind must be one of {', '.join(KINDS)}, got {record['kind']!r}")
    if record.get("mention_type") not in (None, *CARD_MENTION_TYPES):
        raise bad(f"mention_type must be one of {', '.join(CARD_MENTION_TYPES)} or null, got "
                  f"{record['mention_type']!r}")
    if "created" in record:
        try:
            datetime.fromisoformat(record["created"])
        except ValueError:
            raise bad(f"created must be an ISO date (YYYY-MM-DD), got {record['created']!r}") from None
    recipe = [record["recipe"]] if isinstance(record["recipe"], str) else record["recipe"]
    if not isinstance(recipe, list) or not recipe or not all(isinstance(r, str) and r.strip() for r in recipe):
        raise bad("recipe must be a command line or a list of them")
    data = record["data"]
    if not isinstance(data, list) or not all(isinstance(d, dict) and isinstance(d.get("path"), str)
                                             and isinstance(d.get("sha256", "" if not complete else None), str)
                                             for d in data):
        raise bad('data must be a list of {"path": ..., "sha256": ...}'
                  + ("" if complete else " (a sha256 left out is computed from the file)"))
    scores = record["scores"]
    if not isinstance(scores, dict) or any(split not in scores for split in ("dev", "test")) or not all(
            isinstance(values, dict) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                             for v in values.values()) for values in scores.values()):
        raise bad('scores must be {"dev": {METRIC: NUMBER, ...}, "test": {...}}')

