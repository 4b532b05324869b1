"""BM25 (optionally RM3 or Rocchio, optionally field-weighted) search over a Lucene index built by
``corefsearch index``.

Both paths run Anserini, the engine inside Pyserini, through Pyserini's own class bridge
(``pyserini.pyclass``). Batch search hands whole query files to Anserini's
``SearchCollection``, which writes the run from Java: reading 500 hits per query back
through pyjnius one attribute at a time costs several times the search itself. Single
queries use Anserini's ``SimpleSearcher`` directly, the class Pyserini's ``LuceneSearcher``
wraps, because importing ``pyserini.search.lucene`` also loads torch and transformers for
its learned-sparse searchers (about 10 s) that BM25 does not need.

Field-weighted BM25 (``fields``, Sankepally et al. 2018) searches the ``sentence``, ``title``
and ``document`` fields of the fields index ``INDEX/lucene/fields/`` with a weight each
(Anserini's ``-fields``, a sum of the per-field BM25 scores times their weights).
Anserini's RM3 and Rocchio re-rankers always build their expanded query over ``contents``
and replace the first ranking with its results, so with ``fields`` the weights would only
pick the feedback passages; the two are therefore refused together rather than silently
meaning something else.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.progress import track
from corefsearch.base.schema import Hit, Query
from corefsearch.io.write import atomic_file
from corefsearch.sparse.formulation import QUERY_FORMATS, formulate
from corefsearch.sparse.index import FIELDS, FIELDS_DIR, LUCENE_DIR, load_lucene_manifest, require_fields
from corefsearch.sparse.java import ensure_java
from corefsearch.sparse.java_errors import (
    LUCENE_DEFAULT_MAX_CLAUSES,
    MAX_CLAUSES,
    distinct_terms,
    java_errors,
    java_stderr,
    raise_clause_limit,
    raise_on_java_trace,
)

SEARCH_FIELDS = ("contents", *FIELDS)


def parse_fields(spec: str) -> dict[str, float]:
    """``sentence=1,title=0.5,document=0.2`` -> ``{"sentence": 1.0, "title": 0.5, "document": 0.2}``."""
    weights: dict[str, float] = {}
    for part in spec.split(","):
        name, sep, raw = part.strip().partition("=")
        name = name.strip()
        if not sep or not name:
            raise InputError(f"--fields takes FIELD=WEIGHT pairs separated by commas (e.g. "
                             f"sentence=1,title=0.5,document=0.2), got {spec!r}")
        try:
            weight = float(raw)
        except ValueError:
            raise InputError(f"--fields: the weight of {name} must be a number, got {raw.strip()!r}") from None
        if name in weights:
            raise InputError(f"--fields names {name} twice")
        weights[name] = weight
    return weights


@dataclass
class BM25Options:
    """Retrieval options; the defaults are Anserini's BM25 and RM3 defaults."""

    query_format: str = field(default="mention+entities", metadata={"help": (
        "BM25 query: mention | mention+entities | sentence | context | document (the whole document of the query's "
        "passage, read from the index)")})
    k1: float = 0.9
    b: float = 0.4
    rm3: bool = field(default=False, metadata={"help": "RM3 pseudo-relevance feedback.", "option": "--rm3"})
    fb_terms: int = 10
    fb_docs: int = 10
    original_query_weight: float = 0.5
    threads: int = field(default=2, metadata={"help": "Search threads (BM25)."})
    # Rocchio pseudo-relevance feedback, with the defaults of Pyserini's LuceneSearcher.set_rocchio
    # (Anserini's SearchCollection has gamma 0.15; it only acts with use_negative, which is off).
    rocchio: bool = field(default=False, metadata={
        "help": "Rocchio pseudo-relevance feedback (Pyserini's defaults; not with --rm3).", "option": "--rocchio"})
    rocchio_top_fb_terms: int = 10
    rocchio_top_fb_docs: int = 10
    rocchio_bottom_fb_terms: int = 10
    rocchio_bottom_fb_docs: int = 10
    rocchio_alpha: float = 1.0
    rocchio_beta: float = 0.75
    rocchio_gamma: float = 0.0
    # Field-weighted BM25: {field: weight} over the index's sentence, title, document (and contents).
    fields: dict[str, float] | None = field(default=None, metadata={"help": (
        "Field-weighted BM25 over the index's fields, e.g. sentence=1,title=0.5,document=0.2 (fields: sentence, "
        "title, document, contents; not with --rm3/--rocchio)."), "option": "--fields"})

    def validate(self) -> None:
        if self.query_format not in QUERY_FORMATS:
            raise InputError(f"--query-format must be one of {', '.join(QUERY_FORMATS)}, "
                             f"got {self.query_format!r}")
        at_least_one("--threads", self.threads)
        if self.rm3 and self.rocchio:
            raise InputError("--rm3 and --rocchio are two kinds of query expansion: choose one")
        if self.fields is not None:
            if not self.fields:
                raise InputError("--fields names no field")
            unknown = [name for name in self.fields if name not in SEARCH_FIELDS]
            if unknown:
                raise InputError(f"--fields: unknown field {unknown[0]!r}; the fields are {', '.join(SEARCH_FIELDS)}")
            bad = [name for name, weight in self.fields.items() if not (math.isfinite(weight) and weight > 0)]
            if bad:
                raise InputError(f"--fields: the weight of {bad[0]} must be a positive number, "
                                 f"got {self.fields[bad[0]]}")
            if self.rm3 or self.rocchio:
                raise InputError("--fields does not go with --rm3 or --rocchio: Anserini's feedback re-ranks over "
                                 "`contents` alone and would discard the field weights")

    @property
    def tag(self) -> str:
        tag = f"bm25-{self.query_format.replace('+', '_')}" + ("-rm3" if self.rm3 else "")
        tag += "-rocchio" if self.rocchio else ""
        if self.fields:
            tag += "-fields_" + "_".join(f"{name}{weight:g}" for name, weight in self.fields.items())
        return tag

    def anserini_args(self) -> list[str]:
        args = ["-bm25", "-bm25.k1", str(self.k1), "-bm25.b", str(self.b)]
        if self.rm3:
            args += ["-rm3", "-rm3.fbTerms", str(self.fb_terms), "-rm3.fbDocs", str(self.fb_docs),
                     "-rm3.originalQueryWeight", str(self.original_query_weight)]
        if self.rocchio:
            args += ["-rocchio", "-rocchio.topFbTerms", str(self.rocchio_top_fb_terms),
                     "-rocchio.topFbDocs", str(self.rocchio_top_fb_docs),
                     "-rocchio.bottomFbTerms", str(self.rocchio_bottom_fb_terms),
                     "-rocchio.bottomFbDocs", str(self.rocchio_bottom_fb_docs),
                     "-rocchio.alpha", str(self.rocchio_alpha), "-rocchio.beta", str(self.rocchio_beta),
                     "-rocchio.gamma", str(self.rocchio_gamma)]
        if self.fields:
            args += ["-fields", *(f"{name}={weight}" for name, weight in self.fields.items())]
        return args


