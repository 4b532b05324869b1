"""The HTTP API and the web page over a warm :class:`~corefsearch.search.engine.SearchEngine`.

``create_app(engine)`` answers ``POST /search`` (what ``corefsearch query --json`` prints, plus
timing; a page of the ranking with ``offset``), ``GET /passages/{id}``, ``GET /queries`` (with a
dataset), ``GET /health``, ``GET /info``, the OpenAPI page at ``/docs`` (served from the package,
no CDN) and the page at ``/``. The requests and answers are the models of ``models.py``, so
``/openapi.json`` describes both, errors included.

The model work (retrieval, spaCy, the reader) runs in a thread pool of a set size, so the event
loop keeps answering (health, info, the page, queued searches) while searches run. A bad request
gets a JSON 4xx ``{"detail": "one line"}`` (a malformed one, a body that is not JSON included, a
422); a library error (``CorefSearchError``) its own message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import APIKeyHeader
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corefsearch import __version__
from corefsearch.base.checks import all_at_least_one, at_least_one
from corefsearch.base.errors import CorefSearchError, InputError
from corefsearch.datasets.dataset import Dataset
from corefsearch.io.read import json_type
from corefsearch.reader.rerank import check_rerank_k
from corefsearch.search.engine import detach_thread
from corefsearch.serve.judgements import Judge
from corefsearch.serve.models import (
    ErrorResponse,
    HealthResponse,
    InfoResponse,
    PassageResponse,
    QueriesResponse,
    SearchRequest,
    SearchResponse,
)
from corefsearch.sparse.formulation import QUERY_FORMATS
from corefsearch.sparse.java_errors import is_java_exception, java_message

if TYPE_CHECKING:
    from corefsearch.search.engine import SearchEngine

log = logging.getLogger("corefsearch.serve")
STATIC = Path(__file__).parent / "static"
API_KEY_HEADER = "X-API-Key"
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (larger requests get a 413 or 422 with a message)."""

    max_body_bytes: int = 64 * 1024
    max_context_chars: int = 20_000
    max_k: int = 100  # the deepest rank a search reaches: offset + k
    max_rerank_k: int = 200

    def validate(self) -> None:
        all_at_least_one({f"--{name.replace('_', '-')}": value for name, value in asdict(self).items()})


class BodyLimit:
    """Refuse a request body over ``limit`` bytes with a JSON 413, before any of it is parsed.

    Written by hand: neither Starlette nor uvicorn bounds the body size. The body is read here (at
    most ``limit`` + 1 bytes, chunked or not) and handed on whole."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await self._refuse(scope, receive, send)
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse({"detail": f"the request body is over {self.limit:,} bytes, this server's limit"},
                                status_code=413)
        await response(scope, receive, send)


def _dataset_path(description: dict[str, Any]) -> Path | None:
    dataset = description.get("dataset")
    if isinstance(dataset, dict):
        dataset = dataset.get("path")
    return Path(dataset) if dataset else None


def _validation_message(errors: list[Any], content_type: str | None = None) -> str:
    """One line for pydantic's errors, each naming its field (and, for a wrong type, what was sent);
    ``content_type``: the request's, named when the body was not read as JSON."""
    if any(error.get("type") == "json_invalid" for error in errors):
        return "the request body is not valid JSON"
    whole_body = [error for error in errors if tuple(error.get("loc", ())) == ("body",)]
    if any(error.get("type") == "missing" for error in whole_body):
        return "the request body is empty: expected a JSON object, with Content-Type: application/json"
    if any(isinstance(error.get("input"), bytes) for error in whole_body):
        sent = f"Content-Type: {content_type}" if content_type else "no Content-Type"
        return f"expected a JSON object as the request body, with Content-Type: application/json (got {sent})"
    parts = []
    for error in errors:
        loc = list(error.get("loc", ()))
        if loc and loc[0] in ("body", "query", "path", "header"):
            loc = loc[1:]
        where = ".".join(str(part) for part in loc)
        message = str(error.get("msg", "invalid"))
        if str(error.get("type", "")).endswith("_type") and "input" in error:
            given = error["input"]
            number = isinstance(given, (int, float)) and not isinstance(given, bool)
            message += f", got {given!r}" if number else f", got {json_type(given)}"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts) or "invalid request"


# The error answers of the OpenAPI schema: the shape every error handler below returns.
def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    why = {400: "The library refused the question (e.g. a mention not in the context, an unknown retriever, "
                "query format or qid).",
           401: "The X-API-Key header is missing or wrong (the server has --api-key).",
           404: "Not found (an unknown passage; /queries: no --dataset, or no such split).",
           413: "The request body is over the server's --max-body.",
           422: "A malformed request: a body that is not JSON (or not sent as `Content-Type: application/json`), "
                "a field of the wrong JSON type (`\"k\": \"5\"`) "
                "or unknown, a value over the server's limits, or a question of the wrong shape.",
           500: "An unexpected failure (the traceback is in the server's log only)."}
    return {status: {"model": ErrorResponse, "description": why[status]} for status in statuses}


