"""Search end to end: queries in, TREC run out (``search``), or one ad-hoc mention (``query``)."""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corefsearch import __version__
from corefsearch.datasets.dataset import read_queries
from corefsearch.errors import InputError, MissingArtefactError
from corefsearch.io import atomic_file, sha256_file, write_run
from corefsearch.schema import Query
from corefsearch.sparse.formulation import formulate
from corefsearch.sparse.index import check_index_matches_dataset
from corefsearch.sparse.search import BM25Options, BM25Searcher, run_rows


@dataclass
class SearchSummary:
    queries: int
    rows: int
    seconds: float
    out: Path

    @property
    def queries_per_second(self) -> float:
        return self.queries / self.seconds if self.seconds else float("inf")


def _dataset_of(queries_path: Path) -> Path | None:
    """The dataset directory a queries file lies in (``DATASET/queries/SPLIT.jsonl``), if any."""
    candidate = Path(queries_path).resolve().parent.parent
    return candidate if (candidate / "manifest.json").exists() and (candidate / "passages.jsonl").exists() else None


def search_to_run(index: Path, queries_path: Path, out: Path, k: int = 500,
                  options: BM25Options | None = None) -> SearchSummary:
    """Search every query of ``queries_path`` and write the TREC run ``out`` atomically."""
    options = options or BM25Options()
    if not Path(queries_path).is_file():
        raise MissingArtefactError(f"{queries_path}: no such queries file; a dataset's queries are "
                                   "DATASET/queries/{train,dev,test}.jsonl, written by `corefsearch build-dataset "
                                   "--format ecbplus|wec|coresearch|generic INPUT --out DATASET`")
    queries = read_queries(queries_path)
    if not queries:
        raise InputError(f"{queries_path}: holds no queries")
    dataset_dir = _dataset_of(queries_path)
    if dataset_dir is not None:
        check_index_matches_dataset(index, dataset_dir)
    searcher = BM25Searcher(index, options)
    started = time.perf_counter()
    rows = write_run(out, run_rows(searcher.search(queries, k), options.tag))
    summary = SearchSummary(len(queries), rows, time.perf_counter() - started, Path(out))
    write_run_metadata(run_metadata_path(out), {
        "retriever": "bm25", "options": asdict(options), "k": k, "tag": options.tag,
        "index": str(Path(index).resolve()), "passages_sha256": searcher.manifest.get("passages_sha256"),
        "queries": str(Path(queries_path).resolve()), "queries_sha256": sha256_file(queries_path),
        "n_queries": summary.queries, "rows": rows, "seconds": round(summary.seconds, 3)})
    return summary


def run_metadata_path(run_path: Path) -> Path:
    """Where a run's options and versions are kept: ``RUN.meta.json`` beside ``RUN``."""
    return Path(run_path).with_name(Path(run_path).name + ".meta.json")


def write_run_metadata(path: Path, fields: dict[str, Any]) -> None:
    record = {"kind": "corefsearch-run", "corefsearch_version": __version__,
              "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **fields}
    with atomic_file(path) as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")


def adhoc_query_record(mention: str, context: str | None = None, occurrence: int | None = None) -> Query:
    """A query for ``mention`` at its ``occurrence``-th place (1-based) in ``context``."""
    if not mention.strip():
        raise InputError("--mention is empty")
    text = context if context is not None else mention
    starts = [m.start() for m in re.finditer(re.escape(mention), text)]
    if not starts:
        raise InputError(f"the mention {mention!r} does not occur in the context")
    if occurrence is None:
        occurrence = 1
    if not 1 <= occurrence <= len(starts):
        raise InputError(f"--occurrence {occurrence}: the mention occurs {len(starts)} time(s) in the context")
    start = starts[occurrence - 1]
    return Query("adhoc", "", text, start, start + len(mention), mention, "")


@dataclass
class AdhocHit:
    rank: int
    score: float
    passage_id: str
    title: str
    text: str
    matched: list[tuple[int, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "score": self.score, "passage_id": self.passage_id, "title": self.title,
                "text": self.text, "matched": [list(span) for span in self.matched]}


@dataclass
class AdhocResult:
    query: Query
    query_string: str
    occurrences: int
    hits: list[AdhocHit]

    def to_json(self) -> dict[str, Any]:
        return {"query": {"mention": self.query.mention, "start": self.query.start, "end": self.query.end,
                          "context": self.query.text, "bm25_query": self.query_string},
                "hits": [hit.to_json() for hit in self.hits]}


@functools.lru_cache(maxsize=1)
def _lucene_analyzer() -> Any:
    from corefsearch.sparse.java import ensure_java

    ensure_java()
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    # The analyzer the index was built with (Anserini's default English, Porter stemmer).
    return Analyzer(get_lucene_analyzer())


def matched_spans(text: str, query_string: str) -> list[tuple[int, int]]:
    """Character spans of the words of ``text`` whose Lucene analysis meets the query's terms."""
    analyzer = _lucene_analyzer()
    terms = set(analyzer.analyze(query_string))
    spans = []
    for word in re.finditer(r"\w+", text):
        if terms.intersection(analyzer.analyze(word.group())):
            spans.append((word.start(), word.end()))
    return spans


def adhoc_query(index: Path, mention: str, context: str | None = None, occurrence: int | None = None,
                k: int = 10, options: BM25Options | None = None) -> AdhocResult:
    options = options or BM25Options()
    query = adhoc_query_record(mention, context, occurrence)
    occurrences = len(re.findall(re.escape(mention), query.text))
    query_string = formulate([query], options.query_format)[0]
    searcher = BM25Searcher(index, options)
    hits = searcher.search_one(query_string, k)
    results = []
    for rank, hit in enumerate(hits, start=1):
        stored = searcher.passage(hit.passage_id)
        results.append(AdhocHit(rank, hit.score, hit.passage_id, stored["title"], stored["text"],
                                matched_spans(stored["text"], query_string)))
    return AdhocResult(query, query_string, occurrences, results)
