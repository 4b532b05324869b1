"""BM25 (optionally RM3) search over a Lucene index built by ``corefsearch index``.

Both paths run Anserini, the engine inside Pyserini, through Pyserini's own class bridge
(``pyserini.pyclass``). Batch search hands whole query files to Anserini's
``SearchCollection``, which writes the run from Java: reading 500 hits per query back
through pyjnius one attribute at a time costs several times the search itself. Single
queries use Anserini's ``SimpleSearcher`` directly, the class Pyserini's ``LuceneSearcher``
wraps, because importing ``pyserini.search.lucene`` also loads torch and transformers for
its learned-sparse searchers (about 10 s) that BM25 does not need.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.errors import InputError
from corefsearch.io import RunRow
from corefsearch.progress import track
from corefsearch.schema import Query
from corefsearch.sparse.formulation import QUERY_FORMATS, formulate
from corefsearch.sparse.index import LUCENE_DIR, load_lucene_manifest


@dataclass
class BM25Options:
    """Retrieval options; the defaults are Anserini's BM25 and RM3 defaults."""

    query_format: str = "mention+entities"
    k1: float = 0.9
    b: float = 0.4
    rm3: bool = False
    fb_terms: int = 10
    fb_docs: int = 10
    original_query_weight: float = 0.5
    threads: int = 2

    def validate(self) -> None:
        if self.query_format not in QUERY_FORMATS:
            raise InputError(f"--query-format must be one of {', '.join(QUERY_FORMATS)}, "
                             f"got {self.query_format!r}")
        if self.threads < 1:
            raise InputError(f"--threads must be at least 1, got {self.threads}")

    @property
    def tag(self) -> str:
        return f"bm25-{self.query_format.replace('+', '_')}" + ("-rm3" if self.rm3 else "")

    def anserini_args(self) -> list[str]:
        args = ["-bm25", "-bm25.k1", str(self.k1), "-bm25.b", str(self.b)]
        if self.rm3:
            args += ["-rm3", "-rm3.fbTerms", str(self.fb_terms), "-rm3.fbDocs", str(self.fb_docs),
                     "-rm3.originalQueryWeight", str(self.original_query_weight)]
        return args


@dataclass
class Hit:
    passage_id: str
    score: float


def _one_line(text: str) -> str:
    """A query string fit for Anserini's tab-separated topics file."""
    return " ".join(text.split())


class BM25Searcher:
    """BM25 over ``INDEX/lucene``; every query's own passage is left out of its results."""

    def __init__(self, index: Path, options: BM25Options | None = None) -> None:
        from corefsearch.sparse.java import ensure_java

        self.index = Path(index)
        self.manifest = load_lucene_manifest(self.index)
        self.index_dir = self.index / LUCENE_DIR / "index"
        self.options = options or BM25Options()
        self.options.validate()
        ensure_java()
        from pyserini.pyclass import autoclass

        self._autoclass = autoclass
        self._simple: Any = None

    def _simple_searcher(self) -> Any:
        if self._simple is None:
            searcher = self._autoclass("io.anserini.search.SimpleSearcher")(str(self.index_dir))
            searcher.set_bm25(float(self.options.k1), float(self.options.b))
            if self.options.rm3:
                # Collection class None: feedback terms come from the stored document vectors.
                searcher.set_rm3(None, int(self.options.fb_terms), int(self.options.fb_docs),
                                 float(self.options.original_query_weight), False, True)
            self._simple = searcher
        return self._simple

    @property
    def num_passages(self) -> int:
        return int(self._simple_searcher().get_total_num_docs())

    def search_one(self, query_string: str, k: int, exclude: str | None = None) -> list[Hit]:
        if k < 1:
            raise InputError(f"--k must be at least 1, got {k}")
        hits = self._simple_searcher().search(_one_line(query_string), k + 1)
        return [Hit(h.docid, float(h.score)) for h in hits if h.docid != exclude][:k]

    def passage(self, passage_id: str) -> dict[str, Any]:
        """The stored passage ``{"id", "title", "text"}``."""
        document = self._simple_searcher().doc(passage_id)
        if document is None:
            raise InputError(f"passage {passage_id} is not in the index {self.index}")
        record = json.loads(document.get("raw"))
        return {"id": record["id"], "title": record.get("title", ""), "text": record.get("text", "")}

    def search_batch(self, query_strings: Sequence[str], qids: Sequence[str], k: int,
                     exclude: Sequence[str | None]) -> dict[str, list[Hit]]:
        """Search many queries at once through Anserini's ``SearchCollection``."""
        search_collection = self._autoclass("io.anserini.search.SearchCollection")
        with tempfile.TemporaryDirectory(prefix="corefsearch-bm25-") as tmp:
            topics, output = Path(tmp) / "topics.tsv", Path(tmp) / "run.txt"
            with topics.open("w", encoding="utf-8") as handle:
                for qid, string in zip(qids, query_strings, strict=True):
                    handle.write(f"{qid}\t{_one_line(string)}\n")
            search_collection.main(["-index", str(self.index_dir), "-topics", str(topics),
                                    "-topicReader", "TsvString", "-output", str(output),
                                    "-hits", str(k + 1), "-threads", str(self.options.threads),
                                    "-runtag", "corefsearch", "-quiet", *self.options.anserini_args()])
            results: dict[str, list[Hit]] = {qid: [] for qid in qids}
            with output.open(encoding="utf-8") as handle:
                for line in handle:
                    qid, _, passage_id, _rank, score, _tag = line.split()
                    results[qid].append(Hit(passage_id, float(score)))
        own = dict(zip(qids, exclude, strict=True))
        return {qid: [h for h in hits if h.passage_id != own[qid]][:k] for qid, hits in results.items()}

    def search(self, queries: Sequence[Query], k: int, batch_size: int = 1000) -> Iterator[tuple[Query, list[Hit]]]:
        """Search every query (in batches, under a progress bar), its own passage removed."""
        if k < 1:
            raise InputError(f"--k must be at least 1, got {k}")
        strings = formulate(queries, self.options.query_format)
        starts = range(0, len(queries), batch_size)
        for start in track(starts, f"Searching (BM25, {self.options.query_format})", total=len(starts)):
            chunk = queries[start:start + batch_size]
            hits = self.search_batch(strings[start:start + batch_size], [q.id for q in chunk], k,
                                     [q.passage_id for q in chunk])
            for query in chunk:
                yield query, hits[query.id]


def run_rows(results: Iterator[tuple[Query, list[Hit]]], tag: str) -> Iterator[RunRow]:
    for query, hits in results:
        for rank, hit in enumerate(hits, start=1):
            yield RunRow(query.id, hit.passage_id, rank, hit.score, tag)
