"""The mentions to cluster: every gold mention of a dataset whose cluster is in the split."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.schema import SPLITS
from corefsearch.datasets.dataset import Dataset


@dataclass
class ClusterMention:
    """A mention, with offsets into the text of the first passage (in file order) that holds it."""

    mention_id: str
    doc_id: str
    passage_id: str
    start: int
    end: int
    type: str
    topic: str | None


@dataclass
class SplitMentions:
    """The mentions of a split, sorted by id, and the texts of the passages they point into; ``kind``: gold
    (the dataset's annotations) or predicted (a detector's, ``predicted.py``, named by ``detector``)."""

    mentions: list[ClusterMention] = field(default_factory=list)
    passage_texts: dict[str, str] = field(default_factory=dict)
    kind: str = "gold"
    detector: str | None = None
    split: str | None = None  # the split read (predicted mentions: ``all`` for every passage)


def split_mention_ids(dataset: Dataset, split: str) -> list[str]:
    """The ids of the mentions of the clusters of ``split`` in ``DATASET/clusters.jsonl``."""
    if split not in SPLITS:
        raise InputError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    path = dataset.clusters_path
    clusters = dataset.clusters()
    splits_found = {cluster.split for cluster in clusters}
    ids = [mention_id for cluster in clusters if cluster.split == split for mention_id in cluster.mention_ids]
    if not ids:
        found = f"it has clusters in {', '.join(s for s in SPLITS if s in splits_found)}" if splits_found else \
            "it holds no clusters"
        raise InputError(f"{path}: the split {split!r} has no mentions to cluster ({found}); choose another --split")
    return ids


def read_split_mentions(dataset_dir: Path, split: str) -> SplitMentions:
    """The mentions of ``split`` with their passages' texts, read from ``passages.jsonl`` in one pass."""
    dataset = Dataset(dataset_dir)
    wanted = set(split_mention_ids(dataset, split))
    found = SplitMentions()
    by_id: dict[str, ClusterMention] = {}
    if not dataset.passages_path.is_file():
        raise MissingArtefactError(f"{dataset.passages_path}: no such file; rebuild the dataset with "
                                   f"`corefsearch build-dataset ... --out {dataset.root} --overwrite`")
    for passage in dataset.passages():
        for mention in passage.mentions:
            if mention.mention_id not in wanted or mention.mention_id in by_id:
                continue
            by_id[mention.mention_id] = ClusterMention(mention.mention_id, passage.doc_id, passage.id, mention.start,
                                                       mention.end, mention.type, passage.topic)
            found.passage_texts[passage.id] = passage.text
    missing = sorted(wanted - set(by_id))
    if missing:
        raise InputError(f"{dataset.root}: clusters.jsonl names {len(missing):,} mention(s) that no passage of "
                         f"passages.jsonl holds (e.g. {missing[0]}); rebuild the dataset with `corefsearch "
                         f"build-dataset ... --out {dataset.root} --overwrite`")
    found.mentions = sorted(by_id.values(), key=lambda m: m.mention_id)
    return found


def document_texts(dataset_dir: Path, doc_ids: set[str]) -> dict[str, str]:
    """The text of each of ``doc_ids``: its passages' texts in file order, one a line (with window passages,
    overlapping text is repeated)."""
    pieces: dict[str, list[str]] = {doc_id: [] for doc_id in doc_ids}
    for passage in Dataset(dataset_dir).passages():
        if passage.doc_id in pieces:
            pieces[passage.doc_id].append(passage.text)
    return {doc_id: "\n".join(texts) for doc_id, texts in pieces.items()}
