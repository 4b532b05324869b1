"""``corefsearch detect``: the predicted mentions of every passage of a dataset, written beside its gold
mentions as ``DATASET/predicted_mentions.jsonl`` with the manifest ``predicted_mentions.json`` (the
detector, the passages' checksum, the counts), never into ``passages.jsonl``.

Passages are streamed in shards of ``shard_size``; each shard is detected in length-sorted batches and
written whole to the working folder ``DATASET/.predicted_mentions.work/`` (shard files and the record of
the run), so memory stays flat and an interrupted run resumes at its first unwritten shard when run again
with the same detector on the same passages. The shards are joined into the file at the end, in one
rename, and the working folder is removed.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

from corefsearch.base.artefacts import PREDICTED_MENTIONS, manifest_record, now, write_manifest
from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import CorefSearchError, InputError
from corefsearch.base.models import check_device, resolve_device
from corefsearch.base.onnx_backend import check_backend_device, resolve_backend
from corefsearch.base.progress import new_progress, progress_enabled
from corefsearch.base.schema import MENTION_TYPES, Passage, PredictedMention
from corefsearch.base.shipped import resolve_reference
from corefsearch.datasets.dataset import PREDICTED_MANIFEST_FILE, PREDICTED_MENTIONS_FILE, Dataset
from corefsearch.dense.chunks import scan_passages
from corefsearch.detect.detectors import check_detector, default_detector, detector_reference, load_detector
from corefsearch.io.write import atomic_file, dump_json_line, sha256_file

SHARD_SIZE = 4096
WORK_DIR = ".predicted_mentions.work"


@dataclass
class DetectSummary:
    out: Path
    passages: int
    mentions: dict[str, int]
    passages_without: int  # passages in which nothing was found
    seconds: float
    resumed_shards: int = 0

    @property
    def passages_per_second(self) -> float:
        return self.passages / self.seconds if self.seconds else 0.0


def mention_id(passage_id: str, start: int, end: int, kind: str) -> str:
    """A predicted mention's id: its passage, offsets and type (unique, stable across runs)."""
    return f"{passage_id}:{start}-{end}:{kind}"


def detect_passages(detector: Any, passages: list[Passage], batch_size: int) -> list[PredictedMention]:
    """The predicted mentions of ``passages``, in passage order."""
    found = detector.detect([p.text for p in passages], batch_size=batch_size)
    return [PredictedMention(mention_id(p.id, s, e, k), p.id, p.doc_id, s, e, k, float(score), p.text[s:e])
            for p, spans in zip(passages, found, strict=True) for s, e, k, score in spans]


def _shards(passages: Iterable[Passage], size: int) -> Iterator[list[Passage]]:
    iterator = iter(passages)
    while shard := list(islice(iterator, size)):
        yield shard


def _claim_work(work: Path, record: dict[str, Any], log: Any) -> int:
    """The number of shards a previous run of the same record left; the folder is started over otherwise."""
    path = work / "record.json"
    if work.is_dir():
        try:
            previous = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = None
        if previous == record:
            done = 0
            while (work / f"shard-{done:06d}.jsonl").is_file():
                done += 1
            if done:
                log(f"Resuming: {done:,} shard(s) of {record['shard_size']:,} passages were detected before.")
            return done
        shutil.rmtree(work)
    work.mkdir(parents=True)
    path.write_text(json.dumps(record), encoding="utf-8")
    return 0


class Detection(Protocol):
    """Where the detector runs when not in this process (``detect --ray``: ``corefsearch.distributed.detection.
    RayDetection``): :meth:`open` gives a detector whose ``detect`` answers as the local one does."""

    option: str  # the command-line option that chose it, named in errors

    def validate(self) -> None: ...

    def open(self, reference: str, device: str, backend: str,
             types: list[str] | None) -> contextlib.AbstractContextManager[Any]: ...


