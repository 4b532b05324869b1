"""The published CoreSearch release (Eirew et al., EMNLP 2022).

A release folder holds, per split ``Train``/``Dev``/``Test``, ``{Split}_queries.json``,
``{Split}_all_passages.json`` and ``{Split}_gold_clusters.json``: JSON lists of records
``{"id", "goldChain", "mention", "startIndex", "endIndex", "context"}`` (``endIndex``
inclusive, both word indices into ``context``) and of clusters ``{"clusterId",
"clusterTitle", "mentionIds"}``. Distractor passages have ``goldChain`` -1. The real files
are about 900 MB each, so everything is parsed as a stream.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.schema import SPLITS, Document, Mention, RecordFields, safe_id
from corefsearch.datasets.wec import squash
from corefsearch.io.read import closing_iterator, read_json_array

FILE_KINDS = ("queries", "all_passages", "gold_clusters")
DISTRACTOR_CHAIN = "-1"


def _split_file(folder: Path, split: str, kind: str) -> Path | None:
    for suffix in (".json", ".json.gz"):
        candidate = folder / f"{split.capitalize()}_{kind}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def _release_files(folder: Path) -> list[str]:
    names = sorted(p.name for p in folder.iterdir()
                   if any(f"_{kind}.json" in p.name for kind in FILE_KINDS))
    return names


def _locate(folder: Path, splits: Sequence[str]) -> dict[str, dict[str, Path]]:
    """The three files of each requested split; every problem is reported before any reading."""
    if not folder.exists():
        raise MissingArtefactError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise InputError(f"{folder}: a CoreSearch release is a folder of {{Split}}_queries.json, "
                         "{Split}_all_passages.json and {Split}_gold_clusters.json files")
    located: dict[str, dict[str, Path]] = {}
    for split in splits:
        if split not in SPLITS:
            raise InputError(f"unknown CoreSearch split {split!r}: choose from {', '.join(SPLITS)}")
        files = {kind: _split_file(folder, split, kind) for kind in FILE_KINDS}
        missing = [f"{split.capitalize()}_{kind}.json" for kind, file in files.items() if file is None]
        if len(missing) == len(FILE_KINDS):
            present = _release_files(folder)
            raise InputError(f"{folder}: no CoreSearch files for split {split!r}; found "
                             f"{', '.join(present) if present else 'no CoreSearch files at all'}")
        if missing:
            raise InputError(f"{folder}: split {split!r} lacks {', '.join(missing)}")
        located[split] = {kind: file for kind, file in files.items() if file is not None}
    return located


def _cluster_ids(path: Path) -> set[str]:
    ids: set[str] = set()
    with closing_iterator(read_json_array(path, "cluster records")) as records:
        for index, record in records:
            if not isinstance(record, dict) or "clusterId" not in record:
                raise InputError(f"{path}: record {index} is not a cluster record with a 'clusterId'")
            ids.add(RecordFields(record, str(path), f"record {index}").ident("clusterId"))
    return ids


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _document(path: Path, index: int, record: Any, split: str, clusters: set[str], clusters_path: Path,
              is_query: bool) -> Document:
    """One validated passage or query record as a :class:`Document`."""
    if not isinstance(record, dict):
        raise InputError(f"{path}: record {index} is a {type(record).__name__}, not a JSON object")
    for name in ("id", "goldChain", "context"):
        if name not in record:
            raise InputError(f"{path}: record {index} lacks the field {name!r}")
    raw_id, context = record["id"], record["context"]
    if not isinstance(raw_id, (str, int)) or isinstance(raw_id, bool):
        raise InputError(f"{path}: record {index}: field 'id' must be a string or integer, got {raw_id!r}")
    record_id = safe_id(raw_id)
    chain = RecordFields(record, str(path), f"record {record_id}").ident("goldChain")
    where = f"{path}: record {record_id}"
    if not isinstance(context, list) or not all(isinstance(t, str) for t in context):
        raise InputError(f"{where}: field 'context' must be a list of strings")
    title = record.get("title") or ""
    if not isinstance(title, str):
        raise InputError(f"{where}: field 'title' must be a string")
    text = " ".join(context)
    document = Document(doc_id=record_id, text=text, title=title, units=[(0, len(text))], split=split)

    if chain == DISTRACTOR_CHAIN:
        if is_query:
            raise InputError(f"{where}: a query must have a gold chain, not goldChain -1")
        return document  # a distractor: its mention fields, if any, mean nothing
    if chain not in clusters:
        raise InputError(f"{where}: goldChain {chain} is not a cluster of {clusters_path.name}")
    for name in ("mention", "startIndex", "endIndex"):
        if name not in record:
            raise InputError(f"{where}: lacks the field {name!r}")
    first, last, mention = record["startIndex"], record["endIndex"], record["mention"]
    if not (_is_index(first) and _is_index(last) and 0 <= first <= last < len(context)):
        raise InputError(f"{where}: startIndex {first!r} and endIndex {last!r} (inclusive) do not fit "
                         f"its context of {len(context)} tokens")
    if not isinstance(mention, str):
        raise InputError(f"{where}: field 'mention' must be a string")
    start = sum(len(token) + 1 for token in context[:first])
    end = start + len(" ".join(context[first:last + 1]))
    if squash(text[start:end]) != squash(mention):
        raise InputError(f"{where}: tokens {first}-{last} read {text[start:end]!r}, "
                         f"not the mention {mention!r}")
    document.mentions.append(Mention(mention_id=record_id, doc_id=record_id, start=start, end=end,
                                     cluster_id=chain, type="event"))
    document.validate(where=str(path))
    return document


def read_coresearch(path: Path, splits: Sequence[str] = ("train", "dev", "test")) -> Iterator[Document]:
    """Yield one single-unit :class:`Document` per CoreSearch passage, then per query not among them.

    Each document has the split of its file; a passage of the gold chain carries one event
    mention, a distractor none. A query whose id is also a passage is the same mention and
    is emitted once.
    """
    folder = Path(path)
    located = _locate(folder, splits)
    # Only ids are kept: the passage files are too large to hold.
    seen: set[str] = set()
    for split, files in located.items():
        clusters = _cluster_ids(files["gold_clusters"])
        for kind in ("all_passages", "queries"):
            file = files[kind]
            what = "passage records" if kind == "all_passages" else "query records"
            with closing_iterator(read_json_array(file, what)) as records:
                for index, record in records:
                    document = _document(file, index, record, split, clusters, files["gold_clusters"],
                                         is_query=kind == "queries")
                    if document.doc_id in seen:
                        continue
                    seen.add(document.doc_id)
                    yield document
