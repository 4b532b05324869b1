"""Returning freed memory to the system during long runs."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from typing import Any


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def release_memory() -> None:
    """Give the memory freed since the last call back to the system where the C library keeps it.

    glibc's ``malloc`` keeps freed heap pages for reuse: after the dev evaluation had encoded the
    dev passages the training process held half a gigabyte more than it used. ``malloc_trim``
    returns them (the allocator itself has no Python interface, hence ctypes); elsewhere
    (macOS, musl, Windows) this only collects garbage.
    """
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
