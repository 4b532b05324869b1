"""Candidate mentions for the second round and the answer as a cluster: the mentions among which the
mention encoder picks, in each top passage, the one that corefers with the query (``--candidates``).

- ``detected`` (the default): a mention detector's mentions. The dataset's stored predicted mentions
  (``corefsearch detect``) when it has them and no other detector is asked for; else detected at query
  time in the top passages only (``--detector heuristic|DIR|NAME``; default: the shipped detector, else
  ``heuristic``), a few passages a query, kept once detected. What a user with plain documents has.
- ``gold``: the dataset's annotated mentions. An upper bound, not available on unannotated text: on a
  corpus annotated in part they also say which passages hold a mention at all (bench/RESULTS.md, "Second
  round and clusters"). Refused on a CoreSearch-format dataset, whose distractor passages carry no
  annotation by construction, so that gold candidates would mark which passages can be relevant.
- ``reader``: the reader's spans; no candidates here (``corefsearch.search.flow`` takes them from the
  reader).

Each source gives ``of(passage_ids)`` (``{passage id: [Candidate]}``, passages without one left out)
and ``query_record(query)`` (the query mention as the encoder reads it: its passage and its document's
head passages when the passage is in the dataset).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.models import resolve_device
from corefsearch.base.progress import track
from corefsearch.base.schema import Query
from corefsearch.base.shipped import shipped_default
from corefsearch.cluster.inputs import MentionRecord, dataset_mention_records
from corefsearch.cluster.predicted import detector_name
from corefsearch.datasets.dataset import Dataset
from corefsearch.datasets.passages import PassageFile
from corefsearch.detect.detectors import load_detector
from corefsearch.detect.run import mention_id

CANDIDATES = ("detected", "gold", "reader")  # --candidates (checked at the door: search.options)
DEFAULT_DETECTOR = "heuristic"
DETECT_CHUNK = 256  # passages detected at once at query time


@dataclass
class Candidate:
    record: MentionRecord
    type: str


def check_candidates(candidates: str) -> None:
    if candidates not in CANDIDATES:
        raise InputError(f"--candidates must be one of {', '.join(CANDIDATES)}, got {candidates!r}")


def check_gold_allowed(dataset_dir: Path) -> None:
    """Gold candidates on a CoreSearch-format dataset would tell relevant passages from distractors."""
    source = (Dataset(dataset_dir).manifest.get("options") or {}).get("source") or {}
    if source.get("format") == "coresearch":
        raise InputError(f"--candidates gold: {dataset_dir} is a CoreSearch-format dataset, whose distractor "
                         "passages carry no annotated mention by construction, so gold candidates would mark which "
                         "passages can be relevant; use --candidates detected (or reader)")


class PassageTexts:
    """A dataset's passages by id: the text, the document and the document's two head passages (what the
    mention encoder reads beside the sentence, as for the dataset's own mentions)."""

    def __init__(self, dataset_dir: Path) -> None:
        path = Path(dataset_dir) / "passages.jsonl"
        self.file = PassageFile(path, None, f"the dataset {dataset_dir}",
                                missing=f"{path}: no such file; the candidate mentions are read from the passages "
                                        "of the dataset the index was built from")

    def lookup(self, passage_id: str) -> tuple[str, str, str] | None:
        """``(doc id, text, context)``, or None for a passage the dataset does not hold."""
        try:
            doc_id, document = self.file.document(passage_id)
        except InputError:
            return None
        text = next(record["text"] for record in document if record["id"] == passage_id)
        return doc_id, text, " ".join(record["text"] for record in document[:2])

    def query_record(self, query: Query) -> MentionRecord:
        found = self.lookup(query.passage_id) if query.passage_id else None
        # An ad-hoc query's document is its context alone: that is its head, as a one-passage document's is.
        doc_id, context = (found[0], found[2]) if found is not None else ("", query.text)
        return MentionRecord(query.id, "", doc_id, None, query.passage_id, query.text[query.start:query.end],
                             query.start, query.end, query.text, context)

    def candidates(self, passage_id: str, spans: Sequence[tuple[int, int, str]]) -> list[Candidate]:
        found = self.lookup(passage_id)
        if found is None:
            return []
        doc_id, text, context = found
        return [Candidate(MentionRecord(mention_id(passage_id, start, end, kind), "", doc_id, None, passage_id,
                                        text[start:end], start, end, text, context), kind)
                for start, end, kind in spans]


class GoldCandidates:
    """The dataset's annotated mentions (an upper bound: see the module)."""

    name = "gold"

    def __init__(self, dataset_dir: Path) -> None:
        self.records = dataset_mention_records(Path(dataset_dir))
        # Each mention's type from clusters.jsonl (a cluster holds mentions of one type): no pass over the passages.
        types = {m: c.type for c in Dataset(Path(dataset_dir)).clusters() for m in c.mention_ids}
        self.by_passage: dict[str, list[Candidate]] = {}
        for record in self.records.values():
            self.by_passage.setdefault(record.passage_id, []).append(Candidate(record, types.get(record.mention_id,
                                                                                                   "")))
        self.texts = PassageTexts(dataset_dir)

    def of(self, passage_ids: Sequence[str]) -> dict[str, list[Candidate]]:
        return {pid: self.by_passage[pid] for pid in passage_ids if pid in self.by_passage}

    def query_record(self, query: Query) -> MentionRecord:
        return self.records.get(query.id) or self.texts.query_record(query)

    def warm(self) -> None:
        """Nothing to load: the mentions are read when the source opens."""

class StoredCandidates:
    """The dataset's predicted mentions (``corefsearch detect``), read once."""

    name = "detected"

    def __init__(self, dataset_dir: Path) -> None:
        dataset = Dataset(Path(dataset_dir))
        self.detector = detector_name(dataset.predicted_manifest())
        self.spans: dict[str, list[tuple[int, int, str]]] = {}
        for mention in dataset.predicted_mentions():
            self.spans.setdefault(mention.passage_id, []).append((mention.start, mention.end, mention.type))
        self.texts = PassageTexts(dataset_dir)
        self._made: dict[str, list[Candidate]] = {}

    def of(self, passage_ids: Sequence[str]) -> dict[str, list[Candidate]]:
        for pid in passage_ids:
            if pid not in self._made and pid in self.spans:
                self._made[pid] = self.texts.candidates(pid, self.spans[pid])
        return {pid: self._made[pid] for pid in passage_ids if self._made.get(pid)}

    def query_record(self, query: Query) -> MentionRecord:
        return self.texts.query_record(query)

    def warm(self) -> None:
        """Nothing to load: the mentions are read when the source opens."""

class DetectedCandidates:
    """A detector's mentions of the passages asked for, detected when first asked and kept."""

    name = "detected"

    def __init__(self, detector: Any, dataset_dir: Path, reference: str, batch_size: int = 16) -> None:
        self.detector = detector
        self.reference = reference
        self.texts = PassageTexts(dataset_dir)
        self.batch_size = batch_size
        self._made: dict[str, list[Candidate]] = {}

    def of(self, passage_ids: Sequence[str]) -> dict[str, list[Candidate]]:
        todo = [pid for pid in dict.fromkeys(passage_ids) if pid not in self._made]
        found = [(pid, self.texts.lookup(pid)) for pid in todo]
        known = [(pid, looked[1]) for pid, looked in found if looked is not None]
        for pid, looked in found:
            if looked is None:
                self._made[pid] = []
        chunks = range(0, len(known), DETECT_CHUNK)
        # A file's queries ask for many passages at once: detected in chunks under a progress bar.
        for start in track(chunks, "Detecting candidate mentions", total=len(chunks)) if len(known) > DETECT_CHUNK \
                else chunks:
            chunk = known[start:start + DETECT_CHUNK]
            spans = self.detector.detect([text for _, text in chunk], batch_size=self.batch_size)
            for (pid, _), found_spans in zip(chunk, spans, strict=True):
                self._made[pid] = self.texts.candidates(pid, [(s, e, k) for s, e, k, _ in found_spans])
        return {pid: self._made[pid] for pid in passage_ids if self._made.get(pid)}

    def query_record(self, query: Query) -> MentionRecord:
        return self.texts.query_record(query)

    def warm(self) -> None:
        """Load what the detector loads at its first passage (spaCy, the encoder's first pass) now."""
        self.detector.detect(["The fire spread overnight."], batch_size=1)


def open_candidates(candidates: str, dataset_dir: Path, detector: str | None = None, device: str = "cpu") -> Any:
    """The candidate source ``candidates`` (``detected`` or ``gold``, as ``SearchOptions.check`` resolved them) over
    the dataset ``dataset_dir``. For
    ``detected``: the dataset's stored predicted mentions when it has them and ``detector`` is None (refused in one
    line when only one of their two files is there, or the mentions file changed since detection), else the
    ``detector`` (default: the shipped detector, else ``heuristic``) run on the top passages when they are asked
    for."""
    dataset_dir = Path(dataset_dir)
    if candidates == "gold":
        check_gold_allowed(dataset_dir)
        return GoldCandidates(dataset_dir)
    if candidates != "detected":
        check_candidates(candidates)  # an unknown name, said as the door says it
        raise InputError("the reader's spans are no candidate source of the mention encoder")
    # Stored ones: both files there (one without the other, or changed: one line saying so, and the fix)
    if detector is None and Dataset(dataset_dir).has_predicted_files():
        return StoredCandidates(dataset_dir)
    # No detector asked for and none stored: the shipped detector when there is one (the answer records which)
    reference = detector or shipped_default("detector") or DEFAULT_DETECTOR
    return DetectedCandidates(load_detector(reference, device=resolve_device(device)), dataset_dir, str(reference))


def describe_candidates(source: Any) -> dict[str, Any]:
    """What a run's metadata and an answer record of the candidates."""
    if source.name == "gold":
        return {"candidates": "gold", "note": "the dataset's annotated mentions: an upper bound, not available on "
                                             "unannotated text"}
    stored = isinstance(source, StoredCandidates)
    return {"candidates": "detected", "detector": source.detector if stored else source.reference,
            "detected": "stored (corefsearch detect)" if stored else "at query time"}
