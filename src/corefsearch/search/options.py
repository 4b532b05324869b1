"""The options of a search, resolved and checked once at the door.

``search``, ``query`` and ``serve`` (and the library's ``search_to_run``, ``adhoc_query`` and
``SearchEngine``) build one :class:`SearchOptions`: the BM25 query, the retrieval (which retriever,
the dense encoder, the fusion), the reader, the second round and the mention encoder
(:class:`ExpansionOptions`), the depth ``k``, the cluster answer and Ray. :meth:`SearchOptions.check`
validates them together before anything loads and works out what the options leave open (which
candidates the second round takes) once; the flow (``corefsearch.search.flow``) and the engine
(``corefsearch.search.engine``) read the resolved values and check nothing again but what a single
question may change (its ``k``, ``rerank_k``, ``rounds``, ``cluster``: :meth:`SearchOptions.check_question`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.models import check_device, check_model_folder
from corefsearch.base.onnx_backend import check_backend_device
from corefsearch.base.shipped import resolve_reference, shipped_default
from corefsearch.dense.model import check_query_backend
from corefsearch.dense.store import DENSE_DIR, load_dense_manifest
from corefsearch.detect.detectors import check_detector
from corefsearch.fusion import FusionOptions
from corefsearch.reader.rerank import ReaderOptions, check_rerank_k
from corefsearch.search.calibration import resolve_order
from corefsearch.search.candidates import check_candidates
from corefsearch.sparse.search import BM25Options

# --- the retrieval ---------------------------------------------------------------------------------

# Each retriever name: the index backends it searches (``corefsearch.search.backends``), in the order its
# composition takes them.
RETRIEVERS: dict[str, tuple[str, ...]] = {"bm25": ("lucene",), "dense": ("dense",), "hybrid": ("lucene", "dense")}


@dataclass
class RetrievalOptions:
    """Which retriever answers (``bm25``, ``dense`` or ``hybrid``) and the dense and fusion settings."""

    retriever: str = field(default="bm25", metadata={"help": "bm25 | dense | hybrid (BM25 and dense fused)."})
    encoder: str | None = field(default=None, metadata={  # default: the encoder the dense index was built with
        "help": "Dense query encoder (default: the one the dense index was built with)."})
    device: str = field(default="auto", metadata={"help": "Dense and reader: auto | cpu | cuda."})
    fusion: FusionOptions = field(default_factory=FusionOptions)
    # the dense query encoder's runtime: torch | onnx | onnx-int8 (its folder's onnx/, `corefsearch export-onnx`)
    backend: str | None = field(default=None, metadata={"help": (
        "Run the transformer encoders (the dense query encoder with --retriever dense|hybrid, the reader's with "
        "--reader) with torch | onnx | onnx-int8 (ONNX Runtime on the CPU, from the exports `corefsearch export-onnx "
        "MODEL_DIR` writes); default torch, or onnx-int8 for a folder that ships only that export.")})
    # search-time FAISS settings over the manifest's (--ef-search: HNSW, --nprobe: IVF-PQ; None: the manifest's),
    # checked against the index by DenseSearcher (faiss_index.check_search_parameters)
    ef_search: int | None = field(default=None, metadata={"option": "--ef-search", "help": (
        "Dense HNSW index: the search's candidate list (default: the index's, 128; at least k either way). Higher "
        "finds more of the exact neighbours, more slowly.")})
    nprobe: int | None = field(default=None, metadata={"option": "--nprobe", "help": (
        "Dense IVF-PQ index: inverted lists visited per query (default: the index's, 32). Higher finds more of the "
        "exact neighbours, more slowly.")})

    def validate(self) -> None:
        check_retriever_name(self.retriever)
        self.fusion.validate()
        if self.uses_dense:
            check_device(self.device)
            check_backend_device(self.backend, self.device)

    @property
    def search_parameters(self) -> dict[str, int]:
        """The FAISS search settings given here, by their manifest names (``efSearch``, ``nprobe``)."""
        given = {"efSearch": self.ef_search, "nprobe": self.nprobe}
        return {name: value for name, value in given.items() if value is not None}

    @property
    def uses_bm25(self) -> bool:
        return uses_bm25(self.retriever)

    @property
    def uses_dense(self) -> bool:
        return uses_dense(self.retriever)


def check_retriever_name(name: str) -> None:
    if name not in RETRIEVERS:
        raise InputError(f"--retriever must be one of {', '.join(RETRIEVERS)}, got {name!r}")


def uses_bm25(name: str) -> bool:
    """Whether the retriever ``name`` searches the Lucene index (its queries are BM25 strings)."""
    return "lucene" in RETRIEVERS[name]


def uses_dense(name: str) -> bool:
    """Whether the retriever ``name`` encodes its queries (a device and a runtime to check)."""
    return "dense" in RETRIEVERS[name]



# --- the second round ------------------------------------------------------------------------------

# Chosen on ECB+ dev (bench/second_round.py; bench/RESULTS.md, "The head and the tail" for the shape, "Detected
# candidates" for the gate): the top 10 passages' detected mentions that pass the cosine 0.9 are searched; the top
# 10 ranks are the first round's with those passages moved up (the lists' own passages alone), the ranks below come
# from the whole lists. w 2 and 4 tie on dev MRR@10 with detected candidates; 4 has the better R@100.
DEFAULT_EXPAND = 10
DEFAULT_WEIGHT = 4.0
DEFAULT_MIN_SIMILARITY = 0.9
DEFAULT_RECIPROCAL = 0
DEFAULT_MARGIN: float | None = None
DEFAULT_LIST_DEPTH = 0
DEFAULT_HEAD = 10
DEFAULT_ORDER = "auto"
ORDERS = ("auto", "gate", "calibrated")
# The margin test's background: the first round's passages ranked 21st to 100th, which mostly hold other
# events; with the test on, the first round is searched at least this deep.
BACKGROUND_FROM = 20
BACKGROUND_DEPTH = 100
RRF_K = 60  # Cormack et al. (2009), and Pyserini's default


@dataclass
class ExpansionOptions:
    """``--rounds``, ``--expand N``, ``--expand-weight W``, ``--expand-from reader|encoder``,
    ``--mention-encoder DIR`` (for ``encoder``), ``--expand-min-similarity``, ``--expand-reciprocal R``,
    ``--expand-margin δ``, ``--expand-list-depth L`` and ``--expand-head H``."""

    rounds: int = field(default=1, metadata={"help": (
        "2: a second round from the coreferring mentions the first found in its top --expand passages (the reader's "
        "spans, or the mention encoder's nearest mentions), fused with the first.")})
    expand: int = field(default=DEFAULT_EXPAND, metadata={"help": (
        "With --rounds 2: the top N passages whose coreferring mentions are kept, moved up and (with "
        "--expand-list-depth 0 or > 1) searched again (default 10, chosen on dev).")})
    weight: float = field(default=DEFAULT_WEIGHT, metadata={"option": "--expand-weight", "help": (
        "With --rounds 2: the weight of the second round in the weighted RRF; the first weighs 1 (default 4, chosen "
        "on dev).")})
    # None: the reader's spans when there is a reader and no mention encoder, else detected (see candidates_for)
    candidates: str | None = field(default=None, metadata={"help": (
        "With --rounds 2 (and --cluster): where the coreferring mentions come from. detected (the default): a "
        "mention detector's mentions of the top passages, the mention encoder picking the nearest in each; gold: "
        "the dataset's annotated mentions (an upper bound, not available on unannotated text); reader: the "
        "reader's spans (the default with --reader and no --mention-encoder).")})
    detector: str | None = field(default=None, metadata={"help": (
        "With --candidates detected: heuristic, a detector folder (`train detector`) or a shipped detector's name, "
        "run on the top passages at query time (default: the dataset's stored predicted mentions from `corefsearch "
        "detect`, else the shipped detector, else heuristic).")})
    encoder: Path | None = field(default=None, metadata={"option": "--mention-encoder", "help": (
        "With --rounds 2 --candidates detected|gold: the mention encoder folder (`train clusterer`) or a shipped "
        "model's name (default: the shipped event mention encoder, when there is one).")})
    # encoder source: a passage whose nearest mention is less similar to the query's (cosine) gives no expansion
    min_similarity: float | None = field(default=DEFAULT_MIN_SIMILARITY, metadata={
        "option": "--expand-min-similarity", "help": (
            "With --rounds 2 --candidates detected|gold: a passage whose nearest mention is less similar to the "
            "query mention (cosine) gives no expansion (default 0.9, chosen on dev).")})
    # an expansion whose own search does not rank the query's passage in its top R is dropped (0: none is)
    reciprocal: int = field(default=DEFAULT_RECIPROCAL, metadata={
        "option": "--expand-reciprocal", "cli": False, "help": (
        "With --rounds 2: an expansion counts only when its own search ranks the query's passage in its top R (0: "
        "every expansion counts; default 0, chosen on dev). Queries whose passage is not in the collection (ad hoc "
        "ones) skip the test.")})
    # encoder source: an expansion mention must be this much more similar to the query's than any mention of the
    # first round's background passages (ranks 21 to 100) is (None: no such test)
    margin: float | None = field(default=DEFAULT_MARGIN, metadata={"option": "--expand-margin", "cli": False, "help": (
        "With --rounds 2 --expand-from encoder: an expansion mention counts only when its cosine to the query "
        "mention exceeds by this margin the highest of any mention in the first round's passages ranked 21st to "
        "100th (searched that deep): a gate set by each query's own background, not a fixed cosine.")})
    # how many passages of each expansion's list (its own passage first) the fusion reads (0: all of them)
    list_depth: int = field(default=DEFAULT_LIST_DEPTH, metadata={
        "option": "--expand-list-depth", "cli": False, "help": (
        "With --rounds 2: how many passages of each expansion's list the fusion reads, its own passage first (0: "
        "all, the default, chosen on dev; 1: the top passages whose mention corefers move up, and with "
        "--expand-reciprocal 0 nothing is searched).")})
    # the top H ranks from each list's own passage alone, the rest from the lists read to list_depth (0: no split)
    head: int = field(default=DEFAULT_HEAD, metadata={"option": "--expand-head", "cli": False, "help": (
        "With --rounds 2: the top H ranks come from the expansions' own passages alone (as --expand-list-depth 1 "
        "orders them), the ranks below from their searches (0: every rank from the searches; default 10, chosen on "
        "dev: the searches raise R@100 and leave MRR@10 as the moved-up passages give it).")})

    # how the top `head` ranks are ordered: gate (the passing passages first) or calibrated (search/calibration.py)
    order: str = field(default=DEFAULT_ORDER, metadata={"option": "--expand-order", "help": (
        "With --rounds 2: how the top 10 is ordered. gate: the passages whose mention passes "
        "--expand-min-similarity move up, in their first-round order; calibrated: each passage by its chance of "
        "being relevant given its first-round rank and the gate, as a model fitted to this collection without gold "
        "gives it (`corefsearch calibrate`; the first round's order where the gate seldom passes its top); auto "
        "(the default): calibrated when the index holds a calibration, else gate.")})
    calibration: Path | None = field(default=None, metadata={"option": "--expand-calibration", "help": (
        "With --expand-order calibrated: the calibration file (`corefsearch calibrate`; default: "
        "INDEX/second-round-calibration.json).")})

    @property
    def active(self) -> bool:
        return self.rounds == 2

    def validate(self, has_reader: bool) -> None:
        if self.rounds not in (1, 2):
            raise InputError(f"--rounds must be 1 or 2, got {self.rounds}")
        if self.expand < 0:
            raise InputError(f"--expand must not be negative, got {self.expand}")
        if not (self.weight >= 0 and math.isfinite(self.weight)):
            raise InputError(f"--expand-weight must be a number ≥ 0, got {self.weight}")
        if self.reciprocal < 0:
            raise InputError(f"--expand-reciprocal must not be negative (0 turns the test off), got {self.reciprocal}")
        if self.min_similarity is not None and not -1 <= self.min_similarity <= 1:
            raise InputError(f"--expand-min-similarity is a cosine similarity in [-1, 1], got {self.min_similarity}")
        if self.list_depth < 0:
            raise InputError(f"--expand-list-depth must not be negative (0 reads every passage of each list), "
                             f"got {self.list_depth}")
        if self.head < 0:
            raise InputError(f"--expand-head must not be negative (0: no split), got {self.head}")
        if self.order not in ORDERS:
            raise InputError(f"--expand-order must be one of {', '.join(ORDERS)}, got {self.order!r}")
        if self.calibration is not None and self.order == "gate":
            raise InputError("--expand-calibration is the calibration of --expand-order calibrated, not gate")
        if self.order == "calibrated" and self.head == 0:
            raise InputError("--expand-order calibrated orders the top ranks (the head): it needs --expand-head > 0")
        if self.margin is not None and not -2 <= self.margin <= 2:
            raise InputError(f"--expand-margin is a difference of cosine similarities, in [-2, 2], got {self.margin}")
        if self.candidates is not None:
            check_candidates(self.candidates)
        if self.detector is not None and self.candidates not in (None, "detected"):
            raise InputError(f"--detector finds the candidates of --candidates detected, not {self.candidates}: "
                             "leave it out")
        if not self.active:
            return
        candidates = self.candidates_for(has_reader)  # given, or as SearchOptions.check resolves it
        if candidates == "reader" and not has_reader:
            raise InputError("--candidates reader takes the spans of --reader: add --reader MODEL_DIR, or use "
                             "--candidates detected --mention-encoder DIR")
        if candidates != "reader" and self.encoder is None:
            raise InputError(f"--rounds 2 with --candidates {candidates}: the mention encoder picks the coreferring "
                             "mention among the candidates; add --mention-encoder DIR (from `corefsearch train "
                             "clusterer`), or --reader MODEL_DIR --candidates reader")
        if candidates != "reader":
            check_model_folder(self.encoder, "--mention-encoder")
        if self.detector is not None:
            check_detector(self.detector, option="--detector")
        if candidates == "reader" and self.list_depth == 1 and self.expand:
            import warnings

            warnings.warn("--candidates reader with --expand-list-depth 1 leaves the first round as it is: every top "
                          "passage the reader read has a span, so all of them move up together. Give "
                          "--expand-list-depth 0 (or more than 1) to fuse the expansions' searches", stacklevel=2)

    def candidates_for(self, has_reader: bool) -> str:
        """The candidates a run takes: ``--candidates``, else the reader's spans when there is a reader and no
        mention encoder, else detected ones (never the annotations unless asked). Worked out once, at the door
        (:meth:`SearchOptions.check`, which stores it in ``candidates``)."""
        return self.candidates or ("reader" if has_reader and self.encoder is None else "detected")

    def resolved(self, has_reader: bool) -> ExpansionOptions:
        """These options with their candidates worked out (:meth:`candidates_for`)."""
        return replace(self, candidates=self.candidates_for(has_reader))

    @property
    def source(self) -> str:
        """Who marks the mentions: the ``reader`` (its spans) or the mention ``encoder`` (among candidates)."""
        return "reader" if self.candidates == "reader" else "encoder"

    @property
    def encoder_candidates(self) -> str:
        """The candidates the mention encoder picks among (the cluster answer's, for the hits without a reader's
        span): the resolved ones, detected ones when those are the reader's spans."""
        return self.candidates if self.candidates in ("detected", "gold") else "detected"

    def first_depth(self, k: int) -> int:
        """How deep the first round of a second round is searched, for a run of depth ``k``: to the margin
        test's background."""
        if self.margin is not None and self.source == "encoder":
            return max(k, BACKGROUND_DEPTH)
        return k

    def describe(self) -> dict[str, Any]:
        """The run metadata's ``expansion`` (of resolved options)."""
        source = self.source
        return {"rounds": self.rounds, "expand": self.expand, "source": source,
                "candidates": self.candidates,
                "weights": {"first": 1.0, "second": self.weight}, "rrf_k": RRF_K,
                "encoder": str(Path(self.encoder).resolve()) if source == "encoder" and self.encoder else None,
                "min_similarity": self.min_similarity if source == "encoder" else None,
                "margin": self.margin if source == "encoder" else None,
                "background_ranks": [BACKGROUND_FROM + 1, BACKGROUND_DEPTH] if source == "encoder" else None,
                "reciprocal": self.reciprocal, "list_depth": self.list_depth, "head": self.head,
                "order": self.order,
                "calibration": str(Path(self.calibration).resolve()) if self.calibration is not None else None}

    @classmethod
    def from_metadata(cls, record: Mapping[str, Any]) -> ExpansionOptions:
        """The options a run's metadata ``expansion`` records."""
        similarity, margin = record.get("min_similarity"), record.get("margin")
        return cls(rounds=int(record["rounds"]), expand=int(record["expand"]),
                   weight=float(record["weights"]["second"]),
                   # runs written before --candidates: the encoder's candidates were the annotated mentions
                   candidates=record.get("candidates") or ("reader" if record["source"] == "reader" else "gold"),
                   encoder=Path(record["encoder"]) if record.get("encoder") else None,
                   min_similarity=float(similarity) if similarity is not None else None,
                   margin=float(margin) if margin is not None else None,  # None also in runs written before it
                   # runs written before the test existed had none
                   reciprocal=int(record.get("reciprocal", 0)),
                   # runs written before the option fused every passage of each list
                   list_depth=int(record.get("list_depth", 0)),
                   head=int(record.get("head", 0)),  # runs written before it had no split
                   order=str(record.get("order", "gate")),  # runs written before it: the gate's order
                   calibration=Path(record["calibration"]) if record.get("calibration") else None)