def create_app(engine: SearchEngine, api_key: str | None = None, limits: Limits | None = None,
               threads: int = 2) -> FastAPI:
    """The FastAPI application serving ``engine``; ``api_key``: required in the ``X-API-Key``
    header of every API call (not of the page, its files or ``/health``); ``threads``: searches
    at a time (the thread pool of the model work)."""
    limits = limits or Limits()
    limits.validate()
    at_least_one("--threads", threads)
    description = engine.describe()
    dataset_path = _dataset_path(description)
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="corefsearch-search")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.get_running_loop().run_in_executor(None, _close_pool, executor, threads)

    app = FastAPIOffline(
        title="corefsearch", version=__version__, lifespan=lifespan,
        description="Cross-document coreference search: given a passage with one marked mention, find every "
                    "passage that mentions the same event or entity.")
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    app.state.engine, app.state.limits, app.state.executor = engine, limits, executor

    async def in_pool(func: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(executor, func)

    # --- errors: always JSON, one line ------------------------------------------------------

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        message = _validation_message(list(error.errors()), request.headers.get("content-type"))
        return JSONResponse({"detail": message}, status_code=422)

    @app.exception_handler(CorefSearchError)
    async def library_error(_: Request, error: CorefSearchError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        if is_java_exception(error):
            message = f"Lucene (Java) failed: {java_message(error)}"
        else:
            message = f"internal error ({type(error).__name__}); the server's log has the details"
        log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        return JSONResponse({"detail": message}, status_code=500)

    # --- the API key ------------------------------------------------------------------------

    header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False,
                          description="Required when the server was started with --api-key.")

    def check_key(given: str | None = Depends(header)) -> None:
        if api_key is None:
            return
        if given is None or not secrets.compare_digest(given.encode(), api_key.encode()):
            raise HTTPException(401, f"missing or wrong {API_KEY_HEADER} header (the server has --api-key)")

    keyed = [Depends(check_key)]

    # --- the API ----------------------------------------------------------------------------

    judge = Judge(dataset_path, lambda passage_id: [part["id"] for part in engine.passage(passage_id)["document"]]) \
        if dataset_path is not None else None

    @app.post("/search", dependencies=keyed, summary="Where else is this mention's event mentioned?",
              response_model=SearchResponse, response_model_exclude_unset=True,
              responses=_errors(400, 401, 413, 422, 500))
    async def search(request: SearchRequest) -> dict[str, Any]:
        """The passages at ranks ``offset`` + 1 to ``offset`` + ``k`` for one mention:
        ``corefsearch query --json``'s answer (``--k`` offset + k, the first ``offset`` hits left
        out; ranks stay those of the whole ranking), plus ``timing`` (milliseconds: ``queue``
        waiting for a free search thread, ``search``, ``total``). With ``qid``, each hit has its
        ``judgement``: relevant, not_relevant or unjudged (a passage the corpus never annotated)."""
        received = time.perf_counter()
        _check(request, limits)
        times: dict[str, float] = {}

        def work() -> dict[str, Any]:
            times["started"] = time.perf_counter()
            result = engine.query(mention=request.mention, context=request.context, occurrence=request.occurrence,
                                  start=request.start, end=request.end, qid=request.qid,
                                  k=request.offset + request.k, retriever=request.retriever,
                                  rerank_k=request.rerank_k, query_format=request.query_format,
                                  rounds=request.rounds, cluster=request.cluster)
            payload = result.to_json()
            payload["hits"] = payload["hits"][request.offset:]
            query = payload["query"]
            if judge is not None and query.get("split") is not None:
                judged = judge.judge(query["id"], query["split"], [hit["passage_id"] for hit in payload["hits"]])
                for hit in payload["hits"]:
                    hit["judgement"] = judged[hit["passage_id"]]
            times["done"] = time.perf_counter()
            return payload

        payload = await in_pool(work)
        payload["timing"] = {"queue_ms": round(1000 * (times["started"] - received), 2),
                             "search_ms": round(1000 * (times["done"] - times["started"]), 2),
                             "total_ms": round(1000 * (time.perf_counter() - received), 2)}
        return payload

    @app.get("/passages/{passage_id:path}", dependencies=keyed, summary="A passage in its document",
             response_model=PassageResponse, responses=_errors(401, 404, 422))
    async def passage(passage_id: str) -> dict[str, Any]:
        """The passage (``id``, ``title``, ``text``, ``doc_id``) and ``document``: every passage
        of its document in order (``id``, ``text``)."""
        try:
            return await in_pool(functools.partial(engine.passage, passage_id))
        except InputError as error:
            raise HTTPException(404, str(error)) from None

    @app.get("/queries", dependencies=keyed, summary="The queries of the server's dataset (--dataset)",
             response_model=QueriesResponse, responses=_errors(401, 404, 422))
    async def queries(split: str = "test", offset: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=1000),
                      contains: str = Query("", description="Only the queries whose id or mention contains this "
                                                            "text (any case).")) -> dict[str, Any]:
        """A page of the queries of one split (those ``contains`` matches): ``id``, ``mention``,
        ``passage_id``, ``cluster_id``; ``total`` counts the split's queries, ``matching`` those
        that match."""
        if dataset_path is None:
            raise HTTPException(404, "this server has no dataset (start it with --dataset DATASET)")
        splits = _splits(dataset_path)
        if split not in splits:
            raise HTTPException(404, f"the dataset has no split {split!r} (it has: {', '.join(splits) or 'none'})")
        records = await in_pool(functools.partial(_queries, dataset_path, split))
        needle = contains.strip().casefold()
        matching = [q for q in records if needle in q.id.casefold() or needle in q.mention.casefold()] \
            if needle else records
        page = matching[offset:offset + limit]
        return {"split": split, "total": len(records), "matching": len(matching), "offset": offset,
                "queries": [{"id": q.id, "mention": q.mention, "passage_id": q.passage_id,
                             "cluster_id": q.cluster_id} for q in page]}

    @app.get("/health", summary="Liveness: the server is up and its engine loaded", response_model=HealthResponse)
    async def health() -> dict[str, Any]:
        return {"status": "ok", "retrievers": list(engine.retrievers)}

    @app.get("/info", dependencies=keyed, summary="The index, models, options, limits and versions",
             response_model=InfoResponse, responses=_errors(401))
    async def info() -> dict[str, Any]:
        bm25 = (description.get("options") or {}).get("bm25") or {}
        reader = description.get("reader") or {}
        defaults = {"retriever": engine.retrievers[0], "k": min(10, limits.max_k),
                    "query_format": bm25.get("query_format", "mention+entities"), "rerank_k": reader.get("rerank_k")}
        return {**description, "query_formats": list(QUERY_FORMATS), "defaults": defaults,
                "dataset_splits": _splits(dataset_path) if dataset_path is not None else [],
                "limits": {**asdict(limits), "threads": threads, "api_key": api_key is not None}}

    # --- the page ---------------------------------------------------------------------------

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    return app


