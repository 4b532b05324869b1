"""FAISS indexes of passage vectors: build, write, read, and the search-time settings.

Scores are inner products (the bi-encoder is trained with dot products), so every index
uses ``METRIC_INNER_PRODUCT``:

- ``flat``: ``IndexFlatIP``, exact.
- ``hnsw``: ``IndexHNSWFlat(d, 32, METRIC_INNER_PRODUCT)``, built with efConstruction 200
  and searched with efSearch 128 (raised to k + 1 when k is larger).
- ``ivfpq``: ``IndexIVFPQ`` over an inner-product coarse quantizer, nlist ≈ 4·√N clipped to
  [1, N/39], m sub-quantizers (the largest of 64/48/32/16/8 that divides d and is at most
  d/4), 8 bits each, trained on a seeded sample of the vectors; nprobe 32 at search time.

The parameters are returned as a plain dict, which the dense index manifest records and
:func:`configure_search` reads back.

On a GPU (``--device cuda`` with a FAISS build that has GPU support, ``corefsearch[gpu]``), flat and
IVF-PQ indexes are built and searched there (:func:`on_gpu`, :func:`to_gpu`); HNSW has no GPU
implementation in FAISS and stays on the CPU. What is written is always the CPU index
(:func:`build_index` copies a GPU-built one back), so an index built on a GPU is searched on a laptop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.faiss_gpu import faiss_on_gpu, set_nprobe, to_cpu, to_gpu

if TYPE_CHECKING:
    import numpy as np

FAISS_TYPES = ("flat", "hnsw", "ivfpq")
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 128
IVFPQ_NBITS = 8
IVFPQ_NPROBE = 32
PQ_CANDIDATES = (64, 48, 32, 16, 8)
GPU_TYPES = ("flat", "ivfpq")  # the types FAISS builds and searches on a GPU (HNSW: CPU only)
# k-means wants at least 39 training points per centroid; 8-bit PQ has 256 centroids.
MIN_POINTS_PER_CENTROID = 39
IVFPQ_MIN_PASSAGES = MIN_POINTS_PER_CENTROID * 2 ** IVFPQ_NBITS


def check_faiss_type(faiss_type: str) -> None:
    if faiss_type not in FAISS_TYPES:
        raise InputError(f"--faiss must be one of {', '.join(FAISS_TYPES)}, got {faiss_type!r}")


def ivfpq_nlist(count: int) -> int:
    """About 4·√N inverted lists, at most N/39 (so that each list trains on 39 points)."""
    return max(1, min(round(4 * math.sqrt(count)), count // MIN_POINTS_PER_CENTROID))


def pq_subquantizers(dimension: int) -> int:
    """The largest of 64/48/32/16/8 that divides d and is at most d/4 (else the largest such divisor)."""
    for m in PQ_CANDIDATES:
        if dimension % m == 0 and m <= dimension / 4:
            return m
    return max(m for m in range(1, max(1, dimension // 4) + 1) if dimension % m == 0)


def faiss_parameters(faiss_type: str, dimension: int, count: int) -> dict[str, Any]:
    """The index parameters for ``count`` vectors of ``dimension``; a clear error when ivfpq cannot train.
    ``faiss_type`` was checked where it entered (:func:`check_faiss_type`); one of no known type is
    still an error here rather than taken for ivfpq."""
    if faiss_type == "flat":
        return {"type": "flat", "class": "IndexFlatIP", "metric": "inner_product"}
    if faiss_type == "hnsw":
        return {"type": "hnsw", "class": "IndexHNSWFlat", "metric": "inner_product", "M": HNSW_M,
                "efConstruction": HNSW_EF_CONSTRUCTION, "efSearch": HNSW_EF_SEARCH}
    if faiss_type != "ivfpq":
        check_faiss_type(faiss_type)  # raises
    if count < IVFPQ_MIN_PASSAGES:
        raise InputError(f"--faiss ivfpq needs at least {IVFPQ_MIN_PASSAGES:,} passages to train its product "
                         f"quantizer ({MIN_POINTS_PER_CENTROID} per each of its {2 ** IVFPQ_NBITS} centroids); "
                         f"this dataset has {count:,}: use --faiss flat (exact, and fast at this size) or hnsw")
    nlist = ivfpq_nlist(count)
    return {"type": "ivfpq", "class": "IndexIVFPQ", "metric": "inner_product", "nlist": nlist,
            "m": pq_subquantizers(dimension), "nbits": IVFPQ_NBITS, "nprobe": min(nlist, IVFPQ_NPROBE),
            "training_sample": ivfpq_training_size(count, nlist)}


def ivfpq_training_size(count: int, nlist: int) -> int:
    """How many vectors train IVF-PQ: 40 per inverted list, at least 10,000 (all when fewer)."""
    return min(count, max(40 * nlist, 10_000))


def new_index(parameters: dict[str, Any], dimension: int) -> Any:
    """An empty (untrained for ivfpq) index for these parameters."""
    import faiss

    kind = parameters["type"]
    if kind == "flat":
        return faiss.IndexFlatIP(dimension)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dimension, parameters["M"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = parameters["efConstruction"]
        return index
    quantizer = faiss.IndexFlatIP(dimension)
    # FAISS's Python wrapper keeps a reference to the quantizer for as long as the index lives.
    return faiss.IndexIVFPQ(quantizer, dimension, parameters["nlist"], parameters["m"], parameters["nbits"],
                            faiss.METRIC_INNER_PRODUCT)


def build_index(parameters: dict[str, Any], dimension: int, count: int,
                chunks: Callable[[], Any], sample: Callable[[int], np.ndarray], device: str = "cpu") -> Any:
    """Build an index from ``chunks()`` (an iterable of float32 arrays, in row order), on the GPU when
    :func:`on_gpu` says so for ``device``; the index returned is on the CPU either way.

    ``sample(n)`` returns ``n`` rows chosen at random (seeded), to train ivfpq.
    """
    import numpy as np

    index = new_index(parameters, dimension)
    gpu = on_gpu(device, parameters["type"])
    if gpu:
        index = to_gpu(index, device)
    if not index.is_trained:
        index.train(np.ascontiguousarray(sample(parameters["training_sample"]), dtype=np.float32))
    added = 0
    for vectors in chunks():
        if len(vectors):
            index.add(np.ascontiguousarray(vectors, dtype=np.float32))
            added += len(vectors)
    if added != count or index.ntotal != count:
        raise InputError(f"the FAISS index holds {index.ntotal} vectors, expected {count}")
    return to_cpu(index) if gpu else index


def on_gpu(device: str, kind: str) -> bool:
    """Whether a dense index of type ``kind`` goes on the GPU for the resolved ``device``."""
    return kind in GPU_TYPES and faiss_on_gpu(device)


def write_index(index: Any, path: Path) -> None:
    import faiss

    faiss.write_index(index, str(path))


def read_index(path: Path, remedy: str = "rebuild the dense index (`corefsearch index DATASET --dense --encoder "
                                       "MODEL --out INDEX --overwrite`)") -> Any:
    """A FAISS index from ``path``; a truncated or foreign file is one ``InputError`` line (FAISS's own
    message is a C++ location followed by the failed check)."""
    import re

    import faiss

    try:
        return faiss.read_index(str(path))
    except RuntimeError as err:
        text = " ".join(str(err).split())
        why = re.sub(r"^Error in .*? at \S+:\d+: ", "", text).removeprefix("Error: ")
        raise InputError(f"{path}: not a readable FAISS index, truncated or damaged ({why[:200]}); {remedy}") from None


SEARCH_OPTIONS = {"efSearch": ("--ef-search", "hnsw"), "nprobe": ("--nprobe", "ivfpq")}
TYPE_NAMES = {"flat": "flat", "hnsw": "HNSW", "ivfpq": "IVF-PQ"}


def check_search_parameters(recorded: dict[str, Any], given: dict[str, int], index: Path) -> dict[str, int]:
    """``given`` (``efSearch``, ``nprobe``), checked against the index type the manifest records:
    ``--ef-search`` tunes an HNSW index, ``--nprobe`` an IVF-PQ one, and neither a flat one."""
    kind = recorded.get("type")
    for name, value in given.items():
        option, wanted = SEARCH_OPTIONS[name]
        if kind != wanted:
            raise InputError(f"{option} tunes the search of an {TYPE_NAMES[wanted]} dense index; {index} holds a "
                             f"dense index of type {TYPE_NAMES.get(str(kind), kind)}: leave out {option}, or build "
                             f"the index with `--faiss {wanted}`")
        at_least_one(option, int(value))
    return {name: int(value) for name, value in given.items()}


def configure_search(index: Any, parameters: dict[str, Any], k: int) -> None:
    """Set the search-time parameters the manifest records (efSearch, nprobe) for a top-``k`` search."""
    import faiss

    kind = parameters.get("type")
    if kind == "hnsw":
        faiss.downcast_index(index).hnsw.efSearch = max(int(parameters.get("efSearch", HNSW_EF_SEARCH)), k)
    elif kind == "ivfpq":
        set_nprobe(index, int(parameters.get("nprobe", IVFPQ_NPROBE)))
