"""The ``corefsearch`` command line: one thin function per subcommand over a library call."""

from __future__ import annotations

import functools
import json
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from corefsearch import __version__
from corefsearch.errors import CorefSearchError

app = typer.Typer(
    name="corefsearch",
    help="Cross-document coreference search: given a passage with one marked mention, find every "
         "passage that mentions the same event or entity.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
# Messages are printed whole, never wrapped or cut at the console width (a terminal folds long
# lines itself; a pipe or log file gets each message on one line).
err_console = Console(stderr=True, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        console.print(f"corefsearch {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False) -> None:
    """corefsearch: build a coreference-search dataset, index it, search it, evaluate runs."""


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: Any = None) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {escape(str(message))}", highlight=False)


def user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Print a library error as one line and exit 1, with no traceback; warnings in yellow.

    Messages quote the user's ids, paths and text, so they are escaped, not read as rich markup.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        warnings.showwarning = _show_warning
        try:
            return func(*args, **kwargs)
        except CorefSearchError as err:
            err_console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("[red]interrupted[/red]: nothing half-written was left in place")
            raise typer.Exit(130) from None
        except Exception as err:
            # A Java exception from Pyserini/Anserini that the library did not translate: one line too.
            from corefsearch.sparse.java_errors import is_java_exception, java_message

            if not is_java_exception(err):
                raise
            err_console.print(f"[red]error:[/red] {escape(f'Lucene (Java) failed: {java_message(err)}')}",
                              highlight=False)
            raise typer.Exit(1) from None

    return wrapper


def _floats(text: str, option: str) -> tuple[float, ...]:
    try:
        numbers = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise CorefSearchError(f"{option} takes comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(number) for number in numbers):
        raise CorefSearchError(f"{option} takes finite numbers, got {text!r}")
    return numbers


@app.command("build-dataset")
@user_errors
def build_dataset_command(
    input_path: Annotated[Path, typer.Argument(metavar="INPUT", help="Corpus file or folder.")],
    source_format: Annotated[str, typer.Option("--format", help="ecbplus | wec | coresearch | generic")],
    out: Annotated[Path, typer.Option("--out", help="Dataset directory to write.")],
    mention_type: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="event | entity | all: the mentions kept (ecbplus, generic; wec and coresearch hold events only). "
             "Default: event, for generic all.")] = None,
    validated_only: Annotated[bool, typer.Option(
        "--validated-only", help="ECB+: keep only the validated sentences of ECBplus_coreference_sentences.csv."
    )] = False,
    sentences_csv: Annotated[Optional[Path], typer.Option(  # noqa: UP045 (Typer needs Optional on 3.10)
        help="ECB+: the validated-sentences CSV (default: beside INPUT).")] = None,
    chains: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="ECB+: the gold mentions kept: cross-document (those of CROSS_DOC_COREF chains; default) | all "
             "(also intra-document chains and singletons, as coreference scoring needs).")] = None,
    passage: Annotated[str, typer.Option(help="Passage unit: sentence | window | document.")] = "sentence",
    window: Annotated[int, typer.Option(help="Sentences per passage with --passage window.")] = 3,
    split_ratios: Annotated[str, typer.Option(
        help="train,dev,test shares of clusters (with --split-by clusters).")] = "0.8,0.1,0.1",
    seed: Annotated[int, typer.Option(help="Seed of the cluster split.")] = 13,
    split_by: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="clusters (a seeded shuffle of the clusters by --split-ratios; default for wec, generic) | corpus "
             "(each document's own split: ecbplus, coresearch, and generic documents with a 'split' field).")
    ] = None,
    sentences: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="generic: how text is cut into sentences: spacy (spaCy's sentencizer within each line; default) "
             "| newline (one sentence per line). Sentences a mention straddles are joined.")] = None,
    splits: Annotated[str, typer.Option(
        help="Splits to write queries for (ecbplus, coresearch: also the documents kept).")] = "train,dev,test",
    distractors: Annotated[Optional[list[Path]], typer.Option(  # noqa: UP045
        help="JSONL of passages without mentions ({doc_id, title?, text}); repeatable.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing dataset directory.")] = False,
) -> None:
    """Turn a coreference corpus into a coreference-search dataset (passages, queries, qrels)."""
    from corefsearch.datasets.build import BuildOptions, build_dataset
    from corefsearch.datasets.sources import SourceOptions, read_source
    from corefsearch.report import print_build_summary

    kept_splits = tuple(s.strip() for s in splits.split(",") if s.strip())
    source_options = SourceOptions(mention_type, validated_only, sentences_csv, passage, kept_splits,
                                   sentences=sentences, split_by=split_by, chains=chains)
    ratios = _floats(split_ratios, "--split-ratios")
    options = BuildOptions(passage=passage, window=window, split_ratios=ratios, seed=seed,  # type: ignore[arg-type]
                           splits=kept_splits,
                           source={"format": source_format, "input": str(input_path),
                                   **source_options.resolved(source_format), "validated_only": validated_only,
                                   "distractors": [str(p) for p in distractors or []]})
    options.validate()
    documents = read_source(source_format, input_path, source_options)
    summary = build_dataset(documents, out, options, distractors=distractors or [], overwrite=overwrite,
                            source_name=str(input_path))
    print_build_summary(summary, console)


QUERY_FORMAT_HELP = ("BM25 query: mention | mention+entities | sentence | context | document (the whole "
                     "document of the query's passage, read from the index)")
RocchioOption = Annotated[bool, typer.Option(
    "--rocchio", help="Rocchio pseudo-relevance feedback (Pyserini's defaults; not with --rm3).")]
FieldsOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--fields", help="Field-weighted BM25 over the index's fields, e.g. sentence=1,title=0.5,document=0.2 "
                     "(fields: sentence, title, document, contents; not with --rm3/--rocchio).")]


def _bm25_options(query_format: str, rm3: bool, rocchio: bool, fields: str | None, threads: int) -> Any:
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
ReaderOption = Annotated[Optional[Path], typer.Option(  # noqa: UP045
    help="Re-rank with this reader (from `corefsearch train reader`) and mark the coreferring spans.")]
RerankOption = Annotated[int, typer.Option(help="With --reader: re-rank the top N retrieved passages.")]
BackendOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    help="Run the transformer encoders (the dense query encoder with --retriever dense|hybrid, the reader's with "
         "--reader) with torch (default) | onnx | onnx-int8 (ONNX Runtime on the CPU, from the exports "
         "`corefsearch export-onnx MODEL_DIR` writes).")]
RerankFusionOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    help="With --reader: order the re-ranked passages by the reader's score (reader) or by reciprocal rank "
         "fusion of the reader's and the retriever's ranks (rrf); default: the one `train reader` recorded in "
         "the reader's folder (the better on dev; reader for an older folder).")]


def _reader(reader: Path | None, rerank_k: int, device: str, fusion: str | None, backend: str | None = None,
            dense: bool = False) -> Any:
    """The reader's options; ``dense``: a dense retriever runs too (``--backend`` applies to it)."""
    if reader is None:
        if backend is not None and not dense:
            raise CorefSearchError("--backend chooses the runtime of the transformer encoders, the dense retriever's "
                                   "and the reader's, and BM25 has none: add --reader MODEL_DIR, or use "
                                   "--retriever dense|hybrid")
        return None
    from corefsearch.reader.rerank import ReaderOptions

    return ReaderOptions(reader, rerank_k, device=device, fusion=fusion, backend=backend or "torch")


EfSearchOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    "--ef-search", help="Dense HNSW index: the search's candidate list (default: the index's, 128; at least k "
                        "either way). Higher finds more of the exact neighbours, more slowly.")]
NprobeOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    "--nprobe", help="Dense IVF-PQ index: inverted lists visited per query (default: the index's, 32). Higher "
                     "finds more of the exact neighbours, more slowly.")]


def _retrieval(retriever: str, encoder: str | None, fusion: str, alpha: float, device: str,
               backend: str | None = None, ef_search: int | None = None, nprobe: int | None = None,
               dense: bool | None = None) -> Any:
    """The retrieval options; ``dense``: a dense retriever is in use (default: ``retriever`` is one)."""
    from corefsearch.fusion import FusionOptions
    from corefsearch.retriever import RetrievalOptions

    if (ef_search is not None or nprobe is not None) and not (_is_dense(retriever) if dense is None else dense):
        raise CorefSearchError("--ef-search and --nprobe tune the dense index's search: use them with "
                               "--retriever dense|hybrid")
    return RetrievalOptions(retriever, encoder, device, FusionOptions(fusion, alpha), backend=backend or "torch",
                            ef_search=ef_search, nprobe=nprobe)


def _is_dense(retriever: str) -> bool:
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


def _ray(address: str | None, workers: int | None, cpus: float | None) -> Any:
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


@app.command("index")
@user_errors
def index_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset.")],
    out: Annotated[Path, typer.Option("--out", help="Index directory (OUT/lucene, OUT/dense; both can live in it).")],
    threads: Annotated[int, typer.Option(help="Indexing threads (Lucene).")] = 2,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing index of the kind being built.")] = False,
    fields: Annotated[bool, typer.Option(
        "--fields", help="Lucene: also index the sentence, title and document fields that `search --fields` "
                         "and `--query-format document` need (INDEX/lucene/fields; about 2.4x the indexing time).")
                    ] = False,
    dense: Annotated[bool, typer.Option(
        "--dense", help="Build the dense (FAISS) index OUT/dense instead of the Lucene one.")] = False,
    encoder: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help=f"With --dense: {ENCODER_HELP}.")] = None,
    faiss_type: Annotated[str, typer.Option("--faiss", help="With --dense: flat | hnsw | ivfpq.")] = "flat",
    batch_size: Annotated[int, typer.Option(help="With --dense: passages per encoder batch.")] = 64,
    shard: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="With --dense: encode only shard I of N (I/N, I from 0) into OUT/dense-shards/.")] = None,
    merge_shards: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="With --dense: merge the N shards in OUT/dense-shards/ into OUT/dense.")] = None,
    device: Annotated[str, typer.Option(help="With --dense: auto | cpu | cuda.")] = "auto",
    chunk_size: Annotated[int, typer.Option(
        help="With --dense: passages per saved chunk (what an interrupted run resumes from; "
             "shards are whole chunks).")] = 8192,
    backend: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="With --dense: run the passage encoder with torch (default) | onnx | onnx-int8 (ONNX Runtime on the "
             "CPU, from the export `corefsearch export-onnx MODEL_DIR` writes; recorded in the manifest).")] = None,
    ray: RayOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus_per_worker: RayCpusOption = None,
) -> None:
    """Build a Lucene (BM25) index of a dataset's passages, or with --dense a FAISS index of their vectors."""
    from corefsearch.pipeline import DenseIndexOptions, index_dataset
    from corefsearch.report import print_index_summary

    dense_options = None
    if dense:
        dense_options = DenseIndexOptions(encoder, faiss_type, batch_size, shard, merge_shards, device, chunk_size,
                                          backend=backend or "torch",
                                          ray=_ray(ray, ray_workers, ray_cpus_per_worker))
    elif (encoder is not None or shard is not None or merge_shards is not None or backend is not None
          or ray is not None):
        raise CorefSearchError("--encoder, --shard, --merge-shards, --backend and --ray build the dense index: "
                               "add --dense")
    summary = index_dataset(dataset, out, dense_options, threads=threads, overwrite=overwrite, fields=fields)
    print_index_summary(summary, console)
    if getattr(summary, "ray_workers", None):
        console.print(f"Encoded on Ray by {summary.ray_workers} workers; their shards are in "
                      f"{summary.path.parent / 'dense-shards'} (`--merge-shards {summary.ray_workers} --faiss TYPE` "
                      "builds another FAISS type from them without encoding again)", markup=False, soft_wrap=True)


