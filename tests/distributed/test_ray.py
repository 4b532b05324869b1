"""The Ray path (`--ray`): a local Ray cluster of 2 CPUs started here, and tiny random models built
here. Dense encoding (`index --dense --ray`), a reader's re-ranking (`search --reader --ray`) and the
mention encoder (`cluster --method encoder --ray`) must give exactly what the local path gives; a
bad address or a missing Ray is a one-line error.

The workers run one torch thread each, and the local runs here do too (the `one_thread` fixture),
so the same batches give the same floats bit for bit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    build_tiny_dataset,
    cluster_words,
    corpus_words,
    frequent_words,
    index_contents,
    make_tiny_bert,
    save_mention_encoder,
    save_tiny_bert,
    tiny_reader,
    write_cluster_dataset,
)
from typer.testing import CliRunner

from corefsearch.cli import app
from corefsearch.dense import faiss_index
from corefsearch.dense.indexing import build_dense_index
from corefsearch.dense.store import load_dense_manifest
from corefsearch.distributed.session import fatal_signal_handlers_kept

ray = pytest.importorskip("ray")

runner = CliRunner(env={"COLUMNS": "250"})
# small_dataset (conftest.py): 96 passages of 24 generic documents
CHUNK = 10  # passages per chunk: 10 chunks, 5 per worker's shard


@pytest.fixture(scope="module", autouse=True)
def local_cluster() -> Any:
    """A Ray cluster of 2 CPUs on this machine, for the whole module; the CLI uses this connection."""
    # The JVM's signal handlers kept, as the CLI keeps them (else the Java tests after these crash).
    with fatal_signal_handlers_kept():
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    with fatal_signal_handlers_kept():
        ray.shutdown()


pytestmark = pytest.mark.usefixtures("one_thread")  # the local runs on one torch thread, as the workers


def invoke(*args: object, expect_error: bool = False) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == (1 if expect_error else 0), result.output
    return " ".join(result.output.split())


# --- dense encoding ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("ray-bert"), frequent_words(small_dataset), seed=0)


def test_ray_encoding_gives_the_vectors_of_the_local_path(small_dataset: Path, encoder: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    local = tmp_path / "local"
    build_dense_index(small_dataset, local, str(encoder), chunk_size=CHUNK, device="cpu")
    on_ray = tmp_path / "ray"
    checked: list[str] = []  # --faiss is checked once on the Ray path too (not again by the merge)
    check = faiss_index.check_faiss_type
    monkeypatch.setattr(faiss_index, "check_faiss_type", lambda t: (checked.append(t), check(t))[1])
    output = invoke("index", small_dataset, "--out", on_ray, "--dense", "--encoder", encoder, "--chunk-size", CHUNK,
                    "--device", "cpu", "--ray", "auto", "--ray-workers", 2)
    assert "Encoded 96 passages" in output and "by 2 workers" in output
    assert checked == ["flat"]
    ids, vectors = index_contents(on_ray)
    local_ids, local_vectors = index_contents(local)
    assert ids == local_ids
    assert np.array_equal(vectors, local_vectors)  # the same batches on the workers: bit for bit
    manifest, local_manifest = load_dense_manifest(on_ray), load_dense_manifest(local)
    assert manifest["encoder"] == local_manifest["encoder"]
    assert manifest["encoding"]["shards"] == 2 and manifest["encoding"]["encoded"] == 96
    # The shards are those `--shard I/2` writes: 5 chunks of 10 passages, then 4 chunks and 6 passages.
    for i, rows in ((0, [0, 50]), (1, [50, 96])):
        shard = json.loads((on_ray / "dense-shards" / f"shard-{i}-of-2" / "manifest.json").read_text())
        assert shard["rows"] == rows and shard["encoding"]["ray"]["workers"] == 2
    assert not list((on_ray / "dense-shards").glob("*.partial"))


def test_ray_encoding_keeps_the_complete_shards_of_an_earlier_run(small_dataset: Path, encoder: Path,
                                                                  tmp_path: Path) -> None:
    from corefsearch.distributed.dense_encoding import build_dense_index_on_ray
    from corefsearch.distributed.session import RayOptions

    for i in range(2):  # the shards `--shard I/2` writes on one machine
        build_dense_index(small_dataset, tmp_path, str(encoder), shard=(i, 2), chunk_size=CHUNK, device="cpu")
    summary = build_dense_index_on_ray(small_dataset, tmp_path, str(encoder), RayOptions("auto", 2),
                                       chunk_size=CHUNK, device="cpu")
    assert (summary.encoded, summary.resumed, summary.ray_workers) == (0, 96, 2)
    reference = tmp_path / "reference"
    build_dense_index(small_dataset, reference, str(encoder), chunk_size=CHUNK, device="cpu")
    assert np.array_equal(index_contents(tmp_path)[1], index_contents(reference)[1])


def test_bad_ray_options_are_clear_errors(small_dataset: Path, encoder: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    common = ("index", small_dataset, "--out", tmp_path / "i", "--dense", "--encoder", encoder, "--device", "cpu")
    output = invoke(*common, "--ray", "127.0.0.1:1", expect_error=True)
    assert "error: --ray 127.0.0.1:1: no Ray cluster answers there" in output and "ray start --head" in output
    output = invoke(*common, "--ray", "not-an-address", expect_error=True)
    assert "expected auto, HOST:PORT" in output
    output = invoke(*common, "--ray-workers", 2, expect_error=True)
    assert "add --ray" in output
    output = invoke(*common, "--ray", "auto", "--ray-workers", 3, expect_error=True)
    assert "--ray-workers 3: the Ray cluster has 2 CPUs, room for 2 workers" in output
    output = invoke(*common, "--ray", "auto", "--shard", "0/2", expect_error=True)
    assert "leave out --shard" in output
    assert not (tmp_path / "i").exists()
    monkeypatch.setitem(sys.modules, "ray", None)  # as if corefsearch were installed without the ray extra
    output = invoke(*common, "--ray", "auto", expect_error=True)
    assert 'pip install "corefsearch[ray]"' in output


# --- re-ranking with a reader -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def reader_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The tiny corpus of the reader tests, its dense index (no Java) and an untrained reader."""
    dataset = build_tiny_dataset(tmp_path_factory, (4, 2, 0))
    base = save_tiny_bert(tmp_path_factory.mktemp("reader-bert"), corpus_words(), seed=0,
                          max_positions=128)
    index = tmp_path_factory.mktemp("reader-index")
    build_dense_index(dataset, index, str(base), device="cpu")
    reader = tmp_path_factory.mktemp("reader") / "reader"
    tiny_reader(base, "integrated").save(reader)  # seeded, as the reader tests' untrained readers
    return dataset, index, reader


