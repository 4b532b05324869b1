"""SearchEngine (corefsearch.search.engine): opened once, it answers as `adhoc_query` and `corefsearch
query --json` do for the same input; start/end offsets equal mention + occurrence; the per-call
retriever, query format and rerank_k equal an engine opened with those settings; passages come
with their document; bad input is one clear InputError; calls from worker threads answer the same.

On the ECB+ subset (test topics 36-37) and its Lucene index (conftest), with the dense index of
a tiny random BERT (tests/search/conftest.py) and a tiny random reader built here."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import frequent_words, make_tiny_bert, saved_reader
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.datasets.dataset import Dataset
from corefsearch.reader.rerank import ReaderOptions
from corefsearch.search.engine import SearchEngine
from corefsearch.search.options import RetrievalOptions, SearchOptions
from corefsearch.search.pipeline import adhoc_query
from corefsearch.sparse.search import BM25Options

java = pytest.mark.java
runner = CliRunner()


@pytest.fixture(scope="module")
def question(subset_dataset: Path) -> tuple[str, str]:
    """A mention and its context: a test query of the subset, as a user would paste it."""
    query = next(q for q in Dataset(subset_dataset).queries("test") if q.mention.isalpha() and len(q.text) > 80)
    return query.mention, query.text


@pytest.fixture(scope="module")
def reader_dir(subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised reader saved as `train reader` saves one."""
    root = tmp_path_factory.mktemp("engine-reader")
    base = make_tiny_bert(root / "bert", frequent_words(subset_dataset), seed=2)
    return saved_reader(base, root / "reader")


@pytest.fixture(scope="module")
def engine(subset_index: Path, subset_dataset: Path) -> SearchEngine:
    return SearchEngine.open(subset_index, SearchOptions(bm25=BM25Options(query_format="mention+entities")),
                             subset_dataset)


@pytest.fixture(scope="module")
def full_engine(both_indexes: Path, reader_dir: Path) -> SearchEngine:  # noqa: F811
    """bm25 (default), hybrid and dense, with a reader re-ranking the top 5."""
    return SearchEngine.open(both_indexes, SearchOptions(
        bm25=BM25Options(query_format="mention+entities"), retrieval=RetrievalOptions(device="cpu"),
        reader=ReaderOptions(reader_dir, rerank_k=5, device="cpu"), retrievers=("bm25", "hybrid", "dense")))


def as_json(result: Any) -> str:
    return json.dumps(result.to_json(), ensure_ascii=False, indent=2) + "\n"


@java
def test_query_equals_adhoc_query_and_the_cli(engine: SearchEngine, subset_index: Path,
                                              question: tuple[str, str]) -> None:
    mention, context = question
    result = engine.query(mention=mention, context=context, k=5)
    assert result.retriever == "bm25" and len(result.hits) == 5 and result.query_string.startswith(mention)
    assert any(hit.matched for hit in result.hits)
    assert result.to_json() == adhoc_query(subset_index, SearchOptions(k=5), mention, context).to_json()
    cli = runner.invoke(app, ["query", "--index", str(subset_index), "--mention", mention, "--context", context,
                              "--k", "5", "--json"])
    assert cli.exit_code == 0, cli.output
    assert cli.stdout == as_json(result)  # byte for byte what `query --json` prints
    # the mention alone, and a second question to the same warm engine
    alone = engine.query(mention="earthquake", k=3)
    assert alone.to_json() == adhoc_query(subset_index, SearchOptions(k=3), "earthquake").to_json()


@java
def test_start_end_offsets_equal_mention_and_occurrence(engine: SearchEngine) -> None:
    context = ("Police said the fire started in the kitchen. Hours later the fire spread to the roof of the "
               "Leeds mill, and firefighters from three towns fought it through the night.")
    second = [m.start() for m in re.finditer("fire", context)][1]
    by_occurrence = engine.query(mention="fire", context=context, occurrence=2, k=5)
    by_offsets = engine.query(context=context, start=second, end=second + 4, k=5)
    assert (by_offsets.query.start, by_offsets.query.end) == (second, second + 4)
    assert by_offsets.to_json() == by_occurrence.to_json()
    # a mouse selection with white space around the word is the word; a mention given with it must match
    loose = engine.query(context=context, start=second - 1, end=second + 5, k=5)
    assert loose.to_json() == by_occurrence.to_json()
    assert engine.query(mention="fire", context=context, start=second, end=second + 4, k=5).to_json() == \
        by_occurrence.to_json()
    first = engine.query(context=context, start=context.index("fire"), end=context.index("fire") + 4, k=5)
    assert first.to_json() == engine.query(mention="fire", context=context, k=5).to_json()
    assert first.query.start != by_offsets.query.start


