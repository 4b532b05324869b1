"""Ctrl-C (SIGINT) sent to a real `corefsearch build-dataset` process at chosen moments of its
build, with busy processes competing for the CPU: used by datasets/test_interrupt.py (a few moments) and
scripts/interrupt_build.py (many, with a table of the outcomes).

The clock of a try starts when the build is under way, i.e. when its hidden ``.OUT.*.partial``
folder appears (``io.atomic_directory``): before that the interpreter is still starting and
importing, where a Ctrl-C is Python's own business.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ECBPLUS_TARBALL = ROOT / "data" / "ecbplus" / "ECBplus.tar.gz"
INTERRUPTED_MESSAGE = "interrupted: nothing half-written was left in place"
INTERRUPTED_EXIT = 130
POLL_SECONDS = 0.001
START_TIMEOUT = 60.0


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def busy_cpus(processes: int) -> Iterator[None]:
    """``processes`` Python processes spinning on the CPU while the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def cli_environment() -> dict[str, str]:
    """The environment of the CLI child: this tree's sources first on the path, no progress bars."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["COREFSEARCH_QUIET"] = "1"
    return env


def build_command(corpus: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "corefsearch.cli", "build-dataset", str(corpus), "--format", "ecbplus",
            "--mention-type", "event", "--out", str(out)]


def leftovers(out: Path) -> list[str]:
    """What a build of ``out`` left beside it: ``out`` itself and its hidden partial or old folders."""
    return sorted(p.name for p in out.parent.iterdir() if p.name == out.name or p.name.startswith(f".{out.name}."))


@dataclass
class Try:
    """One run of the build, interrupted ``delay`` seconds after it started (``None``: not at all)."""

    delay: float | None
    signalled: bool  # the build was still running (no OUT yet) when SIGINT was sent
    returncode: int
    stderr: str
    started_after: float  # seconds from spawning the process to its partial folder
    commit_after: float | None  # seconds from the partial folder to OUT (uninterrupted runs only)
    ended_after: float  # seconds from the partial folder to the process's exit
    left: list[str]  # leftovers(out) once the process ended

    @property
    def problems(self) -> list[str]:
        """Why this interrupted try is wrong; empty when it ended as it must."""
        if not self.signalled:
            return []  # finished before the signal: not a try of the interrupt
        found = []
        if self.returncode != INTERRUPTED_EXIT:
            found.append(f"exit {self.returncode}, not {INTERRUPTED_EXIT}")
        if "Traceback" in self.stderr or "Exception ignored" in self.stderr:
            found.append("a traceback on stderr")
        if INTERRUPTED_MESSAGE not in self.stderr:
            found.append("no 'interrupted' line on stderr")
        if self.left:
            found.append(f"left {', '.join(self.left)}")
        return found

    @property
    def outcome(self) -> str:
        if not self.signalled:
            return "finished before the signal"
        return "; ".join(self.problems) or "interrupted cleanly"


def run_build(corpus: Path, folder: Path, delay: float | None) -> Try:
    """Build the dataset ``folder/dataset`` from ``corpus`` in a child process; ``delay`` seconds
    after its build started, send it SIGINT (``None``: let it finish)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    out = folder / "dataset"
    spawned = time.monotonic()
    # Ctrl-C as a terminal sends it: a process started in the background by a non-interactive shell
    # (`cmd &`, as a CI runner may start the suite) inherits SIGINT ignored, and so would the build.
    process = subprocess.Popen(build_command(corpus, out), env=cli_environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    with process:
        while process.poll() is None and not any(folder.glob(f".{out.name}.*.partial")) and not out.exists():
            if time.monotonic() - spawned > START_TIMEOUT:
                process.kill()
                raise TimeoutError(f"the build of {out} did not start within {START_TIMEOUT:.0f} s")
            time.sleep(POLL_SECONDS)
        started = time.monotonic()
        signalled, commit = False, None
        if delay is None:
            while process.poll() is None and not out.exists():
                time.sleep(POLL_SECONDS)
            commit = time.monotonic() - started if out.exists() else None
        else:
            time.sleep(delay)
            # Once OUT is in place the build is over (the process is only exiting): a signal then is
            # no try of an interrupted build, whose reference time a loaded machine can overstate.
            if process.poll() is None and not out.exists():
                process.send_signal(signal.SIGINT)
                signalled = True
        _, stderr = process.communicate(timeout=START_TIMEOUT)
        ended = time.monotonic() - started
    return Try(delay, signalled, process.returncode, stderr, started - spawned, commit, ended, leftovers(out))


def spread(seconds: float, points: int, last: float) -> list[float]:
    """``points`` delays from 0 to ``last`` × ``seconds``, evenly spaced."""
    if points == 1:
        return [0.0]
    return [seconds * last * i / (points - 1) for i in range(points)]


def interrupt_at(corpus: Path, work: Path, points: int, busy: int, last: float = 0.8) -> tuple[Try, list[Try]]:
    """Under ``busy`` spinning processes: two uninterrupted builds (the shorter time to its commit sets
    the scale), then ``points`` builds interrupted at delays spread from its start to ``last`` of that
    time. Returns the uninterrupted try and the interrupted ones."""
    with busy_cpus(busy):
        # The faster of two: the first build of a session can be slowed by cold caches, and too long a
        # scale would put the later moments after the build is over.
        references = [run_build(corpus, work / f"reference-{i}", None) for i in range(2)]
        for reference in references:
            if reference.returncode != 0 or reference.commit_after is None:
                raise RuntimeError(f"the uninterrupted build failed (exit {reference.returncode}):\n"
                                   f"{reference.stderr}")
        reference = min(references, key=lambda r: r.commit_after or 0.0)
        assert reference.commit_after is not None
        tries = [run_build(corpus, work / f"try-{i}", delay)
                 for i, delay in enumerate(spread(reference.commit_after, points, last))]
    return reference, tries


def table(reference: Try, tries: Sequence[Try]) -> str:
    """The tries as a markdown table, after a line on the uninterrupted build."""
    assert reference.commit_after is not None
    lines = [f"Uninterrupted build: started {reference.started_after:.2f} s after spawning, dataset in place "
             f"{reference.commit_after:.2f} s later, exit {reference.returncode}.", "",
             "| try | SIGINT after (s) | of the build | exit | ended after (s) | outcome |",
             "| ---: | ---: | ---: | ---: | ---: | --- |"]
    for number, attempt in enumerate(tries, start=1):
        assert attempt.delay is not None
        lines.append(f"| {number} | {attempt.delay:.3f} | {attempt.delay / reference.commit_after:.0%} | "
                     f"{attempt.returncode} | {attempt.ended_after:.2f} | {attempt.outcome} |")
    return "\n".join(lines)
