"""Re-ranking with a reader: ``--reader MODEL_DIR --rerank-k N`` re-ranks a retriever's top N
passages of each query (by the reader's score, or by reciprocal rank fusion of the reader's and
the retriever's ranks) and marks the coreferring span in each."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.models import check_device, check_model_folder, model_kind
from corefsearch.base.onnx_backend import check_backend_device, check_onnx_export, resolve_backend
from corefsearch.base.schema import Hit, Query
from corefsearch.base.shipped import resolve_reference
from corefsearch.fusion import reciprocal_rank_fusion
from corefsearch.reader.model import CrossEncoderReader
from corefsearch.reader.read import Reader

RERANK_FUSIONS = ("reader", "rrf")
DEFAULT_BATCH_QUERIES = 8  # queries whose windows are read together (search over a queries file)
MAX_PASS_WINDOWS = 256  # windows per pass at most when several queries are read together


@dataclass
class ReaderOptions:
    """``--reader MODEL_DIR --rerank-k N``: re-rank the top N retrieved passages and mark spans."""

    model: Path = field(metadata={
        "help": "Re-rank with this reader (from `corefsearch train reader`) and mark the coreferring spans.",
        "option": "--reader"})
    rerank_k: int = field(default=50, metadata={"help": "With --reader: re-rank the top N retrieved passages."})
    # windows per forward pass at most (None or 0: no cap); a query's windows are read in length
    # buckets either way (Reader, reader/inputs.length_buckets)
    batch_size: int | None = None
    # the encoder's runtime: torch | onnx | onnx-int8 (MODEL_DIR/onnx/, export-onnx); None: torch, or onnx-int8 for a
    # folder that ships only that export (validate resolves it, so that what is recorded is what runs)
    backend: str | None = None
    threads: int | None = None  # ONNX Runtime intra-op threads (default: torch's)
    device: str = "auto"
    # queries whose windows `search` reads together, in passes across them (1: each query alone); the
    # scores are the same either way (see Reader.read_many)
    batch_queries: int = field(default=DEFAULT_BATCH_QUERIES, metadata={"help": (
        "With --reader: read the windows of N queries together, in passes across them (fuller passes on a GPU; the "
        "same scores; default 8)."), "option": "--rerank-batch-queries"})
    # reader: the reader's order; rrf: reciprocal rank fusion with the retriever's; None: the fusion
    # `train reader` recorded in the reader's folder (corefsearch_reader.json), see fusion_for
    fusion: str | None = field(default=None, metadata={"help": (
        "With --reader: order the re-ranked passages by the reader's score (reader) or by reciprocal rank fusion of "
        "the reader's and the retriever's ranks (rrf); default: the one `train reader` recorded in the reader's "
        "folder (the better on dev; reader for an older folder)."), "option": "--rerank-fusion"})

    def validate(self) -> None:
        check_rerank_k(self.rerank_k, minimum=1, option="--rerank-k")
        at_least_one("--rerank-batch-queries", self.batch_queries)

        check_device(self.device)
        if self.fusion is not None and self.fusion not in RERANK_FUSIONS:
            raise InputError(f"--rerank-fusion must be one of {', '.join(RERANK_FUSIONS)}, got {self.fusion!r}")
        if self.batch_size is not None and self.batch_size < 0:
            raise InputError(f"reader batch size must be at least 1 (0: no cap), got {self.batch_size}")

        check_backend_device(self.backend, self.device)
        self.model = resolve_reference(self.model)  # a shipped reader's name: its folder
        check_model_folder(Path(self.model), "--reader")
        self.backend = resolve_backend(self.model, self.backend, self.device)
        if self.backend != "torch" and model_kind(self.model) == "reader":  # else: "not a reader"
            check_onnx_export(Path(self.model), self.backend)

    def load(self) -> Any:
        return Reader.load(Path(self.model), self.device, self.batch_size, self.backend, self.threads)

    def read_config(self) -> Any:
        """The reader's configuration (head, markers, recorded fusion), checked, without its weights."""
        return CrossEncoderReader.read_config(Path(self.model))

    def fusion_for(self, config: Any) -> tuple[str, bool]:
        """The fusion to re-rank with and whether it comes from the reader's folder: ``--rerank-fusion``
        when given, else the one ``train reader`` recorded in ``config`` (the better on dev; ``reader``
        in a folder written before it was recorded)."""
        if self.fusion is not None:
            return self.fusion, False
        return config.fusion, True


