"""Java exceptions from Pyserini and Anserini (``jnius.JavaException``) as corefsearch errors, for
library users as much as for the command line.

- :func:`java_errors` turns an exception raised through pyjnius into one
  :class:`~corefsearch.base.errors.InputError` line: what failed, the Java class and the first line
  of its message (cut), and what to run.
- :func:`java_stderr` captures what Java prints on ``System.err`` while a block runs. Anserini's
  ``SearchCollection`` searches in a thread pool and, when a query fails in a worker, prints
  the stack trace and goes on: the run silently lacks that query and ``main`` returns normally.
  :func:`raise_on_java_trace` finds such a trace in the captured text.
- :func:`raise_clause_limit`: Lucene refuses a Boolean query of more than ``maxClauseCount``
  clauses (1,024 by default; one clause per distinct query term), which a ``context`` query
  over a long passage reaches. Raising the limit leaves every query under it as it was.

Written by hand: pyjnius has no such translation, and Anserini reports worker failures only on
``System.err``.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from corefsearch.base.errors import InputError

MESSAGE_CHARS = 240  # of the Java message kept in the one-line error
# Lucene's default maxClauseCount; the limit corefsearch sets (the JVM-wide, static limit).
LUCENE_DEFAULT_MAX_CLAUSES = 1024
MAX_CLAUSES = 1 << 20
_TRACE_HEAD = re.compile(r"^(?:Exception in thread \"[^\"]*\" )?([\w$.]+(?:Exception|Error|Throwable|"
                         r"TooManyClauses|TooManyNestedClauses))(?::\s*(.*))?$")


def is_java_exception(err: BaseException) -> bool:
    """Whether ``err`` is pyjnius's ``JavaException`` (checked without importing jnius, which starts a JVM)."""
    return any(cls.__name__ == "JavaException" and cls.__module__.startswith("jnius") for cls in type(err).__mro__)


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    # Lucene names a folder as "MMapDirectory@PATH lockFactory=CLASS@HASH" and lists its files: keep the path.
    text = re.sub(r"\b\w*Directory@(\S+?) lockFactory=[\w.$@]+", r"\1", text)
    text = re.sub(r": files: \[.*", "", text)
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS].rstrip() + "…"


def java_message(err: BaseException) -> str:
    """``Class: message`` of a Java exception, on one line, the package left out and the message cut."""
    classname = str(getattr(err, "classname", "") or "").rsplit(".", 1)[-1]
    inner = getattr(err, "innermessage", None)
    if inner is None:
        inner = str(err).removeprefix("JVM exception occurred: ")
    message = _short(inner)
    if not classname:
        return message or "a Java exception"
    return f"{classname}: {message}" if message else classname


@contextlib.contextmanager
def java_errors(what: str, remedy: str) -> Iterator[None]:
    """Turn a Java exception inside the block into ``InputError("WHAT (Class: message); REMEDY")``."""
    try:
        yield
    except Exception as err:
        if not is_java_exception(err):
            raise
        raise InputError(f"{what} ({java_message(err)}); {remedy}") from None


@contextlib.contextmanager
def java_stderr() -> Iterator[Callable[[], str]]:
    """Send Java's ``System.err`` to a buffer while the block runs; yields a function that
    returns what was printed. (log4j's console appender keeps the stream it started with, so
    Anserini's log lines still reach the terminal as before.)"""
    from pyserini.pyclass import autoclass

    system = autoclass("java.lang.System")
    buffer = autoclass("java.io.ByteArrayOutputStream")()
    original = system.err
    system.setErr(autoclass("java.io.PrintStream")(buffer, True, "UTF-8"))
    try:
        yield lambda: str(buffer.toString("UTF-8"))
    finally:
        system.setErr(original)


def java_traces(text: str) -> list[str]:
    """The first lines (``Class: message``) of the Java stack traces in ``text``."""
    heads = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = _TRACE_HEAD.match(line.strip())
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if match and following.startswith("at "):
            classname = match.group(1).rsplit(".", 1)[-1]
            heads.append(f"{classname}: {_short(match.group(2) or '')}".rstrip(": "))
    return heads


def raise_on_java_trace(text: str, what: str, remedy: str) -> None:
    """Raise ``InputError`` naming the first Java stack trace in ``text``; anything else Java
    printed is passed on to stderr unchanged."""
    traces = java_traces(text)
    if traces:
        more = f" (and {len(traces) - 1} more)" if len(traces) > 1 else ""
        raise InputError(f"{what} ({traces[0]}{more}); {remedy}")
    if text.strip():
        sys.stderr.write(text if text.endswith("\n") else text + "\n")


@functools.lru_cache(maxsize=1)
def raise_clause_limit() -> int:
    """Raise Lucene's (JVM-wide) ``IndexSearcher.maxClauseCount`` to :data:`MAX_CLAUSES`; the JVM
    must be configured (``ensure_java``). Returns the limit."""
    from pyserini.pyclass import autoclass

    searcher: Any = autoclass("org.apache.lucene.search.IndexSearcher")
    if int(searcher.getMaxClauseCount()) < MAX_CLAUSES:
        searcher.setMaxClauseCount(MAX_CLAUSES)
    return int(searcher.getMaxClauseCount())


def distinct_terms(text: str) -> int:
    """An upper estimate of the distinct terms Lucene's analyzer makes of ``text`` (its word
    pieces, lower-cased; stemming and stop words only merge or drop some)."""
    return len(set(re.findall(r"\w+", text.lower())))
