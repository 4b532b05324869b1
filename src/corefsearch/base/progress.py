"""Rich progress bars for long steps; quiet when ``COREFSEARCH_QUIET`` is set or output is not a terminal."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def progress_enabled() -> bool:
    return not os.environ.get("COREFSEARCH_QUIET")


def new_progress() -> Any:
    """The project's rich progress display (spinner, bar, count, times; transient, on stderr)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True), transient=True)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` under a rich progress bar (transient; on stderr)."""
    if not progress_enabled():
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with new_progress() as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)
