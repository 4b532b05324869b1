"""Search end to end: queries in, TREC run out (``search``), or one ad-hoc mention (``query``),
with BM25, the dense retriever or both fused (``--retriever bm25|dense|hybrid``); and the
``index`` command's choice between the Lucene and the dense index."""

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
from corefsearch.fusion import FusionOptions
from corefsearch.io import Output, atomic_file, sha256_file, write_run, writes_outputs
from corefsearch.schema import Query
from corefsearch.sparse.index import LUCENE_DIR, check_index_matches_dataset, load_lucene_manifest
from corefsearch.sparse.search import BM25Options, BM25Searcher, run_rows

RETRIEVERS = ("bm25", "dense", "hybrid")
RERANK_FUSIONS = ("reader", "rrf")


@dataclass
class RetrievalOptions:
    """Which retriever answers (``bm25``, ``dense`` or ``hybrid``) and the dense and fusion settings."""

    retriever: str = "bm25"
    encoder: str | None = None  # default: the encoder the dense index was built with
    device: str = "auto"
    fusion: FusionOptions = field(default_factory=FusionOptions)

    def validate(self) -> None:
        if self.retriever not in RETRIEVERS:
            raise InputError(f"--retriever must be one of {', '.join(RETRIEVERS)}, got {self.retriever!r}")
        self.fusion.validate()
        if self.uses_dense:
            from corefsearch.dense.encoder import check_device

            check_device(self.device)

    @property
    def uses_bm25(self) -> bool:
        return self.retriever in ("bm25", "hybrid")

    @property
    def uses_dense(self) -> bool:
        return self.retriever in ("dense", "hybrid")


@dataclass
class ReaderOptions:
    """``--reader MODEL_DIR --rerank-k N``: re-rank the top N retrieved passages and mark spans."""

    model: Path
    rerank_k: int = 50
    # windows per forward pass at most (None or 0: no cap); a query's windows are read in length
    # buckets either way (Reader, reader/inputs.length_buckets)
    batch_size: int | None = None
    backend: str = "torch"  # the encoder's runtime: torch | onnx | onnx-int8 (MODEL_DIR/onnx/, export-onnx)
    threads: int | None = None  # ONNX Runtime intra-op threads (default: torch's)
    device: str = "auto"
    # reader: the reader's order; rrf: reciprocal rank fusion with the retriever's; None: the fusion
    # `train reader` recorded in the reader's folder (corefsearch_reader.json), see fusion_for
    fusion: str | None = None

    def validate(self) -> None:
        if self.rerank_k < 1:
            raise InputError(f"--rerank-k must be at least 1, got {self.rerank_k}")
        from corefsearch.dense.encoder import check_device

        check_device(self.device)
        if self.fusion is not None and self.fusion not in RERANK_FUSIONS:
            raise InputError(f"--rerank-fusion must be one of {', '.join(RERANK_FUSIONS)}, got {self.fusion!r}")
        if self.batch_size is not None and self.batch_size < 0:
            raise InputError(f"reader batch size must be at least 1 (0: no cap), got {self.batch_size}")
        from corefsearch.dense.encoder import check_model_folder
        from corefsearch.onnx_backend import check_backend_device, check_onnx_export
        from corefsearch.reader.model import READER_CONFIG

        check_backend_device(self.backend, self.device)
        check_model_folder(Path(self.model), "--reader")
        if self.backend != "torch" and (Path(self.model) / READER_CONFIG).is_file():  # else: "not a reader"
            check_onnx_export(Path(self.model), self.backend)

    def load(self) -> Any:
        from corefsearch.reader.read import Reader

        return Reader.load(Path(self.model), self.device, self.batch_size, self.backend, self.threads)

    def fusion_for(self, loaded: Any) -> tuple[str, bool]:
        """The fusion to re-rank with and whether it comes from the reader's folder: ``--rerank-fusion``
        when given, else the one ``train reader`` recorded (the better on dev; ``reader`` in a
        folder written before it was recorded)."""
        if self.fusion is not None:
            return self.fusion, False
        return loaded.config.fusion, True


