"""``index --dense --ray``: the dense encoding on a Ray cluster.

Ray Data (``map_batches`` on an actor pool, one encoder loaded per actor) encodes whole chunks of
``CHUNK_SIZE`` passages with ``chunks.encode_chunk``, the function of the local path (batches sorted by
token count within the chunk). The chunks are those of ``--shard I/N`` with N the number of workers;
the driver saves each encoded chunk into its shard's resumable
``INDEX/dense-shards/shard-I-of-N.partial/``, writes the shards as ``--shard`` does, then merges them
with the ``--merge-shards`` code into ``INDEX/dense``. An interrupted run, started again with the same
``--ray-workers``, encodes only the chunks not yet saved.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import DENSE_SHARD, find_manifest
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.onnx_backend import resolve_backend
from corefsearch.base.progress import track
from corefsearch.base.schema import Passage
from corefsearch.datasets.dataset import Dataset
from corefsearch.dense import chunks, faiss_index, store
from corefsearch.dense.chunks import chunk_vectors, save_chunk
from corefsearch.dense.encoder import DEFAULT_BATCH_SIZE
from corefsearch.dense.indexing import (
    DenseIndexSummary,
    check_build_options,
    dense_outputs,
    merge_dense_shards_unguarded,
)
from corefsearch.dense.store import MANIFEST, load_encoder
from corefsearch.distributed.session import (
    RayOptions,
    WorkerPlan,
    carried,
    plan_workers,
    quiet_ray_data,
    ray_session,
    uncarried,
    worker_errors,
)
from corefsearch.io.outputs import Output, output_locks, writes_outputs
from corefsearch.io.read import json_record

if TYPE_CHECKING:
    import numpy as np

    from corefsearch.dense.indexing import DenseIndexSummary


def scan_chunk_starts(path: Path, chunk_size: int) -> tuple[str, int, list[tuple[int, int]]]:
    """``chunks.scan_passages`` (sha256 and records, in one pass) plus where each chunk starts: the
    byte offset and line number of its first record, so that a worker reads only its chunk."""
    import hashlib

    digest = hashlib.sha256()
    count, offset, starts = 0, 0, []
    with Path(path).open("rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            digest.update(line)
            if line.strip():
                if count % chunk_size == 0:
                    starts.append((offset, line_number))
                count += 1
            offset += len(line)
    return digest.hexdigest(), count, starts


def read_chunk(path: Path, offset: int, line_number: int, rows: int) -> list[Any]:
    """The ``rows`` passages from byte ``offset`` (line ``line_number``) of a passages file, checked as
    ``Dataset.passages`` checks them (``FILE:LINE: why``)."""
    passages = []
    first_line = line_number
    with Path(path).open("rb") as handle:
        handle.seek(offset)
        for raw in handle:
            if len(passages) == rows:
                break
            where = f"{path}:{line_number}"
            line_number += 1
            try:
                text = raw.decode("utf-8-sig" if offset == 0 and not passages else "utf-8")
            except UnicodeDecodeError as err:
                raise InputError(f"{where}: not UTF-8 text (byte 0x{raw[err.start]:02x} at byte {err.start + 1}); "
                                 "save the file as UTF-8") from None
            if text.strip():
                passages.append(Passage.from_json(json_record(text, where), where=where))
    if len(passages) != rows:
        raise InputError(f"{path} changed while it was being encoded (expected {rows} passages from line "
                         f"{first_line}); run the command again")
    return passages


class ChunkEncoder:
    """A Ray Data actor: loads the passage encoder once, then encodes whole chunks, each read from
    the shared passages file, with the local path's ``chunks.encode_chunk``."""

    def __init__(self, encoder: str, device: str, backend: str, batch_size: int, passages: str, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.loaded = carried(lambda: load_encoder(encoder, device, backend, ("passage",), threads))
        self.batch_size = batch_size
        self.passages = Path(passages)

    def encode(self, offset: int, line: int, rows: int) -> tuple[np.ndarray, list[str], float, str]:
        model = uncarried(self.loaded)
        passages = read_chunk(self.passages, offset, line, rows)
        timer = [0.0]
        encoded = chunk_vectors(model, [p.title for p in passages], [p.text for p in passages], self.batch_size,
                                timer)
        return encoded, [p.id for p in passages], timer[0], model.passage_encoder.device

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One chunk (``batch_size=1``) in, its vectors, ids, seconds and device out, or its error."""
        import numpy as np

        (number,), (offset,), (line,), (rows,) = batch["chunk"], batch["offset"], batch["line"], batch["rows"]
        kind, value = carried(lambda: self.encode(int(offset), int(line), int(rows)))
        vectors, ids, seconds, device = value if kind is None else (np.zeros((0, 0), np.float32), [], 0.0, "")
        return {"chunk": np.asarray([number], dtype=np.int64), "vectors": vectors[None],
                "ids": np.asarray(["\n".join(ids)], dtype=object), "seconds": np.asarray([seconds]),
                "device": np.asarray([device], dtype=object),
                "error": np.asarray(["" if kind is None else f"{kind}\t{value}"], dtype=object)}


def _ray_dense_outputs(a: dict[str, Any]) -> list[Output]:
    return dense_outputs({**a, "shard": None})


def _check_ray_arguments(a: dict[str, Any]) -> None:
    """The options of :func:`build_dense_index_on_ray`, checked once before its output guard."""
    a["ray_options"].validate()
    check_build_options(a["faiss_type"], a["batch_size"],
                        chunks.CHUNK_SIZE if a["chunk_size"] is None else a["chunk_size"])


@writes_outputs(_ray_dense_outputs, check=_check_ray_arguments)
def build_dense_index_on_ray(dataset_dir: Path, out: Path, encoder: str, ray_options: RayOptions,
                             faiss_type: str = "flat", batch_size: int = DEFAULT_BATCH_SIZE, device: str = "auto",
                             overwrite: bool = False, chunk_size: int | None = None,
                             backend: str | None = None) -> DenseIndexSummary:
    """``indexing.build_dense_index`` with the encoding spread over a Ray cluster (see the module
    doc): the shards of ``--shard I/N`` (N workers) in ``out/dense-shards``, merged into ``out/dense``.
    Complete shards of an earlier run with the same passages, encoder and settings are kept.
    The options are checked once, before the output guard (:func:`_check_ray_arguments`); the merge at
    the end does not check them again."""
    started = time.perf_counter()
    chunk_size = chunks.CHUNK_SIZE if chunk_size is None else chunk_size
    dataset = Dataset(dataset_dir)
    out = Path(out)
    target = out / store.DENSE_DIR
    if target.exists() and not overwrite:
        raise InputError(f"{target} already exists (use --overwrite to replace it)")
    passages_path = dataset.passages_path.resolve()
    if not passages_path.exists():
        raise MissingArtefactError(f"{dataset.passages_path}: no such file; is {dataset_dir} a complete dataset?")
    passages_sha256, count, starts = scan_chunk_starts(passages_path, chunk_size)
    if count == 0:
        raise InputError(f"{dataset.passages_path} holds no passages")
    reference = store.portable_reference(encoder)  # a folder made absolute: the workers start elsewhere
    # The driver loads the encoder only for its record (fingerprint, dimension) and the checks of the
    # local path (a reader given as encoder, a missing ONNX export), on the CPU: it encodes nothing.
    model = store.load_encoder(reference, "cpu", resolve_backend(reference, backend, device), ("passage",))
    backend = model.backend  # as resolved (onnx-int8 for an inference-only folder): what the workers run
    encoder_info = chunks.encoder_record(model)
    del model
    dimension = int(encoder_info["dimension"])
    faiss_index.faiss_parameters(faiss_type, dimension, count)  # ivfpq on too few passages: fails now, not after
    n_chunks = len(starts)

    with ray_session(ray_options) as ray, worker_errors():
        workers = plan_workers(ray, ray_options, device)
        shards = [(i, workers.workers) for i in range(workers.workers)]
        folders = {shard: out / store.SHARDS_DIR / store.shard_name(shard) for shard in shards}
        with output_locks((folder, "--out") for folder in folders.values()):
            plans: dict[tuple[int, int], chunks.ChunkPlan] = {}  # the shards to encode (or finish encoding)
            for shard, folder in folders.items():
                plan = chunks.ChunkPlan(count, chunk_size, chunks.shard_chunks(n_chunks, shard), set())
                if folder.exists() and not overwrite:
                    _check_kept_shard(folder, shard, passages_sha256, encoder_info, chunk_size, backend)
                    continue
                partial = folder.with_name(folder.name + ".partial")
                chunks.open_partial(partial, chunks.partial_record(passages_sha256, count, encoder_info, plan, shard,
                                                                   backend))
                plan.done = {n for n in plan.chunks
                             if chunks.chunk_is_complete(partial / "chunks", n, plan.size([n]), dimension)}
                plans[shard] = plan
            owner = {n: shard for shard, plan in plans.items() for n in plan.chunks if n not in plan.done}
            todo = sum(plans[owner[n]].size([n]) for n in owner)
            seconds = {shard: 0.0 for shard in plans}
            devices: set[str] = set()
            encoding_started = time.perf_counter()
            if owner:
                items = [{"chunk": n, "offset": starts[n][0], "line": starts[n][1],
                          "rows": plans[owner[n]].size([n])} for n in sorted(owner)]
                results = _encode_chunks(ray, items, workers, {
                    "encoder": reference, "device": workers.device, "backend": backend, "batch_size": batch_size,
                    "passages": str(passages_path), "threads": ray_options.threads})

                try:
                    for _ in track(_saved(results, owner, folders, seconds, devices), "Encoding passages (Ray)",
                                   total=todo):
                        pass
                finally:
                    # Closed now rather than whenever a failed run's traceback lets go of it: closing
                    # stops Ray Data's executor, which releases the encoder actors and their CPUs on a
                    # cluster that outlives the run.
                    results.close()
            encode_wall = time.perf_counter() - encoding_started
            for shard, plan in plans.items():
                partial = folders[shard].with_name(folders[shard].name + ".partial")
                files = chunks.VectorFiles([chunks.chunk_paths(partial / "chunks", n) for n in plan.chunks],
                                           dimension)
                resumed = plan.size(plan.done)
                encoding = {**chunks.encoding_record(batch_size, chunk_size, next(iter(devices), workers.device),
                                                     backend, plan.size(plan.chunks) - resumed, resumed,
                                                     seconds[shard]),
                            "ray": {"workers": workers.workers, "cpus_per_worker": workers.cpus}}
                chunks.write_shard(folders[shard], files, plan, shard,
                                   chunks.common_fields(dataset_dir, passages_sha256, count, encoder_info), encoding,
                                   overwrite, started)
                shutil.rmtree(partial, ignore_errors=True)
            # The merge of `--merge-shards N`, without its guard: this call already holds the lock on out/dense.
            merge_dense_shards_unguarded(dataset_dir, out, workers.workers, faiss_type, None, "auto", overwrite)
    resumed_total = count - todo
    return DenseIndexSummary(target, count, todo, resumed_total, time.perf_counter() - started, encode_wall,
                             dimension, faiss_type=faiss_type, ray_workers=workers.workers)


def _check_kept_shard(folder: Path, shard: tuple[int, int], passages_sha256: str, encoder_info: dict[str, Any],
                      chunk_size: int, backend: str) -> None:
    """A complete shard already in place is kept when it holds these passages' vectors by this
    encoder, else the run stops (``--overwrite`` encodes it again)."""
    manifest = find_manifest(folder / MANIFEST, DENSE_SHARD) or {}
    encoding = manifest.get("encoding") or {}
    same = (manifest.get("passages_sha256") == passages_sha256
            and (manifest.get("encoder") or {}).get("passage_fingerprint") == encoder_info["passage_fingerprint"]
            and encoding.get("chunk_size") == chunk_size and encoding.get("backend", "torch") == backend
            and manifest.get("shard") == list(shard))
    if not same:
        raise InputError(f"{folder} already exists and holds another encoding (other passages, encoder, backend or "
                         "chunk size); use --overwrite to replace it")


def _encode_chunks(ray: Any, items: list[dict[str, int]], workers: WorkerPlan,
                   constructor: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The encoded chunks (``chunk``, ``vectors``, ``ids``, ``seconds``, ``device``), as they finish.

    Ray Data rather than plain actors: its streaming executor keeps every worker busy with the next
    chunk, holds back when the driver falls behind (so that memory stays a few chunks per worker)
    and retries the chunks of a worker that died."""
    import ray.data

    quiet_ray_data(ray)
    dataset = ray.data.from_items(items, override_num_blocks=len(items))
    encoded = dataset.map_batches(ChunkEncoder, batch_size=1, batch_format="numpy",
                                  compute=ray.data.ActorPoolStrategy(size=min(workers.workers, len(items))),
                                  fn_constructor_kwargs=constructor, num_cpus=workers.cpus, num_gpus=workers.gpus)
    yield from encoded.iter_rows()


def _saved(results: Iterator[dict[str, Any]], owner: dict[int, tuple[int, int]],
           folders: dict[tuple[int, int], Path], seconds: dict[tuple[int, int], float],
           devices: set[str]) -> Iterator[int]:
    """Save each encoded chunk into its shard's partial folder as it arrives; one item per passage."""
    import numpy as np

    for row in results:
        if row["error"]:
            uncarried(tuple(str(row["error"]).split("\t", 1)))
        number = int(row["chunk"])
        shard = owner[number]
        vectors = np.asarray(row["vectors"], dtype=np.float32)
        ids = str(row["ids"]).split("\n")
        folder = folders[shard]
        save_chunk(folder.with_name(folder.name + ".partial") / "chunks", number, vectors, ids)
        seconds[shard] += float(row["seconds"])
        devices.add(str(row["device"]))
        yield from range(len(ids))