def check_rerank_k(rerank_k: object, *, has_reader: bool = True, minimum: int = 0, limit: int | None = None,
                   option: str = "rerank_k") -> None:
    """The one check of how many retrieved passages the reader re-ranks: a whole number of at least
    ``minimum`` (0: no re-ranking), more than 0 only with a reader, at most ``limit`` (a server's)."""
    if isinstance(rerank_k, bool) or not isinstance(rerank_k, int) or rerank_k < minimum:
        raise InputError(f"{option} must be at least {minimum}, got {rerank_k!r}" if minimum else
                         f"{option} must be a whole number, 0 for no re-ranking, got {rerank_k!r}")
    if rerank_k and not has_reader:
        raise InputError("re-ranking needs a reader: open the engine with one (--reader MODEL_DIR), or ask with "
                         "rerank_k 0")
    if limit is not None and rerank_k > limit:
        raise InputError(f"{option}: must be between 0 and {limit} (this server's limit), got {rerank_k}")


def rerank_hits(reader: Any, query: Query, hits: list[Any], texts: dict[str, dict[str, Any]],
                rerank_k: int, fusion: str = "reader") -> tuple[list[Any], list[Any]]:
    """The top ``rerank_k`` hits re-ranked, then the rest in the retriever's order with scores
    below them (a TREC run is ordered by score); and the reader's hits (with their spans).
    ``fusion="reader"`` orders the re-ranked hits by the reader's score; ``"rrf"`` by reciprocal
    rank fusion of the reader's and the retriever's ranks (the retriever keeps a say)."""
    head = hits[:rerank_k]
    read = reader.read(query, [(h.passage_id, texts[h.passage_id]["text"]) for h in head])
    return order_reranked(read, hits, rerank_k, fusion), read


def rerank_many(reader: Any, block: list[tuple[Query, list[Any]]], texts: dict[str, dict[str, Any]],
                rerank_k: int, fusion: str = "reader") -> list[tuple[list[Any], list[Any]]]:
    """:func:`rerank_hits` of each ``(query, hits)`` of ``block``, the windows of all of them read together
    (:meth:`~corefsearch.reader.read.Reader.read_many`): the same results, in fewer, fuller passes."""
    items = [(query, [(h.passage_id, texts[h.passage_id]["text"]) for h in hits[:rerank_k]]) for query, hits in block]
    reads = reader.read_many(items, MAX_PASS_WINDOWS) if len(block) > 1 else [reader.read(*items[0])] if block else []
    return [(order_reranked(read, hits, rerank_k, fusion), read) for (_, hits), read in zip(block, reads, strict=True)]


def order_reranked(read: list[Any], hits: list[Any], rerank_k: int, fusion: str = "reader") -> list[Any]:
    """A query's final ranking from the reader's hits of its top ``rerank_k`` and the retriever's ``hits``."""
    if fusion == "rrf":
        reader_ranking = {"q": [Hit(r.passage_id, r.score) for r in read]}
        retriever_ranking = {"q": list(hits[:rerank_k])}
        ranked = reciprocal_rank_fusion([reader_ranking, retriever_ranking], k=len(read))["q"]
    else:
        ranked = [Hit(r.passage_id, r.score) for r in read]
    floor = min((h.score for h in ranked), default=0.0)
    return ranked + [Hit(h.passage_id, floor - 1.0 - i) for i, h in enumerate(hits[rerank_k:])]
