"""Every numba kernel releases the GIL, so database threads run beside it (simindex.pipeline.kernels)."""

import threading
import time

import numpy as np

from simindex.pipeline import kernels
from simindex.pipeline.cluster import unite


def test_every_kernel_releases_the_gil():
    found = {
        k.py_func.__qualname__: k.targetoptions.get("nogil", False) for k in kernels._kernels()
    }
    assert len(found) >= 10
    assert [name for name, nogil in found.items() if not nogil] == []


def test_a_thread_runs_python_while_a_kernel_runs():
    """While a serial kernel (the union-find that groups candidates by component) runs for a
    while, another thread keeps running Python: with the GIL held, it would not run until the
    kernel returned."""
    rng = np.random.default_rng(3)
    n = 2_000_000
    a, b = rng.integers(0, n, size=(2, 6 * n))
    unite(np.arange(n), a[:1], b[:1])  # compiled or loaded

    ticks, done = [], threading.Event()

    def count():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0)

    counter = threading.Thread(target=count)
    counter.start()
    while not ticks:
        time.sleep(0.001)
    started = time.perf_counter()
    unite(np.arange(n), a, b)
    ended = time.perf_counter()
    done.set()
    counter.join()
    assert ended - started > 0.05, "the kernel ran too briefly to tell"
    # Thousands of ticks with the GIL released, tens with it held (the kernel without nogil).
    assert len([t for t in ticks if started < t < ended]) > 1_000
