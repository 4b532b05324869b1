"""`corefsearch add`: growing a dataset and its indexes without a rebuild.

The key check: build from corpus A, add corpus B, search → the same run (same passages, same
scores to 1e-5) as a fresh build of A+B, for BM25 (plain and field-weighted) and for a flat
dense index with a tiny random encoder; the dataset files equal the fresh build's. Also: the
split rule when clusters are split by a seeded shuffle, HNSW and IVF-PQ additions, an
interrupted `add` leaving everything as it was, and the one-line errors."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import NEWS_DOCUMENTS, make_tiny_bert, news_mention_records
from typer.testing import CliRunner

from corefsearch.base.artefacts import DENSE_INDEX
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.cli import app
from corefsearch.datasets.build import BuildOptions, build_dataset, new_cluster_split
from corefsearch.datasets.dataset import Dataset
from corefsearch.datasets.generic import read_generic
from corefsearch.io.read import read_jsonl
from corefsearch.io.trec import read_qrels, read_run
from corefsearch.io.write import sha256_file
from corefsearch.search import add as add_module
from corefsearch.search.add import add_documents
from corefsearch.search.backends import AppendOptions
from corefsearch.search.backends.dense import DenseBackend

java = pytest.mark.java
# The dataset-only tests add without --index on purpose (test_add_command_prints_summary checks the warning).
quiet = pytest.mark.filterwarnings("ignore:no --index given", "ignore:split .* has no")
runner = CliRunner(env={"COLUMNS": "250"})

# Corpus B: one more quake story (a new mention of ca-quake and the new cluster "aftershocks"),
# a flood follow-up (dayton-flood gains a passage; "inspection" is a new singleton cluster), and a
# document without mentions.
EXTRA_DOCUMENTS: list[dict[str, Any]] = [
    {"doc_id": "flood-3", "title": "Levee repairs",
     "text": "Engineers inspected the levees in Dayton on Saturday. The flooding damaged three pumping stations "
             "near the river."},
    {"doc_id": "weather-1", "title": "Forecast",
     "text": "Dry weather is expected across Ohio next week. Temperatures will rise to seasonal levels."},
]
EXTRA_MENTIONS = [("inspected", "flood-3", "inspected", "inspection"),
                  ("flooding-3", "flood-3", "flooding", "dayton-flood")]
A_DOCS = ("flood-1", "flood-2", "quake-1")


def write_corpus(folder: Path, documents: list[dict[str, Any]], mentions: list[dict[str, Any]] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents), encoding="utf-8")
    if mentions is not None:
        (folder / "mentions.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mentions), encoding="utf-8")
    return folder


def all_mentions() -> list[dict[str, Any]]:
    records = news_mention_records()
    texts = {d["doc_id"]: d["text"] for d in EXTRA_DOCUMENTS}
    for mention_id, doc_id, phrase, cluster in EXTRA_MENTIONS:
        start = texts[doc_id].index(phrase)
        records.append({"mention_id": mention_id, "doc_id": doc_id, "start": start, "end": start + len(phrase),
                        "cluster_id": cluster, "type": "event"})
    return records


def corpora(root: Path, split: bool = False) -> tuple[Path, Path, Path]:
    """Corpus A (three news stories), B (the fourth, and EXTRA_DOCUMENTS) and A+B (in that order)."""
    documents = [dict(d) for d in NEWS_DOCUMENTS + EXTRA_DOCUMENTS]
    if split:  # each document its own split (split by corpus)
        for d in documents:
            d["split"] = "dev" if d["doc_id"].startswith("quake") else "test"
    mentions = all_mentions()
    in_a = [d for d in documents if d["doc_id"] in A_DOCS]
    in_b = [d for d in documents if d["doc_id"] not in A_DOCS]
    return (write_corpus(root / "A", in_a, [m for m in mentions if m["doc_id"] in A_DOCS]),
            write_corpus(root / "B", in_b, [m for m in mentions if m["doc_id"] not in A_DOCS]),
            write_corpus(root / "AB", in_a + in_b, mentions))


def build(corpus: Path, out: Path, ratios: tuple[float, float, float] = (0.0, 0.0, 1.0),
          split_by: str = "clusters", passage: str = "sentence") -> Path:
    source = {"format": "generic", "input": str(corpus), "mention_type": "all", "split_by": split_by,
              "sentences": "spacy"}
    build_dataset(read_generic(corpus, split_by=split_by, passage="document" if passage == "document" else "sentence"),
                  out, BuildOptions(passage=passage, split_ratios=ratios, source=source))
    return out


def dataset_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def hidden_leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def assert_same_run(got: Path, expected: Path) -> None:
    a, b = read_run(got), read_run(expected)
    assert a.keys() == b.keys() and a
    for qid in a:
        assert a[qid].keys() == b[qid].keys(), qid
        for pid, score in a[qid].items():
            assert score == pytest.approx(b[qid][pid], abs=1e-5), (qid, pid)
        # the same order too (scores tied within 1e-5 may swap)
        order_a = sorted(a[qid], key=lambda p: (-round(a[qid][p], 4), p))
        order_b = sorted(b[qid], key=lambda p: (-round(b[qid][p], 4), p))
        assert order_a == order_b


# --- the dataset ----------------------------------------------------------------------------------


@quiet
def test_add_dataset_equals_fresh_build(tmp_path: Path) -> None:
    a, b, ab = corpora(tmp_path)
    grown = build(a, tmp_path / "grown")
    before = dataset_files(grown)
    summary = add_documents(grown, b)
    fresh = build(ab, tmp_path / "fresh")

    got, expected = dataset_files(grown), dataset_files(fresh)
    assert got.keys() == expected.keys()
    for name in got:
        if name != "manifest.json":
            assert got[name] == expected[name], name
    manifest, fresh_manifest = Dataset(grown).manifest, Dataset(fresh).manifest
    assert manifest["counts"] == fresh_manifest["counts"]
    assert manifest["checksums"] == fresh_manifest["checksums"]
    assert manifest["checksums"]["passages.jsonl"] == "sha256:" + sha256_file(grown / "passages.jsonl")
    assert manifest["additions"][0]["documents"] == 3 and manifest["additions"][0]["passages"] == summary.passages
    # The old passages are a prefix of the new file, untouched.
    assert got["passages.jsonl"].startswith(before["passages.jsonl"])
    assert summary.documents == 3 and summary.passages == 6 and summary.mentions == 5
    # ca-quake (3 queries) and dayton-flood (3) gain a relevant passage; earthquake-2 and flooding-3 are new
    # queries; aftershocks (both in one sentence) and inspection (a singleton) make none.
    assert (summary.new_queries, summary.changed_queries, summary.new_clusters) == (2, 5, 2)
    old_qrels, new_qrels = read_qrels(_qrels_of(before)), read_qrels(grown / "qrels" / "test.txt")
    assert old_qrels["evacuated"] == new_qrels["evacuated"]  # a cluster without new mentions: unchanged


def _qrels_of(files: dict[str, bytes]) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "qrels.txt"
    path.write_bytes(files["qrels/test.txt"])
    return path


@quiet
def test_add_split_by_clusters_keeps_old_splits(tmp_path: Path) -> None:
    """A fresh build would shuffle every cluster again; add keeps the old clusters' splits, gives the new
    ones the seeded hash rule, and its queries and qrels, all splits together, equal the fresh build's."""
    a, b, ab = corpora(tmp_path)
    ratios = (0.5, 0.25, 0.25)
    grown = build(a, tmp_path / "grown", ratios)
    old_clusters = {r["cluster_id"]: r["split"] for _, r in read_jsonl(grown / "clusters.jsonl")}
    old_queries = {split: (grown / "queries" / f"{split}.jsonl").read_text() for split in ("train", "dev", "test")}
    add_documents(grown, b)
    fresh = build(ab, tmp_path / "fresh", ratios)

    clusters = {r["cluster_id"]: r["split"] for _, r in read_jsonl(grown / "clusters.jsonl")}
    options = BuildOptions(split_ratios=ratios)
    for cid, split in clusters.items():
        assert split == old_clusters.get(cid, new_cluster_split(cid, options)), cid
    assert clusters.keys() - old_clusters.keys() == {"aftershocks", "inspection"}

    def union(root: Path) -> tuple[dict[str, Any], dict[str, dict[str, int]], dict[str, str]]:
        queries, qrels, where = {}, {}, {}
        for split in ("train", "dev", "test"):
            for _, record in read_jsonl(root / "queries" / f"{split}.jsonl"):
                queries[record["id"]] = record
                where[record["id"]] = split
            qrels.update(read_qrels(root / "qrels" / f"{split}.txt"))
        return queries, qrels, where

    queries, qrels, where = union(grown)
    fresh_queries, fresh_qrels, _ = union(fresh)
    assert queries == fresh_queries and qrels == fresh_qrels
    assert all(where[qid] == clusters[q["cluster_id"]] for qid, q in queries.items())
    # Queries of a cluster with no new mention are the same lines as before (evacuation's).
    for split, text in old_queries.items():
        for line in text.splitlines():
            if json.loads(line)["cluster_id"] == "evacuation":
                assert line in (grown / "queries" / f"{split}.jsonl").read_text().splitlines()


