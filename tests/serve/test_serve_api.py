"""`corefsearch serve`'s API with FastAPI's test client, on the ECB+ subset (test topics 36-37):
the hits equal `corefsearch query --json`'s for the same question (BM25 with a tiny random reader,
hybrid with a tiny random dense encoder, a dataset query by id), a page of the ranking, the
judgement of each hit of a dataset query (relevant, not relevant, unjudged), the passage in its
document, the info, health, queries and docs routes, the OpenAPI schema of the answers and of
the errors, every 4xx path (wrong JSON types included), the API key, the thread pool (the event
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
from helpers import (
    REPRINT_PASSAGE,
    free_port,
    query_with_a_relevant_hit,
    saved_reader,
    subset_query,
    subset_with_a_reprint,
    tiny_bert,
)
from typer.testing import CliRunner

from corefsearch.base.errors import CorefSearchError
from corefsearch.base.schema import Query
from corefsearch.cli import app as cli_app
from corefsearch.datasets.dataset import Dataset
from corefsearch.reader.rerank import ReaderOptions
from corefsearch.search.engine import SearchEngine
from corefsearch.search.options import RetrievalOptions, SearchOptions
from corefsearch.serve.app import Limits, create_app
from corefsearch.serve.judgements import Judge, judgement_of
from corefsearch.serve.models import SearchResponse
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
    return base, saved_reader(base, root / "reader")


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
    return SearchEngine.open(index, SearchOptions(
        bm25=BM25Options(query_format="mention+entities"), retrieval=RetrievalOptions("bm25", device="cpu"),
        reader=ReaderOptions(models[1], RERANK_K, device="cpu"), retrievers=("bm25", "hybrid")), subset_dataset)


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
    # The server adds each hit's judgement; every ECB+ document is annotated, so none is unjudged.
    judgements = [hit.pop("judgement") for hit in served["hits"]]
    assert judgements == ["relevant" if hit["relevant"] else "not_relevant" for hit in served["hits"]]
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


# --- a page of the ranking -------------------------------------------------------------------------


def test_a_page_of_the_ranking_is_the_same_slice_of_the_deeper_ranking(client: TestClient, query: Query) -> None:
    question = {"context": query.text, "start": query.start, "end": query.end}
    deeper = answer(client.post("/search", json={**question, "k": 9}))
    second = answer(client.post("/search", json={**question, "k": 3, "offset": 3}))
    last = answer(client.post("/search", json={**question, "k": 4, "offset": LIMITS.max_k - 4}))
    assert second["hits"] == deeper["hits"][3:6]  # re-ranked by the reader alike: its top 5 span both pages
    assert [hit["rank"] for hit in second["hits"]] == [4, 5, 6]
    assert {key: value for key, value in second.items() if key != "hits"} == {
        key: value for key, value in deeper.items() if key != "hits"}
    assert [hit["rank"] for hit in last["hits"]] == list(range(LIMITS.max_k - 3, LIMITS.max_k + 1))


# --- judgements: relevant, not relevant, unjudged -------------------------------------------------------


@pytest.fixture(scope="module")
def reprint(ecbplus_subset: Path, subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[Path, Path, Query]:
    return subset_with_a_reprint(ecbplus_subset, subset_dataset, tmp_path_factory.mktemp("reprint"))


def test_a_passage_nobody_annotated_is_unjudged_not_irrelevant(reprint: tuple[Path, Path, Query]) -> None:
    dataset, index, query = reprint
    engine = SearchEngine.open(index, SearchOptions(bm25=BM25Options(query_format="mention"),
                                                   retrieval=RetrievalOptions("bm25", device="cpu")), dataset)
    with TestClient(create_app(engine)) as reprint_client:
        served = answer(reprint_client.post("/search", json={"qid": query.id, "k": 15}))
        page = answer(reprint_client.post("/search", json={"qid": query.id, "k": 5, "offset": 5}))
    hits = served["hits"]
    assert REPRINT_PASSAGE in [hit["passage_id"] for hit in hits]
    for hit in hits:
        expected = ("relevant" if hit["relevant"] else "unjudged" if hit["passage_id"] == REPRINT_PASSAGE
                    else "not_relevant")
        assert hit["judgement"] == expected, hit["passage_id"]
        assert hit["relevant"] is (expected == "relevant")  # `relevant` stays the qrels' (trec_eval's) answer
    assert {hit["judgement"] for hit in hits} == {"relevant", "not_relevant", "unjudged"}
    assert page["hits"] == hits[5:10]


def test_the_judgement_of_a_hit_follows_the_qrels_then_its_documents_annotation() -> None:
    assert judgement_of(1, annotated_document=False) == "relevant"
    assert judgement_of(2, annotated_document=True) == "relevant"
    assert judgement_of(0, annotated_document=False) == "not_relevant"  # judged so, annotated or not
    assert judgement_of(-2, annotated_document=False) == "not_relevant"
    assert judgement_of(-1, annotated_document=True) == "unjudged"  # trec_eval's mark of an unjudged pair
    assert judgement_of(None, annotated_document=True) == "not_relevant"
    assert judgement_of(None, annotated_document=False) == "unjudged"


def test_the_judge_reads_the_qrels_and_clusters_and_again_when_they_change(tmp_path: Path) -> None:
    (tmp_path / "qrels").mkdir()
    qrels = tmp_path / "qrels" / "test.txt"
    qrels.write_text("q1 0 a-1 1\nq1 0 x-0 0\nq1 0 a-3 -1\n", encoding="utf-8")
    clusters = tmp_path / "clusters.jsonl"
    clusters.write_text(json.dumps({"cluster_id": "c", "split": "test", "type": "event", "mention_ids": ["m1", "m2"],
                                    "passage_ids": ["a-1", "b-0"]}) + "\n", encoding="utf-8")
    documents = {"a": ["a-1", "a-2", "a-3"], "b": ["b-0"], "x": ["x-0", "x-1"]}
    looked_up: list[str] = []

    def document_of(passage_id: str) -> list[str]:
        looked_up.append(passage_id)
        return documents[passage_id.split("-")[0]]

    judge = Judge(tmp_path, document_of)
    ids = ["a-1", "a-2", "a-3", "b-0", "x-0", "x-1"]
    assert judge.judge("q1", "test", ids) == {
        "a-1": "relevant", "a-2": "not_relevant", "a-3": "unjudged", "b-0": "not_relevant", "x-0": "not_relevant",
        "x-1": "unjudged"}
    assert looked_up == ["a-2", "x-1"]  # documents are looked up only for pairs the qrels leave out (b-0 has mentions)
    assert judge.judge("q2", "test", ["a-2", "x-1"]) == {"a-2": "not_relevant", "x-1": "unjudged"}
    qrels.write_text("q1 0 x-1 2\n", encoding="utf-8")
    assert judge.judge("q1", "test", ["x-1", "a-1"]) == {"x-1": "relevant", "a-1": "not_relevant"}
    clusters.unlink()
    with pytest.raises(CorefSearchError, match="clusters.jsonl is gone"):
        judge.judge("q1", "test", ["a-2"])


# --- the OpenAPI schema: the answers and the errors ----------------------------------------------------


def test_openapi_describes_the_search_answer_and_the_error_every_route_returns(client: TestClient,
                                                                              found_query: Query) -> None:
    schema = client.get("/openapi.json").json()
    schemas = schema["components"]["schemas"]

    def ref(response: dict[str, Any]) -> str:
        return str(response["content"]["application/json"]["schema"]["$ref"]).rsplit("/", 1)[-1]

    responses = schema["paths"]["/search"]["post"]["responses"]
    assert ref(responses["200"]) == "SearchResponse"
    assert set(schemas["SearchResponse"]["required"]) == {"query", "retriever", "encoder", "fusion", "reader",
                                                          "rerank_fusion", "hits", "timing"}
    hit = schemas["SearchHit"]["properties"]
    assert {"rank", "score", "passage_id", "text", "matched", "span", "relevant", "gold_mentions",
            "judgement"} <= set(hit)
    assert hit["judgement"]["anyOf"][0]["enum"] == ["relevant", "not_relevant", "unjudged"]
    assert set(schemas["SearchRequest"]["properties"]) >= {"k", "offset", "qid", "context", "start", "end"}

    # Every 4xx and 500 is the app's own {"detail": "one line"}, not FastAPI's list of errors.
    error = schemas["ErrorResponse"]
    assert list(error["properties"]) == error["required"] == ["detail"]
    assert error["properties"]["detail"]["type"] == "string"
    assert {"400", "401", "413", "422", "500"} <= set(responses)
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            for status, response in operation["responses"].items():
                if status != "200":
                    assert ref(response) == "ErrorResponse", (method, path, status)
            if path != "/health":
                assert "422" in operation["responses"] or method == "get" and path == "/info", (method, path)
    assert "HTTPValidationError" not in schemas
    for path, model in (("/passages/{passage_id}", "PassageResponse"), ("/queries", "QueriesResponse"),
                        ("/health", "HealthResponse"), ("/info", "InfoResponse")):
        assert ref(schema["paths"][path]["get"]["responses"]["200"]) == model

    # What the server answers is what the schema says.
    served = client.post("/search", json={"qid": found_query.id, "k": 4})
    SearchResponse.model_validate(served.json(), strict=False)
    for served_hit in served.json()["hits"]:
        assert set(served_hit) <= set(hit)
    refused = client.post("/search", json={"mention": "blaze", "k": "5"})
    assert refused.status_code == 422 and list(refused.json()) == ["detail"]


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
    assert page["total"] == page["matching"] == len(test_queries) and [q["id"] for q in page["queries"]] == [
        q.id for q in test_queries[2:5]]
    # `contains` finds queries by a part of their id or mention, in any case.
    word = test_queries[0].mention
    found = client.get("/queries", params={"contains": word.upper(), "limit": 1000}).json()
    needle = word.casefold()
    expected = [q.id for q in test_queries if needle in q.mention.casefold() or needle in q.id.casefold()]
    assert found["total"] == len(test_queries) and found["matching"] == len(expected) < len(test_queries)
    assert [q["id"] for q in found["queries"]] == expected
    by_id = client.get("/queries", params={"contains": test_queries[3].id}).json()
    assert test_queries[3].id in [q["id"] for q in by_id["queries"]]
    none = client.get("/queries", params={"contains": "no query has this"}).json()
    assert (none["matching"], none["queries"]) == (0, [])
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
     422, "the request body is not valid JSON"),
    ("not an object", {"json": ["blaze"]}, 422, "valid dictionary"),
    ("JSON sent as text", {"content": b'{"mention": "blaze"}', "headers": {"content-type": "text/plain"}}, 422,
     "expected a JSON object as the request body, with Content-Type: application/json (got Content-Type: "
     "text/plain)"),
    ("a form", {"data": {"mention": "blaze"}}, 422,
     "with Content-Type: application/json (got Content-Type: application/x-www-form-urlencoded)"),
    ("no content type", {"content": b'{"mention": "blaze"}'}, 422,
     "with Content-Type: application/json (got no Content-Type)"),
    ("no body", {"headers": {"content-type": "application/json"}}, 422, "the request body is empty"),
    ("unknown field", {"json": {"mention": "blaze", "limit": 3}}, 422, "limit: Extra inputs"),
    ("k not a number", {"json": {"mention": "blaze", "k": "ten"}}, 422, "k: Input should be a valid integer"),
    ("k a string of digits", {"json": {"mention": "blaze", "k": "5"}}, 422,
     "k: Input should be a valid integer, got a string"),
    ("k a boolean", {"json": {"mention": "blaze", "k": True}}, 422,
     "k: Input should be a valid integer, got a boolean"),
    ("k a fraction", {"json": {"mention": "blaze", "k": 5.5}}, 422, "k: Input should be a valid integer, got 5.5"),
    ("mention a number", {"json": {"mention": 7}}, 422, "mention: Input should be a valid string, got 7"),
    ("start a string", {"json": {"context": CONTEXT, "start": "16", "end": 21}}, 422,
     "start: Input should be a valid integer, got a string"),
    ("qid a list", {"json": {"qid": ["q"]}}, 422, "qid: Input should be a valid string, got a list"),
    ("offset negative", {"json": {"mention": "blaze", "offset": -1}}, 422, "offset: must be 0 or more, got -1"),
    ("page past max_k", {"json": {"mention": "blaze", "k": 10, "offset": 45}}, 422,
     "offset + k: 45 + 10 is past rank 50"),
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
