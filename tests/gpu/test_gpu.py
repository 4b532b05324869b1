"""On a GPU: ``auto`` precision is bf16 there, bf16 rankings equal fp32's within tolerance, and FAISS
builds and searches there the index the CPU builds (written as a CPU index)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import a_query, tiny_reader

from corefsearch.base import precision


def test_auto_precision_is_bf16_on_a_gpu_that_has_it() -> None:
    import torch

    assert precision.resolve("auto", "cuda") == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    assert precision.resolve("auto", "cpu") == "fp32"


def test_bf16_rankings_equal_fp32_within_tolerance(tiny_base: Path) -> None:
    from corefsearch.dense.encoder import EncoderConfig, TextEncoder
    from corefsearch.reader.read import Reader

    rng = np.random.default_rng(0)
    words = ["storm", "coast", "quake", "city", "fire", "mill", "crews", "rain", "smoke", "blaze", "night"]
    texts = [" ".join(rng.choice(words, 12)) for _ in range(64)]
    encoder = TextEncoder.load(str(tiny_base), EncoderConfig(pooling="mean"), device="cuda")
    full = encoder.encode_passages([""] * len(texts), texts, max_length=32)
    with precision.using("bf16"):
        reduced = encoder.encode_passages([""] * len(texts), texts, max_length=32)
    top_full = np.argsort(-(full @ full[0]))[:10]
    top_reduced = np.argsort(-(reduced @ reduced[0]))[:10]
    assert len(set(top_full) & set(top_reduced)) >= 8
    model = tiny_reader(tiny_base, "integrated")
    model.model.to("cuda")
    model.head.to("cuda")
    model.device = "cuda"
    reader = Reader(model)
    passages = [(f"p{i}", t) for i, t in enumerate(texts[:20])]
    order_full = [h.passage_id for h in reader.read(a_query(), passages)]
    with precision.using("bf16"):
        order_reduced = [h.passage_id for h in reader.read(a_query(), passages)]
    assert len(set(order_full[:5]) & set(order_reduced[:5])) >= 4


@pytest.mark.usefixtures("faiss_gpu")
@pytest.mark.parametrize("kind", ["flat", "ivfpq"])
def test_a_gpu_built_index_is_the_cpu_built_one(kind: str) -> None:
    import faiss

    from corefsearch.dense import faiss_index

    rng = np.random.default_rng(1)
    count = faiss_index.IVFPQ_MIN_PASSAGES if kind == "ivfpq" else 2_000
    vectors = rng.standard_normal((count, 64)).astype(np.float32)
    parameters = faiss_index.faiss_parameters(kind, 64, count)
    built = {device: faiss_index.build_index(parameters, 64, count, lambda: [vectors],
                                             lambda n: vectors[:n], device) for device in ("cpu", "cuda")}
    assert type(built["cuda"]).__name__ == type(built["cpu"]).__name__  # written as a CPU index
    queries = vectors[:50]
    faiss_index.configure_search(built["cpu"], parameters, 10)
    faiss_index.configure_search(built["cuda"], parameters, 10)
    _, cpu_rows = built["cpu"].search(queries, 10)
    _, gpu_rows = built["cuda"].search(queries, 10)
    if kind == "flat":
        assert np.array_equal(faiss.rev_swig_ptr(built["cpu"].get_xb(), count * 64),
                              faiss.rev_swig_ptr(built["cuda"].get_xb(), count * 64))
        assert np.array_equal(cpu_rows, gpu_rows)
    else:  # k-means on the GPU finds other centroids: the same neighbours, mostly
        overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(cpu_rows, gpu_rows, strict=True)])
        assert overlap >= 0.8


@pytest.mark.usefixtures("faiss_gpu")
def test_the_knn_graph_on_the_gpu_is_the_cpu_one() -> None:
    from corefsearch.cluster.agglomerative import knn_edges

    vectors = np.random.default_rng(2).standard_normal((500, 32)).astype(np.float32)
    cpu = knn_edges(vectors, 10, "cpu")
    gpu = knn_edges(vectors, 10, "cuda")
    assert np.array_equal(cpu[0], gpu[0]) and np.array_equal(cpu[1], gpu[1])
    assert np.allclose(cpu[2], gpu[2])
