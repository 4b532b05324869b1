"""The HTTP API and the web page over a warm :class:`~corefsearch.engine.SearchEngine`.

``create_app(engine)`` answers ``POST /search`` (what ``corefsearch query --json`` prints, plus
timing), ``GET /passages/{id}``, ``GET /queries`` (with a dataset), ``GET /health``, ``GET /info``,
the OpenAPI page at ``/docs`` (served from the package, no CDN) and the page at ``/``.

The model work (retrieval, spaCy, the reader) runs in a thread pool of a set size, so the event
loop keeps answering (health, info, the page, queued searches) while searches run. A bad request
gets a JSON 4xx ``{"detail": "one line"}``; a library error (``CorefSearchError``) its own message.
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
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corefsearch import __version__
from corefsearch.errors import CorefSearchError, InputError

if TYPE_CHECKING:
    from corefsearch.engine import SearchEngine

log = logging.getLogger("corefsearch.serve")
STATIC = Path(__file__).parent / "static"
API_KEY_HEADER = "X-API-Key"
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (larger requests get a 413 or 422 with a message)."""

    max_body_bytes: int = 64 * 1024
    max_context_chars: int = 20_000
    max_k: int = 100
    max_rerank_k: int = 200

    def validate(self) -> None:
        for name, value in asdict(self).items():
            if value < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


class SearchRequest(BaseModel):
    """One question: a mention in its context (``mention`` [+ ``occurrence``], or the character
    offsets ``start``/``end`` of a selection in ``context``), or a query of the server's dataset
    (``qid``)."""

    model_config = ConfigDict(extra="forbid")

    context: str | None = Field(None, description="The passage the mention occurs in (default: the mention alone).")
    mention: str | None = Field(None, description="The mention as written in the context.")
    occurrence: int | None = Field(None, description="Which occurrence of `mention` in the context (1-based).")
    start: int | None = Field(None, description="The mention's first character in `context` (with `end`).")
    end: int | None = Field(None, description="One past the mention's last character in `context`.")
    qid: str | None = Field(None, description="A query of the dataset the server was started with (--dataset).")
    k: int = Field(10, description="Passages to return (at most the server's max_k).")
    retriever: str | None = Field(None, description="One of the server's retrievers (GET /info); default its first.")
    rerank_k: int | None = Field(None, description="With a reader: re-rank the top N (0: no re-ranking; "
                                                   "default: the server's --rerank-k).")
    query_format: str | None = Field(None, description="BM25 query format for this question (default: the server's).")


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


def _validation_message(errors: list[Any]) -> tuple[int, str]:
    """One line for pydantic's errors; 400 for a body that is not JSON, 422 for the rest."""
    if any(error.get("type") == "json_invalid" for error in errors):
        return 400, "the request body is not valid JSON"
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid")))
    return 422, "; ".join(parts) or "invalid request"


def create_app(engine: SearchEngine, api_key: str | None = None, limits: Limits | None = None,
               threads: int = 2) -> FastAPI:
    """The FastAPI application serving ``engine``; ``api_key``: required in the ``X-API-Key``
    header of every API call (not of the page, its files or ``/health``); ``threads``: searches
    at a time (the thread pool of the model work)."""
    limits = limits or Limits()
    limits.validate()
    if threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
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
    async def invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
        status, message = _validation_message(list(error.errors()))
        return JSONResponse({"detail": message}, status_code=status)

    @app.exception_handler(CorefSearchError)
    async def library_error(_: Request, error: CorefSearchError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        from corefsearch.sparse.java_errors import is_java_exception, java_message

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

    @app.post("/search", dependencies=keyed, summary="Where else is this mention's event mentioned?")
    async def search(request: SearchRequest) -> JSONResponse:
        """The top ``k`` passages for one mention: ``corefsearch query --json``'s answer, plus
        ``timing`` (milliseconds: ``queue`` waiting for a free search thread, ``search``, ``total``)."""
        received = time.perf_counter()
        _check(request, limits)
        times: dict[str, float] = {}

        def work() -> Any:
            times["started"] = time.perf_counter()
            result = engine.query(mention=request.mention, context=request.context, occurrence=request.occurrence,
                                  start=request.start, end=request.end, qid=request.qid, k=request.k,
                                  retriever=request.retriever, rerank_k=request.rerank_k,
                                  query_format=request.query_format)
            times["done"] = time.perf_counter()
            return result

        result = await in_pool(work)
        payload = result.to_json()
        payload["timing"] = {"queue_ms": round(1000 * (times["started"] - received), 2),
                             "search_ms": round(1000 * (times["done"] - times["started"]), 2),
                             "total_ms": round(1000 * (time.perf_counter() - received), 2)}
        return JSONResponse(payload)

    @app.get("/passages/{passage_id}", dependencies=keyed, summary="A passage in its document")
    async def passage(passage_id: str) -> dict[str, Any]:
        """The passage (``id``, ``title``, ``text``, ``doc_id``) and ``document``: every passage
        of its document in order (``id``, ``text``)."""
        try:
            return await in_pool(functools.partial(engine.passage, passage_id))
        except InputError as error:
            raise HTTPException(404, str(error)) from None

    @app.get("/queries", dependencies=keyed, summary="The queries of the server's dataset (--dataset)")
    async def queries(split: str = "test", offset: int = Query(0, ge=0),
                      limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
        """A page of the queries of one split: ``id``, ``mention``, ``passage_id``, ``cluster_id``."""
        if dataset_path is None:
            raise HTTPException(404, "this server has no dataset (start it with --dataset DATASET)")
        splits = _splits(dataset_path)
        if split not in splits:
            raise HTTPException(404, f"the dataset has no split {split!r} (it has: {', '.join(splits) or 'none'})")
        records = await in_pool(functools.partial(_queries, dataset_path, split))
        page = records[offset:offset + limit]
        return {"split": split, "total": len(records), "offset": offset,
                "queries": [{"id": q.id, "mention": q.mention, "passage_id": q.passage_id,
                             "cluster_id": q.cluster_id} for q in page]}

    @app.get("/health", summary="Liveness: the server is up and its engine loaded")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "retrievers": list(engine.retrievers)}

    @app.get("/info", dependencies=keyed, summary="The index, models, options, limits and versions")
    async def info() -> dict[str, Any]:
        from corefsearch.sparse.formulation import QUERY_FORMATS

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
    if request.rerank_k is not None and not 0 <= request.rerank_k <= limits.max_rerank_k:
        refuse(f"rerank_k: must be between 0 and {limits.max_rerank_k} (this server's limit), got {request.rerank_k}")
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
    from corefsearch.engine import detach_thread

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
    from corefsearch.datasets.dataset import Dataset

    return Dataset(dataset).queries(split)


def _splits(dataset: Path) -> list[str]:
    folder = dataset / "queries"
    return sorted(path.stem for path in folder.glob("*.jsonl")) if folder.is_dir() else []


def serve_forever(app: FastAPI, host: str, port: int, log_level: str = "info") -> None:
    """Run ``app`` with uvicorn until SIGINT or SIGTERM (uvicorn stops taking connections, lets the
    requests in flight finish, then runs the shutdown: the search threads end)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)