def _check(request: SearchRequest, limits: Limits) -> None:
    """The limits and the shape of one question (the engine checks the rest: a mention in the
    context, the retriever, the query format, the qid)."""

    def refuse(message: str) -> None:
        raise HTTPException(422, message)

    if request.context is not None and len(request.context) > limits.max_context_chars:
        refuse(f"context: {len(request.context):,} characters, over this server's limit of "
               f"{limits.max_context_chars:,}")
    if not 1 <= request.k <= limits.max_k:
        refuse(f"k: must be between 1 and {limits.max_k} (this server's limit), got {request.k}")
    if request.offset < 0:
        refuse(f"offset: must be 0 or more, got {request.offset}")
    if request.offset + request.k > limits.max_k:
        refuse(f"offset + k: {request.offset} + {request.k} is past rank {limits.max_k}, the deepest this server "
               "ranks (its max_k)")
    if request.rerank_k is not None:
        try:
            check_rerank_k(request.rerank_k, limit=limits.max_rerank_k)
        except InputError as err:
            refuse(str(err))
    offsets = request.start is not None or request.end is not None
    if request.mention is None and not offsets and request.qid is None:
        refuse("give the mention: `mention` (as written in `context`), or `start` and `end` (its characters in "
               "`context`), or `qid` (a query of the server's dataset)")
    if request.qid is not None and (request.mention is not None or offsets):
        refuse("qid names a dataset query, which has its own mention: leave out mention, start and end")
    if offsets:
        if request.start is None or request.end is None:
            refuse("start and end go together (the mention's characters in `context`)")
        if request.context is None:
            refuse("start and end are characters of `context`: give the context")
        assert request.start is not None and request.end is not None and request.context is not None
        if not 0 <= request.start < request.end <= len(request.context):
            refuse(f"start/end: {request.start}..{request.end} is not a span of the context "
                   f"(0..{len(request.context)}, start before end)")
    if request.qid is not None and (request.context is not None or request.occurrence is not None):
        refuse("qid names a dataset query, which has its own context and mention: leave out context and occurrence")


def _close_pool(executor: ThreadPoolExecutor, threads: int) -> None:
    """Let the searches in flight finish, detach each search thread from the JVM (pyjnius asks it of a
    thread that called Java before it ends), then end the threads."""
    barrier = threading.Barrier(threads)

    def detach() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=30)  # every thread takes exactly one of these
        detach_thread()

    for _ in range(threads):
        executor.submit(detach)
    executor.shutdown(wait=True)


@functools.lru_cache(maxsize=8)
def _queries(dataset: Path, split: str) -> list[Any]:
    return Dataset(dataset).queries(split)


def _splits(dataset: Path) -> list[str]:
    folder = dataset / "queries"
    return sorted(path.stem for path in folder.glob("*.jsonl")) if folder.is_dir() else []


def serve_forever(app: FastAPI, host: str, port: int, log_level: str = "info") -> None:
    """Run ``app`` with uvicorn until SIGINT or SIGTERM (uvicorn stops taking connections, lets the
    requests in flight finish, then runs the shutdown: the search threads end)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)

