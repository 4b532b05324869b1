"""The options ``search``, ``query`` and ``serve`` share, and the one builder of their option objects."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from corefsearch.base.errors import CorefSearchError

IndexOption = Annotated[Path, typer.Option("--index", help="Index directory from `corefsearch index`.")]
Rm3Option = Annotated[bool, typer.Option("--rm3", help="RM3 pseudo-relevance feedback.")]
QUERY_FORMAT_HELP = ("BM25 query: mention | mention+entities | sentence | context | document (the whole "
                     "document of the query's passage, read from the index)")
RocchioOption = Annotated[bool, typer.Option(
    "--rocchio", help="Rocchio pseudo-relevance feedback (Pyserini's defaults; not with --rm3).")]
FieldsOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--fields", help="Field-weighted BM25 over the index's fields, e.g. sentence=1,title=0.5,document=0.2 "
                     "(fields: sentence, title, document, contents; not with --rm3/--rocchio).")]


def bm25_options(query_format: str, rm3: bool, rocchio: bool, fields: str | None, threads: int) -> Any:
    from corefsearch.sparse.search import BM25Options, parse_fields

    return BM25Options(query_format=query_format, rm3=rm3, rocchio=rocchio, threads=threads,
                       fields=parse_fields(fields) if fields is not None else None)


ENCODER_HELP = ("a retriever folder from `train retriever`, a Hugging Face model name or folder, "
                "or `default` (all-MiniLM-L6-v2, zero-shot)")
RetrieverOption = Annotated[str, typer.Option(help="bm25 | dense | hybrid (BM25 and dense fused).")]
SearchEncoderOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    help="Dense query encoder (default: the one the dense index was built with).")]
FusionOption = Annotated[str, typer.Option(help="Hybrid: rrf (reciprocal rank, k=60) | interpolate.")]
AlphaOption = Annotated[float, typer.Option(
    help="Hybrid --fusion interpolate: alpha·dense + (1-alpha)·BM25 on min-max normalised scores.")]
DeviceOption = Annotated[str, typer.Option(help="Dense and reader: auto | cpu | cuda.")]
PrecisionOption = Annotated[str, typer.Option(
    help="Numeric precision of the models' forward passes: auto (bf16 on a GPU that has it, fp32 on the CPU) | "
         "fp32 | bf16 | fp16. The weights stay fp32.")]
ReaderOption = Annotated[Optional[Path], typer.Option(  # noqa: UP045
    help="Re-rank with this reader (from `corefsearch train reader`) and mark the coreferring spans.")]
RerankOption = Annotated[int, typer.Option(help="With --reader: re-rank the top N retrieved passages.")]
RerankBatchQueriesOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="With --reader: read the windows of N queries together, in passes across them (fuller passes on a GPU; "
         "the same scores; default 8).")]
BackendOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    help="Run the transformer encoders (the dense query encoder with --retriever dense|hybrid, the reader's with "
         "--reader) with torch (default) | onnx | onnx-int8 (ONNX Runtime on the CPU, from the exports "
         "`corefsearch export-onnx MODEL_DIR` writes).")]
RerankFusionOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    help="With --reader: order the re-ranked passages by the reader's score (reader) or by reciprocal rank "
         "fusion of the reader's and the retriever's ranks (rrf); default: the one `train reader` recorded in "
         "the reader's folder (the better on dev; reader for an older folder).")]


def reader_options(reader: Path | None, rerank_k: int, device: str, fusion: str | None, backend: str | None = None,
            dense: bool = False, batch_queries: int | None = None) -> Any:
    """The reader's options; ``dense``: a dense retriever runs too (``--backend`` applies to it)."""
    if reader is None:
        if batch_queries is not None:
            raise CorefSearchError("--rerank-batch-queries sizes the reader's passes: add --reader MODEL_DIR")
        if backend is not None and not dense:
            raise CorefSearchError("--backend chooses the runtime of the transformer encoders, the dense retriever's "
                                   "and the reader's, and BM25 has none: add --reader MODEL_DIR, or use "
                                   "--retriever dense|hybrid")
        return None
    from corefsearch.reader.rerank import DEFAULT_BATCH_QUERIES, ReaderOptions

    return ReaderOptions(reader, rerank_k, device=device, fusion=fusion, backend=backend or "torch",
                         batch_queries=DEFAULT_BATCH_QUERIES if batch_queries is None else batch_queries)


EfSearchOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    "--ef-search", help="Dense HNSW index: the search's candidate list (default: the index's, 128; at least k "
                        "either way). Higher finds more of the exact neighbours, more slowly.")]
NprobeOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    "--nprobe", help="Dense IVF-PQ index: inverted lists visited per query (default: the index's, 32). Higher "
                     "finds more of the exact neighbours, more slowly.")]


