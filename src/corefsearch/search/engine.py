"""The one door of a search: ``SearchEngine.open(INDEX, SearchOptions)`` opens, once, what the options
(``corefsearch.search.options``) ask for: the retrievers of an INDEX, the reader, the mention encoder and its
candidate mentions, and (warm) spaCy when the BM25 query format needs it. ``search`` runs a queries file
through its :meth:`~SearchEngine.flow` (``corefsearch.search.pipeline``); ``query`` and ``serve`` ask it any
number of ad-hoc questions ("where else is this mention's event mentioned?").

``SearchEngine.open(...)`` records how long each part took to load (``load_seconds``); ``query(...)`` answers
one mention, given as ``mention`` (+ ``occurrence``)
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
import threading
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from corefsearch.base import nlp
from corefsearch.base.artefacts import versions
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.models import resolve_device
from corefsearch.base.schema import Query
from corefsearch.datasets.dataset import Dataset
from corefsearch.datasets.lookup import cluster_mentions
from corefsearch.datasets.passages import PassageFile
from corefsearch.search.answers import AdhocHit, AdhocResult
from corefsearch.search.candidates import open_candidates
from corefsearch.search.cluster_answer import cluster_of_hits
from corefsearch.search.flow import QueryFlow
from corefsearch.search.options import RETRIEVERS, SearchOptions, uses_bm25
from corefsearch.search.queries import query_of
from corefsearch.search.retriever import IndexManifests, Retriever, open_retrievers
from corefsearch.search.second_round import EncoderExpansion
from corefsearch.sparse import highlight
from corefsearch.sparse.formulation import QUERY_FORMATS
from corefsearch.sparse.highlight import matched_spans
from corefsearch.sparse.search import warn_long_queries

# The spaCy pipeline each BM25 query format loads (corefsearch.base.nlp), if any.
SPACY_FOR_FORMAT = {"mention+entities": "ner_pipeline", "sentence": "sentencizer"}
VERSIONED = ("pyserini", "torch", "transformers", "faiss-cpu", "spacy", "onnxruntime", "fastapi", "uvicorn")


def detach_thread() -> None:
    """Detach the calling thread from the JVM (call it before a thread that searched with BM25 ends)."""
    import sys

    if "jnius" in sys.modules:
        import jnius

        jnius.detach()


class SearchEngine:
    """What a search's options ask for, opened once; a queries file's flow, or ad-hoc questions answered warm
    (see the module)."""

    def __init__(self, index: Path, options: SearchOptions, opened: dict[str, Retriever],
                 manifests: IndexManifests, loaded_reader: Any = None, reader_config: Any = None,
                 dataset: Path | None = None, mention_encoder: Any = None) -> None:
        self.index = Path(index)
        self.options = options
        self._opened = opened
        self.manifests = manifests
        self.retrievers: list[str] = list(opened)  # the names opened; the first is the default
        self.reader = options.reader
        self.loaded_reader = loaded_reader
        self.reader_config = reader_config if reader_config is not None else getattr(loaded_reader, "config", None)
        self.dataset = Path(dataset) if dataset is not None else None
        self.load_seconds: dict[str, float] = {}
        self.expansion = options.second_round  # the default rounds, N and weight of a question
        self.mention_encoder = mention_encoder  # --mention-encoder: the encoder's expansion and cluster answers
        self._lock = threading.RLock()
        self._documents: PassageFile | None = None
        self._expander: EncoderExpansion | None = None  # over the candidate mentions, built at its first use

    @classmethod
    def open(cls, index: Path, options: SearchOptions | None = None, dataset: Path | None = None, *,
             warm: bool = True) -> SearchEngine:
        """Open once what ``options`` ask for (checked first, if the caller has not: see
        :meth:`SearchOptions.check`). With ``dataset``, its queries can be asked by id and its passages hold
        the candidate mentions (the index must hold its passages); else the dataset the index was built from.
        ``warm``: also load now what the first question would (the Lucene searcher, the highlighter, spaCy, the
        candidate mentions); a queries file's search leaves them to its first query. Raises
        ``CorefSearchError`` subclasses."""
        options = (options or SearchOptions()).check(index)
        if dataset is not None:
            Dataset(dataset)  # a missing or broken dataset fails here, not at the first query
        load_seconds: dict[str, float] = {}
        started = time.perf_counter()
        manifests = IndexManifests.load(index, options.names)
        if dataset is not None:
            manifests.check_dataset(dataset)
        load_seconds["manifests"] = time.perf_counter() - started
        loaded_reader = reader_config = None
        if options.reader is not None and options.ray is not None:
            reader_config = options.reader.read_config()  # the Ray workers load the reader
        elif options.reader is not None:
            started = time.perf_counter()
            loaded_reader = options.reader.load()
            load_seconds["reader"] = time.perf_counter() - started
        mention_encoder = None
        if options.mention_encoder is not None:
            from corefsearch.cluster.model import MentionEncoder

            started = time.perf_counter()
            device = resolve_device(options.retrieval.device)
            mention_encoder = MentionEncoder.load(Path(options.mention_encoder), device)
            load_seconds["mention encoder"] = time.perf_counter() - started
        started = time.perf_counter()
        opened = open_retrievers(index, options.bm25, options.retrieval, options.names, manifests)
        if warm:
            for retriever in dict.fromkeys(opened.values()):
                retriever.warm()
        load_seconds["retrievers"] = time.perf_counter() - started
        if warm and any(uses_bm25(name) for name in options.names):
            started = time.perf_counter()
            highlight.warm()
            load_seconds["highlighter"] = time.perf_counter() - started
            pipeline = SPACY_FOR_FORMAT.get(options.bm25.query_format)
            if pipeline is not None:
                started = time.perf_counter()
                getattr(nlp, pipeline)()
                load_seconds["spacy"] = time.perf_counter() - started
        engine = cls(index, options, opened, manifests, loaded_reader, reader_config, dataset, mention_encoder)
        if warm and mention_encoder is not None:  # the candidate mentions (stored, or the detector) loaded once
            started = time.perf_counter()
            with contextlib.suppress(MissingArtefactError):  # no dataset beside the index: said when asked
                engine.expander().candidates.warm()
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

    def flow(self, retriever: str | None = None) -> QueryFlow:
        """The query flow over an opened retriever, with the engine's reader and second round."""
        return QueryFlow(self.retriever(retriever), self.options, self.loaded_reader, self.reader_config,
                         self.expansion, self.expander)

    # --- the candidate mentions: one rule for a file's search and for a question ---

    def candidates_dataset(self) -> Path:
        """Where the candidate mentions are read: the engine's dataset (``--dataset``, or the dataset a queries
        file lies in), else the dataset the index was built from, if it is still there."""
        if self.dataset is not None:
            return self.dataset
        for manifest in self.manifests.manifests.values():
            dataset = manifest.get("dataset")
            if dataset and (Path(dataset) / "passages.jsonl").is_file():
                return Path(dataset)
        raise MissingArtefactError(f"the candidate mentions are read from the passages of a dataset, and the index "
                                   f"{self.index} names none that is still there: give the dataset (--dataset, or "
                                   "queries of a dataset: DATASET/queries/SPLIT.jsonl)")

    def expander(self) -> EncoderExpansion:
        """The mention encoder's choice of mentions among the candidates (built at its first use)."""
        if self.mention_encoder is None:
            raise InputError("without the reader's spans, the second round marks mentions with a mention encoder: "
                             "open the engine with --mention-encoder DIR, or re-rank (rerank_k > 0) with a reader")
        if self._expander is None:
            candidates = open_candidates(self.expansion.encoder_candidates, self.candidates_dataset(),
                                         self.expansion.detector, self.options.retrieval.device)
            self._expander = EncoderExpansion(self.mention_encoder, candidates)
        return self._expander

    # --- questions ---

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
            rerank_k = self.options.rerank_k
        rounds = self.expansion.rounds if rounds is None else rounds
        self.options.check_question(k, rerank_k, rounds, cluster, has_reader=self.loaded_reader is not None,
                                    has_mention_encoder=self.mention_encoder is not None)
        with self._lock:
            flow = self.flow(retriever)
            searcher = flow.retriever
            query_string = None
            if uses_bm25(searcher.name):
                query_string = searcher.formulate([query], query_format)[0]  # type: ignore[attr-defined]
                warn_long_queries([query_string], ["--context"])
            answered = flow.answer(query, k, rerank_k, rounds, query_string)
            hits, spans = answered.hits, answered.spans
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
            cluster_record = cluster_of_hits(self.mention_encoder, self.expander, query, results, spans,
                                             self._document_context) if cluster else None
            described = searcher.describe()
            encoder = described["dense"]["encoder"] if described.get("dense") else None
            return AdhocResult(query, query_string, occurrences, results, retriever=searcher.name, encoder=encoder,
                               fusion=described["fusion"]["method"] if described.get("fusion") else None,
                               reader=str(self.reader.model) if rerank_k and self.reader is not None else None,
                               rerank_fusion=flow.fusion()[0] if rerank_k else None,
                               split=found.split if found is not None else None,
                               relevant_total=len(found.relevant) if found is not None else None,
                               expansion=flow.describe_answer(answered), cluster=cluster_record)

    # --- passages ---

    def _document_file(self) -> PassageFile:
        if self._documents is None:
            manifest = self.retriever().manifest
            dataset = self.dataset if self.dataset is not None else Path(manifest.get("dataset", ""))
            path = dataset / "passages.jsonl"
            self._documents = PassageFile(
                path, manifest.get("passages_sha256"), f"the index {self.index}",
                missing=f"{path}, the passages of the dataset the index was built from, is gone; the documents "
                        "of passages are read from it",
                changed=f"{path} changed since the index {self.index} was built; rebuild the index (--overwrite)")
        return self._documents

    def _document_context(self, passage_id: str) -> tuple[str | None, str]:
        """A passage's document id and its first two passages (what the mention encoder reads as context)."""
        if not passage_id:
            return None, ""
        try:
            doc_id, document = self._document_file().document(passage_id)
        except (MissingArtefactError, InputError):
            return None, ""
        return doc_id, " ".join(record["text"] for record in document[:2])

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
        if self.reader is not None and self.reader_config is not None:
            record = self.flow().describe_reader()
            reader = {key: record[key] for key in ("model", "rerank_k", "head", "fusion", "fusion_from", "backend")}
        bm25 = any(uses_bm25(name) for name in self.retrievers)
        retrieval = self.options.retrieval
        options = {"bm25": asdict(self.options.bm25) if bm25 else None,
                   "retrieval": {"retriever": self.retrievers[0], "encoder": retrieval.encoder,
                                 "device": retrieval.device, "fusion": retrieval.fusion.to_json()}}
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
