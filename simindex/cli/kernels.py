"""Compiling the numba kernels once, after install or upgrade, with a notice.

The first run after install (or after an upgrade, which changes the sources) would compile
the kernels a few at a time inside whichever commands come first, silently, for tens of
seconds; the CLI compiles them all at once before the first command that runs one, and says
what it is doing.
"""

from __future__ import annotations

import os
import tempfile
import time

from simindex.cli.render import err

_WARM_UP = [
    ("w1", "a few words that make a short document for the compiler"),
    ("w2", "a few words that make a short document for the compiler too"),
    ("w3", "something else entirely, with other words in it"),
    ("w4", "a few words that make a short document for the compiler!"),
]


def compile_once() -> None:
    """On the first run after install or upgrade, compile the kernels, and say so."""
    from simindex.pipeline import kernels

    if kernels.kernels_cached():
        return
    err.print(
        "Compiling simindex's numba kernels, once after install or upgrade (about 30 s on 2 "
        "cores; later runs load them from numba's cache) ..."
    )
    started = time.perf_counter()
    compile_kernels()
    err.print(f"Compiled in {time.perf_counter() - started:.0f} s")


def compile_kernels() -> None:
    """Compile (and cache) every kernel by running the pipeline on four tiny documents,
    once per signature scheme (each has its own signing kernel)."""
    from simindex.defaults import SCHEMES
    from simindex.index import Index
    from simindex.spec import SignatureSpec

    with tempfile.TemporaryDirectory() as scratch:
        for scheme in SCHEMES:
            path = os.path.join(scratch, f"{scheme}.db")
            with Index.create(path, SignatureSpec(scheme=scheme)) as index:
                index.add(_WARM_UP[:2])
                index.add(_WARM_UP[2:], find_duplicates=0.8)
                index.find_pairs()
                index.cluster()
                index.cluster(mode="star")
                index.query(_WARM_UP[0][1])
                index.evaluate(sample=4)
                index.estimate_candidates([(20, 5)], sample=4)
                index.reband(10, 2)