def retrieval_options(retriever: str, encoder: str | None, fusion: str, alpha: float, device: str,
               backend: str | None = None, ef_search: int | None = None, nprobe: int | None = None,
               dense: bool | None = None) -> Any:
    """The retrieval options; ``dense``: a dense retriever is in use (default: ``retriever`` is one)."""
    from corefsearch.fusion import FusionOptions
    from corefsearch.search.retriever import RetrievalOptions

    if (ef_search is not None or nprobe is not None) and not (is_dense(retriever) if dense is None else dense):
        raise CorefSearchError("--ef-search and --nprobe tune the dense index's search: use them with "
                               "--retriever dense|hybrid")
    return RetrievalOptions(retriever, encoder, device, FusionOptions(fusion, alpha), backend=backend or "torch",
                            ef_search=ef_search, nprobe=nprobe)


def is_dense(retriever: str) -> bool:
    return retriever in ("dense", "hybrid")


RayOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--ray", help="Run the heavy stage on a Ray cluster: auto (the cluster of RAY_ADDRESS or one started on this "
                  "machine with `ray start --head`, else a local one for this run) | HOST:PORT (the head's address) "
                  "| ray://HOST:PORT. Same results as without; the dataset and model paths must be visible on every "
                  "node. Needs `pip install \"corefsearch[ray]\"`.")]
RayWorkersOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="With --ray: workers (one model each; default: as many as the cluster has CPUs, or GPUs with "
         "--device cuda).")]
RayCpusOption = Annotated[Optional[float], typer.Option(  # noqa: UP045
    help="With --ray: CPUs (and model threads) per worker (default 1).")]


def ray_options(address: str | None, workers: int | None, cpus: float | None) -> Any:
    """The Ray options of ``--ray``, or None; ``--ray-workers`` and ``--ray-cpus-per-worker`` need ``--ray``."""
    if address is None:
        if workers is not None or cpus is not None:
            raise CorefSearchError("--ray-workers and --ray-cpus-per-worker size the Ray workers: "
                                   "add --ray auto|ADDRESS")
        return None
    from corefsearch.distributed.session import RayOptions

    options = RayOptions(address, workers, 1.0 if cpus is None else cpus)
    options.validate()
    return options


@dataclass
class SearchSetup:
    """The option objects of one ``search``, ``query`` or ``serve``: BM25's, the retrieval's, the reader's."""

    bm25: Any
    retrieval: Any
    reader: Any


def search_setup(retrievers: list[str], *, query_format: str, rm3: bool, rocchio: bool, fields: str | None,
                 threads: int, encoder: str | None, fusion: str, alpha: float, device: str, reader: Path | None,
                 rerank_k: int, backend: str | None, rerank_fusion: str | None, ef_search: int | None,
                 nprobe: int | None, rerank_batch_queries: int | None = None) -> SearchSetup:
    """The one builder of the option objects ``search``, ``query`` and ``serve`` share; ``retrievers``: the
    retrievers opened (the first answers by default), which decide whether the dense options apply."""
    dense = any(is_dense(name) for name in retrievers)
    return SearchSetup(bm25_options(query_format, rm3, rocchio, fields, threads),
                       retrieval_options(retrievers[0], encoder, fusion, alpha, device, backend, ef_search, nprobe,
                                         dense),
                       reader_options(reader, rerank_k, device, rerank_fusion, backend, dense, rerank_batch_queries))


def search_options(given: dict[str, Any]) -> dict[str, Any]:
    """The options of :func:`search_setup` among a command's parameters (``locals()`` of search, query or
    serve, which all declare them); ``threads`` and ``rerank_batch_queries`` only where the command has them
    (search), else 1 and the default."""
    import inspect

    only_search = {"threads": 1, "rerank_batch_queries": None}
    names = [name for name in inspect.signature(search_setup).parameters if name != "retrievers"]
    return {name: given.get(name, only_search[name]) if name in only_search else given[name] for name in names}


def precision_scope(precision: str, *, backend: str | None = None, ray: Any = None) -> Any:
    """The ``--precision`` scope a command runs in (:func:`corefsearch.base.precision.using`), checked where it
    enters: an explicit bf16 or fp16 is refused with an ONNX backend (ONNX Runtime runs the export in the
    precision it was written in) and with ``--ray`` (the workers run each in ``auto`` for its own device)."""
    from corefsearch.base.precision import check_precision, using

    check_precision(precision)
    if precision in ("bf16", "fp16"):
        if backend not in (None, "torch"):
            raise CorefSearchError(f"--precision {precision} runs the torch encoder in {precision}; --backend "
                                   f"{backend} runs an ONNX export as it was written: leave out one of them")
        if ray is not None:
            raise CorefSearchError(f"--precision {precision}: with --ray each worker runs in auto (bf16 on a GPU "
                                   "that has it, fp32 on the CPU); leave out --precision")
    return using(precision)


EncodeBatchOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="Dense: passages per encoder batch (default 64 on the CPU; on a GPU 1,024, halved while it does not "
         "fit in its memory).")]


def encode_batch_size(batch_size: int | None, device: str, backend: str | None = None) -> int:
    """``--batch-size`` of the dense encoding, or its default for the device the encoder runs on (an ONNX
    backend runs on the CPU)."""
    if batch_size is not None:
        return batch_size
    from corefsearch.dense.encoder import DEFAULT_BATCH_SIZE, default_batch_size

    if backend not in (None, "torch") or device == "cpu":
        return DEFAULT_BATCH_SIZE
    from corefsearch.base.models import check_device, resolve_device

    check_device(device)
    return default_batch_size(resolve_device(device))


RoundsOption = Annotated[int, typer.Option(
    help="2: a second round from the coreferring mentions the first found in its top --expand passages (the "
         "reader's spans, or the mention encoder's nearest mentions), fused with the first.")]
ExpandOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="With --rounds 2: the top N passages whose coreferring mentions are kept, moved up and (with "
         "--expand-list-depth 0 or > 1) searched again (default 10, chosen on dev).")]
ExpandWeightOption = Annotated[Optional[float], typer.Option(  # noqa: UP045
    help="With --rounds 2: the weight of the second round in the weighted RRF; the first weighs 1 (default 4, chosen "
         "on dev).")]
ExpandFromOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    help="With --rounds 2: reader (its spans; the default with --reader) | encoder (the dataset mention nearest "
         "to the query's in each passage, by --mention-encoder).")]
ExpandMinSimilarityOption = Annotated[Optional[float], typer.Option(  # noqa: UP045
    help="With --rounds 2 --expand-from encoder: a passage whose nearest mention is less similar to the query "
         "mention (cosine) gives no expansion (default 0.8, chosen on dev).")]
ExpandReciprocalOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="With --rounds 2: an expansion counts only when its own search ranks the query's passage in its top R "
         "(0: every expansion counts; default 0, chosen on dev). Queries whose passage is not in the collection "
         "(ad hoc ones) skip the test.")]
ExpandMarginOption = Annotated[Optional[float], typer.Option(  # noqa: UP045
    help="With --rounds 2 --expand-from encoder: an expansion mention counts only when its cosine to the query "
         "mention exceeds by this margin the highest of any mention in the first round's passages ranked 21st to "
         "100th (searched that deep): a gate set by each query's own background, not a fixed cosine.")]
ExpandListDepthOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="With --rounds 2: how many passages of each expansion's list the fusion reads, its own passage first "
         "(0: all, the default, chosen on dev; 1: the top passages whose mention corefers move up, and with "
         "--expand-reciprocal 0 nothing is searched).")]
ExpandHeadOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="With --rounds 2: the top H ranks come from the expansions' own passages alone (as --expand-list-depth "
         "1 orders them), the ranks below from their searches (0: every rank from the searches; default 10, "
         "chosen on dev: the searches raise R@100 and leave MRR@10 as the moved-up passages give it).")]
MentionEncoderOption = Annotated[Optional[Path], typer.Option(  # noqa: UP045
    help="With --rounds 2 --expand-from encoder: the mention encoder folder (`train clusterer`).")]


def expansion_options(rounds: int, expand: int | None, weight: float | None, source: str | None,
                      encoder: Path | None, encoder_alone: bool = False, min_similarity: float | None = None,
                      reciprocal: int | None = None, margin: float | None = None,
                      list_depth: int | None = None, head: int | None = None) -> Any:
    """The second round's options, or None for one round; its options need ``--rounds 2``.
    ``encoder_alone``: ``--mention-encoder`` has a use of its own (``query --cluster``, ``serve``)."""
    from corefsearch.search.expansion import ExpansionOptions

    if rounds == 1:
        settings = (expand, weight, source, min_similarity, reciprocal, margin, list_depth, head)
        if encoder_alone and encoder is not None and settings == (None,) * len(settings):
            return ExpansionOptions(encoder=encoder)
        given = [name for name, value in (("--expand", expand), ("--expand-weight", weight),
                                          ("--expand-from", source), ("--expand-min-similarity", min_similarity),
                                          ("--expand-reciprocal", reciprocal), ("--expand-margin", margin),
                                          ("--expand-list-depth", list_depth), ("--expand-head", head),
                                          *((("--mention-encoder", encoder),) if not encoder_alone else ()))
                 if value is not None]
        if given:
            raise CorefSearchError(f"{', '.join(given)}: the second round's options; add --rounds 2")
        return None
    given_values = {"expand": expand, "weight": weight, "min_similarity": min_similarity, "reciprocal": reciprocal,
                    "margin": margin, "list_depth": list_depth, "head": head}
    return ExpansionOptions(rounds, source=source, encoder=encoder,
                            **{name: value for name, value in given_values.items() if value is not None})