def test_ray_reranking_gives_the_run_and_spans_of_the_local_path(reader_setup: tuple[Path, Path, Path],
                                                                 tmp_path: Path) -> None:
    dataset, index, reader = reader_setup
    common = ("search", "--index", index, "--queries", dataset / "queries" / "dev.jsonl", "--retriever", "dense",
              "--k", 12, "--reader", reader, "--rerank-k", 5, "--rerank-fusion", "rrf", "--device", "cpu")
    invoke(*common, "--out", tmp_path / "local.trec")
    invoke(*common, "--out", tmp_path / "ray.trec", "--ray", "auto", "--ray-workers", 2)
    local, on_ray = (tmp_path / "local.trec").read_text(), (tmp_path / "ray.trec").read_text()
    assert len({line.split()[0] for line in local.splitlines()}) > 2  # several queries, so several blocks
    assert on_ray == local
    # The spans are the same; their float scores may differ in the 8th digit (the workers batch other windows).
    spans = [json.loads(line) for line in (tmp_path / "ray.trec.spans.jsonl").read_text().splitlines()]
    local_spans = [json.loads(line) for line in (tmp_path / "local.trec.spans.jsonl").read_text().splitlines()]
    assert [{**s, "score": None} for s in spans] == [{**s, "score": None} for s in local_spans]
    assert all(abs(a["score"] - b["score"]) < 1e-6 for a, b in zip(spans, local_spans, strict=True))
    meta = json.loads((tmp_path / "ray.trec.meta.json").read_text())
    assert meta["reader"]["ray"] == {"workers": 2}


