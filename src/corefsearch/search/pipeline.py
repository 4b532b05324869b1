"""Search end to end: queries in, TREC run out (``search``), or one ad-hoc mention (``query``),
with BM25, the dense retriever or both fused (``--retriever bm25|dense|hybrid``); the
``index`` command's choice between the Lucene and the dense index; and the ``cluster`` command's
choice of where the mentions are encoded (here, or on a Ray cluster). The Ray paths are
``corefsearch.distributed``'s adapters, chosen here so that the wings never import that stage.

Orchestration only: the retrievers are opened by ``corefsearch.search.retriever``, ad-hoc questions are
answered by ``corefsearch.search.engine.SearchEngine``, re-ranking is ``corefsearch.reader.rerank``,
highlighting ``corefsearch.sparse.highlight`` and the run files ``corefsearch.search.run_writer``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.schema import Query
from corefsearch.datasets.dataset import dataset_holding, read_queries
from corefsearch.io.outputs import Output, writes_outputs
from corefsearch.io.write import sha256_file
from corefsearch.reader.rerank import ReaderOptions, rerank_many
from corefsearch.search.engine import AdhocResult, SearchEngine, query_of
from corefsearch.search.expansion import ExpansionOptions
from corefsearch.search.retriever import IndexManifests, RetrievalOptions, Retriever, open_retriever
from corefsearch.search.run_writer import RunWriter, spans_path_for
from corefsearch.sparse.search import BM25Options, save_topics_file

if TYPE_CHECKING:
    from corefsearch.cluster.run import ClusterSummary


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
    backend: str = "torch"  # the passage encoder's runtime: torch | onnx | onnx-int8 (`corefsearch export-onnx`)
    ray: Any = None  # corefsearch.distributed.session.RayOptions: encode on a Ray cluster (`--ray`)

    def validate(self) -> None:
        """What no builder checks: the device, the backend on that device and the combinations of
        options. Each value the builder takes (``--faiss``, ``--batch-size``, ``--chunk-size``, ``--shard``,
        ``--merge-shards``, the Ray options) is checked once, by the builder that runs, before its
        output guard and before any work."""
        from corefsearch.base.models import check_device
        from corefsearch.base.onnx_backend import check_backend_device

        check_device(self.device)
        check_backend_device(self.backend, self.device)
        if self.ray is not None and (self.shard is not None or self.merge_shards is not None):
            raise InputError("--ray encodes every shard on the cluster and merges them: leave out --shard and "
                             "--merge-shards")
        if self.merge_shards is not None:
            if self.shard is not None:
                raise InputError("--shard and --merge-shards do not go together: encode each shard with "
                                 "--shard I/N, then merge them with --merge-shards N")
            if self.backend != "torch":
                raise InputError("--backend chooses how passages are encoded; --merge-shards encodes none (each "
                                 "shard's manifest records its backend): leave --backend out")
        elif not self.encoder:
            raise InputError("--dense needs --encoder: a retriever folder from `corefsearch train retriever`, "
                             "a Hugging Face model name or folder, or `default` (all-MiniLM-L6-v2, zero-shot)")


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
        return merge_dense_shards(dataset_dir, out, dense.merge_shards, faiss_type=dense.faiss_type,
                                  encoder=dense.encoder, device=dense.device, overwrite=overwrite)
    assert dense.encoder  # validate()
    if dense.ray is not None:
        from corefsearch.distributed.dense_encoding import build_dense_index_on_ray

        return build_dense_index_on_ray(dataset_dir, out, dense.encoder, dense.ray, faiss_type=dense.faiss_type,
                                        batch_size=dense.batch_size, device=dense.device, overwrite=overwrite,
                                        chunk_size=dense.chunk_size, backend=dense.backend)
    shard = parse_shard(dense.shard) if dense.shard is not None else None
    return build_dense_index(dataset_dir, out, dense.encoder, faiss_type=dense.faiss_type,
                             batch_size=dense.batch_size, shard=shard, device=dense.device, overwrite=overwrite,
                             chunk_size=dense.chunk_size, backend=dense.backend)


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
                  save_topics: Path | None = None, ray: Any = None,
                  expansion: ExpansionOptions | None = None) -> SearchSummary:
    """Search every query of ``queries_path`` and write the TREC run ``out`` atomically; with a
    ``reader``, re-rank each query's top ``reader.rerank_k`` and write their spans to
    ``spans_out`` (default ``OUT.spans.jsonl``); with ``save_topics``, also write the BM25
    query strings as a Pyserini topics file (``qid<TAB>query``). ``ray``
    (``corefsearch.distributed.session.RayOptions``): the re-ranking runs on a Ray cluster, with the
    same run and spans. ``expansion`` (``--rounds 2``): a second round from the mentions the first one
    found (``corefsearch.search.expansion``), fused with it."""
    options, retrieval = _checked_options(options, retrieval, k)
    if expansion is not None:
        expansion.validate(has_reader=reader is not None)
    if ray is not None:
        if reader is None:
            raise InputError("--ray spreads the reader's re-ranking over a Ray cluster (retrieval runs here): add "
                             "--reader MODEL_DIR")
        ray.validate()
    if save_topics is not None and not retrieval.uses_bm25:
        raise InputError("--save-topics writes the BM25 query strings: use it with --retriever bm25 or hybrid")
    if reader is not None:
        reader.validate()
    elif spans_out is not None:
        raise InputError("--spans-out names the spans file of --reader: add --reader MODEL_DIR")
    _check_split_queries(queries_path)
    if not Path(queries_path).exists():  # a folder is named as such by read_queries
        raise MissingArtefactError(f"{queries_path}: no such queries file; a dataset's queries are "
                                   "DATASET/queries/{train,dev,test}.jsonl, written by `corefsearch build-dataset "
                                   "--format ecbplus|wec|coresearch|generic INPUT --out DATASET`")
    queries = read_queries(queries_path)
    if not queries:
        raise InputError(f"{queries_path}: holds no queries")
    manifests = IndexManifests.load(index, [retrieval.retriever])  # read and checked once
    dataset_dir = _dataset_of(queries_path)
    expanding = expansion is not None and expansion.active
    if expanding and expansion.source_for(reader is not None) == "encoder" and dataset_dir is None:  # type: ignore[union-attr]
        raise InputError(f"--expand-from encoder marks the mentions of the dataset's passages, and {queries_path} "
                         "is not in a dataset (DATASET/queries/SPLIT.jsonl)")
    if dataset_dir is not None:
        manifests.check_dataset(dataset_dir)
    retriever = open_retriever(index, options, retrieval, manifests)
    check_query_passages(queries, retriever, queries_path, index)
    fields = retriever.describe()
    if "fusion" in fields:
        fields["fusion"]["depth"] = k  # each retriever's list, before fusing
    # With --ray the workers load the reader; here only its configuration is read (and checked).
    loaded_reader = None if reader is None or ray is not None else reader.load()
    reader_config = (None if reader is None else loaded_reader.config if loaded_reader is not None
                     else reader.read_config())
    if save_topics is not None:
        save_topics_file(save_topics, queries, retriever.formulate(queries))  # type: ignore[attr-defined]
    writer = RunWriter(Path(out), spans_out)
    started = time.perf_counter()
    # The second round's margin test reads the first round deeper than k (its background); the run keeps k.
    depth = expansion.first_depth(k, reader is not None) if expanding and expansion is not None else k
    results = retriever.search(queries, depth)
    tag = retriever.tag
    if reader is not None and reader_config is not None:
        from corefsearch.base.progress import track

        retrieved = list(results)
        texts = {passage_id: retriever.passage(passage_id)
                 for passage_id in sorted({h.passage_id for _, hits in retrieved for h in hits[:reader.rerank_k]})}
        reranked, span_records = [], []
        reading = time.perf_counter()
        spans_of: dict[str, dict[str, tuple[int, int]]] = {}
        fusion, fusion_from_model = reader.fusion_for(reader_config)
        workers = None
        if ray is not None:
            from corefsearch.distributed.reranking import rerank_on_ray

            pairs, workers = rerank_on_ray(reader, retrieved, texts, fusion, ray)
        else:
            size = reader.batch_queries  # queries whose windows are read together
            pairs = (pair for start in track(range(0, len(retrieved), size), "Re-ranking",
                                             total=-(-len(retrieved) // size))
                     for pair in rerank_many(loaded_reader, retrieved[start:start + size], texts, reader.rerank_k,
                                             fusion))
        for (query, _), (ranked, read) in zip(retrieved, pairs, strict=True):
            reranked.append((query, ranked))
            span_records.extend(hit.span_record(query.id) for hit in read)
            spans_of[query.id] = {hit.passage_id: (hit.start, hit.end) for hit in read}
        tag = f"{tag}+reader-{reader_config.head}" + ("-rrf" if fusion == "rrf" else "")
        writer.write_spans(span_records)  # before the run: a run with --reader always has its spans
        fields["reader"] = {"model": str(Path(reader.model).resolve()), "rerank_k": reader.rerank_k,
                            "head": reader_config.head, "markers": reader_config.markers,
                            "fusion": fusion, "fusion_from": "model" if fusion_from_model else "--rerank-fusion",
                            "backend": reader.backend, "batch_queries": reader.batch_queries,
                            "spans": str(writer.spans_path.resolve()),
                            "seconds": round(time.perf_counter() - reading, 3)}
        if workers is not None:
            fields["reader"]["ray"] = {"workers": workers}
        results = iter(reranked)
    if expanding:
        assert expansion is not None
        results, fields["expansion"] = _second_round(retriever, list(results), expansion, k, reader is not None,
                                                     spans_of if reader is not None else {}, dataset_dir,
                                                     retrieval.device)
        tag = f"{tag}+round2-{fields['expansion']['source']}{expansion.expand}"
    rows = writer.write_run(results, tag)
    summary = SearchSummary(len(queries), rows, time.perf_counter() - started, Path(out))
    writer.write_metadata({
        **fields, "k": k, "tag": tag,
        "index": str(Path(index).resolve()), "passages_sha256": getattr(retriever, "passages_sha256", None),
        "queries": str(Path(queries_path).resolve()), "queries_sha256": sha256_file(queries_path),
        "n_queries": summary.queries, "rows": rows, "seconds": round(summary.seconds, 3)})
    return summary


def _check_split_queries(queries_path: Path) -> None:
    """A queries file of a dataset of plain documents (``DATASET/queries/SPLIT.jsonl``), missing or empty: the
    one line saying why, not "no such file" (queries written there by hand are searched)."""
    from corefsearch.datasets.text import has_records

    path = Path(queries_path)
    dataset = dataset_holding(path) if path.parent.name == "queries" else None
    if dataset is None or dataset.has_gold_mentions or has_records(path):
        return
    dataset.require_gold("search", "search it one mention at a time with `corefsearch query INDEX --mention TEXT "
                                   "--context TEXT`, or give --queries a queries file of your own")


def _second_round(retriever: Retriever, first: list[tuple[Query, list[Any]]], expansion: ExpansionOptions, k: int,
                  has_reader: bool, spans_of: dict[str, dict[str, tuple[int, int]]], dataset_dir: Path | None,
                  device: str) -> tuple[Iterator[tuple[Query, list[Any]]], dict[str, Any]]:
    """The second round of every query (``corefsearch.search.expansion``) and the metadata's ``expansion``."""
    from corefsearch.search.expansion import EncoderExpansion, from_spans, second_round

    began = time.perf_counter()
    n = expansion.expand
    if expansion.source_for(has_reader) == "reader":
        texts = {h.passage_id: retriever.passage(h.passage_id)["text"] for query, hits in first for h in hits[:n]
                 if h.passage_id in spans_of.get(query.id, {})}
        expansions = {query.id: from_spans(query, hits, spans_of.get(query.id, {}), texts, n) for query, hits in first}
    else:
        assert dataset_dir is not None and expansion.encoder is not None
        expansions = EncoderExpansion.load(expansion.encoder, dataset_dir, device).expansions(
            first, n, expansion.min_similarity, expansion.margin)
    fused = second_round(retriever, first, expansions, expansion, k)
    record = {**expansion.describe(has_reader), "queries": sum(len(v) for v in expansions.values()),
              "seconds": round(time.perf_counter() - began, 3)}
    return iter(fused), record