@app.command("add")
@user_errors
def add_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset, to grow.")],
    corpus: Annotated[Path, typer.Option(
        "--corpus", help="Folder of the new documents: corpus.jsonl, and mentions.jsonl if they have mentions "
                         "(the generic format of build-dataset).")],
    index: Annotated[Optional[list[Path]], typer.Option(  # noqa: UP045
        "--index", metavar="INDEX",
        help="Index directory built from DATASET (its lucene/ and dense/ take the new passages); repeatable. "
             "Indexes not named no longer match the dataset.")] = None,
    encoder: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Dense: the passage encoder (default: the one the dense index was built with).")] = None,
    device: Annotated[str, typer.Option(help="Dense: auto | cpu | cuda.")] = "auto",
    batch_size: Annotated[int, typer.Option(help="Dense: passages per encoder batch.")] = 64,
    threads: Annotated[int, typer.Option(help="Indexing threads (Lucene).")] = 2,
) -> None:
    """Append new documents to a dataset and its indexes without a rebuild (all switched in at the end)."""
    from corefsearch.add import add_documents

    summary = add_documents(dataset, corpus, index or [], encoder=encoder, device=device, batch_size=batch_size,
                            threads=threads)
    console.print(f"Added {summary.documents:,} documents ({summary.passages:,} passages, {summary.mentions:,} "
                  f"mentions) to {summary.dataset}: {summary.total_passages:,} passages now; {summary.new_queries:,} "
                  f"new queries, {summary.changed_queries:,} queries with new relevant passages, "
                  f"{summary.new_clusters:,} new clusters ({summary.seconds:.1f} s)", markup=False)
    for line in summary.indexes:
        console.print(f"  index {line}", markup=False)


@app.command("search")
@user_errors
def search_command(
    index: Annotated[Path, typer.Option("--index", help="Index directory from `corefsearch index`.")],
    queries: Annotated[Path, typer.Option("--queries", help="Queries JSONL (e.g. DATASET/queries/test.jsonl).")],
    out: Annotated[Path, typer.Option("--out", help="TREC run file to write.")],
    k: Annotated[int, typer.Option("--k", help="Passages per query.")] = 500,
    query_format: Annotated[str, typer.Option(help=QUERY_FORMAT_HELP)] = "mention+entities",
    rm3: Annotated[bool, typer.Option("--rm3", help="RM3 pseudo-relevance feedback.")] = False,
    rocchio: RocchioOption = False,
    fields: FieldsOption = None,
    threads: Annotated[int, typer.Option(help="Search threads (BM25).")] = 2,
    retriever: RetrieverOption = "bm25",
    encoder: SearchEncoderOption = None,
    fusion: FusionOption = "rrf",
    alpha: AlphaOption = 0.5,
    device: DeviceOption = "auto",
    reader: ReaderOption = None,
    rerank_k: RerankOption = 50,
    backend: BackendOption = None,
    rerank_fusion: RerankFusionOption = None,
    ef_search: EfSearchOption = None,
    nprobe: NprobeOption = None,
    spans_out: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="With --reader: the spans JSONL to write (default: OUT.spans.jsonl).")] = None,
    save_topics: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="Also write the BM25 query strings as a Pyserini topics file (qid<TAB>query, e.g. topics.tsv), "
             "for `python -m pyserini.search.lucene --topics FILE.tsv --bm25`.")] = None,
    ray: RayOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus_per_worker: RayCpusOption = None,
) -> None:
    """Search every query of a queries file; write a TREC run (the query's own passage left out).

    With --reader and --ray, the re-ranking runs on a Ray cluster."""
    from corefsearch.pipeline import search_to_run

    summary = search_to_run(index, queries, out, k=k,
                            options=_bm25_options(query_format, rm3, rocchio, fields, threads),
                            retrieval=_retrieval(retriever, encoder, fusion, alpha, device, backend, ef_search,
                                                 nprobe),
                            reader=_reader(reader, rerank_k, device, rerank_fusion, backend, _is_dense(retriever)),
                            spans_out=spans_out,
                            save_topics=save_topics, ray=_ray(ray, ray_workers, ray_cpus_per_worker))
    console.print(f"Searched {summary.queries:,} queries in {summary.seconds:.1f} s "
                  f"({summary.queries_per_second:,.0f} queries/s); wrote {summary.rows:,} lines to {summary.out}",
                  markup=False)


