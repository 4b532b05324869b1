"""Look one query of a dataset up (``corefsearch query --dataset DATASET --qid ID``): the query
record, its relevant passages from the qrels of its split, and the gold mentions of its cluster
in given passages."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Passage, Query
from corefsearch.datasets.dataset import Dataset, read_queries
from corefsearch.io.trec import read_qrels

SPLITS = ("train", "dev", "test")


@dataclass
class DatasetQuery:
    """A query of a dataset, the split it is in and its relevant passages (relevance > 0)."""

    query: Query
    split: str
    relevant: set[str]


def find_query(dataset_dir: Path, qid: str) -> DatasetQuery:
    """The query ``qid`` from ``DATASET/queries/{train,dev,test}.jsonl``, with its qrels.

    Raises ``InputError`` naming the dataset when no split holds it.
    """
    dataset = Dataset(dataset_dir)
    looked = []
    for split in SPLITS:
        path = dataset.queries_path(split)
        if not path.is_file():
            continue
        looked.append(path.name)
        found = next((query for query in read_queries(path) if query.id == qid), None)
        if found is None:
            continue
        qrels_path = dataset.qrels_path(split)
        judged = read_qrels(qrels_path).get(qid, {}) if qrels_path.is_file() else {}
        return DatasetQuery(found, split, {doc for doc, rel in judged.items() if rel > 0})
    where = f" (looked in queries/{', '.join(looked)})" if looked else " (it has no queries files)"
    dataset.require_gold(f"query {qid!r}", "ask it with --mention TEXT --context TEXT")
    raise InputError(f"query {qid!r} is not in the dataset {dataset_dir}{where}")


def cluster_mentions(dataset_dir: Path, passage_ids: set[str], cluster_id: str) -> dict[str, list[tuple[int, int]]]:
    """``{passage id: [(start, end), ...]}``: the mentions of ``cluster_id`` in each of the given passages
    (character offsets into the passage text), read from the dataset's passages.jsonl."""
    found: dict[str, list[tuple[int, int]]] = {passage_id: [] for passage_id in passage_ids}
    if not passage_ids or not cluster_id:
        return found
    path = Dataset(dataset_dir).passages_path
    # Only lines that mention a wanted id are parsed (a dataset can hold millions of passages).
    probes = [passage_id.encode() for passage_id in passage_ids]
    with path.open("rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not any(probe in line for probe in probes):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise InputError(f"{path}:{line_number}: invalid JSON") from None
            if not isinstance(record, dict) or record.get("id") not in found:
                continue
            passage = Passage.from_json(record, where=f"{path}:{line_number}")
            found[passage.id] = sorted((m.start, m.end) for m in passage.mentions if m.cluster_id == cluster_id)
    return found
