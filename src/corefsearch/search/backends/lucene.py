"""The Lucene backend: BM25 over Anserini (``INDEX/lucene``), with its optional fields index."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import now, write_manifest
from corefsearch.datasets.dataset import iter_passages
from corefsearch.io.write import sha256_file
from corefsearch.sparse import index as lucene
from corefsearch.sparse.index import build_lucene_index, load_lucene_manifest
from corefsearch.sparse.search import BM25Searcher

if TYPE_CHECKING:
    from corefsearch.search.backends import AppendOptions
    from corefsearch.search.options import RetrievalOptions
    from corefsearch.sparse.search import BM25Options


@dataclass
class LuceneIndexOptions:
    """``corefsearch index``: indexing threads and ``--fields`` (their ``--help`` in the metadata)."""

    threads: int = field(default=2, metadata={"help": "Indexing threads (Lucene)."})
    fields: bool = field(default=False, metadata={"option": "--fields", "help": (
        "Lucene: also index the sentence, title and document fields that `search --fields` and `--query-format "
        "document` need (INDEX/lucene/fields; about 2.4x the indexing time).")})


class _LucenePassages:
    """The stored passages of a Lucene index, for a searcher that stores none (the JVM started at the first
    lookup)."""

    def __init__(self, index: Path, manifest: dict[str, Any]) -> None:
        self.index = index
        self.manifest = manifest
        self._searcher: Any = None

    def passage(self, passage_id: str) -> dict[str, Any]:
        if self._searcher is None:
            self._searcher = BM25Searcher(self.index, manifest=self.manifest)
        return self._searcher.passage(passage_id)  # type: ignore[no-any-return]


def _link_tree(source: Path, target: Path) -> None:
    """Copy the folder ``source`` into the existing ``target`` as hard links (Lucene writes every
    file once and never changes it, so the copy may share them); ``write.lock`` and the manifest
    are left out. A plain copy where the file system has no hard links."""
    for entry in source.iterdir():
        if entry.name in ("write.lock", "manifest.json"):
            continue
        destination = target / entry.name
        if entry.is_dir():
            destination.mkdir()
            _link_tree(entry, destination)
            continue
        try:
            os.link(entry, destination)
        except OSError:
            shutil.copy2(entry, destination)


class LuceneBackend:
    name = "lucene"
    retriever = "bm25"
    stores_passages = True
    Options = LuceneIndexOptions

    def load_manifest(self, index: Path) -> dict[str, Any]:
        return load_lucene_manifest(index)

    def rebuild_command(self, dataset_dir: Path, index: Path, manifest: dict[str, Any]) -> str:
        return f"corefsearch index {dataset_dir} --out {index} --overwrite"

    def build(self, dataset_dir: Path, out: Path, options: LuceneIndexOptions, overwrite: bool) -> Any:
        return build_lucene_index(dataset_dir, out, threads=options.threads, overwrite=overwrite,
                                  fields=options.fields)

    def prepare_append(self, index: Path, options: AppendOptions) -> None:
        return None

    def append(self, index: Path, passages_path: Path, old_count: int, staged: Path, prepared: Any,
               options: AppendOptions) -> int:
        """The new passages appended to a hard-linked copy of ``index/lucene`` in ``staged`` (Anserini's
        append mode: the old index is never touched)."""
        manifest = lucene.load_lucene_manifest(index)
        _link_tree(index / lucene.LUCENE_DIR, staged)
        # The indexing of build_lucene_index, in Anserini's append mode.
        main_dir, fields_dir = staged / "index", staged / lucene.FIELDS_DIR
        with_fields = bool(manifest.get("options", {}).get("fields")) or (fields_dir.exists())
        stats = lucene.FieldStats()
        count = lucene.index_passages(islice(iter_passages(passages_path), old_count, None), main_dir,
                                      fields_dir if with_fields else None, threads=options.threads, append=True,
                                      where=str(passages_path), stats=stats)
        total = int(manifest.get("passages", 0)) + count
        manifest.update({"passages_sha256": sha256_file(passages_path), "passages": total, "updated": now(),
                         "additions": [*manifest.get("additions", []), {"passages": count, "added": now()}]})
        if with_fields and "document_field" in manifest:
            manifest["document_field"]["truncated_passages"] += stats.truncated_passages
            manifest["document_field"]["truncated_documents"] += stats.truncated_documents
        write_manifest(staged / "manifest.json", manifest)
        return count

    def open(self, index: Path, manifest: dict[str, Any], bm25: BM25Options, retrieval: RetrievalOptions) -> Any:
        return BM25Searcher(index, bm25, manifest=manifest)

    def passages(self, index: Path, manifest: dict[str, Any], opened: Any = None) -> Any:
        return opened if opened is not None else _LucenePassages(Path(index), manifest)

    def use_passages(self, searcher: Any, store: Any) -> None:
        return None  # it stores its own
