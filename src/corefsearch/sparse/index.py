"""Lucene BM25 index of a dataset's passages, built through Pyserini.

Layout: ``INDEX/lucene/index/`` holds the Lucene index (Pyserini JsonCollection documents:
``contents`` = title + text, with ``title`` and ``text`` also kept as fields and the raw JSON
stored), ``INDEX/lucene/manifest.json`` ties it to the passages file by checksum. The
``lucene/`` folder is built under a temporary name and renamed at the end, so an
interrupted build never leaves an index that looks complete.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch import __version__
from corefsearch.datasets.dataset import Dataset, check_built_from
from corefsearch.errors import InputError, MissingArtefactError
from corefsearch.io import atomic_directory, atomic_file, sha256_file
from corefsearch.progress import track

LUCENE_DIR = "lucene"
INDEX_KIND = "corefsearch-lucene-index"


@dataclass
class IndexSummary:
    path: Path
    passages: int
    seconds: float

    @property
    def passages_per_second(self) -> float:
        return self.passages / self.seconds if self.seconds else float("inf")


def passage_contents(title: str, text: str) -> str:
    """The text BM25 sees: the title (headline or article name) and the passage."""
    return f"{title}\n{text}" if title else text


def build_lucene_index(dataset_dir: Path, out: Path, threads: int = 2, batch_size: int = 2000,
                       overwrite: bool = False) -> IndexSummary:
    """Index every passage of ``dataset_dir`` into ``out/lucene``."""
    from corefsearch.sparse.java import ensure_java

    dataset = Dataset(dataset_dir)
    if threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    target = Path(out) / LUCENE_DIR
    expected = dataset.manifest.get("counts", {}).get("passages")
    ensure_java()
    from pyserini.index.lucene import LuceneIndexer

    started = time.perf_counter()
    count = 0
    with atomic_directory(target, overwrite=overwrite) as tmp:
        index_dir = tmp / "index"
        indexer = LuceneIndexer(str(index_dir), threads=threads,
                                args=["-index", str(index_dir), "-storePositions", "-storeDocvectors",
                                      "-storeRaw"])
        try:
            batch: list[str] = []
            for passage in track(dataset.passages(), "Indexing passages (Lucene)", total=expected):
                batch.append(json.dumps({"id": passage.id, "contents": passage_contents(passage.title, passage.text),
                                         "title": passage.title, "text": passage.text}, ensure_ascii=False))
                count += 1
                if len(batch) >= batch_size:
                    indexer.add_batch_raw(batch)
                    batch = []
            if batch:
                indexer.add_batch_raw(batch)
        finally:
            indexer.close()
        seconds = time.perf_counter() - started
        manifest = {
            "kind": INDEX_KIND,
            "format_version": 1,
            "corefsearch_version": __version__,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "dataset": str(Path(dataset_dir).resolve()),
            "passages_sha256": sha256_file(dataset.passages_path),
            "passages": count,
            "contents": "title + newline + text",
            "options": {"threads": threads, "store": ["positions", "docvectors", "raw"]},
            "seconds": round(seconds, 3),
        }
        with atomic_file(tmp / "manifest.json") as handle:
            json.dump(manifest, handle, indent=2)
            handle.write("\n")
    return IndexSummary(target, count, seconds)


def load_lucene_manifest(index: Path) -> dict[str, Any]:
    """The manifest of ``INDEX/lucene``; a missing index says what to run."""
    manifest_path = Path(index) / LUCENE_DIR / "manifest.json"
    if not manifest_path.exists():
        raise MissingArtefactError(f"no Lucene index at {index} (expected {manifest_path}); build it with "
                                   f"`corefsearch index DATASET --out {index}`")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if manifest.get("kind") != INDEX_KIND:
        raise InputError(f"{manifest_path}: not a corefsearch Lucene index manifest")
    return manifest


def check_index_matches_dataset(index: Path, dataset_dir: Path) -> None:
    """Fail clearly when the index was built from other passages than the dataset's."""
    check_built_from(dataset_dir, load_lucene_manifest(index).get("passages_sha256"), f"the index {index}",
                     f"corefsearch index {dataset_dir} --out {index} --overwrite")
