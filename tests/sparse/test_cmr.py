"""The coreferent mention retrieval systems of Sankepally et al. (2018): Rocchio expansion,
field-weighted BM25 over the sentence / title / document fields, and the document query form,
on the ECB+ subset index (topics 36-37) and the news corpus."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Passage, Query
from corefsearch.cli import app
from corefsearch.datasets.build import BuildOptions, build_dataset
from corefsearch.datasets.dataset import Dataset
from corefsearch.datasets.generic import read_generic
from corefsearch.io.trec import read_run, write_run
from corefsearch.search.run_writer import run_rows
from corefsearch.sparse.index import (
    LUCENE_DIR,
    FieldStats,
    build_lucene_index,
    indexed_records,
    load_lucene_manifest,
    passage_contents,
)
from corefsearch.sparse.search import BM25Options, BM25Searcher, parse_fields

java = pytest.mark.java
runner = CliRunner(env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def passages(subset_dataset: Path) -> list[Passage]:
    return list(Dataset(subset_dataset).passages())


@pytest.fixture(scope="module")
def sample_queries(subset_dataset: Path) -> list[Query]:
    """Every 10th test query of the subset (about 40 queries)."""
    return Dataset(subset_dataset).queries("test")[::10]


def _lucene_index(dataset_dir: Path, out: Path, records: list[dict[str, str]], extra_args: list[str],
                  manifest: dict[str, Any]) -> Path:
    """An index laid out like ``corefsearch index`` writes it, from hand-made JsonCollection records."""
    from corefsearch.sparse.java import ensure_java

    ensure_java()
    from pyserini.index.lucene import LuceneIndexer

    index_dir = out / LUCENE_DIR / "index"
    indexer = LuceneIndexer(str(index_dir), threads=2,
                            args=["-index", str(index_dir), "-storePositions", "-storeDocvectors", "-storeRaw",
                                  *extra_args])
    indexer.add_batch_raw([json.dumps(r, ensure_ascii=False) for r in records])
    indexer.close()
    (out / LUCENE_DIR / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def old_index(subset_index: Path, subset_dataset: Path, passages: list[Passage],
              tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The subset indexed as corefsearch did before the fields existed (format 1: the records
    ``{id, contents, title, text}``, no ``-fields``), with a format-1 manifest."""
    manifest = load_lucene_manifest(subset_index)
    old_manifest = {key: value for key, value in manifest.items()
                    if key not in ("fields", "fields_index", "document_field")}
    old_manifest["format_version"] = 1
    records = [{"id": p.id, "contents": passage_contents(p.title, p.text), "title": p.title, "text": p.text}
               for p in passages]
    return _lucene_index(subset_dataset, tmp_path_factory.mktemp("old-index"), records, [], old_manifest)


def _run_bytes(index: Path, queries: list[Query], options: BM25Options, path: Path, k: int = 50) -> bytes:
    searcher = BM25Searcher(index, options)
    write_run(path, run_rows(searcher.search(queries, k), options.tag))
    return path.read_bytes()


def _ranking(searcher: BM25Searcher, queries: list[Query], k: int = 10) -> dict[str, list[str]]:
    return {q.id: [h.passage_id for h in hits] for q, hits in searcher.search(queries, k)}


# --- the index fields ---------------------------------------------------------------------------


def test_document_field_holds_the_other_sentences(news_corpus: Any, tmp_path: Path) -> None:
    build_dataset(read_generic(news_corpus.folder),
                  tmp_path / "ds", BuildOptions(split_ratios=(0, 0, 1)))
    passages = list(Dataset(tmp_path / "ds").passages())
    records = {r["id"]: r for r in indexed_records(passages)}
    flood = [p for p in passages if p.doc_id == "flood-1"]
    assert len(flood) == 4
    for position, passage in enumerate(flood):
        record = records[passage.id]
        assert record["sentence"] == passage.text
        assert record["title"] == "River floods Dayton"
        assert record["contents"] == f"River floods Dayton\n{passage.text}"  # unchanged
        others = [p.text for i, p in enumerate(flood) if i != position]
        assert record["document"] == "\n".join(others)
    # quake-2 has no title: an empty title field, contents = the text alone.
    quake = next(r for r in records.values() if r["id"].startswith("quake-2"))
    assert quake["title"] == "" and quake["contents"] == quake["sentence"]