@java
def test_a_dataset_query_by_id(engine: SearchEngine, subset_index: Path, subset_dataset: Path) -> None:
    query = Dataset(subset_dataset).queries("test")[3]
    result = engine.query(qid=query.id, k=8)
    assert result.split == "test" and query.passage_id not in [hit.passage_id for hit in result.hits]
    assert any(hit.relevant for hit in result.hits)
    assert result.to_json() == adhoc_query(subset_index, SearchOptions(k=8), dataset=subset_dataset,
                                           qid=query.id).to_json()
    # the engine has the dataset open: a pasted mention is answered too
    assert engine.query(mention="earthquake", k=2).split is None


@java
def test_per_call_retriever_query_format_and_rerank_k(full_engine: SearchEngine, both_indexes: Path,  # noqa: F811
                                                      reader_dir: Path, question: tuple[str, str]) -> None:
    mention, context = question
    assert full_engine.retrievers == ["bm25", "hybrid", "dense"]
    cpu = RetrievalOptions(device="cpu")

    def adhoc(**settings: Any) -> dict[str, Any]:
        return adhoc_query(both_indexes, SearchOptions(k=4, **settings), mention, context).to_json()

    def ask(**settings: Any) -> dict[str, Any]:
        return full_engine.query(mention=mention, context=context, k=4, **settings).to_json()

    reader = ReaderOptions(reader_dir, rerank_k=5, device="cpu")
    default = ask()
    assert default["reader"] == str(reader_dir) and all("span" in hit for hit in default["hits"])
    assert default == adhoc(retrieval=cpu, reader=reader)
    assert ask(rerank_k=3) == adhoc(retrieval=cpu, reader=ReaderOptions(reader_dir, rerank_k=3, device="cpu"))
    plain = ask(rerank_k=0)
    assert plain["reader"] is None and all("span" not in hit for hit in plain["hits"])
    assert plain == adhoc(retrieval=cpu)
    assert ask(rerank_k=0, query_format="mention") == adhoc(bm25=BM25Options(query_format="mention"),
                                                            retrieval=cpu)
    assert ask(rerank_k=0, query_format="mention")["query"]["bm25_query"] == mention
    hybrid = ask(retriever="hybrid", rerank_k=0)
    assert hybrid["retriever"] == "hybrid" and hybrid["fusion"] == "rrf"
    assert hybrid == adhoc(retrieval=RetrievalOptions("hybrid", device="cpu"))
    dense = ask(retriever="dense", rerank_k=0)
    assert dense["query"]["bm25_query"] is None and all(hit["matched"] == [] for hit in dense["hits"])
    assert dense == adhoc(retrieval=RetrievalOptions("dense", device="cpu"))
    assert ask(retriever="hybrid") == adhoc(retrieval=RetrievalOptions("hybrid", device="cpu"), reader=reader)


@java
def test_passage_comes_with_its_document_in_order(engine: SearchEngine, subset_dataset: Path,
                                                  dense_only: Path) -> None:  # noqa: F811
    dataset = list(Dataset(subset_dataset).passages())
    target = dataset[40]
    document = [p for p in dataset if p.doc_id == target.doc_id]
    assert len(document) > 1
    dense_engine = SearchEngine.open(dense_only, SearchOptions(retrieval=RetrievalOptions("dense", device="cpu")))
    for engine_here in (engine, dense_engine):
        found = engine_here.passage(target.id)
        assert found["id"] == target.id and found["title"] == target.title and found["text"] == target.text
        assert found["doc_id"] == target.doc_id
        assert found["document"] == [{"id": p.id, "text": p.text} for p in document]
        with pytest.raises(InputError, match="passage no-such-id is not in"):
            engine_here.passage("no-such-id")