def _one_line(text: str) -> str:
    """A query string fit for Anserini's tab-separated topics file."""
    return " ".join(text.split())


class BM25Searcher:
    """BM25 over ``INDEX/lucene``; every query's own passage is left out of its results.

    A :class:`corefsearch.search.retriever.Retriever` (``search``, ``search_one``, ``passage``,
    ``describe``); ``manifest``: the Lucene index manifest when the caller has read it already
    (``open_retriever`` reads each manifest once).
    """

    name = "bm25"

    def __init__(self, index: Path, options: BM25Options | None = None,
                 manifest: dict[str, Any] | None = None) -> None:
        self.index = Path(index)
        self.manifest = manifest if manifest is not None else load_lucene_manifest(self.index)
        self.index_dir = self.index / LUCENE_DIR / "index"
        self.options = options or BM25Options()
        self.options.validate()
        if self.options.fields:
            require_fields(self.index, self.manifest, self.options.fields, "--fields")
        if self.options.query_format == "document":
            require_fields(self.index, self.manifest, ["document"], "--query-format document")
        # The fields of field-weighted BM25 are in an index of their own (see sparse/index.py).
        self.fields_dir = self.index / LUCENE_DIR / str(self.manifest.get("fields_index", FIELDS_DIR))
        self.search_dir = self.fields_dir if self.options.fields else self.index_dir
        ensure_java()
        from pyserini.pyclass import autoclass

        self._autoclass = autoclass
        self._simple: Any = None
        self._java_fields: Any = None
        self._readers: dict[Path, Any] = {}  # plain SimpleSearchers that read stored passages

    def _java(self, what: str) -> Any:
        """A Java exception as one ``InputError`` line, ``WHAT {index folder} (Class: message); rebuild …``."""
        dataset = self.manifest.get("dataset", "DATASET")
        return java_errors(f"{what} {self.index_dir}",
                           f"if the index is damaged or incomplete, rebuild it with "
                           f"`corefsearch index {dataset} --out {self.index} --overwrite`")

    def _simple_searcher(self) -> Any:
        if self._simple is None:
            raise_clause_limit()
            with self._java("cannot open the Lucene index"):
                searcher = self._autoclass("io.anserini.search.SimpleSearcher")(str(self.search_dir))
            searcher.set_bm25(float(self.options.k1), float(self.options.b))
            if self.options.rm3:
                # Collection class None: feedback terms come from the stored document vectors.
                searcher.set_rm3(None, int(self.options.fb_terms), int(self.options.fb_docs),
                                 float(self.options.original_query_weight), False, True)
            if self.options.rocchio:
                # As Pyserini's LuceneSearcher.set_rocchio: document vectors from the index, no negatives.
                o = self.options
                searcher.set_rocchio(None, int(o.rocchio_top_fb_terms), int(o.rocchio_top_fb_docs),
                                     int(o.rocchio_bottom_fb_terms), int(o.rocchio_bottom_fb_docs),
                                     float(o.rocchio_alpha), float(o.rocchio_beta), float(o.rocchio_gamma),
                                     False, False)
            if self.options.fields:
                java_map, java_float = self._autoclass("java.util.HashMap"), self._autoclass("java.lang.Float")
                self._java_fields = java_map()
                for name, weight in self.options.fields.items():
                    self._java_fields.put(name, java_float(float(weight)))
            self._simple = searcher
        return self._simple

    def _reader(self, directory: Path) -> Any:
        """A searcher of ``directory`` to read stored records from (the search one where it is the same)."""
        if directory == self.search_dir:
            return self._simple_searcher()
        if directory not in self._readers:
            with self._java("cannot open the Lucene index"):
                self._readers[directory] = self._autoclass("io.anserini.search.SimpleSearcher")(str(directory))
        return self._readers[directory]

    @property
    def num_passages(self) -> int:
        return int(self._simple_searcher().get_total_num_docs())

    @property
    def tag(self) -> str:
        """The TREC run tag."""
        return self.options.tag

    @property
    def passages_sha256(self) -> str | None:
        return self.manifest.get("passages_sha256")

    def describe(self) -> dict[str, Any]:
        """What a run's metadata records about the retriever."""
        return {"retriever": self.name, "options": asdict(self.options)}

    def warm(self) -> None:
        """Open the Lucene searcher now rather than at the first query."""
        self._simple_searcher()

    def search_one(self, query: Query, k: int, *, query_string: str | None = None) -> list[Hit]:
        """The top ``k`` passages of one query, its own passage left out: formulated under the searcher's query
        format, or searched as ``query_string`` when given (a BM25 string alone: :meth:`search_string`)."""
        return self.search_string(query_string if query_string is not None else self.formulate([query])[0], k,
                                  query.passage_id or None)

    def search_string(self, query_string: str, k: int, exclude: str | None = None) -> list[Hit]:
        """The top ``k`` passages of a BM25 query string; the passage ``exclude`` left out."""
        at_least_one("--k", k)
        searcher = self._simple_searcher()
        with self._java("BM25 search failed on the Lucene index"):
            if self._java_fields is not None:
                hits = searcher.search_fields(_one_line(query_string), self._java_fields, k + 1)
            else:
                hits = searcher.search(_one_line(query_string), k + 1)
            return [Hit(h.docid, float(h.score)) for h in hits if h.docid != exclude][:k]

    def passage(self, passage_id: str) -> dict[str, Any]:
        """The stored passage ``{"id", "title", "text"}``."""
        with self._java("cannot read a stored passage of the Lucene index"):
            document = self._reader(self.index_dir).doc(passage_id)
            raw = document.get("raw") if document is not None else None
        if document is None:
            raise InputError(f"passage {passage_id} is not in the index {self.index}")
        record = json.loads(raw)
        return {"id": record["id"], "title": record.get("title", ""), "text": record.get("text", "")}

    def contains(self, passage_ids: Sequence[str]) -> set[str]:
        """Those of ``passage_ids`` that are in the index (one stored-document lookup each)."""
        searcher = self._reader(self.index_dir)
        with self._java("cannot read a stored passage of the Lucene index"):
            return {pid for pid in dict.fromkeys(passage_ids) if searcher.doc(pid) is not None}

    def query_documents(self, queries: Sequence[Query]) -> list[str]:
        """The ``document`` query form: the whole document of each query's passage, read from the
        fields index: the passage's title, its text, then its ``document`` field (the other passages of
        its document, in document order; the order matters only where a long query is cut). An
        ad-hoc query (no passage) is its own context: the text it came with."""
        found: dict[str, str] = {}
        strings = []
        for query in queries:
            if not query.passage_id:
                strings.append(query.text)
                continue
            if query.passage_id not in found:
                with self._java("cannot read a stored passage of the Lucene index"):
                    document = self._reader(self.fields_dir).doc(query.passage_id)
                    raw = document.get("raw") if document is not None else None
                if document is None:
                    raise InputError(f"query {query.id}: its passage {query.passage_id} is not in the index "
                                     f"{self.index}, which --query-format document reads its document from")
                record = json.loads(raw)
                parts = [record.get("title", ""), record.get("sentence", ""), record.get("document", "")]
                found[query.passage_id] = "\n".join(part for part in parts if part)
            strings.append(found[query.passage_id])
        return strings

    def formulate(self, queries: Sequence[Query], query_format: str | None = None) -> list[str]:
        """The BM25 query string of each query under this searcher's query format (or ``query_format``)."""
        query_format = query_format or self.options.query_format
        if query_format == "document" and self.options.query_format != "document":
            require_fields(self.index, self.manifest, ["document"], "--query-format document")
        return formulate(queries, query_format, documents=self.query_documents)

    def search_batch(self, query_strings: Sequence[str], qids: Sequence[str], k: int,
                     exclude: Sequence[str | None]) -> dict[str, list[Hit]]:
        """Search many queries at once through Anserini's ``SearchCollection``."""
        raise_clause_limit()
        search_collection = self._autoclass("io.anserini.search.SearchCollection")
        with tempfile.TemporaryDirectory(prefix="corefsearch-bm25-") as tmp:
            topics, output = Path(tmp) / "topics.tsv", Path(tmp) / "run.txt"
            with topics.open("w", encoding="utf-8") as handle:
                for qid, string in zip(qids, query_strings, strict=True):
                    handle.write(f"{qid}\t{_one_line(string)}\n")
            # Anserini searches in a thread pool: a query that fails in a worker is printed as a
            # stack trace and left out of the run, and main() returns normally; so Java's stderr
            # is captured and a trace in it is an error (no run that silently lacks queries).
            with self._java("BM25 search failed on the Lucene index"), java_stderr() as printed:
                search_collection.main(["-index", str(self.search_dir), "-topics", str(topics),
                                        "-topicReader", "TsvString", "-output", str(output),
                                        "-hits", str(k + 1), "-threads", str(self.options.threads),
                                        "-runtag", "corefsearch", "-quiet", *self.options.anserini_args()])
            results: dict[str, list[Hit]] = {qid: [] for qid in qids}
            if output.exists():
                with output.open(encoding="utf-8") as handle:
                    for line in handle:
                        qid, _, passage_id, _rank, score, _tag = line.split()
                        results[qid].append(Hit(passage_id, float(score)))
            unanswered = sum(1 for hits in results.values() if not hits)
            raise_on_java_trace(printed(), f"BM25 search failed in Anserini on the Lucene index {self.index_dir} "
                                f"for some of {len(qids):,} queries ({unanswered:,} without results)",
                                "nothing was written; if the index is damaged or incomplete, rebuild it with "
                                f"`corefsearch index {self.manifest.get('dataset', 'DATASET')} --out {self.index} "
                                "--overwrite`")
        own = dict(zip(qids, exclude, strict=True))
        return {qid: [h for h in hits if h.passage_id != own[qid]][:k] for qid, hits in results.items()}

    def search(self, queries: Sequence[Query], k: int, batch_size: int = 1000) -> Iterator[tuple[Query, list[Hit]]]:
        """Search every query (in batches, under a progress bar), its own passage removed."""
        at_least_one("--k", k)
        strings = self.formulate(queries)
        warn_long_queries(strings, [q.id for q in queries])
        starts = range(0, len(queries), batch_size)
        for start in track(starts, f"Searching (BM25, {self.options.query_format})", total=len(starts)):
            chunk = queries[start:start + batch_size]
            hits = self.search_batch(strings[start:start + batch_size], [q.id for q in chunk], k,
                                     [q.passage_id for q in chunk])
            for query in chunk:
                yield query, hits[query.id]


