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
from corefsearch.cli.app import app, console, err_console, log_line, user_errors
from corefsearch.cli.fields import options_from
from corefsearch.cli.options import (
    BM25Args,
    FileBM25Args,
    FileModelArgs,
    IndexOption,
    ModelArgs,
    QueryRoundArgs,
    RayCpusOption,
    RayOption,
    RayWorkersOption,
    RoundArgs,
    ServeBM25Args,
    ServeModelArgs,
    ServeRoundArgs,
    precision_scope,
    ray_options,
    search_options,
)
from corefsearch.cli.report import print_search_summary


@app.command("search")
@user_errors
@options_from(RoundArgs, into="second_round")
@options_from(FileModelArgs, into="models")
@options_from(FileBM25Args, into="bm25")
def search_command(
    index: IndexOption,
    queries: Annotated[Path, typer.Option("--queries", help="Queries JSONL (e.g. DATASET/queries/test.jsonl).")],
    out: Annotated[Path, typer.Option("--out", help="TREC run file to write.")],
    k: Annotated[int, typer.Option("--k", help="Passages per query.")] = 500,
    *,
    bm25: FileBM25Args,
    models: FileModelArgs,
    spans_out: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="With --reader: the spans JSONL to write (default: OUT.spans.jsonl).")] = None,
    save_topics: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="Also write the BM25 query strings as a Pyserini topics file (qid<TAB>query, e.g. topics.tsv), "
             "for `python -m pyserini.search.lucene --topics FILE.tsv --bm25`.")] = None,
    ray: RayOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus_per_worker: RayCpusOption = None,
    second_round: RoundArgs,
) -> None:
    """Search every query of a queries file; write a TREC run (the query's own passage left out).

    With --reader and --ray, the re-ranking runs on a Ray cluster."""
    from corefsearch.search.pipeline import search_to_run

    ray_given = ray_options(ray, ray_workers, ray_cpus_per_worker)
    options = search_options([models.retriever], bm25, models, second_round, k=k, ray=ray_given).check(
        index, log=log_line)
    with precision_scope(models.precision, backend=models.backend, ray=ray_given):
        summary = search_to_run(index, queries, out, options, spans_out=spans_out, save_topics=save_topics)
    print_search_summary(summary, console)


@app.command("query")
@user_errors
@options_from(QueryRoundArgs, into="second_round")
@options_from(ModelArgs, into="models")
@options_from(BM25Args, into="bm25")
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
    *,
    bm25: BM25Args,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    models: ModelArgs,
    second_round: QueryRoundArgs,
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

    options = search_options([models.retriever], bm25, models, second_round, k=k, cluster=cluster,
                             encoder_alone=True).check(index, log=log_line)
    with precision_scope(models.precision, backend=models.backend):
        result = adhoc_query(index, options, mention, context, occurrence, dataset=dataset, qid=qid)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), ensure_ascii=False, indent=2) + "\n")
    else:
        print_adhoc_result(result, console)


@app.command("serve")
@user_errors
@options_from(ServeRoundArgs, into="second_round")
@options_from(ServeModelArgs, into="models")
@options_from(ServeBM25Args, into="bm25")
def serve_command(
    index: IndexOption,
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
    *,
    bm25: ServeBM25Args,
    models: ServeModelArgs,
    second_round: ServeRoundArgs,
) -> None:
    """Serve the search over HTTP: the API (POST /search, GET /passages/ID, /info, /health, /docs) and a page at /.

    The index, spaCy and the reader are loaded once, at start-up. Stop with Ctrl-C or SIGTERM.
    """
    import time

    from corefsearch.search.engine import SearchEngine
    from corefsearch.serve.app import Limits, create_app, serve_forever

    names = [name.strip() for name in models.retriever.split(",") if name.strip()]
    if not names:
        raise CorefSearchError("--retriever names no retriever")
    limits = Limits(max_body_bytes=max_body, max_context_chars=max_context, max_k=max_k, max_rerank_k=max_rerank_k)
    limits.validate()
    started = time.perf_counter()
    options = search_options(names, bm25, models, second_round, encoder_alone=True).check(index, log=log_line)
    with precision_scope(models.precision, backend=models.backend):  # the server runs in it until stopped
        engine = SearchEngine.open(index, options, dataset)
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