@java
def test_bad_input_is_one_clear_input_error(engine: SearchEngine, subset_index: Path) -> None:
    context = "The fire spread to the roof."
    bad: list[tuple[dict[str, Any], str]] = [
        ({"context": context, "start": 20, "end": 40}, r"the selection \[20, 40\) lies outside the context of 28"),
        ({"context": context, "start": -1, "end": 3}, r"lies outside the context"),
        ({"context": context, "start": 4, "end": 4}, r"the selection \[4, 4\) is empty"),
        ({"context": context, "start": 3, "end": 4}, r"holds only white space"),
        ({"context": context, "start": 8, "end": 4}, r"lies outside the context"),
        ({"start": 4, "end": 8}, "give the context too"),
        ({"context": context, "start": 4}, "needs both start and end"),
        ({"context": context, "start": 4, "end": 8, "occurrence": 1}, "not both"),
        ({"mention": "roof", "context": context, "start": 4, "end": 8}, "is not the selected text 'fire'"),
        ({"mention": "smoke", "context": context}, "the mention 'smoke' does not occur in the context"),
        ({"mention": "  "}, "--mention is empty"),
        ({}, "give --mention"),
        ({"mention": "fire", "retriever": "sparse"}, "retriever must be one of bm25, dense, hybrid, got 'sparse'"),
        ({"mention": "fire", "retriever": "dense"}, r"the retriever dense is not open here \(open: bm25\)"),
        ({"mention": "fire", "k": 0}, "--k must be at least 1, got 0"),
        ({"mention": "fire", "rerank_k": 5}, "re-ranking needs a reader"),
        ({"mention": "fire", "rerank_k": -1}, "rerank_k must be a whole number"),
        ({"mention": "fire", "query_format": "keywords"}, "--query-format must be one of"),
        ({"mention": "fire", "qid": "36_1ecb_1"}, "--qid takes the query's mention and context from the dataset"),
        ({"qid": "no-such-query"}, "query 'no-such-query' is not in the dataset"),
    ]
    for arguments, message in bad:
        with pytest.raises(InputError, match=message):
            engine.query(**arguments)
    with pytest.raises(InputError, match="--qid needs the dataset it is a query of"):
        SearchEngine.open(subset_index, SearchOptions(bm25=BM25Options(query_format="mention"))).query(qid="36_1ecb_1")


@java
def test_calls_from_worker_threads_answer_the_same(engine: SearchEngine, question: tuple[str, str]) -> None:
    mention, context = question
    expected = as_json(engine.query(mention=mention, context=context, k=5))
    other = as_json(engine.query(mention="earthquake", k=5))
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(engine.query, mention=mention, context=context, k=5) if i % 2 == 0
                   else pool.submit(engine.query, mention="earthquake", k=5) for i in range(6)]
        answers = [as_json(future.result()) for future in futures]
        passages = list(pool.map(engine.passage, ["36_1ecb-0", "36_1ecb-0"]))
    assert answers == [expected if i % 2 == 0 else other for i in range(6)]
    assert passages[0] == passages[1] == engine.passage("36_1ecb-0")


@java
def test_describe_and_load_seconds(full_engine: SearchEngine, both_indexes: Path, reader_dir: Path) -> None:  # noqa: F811
    described = full_engine.describe()
    for key in ("index", "retrievers", "options", "encoder", "reader", "dataset", "versions"):
        assert key in described
    assert described["index"] == str(both_indexes.resolve())
    assert described["retrievers"] == ["bm25", "hybrid", "dense"]
    assert described["options"]["bm25"]["query_format"] == "mention+entities"
    assert described["encoder"]["faiss"]["type"] == "flat"
    assert described["reader"]["model"] == str(reader_dir.resolve()) and described["reader"]["rerank_k"] == 5
    assert described["dataset"] is None
    assert {"corefsearch", "python", "pyserini", "torch"} <= set(described["versions"])
    assert described["tags"]["hybrid"] == "hybrid-rrf60-bm25-mention_entities-dense-flat"
    json.dumps(described)  # what GET /info returns
    assert {"manifests", "reader", "retrievers", "highlighter", "spacy"} <= set(full_engine.load_seconds)
    assert all(seconds >= 0 for seconds in full_engine.load_seconds.values())


@java
def test_document_format_per_call_needs_the_fields(news_corpus: Any, tmp_path: Path) -> None:
    from corefsearch.datasets.build import BuildOptions, build_dataset
    from corefsearch.datasets.generic import read_generic
    from corefsearch.sparse.index import build_lucene_index

    build_dataset(read_generic(news_corpus.folder), tmp_path / "dataset", BuildOptions(split_ratios=(0, 0, 1)))
    build_lucene_index(tmp_path / "dataset", tmp_path / "index")  # without --fields
    engine = SearchEngine.open(tmp_path / "index", SearchOptions(bm25=BM25Options(query_format="mention")))
    assert engine.query(mention="flood", k=2).hits
    with pytest.raises(InputError, match="has no document field .*which --query-format document needs"):
        engine.query(mention="flood", query_format="document")
