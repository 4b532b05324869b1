"""Dense retrieval with a tiny randomly initialised BERT built here (no downloads): the FAISS
index (write/read, flat/hnsw/ivfpq), sharded and resumable encoding, dense search, fusion,
the index/encoder/dataset checks, and `search`/`query --retriever dense|hybrid` end to end on
the ECB+ subset (test topics 36-37)."""

from __future__ import annotations

import collections
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import frequent_words, index_contents, make_tiny_bert
from typer.testing import CliRunner

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.schema import Hit, Query
from corefsearch.cli import app
from corefsearch.datasets.dataset import Dataset
from corefsearch.dense import faiss_index, indexing
from corefsearch.dense.chunks import shard_chunks
from corefsearch.dense.indexing import build_dense_index, merge_dense_shards, parse_shard
from corefsearch.dense.search import DenseSearcher
from corefsearch.dense.store import check_dense_index_matches_dataset, load_dense_manifest
from corefsearch.fusion import FusionOptions, fuse, interpolation, reciprocal_rank_fusion
from corefsearch.search.options import RetrievalOptions, SearchOptions
from corefsearch.search.pipeline import search_to_run

java = pytest.mark.java
runner = CliRunner(env={"COLUMNS": "250"})


# --- tiny random BERTs (helpers.py; tiny_model in conftest.py) ------------------------------------------------


@pytest.fixture(scope="session")
def other_model(subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("other-bert"), frequent_words(subset_dataset), seed=1)


# --- a small generic dataset for the encoding mechanics -----------------------------------------

# small_dataset (conftest.py): about 96 sentence passages (24 documents of 4 sentences), 8 event clusters.


CHUNK = 10  # passages per chunk in these tests (the default is 8,192)


