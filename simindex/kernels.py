"""The numba kernels: compiled on first use and cached on disk (``cache=True``).

The first run after install (or after an upgrade, which changes the sources) would compile
them a few at a time inside whichever commands come first, silently, for tens of seconds.
:func:`compile_kernels` compiles them all at once on a throwaway index, so the CLI can say
once what it is doing (see benchmarks/bench_startup.py for the times).
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

_MODULES = ("banding", "candidates", "cluster", "evaluate", "exact", "hashing", "minhash")
_MODULES += ("shingle", "verify")

_WARM_UP = [
    ("w1", "a few words that make a short document for the compiler"),
    ("w2", "a few words that make a short document for the compiler too"),
    ("w3", "something else entirely, with other words in it"),
    ("w4", "a few words that make a short document for the compiler!"),
]


def _kernels() -> Iterator[Any]:
    """The cached dispatchers defined in simindex's modules (inlined helpers have no cache
    entry of their own: they are compiled into their callers)."""
    for name in _MODULES:
        module = importlib.import_module(f"simindex.{name}")
        for value in vars(module).values():
            if (
                hasattr(value, "_cache")
                and getattr(value, "__module__", None) == module.__name__
                and value.targetoptions.get("inline") != "always"
            ):
                yield value


def kernels_cached() -> bool:
    """Whether numba's cache holds every kernel. It reads numba's private cache layout: if
    that changes, the answer is True (no message) rather than an error."""
    try:
        return all(os.path.exists(k._cache._cache_file._index_path) for k in _kernels())
    except AttributeError:
        return True


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
                index.query(_WARM_UP[0][1])
                index.evaluate(sample=4)
                index.estimate_candidates([(20, 5)], sample=4)
                index.reband(10, 2)
