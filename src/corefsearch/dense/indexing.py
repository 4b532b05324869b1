"""The write side of the dense index: encode a dataset's passages with a retriever's passage
encoder and write a FAISS index (or one shard of the vectors), and merge shards into an index.

The entry points of ``corefsearch index --dense``: :func:`build_dense_index` (an index or one
shard) and :func:`merge_dense_shards`, each checking its options once and writing under the
output guard. The layout and what readers need (the manifest, the encoder it names) are in
:mod:`corefsearch.dense.store`; the pieces a build is made of (chunks, vector files, shard and
index folders) in :mod:`corefsearch.dense.chunks`, which ``corefsearch add`` and the Ray path
(:mod:`corefsearch.distributed.dense_encoding`) build with too. The Ray path, which holds the lock
on ``INDEX/dense`` already, merges with :func:`merge_dense_shards_unguarded`.

Encoding streams the passages file and keeps only the ids, titles and texts of one chunk
(8,192 passages) in memory. Within a chunk, passages are sorted by token count and cut into
batches (less padding: ``chunks.encode_chunk``, through ``TextEncoder.passage_batches``). Each
encoded chunk is saved to ``INDEX/dense.partial/chunks/`` at once, so an interrupted run, started
again with the same command, skips the chunks already on disk; a partial folder written with
another encoder or from other passages is discarded with a notice. The FAISS index is built from
the chunk files at the end, in a temporary folder renamed to ``INDEX/dense`` when complete.

Shards (``--shard I/N``, I from 0 to N−1): chunk j covers rows [j·C, (j+1)·C) of
passages.jsonl (C = chunk size) and shard I takes the contiguous block of chunks
[I·J/N, (I+1)·J/N) of the J chunks. A shard therefore encodes exactly the batches an
unsharded run encodes for those rows, and its vectors are the same. Shards may run at the
same time, on different machines, each resumable in ``INDEX/dense-shards/shard-I-of-N.partial``.
When all N are in ``INDEX/dense-shards/``, ``--merge-shards N`` concatenates them in passage
order into the ``INDEX/dense/`` a single run would have written.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import DENSE_SHARD, read_manifest
from corefsearch.base.checks import all_at_least_one
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.models import resolve_device
from corefsearch.base.onnx_backend import resolve_backend
from corefsearch.base.progress import track
from corefsearch.datasets.dataset import Dataset
from corefsearch.dense import faiss_index
from corefsearch.dense.chunks import (
    CHUNK_SIZE,
    ChunkPlan,
    VectorFiles,
    chunk_is_complete,
    chunk_paths,
    common_fields,
    encode_chunk,
    encoder_record,
    encoding_record,
    open_partial,
    partial_record,
    save_chunk,
    scan_passages,
    shard_chunks,
    write_dense_index,
    write_shard,
)
from corefsearch.dense.encoder import resolve_batch_size
from corefsearch.dense.store import (
    DENSE_DIR,
    IDS_FILE,
    MANIFEST,
    SHARDS_DIR,
    VECTORS_FILE,
    load_encoder,
    shard_name,
)
from corefsearch.io.outputs import Output, model_input, writes_outputs

if TYPE_CHECKING:
    from corefsearch.dense.model import BiEncoder


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


# --- encoding -------------------------------------------------------------------------------


def _encode_pending(dataset: Dataset, model: BiEncoder, plan: ChunkPlan, chunks_dir: Path, batch_size: int,
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
            for item in encode_chunk(model, titles, texts, batch_size, timer):
                if isinstance(item, int):
                    yield from range(item)  # one step of the progress bar per passage
                else:
                    vectors = item
            assert vectors is not None
            save_chunk(chunks_dir, number, vectors, ids)
            ids, titles, texts = [], [], []
    if row + 1 < last:
        raise InputError(f"{dataset.passages_path} changed while it was being encoded "
                         f"(read {row + 1:,} passages, expected {plan.count:,}); run the command again")


def _encoder_input(encoder: Any) -> Path | None:
    return model_input(encoder) if isinstance(encoder, (str, Path)) else None


def dense_outputs(a: dict[str, Any]) -> list[Output]:
    """What a build writes (``out/dense``, or the shard's folder) and what it reads: the output guard's
    list (:func:`corefsearch.io.outputs.writes_outputs`) of every writer of a dense index."""
    shard = a.get("shard")
    target = Path(a["out"]) / (DENSE_DIR if shard is None else f"{SHARDS_DIR}/{shard_name(shard)}")
    return [Output(target, "--out", "dir", {"DATASET": a["dataset_dir"], "--encoder": _encoder_input(a["encoder"])})]


def check_build_arguments(a: dict[str, Any]) -> None:
    """The options of :func:`build_dense_index` (by parameter name), checked once before its output guard."""
    check_build_options(a["faiss_type"], a["batch_size"], a["chunk_size"])
    if a["shard"] is not None:
        check_shard(a["shard"])


@writes_outputs(dense_outputs, check=check_build_arguments)
def build_dense_index(dataset_dir: Path, out: Path, encoder: str | BiEncoder | None,
                      faiss_type: str = "flat", batch_size: int | None = None,
                      shard: tuple[int, int] | None = None,
                      device: str = "auto", overwrite: bool = False,
                      chunk_size: int = CHUNK_SIZE, backend: str | None = None) -> DenseIndexSummary:
    """Encode every passage of ``dataset_dir`` and write ``out/dense`` (or, with ``shard=(I, N)``,
    only shard I's vectors into ``out/dense-shards/shard-I-of-N``); resumable, see the module doc.
    ``backend``: the passage encoder's runtime (torch, or ONNX Runtime with ``onnx``/``onnx-int8``
    from the encoder folder's export; None: torch, or onnx-int8 for an inference-only folder), recorded in the
    manifest's ``encoding`` as it ran. ``batch_size``: default
    by device, as ``index --dense`` (:func:`~corefsearch.dense.encoder.resolve_batch_size`)."""
    started = time.perf_counter()
    dataset = Dataset(dataset_dir)
    out = Path(out)
    target = out / DENSE_DIR if shard is None else out / SHARDS_DIR / shard_name(shard)
    if target.exists() and not overwrite:
        raise InputError(f"{target} already exists (use --overwrite to replace it)")
    if not dataset.passages_path.exists():
        raise MissingArtefactError(f"{dataset.passages_path}: no such file; is {dataset_dir} a complete dataset?")

    passages_sha256, count = scan_passages(dataset.passages_path)
    if count == 0:
        raise InputError(f"{dataset.passages_path} holds no passages")
    if encoder is None or isinstance(encoder, str):  # a folder that ships only int8 runs it, on the CPU
        backend = resolve_backend(encoder, backend, device)
    model = load_encoder(encoder, device, backend, ("passage",))
    backend = model.backend
    batch_size = resolve_batch_size(batch_size, device, backend)
    encoder_info = encoder_record(model)
    dimension = int(encoder_info["dimension"])
    parameters = faiss_index.faiss_parameters(faiss_type, dimension, count) if shard is None else None

    n_chunks = -(-count // chunk_size)
    chunks = shard_chunks(n_chunks, shard)
    plan = ChunkPlan(count, chunk_size, chunks, set())
    partial = target.with_name(target.name + ".partial")
    open_partial(partial, partial_record(passages_sha256, count, encoder_info, plan, shard, backend))
    chunks_dir = partial / "chunks"
    plan.done = {n for n in chunks
                 if chunk_is_complete(chunks_dir, n, plan.size([n]), dimension)}
    resumed = plan.size(plan.done)
    todo = plan.size(chunks) - resumed

    timer = [0.0]
    label = "Encoding passages" + (f" (shard {shard[0]}/{shard[1]})" if shard else "")
    for _ in track(_encode_pending(dataset, model, plan, chunks_dir, batch_size, timer), label, total=todo):
        pass
    files = VectorFiles([chunk_paths(chunks_dir, n) for n in chunks], dimension)
    encoding = encoding_record(batch_size, chunk_size, model.passage_encoder.device, backend, todo, resumed,
                               timer[0])
    common = common_fields(dataset_dir, passages_sha256, count, encoder_info)

    if shard is None:
        assert parameters is not None
        write_dense_index(target, files, count, parameters, overwrite,
                           {**common, "encoding": {**encoding, "shards": None}}, started, model.passage_encoder.device)
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
    all_at_least_one({"--batch-size": batch_size, "--chunk-size": chunk_size})


# --- merging shards -------------------------------------------------------------------------


def check_merge_arguments(a: dict[str, Any]) -> None:
    """The options of :func:`merge_dense_shards`, checked once before its output guard."""
    faiss_index.check_faiss_type(a["faiss_type"])
    if a["shards"] < 1:
        raise InputError(f"--merge-shards takes the number of shards N (at least 1), got {a['shards']}")


@writes_outputs(dense_outputs, check=check_merge_arguments)
def merge_dense_shards(dataset_dir: Path, out: Path, shards: int, faiss_type: str = "flat",
                       encoder: str | BiEncoder | None = None, device: str = "auto",
                       overwrite: bool = False) -> DenseIndexSummary:
    """Merge ``out/dense-shards/shard-*-of-N`` in passage order into ``out/dense``.

    The shards must come from the same encoder and the dataset's current passages, and
    together cover every passage; with ``encoder`` given, its fingerprint must match too.
    The options are checked before the output guard (:func:`check_merge_arguments`), then
    :func:`merge_dense_shards_unguarded` merges.
    """
    return merge_dense_shards_unguarded(dataset_dir, out, shards, faiss_type, encoder, device, overwrite)


def merge_dense_shards_unguarded(dataset_dir: Path, out: Path, shards: int, faiss_type: str,
                                 encoder: str | BiEncoder | None, device: str, overwrite: bool) -> DenseIndexSummary:
    """:func:`merge_dense_shards` without its output guard and option checks, for a caller that
    holds the lock on ``out/dense`` already and has checked ``faiss_type`` and ``shards`` (the Ray
    path, which merges the shards it has just written)."""
    started = time.perf_counter()
    dataset = Dataset(dataset_dir)
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
    manifests = [read_manifest(folder / MANIFEST, DENSE_SHARD, f"encode the shard again with `corefsearch index "
                               f"{dataset_dir} --dense --encoder MODEL --out {out} --shard {i}/{shards} --overwrite`")
                 for i, folder in enumerate(folders)]
    passages_sha256, count = scan_passages(dataset.passages_path)
    first = manifests[0]
    expected_rows = 0
    for i, manifest in enumerate(manifests):
        where = folders[i]
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
    fields = {"dataset": str(Path(dataset_dir).resolve()), "passages_sha256": passages_sha256, "passages": count,
              "encoder": first["encoder"], "encoding": encoding}

    write_dense_index(target, files, count, parameters, overwrite, fields, started, resolve_device(device))
    return DenseIndexSummary(target, count, 0, 0, time.perf_counter() - started, 0.0, dimension,
                             faiss_type=faiss_type, merged_shards=shards)

