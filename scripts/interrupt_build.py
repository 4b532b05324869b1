"""Ctrl-C at many moments of `corefsearch build-dataset` under CPU load: prints a table of the tries.

Each try runs the real CLI in a child process on the ECB+ tarball (or --corpus) while --busy
processes spin on the CPU, and sends it SIGINT a chosen time after its build started (its hidden
partial folder appeared). The delays are spread evenly from 0 to --last of the time an
uninterrupted build under the same load takes to put its dataset in place. A try is clean when
the command exits 130 with its one "interrupted" line, no traceback, and nothing left at --out
(no dataset, no partial folder). The test suite runs a few such moments
(tests/datasets/test_interrupt.py); this is the thorough version. Exit status: 1 if any try was not clean.

    python scripts/interrupt_build.py --tries 40 --busy 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from interrupt_helpers import ECBPLUS_TARBALL, interrupt_at, table  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tries", type=int, default=40, help="interrupted builds (default 40)")
    parser.add_argument("--busy", type=int, default=2, help="CPU-spinning processes alongside (default 2)")
    parser.add_argument("--last", type=float, default=0.95,
                        help="the latest delay, as a fraction of an uninterrupted build's time (default 0.95)")
    parser.add_argument("--corpus", type=Path, default=ECBPLUS_TARBALL, help="ECB+ tarball or folder")
    args = parser.parse_args()
    if args.tries < 1 or args.busy < 0 or not 0 <= args.last <= 1:
        parser.error("--tries must be at least 1, --busy at least 0 and --last between 0 and 1")
    with tempfile.TemporaryDirectory(prefix="corefsearch-interrupt-") as work:
        reference, tries = interrupt_at(args.corpus, Path(work), args.tries, args.busy, args.last)
    print(table(reference, tries))
    signalled = [t for t in tries if t.signalled]
    bad = [t for t in signalled if t.problems]
    print(f"\n{len(signalled) - len(bad)} of {len(signalled)} interrupted builds ended cleanly "
          f"({len(tries) - len(signalled)} finished before their signal), {args.busy} busy processes.")
    for attempt in bad:
        print(f"\nSIGINT after {attempt.delay:.3f} s: {attempt.outcome}\n{attempt.stderr}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