@contextlib.contextmanager
def _local(reference: str, device: str, backend: str, types: list[str] | None) -> Iterator[Any]:
    yield load_detector(reference, resolve_device(device) if reference != "heuristic" else "cpu", backend, types)


def detect_dataset(dataset_dir: Path, model: str | Path | None, *, batch_size: int = 64, device: str = "auto",
                   backend: str | None = None, types: list[str] | None = None, overwrite: bool = False,
                   shard_size: int = SHARD_SIZE, log: Any = None, detection: Detection | None = None) -> DetectSummary:
    """Detect the mentions of every passage of ``dataset_dir`` with ``model`` (``heuristic``, a detector
    folder or a shipped detector's name; None: the shipped detector, said through ``log``) and write them as the
    dataset's predicted mentions (see the module docstring). ``detection``:
    where the detector runs instead of here (e.g. on a Ray cluster), to the same mentions. ``backend`` None: torch,
    or onnx-int8 for a folder that ships only that export; the manifest records the one used."""
    log = log or (lambda message: None)
    # a shipped detector's name: its folder; none: the shipped detector for ``types``, when there is one
    model = resolve_reference(model) if model is not None else default_detector(types, log)
    check_detector(model, backend)
    check_device(device)
    backend = resolve_backend(model, backend, device)
    check_backend_device(backend, device)
    if detection is not None:
        detection.validate()
    at_least_one("--batch-size", batch_size)
    at_least_one("shard_size", shard_size)
    dataset = Dataset(dataset_dir)
    out = dataset.predicted_mentions_path
    # Without --overwrite: a broken pair (one file without the other, a changed file) is one line naming it and
    # the fix (--overwrite); a sound one is there already.
    if not overwrite and dataset.check_predicted() is not None:
        raise InputError(f"{out} already exists (the dataset holds predicted mentions); use --overwrite to detect "
                         "them again")
    if not dataset.passages_path.is_file():
        raise InputError(f"{dataset.passages_path}: no such file; rebuild the dataset")
    started = time.perf_counter()

    digest, total = scan_passages(dataset.passages_path)  # checksum and count in one pass, nothing parsed
    passages_sha = "sha256:" + digest
    if total == 0:
        raise InputError(f"{dataset.passages_path} holds no passages: nothing to detect mentions in")
    opened = (detection.open if detection is not None else _local)(str(model), device, backend, types)
    with opened as detector:
        reference = detector_reference(model)
        record = {"detector": reference, "types": list(detector.types), "passages_sha256": passages_sha,
                  "shard_size": shard_size}
        work = dataset.root / WORK_DIR
        done = _claim_work(work, record, log)
        passages = 0
        with new_progress() as progress:
            task = progress.add_task("Detecting mentions", total=total, visible=progress_enabled())
            for number, shard in enumerate(_shards(dataset.passages(), shard_size)):
                path = work / f"shard-{number:06d}.jsonl"
                if number >= done:
                    found = detect_passages(detector, shard, batch_size)
                    with atomic_file(path) as handle:
                        for mention in found:
                            handle.write(dump_json_line(mention.to_json()))
                progress.advance(task, len(shard))
                passages += len(shard)
        kinds = list(detector.types)
    counts = {kind: 0 for kind in MENTION_TYPES}
    without = 0
    # Join the shards (and count) into the one file, renamed into place at the end.
    with atomic_file(out) as handle:
        for number in range((passages + shard_size - 1) // shard_size):
            holding: set[str] = set()
            with (work / f"shard-{number:06d}.jsonl").open(encoding="utf-8") as shard_file:
                for line in shard_file:
                    handle.write(line)
                    record_line = json.loads(line)
                    counts[record_line["type"]] += 1
                    holding.add(record_line["passage_id"])
            shard_passages = min(shard_size, passages - number * shard_size)
            without += shard_passages - len(holding)
        # The old manifest goes before the new file takes its place: stopped in between, the dataset holds
        # the file without a manifest, which every reader names (never new mentions under an old record).
        dataset.predicted_manifest_path.unlink(missing_ok=True)
    seconds = time.perf_counter() - started
    write_manifest(dataset.predicted_manifest_path, manifest_record(PREDICTED_MENTIONS, {
        "detector": reference, "types": kinds, "backend": backend, "ray": detection is not None,
        "passages_sha256": passages_sha, "file_sha256": "sha256:" + sha256_file(out),
        "counts": {"passages": passages, "passages_without_mentions": without, **counts}}))
    shutil.rmtree(work, ignore_errors=True)
    return DetectSummary(out, passages, {k: v for k, v in counts.items() if k in kinds}, without, seconds, done)


# --- corefsearch add: the new passages of a dataset that holds predicted mentions ----------------------------


def dataset_detector(dataset: Dataset, device: str = "auto") -> tuple[Any, dict[str, Any]] | None:
    """The detector that wrote ``dataset``'s predicted mentions, loaded, with the manifest; None when the
    dataset holds none (neither file). Refused in one line (before any work) when one file is there without the
    other or the mentions file changed (:meth:`Dataset.check_predicted`), when the mentions no longer match the
    passages, or when the detector folder is gone or holds other weights than it had."""
    manifest = dataset.check_predicted()  # either file without the other, or changed: one line, and the fix
    if manifest is None:
        return None
    again = f"run `corefsearch detect {dataset.root} --model MODEL|heuristic --overwrite` first"
    if manifest.get("passages_sha256") != "sha256:" + sha256_file(dataset.passages_path):
        raise InputError(f"{dataset.root / PREDICTED_MANIFEST_FILE}: the predicted mentions were detected on other "
                         f"passages than the dataset holds now; {again}")
    recorded = manifest.get("detector") or {}
    reference = str(recorded.get("name", ""))
    try:
        check_detector(reference)
    except CorefSearchError as err:
        raise InputError(f"the detector of {dataset.root}'s predicted mentions cannot be loaded ({err}); "
                         f"{again}") from None
    if recorded.get("weights_sha256") and detector_reference(reference).get("weights_sha256") != \
            recorded["weights_sha256"]:
        raise InputError(f"{reference} holds other weights than the detector that found {dataset.root}'s predicted "
                         f"mentions; {again}")
    types = list(manifest.get("types") or MENTION_TYPES)
    detector = load_detector(reference, resolve_device(device) if reference != "heuristic" else "cpu", None, types)
    return detector, manifest


def append_predicted(detector: Any, manifest: dict[str, Any], old: Path, staged: Path, passages: Iterable[Passage],
                     batch_size: int = 64) -> int:
    """Write into the staged dataset folder ``staged`` the predicted mentions of the dataset folder ``old``
    followed by ``detector``'s mentions of the new ``passages`` (its ``passages.jsonl`` is the grown one),
    and the updated manifest; the number of new mentions."""
    counts = dict(manifest.get("counts") or {})
    added = 0
    out = staged / PREDICTED_MENTIONS_FILE
    shutil.copyfile(old / PREDICTED_MENTIONS_FILE, out)
    with out.open("a", encoding="utf-8") as handle:
        for shard in _shards(passages, SHARD_SIZE):
            found = detect_passages(detector, shard, batch_size)
            holding = {m.passage_id for m in found}
            counts["passages"] = int(counts.get("passages", 0)) + len(shard)
            counts["passages_without_mentions"] = int(counts.get("passages_without_mentions", 0)) + \
                len(shard) - len(holding)
            for mention in found:
                handle.write(dump_json_line(mention.to_json()))
                counts[mention.type] = int(counts.get(mention.type, 0)) + 1
                added += 1
    updated = {**manifest, "counts": counts, "passages_sha256": "sha256:" + sha256_file(staged / "passages.jsonl"),
               "file_sha256": "sha256:" + sha256_file(out), "updated": now()}
    write_manifest(staged / PREDICTED_MANIFEST_FILE, updated)
    return added