def spans_path_for(run_path: Path) -> Path:
    """Where a run's spans go by default: ``RUN.spans.jsonl`` beside ``RUN``."""
    return Path(run_path).with_name(Path(run_path).name + ".spans.jsonl")


def rerank_hits(reader: Any, query: Query, hits: list[Any], texts: dict[str, dict[str, Any]],
                rerank_k: int, fusion: str = "reader") -> tuple[list[Any], list[Any]]:
    """The top ``rerank_k`` hits re-ranked, then the rest in the retriever's order with scores
    below them (a TREC run is ordered by score); and the reader's hits (with their spans).
    ``fusion="reader"`` orders the re-ranked hits by the reader's score; ``"rrf"`` by reciprocal
    rank fusion of the reader's and the retriever's ranks (the retriever keeps a say)."""
    head = hits[:rerank_k]
    read = reader.read(query, [(h.passage_id, texts[h.passage_id]["text"]) for h in head])
    return order_reranked(read, hits, rerank_k, fusion), read


def order_reranked(read: list[Any], hits: list[Any], rerank_k: int, fusion: str = "reader") -> list[Any]:
    """A query's final ranking from the reader's hits of its top ``rerank_k`` and the retriever's ``hits``."""
    from corefsearch.sparse.search import Hit

    if fusion == "rrf":
        from corefsearch.fusion import reciprocal_rank_fusion

        reader_ranking = {"q": [Hit(r.passage_id, r.score) for r in read]}
        retriever_ranking = {"q": list(hits[:rerank_k])}
        ranked = reciprocal_rank_fusion([reader_ranking, retriever_ranking], k=len(read))["q"]
    else:
        ranked = [Hit(r.passage_id, r.score) for r in read]
    floor = min((h.score for h in ranked), default=0.0)
    return ranked + [Hit(h.passage_id, floor - 1.0 - i) for i, h in enumerate(hits[rerank_k:])]


def _check_indexes(index: Path, retrieval: RetrievalOptions) -> None:
    """Fail before any work when an index the retriever needs is missing (and say what to run)."""
    from corefsearch.dense.indexing import load_dense_manifest

    needed = [(load_lucene_manifest, retrieval.uses_bm25), (load_dense_manifest, retrieval.uses_dense)]
    for load, wanted in needed:
        if not wanted:
            continue
        try:
            load(index)
        except MissingArtefactError as err:
            if retrieval.retriever != "hybrid":
                raise
            raise MissingArtefactError(f"--retriever hybrid needs a Lucene and a dense index in {index}: "
                                       f"{err}") from None


@dataclass
class _Searchers:
    """The searcher(s) a retrieval needs, the run tag, and what the run metadata records about them."""

    bm25: BM25Searcher | None
    dense: Any  # DenseSearcher | None
    hybrid: Any  # HybridSearcher | None
    tag: str
    fields: dict[str, Any]

    @property
    def main(self) -> Any:
        return self.hybrid or self.dense or self.bm25

    @property
    def passages_sha256(self) -> str | None:
        return (self.bm25 or self.dense).manifest.get("passages_sha256")


def _searchers(index: Path, options: BM25Options, retrieval: RetrievalOptions) -> _Searchers:
    bm25 = dense = hybrid = None
    fields: dict[str, Any] = {"retriever": retrieval.retriever,
                              "options": asdict(options) if retrieval.uses_bm25 else None}
    tag = options.tag
    if retrieval.uses_dense:
        from corefsearch.dense.search import DenseSearcher, describe

        dense = DenseSearcher(index, retrieval.encoder, device=retrieval.device)
        fields["dense"] = describe(dense)
        dense_tag = f"dense-{dense.parameters['type']}"
        tag = dense_tag
    if retrieval.uses_bm25:
        bm25 = BM25Searcher(index, options)
    if retrieval.retriever == "hybrid":
        from corefsearch.fusion.hybrid import HybridSearcher

        hybrid = HybridSearcher(bm25, dense, retrieval.fusion)  # type: ignore[arg-type]
        fields["fusion"] = retrieval.fusion.to_json()  # + "depth": k, set by the search
        tag = f"hybrid-{retrieval.fusion.tag}-{options.tag}-{dense_tag}"
    return _Searchers(bm25, dense, hybrid, tag, fields)