def warn_long_queries(strings: Sequence[str], qids: Sequence[str]) -> int:
    """Warn when queries have more distinct terms than Lucene's default clause limit (1,024): they
    are searched with all their terms, the limit being raised (see ``java_errors``); returns their number."""
    import warnings

    long = [(qid, n) for qid, n in ((qid, distinct_terms(s)) for qid, s in zip(qids, strings, strict=True))
            if n > LUCENE_DEFAULT_MAX_CLAUSES]
    if long:
        qid, n = max(long, key=lambda pair: pair[1])
        warnings.warn(f"{len(long):,} BM25 quer{'y has' if len(long) == 1 else 'ies have'} more than "
                      f"{LUCENE_DEFAULT_MAX_CLAUSES:,} distinct terms, Lucene's default limit (the longest: {qid}, "
                      f"about {n:,}); corefsearch raised the limit to {MAX_CLAUSES:,} terms, so they are searched "
                      "with all their terms (slower; Pyserini's own searchers would refuse them)", stacklevel=3)
    return len(long)


def save_topics_file(path: Path, queries: list[Query], strings: list[str]) -> int:
    """Write the BM25 query ``strings`` of the ``queries`` as a Pyserini/Anserini topics TSV
    (``qid<TAB>query``, whitespace folded to single spaces, as corefsearch hands them to
    Anserini), so that ``python -m pyserini.search.lucene --topics FILE.tsv --bm25`` searches
    with the same strings. Returns the number of topics written."""

    rows = 0
    with atomic_file(Path(path)) as handle:
        for query, string in zip(queries, strings, strict=True):
            if "\t" in query.id or "\n" in query.id:
                raise InputError(f"query id {query.id!r} holds a tab or line break: it cannot go in a topics TSV")
            handle.write(f"{query.id}\t{_one_line(string)}\n")
            rows += 1
    return rows
