"""`corefsearch serve`'s API with FastAPI's test client, on the ECB+ subset (test topics 36-37):
the hits equal `corefsearch query --json`'s for the same question (BM25 with a tiny random reader,
hybrid with a tiny random dense encoder, a dataset query by id), the passage in its document, the
info, health, queries and docs routes, every 4xx path, the API key, the thread pool (the event
loop answers while searches run), and the `serve` command's start-up log and SIGTERM shutdown."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from serve_helpers import free_port, query_with_a_relevant_hit, subset_query, tiny_bert, tiny_reader
from typer.testing import CliRunner

from corefsearch.cli import app as cli_app
from corefsearch.datasets.dataset import Dataset
from corefsearch.engine import SearchEngine
from corefsearch.reader.rerank import ReaderOptions
from corefsearch.retriever import RetrievalOptions
from corefsearch.schema import Query
from corefsearch.serve.app import Limits, create_app
from corefsearch.sparse.search import BM25Options

pytestmark = pytest.mark.java
runner = CliRunner()
LIMITS = Limits(max_body_bytes=8192, max_context_chars=2000, max_k=50, max_rerank_k=20)
RERANK_K = 5


@pytest.fixture(scope="module")
def models(subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny random BERT (the dense encoder) and a tiny random reader on it."""
    root = tmp_path_factory.mktemp("serve-models")
    base = tiny_bert(subset_dataset, root / "bert")
    return base, tiny_reader(base, root / "reader")


