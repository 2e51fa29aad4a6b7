"""glibc's malloc, as the ``simindex`` process sets it for itself before any library loads.
Only the console script does this (:func:`simindex.cli.run`): the library, a guest in its
caller's process, changes none of it."""

from __future__ import annotations

import os
import sys
from typing import Any

_M_ARENA_MAX = -8  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_M_TRIM_THRESHOLD = -1


def malloc_settings() -> None:
    """glibc's malloc for a process that allocates batch after batch: at most two heap
    arenas (the reading and signing thread's, the database writer's), since every thread
    that allocates would get one and keep the freed batches in it; blocks of 4 MiB or more
    mapped on their own, since glibc's moving threshold would put later large blocks in the
    heap, where they stay resident once freed; and up to 16 MiB free at the top of a heap
    kept, since the next batch would fault those pages in again. A user's
    MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ wins; other C
    libraries are left alone."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return
    if "MALLOC_ARENA_MAX" not in os.environ:
        mallopt(_M_ARENA_MAX, 2)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        mallopt(_M_MMAP_THRESHOLD, 4 * 2**20)
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        mallopt(_M_TRIM_THRESHOLD, 16 * 2**20)


def _glibc(function: str) -> Any:
    """One of glibc's functions, by ctypes (None off Linux or with another C library)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return getattr(ctypes.CDLL("libc.so.6"), function)
    except (OSError, AttributeError):
        return None