@quiet
def test_add_split_by_corpus_equals_fresh_build_per_split(tmp_path: Path) -> None:
    a, b, ab = corpora(tmp_path / "c", split=True)
    grown = build(a, tmp_path / "grown", split_by="corpus")
    add_documents(grown, b)
    fresh = build(ab, tmp_path / "fresh", split_by="corpus")
    got, expected = dataset_files(grown), dataset_files(fresh)
    for split in ("train", "dev", "test"):
        for name in (f"queries/{split}.jsonl", f"qrels/{split}.txt"):
            assert got[name] == expected[name], name
    assert got["clusters.jsonl"] == expected["clusters.jsonl"]
    assert b"earthquake-2" in got["queries/dev.jsonl"]


@quiet
def test_add_without_mentions_and_in_document_passages(tmp_path: Path) -> None:
    a, _, _ = corpora(tmp_path)
    grown = build(a, tmp_path / "grown", passage="document")
    before = dataset_files(grown)
    plain = write_corpus(tmp_path / "plain", EXTRA_DOCUMENTS, None)  # no mentions.jsonl
    summary = add_documents(grown, plain)
    after = dataset_files(grown)
    assert summary.passages == 2 and summary.mentions == 0 and summary.new_queries == 0
    for name in before:
        if name.startswith(("queries/", "qrels/")) or name == "clusters.jsonl":
            assert after[name] == before[name], name
    lines = after["passages.jsonl"].decode().splitlines()
    assert [json.loads(line)["id"] for line in lines[-2:]] == ["flood-3-0", "weather-1-0"]
    assert Dataset(grown).manifest["counts"]["passages"] == len(lines)


