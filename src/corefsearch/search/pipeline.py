"""Search end to end: queries in, TREC run out (``search``), or one ad-hoc mention (``query``),
with BM25, the dense retriever or both fused (``--retriever bm25|dense|hybrid``); and ``index``'s
build of one index backend.

Orchestration only: the options come resolved and checked (``corefsearch.search.options``), what they ask
for is opened by ``corefsearch.search.engine.SearchEngine`` (the one door, also of ``query`` and ``serve``),
every query runs through its ``corefsearch.search.flow`` (retrieve, re-rank, second round) and the run files
are ``corefsearch.search.run_writer``'s."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.base.counts import counted
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.progress import track
from corefsearch.base.schema import Query
from corefsearch.datasets.dataset import Dataset, dataset_holding, read_queries
from corefsearch.datasets.text import has_records
from corefsearch.io.outputs import Output, writes_outputs
from corefsearch.io.write import sha256_file
from corefsearch.search.answers import AdhocResult
from corefsearch.search.backends import BACKENDS
from corefsearch.search.calibration import RANKS, HeadCalibration, fit, pseudo_queries
from corefsearch.search.engine import SearchEngine
from corefsearch.search.options import SearchOptions
from corefsearch.search.queries import query_of
from corefsearch.search.retriever import Retriever
from corefsearch.search.run_writer import RunWriter, spans_path_for
from corefsearch.sparse.search import save_topics_file


def index_dataset(dataset_dir: Path, out: Path, backend: str = "lucene", options: Any = None,
                  overwrite: bool = False) -> Any:
    """The index of kind ``backend`` (``lucene``, ``dense``: ``corefsearch.search.backends``) of a
    dataset, built with that backend's ``options`` (its ``Options`` class; default: its defaults).
    Several kinds can live in the same ``out`` directory."""
    if backend not in BACKENDS:
        raise InputError(f"no index backend {backend!r}: one of {', '.join(BACKENDS)}")
    chosen = BACKENDS[backend]
    return chosen.build(dataset_dir, out, options if options is not None else chosen.Options(), overwrite)


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


def _search_outputs(a: dict[str, Any]) -> list[Output]:
    """What ``search`` writes (the run, and with a reader its spans) and what it reads."""
    reader = a["options"].reader if a.get("options") is not None else None
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
def search_to_run(index: Path, queries_path: Path, out: Path, options: SearchOptions | None = None,
                  spans_out: Path | None = None, save_topics: Path | None = None) -> SearchSummary:
    """Search every query of ``queries_path`` to the depth ``options.k`` and write the TREC run ``out``
    atomically; with a reader (``options.reader``), re-rank each query's top ``rerank_k`` and write their spans
    to ``spans_out`` (default ``OUT.spans.jsonl``); with ``save_topics``, also write the BM25 query strings as a
    Pyserini topics file (``qid<TAB>query``). ``options.ray``: the re-ranking runs on a Ray cluster, with the
    same run and spans. ``options.expansion`` (``--rounds 2``): a second round from the mentions the first one
    found (``corefsearch.search.second_round``), fused with it. Default options: BM25 to depth 500."""
    options = (options or SearchOptions(k=500)).check(index)
    if save_topics is not None and not options.retrieval.uses_bm25:
        raise InputError("--save-topics writes the BM25 query strings: use it with --retriever bm25 or hybrid")
    if options.reader is None and spans_out is not None:
        raise InputError("--spans-out names the spans file of --reader: add --reader MODEL_DIR")
    _check_split_queries(queries_path)
    if not Path(queries_path).exists():  # a folder is named as such by read_queries
        raise MissingArtefactError(f"{queries_path}: no such queries file; a dataset's queries are "
                                   "DATASET/queries/{train,dev,test}.jsonl, written by `corefsearch build-dataset "
                                   "--format ecbplus|wec|coresearch|generic INPUT --out DATASET`")
    queries = read_queries(queries_path)
    if not queries:
        raise InputError(f"{queries_path}: holds no queries")
    engine = SearchEngine.open(index, options, _dataset_of(queries_path), warm=False)
    expansion = options.expansion
    expanding = expansion is not None and expansion.active
    if expanding and expansion.source == "encoder":  # type: ignore[union-attr]
        engine.expander()  # the candidate mentions opened before the search: a missing source fails here
    retriever = engine.retriever()
    check_query_passages(queries, retriever, queries_path, index)
    fields = retriever.describe()
    k = options.k
    if "fusion" in fields:
        fields["fusion"]["depth"] = k  # each retriever's list, before fusing
    if save_topics is not None:
        save_topics_file(save_topics, queries, retriever.formulate(queries))  # type: ignore[attr-defined]
    writer = RunWriter(Path(out), spans_out)
    started = time.perf_counter()
    flow = engine.flow()
    answers = flow.run(queries)
    tag = retriever.tag
    if options.reader is not None:
        fusion = flow.fusion()[0]
        tag = f"{tag}+reader-{flow.reader_config.head}" + ("-rrf" if fusion == "rrf" else "")
        # before the run: a run with --reader always has its spans
        writer.write_spans([hit.span_record(answer.query.id) for answer in answers for hit in answer.read])
        fields["reader"] = {**flow.describe_reader(), "spans": str(writer.spans_path.resolve()),
                            "seconds": round(flow.times.reading or 0.0, 3)}
        if flow.times.workers is not None:
            fields["reader"]["ray"] = {"workers": flow.times.workers}
    if expanding:
        assert expansion is not None
        times = flow.times
        fields["expansion"] = {**expansion.describe(), **times.candidates,
                               "queries": times.expansions, "queries_without_candidates": times.queries_without,
                               "passages_without_candidates": times.passages_without,
                               "seconds": round(times.second_round or 0.0, 3)}
        calibration = flow.calibration()
        if options.order_asked == "auto" and calibration is None and expansion.source == "encoder":
            warnings.warn(f"the top {expansion.head} is the gate's order: the index holds no calibration for the gate "
                          f"{expansion.min_similarity} (`corefsearch calibrate --index {index}` fits the calibrated "
                          "order to this collection; off ECB+ the gate's order lowers MRR@10: bench/RESULTS.md, "
                          '"The calibrated order")', stacklevel=3)
        if calibration is not None:
            fields["expansion"]["calibrated"] = calibration.describe()
            if not calibration.applies:
                warnings.warn(f"the gate passes the first round's top passage in {100 * calibration.top_pass_rate:.0f} "
                              f"% of the calibration's queries, under {100 * calibration.floor:.0f} %: the top "
                              f"{expansion.head} keeps the first round's order (the searches fill the ranks below)",
                              stacklevel=3)
        if times.queries_without:
            warnings.warn(f"{counted(times.queries_without, 'query')} of {len(queries):,} found no "
                          f"{_what_marks(fields['expansion'])} in their top {expansion.expand} passages "
                          f"({counted(times.passages_without, 'passage')} without one): their second round is their "
                          "first", stacklevel=3)
        tag = f"{tag}+round2-{fields['expansion']['source']}{expansion.expand}"
    results = ((answer.query, answer.hits) for answer in answers)
    rows = writer.write_run(results, tag)
    summary = SearchSummary(len(queries), rows, time.perf_counter() - started, Path(out))
    writer.write_metadata({
        **fields, "k": k, "tag": tag,
        "index": str(Path(index).resolve()), "passages_sha256": retriever.passages_sha256,
        "queries": str(Path(queries_path).resolve()), "queries_sha256": sha256_file(queries_path),
        "n_queries": summary.queries, "rows": rows, "seconds": round(summary.seconds, 3)})
    return summary


def _what_marks(record: dict[str, Any]) -> str:
    return "non-empty reader span" if record.get("candidates") == "reader" else \
        f"{record.get('candidates')} candidate mention of their type"


def _check_split_queries(queries_path: Path) -> None:
    """A queries file of a dataset of plain documents (``DATASET/queries/SPLIT.jsonl``), missing or empty: the
    one line saying why, not "no such file" (queries written there by hand are searched)."""
    path = Path(queries_path)
    dataset = dataset_holding(path) if path.parent.name == "queries" else None
    if dataset is None or dataset.has_gold_mentions or has_records(path):
        return
    dataset.require_gold("search", "search it one mention at a time with `corefsearch query INDEX --mention TEXT "
                                   "--context TEXT`, or give --queries a queries file of your own")


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


def adhoc_query(index: Path, options: SearchOptions | None = None, mention: str | None = None,
                context: str | None = None, occurrence: int | None = None, dataset: Path | None = None,
                qid: str | None = None) -> AdhocResult:
    """The top ``options.k`` passages for one mention; with a reader, the retriever's top ``rerank_k``
    re-ranked, each with its coreferring span; with ``options.cluster``, the answer as a cluster too.

    ``dataset`` and ``qid`` (instead of ``mention`` and ``context``) answer a query of a dataset
    (its own passage left out, as in ``search``) and mark each hit relevant or not (its qrels)
    with the mentions of its cluster in it (``AdhocHit.relevant``, ``gold_mentions``).
    """
    options = (options or SearchOptions()).check(index)
    if qid is None and dataset is not None:
        raise InputError("--dataset names the dataset of --qid: add --qid ID (a query id of its queries files)")
    query, occurrences, found = query_of(mention, context, occurrence, None, None, dataset, qid)
    engine = SearchEngine.open(index, options, dataset)
    return engine.answer(query, occurrences, found, options.k, cluster=options.cluster)


def calibrate(index: Path, options: SearchOptions, dataset: Path | None, gate: float, n: int = 500,
              mention_type: str = "event", seed: int = 13, depth: int = 100, queries: Sequence[Query] | None = None,
              queries_from: str | None = None) -> HeadCalibration:
    """Fit the model on the collection itself: ``queries`` (a user's queries file, their relevance never read) or
    else ``n`` of its dataset's stored detected mentions (``corefsearch detect``), each searched to ``depth`` with
    ``options``' retriever (the first round a run has), its top 10's nearest candidate mentions scored by
    ``options``' mention encoder against the cosine ``gate`` (the runs' ``--expand-min-similarity``). Reads no
    gold."""
    engine = SearchEngine.open(index, options, dataset, warm=False)
    collection = Dataset(engine.candidates_dataset())
    if queries is None:
        mentions = list(collection.predicted_mentions())
        queries = pseudo_queries([(p.id, p.text) for p in collection.passages()], mentions, n, mention_type, seed)
        queries_from = f"{len(queries)} of the collection's detected {mention_type} mentions (seed {seed})"
    elif not queries:
        raise InputError(f"{queries_from}: no query to calibrate on")
    else:
        queries_from = f"the {len(queries)} queries of {queries_from}"
    retriever, expander = engine.retriever(), engine.expander()
    first = list(retriever.search(queries, depth))
    passes = []
    for start in track(range(0, len(first), 50), "Calibrating", total=-(-len(first) // 50)):
        block = first[start:start + 50]
        nearest = expander.nearest([(q, [h.passage_id for h in hits[:RANKS]]) for q, hits in block], count=False)
        for query, hits in block:
            cosine = expander.similarities(query, nearest[query.id])
            passes.append([cosine.get(h.passage_id, -2.0) >= gate for h in hits[:RANKS]])
    return fit(passes, gate, fitted_on={
        "queries": queries_from,
        "dataset": str(collection.root.resolve()), "index": str(Path(index).resolve()), "depth": depth,
        "retriever": retriever.describe(), "mention_encoder": str(Path(options.expansion.encoder).resolve())})
