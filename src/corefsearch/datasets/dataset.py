"""Read access to a dataset directory written by ``corefsearch build-dataset``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corefsearch.base.artefacts import DATASET, PREDICTED_MENTIONS, read_manifest
from corefsearch.base.errors import CorefSearchError, InputError, MissingArtefactError
from corefsearch.base.schema import SPLITS, Cluster, Passage, PredictedMention, Query
from corefsearch.io.read import read_jsonl

PREDICTED_MENTIONS_FILE = "predicted_mentions.jsonl"
PREDICTED_MANIFEST_FILE = "predicted_mentions.json"


class Dataset:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

        self.manifest: dict[str, Any] = read_manifest(
            self.root / "manifest.json", DATASET,
            f"rebuild the dataset with `corefsearch build-dataset ... --out {self.root} --overwrite`",
            missing=f"{self.root} is not a corefsearch dataset (no manifest.json); create it with "
                    f"`corefsearch build-dataset --format ecbplus|wec|coresearch|generic INPUT --out {self.root}`")

    @property
    def passages_path(self) -> Path:
        return self.root / "passages.jsonl"

    def queries_path(self, split: str) -> Path:
        return self.root / "queries" / f"{split}.jsonl"

    def qrels_path(self, split: str) -> Path:
        return self.root / "qrels" / f"{split}.txt"

    def passages(self) -> Iterator[Passage]:
        yield from iter_passages(self.passages_path)

    @property
    def has_gold_mentions(self) -> bool:
        """False for a dataset of plain documents (``build-dataset --format text``, or generic without
        ``mentions.jsonl``; ``options.source.mentions`` is ``"none"`` in its manifest) that no ``add`` has
        brought mentions to: passages without mentions, and no queries, qrels or clusters."""
        source = (self.manifest.get("options") or {}).get("source") or {}
        counts = self.manifest.get("counts") or {}
        return source.get("mentions") != "none" or bool(counts.get("mentions"))

    def require_gold(self, what: str, instead: str | None = None) -> Dataset:
        """This dataset, if it holds gold mentions; else the one-line error saying why ``what`` (the
        command) cannot run on it and what to do ``instead``."""
        if self.has_gold_mentions:
            return self
        instead = instead or ("it needs a dataset built from a corpus with gold mentions (e.g. --format generic "
                              "with a mentions.jsonl)")
        raise InputError(f"{what}: {self.root} is a dataset of plain documents, without gold mentions, queries, "
                         f"qrels or clusters; {instead}")

    def queries(self, split: str) -> list[Query]:
        return read_queries(self.queries_path(split))

    @property
    def predicted_mentions_path(self) -> Path:
        """The mentions a detector found (``corefsearch detect``), apart from the gold ones."""
        return self.root / PREDICTED_MENTIONS_FILE

    def predicted_manifest(self) -> dict[str, Any]:
        """The record of the detection that wrote :attr:`predicted_mentions_path` (detector, counts, passages'
        checksum); one line saying what to run when there is none."""
        remedy = f"run `corefsearch detect {self.root} --model MODEL|heuristic` first"
        return read_manifest(self.root / PREDICTED_MANIFEST_FILE, PREDICTED_MENTIONS, remedy,
                             missing=f"{self.root} holds no predicted mentions; {remedy}")

    def predicted_mentions(self) -> Iterator[PredictedMention]:
        """The predicted mentions, in passage order (checked against the manifest's existence first)."""
        self.predicted_manifest()
        path = self.predicted_mentions_path
        for line_number, record in read_jsonl(path):
            yield PredictedMention.from_json(record, where=f"{path}:{line_number}")

    @property
    def clusters_path(self) -> Path:
        return self.root / "clusters.jsonl"

    def clusters(self, split: str | None = None) -> list[Cluster]:
        """The gold clusters of ``clusters.jsonl`` (of one split, or all), every record checked once here:
        its fields, and no mention in two clusters."""
        if split is not None and split not in SPLITS:
            raise InputError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
        path = self.clusters_path
        if not path.is_file():
            raise MissingArtefactError(f"{path}: no such file; rebuild the dataset with `corefsearch build-dataset ... "
                                       f"--out {self.root} --overwrite`")
        clusters = []
        seen: dict[str, int] = {}
        for line_number, record in read_jsonl(path):
            cluster = Cluster.from_json(record, f"{path}:{line_number}")
            for mention_id in cluster.mention_ids:
                if mention_id in seen:
                    raise InputError(f"{path}:{line_number}: cluster {cluster.cluster_id}: mention {mention_id} is "
                                     f"also in the cluster on line {seen[mention_id]}")
                seen[mention_id] = line_number
            if split is None or cluster.split == split:
                clusters.append(cluster)
        return clusters


def dataset_holding(path: Path) -> Dataset | None:
    """The dataset a file of it lies in (``DATASET/queries/SPLIT.jsonl``, ``DATASET/qrels/SPLIT.txt``), or
    ``None`` (also where the folder above looks like a dataset and is not one)."""
    root = Path(path).resolve().parent.parent
    if not ((root / "manifest.json").is_file() and (root / "passages.jsonl").is_file()):
        return None
    try:
        return Dataset(root)
    except CorefSearchError:
        return None


def iter_passages(path: Path) -> Iterator[Passage]:
    for line_number, record in read_jsonl(path):
        yield Passage.from_json(record, where=f"{path}:{line_number}")


def read_queries(path: Path) -> list[Query]:
    """Read a queries JSONL file; each record is checked (``FILE:LINE: why`` on error)."""
    queries = []
    seen: set[str] = set()
    for line_number, record in read_jsonl(path):
        query = Query.from_json(record, where=f"{path}:{line_number}")
        if query.id in seen:
            raise InputError(f"{path}:{line_number}: query id {query.id} occurs twice")
        if any(c.isspace() for c in query.id):
            raise InputError(f"{path}:{line_number}: query id {query.id!r} contains white space")
        seen.add(query.id)
        queries.append(query)
    return queries


def check_built_from(dataset_dir: Path, passages_sha256: str | None, what: str, rebuild: str) -> None:
    """Fail clearly when ``what`` (an index) was built from other passages than the dataset's."""
    recorded = Dataset(dataset_dir).manifest.get("checksums", {}).get("passages.jsonl", "").removeprefix("sha256:")
    if recorded and recorded != passages_sha256:
        raise InputError(f"{what} was built from other passages than the dataset {dataset_dir}; "
                         f"rebuild it with `{rebuild}`")