@app.command("query")
@user_errors
def query_command(
    index: Annotated[Path, typer.Option("--index", help="Index directory from `corefsearch index`.")],
    mention: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--mention", help="The mention, as it is written in the context (or --dataset and --qid).")] = None,
    context: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="The passage the mention occurs in (default: the mention alone).")] = None,
    occurrence: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="Which occurrence of the mention in the context (1-based; default the first).")] = None,
    dataset: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="With --qid: the dataset directory the query comes from (its queries and qrels).")] = None,
    qid: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--qid", help="Run this query of --dataset (queries/{train,dev,test}.jsonl) and mark the relevant hits "
                      "and the gold coreferring mentions in them.")] = None,
    k: Annotated[int, typer.Option("--k", help="Passages to show.")] = 10,
    query_format: Annotated[str, typer.Option(help=QUERY_FORMAT_HELP)] = "mention+entities",
    rm3: Annotated[bool, typer.Option("--rm3", help="RM3 pseudo-relevance feedback.")] = False,
    rocchio: RocchioOption = False,
    fields: FieldsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    retriever: RetrieverOption = "bm25",
    encoder: SearchEncoderOption = None,
    fusion: FusionOption = "rrf",
    alpha: AlphaOption = 0.5,
    device: DeviceOption = "auto",
    reader: ReaderOption = None,
    rerank_k: RerankOption = 50,
    backend: BackendOption = None,
    rerank_fusion: RerankFusionOption = None,
    ef_search: EfSearchOption = None,
    nprobe: NprobeOption = None,
) -> None:
    """Ask one ad-hoc question: where else is this mention's event mentioned?

    Or run one query of a dataset (--dataset DATASET --qid ID) and see which hits its qrels judge
    relevant and where the gold coreferring mentions are.
    """
    from corefsearch.pipeline import adhoc_query
    from corefsearch.report import print_adhoc_result

    result = adhoc_query(index, mention, context, occurrence, k=k,
                         options=_bm25_options(query_format, rm3, rocchio, fields, threads=1),
                         retrieval=_retrieval(retriever, encoder, fusion, alpha, device, backend, ef_search, nprobe),
                         reader=_reader(reader, rerank_k, device, rerank_fusion, backend, _is_dense(retriever)),
                         dataset=dataset, qid=qid)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), ensure_ascii=False, indent=2) + "\n")
    else:
        print_adhoc_result(result, console)


@app.command("serve")
@user_errors
def serve_command(
    index: Annotated[Path, typer.Option("--index", help="Index directory from `corefsearch index`.")],
    reader: ReaderOption = None,
    dataset: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="A dataset whose queries can be asked by id (`qid`), with the relevant hits and the gold "
             "coreferring mentions marked.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on (other machines: 0.0.0.0, with --api-key).")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    api_key: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--api-key", envvar="COREFSEARCH_API_KEY",
        help="Require this key in the X-API-Key header of every API call (env: COREFSEARCH_API_KEY).")] = None,
    search_threads: Annotated[int, typer.Option(
        help="Searches answered at a time (the thread pool of the model work); more wait their turn.")] = 2,
    max_k: Annotated[int, typer.Option(help="Largest k a request may ask for.")] = 100,
    max_rerank_k: Annotated[int, typer.Option(help="Largest rerank_k a request may ask for.")] = 200,
    max_context: Annotated[int, typer.Option(help="Longest context a request may send (characters).")] = 20_000,
    max_body: Annotated[int, typer.Option(help="Largest request body (bytes).")] = 65_536,
    retriever: Annotated[str, typer.Option(
        help="bm25 | dense | hybrid, or several comma-separated (e.g. bm25,hybrid): the retrievers opened; "
             "the first answers requests that name none.")] = "bm25",
    query_format: Annotated[str, typer.Option(help=QUERY_FORMAT_HELP + "; a request may ask for another.")
                            ] = "mention+entities",
    rm3: Annotated[bool, typer.Option("--rm3", help="RM3 pseudo-relevance feedback.")] = False,
    rocchio: RocchioOption = False,
    fields: FieldsOption = None,
    encoder: SearchEncoderOption = None,
    fusion: FusionOption = "rrf",
    alpha: AlphaOption = 0.5,
    device: DeviceOption = "auto",
    rerank_k: RerankOption = 50,
    backend: BackendOption = None,
    rerank_fusion: RerankFusionOption = None,
    ef_search: EfSearchOption = None,
    nprobe: NprobeOption = None,
) -> None:
    """Serve the search over HTTP: the API (POST /search, GET /passages/ID, /info, /health, /docs) and a page at /.

    The index, spaCy and the reader are loaded once, at start-up. Stop with Ctrl-C or SIGTERM.
    """
    import time

    from corefsearch.engine import SearchEngine
    from corefsearch.serve.app import Limits, create_app, serve_forever

    names = [name.strip() for name in retriever.split(",") if name.strip()]
    if not names:
        raise CorefSearchError("--retriever names no retriever")
    limits = Limits(max_body_bytes=max_body, max_context_chars=max_context, max_k=max_k, max_rerank_k=max_rerank_k)
    limits.validate()
    started = time.perf_counter()
    engine = SearchEngine.open(index, options=_bm25_options(query_format, rm3, rocchio, fields, threads=1),
                               retrieval=_retrieval(names[0], encoder, fusion, alpha, device, backend, ef_search,
                                                    nprobe, any(_is_dense(name) for name in names)),
                               reader=_reader(reader, rerank_k, device, rerank_fusion, backend,
                                              any(_is_dense(name) for name in names)), dataset=dataset,
                               retrievers=names)
    loaded = ", ".join(f"{what} {seconds:.1f} s" for what, seconds in engine.load_seconds.items())
    err_console.print(f"Loaded {index} in {time.perf_counter() - started:.1f} s ({loaded}); retrievers: "
                      f"{', '.join(engine.retrievers)}", markup=False, highlight=False)
    if host not in ("127.0.0.1", "localhost", "::1") and api_key is None:
        warnings.warn(f"--host {host} lets other machines search this index without a key: consider --api-key",
                      stacklevel=1)
    app_ = create_app(engine, api_key=api_key, limits=limits, threads=search_threads)
    shown = f"[{host}]" if ":" in host else host
    err_console.print(f"Serving on http://{shown}:{port}/ (the page; the API's documentation at /docs); "
                      "Ctrl-C or SIGTERM stops", markup=False, highlight=False)
    serve_forever(app_, host, port)


