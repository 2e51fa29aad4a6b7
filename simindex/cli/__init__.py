"""The ``simindex`` command: a thin Typer layer over the library.

Each command parses its options, makes one library call and renders the result: data on
stdout, progress and summaries on stderr (simindex.cli.render). A SimindexError becomes
``Error: ...`` and exit status 1, Ctrl-C says what was committed and exits with 130
(simindex.cli.errors); any other exception is a bug and keeps its traceback. The library
(numba, NumPy, SQLAlchemy) loads inside the commands that use it, so --help starts fast.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import os
import sys

# The command modules register their commands on ``app`` as they are imported.
from simindex.cli import audit, documents, inspect, lifecycle, results, spark  # noqa: F401
from simindex.cli.app import app
from simindex.cli.render import shown

__all__ = ["app", "run", "shown"]


# --help lists the commands in the order of the job: make an index, fill it, find, remove.
ORDER = (
    "init ingest query pairs export clusters explain show dedup delete evict reband activate "
    "drop-banding runs stats check evaluate report tune"
).split()
app.registered_commands.sort(key=lambda c: ORDER.index(c.name or c.callback.__name__))


def run() -> None:
    """The ``simindex`` console script: the process's own settings, made before any library
    loads (a user's own setting wins), then the command."""
    # numba's OpenMP threads would otherwise spin after each parallel loop, taking the CPU
    # that the database work beside them needs.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    _map_large_blocks_apart()
    # Registered first, so run last: the objects alive at exit (numba's typing tables, once
    # a command ran a kernel) are left out of the interpreter's final collection, which
    # would walk them all; the index and the files are closed by then.
    atexit.register(gc.freeze)
    app(prog_name="simindex")


# glibc's mallopt parameter: the size from which a block is mapped on its own.
M_MMAP_THRESHOLD = -3
LARGE_BLOCK = 4 * 2**20


def _map_large_blocks_apart() -> None:
    """Blocks of LARGE_BLOCK and more mapped on their own, so given back when freed (unless
    the user set MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES). By default glibc raises that size
    to the largest block freed so far, and a step's freed arrays stay in the heap: a command
    of several steps (dedup: ingest, pairs, clusters) then grows towards the sum of their
    peaks. Smaller blocks stay in the heap, where reusing them costs no page faults."""
    user_set = {"MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"} & os.environ.keys()
    if user_set or not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # a C library without mallopt
        return
    mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK)
