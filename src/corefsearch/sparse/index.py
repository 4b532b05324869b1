"""Lucene BM25 index of a dataset's passages, built through Pyserini.

Layout: ``INDEX/lucene/index/`` holds the Lucene index (Pyserini JsonCollection documents
``{id, contents, title, text}``: ``contents`` = title + text, the field BM25 searches; the
raw JSON stored), ``INDEX/lucene/manifest.json`` ties it to the passages file by checksum.
Since format 2, ``INDEX/lucene/fields/`` is a second Lucene index of the same passages
holding the three fields of Sankepally et al. (2018)'s field-weighted BM25 (``search
--fields``, Anserini's ``-fields``): ``sentence`` (the passage text), ``title`` and
``document`` (the text of the other passages of the same document, in document order, at
most :data:`DOCUMENT_FIELD_MAX_CHARS` characters: the nearest passages first), raw JSON
stored (the ``document`` query form reads it). The main index is written exactly as before,
so plain BM25 runs are unchanged. The
``lucene/`` folder is built under a temporary name and renamed at the end, so an
interrupted build never leaves an index that looks complete.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from corefsearch.base.artefacts import LUCENE_INDEX, manifest_record, read_manifest, write_manifest
from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.progress import track
from corefsearch.base.schema import Passage
from corefsearch.datasets.dataset import Dataset, check_built_from
from corefsearch.io.outputs import Output, writes_outputs
from corefsearch.io.write import atomic_directory, sha256_file
from corefsearch.sparse.java import ensure_java

LUCENE_DIR = "lucene"
# The fields of field-weighted BM25 (besides ``contents``), in the order they are written.
FIELDS = ("sentence", "title", "document")
FIELDS_DIR = "fields"  # INDEX/lucene/fields/: the Lucene index of the fields
MAIN_KEYS = ("id", "contents", "title", "text")  # the JSON of a passage in INDEX/lucene/index/ (raw stored)
# Bound on the ``document`` field of one passage: each passage of a document of n passages
# repeats the other n - 1, so without a bound a long document costs quadratic time and space.
DOCUMENT_FIELD_MAX_CHARS = 20_000


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


def _document_field(texts: list[str], position: int, max_chars: int) -> tuple[str, bool]:
    """The other passages of a document for the passage at ``position``: the nearest ones
    first (after, then before, alternating) while they fit in ``max_chars``, joined in
    document order. Also whether some were left out."""
    chosen: list[int] = []
    used = 0
    left_out = False
    for distance in range(1, len(texts)):
        for other in (position + distance, position - distance):
            if 0 <= other < len(texts):
                size = len(texts[other]) + 1
                if used + size <= max_chars:
                    chosen.append(other)
                    used += size
                else:
                    left_out = True
    return "\n".join(texts[i] for i in sorted(chosen)), left_out


@dataclass
class FieldStats:
    """What :func:`indexed_records` left out of the ``document`` fields (passages whose field hit
    :data:`DOCUMENT_FIELD_MAX_CHARS`, and their documents), counted for the index manifest."""

    truncated_passages: int = 0
    truncated_documents: int = 0


def indexed_records(passages: Iterable[Passage], where: str = "passages",
                    max_chars: int = DOCUMENT_FIELD_MAX_CHARS,
                    stats: FieldStats | None = None) -> Iterator[dict[str, str]]:
    """The JsonCollection record of each passage, fields included, streamed: passages are
    grouped by ``doc_id`` (one document in memory at a time), which needs each document's
    passages to be contiguous, as ``build-dataset`` writes them; a document that comes back
    after another one is an error (naming the line)."""
    stats = stats if stats is not None else FieldStats()
    finished: set[str] = set()
    group: list[Passage] = []

    def flush() -> Iterator[dict[str, str]]:
        texts = [p.text for p in group]
        truncated = 0
        for position, passage in enumerate(group):
            document, left_out = _document_field(texts, position, max_chars)
            truncated += left_out
            yield {"id": passage.id, "contents": passage_contents(passage.title, passage.text),
                   "title": passage.title, "text": passage.text, "sentence": passage.text, "document": document}
        stats.truncated_passages += truncated
        stats.truncated_documents += truncated > 0

    for line, passage in enumerate(passages, start=1):
        if group and passage.doc_id != group[0].doc_id:
            yield from flush()
            finished.add(group[0].doc_id)
            group = []
        if not group and passage.doc_id in finished:
            raise InputError(f"{where}:{line}: passage {passage.id} belongs to document {passage.doc_id}, whose "
                             "passages ended earlier in the file; the passages of a document must be contiguous "
                             "(as `corefsearch build-dataset` writes them): rebuild the dataset")
        group.append(passage)
    if group:
        yield from flush()


# The arguments of Anserini's indexer for the main index and for the fields index (``-fields``).
MAIN_INDEX_ARGS = ("-storePositions", "-storeDocvectors", "-storeRaw")
FIELDS_INDEX_ARGS = ("-storeRaw", "-fields", *FIELDS)
BATCH_SIZE = 2000  # JSON records handed to Anserini at once


def index_passages(passages: Iterable[Passage], index_dir: Path, fields_dir: Path | None = None, *,
                   threads: int = 2, append: bool = False, where: str = "passages",
                   stats: FieldStats | None = None, batch_size: int = BATCH_SIZE) -> int:
    """Write ``passages`` into the Lucene index ``index_dir`` and, when ``fields_dir`` is given, their
    fields into the fields index there, through Pyserini's ``LuceneIndexer`` (Anserini's
    ``SimpleIndexer``) in batches of ``batch_size`` raw JSON records; ``append`` adds to existing
    indexes (Anserini's ``-append``). Streamed: two batches (the one being indexed and the next) and,
    with fields, one document in memory.
    The indexers are closed (the indexes committed) on return; the number of passages is returned.
    ``corefsearch index`` and ``corefsearch add`` both write through here, so an appended index is
    written exactly as a built one."""
    ensure_java()
    from pyserini.index.lucene import LuceneIndexer

    indexer = LuceneIndexer(str(index_dir), threads=threads, append=append,
                            args=["-index", str(index_dir), *MAIN_INDEX_ARGS])
    # The fields live in an index of their own: in the main one their text would enter the
    # stored raw JSON, which Anserini reads for every hit, and slow plain BM25 down severalfold.
    fields_indexer = (LuceneIndexer(str(fields_dir), threads=threads, append=append,
                                    args=["-index", str(fields_dir), *FIELDS_INDEX_ARGS])
                      if fields_dir is not None else None)
    records = (indexed_records(passages, where, stats=stats) if fields_indexer is not None else
               ({"id": p.id, "contents": passage_contents(p.title, p.text), "title": p.title, "text": p.text}
                for p in passages))

    def next_batch() -> tuple[list[str], list[str]]:
        """The next batch of JSON records for the main index and for the fields index."""
        batch, fields_batch = [], []
        for record in islice(records, batch_size):
            batch.append(json.dumps({key: record[key] for key in MAIN_KEYS}, ensure_ascii=False))
            if fields_indexer is not None:
                fields_batch.append(json.dumps({key: record[key] for key in ("id", "contents", *FIELDS)},
                                               ensure_ascii=False))
        return batch, fields_batch

    count = 0
    try:
        # One batch is read and serialised in a second thread while Anserini indexes the previous
        # one (pyjnius releases the GIL during Java calls), so the Python work does not leave
        # Anserini's threads idle between batches. The batches reach the indexer in passage order;
        # a bad passage raises here, once the batches before it are indexed.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="corefsearch-index") as reader:
            pending = reader.submit(next_batch)
            while True:
                batch, fields_batch = pending.result()
                if not batch:
                    break
                pending = reader.submit(next_batch)
                indexer.add_batch_raw(batch)
                if fields_indexer is not None:
                    fields_indexer.add_batch_raw(fields_batch)
                count += len(batch)
    finally:
        indexer.close()
        if fields_indexer is not None:
            fields_indexer.close()
    return count


@writes_outputs(lambda a: [Output(Path(a["out"]) / LUCENE_DIR, "--out", "dir", {"DATASET": a["dataset_dir"]})])
def build_lucene_index(dataset_dir: Path, out: Path, threads: int = 2, batch_size: int = 2000,
                       overwrite: bool = False, fields: bool = False) -> IndexSummary:
    """Index every passage of ``dataset_dir`` into ``out/lucene``; ``fields=True`` also writes the
    fields of field-weighted BM25 (``out/lucene/fields``: a larger index, built about 2.4× slower)."""
    dataset = Dataset(dataset_dir)
    at_least_one("--threads", threads)
    target = Path(out) / LUCENE_DIR
    expected = dataset.manifest.get("counts", {}).get("passages")

    ensure_java()
    import pyserini.index.lucene  # noqa: F401  (starts the JVM: before the clock, as the manifest's seconds always were)

    started = time.perf_counter()
    with atomic_directory(target, overwrite=overwrite) as tmp:
        stats = FieldStats()
        passages = track(dataset.passages(), "Indexing passages (Lucene)", total=expected)
        count = index_passages(passages, tmp / "index", tmp / FIELDS_DIR if fields else None, threads=threads,
                               where=str(dataset.passages_path), stats=stats, batch_size=batch_size)
        if count == 0:  # an index of nothing would look fine and find nothing
            raise InputError(f"{dataset.passages_path} holds no passages; rebuild the dataset from a corpus "
                             "with documents (`corefsearch build-dataset`)")
        if stats.truncated_passages:
            warnings.warn(f"{stats.truncated_documents} document(s) are longer than {DOCUMENT_FIELD_MAX_CHARS:,} "
                          f"characters: the `document` field of {stats.truncated_passages} passage(s) holds only the "
                          "passages nearest to them", stacklevel=2)
        seconds = time.perf_counter() - started
        manifest: dict[str, Any] = manifest_record(LUCENE_INDEX, {
            "dataset": str(Path(dataset_dir).resolve()),
            "passages_sha256": sha256_file(dataset.passages_path),
            "passages": count,
            "contents": "title + newline + text",
            "options": {"threads": threads, "store": ["positions", "docvectors", "raw"], "fields": fields},
            "seconds": round(seconds, 3),
        })
        if fields:
            manifest["fields_index"] = FIELDS_DIR
            manifest["fields"] = {"sentence": "text", "title": "title",
                                  "document": f"the other passages of the document, nearest first up to "
                                              f"{DOCUMENT_FIELD_MAX_CHARS} characters, in document order"}
            manifest["document_field"] = {"max_chars": DOCUMENT_FIELD_MAX_CHARS,
                                          "truncated_passages": stats.truncated_passages,
                                          "truncated_documents": stats.truncated_documents}
        write_manifest(tmp / "manifest.json", manifest)
    return IndexSummary(target, count, seconds)


def require_fields(index: Path, manifest: dict[str, Any], names: Iterable[str], what: str) -> None:
    """Fail clearly when ``what`` needs fields (``sentence``, ``title``, ``document``) that an index
    built before they existed (format 1) lacks."""
    missing = [name for name in names if name != "contents" and name not in manifest.get("fields", {})]
    if missing:
        raise InputError(f"the index {index} has no {', '.join(missing)} field (it was built without "
                         f"--fields), which {what} needs: rebuild it with "
                         f"`corefsearch index {manifest.get('dataset', 'DATASET')} --out {index} --fields --overwrite`")


def load_lucene_manifest(index: Path) -> dict[str, Any]:
    """The manifest of ``INDEX/lucene``; a missing index says what to run."""
    manifest_path = Path(index) / LUCENE_DIR / "manifest.json"
    return read_manifest(manifest_path, LUCENE_INDEX,
                         f"rebuild the index with `corefsearch index DATASET --out {index} --overwrite`",
                         missing=f"no Lucene index at {index} (expected {manifest_path}); build it with "
                                 f"`corefsearch index DATASET --out {index}`")


def check_index_matches_dataset(index: Path, dataset_dir: Path) -> None:
    """Fail clearly when the index was built from other passages than the dataset's."""
    check_built_from(dataset_dir, load_lucene_manifest(index).get("passages_sha256"), f"the index {index}",
                     f"corefsearch index {dataset_dir} --out {index} --overwrite")