@app.command("evaluate")
@user_errors
def evaluate_command(
    runs: Annotated[Optional[list[Path]], typer.Argument(  # noqa: UP045
        metavar="[RUN]...", help="TREC run file(s); the first is the baseline.")] = None,
    qrels: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--qrels", help="TREC qrels (e.g. DATASET/qrels/test.txt); needed with RUN files.")] = None,
    definition: Annotated[str, typer.Option(
        help="trec (trec_eval semantics) | coresearch (the paper's code: micro-averaged recall).")] = "trec",
    per_query: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="Write per-query values to this CSV.")] = None,
    output_format: Annotated[str, typer.Option(
        help="table | json | csv (one row per run, one column per metric).")] = "table",
    metrics: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Comma-separated metrics instead of the defaults: MRR@k, mAP@k, R@k (under --definition), "
             "`defaults`, or any ir-measures name (trec_eval semantics), e.g. defaults,nDCG@10,P@5,RR,AP,infAP.")
    ] = None,
    plot: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="Draw the recall@k and MRR@k curves (k = 1 to the run depth) of every run into this PNG.")] = None,
    spans: Annotated[Optional[list[Path]], typer.Option(  # noqa: UP045
        help="A reader's RUN.spans.jsonl, one per run in the same order: adds EM and F1 (SQuAD v1.1) "
             "over the relevant re-ranked passages; needs --dataset.")] = None,
    dataset: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="With --spans: the dataset directory whose passages and queries the spans point into; "
             "with --clusters: the dataset whose gold clusters are the key.")] = None,
    clusters: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--clusters", help="Score this clustering ({mention_id, cluster_id} JSONL lines) against the gold clusters "
                           "of --dataset instead of runs: MUC, B³, CEAF-e, LEA and CoNLL F1.")] = None,
    split: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="With --clusters: the split whose gold clusters are the key (default: test).")] = None,
    singletons: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="With --clusters: keep | drop (remove the singleton clusters of key and response before "
             "scoring; default: keep).")] = None,
) -> None:
    """Score runs: MRR@10, mAP@10, mAP@50, R@10, R@50, R@100, R@500 (and infAP on incomplete qrels).

    With --metrics other metrics (any ir-measures name), with --spans and --dataset also the
    reader's EM and F1, with --plot a PNG of the recall@k and MRR@k curves. With --clusters
    and --dataset (and no runs), score a coreference clustering: MUC, B³, CEAF-e, LEA, CoNLL F1.
    """
    from corefsearch.evaluate import evaluate_files, parse_metrics, render_table, to_csv, to_json, write_per_query_csv

    if output_format not in ("table", "json", "csv"):
        raise CorefSearchError(f"--output-format must be table, json or csv, got {output_format!r}")
    if clusters is not None:
        _evaluate_clusters(clusters, runs, dataset, split, singletons, output_format,
                           {"--qrels": qrels, "--per-query": per_query, "--metrics": metrics, "--plot": plot,
                            "--spans": spans, "--definition": None if definition == "trec" else definition})
        return
    unused = [name for name, value in (("--split", split), ("--singletons", singletons)) if value is not None]
    if unused:
        raise CorefSearchError(f"{' and '.join(unused)}: only with --clusters (scoring a clustering), not with runs")
    if not runs:
        raise CorefSearchError("give the RUN file(s) to score (with --qrels), or a clustering with --clusters")
    if qrels is None:
        raise CorefSearchError("--qrels is required to score runs (e.g. --qrels DATASET/qrels/test.txt)")
    chosen = parse_metrics(metrics) if metrics is not None else None
    if plot is not None:  # before any work, as --per-query
        from corefsearch.io.outputs import check_output_file

        check_output_file(plot, "--plot", [*(("RUN", run) for run in runs), ("--qrels", qrels),
                                           *(("--spans", path) for path in spans or ()), ("--dataset", dataset),
                                           ("--per-query", per_query)])
    if per_query is not None:  # before any work: never one of the inputs, and writable
        from corefsearch.io.outputs import check_output_file

        check_output_file(per_query, "--per-query", [*(("RUN", run) for run in runs), ("--qrels", qrels),
                                                     *(("--spans", path) for path in spans or ()),
                                                     ("--dataset", dataset)])
    evaluations = evaluate_files(runs, qrels, definition=definition, spans_paths=spans, dataset=dataset,
                                 metrics=chosen, curves=plot is not None)
    for evaluation in evaluations:
        for message in evaluation.warnings:
            err_console.print(f"[yellow]warning:[/yellow] {escape(f'{evaluation.name}: {message}')}",
                              highlight=False)
    if per_query is not None:
        write_per_query_csv(evaluations, per_query)
    if plot is not None:
        from corefsearch.evaluate import plot_curves

        plot_curves([evaluation.curve for evaluation in evaluations if evaluation.curve is not None], plot)
    if output_format == "json":
        sys.stdout.write(json.dumps(to_json(evaluations), indent=2) + "\n")
    elif output_format == "csv":
        sys.stdout.write(to_csv(evaluations))
    else:
        render_table(evaluations, console)


