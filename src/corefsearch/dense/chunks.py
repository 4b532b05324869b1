"""The pieces a dense index is built from: chunks of passages, encoded, saved and resumed, and the
shard and index folders written from their vectors.

Apart from the entry points that use them (:mod:`corefsearch.dense.indexing`: ``build_dense_index``,
``merge_dense_shards``) because three paths build with the same pieces and must stay identical:
a local build or shard, ``corefsearch add`` (which encodes new passages with :func:`encode_chunk`)
and the Ray path (:mod:`corefsearch.distributed.dense_encoding`, whose workers run
:func:`encode_chunk` and whose driver saves, resumes and writes shards with the rest). The layout is
in :mod:`corefsearch.dense.store`; how the chunks make shards, see ``indexing``'s module doc.
"""

from __future__ import annotations

import hashlib
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import (
    DENSE_INDEX,
    DENSE_PARTIAL,
    DENSE_SHARD,
    find_manifest,
    manifest_record,
    versions,
    write_manifest,
)
from corefsearch.base.errors import InputError
from corefsearch.base.progress import track
from corefsearch.dense import faiss_index
from corefsearch.dense.store import (
    FAISS_FILE,
    IDS_FILE,
    MANIFEST,
    PYSERINI_DOCID_FILE,
    PYSERINI_INDEX_FILE,
    VECTORS_FILE,
    portable_reference,
)
from corefsearch.io.outputs import clean_temporaries_in
from corefsearch.io.write import atomic_directory, atomic_file

if TYPE_CHECKING:
    import numpy as np

    from corefsearch.dense.model import BiEncoder

CHUNK_SIZE = 8192  # passages per chunk: the unit of encoding, saving, resuming and sharding