@pytest.fixture(scope="module")
def index(subset_index: Path, subset_dataset: Path, models: tuple[Path, Path],
          tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's Lucene index of the subset with a dense index of the tiny BERT beside it."""
    from corefsearch.dense.indexing import build_dense_index

    out = tmp_path_factory.mktemp("serve-index") / "index"
    shutil.copytree(subset_index / "lucene", out / "lucene")
    build_dense_index(subset_dataset, out, str(models[0]), device="cpu")
    return out


@pytest.fixture(scope="module")
def engine(index: Path, subset_dataset: Path, models: tuple[Path, Path]) -> SearchEngine:
    return SearchEngine.open(index, BM25Options(query_format="mention+entities"),
                             RetrievalOptions("bm25", device="cpu"), ReaderOptions(models[1], RERANK_K, device="cpu"),
                             dataset=subset_dataset, retrievers=["bm25", "hybrid"])


@pytest.fixture(scope="module")
def client(engine: SearchEngine) -> Iterator[TestClient]:
    with TestClient(create_app(engine, limits=LIMITS, threads=2)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def query(subset_dataset: Path) -> Query:
    return subset_query(subset_dataset)


@pytest.fixture(scope="module")
def found_query(subset_dataset: Path, engine: SearchEngine) -> Query:
    """A test query with a relevant passage in BM25's top 5 (what the reader re-ranks)."""
    return query_with_a_relevant_hit(engine, subset_dataset, RERANK_K)


def cli_json(*args: Any) -> dict[str, Any]:
    result = runner.invoke(cli_app, ["query", *map(str, args), "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def answer(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    payload = response.json()
    timing = payload.pop("timing")
    assert set(timing) == {"queue_ms", "search_ms", "total_ms"}
    assert 0 <= timing["search_ms"] <= timing["total_ms"] and timing["queue_ms"] >= 0
    return payload


# --- the same hits as `query --json` ----------------------------------------------------------------


def test_a_selection_with_the_reader_gets_query_jsons_hits(client: TestClient, index: Path, models: tuple[Path, Path],
                                                           query: Query) -> None:
    # What the page sends for a mouse selection: the context and the mention's characters in it.
    served = answer(client.post("/search", json={"context": query.text, "start": query.start, "end": query.end,
                                                 "k": 8}))
    expected = cli_json("--index", index, "--mention", query.mention, "--context", query.text, "--k", 8,
                        "--reader", models[1], "--rerank-k", RERANK_K)
    assert served == expected
    assert served["query"]["mention"] == query.mention and served["reader"] == str(models[1])
    hits = served["hits"]
    assert [hit["rank"] for hit in hits] == list(range(1, 9))
    assert all("span" in hit for hit in hits[:RERANK_K]) and not any("span" in hit for hit in hits[RERANK_K:])
    for hit in hits:  # the reader's span and the matched terms are characters of the hit's text
        if "span" in hit:
            assert hit["text"][hit["span"]["start"]:hit["span"]["end"]] == hit["span"]["text"]
    assert any(hit["matched"] for hit in hits)


def test_hybrid_without_reranking_gets_query_jsons_hits(client: TestClient, index: Path, query: Query) -> None:
    served = answer(client.post("/search", json={"mention": query.mention, "context": query.text, "k": 6,
                                                 "retriever": "hybrid", "rerank_k": 0, "query_format": "mention"}))
    expected = cli_json("--index", index, "--mention", query.mention, "--context", query.text, "--k", 6,
                        "--retriever", "hybrid", "--query-format", "mention")
    assert served == expected
    assert served["retriever"] == "hybrid" and served["fusion"] == "rrf" and served["reader"] is None
    assert served["encoder"] is not None and not any("span" in hit for hit in served["hits"])


def test_a_dataset_query_by_id_marks_relevant_hits_and_gold_mentions(client: TestClient, index: Path,
                                                                      models: tuple[Path, Path], subset_dataset: Path,
                                                                      found_query: Query) -> None:
    query = found_query
    served = answer(client.post("/search", json={"qid": query.id, "k": 10}))
    expected = cli_json("--index", index, "--dataset", subset_dataset, "--qid", query.id, "--k", 10,
                        "--reader", models[1], "--rerank-k", RERANK_K)
    assert served == expected
    assert served["query"]["id"] == query.id and served["query"]["split"] == "test"
    assert query.passage_id not in {hit["passage_id"] for hit in served["hits"]}  # its own passage left out
    relevant = [hit for hit in served["hits"] if hit["relevant"]]
    assert relevant  # re-ranking the top 5 keeps the relevant passage of BM25's top 5 in the top 10
    for hit in relevant:
        assert hit["gold_mentions"]
        for gold in hit["gold_mentions"]:
            assert hit["text"][gold["start"]:gold["end"]] == gold["text"]
    assert all(hit["gold_mentions"] == [] for hit in served["hits"] if not hit["relevant"])


# --- the other routes ---------------------------------------------------------------------------------


def test_a_passage_comes_in_its_document(client: TestClient, subset_dataset: Path) -> None:
    passages = list(Dataset(subset_dataset).passages())
    middle = next(p for i, p in enumerate(passages[1:], 1) if p.doc_id == passages[i - 1].doc_id)
    response = client.get(f"/passages/{middle.id}")
    assert response.status_code == 200, response.text
    served = response.json()
    assert (served["id"], served["text"], served["title"], served["doc_id"]) == (middle.id, middle.text, middle.title,
                                                                                 middle.doc_id)
    document = [{"id": p.id, "text": p.text} for p in passages if p.doc_id == middle.doc_id]
    assert served["document"] == document and len(document) > 2


def test_health_info_queries_docs_and_the_page(client: TestClient, index: Path, subset_dataset: Path,
                                               models: tuple[Path, Path]) -> None:
    assert client.get("/health").json() == {"status": "ok", "retrievers": ["bm25", "hybrid"]}
    info = client.get("/info").json()
    assert info["index"] == str(index.resolve()) and info["retrievers"] == ["bm25", "hybrid"]
    assert info["reader"]["model"] == str(models[1].resolve()) and info["reader"]["rerank_k"] == RERANK_K
    assert info["dataset"] == str(subset_dataset.resolve()) and info["dataset_splits"] == ["test"]
    assert info["defaults"] == {"retriever": "bm25", "k": 10, "query_format": "mention+entities",
                                "rerank_k": RERANK_K}
    assert info["limits"] == {"max_body_bytes": 8192, "max_context_chars": 2000, "max_k": 50, "max_rerank_k": 20,
                              "threads": 2, "api_key": False}
    assert {"corefsearch", "fastapi", "uvicorn", "pyserini"} <= set(info["versions"])
    assert {"retrievers", "reader"} <= set(info["load_seconds"])

    test_queries = Dataset(subset_dataset).queries("test")
    page = client.get("/queries", params={"split": "test", "offset": 2, "limit": 3}).json()
    assert page["total"] == len(test_queries) and [q["id"] for q in page["queries"]] == [
        q.id for q in test_queries[2:5]]
    assert client.get("/queries", params={"split": "train"}).status_code == 404

    # The OpenAPI page works offline: its script and style come from the server itself.
    docs = client.get("/docs")
    assert docs.status_code == 200 and "cdn" not in docs.text.lower()
    assert client.get("/static-offline-docs/swagger-ui-bundle.js").status_code == 200
    assert "/search" in client.get("/openapi.json").json()["paths"]

    html = client.get("/")
    assert html.status_code == 200 and "<title>corefsearch</title>" in html.text
    for asset in ("static/app.js", "static/style.css"):
        assert f'"{asset}"' in html.text and client.get(f"/{asset}").status_code == 200
    assert "http" not in html.text.replace("http-equiv", "")  # nothing from elsewhere


# --- every 4xx: JSON, one line, no traceback -------------------------------------------------------------

CONTEXT = "Police said the blaze destroyed the old mill in Leeds on Tuesday."
BAD_REQUESTS = [
    ("bad JSON", {"content": b'{"context": "x", "mention": ', "headers": {"content-type": "application/json"}},
     400, "not valid JSON"),
    ("not an object", {"json": ["blaze"]}, 422, "valid dictionary"),
    ("unknown field", {"json": {"mention": "blaze", "limit": 3}}, 422, "limit: Extra inputs"),
    ("k not a number", {"json": {"mention": "blaze", "k": "ten"}}, 422, "k: Input should be a valid integer"),
    ("missing mention", {"json": {"context": CONTEXT}}, 422, "give the mention"),
    ("empty mention", {"json": {"context": CONTEXT, "mention": " "}}, 400, "--mention is empty"),
    ("mention not in the context", {"json": {"context": CONTEXT, "mention": "flood"}}, 400, "does not occur"),
    ("offsets outside the context", {"json": {"context": CONTEXT, "start": 16, "end": 500}}, 422,
     "is not a span of the context"),
    ("start without end", {"json": {"context": CONTEXT, "start": 16}}, 422, "start and end go together"),
    ("offsets without context", {"json": {"start": 0, "end": 4}}, 422, "give the context"),
    ("occurrence past the last", {"json": {"context": CONTEXT, "mention": "the", "occurrence": 3}}, 400,
     "occurs 2 time(s)"),
    ("k too big", {"json": {"mention": "blaze", "k": 51}}, 422, "k: must be between 1 and 50"),
    ("k zero", {"json": {"mention": "blaze", "k": 0}}, 422, "k: must be between 1 and 50"),
    ("rerank_k too big", {"json": {"mention": "blaze", "rerank_k": 21}}, 422, "rerank_k: must be between 0 and 20"),
    ("context too long", {"json": {"mention": "blaze", "context": "blaze " + "x" * 1995}}, 422,
     "2,001 characters, over this server's limit of 2,000"),
    ("body too big", {"json": {"mention": "blaze", "context": "blaze " + "x" * 9000}}, 413, "over 8,192 bytes"),
    ("unknown retriever", {"json": {"mention": "blaze", "retriever": "bm42"}}, 400, "retriever must be one of"),
    ("retriever not open", {"json": {"mention": "blaze", "retriever": "dense"}}, 400,
     "the retriever dense is not open here (open: bm25, hybrid)"),
    ("unknown query format", {"json": {"mention": "blaze", "query_format": "keywords"}}, 400,
     "--query-format must be one of"),
    ("unknown qid", {"json": {"qid": "no-such-query"}}, 400, "query 'no-such-query' is not in the dataset"),
    ("qid with a mention", {"json": {"qid": "q", "mention": "blaze"}}, 422, "leave out mention"),
]


@pytest.mark.parametrize(("request_args", "status", "message"), [case[1:] for case in BAD_REQUESTS],
                         ids=[case[0] for case in BAD_REQUESTS])
def test_a_bad_search_gets_a_json_4xx_with_a_message(client: TestClient, request_args: dict[str, Any], status: int,
                                                     message: str) -> None:
    response = client.post("/search", **request_args)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    detail = response.json()["detail"]
    assert isinstance(detail, str) and message in detail and "\n" not in detail and "Traceback" not in detail


def test_a_chunked_body_over_the_limit_is_refused_too(client: TestClient) -> None:
    chunks = [b'{"mention": "blaze", "context": "blaze ', b"x" * 5000, b"y" * 5000, b'"}']
    response = client.post("/search", content=iter(chunks), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers  # sent chunked: no size declared up front
    assert response.status_code == 413 and "over 8,192 bytes" in response.json()["detail"]


def test_an_unknown_passage_is_a_404(client: TestClient) -> None:
    response = client.get("/passages/no-such-passage")
    assert response.status_code == 404
    assert "no-such-passage is not in the index" in response.json()["detail"]


def test_an_unexpected_error_is_a_json_500_without_the_traceback(engine: SearchEngine) -> None:
    class Broken:
        retrievers = engine.retrievers
        load_seconds: dict[str, float] = {}

        def describe(self) -> dict[str, Any]:
            return engine.describe()

        def query(self, **_: Any) -> Any:
            raise RuntimeError("secret internals /etc/passwd")

    with TestClient(create_app(Broken()), raise_server_exceptions=False) as broken:  # type: ignore[arg-type]
        response = broken.post("/search", json={"mention": "blaze"})
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error (RuntimeError); the server's log has the details"}


# --- the API key ---------------------------------------------------------------------------------------------


def test_the_api_key_is_required_by_the_api_not_by_the_page(engine: SearchEngine) -> None:
    with TestClient(create_app(engine, api_key="s3cret key")) as keyed:
        for method, path, body in (("POST", "/search", {"mention": "charged"}), ("GET", "/info", None),
                                   ("GET", "/passages/36_10ecbplus-0", None), ("GET", "/queries", None)):
            for headers in ({}, {"X-API-Key": "wrong"}, {"X-API-Key": "s3cret"}):
                response = keyed.request(method, path, json=body, headers=headers)
                assert response.status_code == 401, (path, headers)
                assert response.json()["detail"] == "missing or wrong X-API-Key header (the server has --api-key)"
            right = keyed.request(method, path, json=body, headers={"X-API-Key": "s3cret key"})
            assert right.status_code == 200, (path, right.text)
        assert keyed.get("/info", headers={"X-API-Key": "s3cret key"}).json()["limits"]["api_key"] is True
        for open_path in ("/health", "/", "/static/app.js", "/docs", "/openapi.json"):
            assert keyed.get(open_path).status_code == 200, open_path


# --- the thread pool: searches off the event loop, a set number at a time ----------------------------------------


class GatedEngine:
    """The real engine, whose ``query`` first waits for the test to open the gate, counting the
    calls in progress (how many searches the pool runs at a time)."""

    def __init__(self, engine: SearchEngine) -> None:
        self.engine, self.retrievers, self.load_seconds = engine, engine.retrievers, engine.load_seconds
        self.gate, self.lock = threading.Event(), threading.Lock()
        self.inside = self.most_inside = 0

    def describe(self) -> dict[str, Any]:
        return self.engine.describe()

    def query(self, **kwargs: Any) -> Any:
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            assert self.gate.wait(timeout=60)
            return self.engine.query(**kwargs)
        finally:
            with self.lock:
                self.inside -= 1


def test_searches_run_in_the_pool_and_never_block_the_server(engine: SearchEngine, query: Query) -> None:
    gated = GatedEngine(engine)
    body = {"context": query.text, "start": query.start, "end": query.end, "k": 3, "rerank_k": 0}
    with TestClient(create_app(gated, threads=2)) as test_client:  # type: ignore[arg-type]
        results: list[httpx.Response] = []
        workers = [threading.Thread(target=lambda: results.append(test_client.post("/search", json=body)))
                   for _ in range(3)]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 30
        while gated.inside < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        # Two searches hold both search threads and a third waits for one; the server still answers.
        assert gated.inside == 2
        assert test_client.get("/health").status_code == 200
        assert test_client.get("/info").status_code == 200
        gated.gate.set()
        for worker in workers:
            worker.join(timeout=60)
    assert gated.most_inside == 2
    assert [response.status_code for response in results] == [200, 200, 200]
    hits = [[hit["passage_id"] for hit in response.json()["hits"]] for response in results]
    expected = [hit.passage_id for hit in engine.query(context=query.text, start=query.start, end=query.end, k=3,
                                                       rerank_k=0).hits]
    assert hits == [expected] * 3


# --- the command: start-up log, answers, SIGTERM ------------------------------------------------------------------


def test_serve_logs_what_it_loaded_answers_and_stops_cleanly_on_sigterm(subset_index: Path, subset_dataset: Path,
                                                                        query: Query, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "COREFSEARCH_QUIET": "1"}
    with log.open("w") as handle:
        server = subprocess.Popen([sys.executable, "-m", "corefsearch.cli", "serve", "--index", str(subset_index),
                                   "--dataset", str(subset_dataset), "--port", str(port), "--query-format", "mention",
                                   "--api-key", "k3y"], stdout=handle, stderr=subprocess.STDOUT, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        response = httpx.post(f"{url}/search", json={"qid": query.id, "k": 5}, headers={"X-API-Key": "k3y"},
                              timeout=60)
        assert response.status_code == 200 and len(response.json()["hits"]) == 5
        assert httpx.post(f"{url}/search", json={"qid": query.id}, timeout=60).status_code == 401
        server.send_signal(signal.SIGTERM)
        # Graceful: uvicorn finishes, runs the shutdown, then (0.29 and later) re-raises the signal,
        # so the process ends as killed by SIGTERM, the status service managers expect of it.
        assert server.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    text = log.read_text()
    assert f"Loaded {subset_index} in " in text and "retrievers: bm25" in text, text
    assert f"Serving on http://127.0.0.1:{port}/" in text
    assert "Application shutdown complete" in text and "Traceback" not in text


def test_serve_refuses_a_missing_index_in_one_line_and_the_cli_stays_light(tmp_path: Path) -> None:
    result = runner.invoke(cli_app, ["serve", "--index", str(tmp_path / "no-index"), "--max-k", "5"])
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "no-index" in result.output and "Traceback" not in result.output
    bad = runner.invoke(cli_app, ["serve", "--index", str(tmp_path), "--max-k", "0"])
    assert bad.exit_code == 1 and "--max-k must be at least 1, got 0" in bad.output
    # `corefsearch --help` stays instant: the CLI imports neither the server nor the engine until `serve` runs.
    done = subprocess.run([sys.executable, "-c", "import sys, corefsearch.cli; print(sorted(m for m in sys.modules if "
                           "m.split('.')[0] in ('fastapi', 'uvicorn', 'torch') or m.startswith('corefsearch.serve')))"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