def _evaluate_clusters(clusters: Path, runs: list[Path] | None, dataset: Path | None, split: str | None,
                       singletons: str | None, output_format: str, run_options: dict[str, Any]) -> None:
    """`evaluate --clusters`: the coreference metrics of a clustering against the dataset's gold clusters."""
    if runs:
        raise CorefSearchError("give either RUN files (ranking metrics) or --clusters (coreference metrics), not both")
    given = [name for name, value in run_options.items() if value is not None]
    if given:
        them = "them" if len(given) > 1 else "it"
        raise CorefSearchError(f"{', '.join(given)} score runs, not a clustering: leave {them} out with --clusters")
    if dataset is None:
        raise CorefSearchError("--clusters needs --dataset DATASET (its clusters.jsonl holds the gold clusters)")
    from corefsearch.evaluate.coref_files import cluster_csv, evaluate_clusters, render_cluster_table

    evaluation = evaluate_clusters(clusters, dataset, split or "test", singletons or "keep")
    for message in evaluation.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False)
    if output_format == "json":
        sys.stdout.write(json.dumps(evaluation.to_json(), indent=2) + "\n")
    elif output_format == "csv":
        sys.stdout.write(cluster_csv(evaluation))
    else:
        render_cluster_table(evaluation, console)


@app.command("cluster")
@user_errors
def cluster_command(
    dataset: Annotated[Path, typer.Argument(metavar="DATASET", help="Dataset directory from `build-dataset`.")],
    out: Annotated[Path, typer.Option("--out", help="Clusters JSONL to write ({mention_id, cluster_id} lines).")],
    method: Annotated[str, typer.Option(
        help="lemma (mentions whose syntactic head has the same lemma, spaCy) | singletons (each mention alone) | "
             "encoder (the mention encoder of --model, average-linkage clustering of its vectors).")],
    split: Annotated[str, typer.Option(help="The split whose gold mentions are clustered.")] = "test",
    scope: Annotated[str, typer.Option(
        help="topic (within each document topic the dataset records) | predicted-topic (within groups of "
             "documents clustered by TF-IDF) | corpus (all mentions of the split at once).")] = "topic",
    topic_threshold: Annotated[Optional[float], typer.Option(  # noqa: UP045
        help="With --scope predicted-topic: the cosine distance at which documents stop being merged "
             "(default 0.9).")] = None,
    conll: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="Also write the clusters in the CoNLL format of the reference scorer (one pseudo-document, "
             "one line per mention).")] = None,
    model: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--model", help="With --method encoder: the mention encoder folder from `train clusterer`.")] = None,
    threshold: Annotated[Optional[float], typer.Option(  # noqa: UP045
        help="With --method encoder: τ, the cosine distance at which clusters stop merging (default: the "
             "model's, picked on dev by `train clusterer`).")] = None,
    k: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--k", help="With --method encoder --scope corpus: neighbours per mention in the kNN graph (default 50).")
                 ] = None,
    batch_size: Annotated[int, typer.Option(help="With --method encoder: mentions encoded per batch.")] = 64,
    device: Annotated[str, typer.Option(help="With --method encoder: auto | cpu | cuda")] = "auto",
    ray: RayOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus_per_worker: RayCpusOption = None,
) -> None:
    """Cluster every gold mention of a split into coreference clusters (baselines: lemma, singletons;
    or a trained mention encoder)."""
    from corefsearch.pipeline import cluster_dataset

    summary = cluster_dataset(dataset, out, method=method, split=split, scope=scope, conll=conll,
                              topic_threshold=topic_threshold, model=model, threshold=threshold, k=k,
                              batch_size=batch_size, device=device, ray=_ray(ray, ray_workers, ray_cpus_per_worker))
    wrote = f"{summary.out}" + (f" and {summary.conll}" if summary.conll is not None else "")
    at = f" at τ {summary.threshold:g}" if summary.threshold is not None else ""
    stages = (" (" + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in summary.stages.items()) + ")"
              if summary.stages else "")
    if summary.encoded is not None and summary.encoded < summary.mentions:
        stages += f"; {summary.encoded:,} distinct encoder inputs (identical copies encoded once)"
    console.print(f"Clustered {summary.mentions:,} mentions into {summary.clusters:,} clusters ({summary.groups:,} "
                  f"group(s) of --scope {scope}){at} in {summary.seconds:.1f} s{stages}; wrote {wrote}", markup=False)


@app.command("java-env")
@user_errors
def java_env_command() -> None:
    """Print the shell exports for running Pyserini's own command line on corefsearch's indexes.

    Use as `eval "$(corefsearch java-env)"`; in Python, call `corefsearch.configure_java()` instead.
    """
    from corefsearch.sparse.java import java_env_script

    sys.stdout.write(java_env_script())


@app.command("export-onnx")
@user_errors
def export_onnx_command(
    model_dir: Annotated[Path, typer.Argument(
        metavar="MODEL_DIR", help="A reader folder (`train reader`) or a retriever folder (`train retriever`); with "
                                  "--out: `default` (the bundled all-MiniLM-L6-v2) or a Hugging Face model.")],
    quantize: Annotated[bool, typer.Option(
        help="Also write the dynamic int8 quantisation (onnx/model_qint8.onnx, for --backend onnx-int8).")] = True,
    out: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--out", help="For `default` or a Hugging Face model: write it here as a retriever folder with its export, "
                      "to pass as --encoder OUT (a new or empty folder).")] = None,
) -> None:
    """Export a reader's or a retriever's encoders to ONNX (onnx/ beside their weights) for `--backend onnx`."""
    from corefsearch.onnx_export import export_onnx

    summary = export_onnx(model_dir, quantize=quantize, out=out,
                          log=lambda message: err_console.print(message, markup=False, highlight=False))
    for removed in summary.removed:
        console.print(f"Removed {removed} (from an earlier export; --no-quantize writes none)", markup=False,
                      soft_wrap=True)
    for file in summary.files:
        console.print(f"Wrote {file.path} ({file.megabytes:.1f} MB; max abs difference of the hidden states to "
                      f"torch: {file.max_abs_diff:.2e})", markup=False, soft_wrap=True)
    console.print(f"Exported in {summary.seconds:.1f} s", markup=False)
    if out is not None:
        console.print(f"Pass --encoder {out} with --backend onnx|onnx-int8 (it encodes as {model_dir} does: an index "
                      f"built with {model_dir} is searched with it as it is)", markup=False, soft_wrap=True)


