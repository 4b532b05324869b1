"""The one retriever interface (corefsearch.search.retriever): BM25, dense and hybrid opened by
``open_retriever`` answer ``search_one``/``search`` exactly as the searchers did when called
each their own way; manifests are read once per open; passages come back by id; and the moved
names (Hit, re-ranking, highlighting, run writing) keep their old import paths.

On the ECB+ subset (test topics 36-37) and its Lucene index (conftest), with a dense index of
a tiny random BERT (tests/search/conftest.py)."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.schema import Hit, Query
from corefsearch.datasets.dataset import Dataset
from corefsearch.dense.search import DenseSearcher
from corefsearch.fusion import FusionOptions, fuse
from corefsearch.search.options import RetrievalOptions
from corefsearch.search.retriever import IndexManifests, Retriever, open_retriever, open_retrievers
from corefsearch.sparse.search import BM25Options, BM25Searcher

java = pytest.mark.java


@pytest.fixture(scope="module")
def queries(subset_dataset: Path) -> list[Query]:
    return Dataset(subset_dataset).queries("test")


@pytest.fixture(scope="module")
def passages(subset_dataset: Path) -> dict[str, dict[str, str]]:
    return {p.id: {"id": p.id, "title": p.title, "text": p.text} for p in Dataset(subset_dataset).passages()}


# both_indexes and dense_only: tests/search/conftest.py


def pairs(hits: list[Hit]) -> list[tuple[str, float]]:
    return [(h.passage_id, h.score) for h in hits]


@java
def test_bm25_through_the_interface_answers_as_before(subset_index: Path, queries: list[Query],
                                                      passages: dict[str, dict[str, str]]) -> None:
    options = BM25Options(query_format="mention+entities")
    retriever = open_retriever(subset_index, options)
    assert isinstance(retriever, BM25Searcher) and isinstance(retriever, Retriever)
    assert retriever.name == "bm25" and retriever.tag == "bm25-mention_entities"
    assert retriever.describe() == {"retriever": "bm25", "options": asdict(options)}
    plain = BM25Searcher(subset_index, BM25Options(query_format="mention+entities"))
    sample = queries[:8]
    strings = plain.formulate(sample)
    batch = {query.id: hits for query, hits in retriever.search(sample, 10)}
    for query, string in zip(sample, strings, strict=True):
        before = plain.search_string(string, 10, exclude=query.passage_id)  # the old call: a string and its exclusion
        one = retriever.search_one(query, 10)
        assert pairs(one) == pairs(before) and len(one) == 10
        assert query.passage_id not in [h.passage_id for h in one]
        # the batch path (Anserini's SearchCollection) ranks the same passages
        assert [h.passage_id for h in batch[query.id]] == [h.passage_id for h in one]
        assert [h.score for h in batch[query.id]] == pytest.approx([h.score for h in one], abs=1e-4)
        # a query string given by the caller is searched as it is
        assert pairs(retriever.search_one(query, 10, query_string=query.mention)) == pairs(
            plain.search_string(query.mention, 10, exclude=query.passage_id))
    some = sample[0].passage_id
    assert retriever.passage(some) == passages[some]
    with pytest.raises(InputError, match="passage no-such-passage is not in the index"):
        retriever.passage("no-such-passage")


@java
def test_per_call_query_format_formulates_as_that_format(subset_index: Path, queries: list[Query]) -> None:
    retriever = open_retriever(subset_index, BM25Options(query_format="mention+entities"))
    sentence = BM25Searcher(subset_index, BM25Options(query_format="sentence"))
    assert retriever.formulate(queries[:5], "sentence") == sentence.formulate(queries[:5])  # type: ignore[attr-defined]
    assert retriever.formulate(queries[:5], "mention") == [q.mention for q in queries[:5]]  # type: ignore[attr-defined]


def test_missing_indexes_say_what_to_build(tmp_path: Path, subset_index: Path) -> None:
    with pytest.raises(MissingArtefactError, match="no Lucene index at .*corefsearch index DATASET --out"):
        open_retriever(tmp_path)
    with pytest.raises(MissingArtefactError, match="no dense index at .*--dense --encoder"):
        open_retriever(tmp_path, retrieval=RetrievalOptions("dense"))
    with pytest.raises(MissingArtefactError, match="--retriever hybrid needs a Lucene and a dense index .*no dense"):
        open_retriever(subset_index, retrieval=RetrievalOptions("hybrid"))
    with pytest.raises(InputError, match="--retriever must be one of bm25, dense, hybrid, got 'sparse'"):
        open_retriever(subset_index, retrieval=RetrievalOptions("sparse"))


@java
def test_manifests_are_read_once_per_open(both_indexes: Path, queries: list[Query],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import corefsearch.dense.search as dense_search
    import corefsearch.dense.store as dense_store
    import corefsearch.search.backends.dense as dense_backend
    import corefsearch.search.backends.lucene as lucene_backend
    import corefsearch.sparse.index as sparse_index
    import corefsearch.sparse.search as sparse_search

    reads = {"lucene": 0, "dense": 0}

    def counting(kind: str, load):  # type: ignore[no-untyped-def]
        def wrapper(index: Path):  # type: ignore[no-untyped-def]
            reads[kind] += 1
            return load(index)
        return wrapper

    lucene, dense = counting("lucene", sparse_index.load_lucene_manifest), counting("dense",
                                                                                    dense_store.load_dense_manifest)
    for module in (sparse_index, sparse_search, lucene_backend):
        monkeypatch.setattr(module, "load_lucene_manifest", lucene)
    for module in (dense_store, dense_search, dense_backend):
        monkeypatch.setattr(module, "load_dense_manifest", dense)
    retriever = open_retriever(both_indexes, BM25Options(query_format="mention"),
                               RetrievalOptions("hybrid", device="cpu"))
    retriever.search_one(queries[0], 5)
    list(retriever.search(queries[:3], 5))
    retriever.passage(queries[0].passage_id)
    retriever.describe()
    assert reads == {"lucene": 1, "dense": 1}


@java
def test_dense_through_the_interface_answers_as_before(both_indexes: Path, dense_only: Path, queries: list[Query],
                                                       passages: dict[str, dict[str, str]]) -> None:
    retriever = open_retriever(both_indexes, retrieval=RetrievalOptions("dense", device="cpu"))
    plain = DenseSearcher(both_indexes, device="cpu")
    assert isinstance(retriever, DenseSearcher) and isinstance(retriever, Retriever)
    assert retriever.name == "dense" and retriever.tag == "dense-flat"
    described = retriever.describe()
    assert described["retriever"] == "dense" and described["options"] is None
    assert described["dense"]["faiss"]["type"] == "flat" and described["dense"]["passages_sha256"]
    sample = queries[:8]
    batch = {query.id: hits for query, hits in retriever.search(sample, 10)}
    for query in sample:
        one = retriever.search_one(query, 10)
        assert pairs(one) == pairs(plain.search_one(query, 10))
        assert query.passage_id not in [h.passage_id for h in one]
        assert [h.passage_id for h in batch[query.id]] == [h.passage_id for h in one]
    # The texts: from the Lucene index beside it, or from the dataset's passages file without one.
    alone = open_retriever(dense_only, retrieval=RetrievalOptions("dense", device="cpu"))
    for passage_id in [h.passage_id for h in retriever.search_one(sample[0], 5)]:
        assert retriever.passage(passage_id) == alone.passage(passage_id) == passages[passage_id]
    with pytest.raises(InputError, match="passage nowhere-7 is not in the index"):
        alone.passage("nowhere-7")


def test_dense_passages_file_changed_or_gone(dense_only: Path, subset_dataset: Path, tmp_path: Path) -> None:
    """The passages file the dense index names must be the one it was built from."""
    copy = tmp_path / "dataset"
    shutil.copytree(subset_dataset, copy)
    index = tmp_path / "index"
    shutil.copytree(dense_only / "dense", index / "dense")
    manifest_path = index / "dense" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["dataset"] = str(copy)
    manifest_path.write_text(json.dumps(manifest))
    retriever = open_retriever(index, retrieval=RetrievalOptions("dense", device="cpu"))
    first = next(iter(Dataset(copy).passages()))
    assert retriever.passage(first.id)["text"] == first.text
    with (copy / "passages.jsonl").open("a") as handle:
        handle.write(json.dumps({"id": "extra-0", "doc_id": "extra", "title": "", "text": "Added later."}) + "\n")
    with pytest.raises(InputError, match="passages.jsonl changed since the dense index was built"):
        retriever.passage(first.id)
    (copy / "passages.jsonl").unlink()
    with pytest.raises(MissingArtefactError, match="stores no passage texts and its dataset's .* is gone"):
        retriever.passage(first.id)


@java
def test_hybrid_through_the_interface_answers_as_before(both_indexes: Path, queries: list[Query]) -> None:
    options = BM25Options(query_format="mention")
    fusion = FusionOptions("rrf")
    retriever = open_retriever(both_indexes, options, RetrievalOptions("hybrid", device="cpu", fusion=fusion))
    assert isinstance(retriever, Retriever) and retriever.name == "hybrid"
    assert retriever.tag == "hybrid-rrf60-bm25-mention-dense-flat"
    described = retriever.describe()
    assert list(described) == ["retriever", "options", "dense", "fusion"]
    assert described["options"] == asdict(options) and described["fusion"] == fusion.to_json()
    bm25 = BM25Searcher(both_indexes, BM25Options(query_format="mention"))
    dense = DenseSearcher(both_indexes, device="cpu")
    sample = queries[:6]
    batch = {query.id: hits for query, hits in retriever.search(sample, 10)}
    for query in sample:
        # the old hybrid ad-hoc path: BM25 of the formulated string and dense, each to depth k, fused
        expected = fuse({query.id: dense.search_one(query, 10)},
                        {query.id: bm25.search_string(query.mention, 10, exclude=query.passage_id)}, 10,
                        fusion)[query.id]
        one = retriever.search_one(query, 10)
        assert pairs(one) == pairs(expected)
        assert [h.passage_id for h in batch[query.id]] == [h.passage_id for h in one]
    assert retriever.passage(sample[0].passage_id) == bm25.passage(sample[0].passage_id)


@java
def test_open_retrievers_share_their_searchers(both_indexes: Path) -> None:
    opened = open_retrievers(both_indexes, BM25Options(query_format="mention"), RetrievalOptions(device="cpu"),
                             ["bm25", "hybrid", "dense"])
    assert list(opened) == ["bm25", "hybrid", "dense"]
    hybrid = opened["hybrid"]
    assert hybrid.bm25 is opened["bm25"] and hybrid.dense is opened["dense"]  # type: ignore[attr-defined]
    # the dense side reads its texts through the BM25 searcher already open
    assert opened["dense"].passages is opened["bm25"]  # type: ignore[attr-defined]


def test_index_manifests_check_the_dataset(both_indexes: Path, subset_dataset: Path, tmp_path: Path) -> None:
    manifests = IndexManifests.load(both_indexes, ["hybrid"])
    assert manifests.get("lucene") is not None and manifests.get("dense") is not None
    manifests.check_dataset(subset_dataset)
    other = tmp_path / "other"
    shutil.copytree(subset_dataset, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["checksums"]["passages.jsonl"] = "sha256:" + "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="the index .* was built from other passages than the dataset"):
        manifests.check_dataset(other)
    with pytest.raises(InputError, match="the dense index .* was built from other passages .*--dense --encoder"):
        IndexManifests.load(both_indexes, ["dense"]).check_dataset(other)


def test_span_record_is_the_spans_file_line(tmp_path: Path) -> None:
    from corefsearch.evaluate.spans import read_spans
    from corefsearch.reader.read import ReaderHit
    from corefsearch.search.run_writer import RunWriter

    hit = ReaderHit("p-3", 2.5, 4, 9, "blaze")
    assert hit.to_json("q1") == {"qid": "q1", "passage_id": "p-3", "start": 4, "end": 9, "text": "blaze",
                                 "score": 2.5}
    writer = RunWriter(tmp_path / "run.trec")
    assert writer.spans_path == tmp_path / "run.trec.spans.jsonl"
    assert writer.write_spans([hit.span_record("q1"), ReaderHit("p-4", 1.0, 0, 4, "fire").span_record("q1")]) == 2
    read = read_spans(writer.spans_path)
    assert [(s.qid, s.passage_id, s.start, s.end, s.text, s.score) for s in read] == [
        ("q1", "p-3", 4, 9, "blaze", 2.5), ("q1", "p-4", 0, 4, "fire", 1.0)]
    query = Query("q1", "p-1", "The blaze.", 4, 9, "blaze", "c")
    assert writer.write_run([(query, [Hit("p-3", 2.0), Hit("p-4", 1.0)])], "tag") == 2
    assert writer.out.read_text() == "q1 Q0 p-3 1 2.000000 tag\nq1 Q0 p-4 2 1.000000 tag\n"
    writer.write_metadata({"k": 2})
    meta = json.loads(writer.metadata_path.read_text())
    assert meta["kind"] == "corefsearch-run" and meta["k"] == 2 and writer.metadata_path.name == "run.trec.meta.json"
