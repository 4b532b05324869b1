"""``corefsearch export-onnx MODEL_DIR --ship OUT --card CARD.json``: the inference-only copy of a trained model
folder, the form in which corefsearch ships its models.

:func:`write_shipped` copies what inference reads and leaves out what it does not: the encoder's torch weights
(``model.safetensors``, ``pytorch_model.bin`` and their shards) and the fp32 ONNX file. Each encoder runs from
its int8 export (``onnx/model_qint8.onnx``, with ``onnx/export.json``; written first with the default fused
export when the trained folder has none or a stale one), so the copy loads with ``--backend onnx-int8``, the
default for such a folder (:func:`corefsearch.base.onnx_backend.inference_only`). A retriever's copy also records
the fingerprints of its torch weights (``fingerprints.json``), so that an index built with the trained folder is
searched with the copy as it is; a shared encoder's ``passage_encoder/`` copy is left out, as the retriever never
loads it.

The card (``CARD.json``: the fields :mod:`corefsearch.base.shipped` reads, checked as it checks them; its name is
``OUT``'s) is written to ``OUT/corefsearch_card.json`` with ``size`` (the bytes of every other file) and the kind,
mention type, format, base model and date filled in where it leaves them out; its facts (what the model is for,
the recipe, the data and their sha256, the dev and test scores, the limits) are appended to the model card
``README.md``. The copy is built in a temporary folder beside ``OUT`` and renamed into place when complete.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.base.artefacts import ONNX_EXPORT, find_manifest, now, read_json_object, write_manifest
from corefsearch.base.errors import CorefSearchError, InputError, MissingArtefactError
from corefsearch.base.head_weights import HEAD_PRECISIONS, load_head_state, save_head
from corefsearch.base.model_card import CARD_FILE, describe_base_model
from corefsearch.base.model_files import HEAD_FILES
from corefsearch.base.models import DEFAULT_MODEL, MODEL_KIND_FILES, check_model_folder, model_kind
from corefsearch.base.onnx_backend import (
    EXPORT_RECORD,
    ONNX_DIR,
    ONNX_MODEL,
    SHIPPED_BACKEND,
    TORCH_WEIGHTS,
    check_onnx_export,
    inference_only,
    onnx_file,
)
from corefsearch.base.shipped import CARD_FIELDS, check_card_fields
from corefsearch.base.shipped import CARD_FILE as SHIP_CARD
from corefsearch.dense.model import FINGERPRINTS_FILE, PASSAGE_ENCODER, QUERY_ENCODER, BiEncoder
from corefsearch.export.onnx import ExportOptions, ExportSummary, export_onnx
from corefsearch.io.write import atomic_directory, sha256_file, write_json
from corefsearch.training.run import TRAINING_ARGS_FILE

REQUIRED_KEYS = ("name", "description", "recipe", "data", "scores", "limits")  # the rest is filled in
SHIPPED_KINDS = ("retriever", "reader", "clusterer", "detector")  # the kinds with an ONNX export
SHIPPED_FORMAT = "onnx-int8"  # the card's "format" when it gives none
# Torch weights besides TORCH_WEIGHTS' names: sharded (model-00001-of-00002.safetensors) or pickled checkpoints.
WEIGHT_PATTERNS = ("model-*-of-*.safetensors", "pytorch_model-*-of-*.bin", "*.pt", "*.pth", "*.ckpt")


@dataclass
class ShipSummary:
    folder: Path
    files: dict[str, int]  # relative path -> bytes, of every file shipped
    size: int  # bytes of every file but the card itself (what the card records as "size")
    kind: str
    exported: ExportSummary | None  # the int8 export written into the trained folder first, if it had none
    seconds: float


def read_card(path: Path) -> dict[str, Any]:
    """A card file (``--card CARD.json``): a JSON object, checked by :func:`check_card` when it is written."""
    return read_json_object(Path(path), "give a JSON object with the keys " + ", ".join(REQUIRED_KEYS), "model card")


def check_card(card: Any, kind: str, name: str) -> None:
    """The card's keys and their types as the registry reads them (:func:`corefsearch.base.shipped.read_card`, the
    same check), for a folder named ``name`` holding a ``kind``; one line for the first that is wrong."""
    if not isinstance(card, dict):
        raise InputError(f"the card must be a JSON object, got a {type(card).__name__}")
    unknown = sorted(set(card) - set(CARD_FIELDS) - {"size"})
    if unknown:
        raise InputError(f"the card has unknown keys {', '.join(unknown)} (its keys: {', '.join(CARD_FIELDS)})")
    check_card_fields(card, name, lambda why: InputError(f"--card: {why}"), complete=False)
    if card.get("kind", kind) != kind:
        raise InputError(f"the card's kind is {card['kind']!r}, and the folder holds a {kind}")


def _portable_paths(value: Any) -> Any:
    """``value`` (a training record) with each absolute path made relative to the working directory (the
    repository root when a shipped model is written), or cut to its last part when it lies outside: a shipped
    folder names no folder of the machine it was trained on."""
    if isinstance(value, dict):
        return {key: _portable_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_portable_paths(item) for item in value]
    if isinstance(value, str) and value.startswith("/"):
        path, here = Path(value), Path.cwd()
        return str(path.relative_to(here)) if path.is_relative_to(here) else path.name
    return value


def _completed_card(card: dict[str, Any], kind: str, trained: Path) -> dict[str, Any]:
    """The card with ``kind``, ``mention_type`` (a detector's: its types), ``base_model``, ``format`` and
    ``created`` (today) filled in where absent, and each data file's sha256 computed where it is left out (the file
    must then be there)."""
    config = read_json_object(trained / MODEL_KIND_FILES[kind], "train the model again", f"{kind} configuration")
    base = config.get("base_model")
    base = None if base in (None, "", "default", DEFAULT_MODEL) else str(base)
    data = []
    for entry in card["data"]:
        digest = entry.get("sha256")
        if digest is None:
            path = Path(entry["path"]).expanduser()
            if not path.is_file():
                raise InputError(f"the card's data file {entry['path']} has no sha256 and is not here to compute it")
            digest = "sha256:" + sha256_file(path)
        data.append({**entry, "sha256": digest})
    types = config.get("types") if kind == "detector" else None
    mention_type = None if not types else types[0] if len(types) == 1 else "all"
    filled = dict(kind=kind, mention_type=mention_type, format=SHIPPED_FORMAT,
                  base_model=describe_base_model(base).name, created=now()[:10])
    return {key: card.get(key, filled.get(key)) for key in CARD_FIELDS} | {"data": data}


def _encoder_folders(trained: Path, kind: str) -> list[Path]:
    """The folders whose encoder the model loads (a retriever's query and, unless shared, passage encoder)."""
    if kind != "retriever":
        return [trained]
    config = read_json_object(trained / MODEL_KIND_FILES[kind], "train the model again", "retriever configuration")
    return [trained / QUERY_ENCODER] + ([] if config.get("shared_encoder") else [trained / PASSAGE_ENCODER])


def _has_int8_export(folders: list[Path]) -> bool:
    """Whether every encoder folder holds an int8 export of the weights it holds now."""
    try:
        for folder in folders:
            check_onnx_export(folder, SHIPPED_BACKEND)
    except CorefSearchError:
        return False
    return True


def _skipped(relative: Path, shared_retriever: bool) -> bool:
    """Whether a file of the trained folder stays out of the copy: torch weights, the fp32 export, hidden and
    temporary files, an old card, and a shared retriever's unused passage encoder."""
    name = relative.name
    if any(part.startswith(".") for part in relative.parts) or name.endswith((".tmp", ".partial")):
        return True
    if name in TORCH_WEIGHTS or any(relative.match(pattern) for pattern in WEIGHT_PATTERNS):
        return True
    if relative.parent.name == ONNX_DIR and name == ONNX_MODEL:
        return True
    return relative == Path(SHIP_CARD) or (shared_retriever and relative.parts[0] == PASSAGE_ENCODER)


def _shipped_files(trained: Path, kind: str) -> Iterator[Path]:
    shared = kind == "retriever" and len(_encoder_folders(trained, kind)) == 1
    for path in sorted(trained.rglob("*")):
        relative = path.relative_to(trained)
        if path.is_file() and not _skipped(relative, shared):
            yield relative


def _record_int8_checksum(folder: Path) -> None:
    """Add the int8 file's sha256 to the copy's ``onnx/export.json`` where an older export recorded none (the
    file was checked against the weights it was exported from just before it was copied)."""
    path = folder / ONNX_DIR / EXPORT_RECORD
    record = find_manifest(path, ONNX_EXPORT)
    int8 = onnx_file(folder, SHIPPED_BACKEND)
    if record is not None and "sha256" not in record["files"].get(int8.name, {}):
        record["files"][int8.name]["sha256"] = "sha256:" + sha256_file(int8)
        write_manifest(path, record)


def card_section(card: dict[str, Any], size: int) -> str:
    """The card's facts as the Markdown section appended to the model card."""
    lines = ["", "## Shipped model", "",
             f"This folder is **{card['name']}**, shipped for inference only: the int8 ONNX export of its encoder "
             f"(`{ONNX_DIR}/model_qint8.onnx`) and no torch weights. corefsearch runs it with `--backend "
             f"{SHIPPED_BACKEND}` (the default for this folder; `--backend torch` is refused); to train it further, "
             "train from its base model with the recipe below.", "",
             f"- What for: {card['description']}", f"- Kind: {card['kind']}"]
    if card.get("mention_type"):
        lines.append(f"- Mention type: {card['mention_type']}")
    lines += [f"- Base model: {card['base_model']}", f"- Size: {size / 1e6:.1f} MB", f"- Created: {card['created']}",
              "", "### Recipe", ""]
    recipe = card["recipe"]
    lines += ["```bash", *([recipe.rstrip()] if isinstance(recipe, str) else [step.rstrip() for step in recipe]), "```"]
    lines += ["", "### Data", "", "| File | sha256 |", "|---|---|"]
    lines += [f"| `{entry['path']}` | `{entry['sha256']}` |" for entry in card["data"]]
    scores = card["scores"]
    metrics = list(dict.fromkeys([*scores.get("dev", {}), *scores.get("test", {})]))
    lines += ["", "### Scores", ""]
    if metrics:
        lines += ["| Metric | dev | test |", "|---|---|---|"]
        lines += [f"| {metric} | {_score(scores.get('dev', {}).get(metric))} | "
                  f"{_score(scores.get('test', {}).get(metric))} |" for metric in metrics]
    else:
        lines.append("None recorded.")
    lines += ["", "### Limits", "", card["limits"]]
    return "\n".join(lines) + "\n"


def _score(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def write_shipped(trained_folder: Path | str, out_folder: Path | str, card: dict[str, Any], overwrite: bool = False,
                  options: ExportOptions | None = None, log: Callable[[str], None] | None = None,
                  head_precision: str = "int8") -> ShipSummary:
    """Write the inference-only copy of ``trained_folder`` to ``out_folder`` (see the module doc) with ``card``;
    ``options``: the export run first when the trained folder has no current int8 one (default: fused, int8);
    ``head_precision``: how the head's large weight matrices are stored (``int8`` rows, or ``fp32`` as trained;
    :mod:`corefsearch.base.head_weights`). Refuses to write into its input, over an existing ``out_folder``
    without ``overwrite``, and a card, a folder or options that cannot make one, before any work."""
    started = time.perf_counter()
    say = log or (lambda _: None)
    check_model_folder(trained_folder, "MODEL_DIR")
    trained, out = Path(trained_folder).expanduser(), Path(out_folder).expanduser()
    if not trained.is_dir():
        raise MissingArtefactError(f"MODEL_DIR {trained_folder}: no such model folder")
    kind = model_kind(trained)
    if kind not in SHIPPED_KINDS:
        what = f"a {kind} folder" if kind else "not a corefsearch model folder"
        raise InputError(f"{trained}: {what}; only a {', '.join(SHIPPED_KINDS)} folder has an int8 export to ship")
    if inference_only(trained):
        raise InputError(f"{trained} ships only its int8 ONNX export already: copy it as it is")
    source, target = trained.resolve(), out.resolve()
    if target == source or source in target.parents or target in source.parents:
        raise InputError(f"--ship {out} would overwrite its input {trained}: give a folder outside it")
    if out.exists() and not overwrite:
        raise InputError(f"{out} already exists (use --overwrite to replace it)")
    options = options or ExportOptions()
    if head_precision not in HEAD_PRECISIONS:
        raise InputError(f"--head-precision {head_precision}: give one of {', '.join(HEAD_PRECISIONS)}")
    if not options.quantize:
        raise InputError("a shipped folder runs the int8 export: leave out --no-quantize")
    check_card(card, kind, out.name)
    card = _completed_card(card, kind, trained)

    exported = None
    if not _has_int8_export(_encoder_folders(trained, kind)):
        say(f"{trained} has no current int8 export: exporting it first ...")
        exported = export_onnx(trained, quantize=True, log=log, quantize_ops=options.quantize_ops, fuse=options.fuse)
    fingerprints = BiEncoder.load(str(trained), "cpu").fingerprints() if kind == "retriever" else None

    say(f"Writing the inference-only copy of {trained} to {out} ...")
    with atomic_directory(out, overwrite=overwrite) as tmp:
        for relative in _shipped_files(trained, kind):
            (tmp / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(trained / relative, tmp / relative)
        if fingerprints is not None:
            write_json(tmp / FINGERPRINTS_FILE, fingerprints)
        head = tmp / HEAD_FILES[kind] if kind in HEAD_FILES else None
        if head is not None and head.is_file() and head_precision != "fp32":
            save_head(load_head_state(trained / HEAD_FILES[kind]), head, head_precision)
        record = tmp / TRAINING_ARGS_FILE
        if record.is_file():
            write_json(record, _portable_paths(read_json_object(record, "train the model again", "training record")))
        for folder in _encoder_folders(tmp, kind):
            _record_int8_checksum(folder)
            check_onnx_export(folder, SHIPPED_BACKEND)  # complete, and the file export.json records
        if not inference_only(tmp):
            raise InputError(f"the copy of {trained} still holds torch weights; nothing was written")
        readme = tmp / CARD_FILE
        previous = readme.read_text(encoding="utf-8") if readme.is_file() else f"# {card['name']}\n"
        section = card_section(card, sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()))
        readme.write_text(previous.rstrip("\n") + "\n" + section, encoding="utf-8")
        files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        size = sum(files.values())
        write_json(tmp / SHIP_CARD, {**card, "size": size})
        files[SHIP_CARD] = (tmp / SHIP_CARD).stat().st_size
    return ShipSummary(out, files, size, kind, exported, time.perf_counter() - started)