# --- corefsearch train ... ----------------------------------------------------------------------------

train_app = typer.Typer(help="Train models on a dataset.", no_args_is_help=True)
app.add_typer(train_app, name="train")

ThreadsOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="CPU threads of the model (torch.set_num_threads; default: torch's, one per core).")]
LogEveryOption = Annotated[Optional[int], typer.Option(  # noqa: UP045
    help="Log a line (step, loss, steps/s, ETA) every N steps (0: never; default: 50 when stderr is not a "
         "terminal, e.g. under nohup, where the progress bar does not show).")]


@train_app.command("retriever")
@user_errors
def train_retriever_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train; dev selects).")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
    index: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--index", help="Lucene index of DATASET for BM25 hard negatives (none: in-batch negatives only).")] = None,
    base_model: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Hugging Face model name or folder (default: the bundled all-MiniLM-L6-v2).")] = None,
    shared_encoder: Annotated[bool, typer.Option(
        "--shared-encoder", help="One encoder for queries and passages (default: two, as in DPR).")] = False,
    markers: Annotated[bool, typer.Option(help="Boundary tokens around the query mention.")] = True,
    pooling: Annotated[str, typer.Option(help="cls | mean")] = "cls",
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 5,
    batch_size: Annotated[int, typer.Option(help="Examples per batch (in-batch negatives).")] = 16,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 1e-5,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.")] = 0.01,
    warmup: Annotated[float, typer.Option(help="Linear warm-up, as a fraction of the steps.")] = 0.1,
    max_query_len: Annotated[int, typer.Option(help="Query window in tokens, grown around the mention.")] = 64,
    max_passage_len: Annotated[int, typer.Option(help="Passage length in tokens.")] = 180,
    hard_negatives: Annotated[int, typer.Option(
        help="Draw one hard negative per example from the BM25 top N not relevant (0: none).")] = 20,
    positives_per_query: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="At most N positives per query per epoch, sampled (default: all).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 13,
    max_steps: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="Stop after N optimizer steps in all.")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    dev_max_queries: Annotated[int, typer.Option(
        help="Dev queries (a seeded sample) scored over the dev passages after each epoch.")] = 500,
    threads: ThreadsOption = None,
    log_every: LogEveryOption = None,
    checkpoint_every: Annotated[int, typer.Option(
        help="Also checkpoint every N steps (0: at epoch ends only).")] = 500,
    overwrite: Annotated[bool, typer.Option(help="Retrain into an existing model directory.")] = False,
) -> None:
    """Train the mention-aware DPR bi-encoder; resumes an interrupted run of the same command."""
    from corefsearch.dense.train import RetrieverTrainingArguments, print_training_summary, train_retriever

    args = RetrieverTrainingArguments(
        base_model=base_model, shared_encoder=shared_encoder, markers=markers, pooling=pooling, epochs=epochs,
        batch_size=batch_size, lr=lr, weight_decay=weight_decay, warmup=warmup, max_query_len=max_query_len,
        max_passage_len=max_passage_len, hard_negatives=hard_negatives, positives_per_query=positives_per_query,
        seed=seed, max_steps=max_steps, device=device, dev_max_queries=dev_max_queries, threads=threads,
        log_every=log_every)
    summary = train_retriever(dataset, out, args, index=index, overwrite=overwrite,
                              checkpoint_every=checkpoint_every,
                              log=lambda message: err_console.print(message, markup=False, highlight=False))
    print_training_summary(summary, console)


