"""``search`` (a queries file to a TREC run), ``query`` (one ad-hoc mention) and ``serve`` (HTTP): one
set of options, built into option objects in one place (:mod:`corefsearch.cli.options`)."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from corefsearch.base.errors import CorefSearchError
from corefsearch.cli.app import app, console, err_console, user_errors
from corefsearch.cli.options import (
    QUERY_FORMAT_HELP,
    AlphaOption,
    BackendOption,
    DeviceOption,
    EfSearchOption,
    ExpandFromOption,
    ExpandHeadOption,
    ExpandListDepthOption,
    ExpandMarginOption,
    ExpandMinSimilarityOption,
    ExpandOption,
    ExpandReciprocalOption,
    ExpandWeightOption,
    FieldsOption,
    FusionOption,
    IndexOption,
    MentionEncoderOption,
    NprobeOption,
    PrecisionOption,
    RayCpusOption,
    RayOption,
    RayWorkersOption,
    ReaderOption,
    RerankBatchQueriesOption,
    RerankFusionOption,
    RerankOption,
    RetrieverOption,
    Rm3Option,
    RocchioOption,
    RoundsOption,
    SearchEncoderOption,
    expansion_options,
    precision_scope,
    ray_options,
    search_options,
    search_setup,
)
from corefsearch.cli.report import print_search_summary


@app.command("search")
@user_errors
def search_command(
    index: IndexOption,
    queries: Annotated[Path, typer.Option("--queries", help="Queries JSONL (e.g. DATASET/queries/test.jsonl).")],
    out: Annotated[Path, typer.Option("--out", help="TREC run file to write.")],
    k: Annotated[int, typer.Option("--k", help="Passages per query.")] = 500,
    query_format: Annotated[str, typer.Option(help=QUERY_FORMAT_HELP)] = "mention+entities",
    rm3: Rm3Option = False,
    rocchio: RocchioOption = False,
    fields: FieldsOption = None,
    threads: Annotated[int, typer.Option(help="Search threads (BM25).")] = 2,
    retriever: RetrieverOption = "bm25",
    encoder: SearchEncoderOption = None,
    fusion: FusionOption = "rrf",
    alpha: AlphaOption = 0.5,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    reader: ReaderOption = None,
    rerank_k: RerankOption = 50,
    rerank_batch_queries: RerankBatchQueriesOption = None,
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
    rounds: RoundsOption = 1,
    expand: ExpandOption = None,
    expand_weight: ExpandWeightOption = None,
    expand_from: ExpandFromOption = None,
    expand_min_similarity: ExpandMinSimilarityOption = None,
    expand_reciprocal: ExpandReciprocalOption = None,
    expand_margin: ExpandMarginOption = None,
    expand_list_depth: ExpandListDepthOption = None,
    expand_head: ExpandHeadOption = None,
    mention_encoder: MentionEncoderOption = None,
) -> None:
    """Search every query of a queries file; write a TREC run (the query's own passage left out).

    With --reader and --ray, the re-ranking runs on a Ray cluster."""
    from corefsearch.search.pipeline import search_to_run

    setup = search_setup([retriever], **search_options(locals()))
    ray_given = ray_options(ray, ray_workers, ray_cpus_per_worker)
    with precision_scope(precision, backend=backend, ray=ray_given):
        summary = search_to_run(index, queries, out, k=k, options=setup.bm25, retrieval=setup.retrieval,
                                reader=setup.reader, spans_out=spans_out, save_topics=save_topics, ray=ray_given,
                                expansion=expansion_options(rounds, expand, expand_weight, expand_from,
                                                            mention_encoder, min_similarity=expand_min_similarity,
                                                            reciprocal=expand_reciprocal, margin=expand_margin,
                                                            list_depth=expand_list_depth, head=expand_head))
    print_search_summary(summary, console)


@app.command("query")
@user_errors
def query_command(
    index: IndexOption,
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
    rm3: Rm3Option = False,
    rocchio: RocchioOption = False,
    fields: FieldsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    retriever: RetrieverOption = "bm25",
    encoder: SearchEncoderOption = None,
    fusion: FusionOption = "rrf",
    alpha: AlphaOption = 0.5,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    reader: ReaderOption = None,
    rerank_k: RerankOption = 50,
    backend: BackendOption = None,
    rerank_fusion: RerankFusionOption = None,
    ef_search: EfSearchOption = None,
    nprobe: NprobeOption = None,
    rounds: RoundsOption = 1,
    expand: ExpandOption = None,
    expand_weight: ExpandWeightOption = None,
    expand_from: ExpandFromOption = None,
    expand_min_similarity: ExpandMinSimilarityOption = None,
    expand_reciprocal: ExpandReciprocalOption = None,
    expand_margin: ExpandMarginOption = None,
    expand_list_depth: ExpandListDepthOption = None,
    expand_head: ExpandHeadOption = None,
    mention_encoder: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="The mention encoder (`train clusterer`) of --cluster and of --rounds 2 --expand-from encoder.")] = None,
    cluster: Annotated[bool, typer.Option(
        "--cluster", help="Also answer as a cluster: the query mention and the mentions found (the reader's spans, "
                          "else the encoder's nearest mentions), clustered by --mention-encoder; the cluster of "
                          "the query mention, by document, and the near misses.")] = False,
) -> None:
    """Ask one ad-hoc question: where else is this mention's event mentioned?

    Or run one query of a dataset (--dataset DATASET --qid ID) and see which hits its qrels judge
    relevant and where the gold coreferring mentions are.
    """
    from corefsearch.cli.report import print_adhoc_result
    from corefsearch.search.pipeline import adhoc_query

    setup = search_setup([retriever], **search_options(locals()))
    with precision_scope(precision, backend=backend):
        result = adhoc_query(index, mention, context, occurrence, k=k, options=setup.bm25,
                             retrieval=setup.retrieval, reader=setup.reader, dataset=dataset, qid=qid,
                             expansion=expansion_options(rounds, expand, expand_weight, expand_from, mention_encoder,
                                                         encoder_alone=True,
                                                         min_similarity=expand_min_similarity,
                                                         reciprocal=expand_reciprocal, margin=expand_margin,
                                                         list_depth=expand_list_depth, head=expand_head),
                             cluster=cluster)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), ensure_ascii=False, indent=2) + "\n")
    else:
        print_adhoc_result(result, console)


@app.command("serve")
@user_errors
def serve_command(
    index: IndexOption,
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
    max_k: Annotated[int, typer.Option(help="Largest k a request may ask for (offset + k, with paging).")] = 100,
    max_rerank_k: Annotated[int, typer.Option(help="Largest rerank_k a request may ask for.")] = 200,
    max_context: Annotated[int, typer.Option(help="Longest context a request may send (characters).")] = 20_000,
    max_body: Annotated[int, typer.Option(help="Largest request body (bytes).")] = 65_536,
    retriever: Annotated[str, typer.Option(
        help="bm25 | dense | hybrid, or several comma-separated (e.g. bm25,hybrid): the retrievers opened; "
             "the first answers requests that name none.")] = "bm25",
    query_format: Annotated[str, typer.Option(help=QUERY_FORMAT_HELP + "; a request may ask for another.")
                            ] = "mention+entities",
    rm3: Rm3Option = False,
    rocchio: RocchioOption = False,
    fields: FieldsOption = None,
    encoder: SearchEncoderOption = None,
    fusion: FusionOption = "rrf",
    alpha: AlphaOption = 0.5,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    rerank_k: RerankOption = 50,
    backend: BackendOption = None,
    rerank_fusion: RerankFusionOption = None,
    ef_search: EfSearchOption = None,
    nprobe: NprobeOption = None,
    rounds: RoundsOption = 1,
    expand: ExpandOption = None,
    expand_weight: ExpandWeightOption = None,
    expand_from: ExpandFromOption = None,
    expand_min_similarity: ExpandMinSimilarityOption = None,
    expand_reciprocal: ExpandReciprocalOption = None,
    expand_margin: ExpandMarginOption = None,
    expand_list_depth: ExpandListDepthOption = None,
    expand_head: ExpandHeadOption = None,
    mention_encoder: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="The mention encoder (`train clusterer`) of the cluster answers (`cluster: true`, the page's cluster "
             "view) and of --rounds 2 --expand-from encoder.")] = None,
) -> None:
    """Serve the search over HTTP: the API (POST /search, GET /passages/ID, /info, /health, /docs) and a page at /.

    The index, spaCy and the reader are loaded once, at start-up. Stop with Ctrl-C or SIGTERM.
    """
    import time

    from corefsearch.search.engine import SearchEngine
    from corefsearch.serve.app import Limits, create_app, serve_forever

    names = [name.strip() for name in retriever.split(",") if name.strip()]
    if not names:
        raise CorefSearchError("--retriever names no retriever")
    limits = Limits(max_body_bytes=max_body, max_context_chars=max_context, max_k=max_k, max_rerank_k=max_rerank_k)
    limits.validate()
    started = time.perf_counter()
    setup = search_setup(names, **search_options(locals()))
    with precision_scope(precision, backend=backend):  # the server runs in it until stopped
        engine = SearchEngine.open(index, options=setup.bm25, retrieval=setup.retrieval, reader=setup.reader,
                                   dataset=dataset, retrievers=names,
                                   expansion=expansion_options(rounds, expand, expand_weight, expand_from,
                                                               mention_encoder, encoder_alone=True,
                                                               min_similarity=expand_min_similarity,
                                                               reciprocal=expand_reciprocal, margin=expand_margin,
                                                               list_depth=expand_list_depth, head=expand_head))
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


