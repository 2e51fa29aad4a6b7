"""The numba kernels: compiled on first use and cached on disk (``cache=True``).

Every kernel releases the GIL (``nogil=True``): the pipelines run kernels on worker threads
beside threads that read and write the database, which take the GIL back for every row they
fetch, and a kernel holding it would stall them for its whole run.

:func:`kernels_cached` says whether numba's cache holds every kernel (the CLI compiles them
all at once, and says so, when it does not: simindex.cli.kernels).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_MODULES = ("candidates", "cluster", "evaluate", "exact", "hashing", "minhash", "shingle")
_MODULES += ("verify",)


def _kernels() -> Iterator[Any]:
    """The cached dispatchers defined in simindex's modules (inlined helpers have no cache
    entry of their own: they are compiled into their callers)."""
    for name in _MODULES:
        module = importlib.import_module(f"simindex.pipeline.{name}")
        for value in vars(module).values():
            if (
                hasattr(value, "_cache")
                and getattr(value, "__module__", None) == module.__name__
                and value.targetoptions.get("inline") != "always"
            ):
                yield value


def kernels_cached() -> bool:
    """Whether numba's cache holds an entry for every kernel (imports numba and the kernel
    modules). Where numba's cache is laid out otherwise than this check expects, the answer
    is True: the kernels then compile silently on first use, as numba does by default."""
    try:
        return all(os.path.exists(k._cache._cache_file._index_path) for k in _kernels())
    except AttributeError:
        return True


# Work items (documents, signature rows, pairs) at or below which a kernel runs its parallel
# loop on the calling thread alone: shingle.CHUNK, the documents of one iteration of it.
SMALL_WORK = 64


@contextmanager
def threads_for(items: int) -> Iterator[None]:
    """The block in which a kernel runs on ``items`` work items: for SMALL_WORK or fewer, the
    calling thread runs numba's parallel loops with one thread (on the OpenMP and TBB
    threading layers, the calling thread itself; numba's workqueue layer still hands the
    loop to a worker). A point query's document, or a few candidates, are one iteration of
    those loops, so there is nothing to share, and waking numba's worker threads for each
    kernel costs more than the kernel. numba keeps the count per thread, so threads working
    side by side keep theirs."""
    if items > SMALL_WORK:
        yield
        return
    from numba import get_num_threads, set_num_threads

    before = get_num_threads()
    set_num_threads(1)
    try:
        yield
    finally:
        set_num_threads(before)