@app.command("calibrate")
@user_errors
@options_from(ModelArgs, into="models")
@options_from(BM25Args, into="bm25")
def calibrate_command(
    index: IndexOption,
    dataset: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="The dataset whose stored detected mentions (`corefsearch detect`) are the candidates and the "
             "calibration's queries (default: the one the index was built from).")] = None,
    queries: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--queries", help="A queries JSONL to calibrate on (the queries a run will ask; their qrels are never "
                          "read). Default: --sample of the collection's own detected mentions.")] = None,
    sample: Annotated[int, typer.Option(help="How many of the collection's detected mentions are its queries.")
                      ] = 500,
    mention_type: Annotated[str, typer.Option(help="The type of those mentions: event | entity.")] = "event",
    mention_encoder: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="The mention encoder of the second round (`train clusterer`, or a shipped model's name; default: the "
             "shipped event mention encoder).")] = None,
    expand_min_similarity: Annotated[float, typer.Option(
        help="The gate the second round will use (--expand-min-similarity).")] = 0.9,
    out: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="The calibration file to write (default: INDEX/second-round-calibration.json).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing calibration file.")] = False,
    *,
    bm25: BM25Args,
    models: ModelArgs,
) -> None:
    """Calibrate the second round's top 10 on this collection, without gold (for --expand-order calibrated).

    The collection's own detected mentions are the queries: their first round's top 10 and the mention encoder's
    gate give a model of how much passing the gate says here against the first round's rank."""
    from corefsearch.base.checks import at_least_one
    from corefsearch.base.schema import MENTION_TYPES
    from corefsearch.search.calibration import CALIBRATION_FILE, save
    from corefsearch.search.pipeline import calibrate

    at_least_one("--sample", sample)
    if mention_type not in MENTION_TYPES:
        raise CorefSearchError(f"--mention-type must be {' or '.join(MENTION_TYPES)}, got {mention_type!r}")
    if not -1 <= expand_min_similarity <= 1:
        raise CorefSearchError("--expand-min-similarity is a cosine similarity in [-1, 1], got "
                               f"{expand_min_similarity}")
    target = out if out is not None else Path(index) / CALIBRATION_FILE
    if target.exists() and not overwrite:
        raise CorefSearchError(f"{target} exists; add --overwrite to replace it")
    rounds = RoundArgs(rounds=1, mention_encoder=mention_encoder)
    options = search_options([models.retriever], bm25, models, rounds, k=100, encoder_alone=True).check(
        index, log=log_line)
    asked = None
    if queries is not None:
        from corefsearch.datasets.dataset import read_queries

        asked = read_queries(queries)
    with precision_scope(models.precision, backend=models.backend):
        found = calibrate(index, options, dataset, expand_min_similarity, sample, mention_type, queries=asked,
                          queries_from=str(queries) if queries is not None else None)
    save(found, target)
    described = found.describe()
    verdict = ("the top 10 is re-ordered by it" if found.applies else
               f"under the floor {found.floor:g}: the top 10 keeps the first round's order")
    console.print(f"Calibrated on {found.fitted_on['queries']}: the gate "
                  f"{found.gate:g} passes the first round's top passage in {100 * found.top_pass_rate:.1f} % of "
                  f"them ({verdict}); P(relevant) at rank 1 {described['prior_rank_1']:.2f}, at rank 10 "
                  f"{described['prior_rank_10']:.2f}; P(passes | relevant) {found.a:.2f}, P(passes | not) "
                  f"{found.b:.2f}. Wrote {target}.", markup=False, highlight=False)
