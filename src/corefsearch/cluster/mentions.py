"""The mentions to cluster: every gold mention of a dataset whose cluster is in the split."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from corefsearch.datasets.dataset import Dataset
from corefsearch.errors import InputError, MissingArtefactError
from corefsearch.io.read import read_jsonl
from corefsearch.schema import MENTION_TYPES, SPLITS, RecordFields


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
    """The mentions of a split, sorted by id, and the texts of the passages they point into."""

    mentions: list[ClusterMention] = field(default_factory=list)
    passage_texts: dict[str, str] = field(default_factory=dict)


def split_mention_ids(dataset: Dataset, split: str) -> list[str]:
    """The ids of the mentions of the clusters of ``split`` in ``DATASET/clusters.jsonl``."""
    if split not in SPLITS:
        raise InputError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    path = dataset.root / "clusters.jsonl"
    if not path.is_file():
        raise MissingArtefactError(f"{path}: no such file; rebuild the dataset with `corefsearch build-dataset ... "
                                   f"--out {dataset.root} --overwrite`")
    ids: list[str] = []
    seen: dict[str, int] = {}
    splits_found: set[str] = set()
    for line, record in read_jsonl(path):
        fields = RecordFields(record, f"{path}:{line}")
        fields.subject = f"cluster {fields.ident('cluster_id')}"
        cluster_split = fields.choice("split", SPLITS)
        fields.choice("type", MENTION_TYPES, "event")
        splits_found.add(cluster_split)
        for position, value in enumerate(fields.array("mention_ids")):
            if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
                raise fields.error(f"mention_ids[{position}] must be a non-empty string or integer, got {value!r}")
            mention_id = str(value)
            if mention_id in seen:
                raise fields.error(f"mention {mention_id} is also in the cluster on line {seen[mention_id]}")
            seen[mention_id] = line
            if cluster_split == split:
                ids.append(mention_id)
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
