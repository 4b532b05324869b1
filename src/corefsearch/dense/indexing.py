"""Encode a dataset's passages with a retriever's passage encoder and write a FAISS index.

Layout, beside the Lucene index in the same INDEX directory::

    INDEX/dense/faiss.index           the FAISS index (inner product), row r = line r of ids.txt
    INDEX/dense/ids.txt               one passage id per line, in passages.jsonl order
    INDEX/dense/index, INDEX/dense/docid   hard links to faiss.index and ids.txt: the names
                                      Pyserini's FaissSearcher reads (no extra disk)
    INDEX/dense/manifest.json         encoder (reference, passage fingerprint, config, dimension),
                                      passages_sha256, count, FAISS type and parameters, timings, versions
    INDEX/dense.partial/              an encoding in progress (chunks/NNNNN.npy + NNNNN.ids.txt)
    INDEX/dense-shards/shard-I-of-N/  one shard: vectors.npy, ids.txt, manifest.json (no FAISS index)

Encoding streams the passages file and keeps only the ids, titles and texts of one chunk
(8,192 passages) in memory. Within a chunk, passages are sorted by length and cut into
batches (less padding). Each encoded chunk is saved to ``INDEX/dense.partial/chunks/`` at
once, so an interrupted run, started again with the same command, skips the chunks already
on disk; a partial folder written with another encoder or from other passages is discarded
with a notice. The FAISS index is built from the chunk files at the end, in a temporary
folder renamed to ``INDEX/dense`` when complete.

Shards (``--shard I/N``, I from 0 to N−1): chunk j covers rows [j·C, (j+1)·C) of
passages.jsonl (C = chunk size) and shard I takes the contiguous block of chunks
[I·J/N, (I+1)·J/N) of the J chunks. A shard therefore encodes exactly the batches an
unsharded run encodes for those rows, and its vectors are the same. Shards may run at the
same time, on different machines, each resumable in ``INDEX/dense-shards/shard-I-of-N.partial``.
When all N are in ``INDEX/dense-shards/``, ``--merge-shards N`` concatenates them in passage
order into the ``INDEX/dense/`` a single run would have written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch import __version__
from corefsearch.artefacts import now, versions
from corefsearch.datasets.dataset import Dataset, check_built_from
from corefsearch.dense import faiss_index
from corefsearch.errors import InputError, MissingArtefactError
from corefsearch.io.outputs import Output, clean_temporaries_in, model_input, writes_outputs
from corefsearch.io.write import atomic_directory, atomic_file, write_json
from corefsearch.progress import track

if TYPE_CHECKING:
    import numpy as np

    from corefsearch.dense.model import BiEncoder

DENSE_DIR = "dense"
SHARDS_DIR = "dense-shards"
FAISS_FILE = "faiss.index"
IDS_FILE = "ids.txt"
PYSERINI_INDEX_FILE = "index"  # the same file as faiss.index (hard link), for Pyserini's FaissSearcher
PYSERINI_DOCID_FILE = "docid"  # the same file as ids.txt (hard link)
VECTORS_FILE = "vectors.npy"
MANIFEST = "manifest.json"
DENSE_KIND = "corefsearch-dense-index"
SHARD_KIND = "corefsearch-dense-shard"
PARTIAL_KIND = "corefsearch-dense-partial"
FORMAT_VERSION = 1
CHUNK_SIZE = 8192


@dataclass
class DenseIndexSummary:
    path: Path
    passages: int  # rows of the index (or shard)
    encoded: int  # passages encoded by this run
    resumed: int  # passages whose vectors an interrupted run had already saved
    seconds: float
    encode_seconds: float
    dimension: int
    faiss_type: str | None = None  # None for a shard
    shard: tuple[int, int] | None = None
    shards_present: int = 0  # for a shard: how many of the N shards are complete now
    merged_shards: int | None = None
    ray_workers: int | None = None  # encoded on a Ray cluster by this many workers (corefsearch.distributed)

    @property
    def passages_per_second(self) -> float:
        return self.encoded / self.encode_seconds if self.encode_seconds else float("inf")


# --- small helpers --------------------------------------------------------------------------


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` (I from 0 to N−1) as ``(I, N)``."""
    try:
        index_text, count_text = text.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise InputError(f"--shard takes I/N (e.g. 0/4), got {text!r}") from None
    check_shard((index, count))
    return index, count