def check_query_passages(queries: list[Query], retriever: Retriever, queries_path: Path, index: Path) -> None:
    """Each query's own passage is left out of its results, so it should be in the index. When
    none is, the queries belong to another dataset: an error. When some are not (a queries file
    edited or merged by hand), a warning with their count: they are still searched, and nothing
    is left out of their results."""
    import warnings

    wanted = [q.passage_id for q in queries if q.passage_id]
    if not wanted:
        return
    present = retriever.contains(wanted)  # type: ignore[attr-defined]
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


def adhoc_query(index: Path, mention: str | None = None, context: str | None = None, occurrence: int | None = None,
                k: int = 10, options: BM25Options | None = None,
                retrieval: RetrievalOptions | None = None, reader: ReaderOptions | None = None,
                dataset: Path | None = None, qid: str | None = None, expansion: ExpansionOptions | None = None,
                cluster: bool = False) -> AdhocResult:
    """The top ``k`` passages for one mention; with a ``reader``, the retriever's top
    ``reader.rerank_k`` re-ranked, each with its coreferring span.

    ``dataset`` and ``qid`` (instead of ``mention`` and ``context``) answer a query of a dataset
    (its own passage left out, as in ``search``) and mark each hit relevant or not (its qrels)
    with the mentions of the query's cluster in it (``AdhocHit.relevant``, ``gold_mentions``).
    ``expansion``: a second round (``rounds`` 2) and the mention encoder; ``cluster``: the answer as a
    cluster too (``AdhocResult.cluster``).
    """
    options, retrieval = _checked_options(options, retrieval, k)
    if reader is not None:
        reader.validate()
    if qid is None and dataset is not None:
        raise InputError("--dataset names the dataset of --qid: add --qid ID (a query id of its queries files)")
    query, occurrences, found = query_of(mention, context, occurrence, None, None, dataset, qid)
    engine = SearchEngine.open(index, options, retrieval, reader, dataset, expansion=expansion)
    return engine.answer(query, occurrences, found, k, cluster=cluster)


def cluster_dataset(dataset: Path, out: Path, ray: Any = None, **options: Any) -> ClusterSummary:
    """``corefsearch cluster``: :func:`corefsearch.cluster.run.cluster_dataset` (``options``: its
    parameters), with the mentions of ``--method encoder`` encoded on a Ray cluster when ``ray``
    (``corefsearch.distributed.session.RayOptions``) is given, to the same vectors."""
    from corefsearch.cluster.run import cluster_dataset as cluster_here
    from corefsearch.datasets.dataset import Dataset

    if options.get("mentions", "gold") == "gold" and (Path(dataset) / "manifest.json").is_file():
        # Gold mentions: a dataset of plain documents has none (one line saying what to run instead).
        Dataset(dataset).require_gold("cluster", f"find mentions with `corefsearch detect {dataset} --model "
                                                 f"heuristic`, then cluster them with `corefsearch cluster {dataset} "
                                                 "--mentions predicted`")
    encoding = None
    if ray is not None:
        from corefsearch.distributed.mention_encoding import RayMentionEncoding

        encoding = RayMentionEncoding(ray)
    return cluster_here(dataset, out, encoding=encoding, **options)
