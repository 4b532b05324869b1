"""The predicted mentions to cluster (``corefsearch cluster --mentions predicted``): the mentions a
detector found (``corefsearch detect``, ``DATASET/predicted_mentions.jsonl``) in the passages of a split.

A passage belongs to ``--split S`` when it records that split (``passage.split``: ECB+ and other
datasets whose documents come with a split). ``--split all`` takes every passage: the one choice, and
the default, for a dataset whose passages record no split (a dataset of plain documents, or one split
by clusters, whose documents hold mentions of several splits); elsewhere the default is ``test``. The
mentions come as the gold ones do (:class:`~corefsearch.cluster.mentions.SplitMentions`), so every
method and scope clusters them unchanged; :func:`predicted_records` gives the mention encoder's inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.schema import SPLITS, PredictedMention
from corefsearch.cluster.inputs import MentionRecord, _keep_head, passage_position
from corefsearch.cluster.mentions import ClusterMention, SplitMentions
from corefsearch.datasets.dataset import Dataset

MENTION_KINDS = ("gold", "predicted")
ALL_PASSAGES = "all"  # --split all: every passage (with --mentions predicted only)


def detector_name(manifest: Mapping[str, Any]) -> str | None:
    """The detector's name a predicted-mentions manifest records (``{"detector": {"name": ...}}``), if any."""
    detector = manifest.get("detector")
    name = detector.get("name") if isinstance(detector, Mapping) else detector
    return str(name) if isinstance(name, (str, int)) and str(name) else None


def _redetect(dataset: Dataset) -> str:
    return f"run `corefsearch detect {dataset.root} --model MODEL|heuristic` again"


def read_predicted_mentions(dataset_dir: Path, split: str | None = None) -> SplitMentions:
    """The predicted mentions of the passages of ``split`` (``all``: every passage; ``None``: ``all`` when no
    passage records a split, else ``test``), sorted by id, with their passages' texts, the detector's name and
    the split (:class:`SplitMentions`). Each mention is checked against its passage (same document, offsets
    inside the text, the same text): a mismatch means the passages changed since detection, a one-line error
    that says to detect again."""
    if split is not None and split not in (*SPLITS, ALL_PASSAGES):
        raise InputError(f"--split must be one of {', '.join((*SPLITS, ALL_PASSAGES))}, got {split!r}")
    dataset = Dataset(dataset_dir)
    # one line when the dataset has none, or one of the two files without the other, or a changed one
    detector = detector_name(dataset.predicted_manifest())
    path = dataset.predicted_mentions_path
    by_passage: dict[str, list[PredictedMention]] = {}
    seen: set[str] = set()
    for mention in dataset.predicted_mentions():
        if mention.mention_id in seen:
            raise InputError(f"{path}: predicted mention {mention.mention_id} occurs twice; {_redetect(dataset)}")
        seen.add(mention.mention_id)
        by_passage.setdefault(mention.passage_id, []).append(mention)
    if not dataset.passages_path.is_file():
        raise MissingArtefactError(f"{dataset.passages_path}: no such file; rebuild the dataset with "
                                   f"`corefsearch build-dataset ... --out {dataset.root} --overwrite`")
    passage_splits: set[str | None] = set()
    held: list[tuple[str | None, str, str | None, list[PredictedMention]]] = []  # (split, text, topic, mentions)
    for passage in dataset.passages():
        passage_splits.add(passage.split)
        mentions = by_passage.pop(passage.id, None)
        if mentions is None:
            continue
        for mention in mentions:
            _check(mention, passage.doc_id, passage.text, path, dataset)
        held.append((passage.split, passage.text, passage.topic, mentions))
    if by_passage:
        passage_id, mentions = next(iter(by_passage.items()))
        raise InputError(f"{path}: predicted mention {mentions[0].mention_id} lies in passage {passage_id}, which "
                         f"{dataset.passages_path} does not hold; {_redetect(dataset)}")
    if split is None:
        split = ALL_PASSAGES if passage_splits <= {None} else "test"
    found = SplitMentions(kind="predicted", detector=detector, split=split)
    elsewhere: set[str | None] = set()  # the splits of passages with predicted mentions left out
    for passage_split, text, topic, mentions in held:
        if split != ALL_PASSAGES and passage_split != split:
            elsewhere.add(passage_split)
            continue
        found.passage_texts[mentions[0].passage_id] = text
        found.mentions.extend(ClusterMention(m.mention_id, m.doc_id, m.passage_id, m.start, m.end, m.type, topic)
                              for m in mentions)
    if split != ALL_PASSAGES and passage_splits <= {None}:
        raise InputError(f"{dataset.passages_path}: no passage records a split (a dataset of plain documents, or "
                         f"one split by clusters), so --split {split} selects none; cluster its predicted mentions "
                         f"with --split all")
    if not found.mentions:
        others = sorted("no split" if s is None else s for s in elsewhere)
        where = f"({len(seen):,} in passages of {', '.join(others)})" if seen else "(it holds none)"
        raise InputError(f"{path}: no predicted mention lies in a passage of the {split} split {where}; "
                         "choose another --split")
    found.mentions.sort(key=lambda m: m.mention_id)
    return found