def check_shard(shard: tuple[int, int]) -> None:
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise InputError(f"--shard I/N: N must be at least 1 and I between 0 and N-1, got {index}/{count}")


def shard_name(shard: tuple[int, int]) -> str:
    return f"shard-{shard[0]}-of-{shard[1]}"


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


def portable_reference(reference: str) -> str:
    """An encoder reference that still works from another directory: a folder becomes absolute."""
    if reference in ("", "default"):
        return "default"
    path = Path(reference)
    return str(path.resolve()) if path.exists() else reference


def _versions() -> dict[str, str]:
    return versions("faiss", "torch", "transformers", "numpy")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def load_encoder(encoder: str | BiEncoder | None, device: str = "auto", backend: str = "torch",
                 sides: tuple[str, ...] = ("query", "passage"), threads: int | None = None) -> BiEncoder:
    """A retriever from a folder, a Hugging Face name or ``default``; an instance passes through.
    ``backend`` ``onnx`` or ``onnx-int8``: the encoders of ``sides`` run with ONNX Runtime on the CPU
    (``BiEncoder.use_backend``; an instance is switched in place)."""
    from corefsearch.dense.model import BiEncoder
    from corefsearch.models import check_model_folder, resolve_device
    from corefsearch.onnx_backend import check_backend_device

    check_backend_device(backend, device)
    if isinstance(encoder, BiEncoder):
        model = encoder
    else:
        check_model_folder(encoder, "--encoder")
        model = BiEncoder.load(encoder or "default", resolve_device(device if backend == "torch" else "cpu"))
    model.use_backend(backend, sides, threads)
    return model


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


def _save_chunk(chunks_dir: Path, number: int, vectors: np.ndarray, ids: list[str]) -> None:
    """Save one encoded chunk: the vectors first, then the ids (whose presence marks it complete)."""
    import numpy as np

    with atomic_file(chunks_dir / f"{number:05d}.npy", "wb") as handle:
        np.save(handle, vectors)
    with atomic_file(chunks_dir / f"{number:05d}.ids.txt") as handle:
        handle.writelines(f"{passage_id}\n" for passage_id in ids)


def _chunk_paths(chunks_dir: Path, number: int) -> tuple[Path, Path]:
    return chunks_dir / f"{number:05d}.npy", chunks_dir / f"{number:05d}.ids.txt"


def _chunk_is_complete(chunks_dir: Path, number: int, rows: int, dimension: int) -> bool:
    import numpy as np

    vectors_path, ids_path = _chunk_paths(chunks_dir, number)
    if not (vectors_path.exists() and ids_path.exists()):
        return False
    try:
        shape = np.load(vectors_path, mmap_mode="r").shape
    except (OSError, ValueError):
        return False
    with ids_path.open(encoding="utf-8") as handle:
        n_ids = sum(1 for _ in handle)
    return shape == (rows, dimension) and n_ids == rows


def _open_partial(partial: Path, expected: dict[str, Any]) -> None:
    """Resume in ``partial`` when it was started with the same encoder, passages and chunking;
    otherwise start over (with a notice when something was there)."""
    manifest = _read_json(partial / MANIFEST)
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
    write_json(partial / MANIFEST, expected)


# --- encoding -------------------------------------------------------------------------------


@dataclass
class _Plan:
    """The rows one run encodes, cut into chunks, and which of them are already on disk."""

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


def _encode_chunk(model: BiEncoder, titles: list[str], texts: list[str], batch_size: int,
                  timer: list[float]) -> Iterator[np.ndarray | int]:
    """Encode one chunk in length-sorted batches; yields each batch's size (for progress), then the vectors."""
    import numpy as np

    encoder = model.passage_encoder
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]) + len(titles[i] or ""))
    vectors = np.empty((len(texts), encoder.dimension), dtype=np.float32)
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        began = time.perf_counter()
        vectors[batch] = encoder.encode_passages([titles[i] for i in batch], [texts[i] for i in batch],
                                                 max_length=model.config.max_passage_len, batch_size=len(batch))
        timer[0] += time.perf_counter() - began
        yield len(batch)
    yield vectors