@dataclass
class DenseIndexOptions:
    """``corefsearch index --dense``: the encoder, the FAISS type and how to split the encoding."""

    encoder: str | None = None
    faiss_type: str = "flat"
    batch_size: int = 64
    shard: str | None = None  # "I/N"
    merge_shards: int | None = None
    device: str = "auto"
    chunk_size: int = 8192  # passages per saved chunk: the unit of resumption and of shards

    def validate(self) -> None:
        """Every option checked before any work (the dense index builder checks them again)."""
        from corefsearch.dense.encoder import check_device
        from corefsearch.dense.faiss_index import check_faiss_type
        from corefsearch.dense.indexing import parse_shard

        check_faiss_type(self.faiss_type)
        check_device(self.device)
        for option, value in (("--batch-size", self.batch_size), ("--chunk-size", self.chunk_size)):
            if value < 1:
                raise InputError(f"{option} must be at least 1, got {value}")
        if self.merge_shards is not None and self.merge_shards < 1:
            raise InputError(f"--merge-shards takes the number of shards N (at least 1), got {self.merge_shards}")
        if self.shard is not None:
            parse_shard(self.shard)


def index_dataset(dataset_dir: Path, out: Path, dense: DenseIndexOptions | None = None, threads: int = 2,
                  overwrite: bool = False, fields: bool = False) -> Any:
    """The Lucene index (``dense=None``) or the dense index (or one shard of it, or the merge of
    the shards) of a dataset; both can live in the same ``out`` directory."""
    if dense is None:
        from corefsearch.sparse.index import build_lucene_index

        return build_lucene_index(dataset_dir, out, threads=threads, overwrite=overwrite, fields=fields)
    dense.validate()
    from corefsearch.dense.indexing import build_dense_index, merge_dense_shards, parse_shard

    if dense.merge_shards is not None:
        if dense.shard is not None:
            raise InputError("--shard and --merge-shards do not go together: encode each shard with "
                             "--shard I/N, then merge them with --merge-shards N")
        return merge_dense_shards(dataset_dir, out, dense.merge_shards, faiss_type=dense.faiss_type,
                                  encoder=dense.encoder, device=dense.device, overwrite=overwrite)
    if not dense.encoder:
        raise InputError("--dense needs --encoder: a retriever folder from `corefsearch train retriever`, "
                         "a Hugging Face model name or folder, or `default` (all-MiniLM-L6-v2, zero-shot)")
    shard = parse_shard(dense.shard) if dense.shard is not None else None
    return build_dense_index(dataset_dir, out, dense.encoder, faiss_type=dense.faiss_type,
                             batch_size=dense.batch_size, shard=shard, device=dense.device, overwrite=overwrite,
                             chunk_size=dense.chunk_size)


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


def _checked_options(options: BM25Options | None, retrieval: RetrievalOptions | None,
                     k: int) -> tuple[BM25Options, RetrievalOptions]:
    options = options or BM25Options()
    retrieval = retrieval or RetrievalOptions()
    retrieval.validate()
    options.validate()
    if k < 1:
        raise InputError(f"--k must be at least 1, got {k}")
    return options, retrieval


def _search_outputs(a: dict[str, Any]) -> list[Output]:
    """What ``search`` writes (the run, and with a reader its spans) and what it reads."""
    reader = a["reader"]
    inputs = {"--index": a["index"], "--queries": a["queries_path"],
              "--reader": reader.model if reader is not None else None}
    outputs = [Output(a["out"], "--out", inputs=inputs)]
    if reader is not None:
        spans = Path(a["spans_out"]) if a["spans_out"] is not None else spans_path_for(a["out"])
        outputs.append(Output(spans, "--spans-out", inputs={**inputs, "--out": a["out"]}))
    if a.get("save_topics") is not None:
        outputs.append(Output(a["save_topics"], "--save-topics", inputs={**inputs, "--out": a["out"]}))
    return outputs