@pytest.fixture(scope="module")
def reference_index(small_dataset: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unsharded, uninterrupted flat index of ``small_dataset``."""
    out = tmp_path_factory.mktemp("reference")
    build_dense_index(small_dataset, out, str(tiny_model), chunk_size=CHUNK, device="cpu")
    return out


def invoke(*args: object, expect_error: bool = False) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    if expect_error:
        assert result.exit_code == 1, result.output
    else:
        assert result.exit_code == 0, result.output
    return result


# --- FAISS ------------------------------------------------------------------------------------


@pytest.mark.parametrize("faiss_type", ["flat", "hnsw", "ivfpq"])
def test_faiss_write_read_gives_identical_results(faiss_type: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    count = 10_000 if faiss_type == "ivfpq" else 2_000  # ivfpq trains on at least 39 x 256 vectors
    vectors = rng.standard_normal((count, 32)).astype(np.float32)
    queries = rng.standard_normal((25, 32)).astype(np.float32)
    parameters = faiss_index.faiss_parameters(faiss_type, 32, count)
    chunks = [vectors[i:i + 3000] for i in range(0, count, 3000)]
    built = faiss_index.build_index(parameters, 32, count, lambda: iter(chunks), lambda n: vectors[:n])
    faiss_index.configure_search(built, parameters, 20)
    before = built.search(queries, 20)
    faiss_index.write_index(built, tmp_path / "faiss.index")
    loaded = faiss_index.read_index(tmp_path / "faiss.index")
    faiss_index.configure_search(loaded, parameters, 20)
    after = loaded.search(queries, 20)
    assert np.array_equal(before[1], after[1]) and np.array_equal(before[0], after[0])
    if faiss_type == "flat":  # exact inner product
        assert np.array_equal(before[1][:, 0], np.argmax(queries @ vectors.T, axis=1))
    if faiss_type == "hnsw":
        assert loaded.hnsw.efSearch == 128
        exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :20]
        overlap = np.mean([len(set(a) & set(b)) / 20 for a, b in zip(exact, after[1], strict=True)])
        assert overlap > 0.9
    if faiss_type == "ivfpq":
        assert parameters["nlist"] == 256 and parameters["m"] == 8 and parameters["nbits"] == 8
        assert parameters["nprobe"] == 32


def test_faiss_parameters() -> None:
    assert faiss_index.pq_subquantizers(384) == 64 and faiss_index.pq_subquantizers(768) == 64
    assert faiss_index.pq_subquantizers(32) == 8 and faiss_index.pq_subquantizers(36) == 9
    assert faiss_index.ivfpq_nlist(100_000) == 1265 and faiss_index.ivfpq_nlist(10_000) == 256
    assert faiss_index.ivfpq_nlist(40) == 1
    with pytest.raises(InputError, match="--faiss ivfpq needs at least 9,984 passages.*--faiss flat"):
        faiss_index.faiss_parameters("ivfpq", 384, 5_000)
    with pytest.raises(InputError, match="--faiss must be one of flat, hnsw, ivfpq"):
        faiss_index.faiss_parameters("lsh", 384, 5_000)


def test_index_dense_checks_its_options_once_and_before_its_output(small_dataset: Path, tiny_model: Path,
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    check = faiss_index.check_faiss_type
    monkeypatch.setattr(faiss_index, "check_faiss_type", lambda t: (calls.append(t), check(t))[1])
    out = tmp_path / "index"
    invoke("index", small_dataset, "--dense", "--encoder", tiny_model, "--device", "cpu", "--chunk-size", CHUNK,
           "--out", out)
    assert calls == ["flat"]
    calls.clear()
    invoke("index", small_dataset, "--dense", "--encoder", tiny_model, "--device", "cpu", "--shard", "0/2",
           "--chunk-size", CHUNK, "--out", out)
    invoke("index", small_dataset, "--dense", "--encoder", tiny_model, "--device", "cpu", "--shard", "1/2",
           "--chunk-size", CHUNK, "--out", out)
    invoke("index", small_dataset, "--dense", "--merge-shards", 2, "--overwrite", "--out", out)
    assert calls == ["flat"] * 3
    # a bad value is refused before the output guard looks at --out (which exists, without --overwrite)
    result = invoke("index", small_dataset, "--dense", "--encoder", tiny_model, "--faiss", "lsh", "--out", out,
                    expect_error=True)
    assert "--faiss must be one of" in result.output


# --- encoding, layout, shards, resume ---------------------------------------------------------


def test_index_layout_and_manifest(reference_index: Path, small_dataset: Path, tiny_model: Path) -> None:
    from corefsearch.dense.model import BiEncoder

    dense = reference_index / "dense"
    assert sorted(p.name for p in reference_index.iterdir()) == ["dense"]  # the partial folder is gone
    # docid and index: Pyserini's names for ids.txt and faiss.index (hard links; see test_interop.py).
    assert sorted(p.name for p in dense.iterdir()) == ["docid", "faiss.index", "ids.txt", "index", "manifest.json"]
    manifest = load_dense_manifest(reference_index)
    passages = list(Dataset(small_dataset).passages())
    assert manifest["passages"] == len(passages) > 5 * CHUNK
    dataset_manifest = json.loads((small_dataset / "manifest.json").read_text())
    assert "sha256:" + manifest["passages_sha256"] == dataset_manifest["checksums"]["passages.jsonl"]
    model = BiEncoder.load(str(tiny_model), "cpu")
    assert manifest["encoder"]["reference"] == str(tiny_model.resolve())
    assert manifest["encoder"]["passage_fingerprint"] == model.passage_fingerprint()
    assert manifest["encoder"]["dimension"] == 32 and manifest["encoder"]["config"]["pooling"] == "mean"
    assert manifest["faiss"] == {"type": "flat", "class": "IndexFlatIP", "metric": "inner_product"}
    assert manifest["encoding"]["chunk_size"] == CHUNK and manifest["encoding"]["encoded"] == len(passages)
    assert {"faiss", "torch", "transformers", "numpy", "corefsearch"} <= set(manifest["versions"])
    ids, vectors = index_contents(reference_index)
    assert ids == [p.id for p in passages]
    # The stored vectors are the passage encoder's, in passage order.
    direct = model.passage_encoder.encode_passages([p.title for p in passages], [p.text for p in passages],
                                                   max_length=180, batch_size=7)
    assert np.allclose(vectors, direct, atol=1e-5)


def test_index_refuses_to_overwrite(reference_index: Path, small_dataset: Path, tiny_model: Path) -> None:
    with pytest.raises(InputError, match="already exists.*--overwrite"):
        build_dense_index(small_dataset, reference_index, str(tiny_model), chunk_size=CHUNK, device="cpu")


def test_shard_blocks() -> None:
    assert parse_shard("2/4") == (2, 4)
    for bad in ("4/4", "-1/3", "1/0", "1", "a/b"):
        with pytest.raises(InputError, match="--shard"):
            parse_shard(bad)
    for n_chunks in (1, 3, 10, 11):
        for count in (1, 2, 3, 4, 7):
            blocks = [shard_chunks(n_chunks, (i, count)) for i in range(count)]
            assert [c for block in blocks for c in block] == list(range(n_chunks))


@pytest.mark.parametrize("shards", [3, 12])
def test_sharded_then_merged_equals_unsharded(shards: int, reference_index: Path, small_dataset: Path,
                                              tiny_model: Path, tmp_path: Path) -> None:
    # 12 shards of 10 chunks: two shards are empty, which must not matter.
    summaries = [build_dense_index(small_dataset, tmp_path, str(tiny_model), shard=(i, shards), chunk_size=CHUNK,
                                   device="cpu") for i in (2, 0, 1)]
    assert [s.shards_present for s in summaries] == [1, 2, 3]
    assert not (tmp_path / "dense").exists()
    if shards > 3:
        with pytest.raises(MissingArtefactError, match=f"{shards - 3} of {shards} shards are missing") as missing:
            merge_dense_shards(small_dataset, tmp_path, shards)
        assert f"--shard I/{shards}" in str(missing.value)
    for i in range(3, shards):
        build_dense_index(small_dataset, tmp_path, str(tiny_model), shard=(i, shards), chunk_size=CHUNK,
                          device="cpu")
    shard_dir = tmp_path / "dense-shards" / f"shard-0-of-{shards}"
    assert sorted(p.name for p in shard_dir.iterdir()) == ["ids.txt", "manifest.json", "vectors.npy"]
    summary = merge_dense_shards(small_dataset, tmp_path, shards, encoder=str(tiny_model), device="cpu")
    assert summary.merged_shards == shards
    ids, vectors = index_contents(tmp_path)
    reference_ids, reference_vectors = index_contents(reference_index)
    assert ids == reference_ids
    assert np.array_equal(vectors, reference_vectors)  # the same batches, so bit for bit
    merged = load_dense_manifest(tmp_path)
    assert merged["encoding"]["shards"] == shards
    assert merged["encoder"] == load_dense_manifest(reference_index)["encoder"]
    queries = Dataset(small_dataset).queries("test")[:5]
    merged_results = [(q.id, h) for q, h in DenseSearcher(tmp_path, device="cpu").search(queries, 5)]
    reference_results = [(q.id, h) for q, h in DenseSearcher(reference_index, device="cpu").search(queries, 5)]
    assert merged_results == reference_results


def test_merge_refuses_another_encoder(small_dataset: Path, tiny_model: Path, other_model: Path,
                                       tmp_path: Path) -> None:
    build_dense_index(small_dataset, tmp_path, str(tiny_model), shard=(0, 2), chunk_size=CHUNK, device="cpu")
    build_dense_index(small_dataset, tmp_path, str(other_model), shard=(1, 2), chunk_size=CHUNK, device="cpu")
    with pytest.raises(InputError, match="different encoders"):
        merge_dense_shards(small_dataset, tmp_path, 2)


class Interrupted(Exception):
    pass


def test_interrupted_encoding_resumes(reference_index: Path, small_dataset: Path, tiny_model: Path,
                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_chunk = indexing.save_chunk
    saved: list[int] = []

    def save_then_fail(chunks_dir: Path, number: int, vectors: Any, ids: list[str]) -> None:
        if saved:
            raise Interrupted
        save_chunk(chunks_dir, number, vectors, ids)
        saved.append(number)

    monkeypatch.setattr(indexing, "save_chunk", save_then_fail)
    with pytest.raises(Interrupted):
        build_dense_index(small_dataset, tmp_path, str(tiny_model), chunk_size=CHUNK, device="cpu")
    assert not (tmp_path / "dense").exists()
    assert sorted(p.name for p in (tmp_path / "dense.partial" / "chunks").iterdir()) == ["00000.ids.txt",
                                                                                         "00000.npy"]
    with pytest.raises(MissingArtefactError, match="interrupted encoding is in .*dense.partial"):
        DenseSearcher(tmp_path)

    monkeypatch.setattr(indexing, "save_chunk", save_chunk)
    summary = build_dense_index(small_dataset, tmp_path, str(tiny_model), chunk_size=CHUNK, device="cpu")
    total = load_dense_manifest(reference_index)["passages"]
    assert (summary.resumed, summary.encoded) == (CHUNK, total - CHUNK)
    assert not (tmp_path / "dense.partial").exists()
    ids, vectors = index_contents(tmp_path)
    reference_ids, reference_vectors = index_contents(reference_index)
    assert ids == reference_ids and np.array_equal(vectors, reference_vectors)


def test_partial_of_another_encoder_starts_over(small_dataset: Path, tiny_model: Path, other_model: Path,
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_chunk = indexing.save_chunk

    def fail_after_one(chunks_dir: Path, number: int, vectors: Any, ids: list[str]) -> None:
        save_chunk(chunks_dir, number, vectors, ids)
        raise Interrupted

    monkeypatch.setattr(indexing, "save_chunk", fail_after_one)
    with pytest.raises(Interrupted):
        build_dense_index(small_dataset, tmp_path, str(other_model), chunk_size=CHUNK, device="cpu")
    monkeypatch.setattr(indexing, "save_chunk", save_chunk)
    with pytest.warns(UserWarning, match="starting the encoding over.*another encoder"):
        summary = build_dense_index(small_dataset, tmp_path, str(tiny_model), chunk_size=CHUNK, device="cpu")
    assert summary.resumed == 0


# --- search -----------------------------------------------------------------------------------


def test_dense_search_leaves_out_the_own_passage(reference_index: Path, small_dataset: Path) -> None:
    queries = Dataset(small_dataset).queries("test")
    searcher = DenseSearcher(reference_index, device="cpu")
    ids, vectors = index_contents(reference_index)
    vector_of = dict(zip(ids, vectors, strict=True))
    k = 7
    results = list(searcher.search(queries, k, batch_size=8))
    assert [q.id for q, _ in results] == [q.id for q in queries]
    for query, hits in results:
        found = [h.passage_id for h in hits]
        assert len(hits) == k and query.passage_id not in found and len(set(found)) == k
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        # Scores are dot products with the stored passage vectors.
        query_vector = searcher.encode([query])[0]
        assert scores == pytest.approx([float(query_vector @ vector_of[pid]) for pid in found], rel=1e-4)
        one = searcher.search_one(query, k)
        assert [h.passage_id for h in one] == found
    with pytest.raises(InputError, match="--k must be at least 1"):
        list(searcher.search(queries, 0))


def test_searcher_refuses_another_encoder(reference_index: Path, other_model: Path, tiny_model: Path) -> None:
    with pytest.raises(InputError, match="was built with encoder .*tiny-bert.*search with --encoder"):
        DenseSearcher(reference_index, str(other_model), device="cpu")
    DenseSearcher(reference_index, str(tiny_model), device="cpu")  # the same encoder, named explicitly


def test_missing_dense_index_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(MissingArtefactError, match="corefsearch index DATASET --dense --encoder"):
        DenseSearcher(tmp_path)


def test_dataset_checksum_mismatch(reference_index: Path, small_dataset: Path, subset_dataset: Path,
                                   tmp_path: Path) -> None:
    check_dense_index_matches_dataset(reference_index, small_dataset)
    with pytest.raises(InputError, match="built from other passages.*--dense --encoder .*--overwrite"):
        check_dense_index_matches_dataset(reference_index, subset_dataset)
    with pytest.raises(InputError, match="dense index .* built from other passages"):
        search_to_run(reference_index, subset_dataset / "queries" / "test.jsonl", tmp_path / "run.trec",
                      SearchOptions(k=500, retrieval=RetrievalOptions("dense", device="cpu")))
    assert not (tmp_path / "run.trec").exists()


def test_retriever_folder_with_markers(small_dataset: Path, tiny_model: Path, tmp_path: Path) -> None:
    """A saved retriever (two encoders, boundary tokens) indexes and searches with its mention marked."""
    from corefsearch.dense.model import BiEncoder, RetrieverConfig

    model_dir = tmp_path / "retriever"
    BiEncoder.from_base(str(tiny_model), RetrieverConfig(markers=True, max_query_len=32), "cpu").save(model_dir)
    build_dense_index(small_dataset, tmp_path / "index", str(model_dir), chunk_size=CHUNK, device="cpu")
    searcher = DenseSearcher(tmp_path / "index", device="cpu")
    assert searcher.model.config.markers and not searcher.model.config.shared_encoder
    query = Dataset(small_dataset).queries("test")[0]
    marked = searcher.model.query_encoder.query_input_ids(query.text, query.start, query.end, 32)
    assert searcher.model.query_encoder.marker_ids[0] in marked
    assert len(searcher.search_one(query, 5)) == 5


# --- fusion -----------------------------------------------------------------------------------


def hits(*pairs: tuple[str, float]) -> list[Hit]:
    return [Hit(pid, score) for pid, score in pairs]


def test_reciprocal_rank_fusion_by_hand() -> None:
    dense = {"q": hits(("a", 0.9), ("b", 0.8), ("c", 0.7))}
    bm25 = {"q": hits(("c", 12.0), ("d", 11.0), ("a", 3.0))}
    fused = reciprocal_rank_fusion([dense, bm25], k=4)["q"]
    # a: 1/61 + 1/63, c: 1/63 + 1/61 (a tie, broken by passage id), b: 1/62, d: 1/62.
    assert [h.passage_id for h in fused] == ["a", "c", "b", "d"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 63) and fused[2].score == pytest.approx(1 / 62)
    assert [h.passage_id for h in reciprocal_rank_fusion([dense, bm25], k=2)["q"]] == ["a", "c"]
    # Each list is cut to depth first: with depth 1 only a (dense) and c (bm25) count.
    shallow = reciprocal_rank_fusion([dense, bm25], k=4, depth=1)["q"]
    assert [(h.passage_id, round(h.score, 6)) for h in shallow] == [("a", round(1 / 61, 6)), ("c", round(1 / 61, 6))]


def test_interpolation_by_hand() -> None:
    dense = {"q": hits(("a", 10.0), ("b", 8.0), ("c", 2.0)), "empty": []}
    bm25 = {"q": hits(("c", 30.0), ("d", 20.0), ("a", 10.0)), "empty": []}
    # Normalised: dense a 1, b 0.75, c 0 (d missing: 0); bm25 c 1, d 0.5, a 0 (b missing: 0).
    fused = interpolation(dense, bm25, k=4, alpha=0.8)
    expected = {"a": 0.8, "b": 0.6, "c": 0.2, "d": 0.1}
    assert [h.passage_id for h in fused["q"]] == ["a", "b", "c", "d"]
    assert {h.passage_id: h.score for h in fused["q"]} == pytest.approx(expected)
    assert fused["empty"] == []
    bm25_heavy = interpolation(dense, bm25, k=4, alpha=0.2)["q"]
    assert [h.passage_id for h in bm25_heavy] == ["c", "d", "a", "b"]
    assert {h.passage_id: h.score for h in bm25_heavy} == pytest.approx({"c": 0.8, "d": 0.4, "a": 0.2, "b": 0.15})
    # A query that only one retriever answers keeps that retriever's order.
    one_sided = fuse({"q": hits(("x", 3.0), ("y", 1.0))}, {"q": []}, 5, FusionOptions("interpolate", 0.5))
    assert [h.passage_id for h in one_sided["q"]] == ["x", "y"]
    with pytest.raises(InputError, match="--alpha must be between 0 and 1"):
        fuse(dense, bm25, 3, FusionOptions("interpolate", 1.5))
    with pytest.raises(InputError, match="--fusion must be one of rrf, interpolate"):
        fuse(dense, bm25, 3, FusionOptions("max"))


# --- the command line end to end --------------------------------------------------------------


def read_run(path: Path) -> dict[str, list[tuple[str, int, float, str]]]:
    run: dict[str, list[tuple[str, int, float, str]]] = collections.defaultdict(list)
    for line in path.read_text().splitlines():
        qid, q0, pid, rank, score, tag = line.split()
        assert q0 == "Q0"
        run[qid].append((pid, int(rank), float(score), tag))
    return run


@pytest.fixture(scope="module")
def both_indexes(subset_index: Path, subset_dataset: Path, tiny_model: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's Lucene index of the subset, with a dense index built beside it (CLI)."""
    index = tmp_path_factory.mktemp("both") / "index"
    shutil.copytree(subset_index / "lucene", index / "lucene")
    result = invoke("index", subset_dataset, "--out", index, "--dense", "--encoder", tiny_model, "--device", "cpu")
    assert "passages/s" in result.stdout and "(flat, 852 passages, 32-d)" in " ".join(result.stdout.split())
    return index


@java
def test_cli_search_hybrid_end_to_end(both_indexes: Path, subset_dataset: Path, tmp_path: Path) -> None:
    queries_path = subset_dataset / "queries" / "test.jsonl"
    own = {json.loads(line)["id"]: json.loads(line)["passage_id"] for line in queries_path.read_text().splitlines()}
    runs = {}
    for name, extra in {"bm25": [], "dense": ["--retriever", "dense"], "rrf": ["--retriever", "hybrid"],
                        "interp": ["--retriever", "hybrid", "--fusion", "interpolate", "--alpha", "0.3"]}.items():
        runs[name] = tmp_path / f"{name}.trec"
        invoke("search", "--index", both_indexes, "--queries", queries_path, "--out", runs[name], "--k", "50",
               "--query-format", "mention", "--device", "cpu", *extra)
    tags = {"dense": "dense-flat", "rrf": "hybrid-rrf60-bm25-mention-dense-flat",
            "interp": "hybrid-interp0.3-bm25-mention-dense-flat"}
    for name, tag in tags.items():
        run = read_run(runs[name])
        assert set(run) == set(own)  # dense (and so hybrid) answers every query
        for qid, rows in run.items():
            assert len(rows) == 50 and [rank for _, rank, _, _ in rows] == list(range(1, 51))
            assert own[qid] not in [pid for pid, _, _, _ in rows] and len({pid for pid, _, _, _ in rows}) == 50
            scores = [score for _, _, score, _ in rows]
            assert scores == sorted(scores, reverse=True)
            assert {t for _, _, _, t in rows} == {tag}
        meta = json.loads(runs[name].with_name(runs[name].name + ".meta.json").read_text())
        assert meta["retriever"] == ("dense" if name == "dense" else "hybrid") and meta["tag"] == tag
        assert meta["dense"]["encoder"] == load_dense_manifest(both_indexes)["encoder"]["reference"]
        assert meta["dense"]["faiss"]["type"] == "flat"
    rrf_meta = json.loads(runs["rrf"].with_name("rrf.trec.meta.json").read_text())
    assert rrf_meta["fusion"] == {"method": "rrf", "alpha": 0.5, "rrf_k": 60, "depth": 50}
    interp_meta = json.loads(runs["interp"].with_name("interp.trec.meta.json").read_text())
    assert interp_meta["fusion"]["alpha"] == 0.3 and interp_meta["options"]["query_format"] == "mention"
    # Every hybrid hit comes from the BM25 or the dense top 50.
    bm25, dense, rrf = read_run(runs["bm25"]), read_run(runs["dense"]), read_run(runs["rrf"])
    for qid, rows in rrf.items():
        pool = {pid for pid, _, _, _ in bm25.get(qid, [])} | {pid for pid, _, _, _ in dense[qid]}
        assert {pid for pid, _, _, _ in rows} <= pool
    table = invoke("evaluate", *runs.values(), "--qrels", subset_dataset / "qrels" / "test.txt").stdout
    assert "MRR@10" in table and "rrf" in table


@java
def test_cli_query_dense_and_hybrid(both_indexes: Path) -> None:
    args = ["query", "--index", both_indexes, "--mention", "earthquake", "--context",
            "A strong earthquake struck the island on Sunday.", "--k", "4", "--device", "cpu"]
    dense = json.loads(invoke(*args, "--retriever", "dense", "--json").stdout)
    assert dense["retriever"] == "dense" and dense["query"]["bm25_query"] is None
    assert len(dense["hits"]) == 4 and all(hit["matched"] == [] for hit in dense["hits"])
    assert all(hit["text"] for hit in dense["hits"])
    hybrid = json.loads(invoke(*args, "--retriever", "hybrid", "--json").stdout)
    assert hybrid["retriever"] == "hybrid" and hybrid["fusion"] == "rrf" and len(hybrid["hits"]) == 4
    assert hybrid["query"]["bm25_query"]
    table = invoke(*args, "--retriever", "hybrid").stdout
    assert "BM25 query:" in table and "Dense encoder:" in table and "fused with BM25 by rrf" in table


def test_cli_dense_query_without_lucene(reference_index: Path, small_dataset: Path) -> None:
    """With only a dense index, the texts come from the dataset's passages file."""
    passages = {p.id: p for p in Dataset(small_dataset).passages()}
    answer = json.loads(invoke("query", "--index", reference_index, "--mention", "flood", "--context",
                               "The flood hit Lima.", "--retriever", "dense", "--k", "3", "--json",
                               "--device", "cpu").stdout)
    assert [hit["rank"] for hit in answer["hits"]] == [1, 2, 3]
    for hit in answer["hits"]:
        assert hit["text"] == passages[hit["passage_id"]].text and hit["title"] == passages[hit["passage_id"]].title


def test_cli_errors_are_clear(reference_index: Path, small_dataset: Path, other_model: Path, tiny_model: Path,
                              tmp_path: Path) -> None:
    queries = small_dataset / "queries" / "test.jsonl"
    out = tmp_path / "run.trec"
    mismatch = invoke("search", "--index", reference_index, "--queries", queries, "--out", out,
                      "--retriever", "dense", "--encoder", other_model, expect_error=True)
    assert "was built with encoder" in mismatch.output and "--encoder" in mismatch.output
    assert not out.exists()
    hybrid = invoke("search", "--index", reference_index, "--queries", queries, "--out", out,
                    "--retriever", "hybrid", expect_error=True)
    assert "--retriever hybrid needs a Lucene and a dense index" in " ".join(hybrid.output.split())
    assert "corefsearch index DATASET --out" in " ".join(hybrid.output.split())
    no_dense = invoke("query", "--index", tmp_path, "--mention", "flood", "--retriever", "dense",
                      expect_error=True)
    assert "no dense index" in no_dense.output and "--dense --encoder" in " ".join(no_dense.output.split())
    bad = {("--retriever", "sparse"): "--retriever must be one of",
           ("--retriever", "hybrid", "--alpha", "2"): "--alpha must be between 0 and 1"}
    for options, message in bad.items():
        result = invoke("search", "--index", reference_index, "--queries", queries, "--out", out, *options,
                        expect_error=True)
        assert message in result.output
    index_errors = {("--encoder", tiny_model): "add --dense",
                    ("--dense",): "--dense needs --encoder",
                    ("--dense", "--encoder", tiny_model, "--shard", "2/2"): "--shard I/N",
                    ("--dense", "--encoder", tiny_model, "--faiss", "ivfpq"): "--faiss flat",
                    ("--dense", "--merge-shards", "2"): "2 of 2 shards are missing",
                    ("--dense", "--encoder", tiny_model, "--shard", "0/2", "--merge-shards", "2"): "do not go together"}
    for options, message in index_errors.items():
        result = invoke("index", small_dataset, "--out", tmp_path / "idx", *options, expect_error=True)
        assert message in " ".join(result.output.split()), result.output


def test_cli_shards_then_merge(small_dataset: Path, tiny_model: Path, reference_index: Path,
                               tmp_path: Path) -> None:
    shard = ["index", small_dataset, "--out", tmp_path, "--dense", "--encoder", tiny_model, "--device", "cpu",
             "--chunk-size", CHUNK, "--shard"]
    first = invoke(*shard, "1/2").stdout
    assert "1 of 2 shards are complete" in first
    last = " ".join(invoke(*shard, "0/2").stdout.split())
    assert "2 of 2 shards are complete" in last and "--merge-shards 2" in last
    merged = invoke("index", small_dataset, "--out", tmp_path, "--dense", "--merge-shards", "2").stdout
    assert "Merged 2 shards" in merged
    ids, vectors = index_contents(tmp_path)
    reference_ids, reference_vectors = index_contents(reference_index)
    assert ids == reference_ids and np.array_equal(vectors, reference_vectors)


def test_search_one_excludes_only_a_known_own_passage(reference_index: Path, small_dataset: Path) -> None:
    query = Dataset(small_dataset).queries("test")[0]
    searcher = DenseSearcher(reference_index, device="cpu")
    anonymous = Query("adhoc", "", query.text, query.start, query.end, query.mention, "")
    everything = [h.passage_id for h in searcher.search_one(anonymous, 96)]
    assert query.passage_id in everything
    assert [h.passage_id for h in searcher.search_one(query, 95)] == [p for p in everything if p != query.passage_id]


# --- search-time FAISS settings: --ef-search, --nprobe ------------------------------------------------


def test_ef_search_reaches_faiss_and_the_run_metadata(small_dataset: Path, tiny_model: Path, tmp_path: Path) -> None:
    import faiss

    from corefsearch.search.retriever import open_retriever

    index = tmp_path / "hnsw"
    build_dense_index(small_dataset, index, str(tiny_model), faiss_type="hnsw", chunk_size=CHUNK, device="cpu")
    queries = small_dataset / "queries" / "test.jsonl"
    invoke("search", "--index", index, "--queries", queries, "--out", tmp_path / "run.trec", "--retriever", "dense",
           "--k", 5, "--device", "cpu", "--ef-search", 300)
    meta = json.loads((tmp_path / "run.trec.meta.json").read_text())
    assert meta["dense"]["faiss"]["type"] == "hnsw" and meta["dense"]["faiss"]["efSearch"] == 300
    searcher: Any = open_retriever(index, retrieval=RetrievalOptions("dense", device="cpu", ef_search=50))
    query = Dataset(small_dataset).queries("test")[0]
    searcher.search_one(query, 5)
    assert faiss.downcast_index(searcher.faiss).hnsw.efSearch == 50
    searcher.search_one(query, 80)  # never below the depth asked of FAISS (k + 1: the own passage left out)
    assert faiss.downcast_index(searcher.faiss).hnsw.efSearch == 81
    plain: Any = open_retriever(index, retrieval=RetrievalOptions("dense", device="cpu"))
    plain.search_one(query, 5)
    assert faiss.downcast_index(plain.faiss).hnsw.efSearch == 128  # the manifest's

    common = ("search", "--index", index, "--queries", queries, "--out", tmp_path / "bad.trec", "--device", "cpu")
    output = " ".join(invoke(*common, "--retriever", "dense", "--nprobe", 8, expect_error=True).output.split())
    assert "--nprobe tunes the search of an IVF-PQ dense index" in output and "of type HNSW" in output
    output = " ".join(invoke(*common, "--retriever", "dense", "--ef-search", 0, expect_error=True).output.split())
    assert "--ef-search must be at least 1, got 0" in output
    output = " ".join(invoke(*common, "--retriever", "bm25", "--ef-search", 64, expect_error=True).output.split())
    assert "use them with --retriever dense|hybrid" in output
    assert not (tmp_path / "bad.trec").exists()


def test_nprobe_over_the_manifests_reaches_an_ivfpq_index(tmp_path: Path) -> None:
    import faiss

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((10_000, 32)).astype(np.float32)
    recorded = faiss_index.faiss_parameters("ivfpq", 32, len(vectors))
    built = faiss_index.build_index(recorded, 32, len(vectors), lambda: iter([vectors]), lambda n: vectors[:n])
    given = faiss_index.check_search_parameters(recorded, {"nprobe": 7}, tmp_path)
    faiss_index.configure_search(built, {**recorded, **given}, 20)
    assert faiss.extract_index_ivf(built).nprobe == 7
    faiss_index.configure_search(built, recorded, 20)
    assert faiss.extract_index_ivf(built).nprobe == 32
    with pytest.raises(InputError, match="--ef-search tunes the search of an HNSW dense index"):
        faiss_index.check_search_parameters(recorded, {"efSearch": 64}, tmp_path)
    flat = faiss_index.faiss_parameters("flat", 32, len(vectors))
    with pytest.raises(InputError, match="of type flat"):
        faiss_index.check_search_parameters(flat, {"nprobe": 4}, tmp_path)


def test_a_cuda_device_with_the_cpu_build_of_faiss_warns_once_and_builds_the_cpu_index(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    import faiss

    from corefsearch.base import faiss_gpu
    from corefsearch.cluster.agglomerative import knn_edges

    monkeypatch.setattr(faiss_gpu, "faiss_gpus", lambda: 0)  # what faiss-cpu answers
    monkeypatch.setattr(faiss_gpu, "_warned_no_gpu_faiss", False)
    vectors = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    parameters = faiss_index.faiss_parameters("flat", 16, 300)
    with pytest.warns(UserWarning, match="this FAISS build has no GPU support"):
        built = faiss_index.build_index(parameters, 16, 300, lambda: [vectors], lambda n: vectors[:n], "cuda")
    reference = faiss_index.build_index(parameters, 16, 300, lambda: [vectors], lambda n: vectors[:n], "cpu")
    assert isinstance(built, faiss.IndexFlatIP) and built.ntotal == 300
    assert np.array_equal(built.search(vectors[:5], 4)[1], reference.search(vectors[:5], 4)[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: not again for the kNN graph
        assert np.array_equal(knn_edges(vectors, 5, "cuda")[0], knn_edges(vectors, 5, "cpu")[0])
    assert not faiss_index.on_gpu("cpu", "flat") and not faiss_index.on_gpu("cuda", "hnsw")


def test_encoding_in_length_order_and_in_halves_after_running_out_of_memory_gives_the_same_vectors(
        tiny_model: Path, subset_dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from corefsearch.dense.encoder import TextEncoder, default_batch_size

    encoder = TextEncoder.load(str(tiny_model))
    queries = list(Dataset(subset_dataset).queries("test"))[:24]
    alone = np.concatenate([encoder.encode_queries([q], batch_size=1) for q in queries])
    together = encoder.encode_queries(queries, batch_size=16)  # batches of length-sorted windows
    assert np.allclose(together, alone, atol=1e-5)
    forward, passes = encoder.forward, []

    def small_gpu(batch: dict) -> torch.Tensor:
        rows = len(batch["input_ids"])
        passes.append(rows)
        if rows > 5:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return forward(batch)

    monkeypatch.setattr(encoder, "forward", small_gpu)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    halved = encoder.encode_queries(queries, batch_size=16)
    assert np.allclose(halved, together, atol=1e-5)
    assert encoder.fits == 4 and passes[:3] == [16, 8, 4]  # 16 and 8 did not fit, 4 did: kept for what follows
    assert max(passes[3:]) <= 4
    assert default_batch_size("cpu") == 32 and default_batch_size("cuda:0") == 1024


def test_passages_sorted_by_tokens_chunk_by_chunk_come_back_in_input_order(
        tiny_model: Path, subset_dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from corefsearch.dense import encoder as encoder_module

    encoder = encoder_module.TextEncoder.load(str(tiny_model))
    passages = list(Dataset(subset_dataset).passages())[:23]
    titles, texts = [p.title for p in passages], [p.text for p in passages]
    alone = np.concatenate([encoder.encode_passages([title], [text], batch_size=1)
                            for title, text in zip(titles, texts, strict=True)])
    monkeypatch.setattr(encoder_module, "SORT_CHUNK", 2)  # chunks of 6 passages, the last one short
    together = encoder.encode_passages(titles, texts, batch_size=3)
    assert np.allclose(together, alone, atol=1e-5)
    assert encoder.encode_passages([], [], batch_size=3).shape == (0, encoder.dimension)
