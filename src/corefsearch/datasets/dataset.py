"""Read access to a dataset directory written by ``corefsearch build-dataset``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from corefsearch.base.artefacts import DATASET, PREDICTED_MENTIONS, read_manifest
from corefsearch.base.errors import CorefSearchError, InputError, MissingArtefactError
from corefsearch.base.schema import SPLITS, Cluster, Passage, PredictedMention, Query
from corefsearch.io.read import read_jsonl
from corefsearch.io.write import sha256_file

PREDICTED_MENTIONS_FILE = "predicted_mentions.jsonl"
PREDICTED_MANIFEST_FILE = "predicted_mentions.json"


class Dataset:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        # the state of the predicted-mentions files last found sound, and their manifest (checked once)
        self._predicted_checked: tuple[Any, dict[str, Any]] | None = None

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

    @property
    def predicted_manifest_path(self) -> Path:
        """The record of the detection that wrote :attr:`predicted_mentions_path` (its sidecar)."""
        return self.root / PREDICTED_MANIFEST_FILE

    def has_predicted_files(self) -> bool:
        """Whether either predicted-mentions file is there (both, or one left without the other)."""
        return self.predicted_mentions_path.exists() or self.predicted_manifest_path.exists()

    def check_predicted(self) -> dict[str, Any] | None:
        """The one check of the predicted mentions every command that reads them (or, as ``detect``, would write
        them) makes: the manifest when both files are there and agree; None when neither is; else one line
        naming the file(s), what is wrong and the fix (``detect --overwrite``, which writes both afresh):

        - the manifest without the mentions file (deleted or moved);
        - the mentions file without its manifest (copied without it, or ``detect`` stopped between the two);
        - a manifest that is not one (unreadable, of another kind);
        - a mentions file whose checksum is not the one its manifest records (changed since it was written;
          checked when the manifest records one, and once per state of the files)."""
        mentions, manifest_path = self.predicted_mentions_path, self.predicted_manifest_path
        redetect = f"run `corefsearch detect {self.root} --model MODEL|heuristic --overwrite` to detect them again"
        if not manifest_path.exists():
            if not mentions.exists():
                return None
            raise MissingArtefactError(f"{mentions} has no manifest beside it ({manifest_path.name} is missing: "
                                       f"copied without it, or `detect` stopped before writing it); {redetect}")
        if not mentions.exists():
            raise MissingArtefactError(f"{manifest_path} records predicted mentions but {mentions} is missing "
                                       f"(deleted or moved); {redetect}")
        if mentions.is_dir():
            raise InputError(f"{mentions}: a folder where the predicted mentions file is expected; {redetect}")
        state = (_stat_key(mentions), _stat_key(manifest_path))
        if self._predicted_checked is not None and self._predicted_checked[0] == state:
            return self._predicted_checked[1]
        manifest = read_manifest(manifest_path, PREDICTED_MENTIONS, redetect)
        recorded = manifest.get("file_sha256")
        if isinstance(recorded, str) and recorded.removeprefix("sha256:") != sha256_file(mentions):
            raise InputError(f"{mentions} no longer matches its manifest {manifest_path} (its checksum is not the "
                             f"one recorded: the file changed after it was written); {redetect}")
        self._predicted_checked = (state, manifest)
        return manifest

    def predicted_manifest(self) -> dict[str, Any]:
        """The record of the detection that wrote :attr:`predicted_mentions_path` (detector, counts, passages'
        checksum), both files checked (:meth:`check_predicted`); one line saying what to run when there is none."""
        manifest = self.check_predicted()
        if manifest is None:
            raise MissingArtefactError(f"{self.root} holds no predicted mentions; run `corefsearch detect {self.root} "
                                       "--model MODEL|heuristic` first")
        return manifest

    def predicted_mentions(self) -> Iterator[PredictedMention]:
        """The predicted mentions, in passage order (both files checked first: :meth:`predicted_manifest`)."""
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


def _stat_key(path: Path) -> tuple[int, int, int]:
    """What tells a file changed without reading it: its inode, size and modification time."""
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


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
