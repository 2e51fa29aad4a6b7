"""The numba kernels: compiled on first use and cached on disk (``cache=True``).

The first run after install (or after an upgrade, which changes the sources) would compile
them a few at a time inside whichever commands come first, silently, for tens of seconds.
:func:`compile_kernels` compiles them all at once on a throwaway index, so the CLI can say
once what it is doing (see benchmarks/bench_startup.py for the times).

Asking numba whether its cache holds the kernels means importing numba and every kernel
module (a tenth of a second and more), which commands that run no kernel (stats, show,
export) should not pay. So once the answer is yes, a stamp in the user's cache directory
records it, with the size and date of every kernel module and of numba: while they are
unchanged, and numba's cache files are still there, the answer is read from the stamp.

Loading the first cached kernel sets up numba's CPU target, which probes for a BLAS by
importing scipy.linalg when SciPy is installed (with the NumPy submodules SciPy pulls in:
part of what benchmarks/bench_startup.py times); no kernel uses a BLAS, so the CLI runs its
commands under :func:`without_blas`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_MODULES = ("candidates", "cluster", "evaluate", "exact", "hashing", "minhash", "shingle")
_MODULES += ("verify",)

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
    """Whether numba's cache holds every kernel: from the stamp if it is current, else from
    numba's private cache layout (if that changes, the answer is True, no message, rather
    than an error), recording a stamp when the answer is yes."""
    fingerprint = _fingerprint()
    if _stamp_holds(fingerprint):
        return True
    try:
        index_files = [k._cache._cache_file._index_path for k in _kernels()]
    except AttributeError:
        return True
    if not all(os.path.exists(path) for path in index_files):
        return False
    _write_stamp({"fingerprint": fingerprint, "index_files": index_files})
    return True


def _fingerprint() -> list[Any]:
    """What numba's cache entries depend on: Python, the cache directory, and the size and
    date of each kernel module and of numba."""
    here = os.path.dirname(os.path.abspath(__file__))
    sources = [os.path.join(here, f"{name}.py") for name in _MODULES]
    numba = importlib.util.find_spec("numba")  # finds numba without importing it
    if numba is not None and numba.origin:
        sources.append(numba.origin)
    files = []
    for path in sources:
        stat = os.stat(path)
        files.append([path, stat.st_mtime_ns, stat.st_size])
    return [sys.version, os.environ.get("NUMBA_CACHE_DIR", ""), files]


def _stamp_path() -> Path:
    """One stamp per installed simindex, in $XDG_CACHE_HOME (default ~/.cache)/simindex."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    package = hashlib.sha256(os.path.dirname(os.path.abspath(__file__)).encode()).hexdigest()
    return Path(cache, "simindex", f"kernels-{package[:16]}.json")


def _stamp_holds(fingerprint: list[Any]) -> bool:
    try:
        stamp = json.loads(_stamp_path().read_text(encoding="utf-8"))
        return stamp["fingerprint"] == fingerprint and all(
            os.path.exists(path) for path in stamp["index_files"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _write_stamp(stamp: dict[str, Any]) -> None:
    """Write the stamp whole (a reader sees the old one or the new one); a cache directory
    that can't be written only means that the next run asks numba again."""
    path = _stamp_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=".kernels-", delete=False, encoding="utf-8"
        ) as scratch:
            json.dump(stamp, scratch)
        os.replace(scratch.name, path)
    except OSError:
        pass


_BLAS_PROBE = "scipy.linalg"  # numba imports scipy.linalg.cython_blas to look for a BLAS


@contextmanager
def without_blas() -> Iterator[None]:
    """numba, if it sets up its CPU target inside the block, finds no BLAS (see
    :func:`without_modules`); numba then compiles no BLAS call in this process, which no kernel
    makes."""
    with without_modules(_BLAS_PROBE):
        yield


class _Refuse(importlib.abc.MetaPathFinder):
    """Fails the import of some packages (and their submodules) before any file is read."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if any(fullname == name or fullname.startswith(name + ".") for name in self.names):
            raise ModuleNotFoundError(f"{fullname} is not imported here", name=fullname)


@contextmanager
def without_modules(*names: str) -> Iterator[None]:
    """Inside the block, importing one of ``names`` fails at once, so a library that imports
    it only if it can (numba's BLAS probe, pyarrow's pandas support, mako's highlighting)
    carries on without it; outside the block, the modules import as usual. Modules already
    imported are left alone. (A finder, not a None entry in sys.modules: Cython code such as
    pyarrow's takes such an entry for the module itself.)"""
    finder = _Refuse(tuple(name for name in names if name not in sys.modules))
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


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
    kernels_cached()  # records the stamp, which spares the next runs importing numba to ask
