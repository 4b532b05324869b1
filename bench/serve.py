"""Serving benchmark: `corefsearch serve` warm against the cold `corefsearch query` of the same question.

ECB+ events, collection = all 43 topics (the index of bench/e2e.py: Lucene + the dense index of the
retriever trained with markers, and its integrated reader with markers). The server is the real
command (`corefsearch serve` in a subprocess, uvicorn, ``--search-threads`` search threads), started
once with every retriever and the reader; clients post ad-hoc questions the way the page does (a
passage and the character offsets of the mention in it) for a seeded sample of ``--questions`` test
queries, k 10, one setting at a time:

- ``bm25``: BM25, query mention + named entities;
- ``hybrid``: BM25 (mention + entities) and dense fused by RRF;
- ``hybrid+reader``: the same, the reader re-ranking the top 50.

For each setting and each count of concurrent clients in ``--clients`` (default 1, 4, 16; each
client one connection, a request after the other), ``--requests`` requests after ``--warm-up`` of
them per setting: latency p50 and p95 per request (client side), requests/s, failed requests; beside
the cold ``corefsearch query`` of the first question with the same settings (a new process: the
wall time a user waits for a one-off question today), and their ratio. Then a soak: ``--soak-clients``
clients (default 16) for ``--soak-seconds`` (default 300) cycling through the settings and
questions, counting the failed requests (an HTTP status other than 200, or no answer within
``--timeout``) and the server's resident memory before and after.

Aims (issue 12, 2 cores): bm25 p50 ≤ 50 ms, hybrid p50 ≤ 100 ms, + reader ≤ 1 s, no failed request
under 16 clients for 5 minutes.

It reuses a bench/e2e.py working folder (``--e2e-dir``: its ``index``, ``dense/ecb-all`` dataset and
``reader-integrated-markers``), or takes ``--index``, ``--dataset`` and ``--reader`` (then
``--settings`` may leave out those a missing dense index or reader cannot run). Writes
``## Serving (bench/serve.py)`` in bench/RESULTS.md (``--results``).

Run: ``python bench/serve.py --e2e-dir DIR [--settings bm25,hybrid,hybrid+reader] [--clients 1,4,16]
[--requests 200] [--questions 100] [--soak-seconds 300] [--soak-clients 16] [--search-threads 2]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from bm25 import machine, markdown_table, write_section  # noqa: E402

from corefsearch.base.schema import Query  # noqa: E402
from corefsearch.datasets.dataset import Dataset  # noqa: E402

SECTION = "## Serving (bench/serve.py)"
CLI = [sys.executable, "-m", "corefsearch.cli"]
K, RERANK_K = 10, 50
# key: (row name, the request's options, the cold `query`'s options, needs the dense index, needs the reader)
SETTINGS: dict[str, tuple[str, dict[str, Any], list[str], bool, bool]] = {
    "bm25": ("BM25 mention+entities", {"retriever": "bm25", "query_format": "mention+entities", "rerank_k": 0},
             ["--retriever", "bm25", "--query-format", "mention+entities"], False, False),
    "hybrid": ("hybrid RRF (BM25 mention+entities + dense)", {"retriever": "hybrid", "rerank_k": 0},
               ["--retriever", "hybrid", "--query-format", "mention+entities"], True, False),
    "hybrid+reader": (f"hybrid + reader re-ranking {RERANK_K}", {"retriever": "hybrid", "rerank_k": RERANK_K},
                      ["--retriever", "hybrid", "--query-format", "mention+entities", "--rerank-k", str(RERANK_K)],
                      True, True),
}
AIMS_MS = {"bm25": 50.0, "hybrid": 100.0, "hybrid+reader": 1000.0}


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


@dataclass
class Load:
    """What ``clients`` clients measured: each request's latency (seconds) and its failures."""

    clients: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return len(self.latencies) + self.failed

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        if len(self.latencies) == 1:
            return self.latencies[0]
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[int(p) - 1]

    @property
    def per_second(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else float("nan")


def body(query: Query, options: dict[str, Any]) -> dict[str, Any]:
    """The page's question: the passage and the mention's characters in it."""
    return {"context": query.text, "start": query.start, "end": query.end, "k": K, **options}


def run_load(url: str, bodies: Sequence[dict[str, Any]], clients: int, requests: int | None = None,
             seconds: float | None = None, timeout: float = 60.0) -> Load:
    """``clients`` threads, each with its own connection, posting ``bodies`` in turn until
    ``requests`` were sent (all clients together) or ``seconds`` passed."""
    load = Load(clients)
    lock = threading.Lock()
    counter = itertools.count()
    deadline = time.perf_counter() + seconds if seconds is not None else None

    def client() -> None:
        with httpx.Client(base_url=url, timeout=timeout) as session:
            while True:
                number = next(counter)
                if requests is not None and number >= requests:
                    return
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                started = time.perf_counter()
                try:
                    response = session.post("/search", json=bodies[number % len(bodies)])
                    failure = None if response.status_code == 200 else f"HTTP {response.status_code}"
                except httpx.HTTPError as err:
                    failure = type(err).__name__
                elapsed = time.perf_counter() - started
                with lock:
                    if failure is None:
                        load.latencies.append(elapsed)
                    else:
                        load.failures[failure] = load.failures.get(failure, 0) + 1

    threads = [threading.Thread(target=client, name=f"client-{i}") for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    load.seconds = time.perf_counter() - started
    return load


def occurrence(query: Query) -> int:
    """Which occurrence of its mention (``query --occurrence``) the query's mention is."""
    starts = [match.start() for match in re.finditer(re.escape(query.mention), query.text)]
    return starts.index(query.start) + 1


def cold_query(index: Path, query: Query, options: Sequence[str], reader: Path | None, runs: int) -> float:
    """Median wall seconds of ``corefsearch query`` in a new process for ``query``."""
    command = [*CLI, "query", "--index", str(index), "--mention", query.mention, "--context", query.text,
               "--occurrence", str(occurrence(query)), "--k", str(K), "--device", "cpu", "--json", *options]
    if reader is not None:
        command += ["--reader", str(reader)]
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"the cold query failed: {shlex.join(command)}\n{done.stderr}")
    return statistics.median(times)


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Server:
    """``corefsearch serve`` in a subprocess, logging to ``log``."""

    def __init__(self, command: list[str], log_path: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.handle = log_path.open("w")
        started = time.perf_counter()
        self.process = subprocess.Popen(command, stdout=self.handle, stderr=subprocess.STDOUT)
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                raise SystemExit(f"the server stopped (exit {self.process.returncode}); see {log_path}")
            time.sleep(0.2)
        self.start_seconds = time.perf_counter() - started

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.handle.close()
        return code


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sample_questions(dataset: Path, size: int) -> list[Query]:
    queries = Dataset(dataset).queries("test")
    return random.Random(13).sample(queries, min(size, len(queries)))


def ms(seconds: float) -> str:
    return f"{1000 * seconds:,.1f}"


def report(args: argparse.Namespace, settings: list[str], loads: dict[str, list[Load]], cold: dict[str, float],
           soak: Load | None, soak_rss: tuple[float, float], info: dict[str, Any], start_seconds: float,
           started: dt.datetime, stop_code: int) -> str:
    lines = [SECTION, "",
             f"Run {started:%Y-%m-%d %H:%M} ({(dt.datetime.now() - started).total_seconds() / 60:.1f} min): "
             f"`python bench/serve.py {shlex.join(sys.argv[1:])}`", ""]
    lines += [f"- {name}: {value}" for name, value in machine().items()]
    lines += [f"- index: `{info['index']}`; retrievers {', '.join(info['retrievers'])}; reader "
              f"`{(info.get('reader') or {}).get('model')}`",
              f"- server: `corefsearch serve`, {args.search_threads} search threads; {len(args.questions_used)} "
              f"questions (seeded sample of the test queries, sent as passage + mention offsets), k {K}", ""]
    loaded = ", ".join(f"{part} {seconds:.1f} s" for part, seconds in info.get("load_seconds", {}).items())
    lines += [f"Start-up: {start_seconds:.1f} s to the first answer of /health ({loaded}).", ""]
    rows = []
    for key in settings:
        for load in loads[key]:
            p50 = load.percentile(50)
            rows.append([SETTINGS[key][0], str(load.clients), str(load.requests), ms(p50), ms(load.percentile(95)),
                         f"{load.per_second:,.1f}", str(load.failed),
                         f"{cold[key]:.1f}" if load.clients == 1 else "",
                         f"{cold[key] / p50:,.0f}×" if load.clients == 1 and p50 == p50 else ""])
    lines += ["Warm requests against the cold `corefsearch query` of the first question (a new process):", "",
              markdown_table(["setting", "clients", "requests", "p50 ms", "p95 ms", "requests/s", "failed",
                              "cold query s", "cold / warm p50"], rows, ["l", "r", "r", "r", "r", "r", "r", "r", "r"]),
              ""]
    if soak is not None:
        failures = ", ".join(f"{why}: {count}" for why, count in sorted(soak.failures.items())) or "none"
        lines += [f"Soak: {soak.clients} clients for {soak.seconds:.0f} s, cycling through "
                  f"{', '.join(settings)}:", "",
                  markdown_table(["requests", "failed", "requests/s", "p50 ms", "p95 ms", "server RSS before MB",
                                  "after MB"],
                                 [[str(soak.requests), f"{soak.failed} ({failures})", f"{soak.per_second:,.1f}",
                                   ms(soak.percentile(50)), ms(soak.percentile(95)), f"{soak_rss[0]:,.0f}",
                                   f"{soak_rss[1]:,.0f}"]], ["r"] * 7), ""]
    lines += ["### Reading", ""]
    for key in settings:
        single = next((load for load in loads[key] if load.clients == 1), None)
        if single is not None and key in AIMS_MS:
            p50 = 1000 * single.percentile(50)
            verdict = "meets" if p50 <= AIMS_MS[key] else "misses"
            lines.append(f"- {SETTINGS[key][0]}: one client's p50 {p50:,.1f} ms {verdict} the aim of "
                         f"{AIMS_MS[key]:,.0f} ms; the cold query takes {cold[key]:.1f} s.")
    if soak is not None:
        verdict = "meets" if soak.failed == 0 and soak.seconds >= 300 else (
            "fails" if soak.failed else "is too short for")
        lines.append(f"- Soak: {soak.failed} failed of {soak.requests} requests in {soak.seconds:.0f} s with "
                     f"{soak.clients} clients: {verdict} the aim (no failure under 16 clients for 5 minutes).")
    lines.append(f"- The server stopped on SIGTERM with exit status {stop_code} (uvicorn re-raises the signal "
                 "after its graceful shutdown: -15 is the clean end).")
    return "\n".join(lines) + "\n"


def counts(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive counts, e.g. 1,4,16, got {text!r}")
    return values


def setting_keys(text: str) -> list[str]:
    keys = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [key for key in keys if key not in SETTINGS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(f"settings are among {', '.join(SETTINGS)}, got {text!r}")
    return keys


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--e2e-dir", type=Path, default=None, help="a bench/e2e.py working folder to reuse")
    parser.add_argument("--index", type=Path, default=None, help="index folder (default: E2E_DIR/index)")
    parser.add_argument("--dataset", type=Path, default=None, help="dataset (default: E2E_DIR/dense/ecb-all)")
    parser.add_argument("--reader", type=Path, default=None,
                        help="reader folder (default: E2E_DIR/reader-integrated-markers)")
    parser.add_argument("--settings", type=setting_keys, default=list(SETTINGS),
                        help=f"comma-separated among {', '.join(SETTINGS)} (default: all)")
    parser.add_argument("--clients", type=counts, default=[1, 4, 16], help="concurrent clients (default 1,4,16)")
    parser.add_argument("--requests", type=int, default=200, help="requests per setting and client count")
    parser.add_argument("--warm-up", type=int, default=10, help="requests per setting before timing")
    parser.add_argument("--questions", type=int, default=100, help="test queries sampled as questions")
    parser.add_argument("--cold-runs", type=int, default=1, help="cold `query` runs per setting (median)")
    parser.add_argument("--soak-seconds", type=float, default=300.0, help="soak duration (0: no soak)")
    parser.add_argument("--soak-clients", type=int, default=16)
    parser.add_argument("--search-threads", type=int, default=2, help="the server's --search-threads")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a request may take before it fails")
    parser.add_argument("--out-dir", type=Path, default=None, help="where the server's log goes (default: temporary)")
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args(argv)
    if min(args.requests, args.warm_up + 1, args.questions, args.cold_runs, args.soak_clients,
           args.search_threads) < 1:
        parser.error("--requests, --questions, --cold-runs, --soak-clients and --search-threads must be at least 1")
    e2e = args.e2e_dir
    index = args.index or (e2e / "index" if e2e else None)
    dataset = args.dataset or (e2e / "dense" / "ecb-all" if e2e else None)
    reader = args.reader or (e2e / "reader-integrated-markers" if e2e else None)
    if index is None or dataset is None:
        parser.error("give --e2e-dir (a bench/e2e.py working folder), or --index and --dataset")
    settings: list[str] = args.settings
    dense_needed = any(SETTINGS[key][3] for key in settings)
    if dense_needed and not (index / "dense" / "manifest.json").exists():
        parser.error(f"{index} has no dense index: run bench/e2e.py, or leave out the hybrid settings (--settings)")
    reader_needed = any(SETTINGS[key][4] for key in settings)
    if reader_needed and (reader is None or not (reader / "corefsearch_reader.json").exists()):
        parser.error(f"no reader at {reader}: give --reader, or leave out hybrid+reader (--settings)")
    started = dt.datetime.now()
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-serve-"))
    root.mkdir(parents=True, exist_ok=True)

    questions = sample_questions(dataset, args.questions)
    args.questions_used = questions
    retrievers = list(dict.fromkeys(SETTINGS[key][1]["retriever"] for key in settings))
    port = free_port()
    command = [*CLI, "serve", "--index", str(index), "--dataset", str(dataset), "--port", str(port),
               "--retriever", ",".join(retrievers), "--query-format", "mention+entities", "--device", "cpu",
               "--search-threads", str(args.search_threads), "--max-k", str(max(K, 100))]
    if reader_needed:
        command += ["--reader", str(reader), "--rerank-k", str(RERANK_K)]
    log(f"starting the server: {shlex.join(command[3:])} (log: {root / 'serve.log'})")
    server = Server(command, root / "serve.log", port)
    loads: dict[str, list[Load]] = {}
    cold: dict[str, float] = {}
    soak: Load | None = None
    try:
        info = httpx.get(f"{server.url}/info", timeout=30).json()
        log(f"server up in {server.start_seconds:.1f} s: {json.dumps(info.get('load_seconds'))}")
        for key in settings:
            name, options, cold_options, _, needs_reader = SETTINGS[key]
            bodies = [body(query, options) for query in questions]
            run_load(server.url, bodies, 1, requests=args.warm_up, timeout=args.timeout)
            loads[key] = []
            for clients in args.clients:
                load = run_load(server.url, bodies, clients, requests=args.requests, timeout=args.timeout)
                loads[key].append(load)
                log(f"{name}, {clients} clients: p50 {ms(load.percentile(50))} ms, p95 {ms(load.percentile(95))} ms, "
                    f"{load.per_second:.1f} requests/s, {load.failed} failed")
            cold[key] = cold_query(index, questions[0], cold_options, reader if needs_reader else None, args.cold_runs)
            log(f"{name}: the cold query took {cold[key]:.1f} s")
        rss_before = rss_mb(server.process.pid)
        if args.soak_seconds > 0:
            log(f"soak: {args.soak_clients} clients for {args.soak_seconds:.0f} s")
            mixed = [body(query, SETTINGS[key][1]) for query in questions for key in settings]
            soak = run_load(server.url, mixed, args.soak_clients, seconds=args.soak_seconds, timeout=args.timeout)
            log(f"soak: {soak.requests} requests, {soak.failed} failed, {soak.per_second:.1f} requests/s")
        rss_after = rss_mb(server.process.pid)
    finally:
        stop_code = server.stop()
    section = report(args, settings, loads, cold, soak, (rss_before, rss_after), info, server.start_seconds, started,
                     stop_code)
    print(section)
    write_section(args.results, section, SECTION)
    log(f"wrote {SECTION!r} to {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