def test_document_field_keeps_the_nearest_passages_of_a_long_document() -> None:
    texts = [f"sentence{i} " + "x" * 8 for i in range(9)]  # 18 characters each, 19 with the newline
    passages = [Passage(f"d-{i}", "d", "T", text) for i, text in enumerate(texts)]
    stats = FieldStats()
    records = list(indexed_records(passages, max_chars=4 * 19, stats=stats))
    # Passage 4 (the middle): 3, 5, 2, 6 fit, in document order; 1, 7, 0, 8 do not.
    assert records[4]["document"] == "\n".join(texts[i] for i in (2, 3, 5, 6))
    # Passage 0: the nearest four after it.
    assert records[0]["document"] == "\n".join(texts[1:5])
    assert stats.truncated_passages == 9 and stats.truncated_documents == 1
    whole = list(indexed_records(passages, max_chars=10_000))
    assert whole[4]["document"] == "\n".join(t for i, t in enumerate(texts) if i != 4)


def test_passages_of_a_document_must_be_contiguous() -> None:
    passages = [Passage("a-0", "a", "", "one"), Passage("b-0", "b", "", "two"), Passage("a-1", "a", "", "three")]
    with pytest.raises(InputError, match=r"passages.jsonl:3: passage a-1 belongs to document a, whose passages "
                                         r"ended earlier"):
        list(indexed_records(passages, "passages.jsonl"))


@java
def test_plain_bm25_runs_are_byte_identical_to_an_index_without_fields(
        subset_index: Path, old_index: Path, sample_queries: list[Query], tmp_path: Path) -> None:
    assert load_lucene_manifest(subset_index)["format_version"] == 2
    for options in (BM25Options(query_format="mention"), BM25Options(query_format="sentence"),
                    BM25Options(query_format="context", rm3=True), BM25Options(query_format="mention", rocchio=True)):
        new = _run_bytes(subset_index, sample_queries, options, tmp_path / "new.trec")
        old = _run_bytes(old_index, sample_queries, options, tmp_path / "old.trec")
        assert new == old, options.tag
        assert len(new.splitlines()) > 10 * len(sample_queries)
    # The stored passages read back the same.
    for passage_id in ("36_1ecb-0", "37_2ecbplus-3"):
        assert BM25Searcher(subset_index).passage(passage_id) == BM25Searcher(old_index).passage(passage_id)