@train_app.command("reader")
@user_errors
def train_reader_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train; dev selects).")],
    run: Annotated[Path, typer.Option(
        "--run", help="TREC run of the train (and dev) queries from `corefsearch search`, any retriever.")],
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
    head: Annotated[str, typer.Option(help="dpr (start/end + passage selection) | integrated (coreference).")
                    ] = "integrated",
    base_model: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Hugging Face model name or folder (default: the bundled all-MiniLM-L6-v2).")] = None,
    markers: Annotated[bool, typer.Option(help="Boundary tokens around the query mention.")] = True,
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 3,
    batch_size: Annotated[int, typer.Option(help="Queries per optimizer step.")] = 4,
    lr: Annotated[float, typer.Option(help="AdamW learning rate of the encoder.")] = 2e-5,
    head_lr: Annotated[float, typer.Option(help="AdamW learning rate of the (randomly initialised) head.")
                       ] = 1e-3,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.")] = 0.01,
    warmup: Annotated[float, typer.Option(help="Linear warm-up, as a fraction of the steps.")] = 0.1,
    negatives: Annotated[int, typer.Option(help="Retrieved non-relevant passages per query.")] = 23,
    negatives_from: Annotated[int, typer.Option(
        help="Draw the negatives (and the positive) from the run's top N (the --rerank-k it will re-rank).")] = 50,
    span_weight: Annotated[float, typer.Option(
        help="Weight of the span (start + end) cross-entropy against the passage-selection term.")] = 1.0,
    ranking_loss: Annotated[str, typer.Option(
        help="softmax (cross-entropy of the positive among the query's passages) | softmax+pairwise (plus a "
             "margin ranking term between the positive and each negative).")] = "softmax",
    max_length: Annotated[int, typer.Option(help="Tokens per [query ; passage] input.")] = 256,
    max_query_len: Annotated[int, typer.Option(help="Query window in tokens, grown around the mention.")] = 64,
    doc_stride: Annotated[int, typer.Option(help="Tokens between the starts of a long passage's windows.")] = 128,
    max_span_len: Annotated[int, typer.Option(help="Longest span (tokens) extracted at inference.")] = 10,
    hidden: Annotated[int, typer.Option(help="Integrated head: hidden units of its FFNNs.")] = 128,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 13,
    max_steps: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="Stop after N optimizer steps in all.")] = None,
    max_train_queries: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="Train on a seeded sample of N train queries (default: all in the run).")] = None,
    dev_max_queries: Annotated[int, typer.Option(help="Dev queries re-ranked after each epoch.")] = 200,
    threads: ThreadsOption = None,
    log_every: LogEveryOption = None,
    dev_rerank_k: Annotated[int, typer.Option(help="Dev: re-rank the run's top N.")] = 50,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    checkpoint_every: Annotated[int, typer.Option(
        help="Also checkpoint every N steps (0: at epoch ends only).")] = 500,
    overwrite: Annotated[bool, typer.Option(help="Retrain into an existing model directory.")] = False,
) -> None:
    """Train a reader that re-ranks retrieved passages and marks the coreferring span; resumable."""
    from corefsearch.reader.train import ReaderTrainingArguments, print_reader_summary, train_reader

    args = ReaderTrainingArguments(
        head=head, base_model=base_model, markers=markers, epochs=epochs, batch_size=batch_size, lr=lr, head_lr=head_lr,
        weight_decay=weight_decay, warmup=warmup, negatives=negatives, negatives_from=negatives_from,
        span_weight=span_weight, ranking_loss=ranking_loss, max_length=max_length, max_query_len=max_query_len,
        doc_stride=doc_stride, max_span_len=max_span_len, hidden=hidden, seed=seed, max_steps=max_steps,
        max_train_queries=max_train_queries, device=device, dev_max_queries=dev_max_queries,
        dev_rerank_k=dev_rerank_k, threads=threads, log_every=log_every)
    summary = train_reader(dataset, run, out, args, overwrite=overwrite, checkpoint_every=checkpoint_every,
                           log=lambda message: err_console.print(message, markup=False, highlight=False))
    print_reader_summary(summary, console)


@train_app.command("clusterer")
@user_errors
def train_clusterer_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset (train clusters; dev "
                                                 "picks the epoch and τ).")],
    out: Annotated[Path, typer.Option("--out", help="Mention encoder directory to write.")],
    base_model: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Hugging Face model name or folder (default: the bundled all-MiniLM-L6-v2).")] = None,
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 3,
    batch_size: Annotated[int, typer.Option(help="Mention pairs per optimizer step.")] = 32,
    lr: Annotated[float, typer.Option(help="AdamW learning rate of the encoder.")] = 2e-5,
    head_lr: Annotated[float, typer.Option(help="AdamW learning rate of the (randomly initialised) MLPs.")] = 1e-3,
    margin: Annotated[float, typer.Option(help="Contrastive loss margin m (on d = 1 - cos).")] = 0.5,
    negatives_per_positive: Annotated[float, typer.Option(help="Negative pairs per positive pair.")] = 3.0,
    max_positives_per_cluster: Annotated[int, typer.Option(
        help="At most N positive pairs per cluster (a seeded sample of a larger cluster's pairs).")] = 200,
    hard_negatives_k: Annotated[int, typer.Option(
        help="Hard negatives from each mention's N nearest mentions by the untrained encoder (computed once; "
             "0: topic negatives only).")] = 10,
    scope: Annotated[str, typer.Option(
        help="Dev clustering within: topic (gold topics) | predicted-topic (TF-IDF document clusters).")] = "topic",
    seed: Annotated[int, typer.Option(help="Random seed.")] = 13,
    max_steps: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="Stop after N optimizer steps in all.")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    threads: ThreadsOption = None,
    log_every: LogEveryOption = None,
    checkpoint_every: Annotated[int, typer.Option(
        help="Also checkpoint every N steps (0: at epoch ends only).")] = 500,
    overwrite: Annotated[bool, typer.Option(help="Retrain into an existing model directory.")] = False,
) -> None:
    """Train the contrastive mention encoder for `cluster --method encoder`; resumable."""
    from corefsearch.cluster.train import ClustererTrainingArguments, print_clusterer_summary, train_clusterer

    args = ClustererTrainingArguments(
        base_model=base_model, epochs=epochs, batch_size=batch_size, lr=lr, head_lr=head_lr, margin=margin,
        negatives_per_positive=negatives_per_positive, max_positives_per_cluster=max_positives_per_cluster,
        hard_negatives_k=hard_negatives_k, scope=scope, seed=seed, max_steps=max_steps, device=device,
        threads=threads, log_every=log_every)
    summary = train_clusterer(dataset, out, args, overwrite=overwrite, checkpoint_every=checkpoint_every,
                              log=lambda message: err_console.print(message, markup=False, highlight=False))
    print_clusterer_summary(summary, console)


if __name__ == "__main__":
    app()