@quiet
def test_add_errors(tmp_path: Path) -> None:
    a, b, _ = corpora(tmp_path)
    grown = build(a, tmp_path / "grown")
    before = tree_digest(grown)
    again = write_corpus(tmp_path / "again", [NEWS_DOCUMENTS[1]], None)
    with pytest.raises(InputError, match=r"document flood-2 is already in the dataset") as error:
        add_documents(grown, again)
    assert "\n" not in str(error.value)
    result = runner.invoke(app, ["add", str(grown), "--corpus", str(again)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "flood-2 is already in the dataset" in result.output
    with pytest.raises(MissingArtefactError, match="nowhere: no such file or folder"):
        add_documents(grown, tmp_path / "nowhere")
    with pytest.raises(MissingArtefactError, match="holds no Lucene or dense index"):
        add_documents(grown, b, indexes=[tmp_path / "no-index"])
    with pytest.raises(InputError, match="DATASET .* contains the input --corpus"):
        add_documents(grown, grown / "queries")
    inside = grown / "index" / "dense"  # an index inside the dataset would be lost when the dataset is replaced
    inside.mkdir(parents=True)
    (inside / "manifest.json").write_text(json.dumps({"kind": "corefsearch-dense-index",
                                                      "passages_sha256": sha256_file(grown / "passages.jsonl"),
                                                      "encoder": {"reference": "x"}}))
    with pytest.raises(InputError, match="--index .* lies inside the input DATASET"):
        add_documents(grown, b, indexes=[grown / "index"], encoder="/nonexistent-model")
    shutil.rmtree(grown / "index")
    # A mention id the dataset already has.
    clash = write_corpus(tmp_path / "clash", [EXTRA_DOCUMENTS[1]],
                         [{"mention_id": "flooding", "doc_id": "weather-1", "start": 0, "end": 3,
                           "cluster_id": "x"}])
    with pytest.raises(InputError, match="mention id flooding occurs twice"):
        add_documents(grown, clash)
    assert tree_digest(grown) == before and hidden_leftovers(grown.parent) == []
    windows = tmp_path / "windows"
    build_dataset(read_generic(a), windows, BuildOptions(passage="window", split_ratios=(0, 0, 1)))
    with pytest.raises(InputError, match="--passage window"):
        add_documents(windows, b)


@pytest.mark.filterwarnings("ignore:no --index given")
def test_add_warning_names_the_dataset(tmp_path: Path) -> None:
    """A dataset still without queries after the addition: the warning names it, not the new documents' folder."""
    lone = [dict(NEWS_DOCUMENTS[0])]
    start = lone[0]["text"].index(" ")
    first = write_corpus(tmp_path / "first", lone, [{"mention_id": "m1", "doc_id": lone[0]["doc_id"], "start": 0,
                                                     "end": start, "cluster_id": "c1", "type": "event"}])
    with pytest.warns(UserWarning, match="the dataset has no queries"):
        grown = build(first, tmp_path / "grown")
    more = write_corpus(tmp_path / "more", [EXTRA_DOCUMENTS[1]], None)
    with pytest.warns(UserWarning, match="the dataset has no queries") as caught:
        add_documents(grown, more)
    [message] = [str(w.message) for w in caught if "has no queries" in str(w.message)]
    assert message.startswith(f"{grown}: ") and str(more) not in message


@pytest.mark.filterwarnings("always:no --index given")
def test_add_command_prints_summary(tmp_path: Path) -> None:
    a, b, _ = corpora(tmp_path)
    grown = build(a, tmp_path / "grown")
    result = runner.invoke(app, ["add", str(grown), "--corpus", str(b)])
    assert result.exit_code == 0, result.output
    assert "Added 3 documents (6 passages, 5 mentions)" in result.output
    assert "warning: no --index given" in result.stderr


# --- indexes ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def news_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import re

    words = sorted({w for d in NEWS_DOCUMENTS + EXTRA_DOCUMENTS
                    for w in re.findall(r"[a-z0-9]+", (d.get("title", "") + " " + d["text"]).lower())})
    return make_tiny_bert(tmp_path_factory.mktemp("news-bert"), words, seed=0)


def index_all(dataset: Path, out: Path, model: Path, faiss_type: str = "flat") -> Path:
    from corefsearch.dense.indexing import build_dense_index
    from corefsearch.sparse.index import build_lucene_index

    build_lucene_index(dataset, out, fields=True, threads=1)
    build_dense_index(dataset, out, str(model), faiss_type=faiss_type, device="cpu")
    return out


def search_runs(index: Path, dataset: Path, out: Path) -> dict[str, Path]:
    from corefsearch.fusion import FusionOptions
    from corefsearch.search.options import RetrievalOptions, SearchOptions
    from corefsearch.search.pipeline import search_to_run
    from corefsearch.sparse.search import BM25Options

    out.mkdir(parents=True, exist_ok=True)
    queries = dataset / "queries" / "test.jsonl"
    runs = {"bm25": out / "bm25.txt", "fields": out / "fields.txt", "dense": out / "dense.txt"}
    search_to_run(index, queries, runs["bm25"],
                  SearchOptions(k=50, bm25=BM25Options(query_format="sentence", threads=1)))
    search_to_run(index, queries, runs["fields"],
                  SearchOptions(k=50, bm25=BM25Options(query_format="sentence", threads=1,
                                                       fields={"sentence": 1.0, "title": 0.5, "document": 0.2})))
    search_to_run(index, queries, runs["dense"],
                  SearchOptions(k=50, retrieval=RetrievalOptions("dense", None, "cpu", FusionOptions("rrf", 0.5))))
    return runs


@java
def test_add_search_equals_fresh_build(tmp_path: Path, news_model: Path) -> None:
    """BM25 (plain and fields) and dense flat after add = a fresh build of A+B; Lucene's statistics too."""
    from corefsearch.sparse.java import ensure_java

    a, b, ab = corpora(tmp_path)
    grown = build(a, tmp_path / "grown")
    grown_index = index_all(grown, tmp_path / "grown-index", news_model)
    summary = add_documents(grown, b, indexes=[grown_index], device="cpu")
    assert sorted(summary.indexes) == sorted([f"{grown_index / 'dense'} (+6)", f"{grown_index / 'lucene'} (+6)"])
    fresh = build(ab, tmp_path / "fresh")
    fresh_index = index_all(fresh, tmp_path / "fresh-index", news_model)

    got, expected = search_runs(grown_index, grown, tmp_path / "runs-grown"), search_runs(
        fresh_index, fresh, tmp_path / "runs-fresh")
    for name in got:
        assert_same_run(got[name], expected[name])
    # The added passages are found: a query of the new cluster member retrieves the new flood passage.
    assert "flood-3-1" in read_run(got["bm25"])["flooding"]

    ensure_java()
    from pyserini.index.lucene import LuceneIndexReader

    # The statistics BM25 reads: documents, total terms, and each term's document and collection frequency.
    # (Pyserini's `unique_terms` reads -1 on an index of several segments, as an appended one is: left out.)
    for sub in ("index", "fields"):
        grown_reader = LuceneIndexReader(str(grown_index / "lucene" / sub))
        fresh_reader = LuceneIndexReader(str(fresh_index / "lucene" / sub))
        grown_stats, fresh_stats = grown_reader.stats(), fresh_reader.stats()
        grown_stats.pop("unique_terms")
        fresh_stats.pop("unique_terms")
        assert grown_stats == fresh_stats and grown_stats["documents"] == 15
        terms = [(term.term, term.df, term.cf) for term in fresh_reader.terms()]
        assert len(terms) > 50
        for term, df, cf in terms:
            assert grown_reader.get_term_counts(term, analyzer=None) == (df, cf), term
    for kind in ("lucene", "dense"):
        manifest = json.loads((grown_index / kind / "manifest.json").read_text())
        assert manifest["passages"] == 15
        assert manifest["passages_sha256"] == sha256_file(grown / "passages.jsonl")
    ids = (grown_index / "dense" / "ids.txt").read_text().splitlines()
    assert ids == (fresh_index / "dense" / "ids.txt").read_text().splitlines()
    assert (grown_index / "dense" / "docid").read_text() == (grown_index / "dense" / "ids.txt").read_text()
    assert hidden_leftovers(grown_index) == [] and hidden_leftovers(grown.parent) == []


@java
@pytest.mark.parametrize("failing", ["dense", "switch"])
def test_interrupted_add_leaves_previous_state(tmp_path: Path, news_model: Path, monkeypatch: pytest.MonkeyPatch,
                                               failing: str) -> None:
    a, b, _ = corpora(tmp_path)
    dataset = build(a, tmp_path / "data" / "dataset")
    index = index_all(dataset, tmp_path / "index", news_model)
    runs_before = search_runs(index, dataset, tmp_path / "before")
    digests = {"dataset": tree_digest(dataset), "index": tree_digest(index)}

    if failing == "dense":
        def broken(*args: Any, **kwargs: Any) -> int:
            raise RuntimeError("killed while encoding")

        monkeypatch.setattr(DenseBackend, "append", broken)
    else:  # the 4th rename (the Lucene index moving in) fails: the dataset, already switched, goes back
        calls = []
        original = add_module._rename

        def rename(source: Path, destination: Path) -> None:
            calls.append(source)
            if len(calls) == 4:
                raise OSError("disk gone")
            original(source, destination)

        monkeypatch.setattr(add_module, "_rename", rename)
    with pytest.raises((RuntimeError, OSError)):
        add_documents(dataset, b, indexes=[index], device="cpu")
    assert tree_digest(dataset) == digests["dataset"]
    assert tree_digest(index) == digests["index"]
    assert hidden_leftovers(index) == [] and hidden_leftovers(dataset.parent) == []
    runs_after = search_runs(index, dataset, tmp_path / "after")
    for name in runs_before:
        assert read_run(runs_after[name]) == read_run(runs_before[name])

    monkeypatch.undo()  # and the same add then goes through
    add_documents(dataset, b, indexes=[index], device="cpu")
    assert Dataset(dataset).manifest["counts"]["passages"] == 15


# --- HNSW and IVF-PQ ----------------------------------------------------------------------------------


def test_add_to_hnsw_index(tmp_path: Path, news_model: Path) -> None:
    """HNSW takes the new vectors (the graph is not a fresh build's, so only the vectors are compared)."""
    import faiss

    from corefsearch.dense.indexing import build_dense_index

    a, b, ab = corpora(tmp_path)
    grown = build(a, tmp_path / "grown")
    build_dense_index(grown, tmp_path / "hnsw", str(news_model), faiss_type="hnsw", device="cpu")
    add_documents(grown, b, indexes=[tmp_path / "hnsw"], device="cpu")
    fresh = build(ab, tmp_path / "fresh")
    build_dense_index(fresh, tmp_path / "flat", str(news_model), device="cpu")
    hnsw = faiss.read_index(str(tmp_path / "hnsw" / "dense" / "faiss.index"))
    flat = faiss.read_index(str(tmp_path / "flat" / "dense" / "faiss.index"))
    assert hnsw.ntotal == flat.ntotal == 15
    np.testing.assert_allclose(hnsw.reconstruct_n(0, 15), flat.reconstruct_n(0, 15), atol=1e-5)
    hnsw.hnsw.efSearch = 128
    queries = flat.reconstruct_n(0, 15)
    # With 15 vectors HNSW's search is exact: the same neighbours as the flat index, new passages included.
    assert hnsw.search(queries, 15)[1].tolist() == flat.search(queries, 15)[1].tolist()


def test_add_to_ivfpq_keeps_trained_quantiser(tmp_path: Path, news_model: Path) -> None:
    """IVF-PQ needs ~10k passages to train: a hand-made index of random vectors stands for the old ones."""
    import faiss

    from corefsearch.dense import faiss_index, store
    from corefsearch.dense.chunks import encoder_record

    n_old = faiss_index.IVFPQ_MIN_PASSAGES
    model = store.load_encoder(str(news_model), "cpu")
    dimension = model.passage_encoder.dimension
    parameters = faiss_index.faiss_parameters("ivfpq", dimension, n_old)
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n_old, dimension)).astype(np.float32)
    index = faiss_index.build_index(parameters, dimension, n_old, lambda: [vectors],
                                    lambda n: vectors[:n])
    folder = tmp_path / "index" / "dense"
    folder.mkdir(parents=True)
    faiss_index.write_index(index, folder / "faiss.index")
    (folder / "ids.txt").write_text("".join(f"old-{i}\n" for i in range(n_old)))
    manifest = {"kind": DENSE_INDEX.kind, "passages": n_old, "passages_sha256": "x", "faiss": parameters,
                "encoder": encoder_record(model)}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    passages = tmp_path / "passages.jsonl"
    texts = [d["text"] for d in EXTRA_DOCUMENTS]
    with passages.open("w") as handle:
        handle.writelines(json.dumps({"id": f"old-{i}", "text": "x"}) + "\n" for i in range(n_old))
        handle.writelines(json.dumps({"id": f"new-{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    staged = tmp_path / "staged"
    staged.mkdir()
    assert DenseBackend().append(tmp_path / "index", passages, n_old, staged, model, AppendOptions(batch_size=8)) == 2

    grown = faiss.read_index(str(staged / "faiss.index"))
    assert grown.ntotal == n_old + 2 and grown.is_trained
    old_ivf, new_ivf = faiss.downcast_index(index), faiss.downcast_index(grown)
    assert new_ivf.nlist == old_ivf.nlist
    np.testing.assert_array_equal(faiss.vector_to_array(new_ivf.pq.centroids),
                                  faiss.vector_to_array(old_ivf.pq.centroids))
    np.testing.assert_array_equal(new_ivf.quantizer.reconstruct_n(0, new_ivf.nlist),
                                  old_ivf.quantizer.reconstruct_n(0, old_ivf.nlist))
    assert (staged / "ids.txt").read_text().splitlines()[-2:] == ["new-0", "new-1"]
    recorded = json.loads((staged / "manifest.json").read_text())
    assert recorded["passages"] == n_old + 2 and recorded["faiss"] == parameters
    assert "not retrained" in recorded["additions"][-1]["note"]
    # The new passages are found again through the index (their own vectors as queries).
    new_vectors = model.passage_encoder.encode_passages(["Levee repairs", "Forecast"], texts,
                                                        max_length=model.config.max_passage_len, batch_size=2)
    new_ivf.nprobe = new_ivf.nlist
    _, found = grown.search(np.asarray(new_vectors, dtype=np.float32), 5)
    assert n_old in found[0] and n_old + 1 in found[1]


@quiet
def test_add_waits_for_no_one(tmp_path: Path) -> None:
    """add locks the dataset as every writer does: a second writer fails at once, nothing changed."""
    from corefsearch.io.outputs import output_lock

    a, b, _ = corpora(tmp_path)
    grown = build(a, tmp_path / "grown")
    before = tree_digest(grown)
    with output_lock(grown, "--out"), pytest.raises(InputError, match="being written by another corefsearch"):
        add_documents(grown, b)
    assert tree_digest(grown) == before


@quiet
def test_add_generic_documents_to_ecbplus_dataset(subset_dataset: Path, tmp_path: Path) -> None:
    """An ECB+ dataset (split by its topics) takes generic documents carrying their split; a new mention of an
    ECB+ cluster becomes a query of it and a relevant passage of the cluster's queries."""
    dataset = tmp_path / "dataset"
    shutil.copytree(subset_dataset, dataset)
    clusters = {r["cluster_id"]: r for _, r in read_jsonl(dataset / "clusters.jsonl")}
    queries = [q for _, q in read_jsonl(dataset / "queries" / "test.jsonl")]
    cluster = queries[0]["cluster_id"]
    members = [q["id"] for q in queries if q["cluster_id"] == cluster]
    text = "Officials described the " + queries[0]["mention"] + " again on Monday. Nothing else happened."
    start = text.index(queries[0]["mention"])
    corpus = write_corpus(tmp_path / "new", [{"doc_id": "extra-1", "text": text, "split": "test"}],
                          [{"mention_id": "extra-m1", "doc_id": "extra-1", "start": start,
                            "end": start + len(queries[0]["mention"]), "cluster_id": cluster}])
    summary = add_documents(dataset, corpus)
    assert summary.passages == 2 and summary.new_queries == 1 and summary.changed_queries == len(members)
    qrels = read_qrels(dataset / "qrels" / "test.txt")
    assert all(qrels[qid].get("extra-1-0") == 1 for qid in members)
    assert set(qrels["extra-m1"]) == set(clusters[cluster]["passage_ids"])
    # A document without its split cannot join a dataset split by corpus.
    bare = write_corpus(tmp_path / "bare", [{"doc_id": "extra-2", "text": "Quiet day."}], None)
    with pytest.raises(InputError, match="has no field 'split'"):
        add_documents(dataset, bare)
