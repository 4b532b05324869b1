"""The Ray connection every stage on a cluster shares: the options of ``--ray``, connecting and
disconnecting (with the JVM's native signal handlers kept), sizing the workers, and carrying a
worker's error back as the user's error. The stages themselves are adapters beside this module
(see the package doc); none of them opens a connection on its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from corefsearch.base.checks import all_at_least_one
from corefsearch.base.errors import CorefSearchError, InputError, MissingArtefactError

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
        all_at_least_one({"--ray-workers": self.workers})
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


def quiet_ray_data(ray: Any) -> None:
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