@writes_outputs(_search_outputs)
def search_to_run(index: Path, queries_path: Path, out: Path, k: int = 500,
                  options: BM25Options | None = None, retrieval: RetrievalOptions | None = None,
                  reader: ReaderOptions | None = None, spans_out: Path | None = None,
                  save_topics: Path | None = None) -> SearchSummary:
    """Search every query of ``queries_path`` and write the TREC run ``out`` atomically; with a
    ``reader``, re-rank each query's top ``reader.rerank_k`` and write their spans to
    ``spans_out`` (default ``OUT.spans.jsonl``); with ``save_topics``, also write the BM25
    query strings as a Pyserini topics file (``qid<TAB>query``)."""
    options, retrieval = _checked_options(options, retrieval, k)
    if save_topics is not None and not retrieval.uses_bm25:
        raise InputError("--save-topics writes the BM25 query strings: use it with --retriever bm25 or hybrid")
    if reader is not None:
        reader.validate()
    elif spans_out is not None:
        raise InputError("--spans-out names the spans file of --reader: add --reader MODEL_DIR")
    if not Path(queries_path).exists():  # a folder is named as such by read_queries
        raise MissingArtefactError(f"{queries_path}: no such queries file; a dataset's queries are "
                                   "DATASET/queries/{train,dev,test}.jsonl, written by `corefsearch build-dataset "
                                   "--format ecbplus|wec|coresearch|generic INPUT --out DATASET`")
    queries = read_queries(queries_path)
    if not queries:
        raise InputError(f"{queries_path}: holds no queries")
    _check_indexes(index, retrieval)
    dataset_dir = _dataset_of(queries_path)
    if dataset_dir is not None:
        if retrieval.uses_bm25:
            check_index_matches_dataset(index, dataset_dir)
        if retrieval.uses_dense:
            from corefsearch.dense.indexing import check_dense_index_matches_dataset

            check_dense_index_matches_dataset(index, dataset_dir)
    searchers = _searchers(index, options, retrieval)
    check_query_passages(queries, searchers, queries_path, index)
    if "fusion" in searchers.fields:
        searchers.fields["fusion"]["depth"] = k  # each retriever's list, before fusing
    loaded_reader = reader.load() if reader is not None else None
    if save_topics is not None:
        save_topics_file(save_topics, queries, searchers.bm25.formulate(queries))  # type: ignore[union-attr]
    started = time.perf_counter()
    results = searchers.main.search(queries, k)
    tag = searchers.tag
    if loaded_reader is not None and reader is not None:
        from corefsearch.io import write_jsonl
        from corefsearch.progress import track

        retrieved = list(results)
        texts = _stored_passages(index, sorted({h.passage_id for _, hits in retrieved
                                                for h in hits[:reader.rerank_k]}), searchers)
        reranked, span_records = [], []
        reading = time.perf_counter()
        fusion, fusion_from_model = reader.fusion_for(loaded_reader)
        for query, hits in track(retrieved, "Re-ranking"):
            ranked, read = rerank_hits(loaded_reader, query, hits, texts, reader.rerank_k, fusion)
            reranked.append((query, ranked))
            span_records.extend(hit.to_json(query.id) for hit in read)
        tag = f"{tag}+reader-{loaded_reader.config.head}" + ("-rrf" if fusion == "rrf" else "")
        spans_file = Path(spans_out) if spans_out is not None else spans_path_for(out)
        write_jsonl(spans_file, span_records)  # before the run: a run with --reader always has its spans
        searchers.fields["reader"] = {"model": str(Path(reader.model).resolve()), "rerank_k": reader.rerank_k,
                                      "head": loaded_reader.config.head, "markers": loaded_reader.config.markers,
                                      "fusion": fusion, "fusion_from": "model" if fusion_from_model
                                      else "--rerank-fusion",
                                      "backend": reader.backend, "spans": str(spans_file.resolve()),
                                      "seconds": round(time.perf_counter() - reading, 3)}
        results = iter(reranked)
    rows = write_run(out, run_rows(results, tag))
    summary = SearchSummary(len(queries), rows, time.perf_counter() - started, Path(out))
    write_run_metadata(run_metadata_path(out), {
        **searchers.fields, "k": k, "tag": tag,
        "index": str(Path(index).resolve()), "passages_sha256": searchers.passages_sha256,
        "queries": str(Path(queries_path).resolve()), "queries_sha256": sha256_file(queries_path),
        "n_queries": summary.queries, "rows": rows, "seconds": round(summary.seconds, 3)})
    return summary