@dataclass
class SearchOptions:
    """Everything one search is asked to do (a queries file, or the questions of one engine).

    ``retrievers``: the retrievers opened (``serve`` opens several; the first answers by default; empty:
    ``retrieval.retriever`` alone). ``expansion``: the second round and the mention encoder (``None``: one
    round, no encoder). ``k``: the depth (a question to an engine may ask another). ``ray``
    (``corefsearch.distributed.session.RayOptions``): the reader's re-ranking on a Ray cluster."""

    bm25: BM25Options = field(default_factory=BM25Options)
    retrieval: RetrievalOptions = field(default_factory=RetrievalOptions)
    reader: ReaderOptions | None = None
    expansion: ExpansionOptions | None = None
    k: int = 10
    retrievers: tuple[str, ...] = ()
    cluster: bool = False
    ray: Any = None
    checked: bool = field(default=False, init=False, compare=False, repr=False)  # set by check()
    # the second round's order as asked, before check() worked out auto (search_to_run says when auto gave gate)
    order_asked: str | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def names(self) -> list[str]:
        """The retrievers to open, the default first."""
        return list(dict.fromkeys(self.retrievers or (self.retrieval.retriever,)))

    @property
    def rerank_k(self) -> int:
        return self.reader.rerank_k if self.reader is not None else 0

    @property
    def rounds(self) -> int:
        return self.expansion.rounds if self.expansion is not None else 1

    @property
    def mention_encoder(self) -> Path | None:
        return self.expansion.encoder if self.expansion is not None else None

    def check(self, index: Path | None = None, log: Callable[[str], None] | None = None) -> SearchOptions:
        """Validate the options together, before anything loads, and resolve the models (:meth:`resolve_models`)
        and the second round's candidates (in place, once; a second call does nothing). ``index``: also check
        that an ONNX ``--backend`` has an export of the dense query encoder to run. ``log``: where to say which
        shipped model a default took."""
        if self.checked:
            return self
        self.resolve_models(log)
        for name in self.names:
            check_retriever_name(name)
            replace(self.retrieval, retriever=name).validate()
        self.bm25.validate()
        at_least_one("--k", self.k)
        if self.reader is not None:
            self.reader.validate()
        if self.ray is not None:
            if self.reader is None:
                raise InputError("--ray spreads the reader's re-ranking over a Ray cluster (retrieval runs here): "
                                 "add --reader MODEL_DIR")
            self.ray.validate()
        if self.expansion is not None:
            self.expansion.validate(has_reader=self.reader is not None)
            self.expansion = self.expansion.resolved(self.reader is not None)
            self.order_asked = self.expansion.order
            resolve_order(self.expansion, index)
        if self.cluster and self.mention_encoder is None:
            raise InputError("--cluster clusters the mentions found with a mention encoder: add --mention-encoder "
                             "DIR (from `corefsearch train clusterer`)")
        if index is not None:
            self._check_backend(Path(index))
        self.checked = True
        return self

    def resolve_models(self, log: Callable[[str], None] | None = None) -> None:
        """Each model reference as a folder (a shipped model's name: its folder, so that a run records the
        folder), and the shipped event mention encoder where the second round's candidates or the cluster answer
        need a mention encoder and none is given (said through ``log``); with none shipped, nothing is added."""
        self.retrieval = replace(self.retrieval, encoder=resolve_reference(self.retrieval.encoder))
        if self.reader is not None:
            self.reader = replace(self.reader, model=resolve_reference(self.reader.model))
        expansion = self.expansion
        if expansion is not None:
            self.expansion = replace(expansion, encoder=resolve_reference(expansion.encoder),
                                     detector=resolve_reference(expansion.detector))
        if self.mention_encoder is not None:
            return
        needed = self.cluster or (expansion is not None and expansion.active
                                  and expansion.candidates_for(self.reader is not None) != "reader")
        shipped = shipped_default("clusterer", "event", log) if needed else None  # the queries mark events
        if shipped is not None:
            self.expansion = replace(self.expansion or ExpansionOptions(), encoder=Path(shipped))

    def _check_backend(self, index: Path) -> None:
        """An ONNX ``--backend`` for a dense query encoder that has no export to run, or another than onnx-int8 for
        one that ships only that export."""
        if not any(uses_dense(name) for name in self.names):  # torch too: an inference-only encoder refuses it
            return
        encoder = self.retrieval.encoder
        if encoder is None and (index / DENSE_DIR).is_dir():  # else: opening it says what is missing
            encoder = load_dense_manifest(index)["encoder"]["reference"]
        if encoder is not None:
            check_query_backend(encoder, self.retrieval.backend, self.retrieval.device)

    @property
    def second_round(self) -> ExpansionOptions:
        """The second round's options, resolved, also where no ``--rounds 2`` was given (an engine's question
        may ask for one)."""
        return self.expansion or ExpansionOptions().resolved(self.reader is not None)

    def check_question(self, k: int, rerank_k: int, rounds: int, cluster: bool, *, has_reader: bool,
                       has_mention_encoder: bool) -> None:
        """What one question to an opened engine may change (``k``, ``rerank_k``, ``rounds``, ``cluster``),
        checked against what the engine opened."""
        at_least_one("--k", k)
        check_rerank_k(rerank_k, has_reader=has_reader)
        if isinstance(rounds, bool) or rounds not in (1, 2):
            raise InputError(f"rounds must be 1 or 2, got {rounds!r}")
        if rounds == 2:
            source = self.second_round.source
            if source == "reader" and not rerank_k:
                raise InputError("a second round from the reader's spans needs re-ranking (rerank_k > 0)")
            if source == "encoder" and not has_mention_encoder:
                raise InputError("without the reader's spans, the second round marks mentions with a mention "
                                 "encoder: open the engine with --mention-encoder DIR, or re-rank (rerank_k > 0) "
                                 "with a reader")
        if cluster and not has_mention_encoder:
            raise InputError("a cluster answer clusters the mentions found with a mention encoder: open the engine "
                             "with --mention-encoder DIR (from `corefsearch train clusterer`)")