def _check(mention: PredictedMention, doc_id: str, text: str, path: Path, dataset: Dataset) -> None:
    """A predicted mention must fit its passage as the detector saw it."""
    where = f"{path}: predicted mention {mention.mention_id} (passage {mention.passage_id})"
    if mention.doc_id != doc_id:
        raise InputError(f"{where} names document {mention.doc_id}, but the passage is of {doc_id}; "
                         f"{_redetect(dataset)}")
    if mention.end > len(text) or text[mention.start:mention.end] != mention.text:
        raise InputError(f"{where}: offsets [{mention.start}, {mention.end}) do not slice its text {mention.text!r} "
                         f"from the passage (passages.jsonl changed since detection); {_redetect(dataset)}")


def span_fields(mentions: Sequence[ClusterMention], detector: str | None) -> dict[str, dict[str, Any]]:
    """``{mention_id: fields}`` that each line of a clusters file of predicted mentions adds, so that a
    scorer finds the mention: its passage, document and offsets into the passage text, and the detector."""
    return {m.mention_id: {"passage_id": m.passage_id, "doc_id": m.doc_id, "start": m.start, "end": m.end,
                           "detector": detector} for m in mentions}


def predicted_records(dataset_dir: Path, found: SplitMentions) -> list[MentionRecord]:
    """The mention encoder's input of each predicted mention of ``found``, sorted by mention id: its passage
    as the sentence and its document's two head passages as the context, as for gold mentions
    (:func:`corefsearch.cluster.inputs.mention_records`); one pass over the passages."""
    doc_ids = {m.doc_id for m in found.mentions}
    heads: dict[str, list[tuple[int, int, str]]] = {doc_id: [] for doc_id in doc_ids}
    seen: dict[str, int] = {}
    for passage in Dataset(dataset_dir).passages():
        if passage.doc_id not in heads:
            continue
        order = seen.get(passage.doc_id, 0)
        seen[passage.doc_id] = order + 1
        number = passage_position(passage.id, passage.doc_id)
        _keep_head(heads[passage.doc_id], (order if number is None else number, number is not None, passage.text))
    contexts = {doc_id: " ".join(text for _, _, text in head) for doc_id, head in heads.items()}
    records = []
    for m in found.mentions:
        sentence = found.passage_texts[m.passage_id]
        records.append(MentionRecord(m.mention_id, m.mention_id, m.doc_id, m.topic, m.passage_id,
                                     sentence[m.start:m.end], m.start, m.end, sentence, contexts[m.doc_id]))
    return sorted(records, key=lambda r: r.mention_id)