def save_topics_file(path: Path, queries: list[Query], strings: list[str]) -> int:
    """Write the BM25 query ``strings`` of the ``queries`` as a Pyserini/Anserini topics TSV
    (``qid<TAB>query``, whitespace folded to single spaces, as corefsearch hands them to
    Anserini), so that ``python -m pyserini.search.lucene --topics FILE.tsv --bm25`` searches
    with the same strings. Returns the number of topics written."""
    from corefsearch.sparse.search import _one_line

    rows = 0
    with atomic_file(Path(path)) as handle:
        for query, string in zip(queries, strings, strict=True):
            if "\t" in query.id or "\n" in query.id:
                raise InputError(f"query id {query.id!r} holds a tab or line break: it cannot go in a topics TSV")
            handle.write(f"{query.id}\t{_one_line(string)}\n")
            rows += 1
    return rows


def check_query_passages(queries: list[Query], searchers: _Searchers, queries_path: Path, index: Path) -> None:
    """Each query's own passage is left out of its results, so it should be in the index. When
    none is, the queries belong to another dataset: an error. When some are not (a queries file
    edited or merged by hand), a warning with their count: they are still searched, and nothing
    is left out of their results."""
    import warnings

    wanted = [q.passage_id for q in queries if q.passage_id]
    if not wanted:
        return
    present = (set(searchers.dense.ids) if searchers.dense is not None
               else searchers.bm25.contains(wanted))  # type: ignore[union-attr]
    missing = [q for q in queries if q.passage_id and q.passage_id not in present]
    if not missing:
        return
    example = f"e.g. passage {missing[0].passage_id} of query {missing[0].id}"
    if len(missing) == len(wanted):
        raise InputError(f"{queries_path}: none of the passages of its {len(wanted):,} queries is in the index "
                         f"{index} ({example}): the queries come from another dataset; search the queries of the "
                         "dataset the index was built from, or index this one")
    warnings.warn(f"{queries_path}: {len(missing):,} of {len(wanted):,} queries name a passage that is not in the "
                  f"index {index} ({example}); they are searched all the same, but no own passage is left out of "
                  "their results", stacklevel=3)


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
    span: tuple[int, int] | None = None  # the reader's coreferring span (characters of text)
    # A query of a dataset (--dataset --qid): relevant in its qrels, and the mentions of its cluster
    relevant: bool | None = None
    gold_mentions: list[tuple[int, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        record = {"rank": self.rank, "score": self.score, "passage_id": self.passage_id, "title": self.title,
                  "text": self.text, "matched": [list(span) for span in self.matched]}
        if self.span is not None:
            start, end = self.span
            record["span"] = {"start": start, "end": end, "text": self.text[start:end]}
        if self.relevant is not None:
            record["relevant"] = self.relevant
            record["gold_mentions"] = [{"start": start, "end": end, "text": self.text[start:end]}
                                       for start, end in self.gold_mentions]
        return record


@dataclass
class AdhocResult:
    query: Query
    query_string: str | None  # the BM25 query (None for the dense retriever alone)
    occurrences: int
    hits: list[AdhocHit]
    retriever: str = "bm25"
    encoder: str | None = None  # the dense encoder's reference (dense, hybrid)
    fusion: str | None = None  # rrf | interpolate (hybrid)
    reader: str | None = None  # the reader's folder (--reader)
    rerank_fusion: str | None = None  # with a reader: reader | rrf (--rerank-fusion, or the reader's recorded one)
    split: str | None = None  # a query of a dataset: its split ...
    relevant_total: int | None = None  # ... and how many passages its qrels hold relevant

    def to_json(self) -> dict[str, Any]:
        query: dict[str, Any] = {"mention": self.query.mention, "start": self.query.start, "end": self.query.end,
                                 "context": self.query.text, "bm25_query": self.query_string}
        if self.split is not None:
            query = {"id": self.query.id, "split": self.split, "passage_id": self.query.passage_id,
                     "cluster_id": self.query.cluster_id, **query, "relevant_passages": self.relevant_total}
        return {"query": query, "retriever": self.retriever, "encoder": self.encoder, "fusion": self.fusion,
                "reader": self.reader, "rerank_fusion": self.rerank_fusion,
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


def _query_of(mention: str | None, context: str | None, occurrence: int | None, dataset: Path | None,
              qid: str | None) -> tuple[Query, int, Any]:
    """The query to answer, how often its mention occurs in its text, and (``--qid``) its ``DatasetQuery``."""
    if qid is None:
        if dataset is not None:
            raise InputError("--dataset names the dataset of --qid: add --qid ID (a query id of its queries files)")
        if mention is None:
            raise InputError("give --mention (and --context), or a dataset query with --dataset DATASET --qid ID")
        query = adhoc_query_record(mention, context, occurrence)
        return query, len(re.findall(re.escape(mention), query.text)), None
    given = [option for option, value in (("--mention", mention), ("--context", context),
                                          ("--occurrence", occurrence)) if value is not None]
    if given:
        raise InputError(f"--qid takes the query's mention and context from the dataset: leave out {given[0]}")
    if dataset is None:
        raise InputError("--qid needs the dataset it is a query of: add --dataset DATASET")
    from corefsearch.datasets.lookup import find_query

    found = find_query(dataset, qid)
    return found.query, 1, found


def adhoc_query(index: Path, mention: str | None = None, context: str | None = None, occurrence: int | None = None,
                k: int = 10, options: BM25Options | None = None,
                retrieval: RetrievalOptions | None = None, reader: ReaderOptions | None = None,
                dataset: Path | None = None, qid: str | None = None) -> AdhocResult:
    """The top ``k`` passages for one mention; with a ``reader``, the retriever's top
    ``reader.rerank_k`` re-ranked, each with its coreferring span.

    ``dataset`` and ``qid`` (instead of ``mention`` and ``context``) answer a query of a dataset
    (its own passage left out, as in ``search``) and mark each hit relevant or not (its qrels)
    with the mentions of the query's cluster in it (``AdhocHit.relevant``, ``gold_mentions``).
    """
    options, retrieval = _checked_options(options, retrieval, k)
    if reader is not None:
        reader.validate()
    query, occurrences, found = _query_of(mention, context, occurrence, dataset, qid)
    _check_indexes(index, retrieval)
    if dataset is not None:  # gold offsets are into the dataset's passages: the index must hold the same
        if retrieval.uses_bm25:
            check_index_matches_dataset(index, dataset)
        if retrieval.uses_dense:
            from corefsearch.dense.indexing import check_dense_index_matches_dataset

            check_dense_index_matches_dataset(index, dataset)
    loaded_reader = reader.load() if reader is not None else None
    searchers = _searchers(index, options, retrieval)
    query_string = searchers.bm25.formulate([query])[0] if searchers.bm25 is not None else None
    if query_string is not None:
        from corefsearch.sparse.search import warn_long_queries

        warn_long_queries([query_string], ["--context"])
    depth = max(k, reader.rerank_k) if reader is not None else k
    if searchers.hybrid is not None:
        hits = searchers.hybrid.search_one(query, query_string, depth)
    elif searchers.dense is not None:
        hits = searchers.dense.search_one(query, depth)
    else:
        hits = searchers.bm25.search_one(query_string, depth, exclude=query.passage_id or None)  # type: ignore[union-attr]
    spans: dict[str, tuple[int, int]] = {}
    rerank_fusion = None
    if loaded_reader is not None and reader is not None:
        texts = _stored_passages(index, [hit.passage_id for hit in hits[:reader.rerank_k]], searchers)
        rerank_fusion = reader.fusion_for(loaded_reader)[0]
        hits, read = rerank_hits(loaded_reader, query, hits, texts, reader.rerank_k, rerank_fusion)
        spans = {r.passage_id: (r.start, r.end) for r in read}
    hits = hits[:k]
    stored = _stored_passages(index, [hit.passage_id for hit in hits], searchers)
    results = []
    for rank, hit in enumerate(hits, start=1):
        passage = stored[hit.passage_id]
        # Matched-term highlighting is BM25's (also in hybrid); dense scores match no terms.
        matched = matched_spans(passage["text"], query_string) if query_string is not None else []
        results.append(AdhocHit(rank, hit.score, hit.passage_id, passage["title"], passage["text"], matched,
                                spans.get(hit.passage_id)))
    if found is not None and dataset is not None:
        from corefsearch.datasets.lookup import cluster_mentions

        gold = cluster_mentions(dataset, {hit.passage_id for hit in results if hit.passage_id in found.relevant},
                                query.cluster_id)
        for hit in results:
            hit.relevant = hit.passage_id in found.relevant
            hit.gold_mentions = gold.get(hit.passage_id, [])
    encoder = searchers.dense.manifest["encoder"]["reference"] if searchers.dense is not None else None
    return AdhocResult(query, query_string, occurrences, results, retriever=retrieval.retriever, encoder=encoder,
                       fusion=retrieval.fusion.method if retrieval.retriever == "hybrid" else None,
                       reader=str(reader.model) if reader is not None else None, rerank_fusion=rerank_fusion,
                       split=found.split if found is not None else None,
                       relevant_total=len(found.relevant) if found is not None else None)


def _stored_passages(index: Path, passage_ids: list[str], searchers: _Searchers) -> dict[str, dict[str, Any]]:
    """The title and text of each hit: from the Lucene index (which stores them) when it is there
    and holds the same passages, else from the dataset's passages.jsonl the dense index names."""
    if searchers.bm25 is None and (Path(index) / LUCENE_DIR / "manifest.json").exists():
        lucene = load_lucene_manifest(index)
        if lucene.get("passages_sha256") == searchers.passages_sha256:
            searchers.bm25 = BM25Searcher(index)
    if searchers.bm25 is not None:
        return {passage_id: searchers.bm25.passage(passage_id) for passage_id in passage_ids}
    manifest = searchers.dense.manifest
    return _passages_from_file(Path(manifest["dataset"]) / "passages.jsonl", passage_ids, manifest["passages_sha256"])


def _passages_from_file(path: Path, passage_ids: list[str], checksum: str) -> dict[str, dict[str, Any]]:
    """Read the given passages from a passages file, which must be the one the index was built from."""
    import hashlib

    if not passage_ids:
        return {}
    if not path.exists():
        raise MissingArtefactError(f"the dense index stores no passage texts and its dataset's {path} is gone; "
                                   "build the Lucene index beside it (`corefsearch index DATASET --out INDEX`) "
                                   "to show them")
    wanted = set(passage_ids)
    probes = [passage_id.encode() for passage_id in wanted]
    found: dict[str, dict[str, Any]] = {}
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for line in handle:
            digest.update(line)
            if any(probe in line for probe in probes):
                record = json.loads(line)
                if record.get("id") in wanted:
                    found[record["id"]] = {"id": record["id"], "title": record.get("title", ""),
                                           "text": record.get("text", "")}
    if digest.hexdigest() != checksum:
        raise InputError(f"{path} changed since the dense index was built; rebuild the index (--overwrite)")
    return found
