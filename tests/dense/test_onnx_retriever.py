"""The ONNX Runtime backend of the dense retriever's encoders: `corefsearch export-onnx` on a
retriever folder (one export per encoder) and on a zero-shot model (`--out DIR`), `index --dense
--backend onnx|onnx-int8` (passages) and `search`/`query --retriever dense --backend ...` (queries).

A tiny randomly initialised BERT (helpers.make_tiny_bert) over the small generic dataset
of conftest.py, made into retrievers here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import flat, frequent_words, index_contents, make_tiny_bert
from typer.testing import CliRunner

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.cli import app
from corefsearch.datasets.dataset import Dataset
from corefsearch.dense.indexing import build_dense_index, merge_dense_shards
from corefsearch.dense.model import BiEncoder, RetrieverConfig
from corefsearch.dense.store import load_dense_manifest, load_encoder

runner = CliRunner(env={"COLUMNS": "250"})
CHUNK = 10
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models run fastest on one torch thread


def invoke(*args: object, expect_error: bool = False) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exit_code == (1 if expect_error else 0), result.output
    return result


@pytest.fixture(scope="module")
def tiny_bert(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("onnx-bert"), frequent_words(small_dataset), seed=0)


def save_retriever(base: Path, folder: Path, config: RetrieverConfig) -> Path:
    """A retriever of ``base``; two encoders made different (the passage one's weights moved)."""
    import torch

    model = BiEncoder.from_base(str(base), config, "cpu")
    if not config.shared_encoder:
        torch.manual_seed(3)
        with torch.no_grad():
            for tensor in model.passage_encoder.model.parameters():
                tensor.add_(0.05 * torch.randn_like(tensor))
    model.save(folder)
    return folder


@pytest.fixture(scope="module")
def two_encoders(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DPR retriever (query and passage encoders), mean pooling, mention markers; exported."""
    folder = save_retriever(tiny_bert, tmp_path_factory.mktemp("onnx-dpr") / "retriever",
                            RetrieverConfig(markers=True, pooling="mean", max_query_len=32, max_passage_len=48))
    result = invoke("export-onnx", folder)
    for name in ("query_encoder", "passage_encoder"):
        for file in ("model.onnx", "model_qint8.onnx"):
            assert str(folder / name / "onnx" / file) in flat(result.output)
    return folder


@pytest.fixture(scope="module")
def shared(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One shared encoder, [CLS] pooling, no markers; exported without int8."""
    folder = save_retriever(tiny_bert, tmp_path_factory.mktemp("onnx-shared") / "retriever",
                            RetrieverConfig(shared_encoder=True, markers=False, pooling="cls", max_passage_len=40))
    invoke("export-onnx", folder, "--no-quantize")
    return folder


def test_export_writes_one_export_per_encoder(two_encoders: Path, shared: Path) -> None:
    from corefsearch.base.onnx_backend import weights_checksum

    checksums = set()
    for name in ("query_encoder", "passage_encoder"):
        encoder = two_encoders / name
        record = json.loads((encoder / "onnx" / "export.json").read_text())
        assert set(record["files"]) == {"model.onnx", "model_qint8.onnx"}
        assert record["weights_sha256"] == weights_checksum(encoder)
        assert sorted(record["inputs"]) == ["attention_mask", "input_ids", "token_type_ids"]  # title [SEP] text
        assert record["files"]["model.onnx"]["max_abs_diff"] < 1e-4
        assert not [p.name for p in (encoder / "onnx").iterdir() if p.name.startswith(".")]  # no temporaries
        checksums.add(record["weights_sha256"])
    assert len(checksums) == 2  # two encoders, two exports of different weights
    # A shared encoder is loaded from query_encoder/: that one is exported; the passage copy is not.
    record = json.loads((shared / "query_encoder" / "onnx" / "export.json").read_text())
    assert set(record["files"]) == {"model.onnx"} and record["quantization"] is None
    assert not (shared / "passage_encoder" / "onnx").exists()


def queries_and_passages(dataset: Path) -> tuple[list[Any], list[str], list[str]]:
    passages = list(Dataset(dataset).passages())
    return (Dataset(dataset).queries("test")[:20], [p.title for p in passages][:40], [p.text for p in passages][:40])


@pytest.mark.parametrize("fixture", ["two_encoders", "shared"])
def test_onnx_vectors_equal_torch(fixture: str, small_dataset: Path, request: pytest.FixtureRequest) -> None:
    folder = request.getfixturevalue(fixture)
    queries, titles, texts = queries_and_passages(small_dataset)
    titles[0], texts[1] = "", texts[1] + " " + texts[2] + " " + texts[3]  # no title; a longer passage
    torch_model = BiEncoder.load(str(folder), "cpu")
    onnx_model = BiEncoder.load(str(folder), "cpu")
    onnx_model.use_backend("onnx", threads=1)
    assert type(onnx_model.passage_encoder.model).__name__ == "OnnxEncoder" and onnx_model.backend == "onnx"
    assert onnx_model.passage_fingerprint() == torch_model.passage_fingerprint()  # of the torch weights
    assert onnx_model.query_fingerprint() == torch_model.query_fingerprint()
    config = torch_model.config
    batch = torch_model.passage_encoder.passage_batch(titles[:8], texts[:8], config.max_passage_len)
    assert not bool(batch["attention_mask"].all())  # the batches hold padded rows
    passages = torch_model.passage_encoder.encode_passages(titles, texts, config.max_passage_len, batch_size=64)
    query_vectors = torch_model.query_encoder.encode_queries(queries, config.max_query_len, batch_size=64)
    for batch_size in (1, 7, 64):
        got = onnx_model.passage_encoder.encode_passages(titles, texts, config.max_passage_len, batch_size=batch_size)
        np.testing.assert_allclose(got, passages, atol=1e-4, rtol=0)
        got = onnx_model.query_encoder.encode_queries(queries, config.max_query_len, batch_size=batch_size)
        np.testing.assert_allclose(got, query_vectors, atol=1e-4, rtol=0)
    if fixture == "two_encoders":
        int8 = BiEncoder.load(str(folder), "cpu")
        int8.use_backend("onnx-int8", threads=1)
        got = int8.passage_encoder.encode_passages(titles, texts, config.max_passage_len)
        assert np.isfinite(got).all() and got.shape == passages.shape
        cosine = (got * passages).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(passages, axis=1)
        print(f"int8 against torch: passage vectors' cosine mean {cosine.mean():.4f}, min {cosine.min():.4f}; "
              f"max abs difference {np.abs(got - passages).max():.3g}")
        assert cosine.mean() > 0.9  # close; not bounded tightly (quantisation changes the numbers by design)


def test_missing_or_stale_exports_are_refused(two_encoders: Path, shared: Path, tiny_bert: Path,
                                              tmp_path: Path) -> None:
    # Never exported
    plain = tmp_path / "plain"
    shutil.copytree(two_encoders, plain, ignore=shutil.ignore_patterns("onnx"))
    with pytest.raises(MissingArtefactError, match=f"run `corefsearch export-onnx {plain}` first"):
        BiEncoder.load(str(plain), "cpu").use_backend("onnx")
    # Exported without int8
    with pytest.raises(MissingArtefactError, match="model_qint8.onnx"):
        BiEncoder.load(str(shared), "cpu").use_backend("onnx-int8")
    # The passage encoder retrained into the folder after the export: its export is stale
    stale = tmp_path / "stale"
    shutil.copytree(two_encoders, stale)
    import torch

    model = BiEncoder.load(str(stale), "cpu")
    with torch.no_grad():
        next(model.passage_encoder.model.parameters()).add_(0.5)
    model.passage_encoder.model.save_pretrained(stale / "passage_encoder", safe_serialization=True)
    BiEncoder.load(str(stale), "cpu").use_backend("onnx", ("query",))  # the query encoder's is still current
    with pytest.raises(InputError, match=f"exported from other encoder weights .* run `corefsearch export-onnx "
                                         f"{stale}` again"):
        BiEncoder.load(str(stale), "cpu").use_backend("onnx", ("passage",))
    # A zero-shot model has no folder of its own to export into
    with pytest.raises(MissingArtefactError, match=r"export-onnx .* --out DIR` and pass --encoder DIR"):
        BiEncoder.load(str(tiny_bert), "cpu").use_backend("onnx")
    with pytest.raises(InputError, match="runs the model on the CPU"):
        load_encoder(str(two_encoders), "cuda", "onnx")


def index_and_search(dataset: Path, encoder: Path | str, out: Path, backend: str,
                     search_encoder: Path | None = None) -> tuple[Path, list[list[str]]]:
    """``index --dense`` then ``search --retriever dense``, both with ``backend``; the run's lines."""
    invoke("index", dataset, "--dense", "--encoder", encoder, "--out", out, "--backend", backend, "--device", "cpu",
           "--chunk-size", CHUNK)
    run = out.with_name(f"{out.name}.trec")
    extra = ["--encoder", search_encoder] if search_encoder is not None else []
    invoke("search", "--index", out, "--queries", dataset / "queries" / "test.jsonl", "--out", run, "--k", 20,
           "--retriever", "dense", "--backend", backend, "--device", "cpu", *extra)
    return run, [line.split() for line in run.read_text().splitlines()]


def assert_same_run(got: list[list[str]], expected: list[list[str]]) -> None:
    """The same queries and scores (to 1e-4); the same order wherever scores differ by more than 1e-4."""
    def by_query(lines: list[list[str]]) -> dict[str, list[tuple[str, float]]]:
        runs: dict[str, list[tuple[str, float]]] = {}
        for qid, _, pid, _, score, _ in lines:
            runs.setdefault(qid, []).append((pid, float(score)))
        return runs

    got_runs, expected_runs = by_query(got), by_query(expected)
    assert got_runs.keys() == expected_runs.keys()
    for qid, hits in expected_runs.items():
        scores = dict(got_runs[qid])
        rank = {pid: r for r, (pid, _) in enumerate(got_runs[qid])}
        # The top 20 may swap a passage tied (to 1e-4) at the cut; every other passage is in both.
        cut = hits[-1][1]
        for pid, score in hits:
            if pid not in scores:
                assert abs(score - cut) <= 1e-4, (qid, pid)
                continue
            assert scores[pid] == pytest.approx(score, abs=1e-4), (qid, pid)
        for (first, first_score), (second, second_score) in zip(hits, hits[1:], strict=False):
            if first_score - second_score > 1e-4 and first in rank and second in rank:
                assert rank[first] < rank[second], (qid, first, second)


def test_index_and_search_with_onnx_give_the_torch_run(small_dataset: Path, two_encoders: Path,
                                                       tmp_path: Path) -> None:
    torch_index, torch_run = index_and_search(small_dataset, two_encoders, tmp_path / "torch", "torch")
    onnx_index, onnx_run = index_and_search(small_dataset, two_encoders, tmp_path / "onnx", "onnx")
    assert load_dense_manifest(tmp_path / "onnx")["encoding"]["backend"] == "onnx"
    assert load_dense_manifest(tmp_path / "torch")["encoding"]["backend"] == "torch"
    # One index's vectors are the other's; the same encoder (fingerprint) either way.
    torch_ids, torch_vectors = index_contents(tmp_path / "torch")
    onnx_ids, onnx_vectors = index_contents(tmp_path / "onnx")
    assert onnx_ids == torch_ids
    np.testing.assert_allclose(onnx_vectors, torch_vectors, atol=1e-4, rtol=0)
    assert (load_dense_manifest(tmp_path / "onnx")["encoder"]["passage_fingerprint"]
            == load_dense_manifest(tmp_path / "torch")["encoder"]["passage_fingerprint"])
    assert len(torch_run) == 20 * len(Dataset(small_dataset).queries("test"))
    assert_same_run(onnx_run, torch_run)
    meta = json.loads(Path(f"{onnx_index}.meta.json").read_text())
    assert meta["dense"]["backend"] == "onnx" and meta["dense"]["passages_backend"] == "onnx"
    assert json.loads(Path(f"{torch_index}.meta.json").read_text())["dense"]["backend"] == "torch"
    # Queries encoded by ONNX Runtime over the passages torch encoded: the torch run too.
    mixed = tmp_path / "mixed.trec"
    invoke("search", "--index", tmp_path / "torch", "--queries", small_dataset / "queries" / "test.jsonl", "--out",
           mixed, "--k", 20, "--retriever", "dense", "--backend", "onnx", "--device", "cpu")
    assert_same_run([line.split() for line in mixed.read_text().splitlines()], torch_run)
    # int8, ad hoc
    answer = invoke("query", "--index", tmp_path / "onnx", "--mention", "fire", "--context", "A fire hit Lima.",
                    "--retriever", "dense", "--backend", "onnx-int8", "--k", 3, "--json", "--device", "cpu")
    result = json.loads(answer.output)
    assert len(result["hits"]) == 3 and all(np.isfinite(hit["score"]) for hit in result["hits"])


def test_cli_backend_errors_are_one_line(small_dataset: Path, two_encoders: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(two_encoders, plain, ignore=shutil.ignore_patterns("onnx"))
    result = invoke("index", small_dataset, "--dense", "--encoder", plain, "--out", tmp_path / "idx", "--backend",
                    "onnx", "--device", "cpu", expect_error=True)
    assert f"run `corefsearch export-onnx {plain}` first" in flat(result.output)
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "idx" / "dense").exists()
    result = invoke("index", small_dataset, "--out", tmp_path / "idx", "--backend", "onnx", expect_error=True)
    assert "add --dense" in flat(result.output)
    result = invoke("index", small_dataset, "--dense", "--encoder", two_encoders, "--out", tmp_path / "idx",
                    "--backend", "tensorrt", expect_error=True)
    assert "--backend must be one of torch, onnx, onnx-int8" in flat(result.output)
    # An index of the never-exported folder, searched with --backend onnx: it says what to run.
    build_dense_index(small_dataset, tmp_path / "idx", str(plain), device="cpu", chunk_size=CHUNK)
    result = invoke("search", "--index", tmp_path / "idx", "--queries", small_dataset / "queries" / "test.jsonl",
                    "--out", tmp_path / "r.trec", "--retriever", "dense", "--backend", "onnx", "--device", "cpu",
                    expect_error=True)
    assert f"run `corefsearch export-onnx {plain}` first" in flat(result.output)
    assert not (tmp_path / "r.trec").exists()
    # export-onnx on a plain Hugging Face folder, and --out with a retriever folder
    result = invoke("export-onnx", tmp_path / "idx", expect_error=True)
    assert "is not a reader, retriever, mention encoder or detector folder" in flat(result.output)
    assert "--out DIR" in flat(result.output)
    result = invoke("export-onnx", two_encoders, "--out", tmp_path / "copy", expect_error=True)
    assert "is a retriever folder" in flat(result.output) and not (tmp_path / "copy").exists()


def test_a_shipped_retriever_searches_the_index_of_its_trained_folder_with_int8(small_dataset: Path, two_encoders: Path,
                                                                                 tmp_path: Path) -> None:
    """The inference-only copy (``export-onnx --ship``): onnx-int8 by default, recorded as such, the same fingerprint
    as the trained folder, and ``--backend torch`` refused in one line."""
    from corefsearch.export.ship import write_shipped

    shipped = tmp_path / "shipped"
    write_shipped(two_encoders, shipped, {"name": "shipped", "description": "A tiny DPR retriever.", "recipe": "-",
                                          "data": [], "scores": {"dev": {}, "test": {}}, "limits": "None."})
    build_dense_index(small_dataset, tmp_path / "torch", str(two_encoders), device="cpu", chunk_size=CHUNK)
    queries = small_dataset / "queries" / "test.jsonl"
    runs = {}
    for name, extra in (("shipped", ["--encoder", shipped]), ("int8", ["--backend", "onnx-int8"])):
        runs[name] = tmp_path / f"{name}.trec"
        invoke("search", "--index", tmp_path / "torch", "--queries", queries, "--out", runs[name], "--k", 20,
               "--retriever", "dense", "--device", "cpu", *extra)
    assert runs["shipped"].read_text() == runs["int8"].read_text()
    assert json.loads(Path(f"{runs['shipped']}.meta.json").read_text())["dense"]["backend"] == "onnx-int8"
    invoke("index", small_dataset, "--dense", "--encoder", shipped, "--out", tmp_path / "int8", "--device", "cpu",
           "--chunk-size", CHUNK)
    manifest = load_dense_manifest(tmp_path / "int8")
    assert manifest["encoding"]["backend"] == "onnx-int8"
    assert manifest["encoder"]["passage_fingerprint"] == load_dense_manifest(tmp_path / "torch")["encoder"][
        "passage_fingerprint"]
    result = invoke("search", "--index", tmp_path / "torch", "--queries", queries, "--out", tmp_path / "t.trec",
                    "--retriever", "dense", "--device", "cpu", "--encoder", shipped, "--backend", "torch",
                    expect_error=True)
    assert "ships only its int8 ONNX export" in flat(result.output) and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "t.trec").exists()


def test_zero_shot_model_exported_to_out_searches_its_index(small_dataset: Path, tiny_bert: Path,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "exported"
    result = invoke("export-onnx", tiny_bert, "--out", out)
    assert f"--encoder {out}" in flat(result.output) and str(tmp_path / ".exported") not in result.output
    assert (out / "query_encoder" / "onnx" / "model_qint8.onnx").is_file() and not (tiny_bert / "onnx").exists()
    zero_shot, copy = BiEncoder.load(str(tiny_bert), "cpu"), BiEncoder.load(str(out), "cpu")
    assert copy.config.shared_encoder and copy.config.pooling == "mean" and not copy.config.markers
    assert copy.passage_fingerprint() == zero_shot.passage_fingerprint()  # the same encoder
    # An index built with the model itself (torch), searched through the exported copy (ONNX).
    torch_run = index_and_search(small_dataset, tiny_bert, tmp_path / "torch", "torch")[1]
    run = tmp_path / "onnx.trec"
    invoke("search", "--index", tmp_path / "torch", "--queries", small_dataset / "queries" / "test.jsonl", "--out",
           run, "--k", 20, "--retriever", "dense", "--backend", "onnx", "--encoder", out, "--device", "cpu")
    assert_same_run([line.split() for line in run.read_text().splitlines()], torch_run)
    result = invoke("export-onnx", tiny_bert, "--out", out, expect_error=True)  # not over an existing copy
    assert "already exists and is not empty" in flat(result.output)


def test_shards_of_different_backends_are_not_merged(small_dataset: Path, two_encoders: Path,
                                                     tmp_path: Path) -> None:
    for shard, backend in (((0, 2), "torch"), ((1, 2), "onnx")):
        build_dense_index(small_dataset, tmp_path, str(two_encoders), shard=shard, backend=backend, device="cpu",
                          chunk_size=CHUNK)
    with pytest.raises(InputError, match="encoded with different backends .*`--backend torch"):
        merge_dense_shards(small_dataset, tmp_path, 2)
    build_dense_index(small_dataset, tmp_path, str(two_encoders), shard=(1, 2), device="cpu", chunk_size=CHUNK,
                      overwrite=True)
    merge_dense_shards(small_dataset, tmp_path, 2)
    assert load_dense_manifest(tmp_path)["encoding"]["backend"] == "torch"
