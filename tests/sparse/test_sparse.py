"""Lucene BM25 through Pyserini on a real subset of ECB+ (test topics 36-37): the index, batch and
single-query search, query formulations, RM3 and the ad-hoc query."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.schema import Passage, Query
from corefsearch.datasets.build import BuildOptions, build_dataset
from corefsearch.datasets.dataset import Dataset
from corefsearch.datasets.generic import read_generic
from corefsearch.search.options import SearchOptions
from corefsearch.search.pipeline import adhoc_query
from corefsearch.sparse.formulation import formulate
from corefsearch.sparse.index import check_index_matches_dataset, load_lucene_manifest
from corefsearch.sparse.search import BM25Options, BM25Searcher

java = pytest.mark.java

# A news text with a person, places and dates; the mention is the second sentence's event.
FLOOD = ("Torrential rain swept across Ohio on Tuesday. The Great Miami River overflowed its levees in Dayton, "
         "flooding the downtown area. Mayor Nan Whaley said hundreds of residents were evacuated.")


def query_for(text: str, mention: str, occurrence: int = 1) -> Query:
    start = [m.start() for m in re.finditer(re.escape(mention), text)][occurrence - 1]
    return Query("q1", "p1", text, start, start + len(mention), mention, "c1")


@pytest.fixture(scope="module")
def passages(subset_dataset: Path) -> dict[str, Passage]:
    return {p.id: p for p in Dataset(subset_dataset).passages()}


@pytest.fixture(scope="module")
def sample_queries(subset_dataset: Path) -> list[Query]:
    """Every 20th test query of the subset (about 20 queries)."""
    return Dataset(subset_dataset).queries("test")[::20]


# --- query formulation (spaCy only) -----------------------------------------------------------


def test_query_formats() -> None:
    query = query_for(FLOOD, "overflowed")
    strings = {fmt: formulate([query], fmt)[0] for fmt in ("mention", "context", "sentence", "mention+entities")}
    assert strings["mention"] == "overflowed"
    assert strings["context"] == FLOOD
    assert strings["sentence"] == "The Great Miami River overflowed its levees in Dayton, flooding the downtown area."
    with_entities = strings["mention+entities"]
    assert with_entities.startswith("overflowed ")
    assert "Nan Whaley" in with_entities and "Ohio" in with_entities  # PERSON and GPE of the context
    assert with_entities.count("overflowed") == 1
    assert "flooding" not in with_entities and "levees" not in with_entities  # not the words around it
    assert len(set(strings.values())) == 4


def test_mention_entities_names_the_mention_once() -> None:
    text = ("Mayor Nan Whaley said hundreds of residents of Dayton were evacuated. "
            "Nan Whaley thanked the National Guard on Wednesday.")
    for occurrence in (1, 2):
        string = formulate([query_for(text, "Nan Whaley", occurrence)], "mention+entities")[0]
        assert string.startswith("Nan Whaley ")
        assert string.count("Nan Whaley") == 1
        assert "Dayton" in string


def test_sentence_format_of_a_mention_cut_by_a_sentence_boundary() -> None:
    text = "Rain fell. Rivers rose fast. Roads closed."
    query = Query("q", "p", text, text.index("fell"), text.index("rose") + 4, "fell. Rivers rose", "c")
    assert formulate([query], "sentence") == ["Rain fell. Rivers rose fast."]


def test_formats_on_dataset_queries(sample_queries: list[Query]) -> None:
    assert formulate(sample_queries, "mention") == [q.mention for q in sample_queries]
    assert formulate(sample_queries, "context") == [q.text for q in sample_queries]
    for query, string in zip(sample_queries, formulate(sample_queries, "mention+entities"), strict=True):
        assert string.split(" ")[: len(query.mention.split(" "))] == query.mention.split(" ")
    with pytest.raises(InputError, match="--query-format must be one of"):
        formulate(sample_queries, "title")


# --- the index --------------------------------------------------------------------------------


@java
def test_index_manifest_ties_to_the_passages(subset_index: Path, subset_dataset: Path,
                                             passages: dict[str, Passage]) -> None:
    manifest = load_lucene_manifest(subset_index)
    checksum = hashlib.sha256((subset_dataset / "passages.jsonl").read_bytes()).hexdigest()
    assert manifest["passages_sha256"] == checksum
    dataset_manifest = json.loads((subset_dataset / "manifest.json").read_text())
    assert dataset_manifest["checksums"]["passages.jsonl"] == f"sha256:{checksum}"
    assert manifest["passages"] == len(passages) == dataset_manifest["counts"]["passages"]
    assert sorted(p.name for p in subset_index.iterdir()) == ["lucene"]
    # index/: the BM25 index; fields/: the fields of field-weighted BM25 (tests/test_cmr.py).
    assert sorted(p.name for p in (subset_index / "lucene").iterdir()) == ["fields", "index", "manifest.json"]


@java
def test_index_holds_every_passage(subset_index: Path, passages: dict[str, Passage]) -> None:
    searcher = BM25Searcher(subset_index)
    assert searcher.num_passages == len(passages) == 852
    for passage in passages.values():
        stored = searcher.passage(passage.id)
        assert (stored["id"], stored["title"], stored["text"]) == (passage.id, passage.title, passage.text)
    with pytest.raises(InputError, match="not in the index"):
        searcher.passage("no-such-passage")


@java
def test_index_in_small_batches_equals_the_index_in_one(subset_index: Path, subset_dataset: Path,
                                                         sample_queries: list[Query], tmp_path: Path) -> None:
    # Batches are read in a second thread while Anserini indexes the one before: whatever the batch
    # size, every passage arrives once and the searches are those of the index built in one batch.
    from corefsearch.sparse.index import build_lucene_index

    build_lucene_index(subset_dataset, tmp_path / "small", batch_size=7, fields=True)
    small, whole = BM25Searcher(tmp_path / "small"), BM25Searcher(subset_index)
    assert small.num_passages == whole.num_passages == 852
    for query in sample_queries:  # every matching passage (k = all): ties cannot cut the lists differently
        assert ({(h.passage_id, h.score) for h in small.search_one(query, 852)}
                == {(h.passage_id, h.score) for h in whole.search_one(query, 852)})
    fields = BM25Searcher(tmp_path / "small", BM25Options(query_format="document"))
    assert fields.formulate(sample_queries) == BM25Searcher(subset_index, BM25Options(query_format="document")
                                                            ).formulate(sample_queries)


@java
def test_a_bad_passage_stops_the_indexing_and_closes_the_index(tmp_path: Path) -> None:
    from corefsearch.sparse.index import index_passages

    def passages() -> Any:
        for i in range(5):
            yield Passage(f"d-{i}", "d", "", f"Passage number {i} about floods.")
        raise InputError("passages.jsonl:6: not a passage")

    with pytest.raises(InputError, match=r"passages\.jsonl:6: not a passage"):
        index_passages(passages(), tmp_path / "index", batch_size=2)
    # The indexer was closed: the index opens again (Lucene's write lock released) and takes more.
    added = index_passages(iter([Passage("e-0", "e", "", "More floods.")]), tmp_path / "index", append=True)
    assert added == 1


@java
def test_index_matches_only_its_dataset(subset_index: Path, subset_dataset: Path, news_corpus: Any,
                                        tmp_path: Path) -> None:
    check_index_matches_dataset(subset_index, subset_dataset)
    other = tmp_path / "other"
    build_dataset(read_generic(news_corpus.folder), other, BuildOptions())
    with pytest.raises(InputError, match="built from other passages") as err:
        check_index_matches_dataset(subset_index, other)
    assert "corefsearch index" in str(err.value) and "--overwrite" in str(err.value)


@java
def test_missing_index_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(MissingArtefactError, match="corefsearch index"):
        BM25Searcher(tmp_path)


# --- search -----------------------------------------------------------------------------------


@java
def test_search_leaves_out_the_own_passage(subset_index: Path, sample_queries: list[Query]) -> None:
    searcher = BM25Searcher(subset_index, BM25Options(query_format="context"))
    k = 5
    results = dict((q.id, hits) for q, hits in searcher.search(sample_queries, k))
    assert list(results) == [q.id for q in sample_queries]
    own_first = 0
    for query in sample_queries:
        hits = results[query.id]
        assert 1 <= len(hits) <= k
        assert query.passage_id not in [h.passage_id for h in hits]
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        # Without the exclusion, the query's own passage (its whole text) is the best match.
        own_first += searcher.search_string(query.text, 1)[0].passage_id == query.passage_id
    assert own_first >= 0.9 * len(sample_queries)


@java
def test_search_batches_agree(subset_index: Path, sample_queries: list[Query]) -> None:
    searcher = BM25Searcher(subset_index, BM25Options(query_format="mention"))
    queries = sample_queries[:12]
    whole = [(q.id, [(h.passage_id, h.score) for h in hits]) for q, hits in searcher.search(queries, 10)]
    chunked = [(q.id, [(h.passage_id, h.score) for h in hits])
               for q, hits in searcher.search(queries, 10, batch_size=5)]
    assert whole == chunked
    with pytest.raises(InputError, match="--k must be at least 1"):
        list(searcher.search(queries, 0))


@java
@pytest.mark.parametrize("rm3", [False, True])
def test_batch_and_single_query_paths_agree(subset_index: Path, sample_queries: list[Query], rm3: bool) -> None:
    searcher = BM25Searcher(subset_index, BM25Options(query_format="mention", rm3=rm3))
    strings = formulate(sample_queries, "mention")
    batch = searcher.search_batch(strings, [q.id for q in sample_queries], 10,
                                  [q.passage_id for q in sample_queries])
    for query, string in zip(sample_queries, strings, strict=True):
        one = searcher.search_string(string, 10, exclude=query.passage_id)
        assert [h.passage_id for h in one] == [h.passage_id for h in batch[query.id]], string
        assert [h.score for h in one] == pytest.approx([h.score for h in batch[query.id]], abs=1e-4)


@java
def test_rm3_changes_the_ranking(subset_index: Path, sample_queries: list[Query]) -> None:
    plain = BM25Searcher(subset_index, BM25Options(query_format="mention"))
    rm3 = BM25Searcher(subset_index, BM25Options(query_format="mention", rm3=True))
    ranked = {q.id: [h.passage_id for h in hits] for q, hits in plain.search(sample_queries, 10)}
    expanded = {q.id: [h.passage_id for h in hits] for q, hits in rm3.search(sample_queries, 10)}
    assert rm3.options.tag == "bm25-mention-rm3" and plain.options.tag == "bm25-mention"
    assert sum(ranked[qid] != expanded[qid] for qid in ranked) >= 1


@java
def test_bad_search_options(subset_index: Path) -> None:
    with pytest.raises(InputError, match="--query-format"):
        BM25Searcher(subset_index, BM25Options(query_format="keywords"))
    with pytest.raises(InputError, match="--threads"):
        BM25Searcher(subset_index, BM25Options(threads=0))


# --- the ad-hoc query -------------------------------------------------------------------------


def unique_passage_with_mention(passages: dict[str, Passage]) -> Passage:
    """The first passage of >= 15 words, with a mention, whose text no other passage holds."""
    counts: dict[str, int] = {}
    for passage in passages.values():
        counts[passage.text] = counts.get(passage.text, 0) + 1
    return next(p for p in passages.values()
                if p.mentions and len(p.text.split()) >= 15 and counts[p.text] == 1)


@java
@pytest.mark.parametrize("query_format", ["sentence", "context"])
def test_adhoc_query_finds_a_verbatim_sentence(subset_index: Path, passages: dict[str, Passage],
                                               query_format: str) -> None:
    target = unique_passage_with_mention(passages)
    mention = target.text[target.mentions[0].start:target.mentions[0].end]
    context = f"Reports were still coming in on Saturday. {target.text} More details are expected."
    result = adhoc_query(subset_index, SearchOptions(bm25=BM25Options(query_format=query_format), k=5), mention,
                         context)
    assert result.query.mention == mention and context[result.query.start:result.query.end] == mention
    assert 1 <= len(result.hits) <= 5
    top = result.hits[0]
    assert (top.rank, top.passage_id, top.text, top.title) == (1, target.id, target.text, target.title)
    assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
    # Matched spans are words of the hit that the query holds.
    query_words = {w.lower() for w in re.findall(r"\w+", result.query_string)}
    matched = [top.text[start:end] for start, end in top.matched]
    assert matched and {w.lower() for w in matched} <= query_words
    mention_start = target.mentions[0].start
    assert any(start <= mention_start < end for start, end in top.matched)
    for hit in result.hits[1:]:
        for start, end in hit.matched:
            assert re.fullmatch(r"\w+", hit.text[start:end])
    record = result.to_json()
    assert record["hits"][0]["passage_id"] == target.id and record["query"]["bm25_query"] == result.query_string


@java
def test_adhoc_query_mention_alone(subset_index: Path) -> None:
    result = adhoc_query(subset_index, SearchOptions(bm25=BM25Options(query_format="mention"), k=3), "earthquake")
    assert result.query_string == "earthquake" and result.occurrences == 1
    assert len(result.hits) == 3
    for hit in result.hits:
        assert "earthquake" in hit.text.lower() or "earthquake" in hit.title.lower()
