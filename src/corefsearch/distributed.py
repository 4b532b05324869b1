"""The heavy stages on a Ray cluster (``--ray auto|ADDRESS``): dense encoding (``index --dense``),
a reader's re-ranking (``search --reader``) and the mention encoder's encoding (``cluster --method
encoder``). Without ``--ray`` nothing here runs and Ray is never imported.

Same results as on one machine: every worker runs the function the local path runs, on the same
batches, so the vectors, runs and spans are those of the local path (bit for bit where the
workers' CPUs and thread counts are those of the local run; other hardware may change the last
bits of a float, as it does on one machine).

- ``index --dense --ray``: Ray Data (``map_batches`` on an actor pool, one encoder loaded per
  actor) encodes whole chunks of ``CHUNK_SIZE`` passages with ``indexing._encode_chunk``, the
  function of the local path (length-sorted batches within the chunk). The chunks are those of
  ``--shard I/N`` with N the number of workers; the driver saves each encoded chunk into its
  shard's resumable ``INDEX/dense-shards/shard-I-of-N.partial/``, writes the shards as ``--shard``
  does, then merges them with the ``--merge-shards`` code into ``INDEX/dense``. An interrupted run,
  started again with the same ``--ray-workers``, encodes only the chunks not yet saved.
- ``search --reader --ray``: retrieval runs in the driver; the queries are cut into contiguous
  blocks, each re-ranked by an actor that loaded the reader once (``rerank.rerank_hits``), and
  the results come back in query order (``ray.util.ActorPool.map``).
- ``cluster --method encoder --ray``: the driver tokenises and batches the mentions
  (``MentionEncoder.plan``); contiguous blocks of batches go to actors that loaded the encoder once.

What moves between machines: the workers read the dataset's ``passages.jsonl`` and load the
models from the paths given on the command line (made absolute), so those must be visible at the
same path on every node (a shared file system), or be a Hugging Face name each node can load, or
``default`` (the encoder bundled with corefsearch). corefsearch itself must be installed in the
Python environment of every node. Only the driver writes: the index directory, run and cluster
files need not be shared. Queries, retrieved hits, passage texts, tokenised mentions and the
vectors travel through Ray's object store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.errors import CorefSearchError, InputError, MissingArtefactError
from corefsearch.io.outputs import Output, output_locks, writes_outputs
from corefsearch.io.read import json_record

if TYPE_CHECKING:
    import numpy as np

    from corefsearch.cluster.inputs import MentionRecord
    from corefsearch.cluster.model import MentionEncoder
    from corefsearch.dense.indexing import DenseIndexSummary
    from corefsearch.reader.rerank import ReaderOptions
    from corefsearch.schema import Hit, Query

RAY_HINT = 'install it with `pip install "corefsearch[ray]"`'
CONNECT_TIMEOUT_S = 5.0
# Reader and mention work is cut into this many blocks per worker: enough for a fast worker to
# take over a slow one's share, few enough that each block's overhead (one call) does not count.
BLOCKS_PER_WORKER = 4


@dataclass
class RayOptions:
    """``--ray auto|ADDRESS``, ``--ray-workers N`` and ``--ray-cpus-per-worker C``.

    ``auto``: the cluster of ``RAY_ADDRESS``, or the one ``ray start --head`` started on this machine
    (if it still answers), and otherwise a local one started for the run (:func:`auto_address`). An address:
    ``HOST:PORT`` (the head's GCS address ``ray start --head`` prints, e.g. ``10.0.0.1:6379``) or
    ``ray://HOST:PORT`` (Ray Client). ``workers``: actors, each with one model; default as many as
    the cluster has room for (its CPUs / ``cpus_per_worker``, or one per GPU with a GPU device).
    """

    address: str = "auto"
    workers: int | None = None
    cpus_per_worker: float = 1.0

    def validate(self) -> None:
        if self.address != "auto":
            split_address(self.address, "--ray")
        if self.workers is not None and self.workers < 1:
            raise InputError(f"--ray-workers must be at least 1, got {self.workers}")
        if not self.cpus_per_worker > 0:
            raise InputError(f"--ray-cpus-per-worker must be more than 0, got {self.cpus_per_worker}")

    @property
    def threads(self) -> int:
        """The torch (or ONNX Runtime) threads of each worker: its CPUs."""
        return max(1, int(self.cpus_per_worker))


def import_ray() -> Any:
    """The ``ray`` module, or a clear error when corefsearch was installed without it."""
    try:
        import ray
    except ImportError:
        raise MissingArtefactError(f"--ray needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


def split_address(address: str, option: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` or ``ray://HOST:PORT`` (an IPv6 host in brackets)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{option} {address}: expected auto, HOST:PORT (the address `ray start --head` prints, "
                         "e.g. 10.0.0.1:6379) or ray://HOST:PORT (Ray Client)")
    return host, int(port)


def check_reachable(address: str, option: str) -> None:
    """Fail at once when nothing accepts connections at ``address``: ``ray.init`` retries an
    unreachable address for minutes before it gives up (measured: 30 s a try, over and over)."""
    host, port = split_address(address, option)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        raise CorefSearchError(f"{option} {address}: no Ray cluster answers there ({err.strerror or err}); start one "
                               "with `ray start --head` and pass the address it prints, or use --ray auto") from None


@contextlib.contextmanager
def ray_session(options: RayOptions) -> Iterator[Any]:
    """Connected to the cluster of ``options`` for the ``with`` block (disconnected after it, and a
    local cluster started for the run stopped). A connection the calling program opened itself
    (``ray.init`` before, as the tests do) is used as it is and left open."""
    ray = import_ray()
    if options.address != "auto":
        check_reachable(options.address, "--ray")
        address: str | None = options.address
    else:
        address = auto_address()
    if ray.is_initialized():
        yield ray
        return
    try:
        with fatal_signal_handlers_kept():
            # Errors only: Ray's start-up notices would mix with corefsearch's output.
            ray.init(address=address, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise CorefSearchError(f"--ray {options.address}: could not connect to the Ray cluster: {_first_line(err)} "
                               "(a cluster with token authentication needs its token here too: RAY_AUTH_TOKEN or "
                               "RAY_AUTH_TOKEN_PATH, as on its nodes)") from None
    try:
        yield ray
    finally:
        with fatal_signal_handlers_kept():
            ray.shutdown()


# The signals the JVM handles itself: it raises SIGSEGV (and SIGBUS, SIGFPE, SIGILL) on purpose, for
# implicit null checks and safepoint polls, and SIGUSR2 suspends its threads.
JVM_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGUSR2")


@contextlib.contextmanager
def fatal_signal_handlers_kept() -> Iterator[None]:
    """The native handlers of ``JVM_SIGNALS`` as they were before the block, put back after it.

    ``ray.init`` in the driver installs its own crash handler for those signals (absl's failure
    signal handler) and ``ray.shutdown`` resets them to the default, over the handlers of a JVM
    already running in the process (Lucene, for BM25 retrieval before the Ray re-ranking): the JVM's
    next deliberate SIGSEGV would then kill the process. Python's ``signal`` module cannot save a
    native handler, so ``sigaction`` is called through ctypes, each handler kept as opaque bytes
    (written by hand: no library does this). A real crash still ends the process, reported by the
    JVM or by Python's ``faulthandler`` instead of Ray."""
    import ctypes
    import signal
    import sys

    if sys.platform == "win32":
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    numbers = [int(getattr(signal, name)) for name in JVM_SIGNALS if hasattr(signal, name)]
    saved = {}
    for number in numbers:
        buffer = ctypes.create_string_buffer(512)  # larger than any platform's struct sigaction
        if libc.sigaction(number, None, buffer) == 0:
            saved[number] = buffer
    try:
        yield
    finally:
        for number, buffer in saved.items():
            libc.sigaction(number, buffer, None)


def auto_address() -> str:
    """The cluster ``--ray auto`` joins: ``RAY_ADDRESS``, else the one ``ray start --head`` last started on
    this machine if it still answers, else ``local`` (a new local cluster for the run).

    ``ray.init()`` would also try the last ``ray start``'s address, but it does so even when that
    cluster is gone (killed rather than stopped with ``ray stop``), and then retries for minutes."""
    environment = os.environ.get("RAY_ADDRESS", "").strip()
    if environment:
        if environment not in ("auto", "local"):
            check_reachable(environment, "RAY_ADDRESS")
        return environment
    try:  # Ray's own record of the last `ray start` on this machine (its temp folder's ray_current_cluster)
        from ray._private.services import find_bootstrap_address

        recorded = find_bootstrap_address(None)
    except Exception:  # another Ray version: start a local cluster rather than guess
        recorded = None
    if recorded:
        with contextlib.suppress(CorefSearchError):
            check_reachable(str(recorded), "ray start")
            return str(recorded)
    return "local"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


@contextlib.contextmanager
def worker_errors() -> Iterator[None]:
    """A corefsearch error raised in a worker (a bad record, a missing model folder on a node) is
    raised again here as it is, without Ray's remote traceback; any other failure of the cluster
    (a worker that died, a module missing on a node) becomes one line naming its cause."""
    ray = import_ray()
    try:
        yield
    except CorefSearchError as err:
        if not isinstance(err, ray.exceptions.RayError):
            raise
        raise _user_error(err) or CorefSearchError(f"a Ray worker failed: {_first_line(err)}") from None
    except Exception as err:
        found = _user_error(err)
        if found is not None:
            raise found from None
        if isinstance(err, ray.exceptions.RayError) or type(err).__module__.startswith("ray."):
            raise CorefSearchError(f"a Ray worker failed: {_last_line(err)} (is corefsearch, with the same "
                                   "version, installed on every node, and every path visible there?)") from None
        raise


def carried(call: Any) -> tuple[str, str] | tuple[None, Any]:
    """``(None, call())``, or ``(error class, message)`` of the corefsearch error it raised. The
    workers return their users' errors (a bad record, a model folder missing on a node) as data:
    Ray Data does not carry a remote exception's type and message back to the driver (only its
    traceback as text), and retrying a bad record is pointless."""
    try:
        return None, call()
    except CorefSearchError as err:
        return type(err).__name__, str(err)


def uncarried(result: tuple[str | None, Any]) -> Any:
    """The value of :func:`carried`, or its error raised again here."""
    kind, value = result
    if kind is None:
        return value
    classes = {cls.__name__: cls for cls in (InputError, MissingArtefactError)}
    raise classes.get(kind, CorefSearchError)(value)


def _user_error(err: BaseException) -> CorefSearchError | None:
    """The corefsearch error a Ray exception carries (``cause``, ``__cause__``), if any."""
    from ray.exceptions import RayError

    stack: list[Any] = [err]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, CorefSearchError) and not isinstance(current, RayError):
            return current
        stack += [getattr(current, "cause", None), current.__cause__, current.__context__]
    return None