def shard_chunks(n_chunks: int, shard: tuple[int, int] | None) -> range:
    """The chunks a shard encodes: a contiguous block, the blocks of all shards tiling [0, n_chunks)."""
    if shard is None:
        return range(n_chunks)
    index, count = shard
    return range(index * n_chunks // count, (index + 1) * n_chunks // count)


def scan_passages(path: Path) -> tuple[str, int]:
    """The sha256 of a passages file and its number of records (non-blank lines), in one pass."""
    digest = hashlib.sha256()
    count = 0
    with Path(path).open("rb") as handle:
        for line in handle:
            digest.update(line)
            if line.strip():
                count += 1
    return digest.hexdigest(), count


def index_versions() -> dict[str, str]:
    """The versions a dense index's manifest records."""
    return versions("faiss", "torch", "transformers", "numpy")


def encoder_record(model: BiEncoder) -> dict[str, Any]:
    """What the manifests say about the encoder: reference, passage fingerprint, config, dimension."""
    description = model.description()
    description["reference"] = portable_reference(str(description["reference"]))
    return description


# --- vectors on disk ------------------------------------------------------------------------


class VectorFiles:
    """Row-ordered ``.npy`` vector files with their ids files, read one file at a time (mmap)."""

    def __init__(self, files: list[tuple[Path, Path]], dimension: int) -> None:
        self.files = files
        self.dimension = dimension

    def arrays(self) -> Iterator[np.ndarray]:
        import numpy as np

        for vectors_path, _ in self.files:
            vectors = np.load(vectors_path, mmap_mode="r")
            if len(vectors):
                yield np.asarray(vectors, dtype=np.float32)

    def ids(self) -> Iterator[str]:
        for _, ids_path in self.files:
            with ids_path.open(encoding="utf-8") as handle:
                for line in handle:
                    yield line.rstrip("\n")

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` rows drawn at random without replacement (seeded), in row order."""
        import numpy as np

        sizes = [int(np.load(path, mmap_mode="r").shape[0]) for path, _ in self.files]
        total = sum(sizes)
        rows = np.sort(np.random.default_rng(seed).choice(total, size=min(n, total), replace=False))
        parts, offset = [], 0
        for (path, _), size in zip(self.files, sizes, strict=True):
            mine = rows[(rows >= offset) & (rows < offset + size)] - offset
            if len(mine):
                parts.append(np.asarray(np.load(path, mmap_mode="r")[mine], dtype=np.float32))
            offset += size
        return np.concatenate(parts) if parts else np.zeros((0, self.dimension), dtype=np.float32)


def save_chunk(chunks_dir: Path, number: int, vectors: np.ndarray, ids: list[str]) -> None:
    """Save one encoded chunk: the vectors first, then the ids (whose presence marks it complete)."""
    import numpy as np

    with atomic_file(chunks_dir / f"{number:05d}.npy", "wb") as handle:
        np.save(handle, vectors)
    with atomic_file(chunks_dir / f"{number:05d}.ids.txt") as handle:
        handle.writelines(f"{passage_id}\n" for passage_id in ids)


def chunk_paths(chunks_dir: Path, number: int) -> tuple[Path, Path]:
    """The vectors and ids files of chunk ``number`` in ``chunks_dir``."""
    return chunks_dir / f"{number:05d}.npy", chunks_dir / f"{number:05d}.ids.txt"


def chunk_is_complete(chunks_dir: Path, number: int, rows: int, dimension: int) -> bool:
    """Whether chunk ``number`` is on disk whole: ``rows`` vectors of ``dimension`` and as many ids."""
    import numpy as np

    vectors_path, ids_path = chunk_paths(chunks_dir, number)
    if not (vectors_path.exists() and ids_path.exists()):
        return False
    try:
        shape = np.load(vectors_path, mmap_mode="r").shape
    except (OSError, ValueError):
        return False
    with ids_path.open(encoding="utf-8") as handle:
        n_ids = sum(1 for _ in handle)
    return shape == (rows, dimension) and n_ids == rows


def open_partial(partial: Path, expected: dict[str, Any]) -> None:
    """Resume in ``partial`` when it was started with the same encoder, passages and chunking
    (``expected``: its :func:`partial_record`); otherwise start over (with a notice when something
    was there)."""
    manifest = find_manifest(partial / MANIFEST, DENSE_PARTIAL)
    if manifest is not None and {"backend": "torch", **manifest} == expected:  # no backend: torch (before 0.x)
        clean_temporaries_in(partial / "chunks")  # chunk files a killed run was writing
        return
    if partial.exists():
        if manifest is None:
            why = "it has no readable manifest"
        elif manifest.get("passage_fingerprint") != expected["passage_fingerprint"]:
            why = "it was encoded with another encoder"
        elif manifest.get("passages_sha256") != expected["passages_sha256"]:
            why = "it was encoded from other passages"
        elif manifest.get("backend", "torch") != expected["backend"]:
            why = f"it was encoded with --backend {manifest.get('backend', 'torch')}"
        else:
            why = "it was encoded with other chunk settings"
        warnings.warn(f"starting the encoding over: {partial} holds an interrupted encoding, but {why}",
                      stacklevel=3)
        shutil.rmtree(partial)
    (partial / "chunks").mkdir(parents=True)
    write_manifest(partial / MANIFEST, expected)


@dataclass
class ChunkPlan:
    """The rows one run encodes, cut into chunks, and which of them are already on disk.

    Chunk ``n`` holds rows ``[n·chunk_size, (n+1)·chunk_size)`` of passages.jsonl (the last one
    fewer); ``chunks`` is the block a run covers (all of them, or one shard's: :func:`shard_chunks`)."""

    count: int  # passages in the dataset
    chunk_size: int
    chunks: range  # chunk numbers this run covers
    done: set[int]

    def rows_of(self, number: int) -> tuple[int, int]:
        return number * self.chunk_size, min(self.count, (number + 1) * self.chunk_size)

    @property
    def rows(self) -> tuple[int, int]:
        if not self.chunks:  # an empty shard (fewer chunks than shards) sits where its block would start
            start = min(self.count, self.chunks.start * self.chunk_size)
            return start, start
        return self.rows_of(self.chunks[0])[0], self.rows_of(self.chunks[-1])[1]

    def size(self, numbers: Any) -> int:
        return sum(self.rows_of(n)[1] - self.rows_of(n)[0] for n in numbers)


def encode_chunk(model: BiEncoder, titles: list[str], texts: list[str], batch_size: int,
                 timer: list[float]) -> Iterator[np.ndarray | int]:
    """Encode one chunk in the token-sorted batches of ``TextEncoder.passage_batches`` (the whole chunk handed
    to it: its sort windows are those of ``encode_passages``); yields each batch's size (for progress), then
    the vectors. The seconds spent tokenising and encoding are added to ``timer[0]``. Every path that encodes
    passages for an index (a build, a shard, ``corefsearch add``, the Ray workers) and the speed benches
    encode through here: the same batches, the same vectors."""
    import numpy as np

    vectors = np.empty((len(texts), model.passage_encoder.dimension), dtype=np.float32)
    batches = model.passage_encoder.passage_batches(titles, texts, model.config.max_passage_len, batch_size)
    while True:
        began = time.perf_counter()
        batch = next(batches, None)
        timer[0] += time.perf_counter() - began
        if batch is None:
            break
        rows, batch_vectors = batch
        vectors[rows] = batch_vectors
        yield len(rows)
    yield vectors


def chunk_vectors(model: BiEncoder, titles: list[str], texts: list[str], batch_size: int,
                  timer: list[float]) -> np.ndarray:
    """The vectors of :func:`encode_chunk`, for a caller without a progress bar of its own."""
    *_, vectors = encode_chunk(model, titles, texts, batch_size, timer)  # the batch sizes, then the vectors
    assert not isinstance(vectors, int)
    return vectors


def partial_record(passages_sha256: str, count: int, encoder_info: dict[str, Any], plan: ChunkPlan,
                   shard: tuple[int, int] | None, backend: str) -> dict[str, Any]:
    """The manifest of an encoding in progress (``*.partial``): what a resumed run must match. The
    Ray path (``corefsearch.distributed.dense_encoding``) writes the same one, so its shards and ``--shard I/N``
    resume each other's chunks."""
    return manifest_record(DENSE_PARTIAL, {
        "passages_sha256": passages_sha256, "passages": count,
        "passage_fingerprint": encoder_info["passage_fingerprint"],
        "dimension": int(encoder_info["dimension"]), "chunk_size": plan.chunk_size, "rows": list(plan.rows),
        "shard": list(shard) if shard else None, "backend": backend}, created=False)


def encoding_record(batch_size: int, chunk_size: int, device: str, backend: str, encoded: int, resumed: int,
                    seconds: float) -> dict[str, Any]:
    """The ``encoding`` field of a dense index or shard manifest."""
    return {"batch_size": batch_size, "chunk_size": chunk_size, "device": device, "backend": backend,
            "encoded": encoded, "resumed": resumed, "seconds": round(seconds, 3),
            "passages_per_second": round(encoded / seconds, 2) if seconds else None}


def common_fields(dataset_dir: Path, passages_sha256: str, count: int, encoder_info: dict[str, Any]
                  ) -> dict[str, Any]:
    """The fields every dense index and shard manifest starts with (after those of :func:`manifest_record`)."""
    return {"dataset": str(Path(dataset_dir).resolve()), "passages_sha256": passages_sha256,
            "passages": count, "encoder": encoder_info}


def write_shard(target: Path, files: VectorFiles, plan: ChunkPlan, shard: tuple[int, int], common: dict[str, Any],
                encoding: dict[str, Any], overwrite: bool, started: float) -> None:
    """Write shard ``target`` (``vectors.npy``, ``ids.txt``, ``manifest.json``) atomically from the
    vector files of its chunks."""
    first, last = plan.rows
    with atomic_directory(target, overwrite=overwrite) as tmp:
        _concatenate(files, last - first, files.dimension, tmp / VECTORS_FILE)
        with atomic_file(tmp / IDS_FILE) as handle:
            handle.writelines(f"{passage_id}\n" for passage_id in files.ids())
        write_manifest(tmp / MANIFEST, manifest_record(DENSE_SHARD, {
            **common, "shard": list(shard), "rows": [first, last], "encoding": encoding, "versions": index_versions(),
            "seconds": round(time.perf_counter() - started, 3)}))


def _concatenate(files: VectorFiles, rows: int, dimension: int, path: Path) -> None:
    """One ``.npy`` of all rows, written through a memory map (never all in memory)."""
    import numpy as np

    if rows == 0:
        np.save(path, np.zeros((0, dimension), dtype=np.float32))
        return
    target = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, dimension))
    offset = 0
    for vectors in files.arrays():
        target[offset:offset + len(vectors)] = vectors
        offset += len(vectors)
    target.flush()
    del target
    if offset != rows:
        raise InputError(f"expected {rows} vectors, found {offset}")


def link_pyserini_names(folder: Path) -> None:
    """``index`` and ``docid`` beside ``faiss.index`` and ``ids.txt``: the names Pyserini's
    ``FaissSearcher(folder, ...)`` reads. Hard links (no extra disk); copies where the file
    system has none."""
    import os

    for name, alias in ((FAISS_FILE, PYSERINI_INDEX_FILE), (IDS_FILE, PYSERINI_DOCID_FILE)):
        source, target = folder / name, folder / alias
        target.unlink(missing_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)


def write_dense_index(target: Path, files: VectorFiles, count: int, parameters: dict[str, Any],
                       overwrite: bool, fields: dict[str, Any], started: float, device: str = "cpu") -> None:
    """Build the FAISS index from the vector files (on the GPU of ``device`` where FAISS can, see
    ``faiss_index.on_gpu``) and write ``target`` atomically, with its manifest: ``fields`` and the FAISS
    ``parameters``, timings (from ``started``) and versions."""
    built = time.perf_counter()
    label = f"Building the FAISS index ({parameters['type']})"
    index = faiss_index.build_index(parameters, files.dimension, count,
                                    lambda: track(files.arrays(), label, total=len(files.files)), files.sample,
                                    device)
    with atomic_directory(target, overwrite=overwrite) as tmp:
        faiss_index.write_index(index, tmp / FAISS_FILE)
        n_ids = 0
        with atomic_file(tmp / IDS_FILE) as handle:
            for passage_id in files.ids():
                handle.write(f"{passage_id}\n")
                n_ids += 1
        if n_ids != count:
            raise InputError(f"expected {count} passage ids, found {n_ids}")
        link_pyserini_names(tmp)
        write_manifest(tmp / MANIFEST, manifest_record(DENSE_INDEX, {
            **fields, "faiss": parameters, "faiss_seconds": round(time.perf_counter() - built, 3),
            "versions": index_versions(), "seconds": round(time.perf_counter() - started, 3)}))