def _encode_pending(dataset: Dataset, model: BiEncoder, plan: _Plan, chunks_dir: Path, batch_size: int,
                    timer: list[float]) -> Iterator[int]:
    """Stream the passages; encode and save every chunk of the plan not yet on disk.

    Yields once per passage encoded (for the progress bar). Only the current chunk's ids,
    titles and texts are held in memory.
    """
    pending = [n for n in plan.chunks if n not in plan.done]
    if not pending:
        return
    first, last = plan.rows_of(pending[0])[0], plan.rows_of(pending[-1])[1]
    wanted = set(pending)
    ids: list[str] = []
    titles: list[str] = []
    texts: list[str] = []
    row = -1
    for row, passage in enumerate(dataset.passages()):
        if row < first:
            continue
        if row >= last:
            break
        number = row // plan.chunk_size
        if number not in wanted:
            continue
        ids.append(passage.id)
        titles.append(passage.title)
        texts.append(passage.text)
        if row + 1 == plan.rows_of(number)[1]:
            vectors = None
            for item in _encode_chunk(model, titles, texts, batch_size, timer):
                if isinstance(item, int):
                    yield from range(item)  # one step of the progress bar per passage
                else:
                    vectors = item
            assert vectors is not None
            _save_chunk(chunks_dir, number, vectors, ids)
            ids, titles, texts = [], [], []
    if row + 1 < last:
        raise InputError(f"{dataset.passages_path} changed while it was being encoded "
                         f"(read {row + 1:,} passages, expected {plan.count:,}); run the command again")


def _encoder_input(encoder: Any) -> Path | None:
    return model_input(encoder) if isinstance(encoder, (str, Path)) else None


def _dense_outputs(a: dict[str, Any]) -> list[Output]:
    shard = a.get("shard")
    target = Path(a["out"]) / (DENSE_DIR if shard is None else f"{SHARDS_DIR}/{shard_name(shard)}")
    return [Output(target, "--out", "dir", {"DATASET": a["dataset_dir"], "--encoder": _encoder_input(a["encoder"])})]


