"""FAISS on the GPU (the floor: the dense index and the clusterer's kNN graph both use it).

With ``--device cuda`` and a FAISS build that has GPU support (``corefsearch[gpu]``), exact and
inverted-file indexes are copied to the GPU (:func:`to_gpu`) to be built and searched there, and
copied back (:func:`to_cpu`) before anything is written, so every index on disk is a CPU index. With
the CPU build (``faiss-cpu``) a CUDA device warns once and FAISS stays on the CPU.
"""

from __future__ import annotations

from typing import Any

GPU_MAX_K = 2048  # FAISS's GPU search returns at most this many neighbours; deeper searches run on the CPU
_GPU_RESOURCES: dict[int, Any] = {}  # one StandardGpuResources per GPU, alive as long as the indexes on it
_warned_no_gpu_faiss = False


def faiss_gpus() -> int:
    """The GPUs FAISS can use here: 0 with the CPU build (``faiss-cpu``)."""
    import faiss

    count = getattr(faiss, "get_num_gpus", None)
    return int(count()) if count is not None else 0


def faiss_on_gpu(device: str) -> bool:
    """Whether FAISS works on the GPU for ``device`` (a resolved device: ``cuda``, ``cuda:N`` or ``cpu``). A
    CUDA device with the CPU build of FAISS warns once and keeps FAISS on the CPU."""
    global _warned_no_gpu_faiss
    if not str(device).startswith("cuda"):
        return False
    if faiss_gpus() == 0:
        if not _warned_no_gpu_faiss:
            import warnings

            warnings.warn("--device cuda: this FAISS build has no GPU support (faiss-cpu), so the FAISS index is "
                          "built and searched on the CPU; see the README's GPU install (`corefsearch[gpu]`)",
                          stacklevel=2)
            _warned_no_gpu_faiss = True
        return False
    return True


def to_gpu(index: Any, device: str) -> Any:
    """A copy of a CPU ``index`` on the GPU of ``device`` (``cuda`` is GPU 0)."""
    import faiss

    number = int(str(device).split(":")[1]) if ":" in str(device) else 0
    if number not in _GPU_RESOURCES:
        _GPU_RESOURCES[number] = faiss.StandardGpuResources()
    options = faiss.GpuClonerOptions()
    # IVF-PQ's lookup tables (m sub-quantizers × 256 codes) outgrow a GPU block's shared memory in fp32
    # for m = 64; fp16 tables are what FAISS's GPU IVF-PQ uses for them.
    options.useFloat16LookupTables = True
    return faiss.index_cpu_to_gpu(_GPU_RESOURCES[number], number, index, options)


def to_cpu(index: Any) -> Any:
    import faiss

    return faiss.index_gpu_to_cpu(index)


def set_nprobe(index: Any, nprobe: int) -> None:
    """The inverted lists an IVF index (on the CPU or the GPU) visits per query."""
    import faiss

    if type(index).__name__.startswith("Gpu"):
        faiss.GpuParameterSpace().set_index_parameter(index, "nprobe", nprobe)
    else:
        faiss.extract_index_ivf(index).nprobe = nprobe