def _last_line(err: BaseException) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(err).__name__


@dataclass(frozen=True)
class WorkerPlan:
    """How many workers, and the CPUs, GPUs and device of each."""

    workers: int
    cpus: float
    gpus: float
    device: str  # cpu | cuda: what each worker loads its model on


def plan_workers(ray: Any, options: RayOptions, device: str) -> WorkerPlan:
    """The workers the cluster has room for: one GPU each with ``device`` cuda (or auto on a cluster
    with GPUs), else ``options.cpus_per_worker`` CPUs each. A request that does not fit is an
    error rather than a run that waits for resources forever."""
    resources = ray.cluster_resources()
    cpus_total, gpus_total = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
    if device == "cuda" and gpus_total < 1:
        raise InputError("--device cuda: the Ray cluster has no GPU; use --device cpu (or auto)")
    gpus = 1.0 if device == "cuda" or (device == "auto" and gpus_total >= 1) else 0.0
    room = int(gpus_total) if gpus else int(cpus_total // options.cpus_per_worker)
    if gpus:
        room = min(room, int(cpus_total // options.cpus_per_worker))
    what = (f"{cpus_total:g} CPUs and {gpus_total:g} GPUs, room for {room} workers of one GPU and "
            f"{options.cpus_per_worker:g} CPUs" if gpus else
            f"{cpus_total:g} CPUs, room for {room} workers of {options.cpus_per_worker:g} CPUs")
    if room < 1 or (options.workers is not None and options.workers > room):
        wanted = options.workers if options.workers is not None else 1
        raise InputError(f"--ray-workers {wanted}: the Ray cluster has {what}; ask for fewer workers or fewer "
                         "--ray-cpus-per-worker, or add nodes")
    return WorkerPlan(options.workers or room, options.cpus_per_worker, gpus, "cuda" if gpus else "cpu")


def _quiet_ray_data(ray: Any) -> None:
    """corefsearch shows its own progress bar; Ray Data's bars and notices would mix with it (its
    errors still show, and its full log is in the Ray session's ``logs/ray-data``)."""
    import ray.data

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)


def blocks(count: int, workers: int) -> list[range]:
    """``range(count)`` cut into contiguous blocks, ``BLOCKS_PER_WORKER`` per worker (fewer when short)."""
    parts = max(1, min(count, workers * BLOCKS_PER_WORKER))
    return [range(i * count // parts, (i + 1) * count // parts) for i in range(parts) if count]


# --- dense encoding: index --dense --ray ------------------------------------------------------------


def scan_chunk_starts(path: Path, chunk_size: int) -> tuple[str, int, list[tuple[int, int]]]:
    """``indexing.scan_passages`` (sha256 and records, in one pass) plus where each chunk starts: the
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
    from corefsearch.schema import Passage

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
    the shared passages file, with the local path's ``indexing._encode_chunk``."""

    def __init__(self, encoder: str, device: str, backend: str, batch_size: int, passages: str, threads: int) -> None:
        import torch

        from corefsearch.dense.indexing import load_encoder

        torch.set_num_threads(threads)
        self.loaded = carried(lambda: load_encoder(encoder, device, backend, ("passage",), threads))
        self.batch_size = batch_size
        self.passages = Path(passages)

    def encode(self, offset: int, line: int, rows: int) -> tuple[np.ndarray, list[str], float, str]:
        from corefsearch.dense.indexing import _encode_chunk

        model = uncarried(self.loaded)
        passages = read_chunk(self.passages, offset, line, rows)
        timer = [0.0]
        encoded = None
        for item in _encode_chunk(model, [p.title for p in passages], [p.text for p in passages], self.batch_size,
                                  timer):
            if not isinstance(item, int):
                encoded = item
        assert encoded is not None
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
    from corefsearch.dense.indexing import _dense_outputs

    return _dense_outputs({**a, "shard": None})


@writes_outputs(_ray_dense_outputs)
def build_dense_index_on_ray(dataset_dir: Path, out: Path, encoder: str, ray_options: RayOptions,
                             faiss_type: str = "flat", batch_size: int = 64, device: str = "auto",
                             overwrite: bool = False, chunk_size: int | None = None,
                             backend: str = "torch") -> DenseIndexSummary:
    """``indexing.build_dense_index`` with the encoding spread over a Ray cluster (see the module
    doc): the shards of ``--shard I/N`` (N workers) in ``out/dense-shards``, merged into ``out/dense``.
    Complete shards of an earlier run with the same passages, encoder and settings are kept."""
    from corefsearch.datasets.dataset import Dataset
    from corefsearch.dense import faiss_index
    from corefsearch.dense import indexing as dense

    started = time.perf_counter()
    ray_options.validate()
    chunk_size = dense.CHUNK_SIZE if chunk_size is None else chunk_size
    dataset = Dataset(dataset_dir)
    dense.check_build_options(faiss_type, batch_size, chunk_size)
    out = Path(out)
    target = out / dense.DENSE_DIR
    if target.exists() and not overwrite:
        raise InputError(f"{target} already exists (use --overwrite to replace it)")
    passages_path = dataset.passages_path.resolve()
    if not passages_path.exists():
        raise MissingArtefactError(f"{dataset.passages_path}: no such file; is {dataset_dir} a complete dataset?")
    passages_sha256, count, starts = scan_chunk_starts(passages_path, chunk_size)
    if count == 0:
        raise InputError(f"{dataset.passages_path} holds no passages")
    reference = dense.portable_reference(encoder)  # a folder made absolute: the workers start elsewhere
    # The driver loads the encoder only for its record (fingerprint, dimension) and the checks of the
    # local path (a reader given as encoder, a missing ONNX export), on the CPU: it encodes nothing.
    model = dense.load_encoder(reference, "cpu", backend, ("passage",))
    encoder_info = dense.encoder_record(model)
    del model
    dimension = int(encoder_info["dimension"])
    faiss_index.faiss_parameters(faiss_type, dimension, count)  # fails now rather than after the encoding
    n_chunks = len(starts)

    with ray_session(ray_options) as ray, worker_errors():
        workers = plan_workers(ray, ray_options, device)
        shards = [(i, workers.workers) for i in range(workers.workers)]
        folders = {shard: out / dense.SHARDS_DIR / dense.shard_name(shard) for shard in shards}
        with output_locks((folder, "--out") for folder in folders.values()):
            plans: dict[tuple[int, int], Any] = {}  # the shards to encode (or finish encoding)
            for shard, folder in folders.items():
                plan = dense._Plan(count, chunk_size, dense.shard_chunks(n_chunks, shard), set())
                if folder.exists() and not overwrite:
                    _check_kept_shard(folder, shard, passages_sha256, encoder_info, chunk_size, backend)
                    continue
                partial = folder.with_name(folder.name + ".partial")
                dense._open_partial(partial, dense.partial_record(passages_sha256, count, encoder_info, plan, shard,
                                                                  backend))
                plan.done = {n for n in plan.chunks
                             if dense._chunk_is_complete(partial / "chunks", n, plan.size([n]), dimension)}
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
                from corefsearch.progress import track

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
                files = dense.VectorFiles([dense._chunk_paths(partial / "chunks", n) for n in plan.chunks], dimension)
                resumed = plan.size(plan.done)
                encoding = {**dense.encoding_record(batch_size, chunk_size, next(iter(devices), workers.device),
                                                    backend, plan.size(plan.chunks) - resumed, resumed,
                                                    seconds[shard]),
                            "ray": {"workers": workers.workers, "cpus_per_worker": workers.cpus}}
                dense.write_shard(folders[shard], files, plan, shard,
                                  dense.common_fields(dataset_dir, passages_sha256, count, encoder_info), encoding,
                                  overwrite, started)
                shutil.rmtree(partial, ignore_errors=True)
            # The merge of `--merge-shards N`, unlocked: this call already holds the lock on out/dense.
            dense.merge_dense_shards.__wrapped__(dataset_dir, out, workers.workers, faiss_type=faiss_type,
                                                 overwrite=overwrite)
    resumed_total = count - todo
    return dense.DenseIndexSummary(target, count, todo, resumed_total, time.perf_counter() - started, encode_wall,
                                   dimension, faiss_type=faiss_type, ray_workers=workers.workers)


def _check_kept_shard(folder: Path, shard: tuple[int, int], passages_sha256: str, encoder_info: dict[str, Any],
                      chunk_size: int, backend: str) -> None:
    """A complete shard already in place is kept when it holds these passages' vectors by this
    encoder, else the run stops (``--overwrite`` encodes it again)."""
    from corefsearch.dense.indexing import MANIFEST, SHARD_KIND, _read_json

    manifest = _read_json(folder / MANIFEST) or {}
    encoding = manifest.get("encoding") or {}
    same = (manifest.get("kind") == SHARD_KIND and manifest.get("passages_sha256") == passages_sha256
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

    _quiet_ray_data(ray)
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

    from corefsearch.dense.indexing import _save_chunk

    for row in results:
        if row["error"]:
            uncarried(tuple(str(row["error"]).split("\t", 1)))
        number = int(row["chunk"])
        shard = owner[number]
        vectors = np.asarray(row["vectors"], dtype=np.float32)
        ids = str(row["ids"]).split("\n")
        folder = folders[shard]
        _save_chunk(folder.with_name(folder.name + ".partial") / "chunks", number, vectors, ids)
        seconds[shard] += float(row["seconds"])
        devices.add(str(row["device"]))
        yield from range(len(ids))


# --- re-ranking: search --reader --ray ---------------------------------------------------------------


class ReaderWorker:
    """A Ray actor: loads the reader once, then re-ranks blocks of queries with ``rerank_hits``."""

    def __init__(self, options: ReaderOptions, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.reader = carried(lambda: replace(options, threads=options.threads or threads).load())

    def rerank(self, block: list[tuple[Query, list[Hit], dict[str, dict[str, Any]]]], rerank_k: int,
               fusion: str) -> tuple[str | None, Any]:
        from corefsearch.reader.rerank import rerank_hits

        def run() -> list[tuple[list[Any], list[Any]]]:
            reader = uncarried(self.reader)
            return [rerank_hits(reader, query, hits, texts, rerank_k, fusion) for query, hits, texts in block]

        return carried(run)


def rerank_on_ray(reader: ReaderOptions, retrieved: Sequence[tuple[Query, list[Hit]]],
                  texts: dict[str, dict[str, Any]], fusion: str, ray_options: RayOptions
                  ) -> tuple[list[tuple[list[Any], list[Any]]], int]:
    """``rerank_hits`` of every query of ``retrieved``, in order, computed on the Ray cluster; and the
    number of workers. Each block carries its queries, their top ``rerank_k`` hits and those texts."""
    from corefsearch.progress import track

    ray_options.validate()
    options = replace(reader, model=Path(reader.model).resolve())
    with ray_session(ray_options) as ray, worker_errors():
        from ray.util import ActorPool

        workers = plan_workers(ray, ray_options, reader.device)
        options = replace(options, device=workers.device)
        actor = ray.remote(ReaderWorker).options(num_cpus=workers.cpus, num_gpus=workers.gpus)
        parts = blocks(len(retrieved), workers.workers)
        pool = ActorPool([actor.remote(options, ray_options.threads)
                                   for _ in range(min(workers.workers, len(parts)))])
        work = []
        for part in parts:
            block = []
            for query, hits in (retrieved[i] for i in part):
                head = hits[:reader.rerank_k]
                block.append((query, hits, {h.passage_id: {"text": texts[h.passage_id]["text"]} for h in head}))
            work.append(block)
        results: list[tuple[list[Any], list[Any]]] = []
        done = pool.map(lambda worker, block: worker.rerank.remote(block, reader.rerank_k, fusion), work)
        for part, answer in track(zip(parts, done, strict=True), "Re-ranking (Ray)", total=len(parts)):
            pairs = uncarried(answer)
            assert len(pairs) == len(part)
            results.extend(pairs)
    return results, workers.workers


# --- mention encoding: cluster --method encoder --ray -------------------------------------------------


class MentionWorker:
    """A Ray actor: loads the mention encoder once, then encodes blocks of batches of tokenised mentions."""

    def __init__(self, folder: str, device: str, threads: int) -> None:
        import torch

        from corefsearch.cluster.model import MentionEncoder

        torch.set_num_threads(threads)
        self.encoder = carried(lambda: MentionEncoder.load(Path(folder), device))

    def encode(self, batches: list[list[Any]]) -> tuple[str | None, Any]:
        return carried(lambda: uncarried(self.encoder).encode_batches(batches))


def encode_mentions_on_ray(encoder: MentionEncoder, folder: Path, records: Sequence[MentionRecord],
                           batch_size: int, device: str, ray_options: RayOptions) -> np.ndarray:
    """``encoder.encode(records, batch_size)`` with the forward passes on the Ray cluster: the same
    plan (tokenised and batched here), contiguous blocks of its batches per call, the vectors put
    back in the records' order."""
    from corefsearch.progress import track

    ray_options.validate()
    plan = encoder.plan(records, batch_size)
    with ray_session(ray_options) as ray, worker_errors():
        from ray.util import ActorPool

        workers = plan_workers(ray, ray_options, device)
        actor = ray.remote(MentionWorker).options(num_cpus=workers.cpus, num_gpus=workers.gpus)
        parts = blocks(len(plan.batches), workers.workers)
        pool = ActorPool([actor.remote(str(Path(folder).resolve()), workers.device, ray_options.threads)
                                   for _ in range(min(workers.workers, len(parts)))])
        work = [[[plan.inputs[i] for i in plan.batches[b]] for b in part] for part in parts]
        outputs: list[np.ndarray] = []
        for answer in track(pool.map(lambda worker, block: worker.encode.remote(block), work),
                            "Encoding mentions (Ray)", total=len(parts)):
            outputs.extend(uncarried(answer))
    encoder.last_unique_inputs = len(plan.inputs)
    return plan.assemble(outputs, encoder.dimension)