@writes_outputs(_dense_outputs)
def build_dense_index(dataset_dir: Path, out: Path, encoder: str | BiEncoder | None,
                      faiss_type: str = "flat", batch_size: int = 64, shard: tuple[int, int] | None = None,
                      device: str = "auto", overwrite: bool = False,
                      chunk_size: int = CHUNK_SIZE, backend: str = "torch") -> DenseIndexSummary:
    """Encode every passage of ``dataset_dir`` and write ``out/dense`` (or, with ``shard=(I, N)``,
    only shard I's vectors into ``out/dense-shards/shard-I-of-N``); resumable, see the module doc.
    ``backend``: the passage encoder's runtime (torch, or ONNX Runtime with ``onnx``/``onnx-int8``
    from the encoder folder's export), recorded in the manifest's ``encoding``."""
    started = time.perf_counter()
    dataset = Dataset(dataset_dir)
    check_build_options(faiss_type, batch_size, chunk_size)
    if shard is not None:
        check_shard(shard)
    out = Path(out)
    target = out / DENSE_DIR if shard is None else out / SHARDS_DIR / shard_name(shard)
    if target.exists() and not overwrite:
        raise InputError(f"{target} already exists (use --overwrite to replace it)")
    if not dataset.passages_path.exists():
        raise MissingArtefactError(f"{dataset.passages_path}: no such file; is {dataset_dir} a complete dataset?")

    passages_sha256, count = scan_passages(dataset.passages_path)
    if count == 0:
        raise InputError(f"{dataset.passages_path} holds no passages")
    model = load_encoder(encoder, device, backend, ("passage",))
    encoder_info = encoder_record(model)
    dimension = int(encoder_info["dimension"])
    parameters = faiss_index.faiss_parameters(faiss_type, dimension, count) if shard is None else None

    n_chunks = -(-count // chunk_size)
    chunks = shard_chunks(n_chunks, shard)
    plan = _Plan(count, chunk_size, chunks, set())
    partial = target.with_name(target.name + ".partial")
    _open_partial(partial, partial_record(passages_sha256, count, encoder_info, plan, shard, backend))
    chunks_dir = partial / "chunks"
    plan.done = {n for n in chunks
                 if _chunk_is_complete(chunks_dir, n, plan.size([n]), dimension)}
    resumed = plan.size(plan.done)
    todo = plan.size(chunks) - resumed

    timer = [0.0]
    label = "Encoding passages" + (f" (shard {shard[0]}/{shard[1]})" if shard else "")
    for _ in track(_encode_pending(dataset, model, plan, chunks_dir, batch_size, timer), label, total=todo):
        pass
    files = VectorFiles([_chunk_paths(chunks_dir, n) for n in chunks], dimension)
    encoding = encoding_record(batch_size, chunk_size, model.passage_encoder.device, backend, todo, resumed,
                               timer[0])
    common = common_fields(dataset_dir, passages_sha256, count, encoder_info)

    if shard is None:
        assert parameters is not None
        _write_dense_index(target, files, count, parameters, overwrite,
                           {**common, "encoding": {**encoding, "shards": None}}, started)
        shutil.rmtree(partial, ignore_errors=True)
        return DenseIndexSummary(target, count, todo, resumed, time.perf_counter() - started, timer[0],
                                 dimension, faiss_type=faiss_type)

    first, last = plan.rows
    write_shard(target, files, plan, shard, common, encoding, overwrite, started)
    shutil.rmtree(partial, ignore_errors=True)
    present = sum(1 for i in range(shard[1]) if (out / SHARDS_DIR / shard_name((i, shard[1])) / MANIFEST).exists())
    return DenseIndexSummary(target, last - first, todo, resumed, time.perf_counter() - started, timer[0],
                             dimension, shard=shard, shards_present=present)


def check_build_options(faiss_type: str, batch_size: int, chunk_size: int) -> None:
    """The options of an encoding, checked before any work (also by the Ray path)."""
    faiss_index.check_faiss_type(faiss_type)
    if batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {batch_size}")
    if chunk_size < 1:
        raise InputError(f"the chunk size must be at least 1, got {chunk_size}")


def partial_record(passages_sha256: str, count: int, encoder_info: dict[str, Any], plan: _Plan,
                   shard: tuple[int, int] | None, backend: str) -> dict[str, Any]:
    """The manifest of an encoding in progress (``*.partial``): what a resumed run must match. The
    Ray path (``corefsearch.distributed``) writes the same one, so its shards and ``--shard I/N``
    resume each other's chunks."""
    return {"kind": PARTIAL_KIND, "passages_sha256": passages_sha256, "passages": count,
            "passage_fingerprint": encoder_info["passage_fingerprint"],
            "dimension": int(encoder_info["dimension"]), "chunk_size": plan.chunk_size, "rows": list(plan.rows),
            "shard": list(shard) if shard else None, "backend": backend}


def encoding_record(batch_size: int, chunk_size: int, device: str, backend: str, encoded: int, resumed: int,
                    seconds: float) -> dict[str, Any]:
    """The ``encoding`` field of a dense index or shard manifest."""
    return {"batch_size": batch_size, "chunk_size": chunk_size, "device": device, "backend": backend,
            "encoded": encoded, "resumed": resumed, "seconds": round(seconds, 3),
            "passages_per_second": round(encoded / seconds, 2) if seconds else None}


def common_fields(dataset_dir: Path, passages_sha256: str, count: int, encoder_info: dict[str, Any]
                  ) -> dict[str, Any]:
    """The fields every dense index and shard manifest starts with."""
    return {"format_version": FORMAT_VERSION, "corefsearch_version": __version__,
            "dataset": str(Path(dataset_dir).resolve()), "passages_sha256": passages_sha256,
            "passages": count, "encoder": encoder_info}


def write_shard(target: Path, files: VectorFiles, plan: _Plan, shard: tuple[int, int], common: dict[str, Any],
                encoding: dict[str, Any], overwrite: bool, started: float) -> None:
    """Write shard ``target`` (``vectors.npy``, ``ids.txt``, ``manifest.json``) atomically from the
    vector files of its chunks."""
    first, last = plan.rows
    with atomic_directory(target, overwrite=overwrite) as tmp:
        _concatenate(files, last - first, files.dimension, tmp / VECTORS_FILE)
        with atomic_file(tmp / IDS_FILE) as handle:
            handle.writelines(f"{passage_id}\n" for passage_id in files.ids())
        write_json(tmp / MANIFEST, {"kind": SHARD_KIND, **common, "shard": list(shard), "rows": [first, last],
                                     "encoding": encoding, "created": now(), "versions": _versions(),
                                     "seconds": round(time.perf_counter() - started, 3)})


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


def _write_dense_index(target: Path, files: VectorFiles, count: int, parameters: dict[str, Any],
                       overwrite: bool, fields: dict[str, Any], started: float) -> None:
    """Build the FAISS index from the vector files and write ``target`` atomically."""
    built = time.perf_counter()
    label = f"Building the FAISS index ({parameters['type']})"
    index = faiss_index.build_index(parameters, files.dimension, count,
                                    lambda: track(files.arrays(), label, total=len(files.files)), files.sample)
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
        write_json(tmp / MANIFEST, {"kind": DENSE_KIND, **fields, "faiss": parameters,
                                     "faiss_seconds": round(time.perf_counter() - built, 3),
                                     "created": now(), "versions": _versions(),
                                     "seconds": round(time.perf_counter() - started, 3)})


# --- merging shards -------------------------------------------------------------------------


@writes_outputs(_dense_outputs)
def merge_dense_shards(dataset_dir: Path, out: Path, shards: int, faiss_type: str = "flat",
                       encoder: str | BiEncoder | None = None, device: str = "auto",
                       overwrite: bool = False) -> DenseIndexSummary:
    """Merge ``out/dense-shards/shard-*-of-N`` in passage order into ``out/dense``.

    The shards must come from the same encoder and the dataset's current passages, and
    together cover every passage; with ``encoder`` given, its fingerprint must match too.
    """
    started = time.perf_counter()
    dataset = Dataset(dataset_dir)
    faiss_index.check_faiss_type(faiss_type)
    if shards < 1:
        raise InputError(f"--merge-shards takes the number of shards N (at least 1), got {shards}")
    out = Path(out)
    target = out / DENSE_DIR
    if target.exists() and not overwrite:
        raise InputError(f"{target} already exists (use --overwrite to replace it)")
    folders = [out / SHARDS_DIR / shard_name((i, shards)) for i in range(shards)]
    missing = [i for i, folder in enumerate(folders) if not (folder / MANIFEST).exists()]
    if missing:
        listed = ", ".join(f"{i}/{shards}" for i in missing)
        raise MissingArtefactError(f"{len(missing)} of {shards} shards are missing in {out / SHARDS_DIR} "
                                   f"({listed}); encode each with `corefsearch index {dataset_dir} --dense "
                                   f"--encoder MODEL --out {out} --shard I/{shards}`")
    from corefsearch.artefacts import read_json_object

    manifests = [read_json_object(folder / MANIFEST, f"encode the shard again with `corefsearch index {dataset_dir} "
                                  f"--dense --encoder MODEL --out {out} --shard {i}/{shards} --overwrite`",
                                  "dense shard manifest") for i, folder in enumerate(folders)]
    passages_sha256, count = scan_passages(dataset.passages_path)
    first = manifests[0]
    expected_rows = 0
    for i, manifest in enumerate(manifests):
        where = folders[i]
        if manifest.get("kind") != SHARD_KIND:
            raise InputError(f"{where / MANIFEST}: not a corefsearch dense shard manifest")
        if manifest["passages_sha256"] != passages_sha256:
            raise InputError(f"shard {where} was encoded from other passages than {dataset.passages_path}; "
                             f"encode it again with `--shard {i}/{shards} --overwrite`")
        if manifest["encoder"]["passage_fingerprint"] != first["encoder"]["passage_fingerprint"]:
            raise InputError(f"shards {folders[0].name} and {where.name} were encoded with different encoders "
                             f"({first['encoder']['reference']} and {manifest['encoder']['reference']})")
        backends = [m["encoding"].get("backend", "torch") for m in (first, manifest)]  # none recorded: torch
        if backends[0] != backends[1]:
            raise InputError(f"shards {folders[0].name} and {where.name} were encoded with different backends "
                             f"({backends[0]} and {backends[1]}); encode shard {i}/{shards} again with "
                             f"`--backend {backends[0]} --overwrite`")
        start, end = manifest["rows"]
        if start != expected_rows:
            raise InputError(f"shard {where.name} covers passages {start}-{end}, expected it to start at "
                             f"{expected_rows} (were the shards encoded with different chunk sizes?)")
        expected_rows = end
    if expected_rows != count:
        raise InputError(f"the shards cover {expected_rows:,} passages, the dataset has {count:,}")
    if encoder is not None:
        model = load_encoder(encoder, device)
        fingerprint = model.passage_fingerprint()
        if fingerprint != first["encoder"]["passage_fingerprint"]:
            raise InputError(f"the shards were encoded with encoder {first['encoder']['reference']}, not "
                             f"{encoder if isinstance(encoder, str) else model.reference}; merge without "
                             "--encoder or encode the shards again")

    dimension = int(first["encoder"]["dimension"])
    parameters = faiss_index.faiss_parameters(faiss_type, dimension, count)
    files = VectorFiles([(folder / VECTORS_FILE, folder / IDS_FILE) for folder in folders], dimension)
    encode_seconds = sum(float(m["encoding"]["seconds"]) for m in manifests)
    encoded = sum(int(m["encoding"]["encoded"]) for m in manifests)
    encoding = {**{key: first["encoding"][key] for key in ("batch_size", "chunk_size", "device")},
                "backend": first["encoding"].get("backend", "torch"),
                "encoded": encoded, "resumed": sum(int(m["encoding"]["resumed"]) for m in manifests),
                "seconds": round(encode_seconds, 3),
                "passages_per_second": round(encoded / encode_seconds, 2) if encode_seconds else None,
                "shards": shards}
    fields = {"format_version": FORMAT_VERSION, "corefsearch_version": __version__,
              "dataset": str(Path(dataset_dir).resolve()), "passages_sha256": passages_sha256, "passages": count,
              "encoder": first["encoder"], "encoding": encoding}
    _write_dense_index(target, files, count, parameters, overwrite, fields, started)
    return DenseIndexSummary(target, count, 0, 0, time.perf_counter() - started, 0.0, dimension,
                             faiss_type=faiss_type, merged_shards=shards)


# --- reading --------------------------------------------------------------------------------


def load_dense_manifest(index: Path) -> dict[str, Any]:
    """The manifest of ``INDEX/dense``; a missing index says what to run."""
    index = Path(index)
    manifest_path = index / DENSE_DIR / MANIFEST
    if not manifest_path.exists():
        hint = ""
        if (index / f"{DENSE_DIR}.partial").exists():
            hint = f" (an interrupted encoding is in {index / (DENSE_DIR + '.partial')}: run the same command again)"
        elif (index / SHARDS_DIR).exists():
            hint = f" (shards are in {index / SHARDS_DIR}: merge them with --merge-shards N)"
        raise MissingArtefactError(f"no dense index at {index} (expected {manifest_path}){hint}; build it with "
                                   f"`corefsearch index DATASET --dense --encoder MODEL --out {index}`")
    from corefsearch.artefacts import read_json_object

    remedy = f"rebuild the index with `corefsearch index DATASET --dense --encoder MODEL --out {index} --overwrite`"
    manifest = read_json_object(manifest_path, remedy, "dense index manifest")
    if manifest.get("kind") != DENSE_KIND:
        raise InputError(f"{manifest_path}: not a corefsearch dense index manifest; {remedy}")
    return manifest


def check_dense_index_matches_dataset(index: Path, dataset_dir: Path) -> None:
    """Fail clearly when the dense index was built from other passages than the dataset's."""
    manifest = load_dense_manifest(index)
    check_built_from(dataset_dir, manifest.get("passages_sha256"), f"the dense index {index}",
                     f"corefsearch index {dataset_dir} --dense --encoder {manifest['encoder']['reference']} "
                     f"--out {index} --overwrite")