@java
def test_an_index_without_fields_says_to_rebuild(old_index: Path, subset_dataset: Path, tmp_path: Path) -> None:
    for options, what in ((BM25Options(query_format="mention", fields={"sentence": 1.0, "document": 0.2}),
                           "--fields"),
                          (BM25Options(query_format="document"), "--query-format document")):
        with pytest.raises(InputError) as caught:
            BM25Searcher(old_index, options)
        message = str(caught.value)
        assert what in message and "rebuild it with `corefsearch index" in message and "--overwrite" in message
        assert str(subset_dataset.resolve()) in message
    # The same through the command line: one line, exit 1, no traceback, nothing written.
    out = tmp_path / "run.trec"
    result = runner.invoke(app, ["search", "--index", str(old_index), "--queries",
                                 str(subset_dataset / "queries" / "test.jsonl"), "--out", str(out),
                                 "--query-format", "mention", "--fields", "sentence=1,title=0.5,document=0.2"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and "--overwrite" in result.output
    assert not out.exists()


# --- field-weighted BM25 ------------------------------------------------------------------------


def test_parse_fields() -> None:
    assert parse_fields("sentence=1,title=0.5,document=0.2") == {"sentence": 1.0, "title": 0.5, "document": 0.2}
    assert parse_fields(" sentence = 1 ") == {"sentence": 1.0}
    for bad, message in (("sentence", "FIELD=WEIGHT"), ("sentence=one", "must be a number"),
                         ("sentence=1,sentence=2", "twice"), ("=1", "FIELD=WEIGHT")):
        with pytest.raises(InputError, match=message):
            parse_fields(bad)
    for fields, message in (({"body": 1.0}, "unknown field 'body'"), ({"title": 0.0}, "positive"),
                            ({"title": float("nan")}, "positive"), ({}, "names no field")):
        with pytest.raises(InputError, match=message):
            BM25Options(fields=fields).validate()
    with pytest.raises(InputError, match="--rm3 and --rocchio"):
        BM25Options(rm3=True, rocchio=True).validate()
    with pytest.raises(InputError, match="does not go with --rm3 or --rocchio"):
        BM25Options(rocchio=True, fields={"sentence": 1.0}).validate()
    options = BM25Options(query_format="mention", fields={"sentence": 1.0, "document": 0.1})
    assert options.tag == "bm25-mention-fields_sentence1_document0.1"
    assert options.anserini_args()[-3:] == ["-fields", "sentence=1.0", "document=0.1"]


@java
def test_sentence_field_alone_equals_bm25_over_the_sentences(
        subset_index: Path, subset_dataset: Path, passages: list[Passage], sample_queries: list[Query],
        tmp_path: Path) -> None:
    # A reference index whose contents are the passage texts alone (no title).
    records = [{"id": p.id, "contents": p.text} for p in passages]
    reference = _lucene_index(subset_dataset, tmp_path / "reference", records, [],
                              load_lucene_manifest(subset_index))
    for query_format in ("mention", "sentence"):
        fielded = BM25Searcher(subset_index, BM25Options(query_format=query_format, fields={"sentence": 1.0}))
        plain = BM25Searcher(reference, BM25Options(query_format=query_format))
        got = {q.id: [(h.passage_id, round(h.score, 4)) for h in hits]
               for q, hits in fielded.search(sample_queries, 20)}
        want = {q.id: [(h.passage_id, round(h.score, 4)) for h in hits]
                for q, hits in plain.search(sample_queries, 20)}
        assert got == want
        # The contents field (title + text) ranks otherwise: the fields are not contents in disguise.
        contents = BM25Searcher(subset_index, BM25Options(query_format=query_format))
        assert _ranking(contents, sample_queries) != {qid: [p for p, _ in hits[:10]] for qid, hits in got.items()}


@pytest.fixture
def news_index(news_corpus: Any, tmp_path: Path) -> Path:
    dataset = tmp_path / "news-ds"
    build_dataset(read_generic(news_corpus.folder),
                  dataset, BuildOptions(split_ratios=(0, 0, 1)))
    build_lucene_index(dataset, tmp_path / "news-index", fields=True)
    return tmp_path / "news-index"


@java
def test_title_and_document_weights_change_the_ranking(news_index: Path) -> None:
    def hits(fields: dict[str, float], query: str) -> list[str]:
        searcher = BM25Searcher(news_index, BM25Options(query_format="mention", fields=fields))
        return [h.passage_id for h in searcher.search_string(query, 20)]

    # "quake" is in quake-1's title and in its second sentence; "earthquake" is another term.
    assert hits({"sentence": 1.0}, "quake") == ["quake-1-1"]
    assert hits({"sentence": 1.0, "title": 0.5}, "quake") == ["quake-1-1", "quake-1-0"]
    # "Dayton": in both flood titles, and in the text of flood-1-1 and flood-2-0.
    sentence_only = hits({"sentence": 1.0}, "Dayton")
    assert sorted(sentence_only) == ["flood-1-1", "flood-2-0"]
    with_title = hits({"sentence": 1.0, "title": 0.5}, "Dayton")
    assert sorted(with_title[:2]) == sorted(sentence_only)  # text and title beat title alone
    assert sorted(with_title[2:]) == ["flood-1-0", "flood-1-2", "flood-1-3", "flood-2-1", "flood-2-2"]
    # "levees" is only in flood-1-1: the document field brings the other sentences of flood-1, below it.
    assert hits({"sentence": 1.0}, "levees") == ["flood-1-1"]
    with_document = hits({"sentence": 1.0, "document": 0.2}, "levees")
    assert with_document[0] == "flood-1-1" and sorted(with_document[1:]) == ["flood-1-0", "flood-1-2", "flood-1-3"]


@java
def test_field_weighted_batch_and_single_paths_agree(subset_index: Path, sample_queries: list[Query]) -> None:
    searcher = BM25Searcher(subset_index, BM25Options(query_format="sentence",
                                                      fields={"sentence": 1.0, "title": 0.5, "document": 0.2}))
    strings = searcher.formulate(sample_queries)
    batch = searcher.search_batch(strings, [q.id for q in sample_queries], 10, [q.passage_id for q in sample_queries])
    for query, string in zip(sample_queries, strings, strict=True):
        one = searcher.search_string(string, 10, exclude=query.passage_id)
        assert [h.passage_id for h in one] == [h.passage_id for h in batch[query.id]]
        assert [h.score for h in one] == pytest.approx([h.score for h in batch[query.id]], abs=1e-4)


# --- Rocchio --------------------------------------------------------------------------------------


@java
def test_rocchio_changes_the_ranking_and_is_deterministic(subset_index: Path, sample_queries: list[Query],
                                                          tmp_path: Path) -> None:
    plain = BM25Searcher(subset_index, BM25Options(query_format="mention"))
    rocchio = BM25Options(query_format="mention", rocchio=True)
    assert rocchio.tag == "bm25-mention-rocchio"
    ranked = _ranking(plain, sample_queries)
    expanded = _ranking(BM25Searcher(subset_index, rocchio), sample_queries)
    changed = sum(ranked[qid] != expanded[qid] for qid in ranked)
    assert changed >= len(ranked) // 4
    # Rocchio is not RM3 either.
    rm3 = _ranking(BM25Searcher(subset_index, BM25Options(query_format="mention", rm3=True)), sample_queries)
    assert rm3 != expanded
    # Deterministic: two runs, one with more threads, give the same bytes.
    first = _run_bytes(subset_index, sample_queries, rocchio, tmp_path / "a.trec")
    again = _run_bytes(subset_index, sample_queries, BM25Options(query_format="mention", rocchio=True, threads=1),
                       tmp_path / "b.trec")
    assert first == again
    # The single-query path (SimpleSearcher.set_rocchio, Pyserini's defaults) agrees with the batch one.
    searcher = BM25Searcher(subset_index, rocchio)
    run = read_run(tmp_path / "a.trec")
    for query in sample_queries:
        one = searcher.search_string(query.mention, 10, exclude=query.passage_id)
        batch = sorted(run.get(query.id, {}).items(), key=lambda item: -item[1])[:10]
        assert [h.score for h in one] == pytest.approx([score for _, score in batch], abs=1e-4)


# --- the document query form ----------------------------------------------------------------------


@java
def test_document_query_form_is_the_whole_document(subset_index: Path, passages: list[Passage],
                                                   sample_queries: list[Query]) -> None:
    searcher = BM25Searcher(subset_index, BM25Options(query_format="document"))
    strings = searcher.formulate(sample_queries)
    by_id = {p.id: p for p in passages}
    for query, string in zip(sample_queries, strings, strict=True):
        own = by_id[query.passage_id]
        document = [p for p in passages if p.doc_id == own.doc_id]
        others = "\n".join(p.text for p in document if p.id != own.id)
        assert string == "\n".join(part for part in (own.title, own.text, others) if part)
        assert query.text in string and all(p.text in string for p in document)
    # Queries of one document share their string; the form searches end to end, own passage left out.
    results = list(searcher.search(sample_queries[:5], 10))
    assert all(query.passage_id not in [h.passage_id for h in hits] and hits for query, hits in results)
    # An ad-hoc query has no passage: it is its own context.
    adhoc = Query("adhoc", "", "Lindsay Lohan checked into rehab.", 0, 13, "Lindsay Lohan", "")
    assert searcher.formulate([adhoc]) == ["Lindsay Lohan checked into rehab."]
    lost = Query("q-lost", "no-such-passage", "text", 0, 4, "text", "c")
    with pytest.raises(InputError, match="its passage no-such-passage is not in the index"):
        searcher.formulate([lost])


@java
def test_cli_search_with_rocchio_fields_and_document_form(subset_index: Path, subset_dataset: Path,
                                                           tmp_path: Path) -> None:
    queries = tmp_path / "queries.jsonl"
    lines = (subset_dataset / "queries" / "test.jsonl").read_text(encoding="utf-8").splitlines()[::40]
    queries.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # A copy of the index: the queries file is not inside the dataset, so no dataset check applies.
    index = tmp_path / "index"
    shutil.copytree(subset_index, index)
    for extra, tag in ((["--query-format", "mention", "--rocchio"], "bm25-mention-rocchio"),
                       (["--query-format", "mention", "--fields", "sentence=1,document=0.1"],
                        "bm25-mention-fields_sentence1_document0.1"),
                       (["--query-format", "document"], "bm25-document")):
        out = tmp_path / f"{tag}.trec"
        result = runner.invoke(app, ["search", "--index", str(index), "--queries", str(queries), "--out", str(out),
                                     "--k", "20", *extra])
        assert result.exit_code == 0, result.output
        rows = out.read_text(encoding="utf-8").splitlines()
        assert rows and all(row.split()[-1] == tag for row in rows)
    result = runner.invoke(app, ["search", "--index", str(index), "--queries", str(queries),
                                 "--out", str(tmp_path / "x.trec"), "--rm3", "--rocchio"])
    assert result.exit_code == 1 and "choose one" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["query", "--index", str(index), "--mention", "earthquake", "--fields", "sentence=1",
                                 "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)["hits"]
    assert hits and all("earthquake" in hit["text"].lower() for hit in hits)


@java
def test_index_without_fields_by_default(news_index: Path, tmp_path: Path) -> None:
    manifest = load_lucene_manifest(news_index)
    dataset = Path(manifest["dataset"])
    summary = build_lucene_index(dataset, tmp_path / "plain-index")
    plain_manifest = load_lucene_manifest(summary.path.parent)
    assert "fields" not in plain_manifest and plain_manifest["options"]["fields"] is False
    with pytest.raises(InputError, match="no title field .* rebuild it with `corefsearch index"):
        BM25Searcher(summary.path.parent, BM25Options(fields={"title": 1.0}))
    for query in ("Dayton flood", "quake", "evacuated residents"):
        with_fields = BM25Searcher(news_index, BM25Options()).search_string(query, 10)
        without = BM25Searcher(summary.path.parent, BM25Options()).search_string(query, 10)
        assert [(h.passage_id, h.score) for h in with_fields] == [(h.passage_id, h.score) for h in without]
