"""What ``corefsearch search`` writes, in one place: the TREC run ``RUN`` (through
:func:`corefsearch.io.trec.write_run`, which holds the TREC format), its options and versions
``RUN.meta.json``, the reader's spans ``RUN.spans.jsonl`` (one :class:`~corefsearch.base.schema.SpanRecord`
a line) and, on request, the BM25 query strings as a Pyserini topics TSV. The README's "File
formats" section describes each file."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.base.artefacts import RUN, manifest_record, write_manifest
from corefsearch.base.schema import Hit, Query, SpanRecord
from corefsearch.io.trec import RunRow, write_run
from corefsearch.io.write import write_jsonl


def spans_path_for(run_path: Path) -> Path:
    """Where a run's spans go by default: ``RUN.spans.jsonl`` beside ``RUN``."""
    return Path(run_path).with_name(Path(run_path).name + ".spans.jsonl")


def run_metadata_path(run_path: Path) -> Path:
    """Where a run's options and versions are kept: ``RUN.meta.json`` beside ``RUN``."""
    return Path(run_path).with_name(Path(run_path).name + ".meta.json")


def write_run_metadata(path: Path, fields: dict[str, Any]) -> None:
    write_manifest(path, manifest_record(RUN, fields))


def run_rows(results: Iterable[tuple[Query, list[Hit]]], tag: str) -> Iterator[RunRow]:
    """The TREC run rows of each query's hits, ranked in the given order."""
    for query, hits in results:
        for rank, hit in enumerate(hits, start=1):
            yield RunRow(query.id, hit.passage_id, rank, hit.score, tag)


@dataclass
class RunWriter:
    """The files of one run: ``out`` (the TREC run), ``OUT.meta.json`` and, with a reader, the
    spans (``spans_out``, default ``OUT.spans.jsonl``). The spans are written before the run, so
    a run made with a reader always has its spans."""

    out: Path
    spans_out: Path | None = None

    @property
    def spans_path(self) -> Path:
        return Path(self.spans_out) if self.spans_out is not None else spans_path_for(self.out)

    @property
    def metadata_path(self) -> Path:
        return run_metadata_path(self.out)

    def write_spans(self, records: Iterable[SpanRecord]) -> int:
        return write_jsonl(self.spans_path, (record.to_json() for record in records))

    def write_run(self, results: Iterable[tuple[Query, list[Hit]]], tag: str) -> int:
        """Write the run atomically; returns its number of lines."""
        return write_run(self.out, run_rows(results, tag))

    def write_metadata(self, fields: dict[str, Any]) -> None:
        write_run_metadata(self.metadata_path, fields)