def test_ray_reranking_reads_only_the_readers_settings_here(reader_setup: tuple[Path, Path, Path], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from corefsearch.reader.model import CrossEncoderReader

    dataset, index, reader = reader_setup

    def no_weights_here(*args: object, **kwargs: object) -> None:
        raise AssertionError("the driver loaded the reader's weights")

    monkeypatch.setattr(CrossEncoderReader, "load", no_weights_here)  # this process only: not the Ray workers
    invoke("search", "--index", index, "--queries", dataset / "queries" / "dev.jsonl", "--retriever", "dense",
           "--k", 8, "--reader", reader, "--rerank-k", 4, "--device", "cpu", "--out", tmp_path / "ray.trec",
           "--ray", "auto", "--ray-workers", 1)
    meta = json.loads((tmp_path / "ray.trec.meta.json").read_text())
    assert meta["reader"]["head"] == "integrated" and meta["reader"]["fusion_from"] == "model"
    output = invoke("search", "--index", index, "--queries", dataset / "queries" / "dev.jsonl", "--retriever",
                    "dense", "--reader", index, "--out", tmp_path / "bad.trec", "--ray", "auto", expect_error=True)
    assert "is not a reader" in output and not (tmp_path / "bad.trec").exists()


def test_ray_without_a_reader_is_an_error(reader_setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    dataset, index, _ = reader_setup
    output = invoke("search", "--index", index, "--queries", dataset / "queries" / "dev.jsonl", "--retriever",
                    "dense", "--out", tmp_path / "r.trec", "--ray", "auto", expect_error=True)
    assert "add --reader" in output


# --- the mention encoder ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mention_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = save_tiny_bert(tmp_path_factory.mktemp("mention-bert"), cluster_words(), seed=0, max_positions=160)
    folder = save_mention_encoder(base, tmp_path_factory.mktemp("mention-model") / "encoder")
    return write_cluster_dataset(tmp_path_factory.mktemp("mention-data") / "ds"), folder


def test_ray_mention_encoding_gives_the_vectors_and_clusters_of_the_local_path(
        mention_setup: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from corefsearch.cluster import encoder as cluster_encoder

    dataset, model = mention_setup
    clustered: list[np.ndarray] = []  # the vectors each run clusters
    cluster_vectors = cluster_encoder.cluster_vectors

    def spy(mention_ids: Any, vectors: Any, *args: Any, **kwargs: Any) -> Any:
        clustered.append(np.array(vectors))
        return cluster_vectors(mention_ids, vectors, *args, **kwargs)

    monkeypatch.setattr(cluster_encoder, "cluster_vectors", spy)
    # Batches of 2: the 4 batches of the train split's 8 mentions go to the 2 workers in 4 blocks.
    common = ("cluster", dataset, "--method", "encoder", "--model", model, "--split", "train", "--device", "cpu",
              "--batch-size", 2)
    invoke(*common, "--out", tmp_path / "local.jsonl")
    invoke(*common, "--out", tmp_path / "ray.jsonl", "--ray", "auto", "--ray-workers", 2)
    local, on_ray = clustered
    assert local.shape[0] > 4 and np.array_equal(on_ray, local)
    assert (tmp_path / "ray.jsonl").read_text() == (tmp_path / "local.jsonl").read_text()
    output = invoke("cluster", dataset, "--method", "lemma", "--out", tmp_path / "l.jsonl", "--ray", "auto",
                    expect_error=True)
    assert "--ray: only with --method encoder" in output


def _native_handler(number: int) -> bytes:
    import ctypes

    buffer = ctypes.create_string_buffer(512)
    assert ctypes.CDLL(None).sigaction(number, None, buffer) == 0
    return buffer.raw[:ctypes.sizeof(ctypes.c_void_p)]  # sa_handler comes first


# --- a failing worker -------------------------------------------------------------------------------


def test_an_error_in_a_worker_is_the_users_error(encoder: Path, small_dataset: Path, tmp_path: Path) -> None:
    # Last of the Ray runs in this module: Ray Data releases a failed run's encoder actor (and its CPU)
    # on its own time, and the other Ray tests want both of the cluster's CPUs.
    import shutil

    broken = tmp_path / "dataset"
    shutil.copytree(small_dataset, broken)
    lines = (broken / "passages.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[57] = lines[57].replace('"text"', '"txet"')  # the driver only hashes; the worker reading it fails
    (broken / "passages.jsonl").write_text("".join(lines), encoding="utf-8")
    output = invoke("index", broken, "--out", tmp_path / "i", "--dense", "--encoder", encoder, "--chunk-size", CHUNK,
                    "--device", "cpu", "--ray", "auto", "--ray-workers", 1, expect_error=True)
    assert f"{broken / 'passages.jsonl'}:58" in output and "Traceback" not in output
    assert not (tmp_path / "i" / "dense").exists()


def test_native_signal_handlers_are_put_back_after_the_block() -> None:
    # What ray.init and ray.shutdown do to the JVM's handlers (install their own, reset them to the
    # default) is undone: a native handler changed inside the block is the old one after it.
    import signal

    before = _native_handler(signal.SIGUSR2)
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        with fatal_signal_handlers_kept():
            signal.signal(signal.SIGUSR2, lambda *_: None)  # Python's own native trampoline
            assert _native_handler(signal.SIGUSR2) != before
        assert _native_handler(signal.SIGUSR2) == before
    finally:
        signal.signal(signal.SIGUSR2, previous)


# --- mention detection ------------------------------------------------------------------------------


def test_ray_detection_gives_the_mentions_of_the_local_path(small_dataset: Path, encoder: Path,
                                                            tmp_path: Path) -> None:
    import shutil

    from corefsearch.detect.model import DetectorConfig, MentionDetector
    from corefsearch.detect.run import detect_dataset

    detector = tmp_path / "detector"
    MentionDetector.from_base(str(encoder), DetectorConfig(max_length=32, stride=8)).save(detector)
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    shutil.copytree(small_dataset, local)
    shutil.copytree(small_dataset, on_ray)
    detect_dataset(local, str(detector), device="cpu", shard_size=40)
    output = invoke("detect", on_ray, "--model", detector, "--device", "cpu", "--ray", "auto", "--ray-workers", 2)
    assert "in 96 passages" in output
    assert (on_ray / "predicted_mentions.jsonl").read_text() == (local / "predicted_mentions.jsonl").read_text()
    assert json.loads((on_ray / "predicted_mentions.json").read_text())["ray"] is True
