"""The warm search engine that ``corefsearch query`` and ``corefsearch serve`` share: the
retrievers of an INDEX, spaCy (when the BM25 query format needs it) and the reader, opened once;
then any number of ad-hoc questions ("where else is this mention's event mentioned?").

``SearchEngine.open(...)`` does all the loading and records how long each part took
(``load_seconds``); ``query(...)`` answers one mention, given as ``mention`` (+ ``occurrence``)
in a ``context`` or as character offsets ``start``/``end`` into it (a mouse selection), or a
query of a dataset by ``qid``; ``passage(id)`` gives a passage with the passages of its document.

Threads: the engine's methods may be called from any thread; a lock lets one call work at a
time (spaCy pipelines, the reader's token cache and FAISS searches are not meant to be shared by
concurrent callers; a server runs several requests' model work one after the other in its pool).
Pyserini's Java side (pyjnius) attaches each Python thread to the JVM on its first Java call,
so a worker thread needs nothing done for it; a thread that ends after calling Java should call
:func:`detach_thread` (pyjnius's ``jnius.detach``) first, as pyjnius asks.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from corefsearch.base import nlp
from corefsearch.base.artefacts import versions
from corefsearch.base.errors import CorefSearchError, InputError, MissingArtefactError
from corefsearch.base.models import check_model_folder, resolve_device
from corefsearch.base.schema import Query
from corefsearch.datasets.dataset import Dataset
from corefsearch.datasets.lookup import cluster_mentions, find_query
from corefsearch.datasets.passages import PassageFile
from corefsearch.reader.rerank import ReaderOptions
from corefsearch.search.candidates import describe_candidates, open_candidates
from corefsearch.search.expansion import EncoderExpansion, ExpansionOptions, FoundMention, cluster_answer
from corefsearch.search.flow import QueryFlow, check_flow
from corefsearch.search.retriever import (
    RETRIEVERS,
    IndexManifests,
    RetrievalOptions,
    Retriever,
    check_retriever_name,
    open_retrievers,
    uses_bm25,
)
from corefsearch.sparse import highlight
from corefsearch.sparse.formulation import QUERY_FORMATS
from corefsearch.sparse.highlight import matched_spans
from corefsearch.sparse.search import BM25Options, warn_long_queries

# The spaCy pipeline each BM25 query format loads (corefsearch.base.nlp), if any.
SPACY_FOR_FORMAT = {"mention+entities": "ner_pipeline", "sentence": "sentencizer"}
VERSIONED = ("pyserini", "torch", "transformers", "faiss-cpu", "spacy", "onnxruntime", "fastapi", "uvicorn")


def detach_thread() -> None:
    """Detach the calling thread from the JVM (call it before a thread that searched with BM25 ends)."""
    import sys

    if "jnius" in sys.modules:
        import jnius

        jnius.detach()


# --- the query ------------------------------------------------------------------------------------


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


def selection_query_record(context: str | None, start: int | None, end: int | None,
                           mention: str | None = None) -> Query:
    """A query for the characters ``context[start:end]`` (a selection; white space at its edges left out).
    ``mention``, when given too, must be the selected text."""
    if context is None:
        raise InputError("start and end are character offsets into the context: give the context too")
    if start is None or end is None:
        raise InputError("a selection needs both start and end (character offsets into the context)")
    if isinstance(start, bool) or isinstance(end, bool) or not isinstance(start, int) or not isinstance(end, int):
        raise InputError(f"start and end must be integers, got {start!r} and {end!r}")
    if not 0 <= start <= end <= len(context):
        raise InputError(f"the selection [{start}, {end}) lies outside the context of {len(context)} characters")
    selected = context[start:end]
    if not selected.strip():
        raise InputError(f"the selection [{start}, {end}) is empty" if start == end else
                         f"the selection [{start}, {end}) holds only white space")
    start += len(selected) - len(selected.lstrip())
    end -= len(selected) - len(selected.rstrip())
    if mention is not None and mention.strip() != context[start:end]:
        raise InputError(f"the mention {mention!r} is not the selected text {context[start:end]!r} "
                         f"(characters {start} to {end} of the context)")
    return Query("adhoc", "", context, start, end, context[start:end], "")


def query_of(mention: str | None, context: str | None, occurrence: int | None, start: int | None, end: int | None,
             dataset: Path | None, qid: str | None) -> tuple[Query, int, Any]:
    """The query to answer, how often its mention occurs in its text, and (``qid``) its ``DatasetQuery``."""
    if qid is None:
        if start is not None or end is not None:
            if occurrence is not None:
                raise InputError("give the mention's place as start and end offsets or as an occurrence, not both")
            query = selection_query_record(context, start, end, mention)
        elif mention is None:
            raise InputError("give --mention (and --context), or a dataset query with --dataset DATASET --qid ID")
        else:
            query = adhoc_query_record(mention, context, occurrence)
        return query, len(re.findall(re.escape(query.mention), query.text)), None
    given = [option for option, value in (("--mention", mention), ("--context", context),
                                          ("--occurrence", occurrence), ("start", start), ("end", end))
             if value is not None]
    if given:
        raise InputError(f"--qid takes the query's mention and context from the dataset: leave out {given[0]}")
    if dataset is None:
        raise InputError("--qid needs the dataset it is a query of: add --dataset DATASET")

    found = find_query(dataset, qid)
    return found.query, 1, found


# --- the answer -----------------------------------------------------------------------------------


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
    expansion: dict[str, Any] | None = None  # the second round (rounds 2): its options and expansion queries
    cluster: dict[str, Any] | None = None  # the answer as a cluster (corefsearch.search.expansion.cluster_answer)

    def to_json(self) -> dict[str, Any]:
        query: dict[str, Any] = {"mention": self.query.mention, "start": self.query.start, "end": self.query.end,
                                 "context": self.query.text, "bm25_query": self.query_string}
        if self.split is not None:
            query = {"id": self.query.id, "split": self.split, "passage_id": self.query.passage_id,
                     "cluster_id": self.query.cluster_id, **query, "relevant_passages": self.relevant_total}
        record = {"query": query, "retriever": self.retriever, "encoder": self.encoder, "fusion": self.fusion,
                  "reader": self.reader, "rerank_fusion": self.rerank_fusion,
                  "hits": [hit.to_json() for hit in self.hits]}
        if self.expansion is not None:
            record["expansion"] = self.expansion
        if self.cluster is not None:
            record["cluster"] = self.cluster
        return record


# --- the engine -----------------------------------------------------------------------------------


class SearchEngine:
    """Retrievers, spaCy and a reader opened once; ad-hoc questions answered warm (see the module)."""

    def __init__(self, index: Path, options: BM25Options, retrieval: RetrievalOptions,
                 opened: dict[str, Retriever], reader: ReaderOptions | None = None, loaded_reader: Any = None,
                 dataset: Path | None = None, load_seconds: dict[str, float] | None = None,
                 expansion: ExpansionOptions | None = None, mention_encoder: Any = None) -> None:
        self.index = Path(index)
        self.options = options
        self.retrieval = retrieval
        self._opened = opened
        self.retrievers: list[str] = list(opened)  # the names opened; the first is the default
        self.reader = reader
        self.loaded_reader = loaded_reader
        self.dataset = Path(dataset) if dataset is not None else None
        self.load_seconds: dict[str, float] = load_seconds or {}
        self._lock = threading.RLock()
        self._documents: PassageFile | None = None
        self.expansion = expansion or ExpansionOptions()  # the default rounds, N and weight of a question
        self.mention_encoder = mention_encoder  # --mention-encoder: the encoder's expansion and cluster answers
        self._expander: Any = None  # EncoderExpansion over the index's dataset, built at its first use

    @classmethod
    def open(cls, index: Path, options: BM25Options | None = None, retrieval: RetrievalOptions | None = None,
             reader: ReaderOptions | None = None, dataset: Path | None = None,
             retrievers: Sequence[str] | None = None, expansion: ExpansionOptions | None = None) -> SearchEngine:
        """Open once: the retriever of ``retrieval`` (and, with ``retrievers``, the other named ones,
        e.g. ``("bm25", "hybrid")``), spaCy when the query format needs it, the reader. With
        ``dataset``, its queries can be asked by id (the index must hold its passages). Raises
        ``CorefSearchError`` subclasses."""
        options = options or BM25Options()
        retrieval = retrieval or RetrievalOptions()
        retrieval.validate()
        options.validate()
        for name in retrievers or ():
            check_retriever_name(name)
            replace(retrieval, retriever=name).validate()
        if reader is not None:
            reader.validate()
        if expansion is not None:
            expansion.validate(has_reader=reader is not None)
        names = list(dict.fromkeys([retrieval.retriever, *(retrievers or ())]))
        if dataset is not None:
            Dataset(dataset)  # a missing or broken dataset fails here, not at the first query
        load_seconds: dict[str, float] = {}
        started = time.perf_counter()
        manifests = IndexManifests.load(index, names)
        if dataset is not None:
            manifests.check_dataset(dataset)
        load_seconds["manifests"] = time.perf_counter() - started
        loaded_reader = None
        if reader is not None:
            started = time.perf_counter()
            loaded_reader = reader.load()
            load_seconds["reader"] = time.perf_counter() - started
        mention_encoder = None
        if expansion is not None and expansion.encoder is not None:
            from corefsearch.cluster.model import MentionEncoder

            check_model_folder(expansion.encoder, "--mention-encoder")
            started = time.perf_counter()
            mention_encoder = MentionEncoder.load(Path(expansion.encoder), resolve_device(retrieval.device))
            load_seconds["mention encoder"] = time.perf_counter() - started
        started = time.perf_counter()
        opened = open_retrievers(index, options, retrieval, names, manifests)
        for retriever in dict.fromkeys(opened.values()):
            retriever.warm()
        load_seconds["retrievers"] = time.perf_counter() - started
        if any(uses_bm25(name) for name in names):
            started = time.perf_counter()

            highlight.warm()
            load_seconds["highlighter"] = time.perf_counter() - started
            pipeline = SPACY_FOR_FORMAT.get(options.query_format)
            if pipeline is not None:
                started = time.perf_counter()

                getattr(nlp, pipeline)()
                load_seconds["spacy"] = time.perf_counter() - started
        engine = cls(index, options, retrieval, opened, reader, loaded_reader, dataset, load_seconds, expansion,
                     mention_encoder)
        if mention_encoder is not None:  # the candidate mentions (stored, or the detector) loaded once, here
            started = time.perf_counter()
            with contextlib.suppress(MissingArtefactError):  # no dataset beside the index: said when asked
                engine._expansion_engine().candidates.warm()
            load_seconds["candidates"] = time.perf_counter() - started
        engine.load_seconds = {name: round(seconds, 3) for name, seconds in load_seconds.items()}
        return engine

    def retriever(self, name: str | None = None) -> Retriever:
        """An opened retriever (default: the first)."""
        if name is None:
            return self._opened[self.retrievers[0]]
        if name not in RETRIEVERS:
            raise InputError(f"retriever must be one of {', '.join(RETRIEVERS)}, got {name!r}")
        if name not in self._opened:
            raise InputError(f"the retriever {name} is not open here (open: {', '.join(self.retrievers)})")
        return self._opened[name]

    def query(self, mention: str | None = None, context: str | None = None, occurrence: int | None = None,
              start: int | None = None, end: int | None = None, qid: str | None = None, k: int = 10,
              retriever: str | None = None, rerank_k: int | None = None,
              query_format: str | None = None, rounds: int | None = None, cluster: bool = False) -> AdhocResult:
        """The top ``k`` passages for one mention (``mention`` [+ ``occurrence``] in ``context``, or
        ``start``/``end`` offsets into ``context``), or for the query ``qid`` of the engine's dataset
        (its own passage left out; hits marked relevant or not, with the gold mentions of its cluster).
        ``rerank_k``: None, the reader's ``rerank_k``; 0, no re-ranking. ``query_format``: the BM25
        query format of this query alone. ``rounds``: 2 for a second round (default: the engine's
        ``--rounds``); ``cluster``: also the answer as a cluster (with the engine's mention encoder). Bad
        input is an ``InputError`` with a one-line message."""
        with self._lock:
            query, occurrences, found = query_of(mention, context, occurrence, start, end, self.dataset, qid)
            return self.answer(query, occurrences, found, k, retriever, rerank_k, query_format, rounds, cluster)

    def answer(self, query: Query, occurrences: int = 1, found: Any = None, k: int = 10,
               retriever: str | None = None, rerank_k: int | None = None,
               query_format: str | None = None, rounds: int | None = None, cluster: bool = False) -> AdhocResult:
        """``query`` answered (``query`` builds it from the caller's input; ``found``: its
        ``DatasetQuery`` when it is a query of the dataset)."""
        if query_format is not None and query_format not in QUERY_FORMATS:
            raise InputError(f"--query-format must be one of {', '.join(QUERY_FORMATS)}, got {query_format!r}")
        if rerank_k is None:
            rerank_k = self.reader.rerank_k if self.reader is not None else 0
        rounds = self.expansion.rounds if rounds is None else rounds
        check_flow(k, rerank_k, rounds, has_reader=self.loaded_reader is not None, expansion=self.expansion,
                   has_mention_encoder=self.mention_encoder is not None, cluster=cluster)
        with self._lock:
            searcher = self.retriever(retriever)
            name = searcher.name
            query_string = None
            if uses_bm25(name):
                query_string = searcher.formulate([query], query_format)[0]  # type: ignore[attr-defined]

                warn_long_queries([query_string], ["--context"])
            flow = QueryFlow(searcher, self.reader, self.loaded_reader, expansion=self.expansion,
                             expander=self._expansion_engine)
            answered = flow.answer(query, k, rerank_k, rounds, query_string)
            hits, spans = answered.hits, answered.spans
            rerank_fusion = flow.fusion()[0] if rerank_k else None
            expansion = None
            if answered.expansions is not None:
                options = replace(self.expansion, rounds=2)
                expansion = {**options.describe(rerank_k > 0), **flow.times.candidates,
                             "passages_without_candidates": flow.times.passages_without, "queries": [
                                 {"passage_id": x.passage_id, "mention": x.mention, "start": x.start, "end": x.end}
                                 for x in answered.expansions]}
                if not answered.expansions:
                    expansion["note"] = (f"no coreferring mention found in the top {options.expand} passages "
                                         f"({flow.times.passages_without} without a candidate): the answer is the "
                                         "first round's")
            results = []
            for rank, hit in enumerate(hits, start=1):
                passage = searcher.passage(hit.passage_id)
                # Matched-term highlighting is BM25's (also in hybrid); dense scores match no terms.
                matched = matched_spans(passage["text"], query_string) if query_string is not None else []
                results.append(AdhocHit(rank, hit.score, hit.passage_id, passage["title"], passage["text"], matched,
                                        spans.get(hit.passage_id)))
            if found is not None and self.dataset is not None:
                gold = cluster_mentions(self.dataset, {hit.passage_id for hit in results
                                                       if hit.passage_id in found.relevant}, query.cluster_id)
                for hit in results:
                    hit.relevant = hit.passage_id in found.relevant
                    hit.gold_mentions = gold.get(hit.passage_id, [])
            cluster_record = self._cluster(query, results, spans) if cluster else None
            described = searcher.describe()
            encoder = described["dense"]["encoder"] if described.get("dense") else None
            return AdhocResult(query, query_string, occurrences, results, retriever=name, encoder=encoder,
                               fusion=described["fusion"]["method"] if described.get("fusion") else None,
                               reader=str(self.reader.model) if rerank_k and self.reader is not None else None,
                               rerank_fusion=rerank_fusion, split=found.split if found is not None else None,
                               relevant_total=len(found.relevant) if found is not None else None,
                               expansion=expansion, cluster=cluster_record)

    # --- the second round and the cluster answer ---

    def _dataset_dir(self) -> Path:
        """The dataset the index was built from (or the engine's ``--dataset``)."""
        manifest = self.retriever().manifest
        return self.dataset if self.dataset is not None else Path(manifest.get("dataset", ""))

    def _expansion_engine(self) -> Any:
        """The mention encoder's choice of mentions over the dataset's passages (built at its first use)."""
        if self.mention_encoder is None:
            raise InputError("without the reader's spans, the second round marks mentions with a mention encoder: "
                             "open the engine with --mention-encoder DIR, or re-rank (rerank_k > 0) with a reader")
        if self._expander is None:
            wanted = self.expansion.candidates if self.expansion.candidates in ("detected", "gold") else "detected"
            candidates = open_candidates(wanted, self._dataset_dir(), self.expansion.detector, self.retrieval.device)
            self._expander = EncoderExpansion(self.mention_encoder, candidates)
        return self._expander

    def _document_context(self, passage_id: str) -> tuple[str | None, str]:
        """A passage's document id and its first two passages (what the mention encoder reads as context)."""
        if not passage_id:
            return None, ""
        try:
            doc_id, document = self._document_file().document(passage_id)
        except (MissingArtefactError, InputError):
            return None, ""
        return doc_id, " ".join(record["text"] for record in document[:2])

    def _cluster(self, query: Query, hits: list[AdhocHit], spans: dict[str, tuple[int, int]]) -> dict[str, Any]:
        """The answer as a cluster: the reader's span in each hit, else the mention encoder's nearest mention of
        the dataset in it (``corefsearch.search.expansion.cluster_answer``)."""
        unmarked = [hit.passage_id for hit in hits if hit.passage_id not in spans]
        nearest: dict[str, Any] = {}
        source: dict[str, Any] = {"candidates": "reader"} if spans else {}
        unavailable = None
        if unmarked:
            try:
                expander = self._expansion_engine()
                nearest = expander.nearest([(query, unmarked)], count=False)[query.id]
                source = {**describe_candidates(expander.candidates), **({"reader": True} if spans else {})}
            except CorefSearchError as err:
                unavailable = str(err)  # e.g. no dataset beside the index: the reader's spans alone
        found = []
        for hit in hits:
            span = spans.get(hit.passage_id)
            if span is None and hit.passage_id in nearest:
                span = (nearest[hit.passage_id].start, nearest[hit.passage_id].end)
            if span is None or span[0] >= span[1]:
                continue
            doc_id, context = self._document_context(hit.passage_id)
            found.append(FoundMention(hit.passage_id, doc_id, hit.title, hit.text, span[0], span[1], hit.rank,
                                      context))
        # An ad-hoc query's document is its context alone (the head the encoder reads, as for a one-passage one).
        query_context = self._document_context(query.passage_id)[1] or query.text
        answer = cluster_answer(self.mention_encoder, query, query_context, found)
        answer.update(source)
        answer["passages_without_mentions"] = len(hits) - len(found)
        if not found:
            why = f" ({unavailable})" if unavailable else ""
            answer["note"] = (f"no mention found in the top {len(hits)} passages{why}: the cluster is the query "
                              "mention alone")
        return answer

    # --- passages ---

    def _document_file(self) -> PassageFile:
        if self._documents is None:
            retriever = self.retriever()
            manifest = retriever.manifest
            dataset = self.dataset if self.dataset is not None else Path(manifest.get("dataset", ""))
            path = dataset / "passages.jsonl"
            self._documents = PassageFile(
                path, manifest.get("passages_sha256"), f"the index {self.index}",
                missing=f"{path}, the passages of the dataset the index was built from, is gone; the documents "
                        "of passages are read from it",
                changed=f"{path} changed since the index {self.index} was built; rebuild the index (--overwrite)")
        return self._documents

    def passage(self, passage_id: str) -> dict[str, Any]:
        """``{"id", "title", "text", "doc_id", "document": [{"id", "text"}, ...]}``: the passage and
        every passage of its document, in order (from the dataset's passages file; when that is
        gone, ``doc_id`` is None and ``document`` holds the passage alone). An unknown id is an
        ``InputError``."""
        if not isinstance(passage_id, str) or not passage_id:
            raise InputError(f"a passage id must be a non-empty string, got {passage_id!r}")
        with self._lock:
            passage = self.retriever().passage(passage_id)
            try:
                doc_id, document = self._document_file().document(passage_id)
            except MissingArtefactError as err:
                warnings.warn(str(err), stacklevel=2)
                doc_id, document = None, [passage]
            return {"id": passage["id"], "title": passage["title"], "text": passage["text"], "doc_id": doc_id,
                    "document": [{"id": record["id"], "text": record["text"]} for record in document]}

    def describe(self) -> dict[str, Any]:
        """The index, the retrievers open, the options, the dense encoder, the reader, the dataset and
        the versions of corefsearch and the libraries it runs on."""
        encoder = None
        for retriever in self._opened.values():
            encoder = retriever.describe().get("dense")
            if encoder is not None:
                break
        reader = None
        if self.reader is not None and self.loaded_reader is not None:
            fusion, from_model = self.reader.fusion_for(self.loaded_reader.config)
            reader = {"model": str(Path(self.reader.model).resolve()), "rerank_k": self.reader.rerank_k,
                      "head": self.loaded_reader.config.head, "fusion": fusion,
                      "fusion_from": "model" if from_model else "--rerank-fusion", "backend": self.reader.backend}
        bm25 = any(uses_bm25(name) for name in self.retrievers)
        options = {"bm25": asdict(self.options) if bm25 else None,
                   "retrieval": {"retriever": self.retrievers[0], "encoder": self.retrieval.encoder,
                                 "device": self.retrieval.device, "fusion": self.retrieval.fusion.to_json()}}
        return {"index": str(self.index.resolve()), "retrievers": list(self.retrievers),
                "tags": {name: retriever.tag for name, retriever in self._opened.items()}, "options": options,
                "encoder": encoder, "reader": reader,
                "mention_encoder": (str(Path(self.expansion.encoder).resolve())
                                    if self.mention_encoder is not None and self.expansion.encoder else None),
                "expansion": {"rounds": self.expansion.rounds, "expand": self.expansion.expand,
                              "weight": self.expansion.weight, "candidates": self.expansion.candidates,
                              "detector": self.expansion.detector},
                "dataset": str(self.dataset.resolve()) if self.dataset is not None else None,
                "passages_sha256": self.retriever().passages_sha256,
                "load_seconds": dict(self.load_seconds), "versions": versions(*VERSIONED, python=True)}
