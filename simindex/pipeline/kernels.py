"""The numba kernels: compiled on first use and cached on disk (``cache=True``).

Every kernel releases the GIL (``nogil=True``): the pipelines run kernels on worker threads
beside threads that read and write the database, which take the GIL back for every row they
fetch, and a kernel holding it would stall them for its whole run.

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

LLVM's code (llvmlite's library, about 80 MB of it) is needed only while numba compiles or
loads a kernel, yet stays in the process's resident set once touched, all of it where the
kernel maps files in large pages. The CLI runs its commands under :func:`llvm_code_released`,
which unmaps it after each compile or load (on such a kernel, 107 MiB of llvmlite resident
down to 2: tests/cli/test_cli_startup.py reads it; every command's peak RSS:
benchmarks/bench_scale.py).
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
from collections.abc import Callable, Iterator
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
        module = importlib.import_module(f"simindex.pipeline.{name}")
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
    kernel cost more than the kernel: a warm query's p50 was 0.44 ms lower, of 1.2-1.6, with
    its kernels on the calling thread (benchmarks/bench_cold_queries.py --warm, RESULTS.md
    2026-11-29 10:17), of which deciding at each kernel, as here, takes 0.05 ms back
    (12:10). numba keeps the count per thread, so threads working side by side
    keep theirs."""
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


@contextmanager
def llvm_code_released() -> Iterator[None]:
    """Inside the block, once numba is imported, every compile or cache load that numba
    finishes (its compiler lock released by the outermost holder) unmaps LLVM's code from this
    process: ``madvise(MADV_DONTNEED)`` of llvmlite's read-only file mappings that hold no
    private page (so not its relocated data). They are clean copies of the file: nothing is
    lost, and LLVM, when it runs again, maps what it touches from the page cache. Linux only;
    elsewhere, or when numba's event API is missing, nothing happens."""
    if not sys.platform.startswith("linux"):
        yield
        return
    listeners: list[Any] = []
    finder = _AfterImport(_COMPILER_LOCK, lambda: listeners.extend(_listen_to_compiles()))
    if _COMPILER_LOCK in sys.modules:
        finder.hook()
    else:
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        if listeners:
            from numba.core import event

            for listener in listeners:
                event.unregister("numba:compiler_lock", listener)


_COMPILER_LOCK = "numba.core.compiler_lock"  # imports numba's event API, which names its lock


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``hook`` once the module ``name`` has been imported (found as usual)."""

    def __init__(self, name: str, hook: Callable[[], None]) -> None:
        self.name, self.hook = name, hook

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            self.hook()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _listen_to_compiles() -> list[Any]:
    """Registers (and returns) a listener that releases LLVM's code whenever numba's compiler
    lock is let go by its outermost holder: after each compile or cache load."""
    try:
        from numba.core import event
        from numba.core.compiler_lock import global_compiler_lock
    except ImportError:
        return []

    class Release(event.Listener):
        def on_start(self, _event: Any) -> None:
            pass

        def on_end(self, _event: Any) -> None:
            if not global_compiler_lock.is_locked():
                release_code("libllvmlite")

    listener = Release()
    event.register("numba:compiler_lock", listener)
    return [listener]


_RELEASABLE: dict[str, list[tuple[int, int]]] = {}  # (start, end) of each library's mappings
_MADV_DONTNEED = 4


def release_code(library: str) -> int:
    """Unmap from this process the code of the shared libraries whose path contains
    ``library``: their read-only mappings that hold no private page, found once the library
    is loaded (see :func:`llvm_code_released`). Returns how many bytes of mappings were
    released (0 where no such library is loaded, or off Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    if not _RELEASABLE.get(library):
        _RELEASABLE[library] = _clean_read_only_mappings(library)
    mappings = _RELEASABLE[library]
    if not mappings:
        return 0
    import ctypes

    madvise = ctypes.CDLL(None).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for start, end in mappings:
        madvise(start, end - start, _MADV_DONTNEED)
    return sum(end - start for start, end in mappings)


def _clean_read_only_mappings(library: str) -> list[tuple[int, int]]:
    """This process's read-only mappings of a file whose name contains ``library`` that hold
    no private (copied-on-write) page, from /proc/self/smaps. A read-only mapping gains no
    private page later, so the answer holds for the life of the process."""
    found: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    try:
        with open("/proc/self/smaps", encoding="ascii", errors="replace") as smaps:
            for line in smaps:
                fields = line.split()
                if not fields:
                    continue
                if not fields[0].endswith(":"):  # a mapping's first line: range, perms, ...
                    if current:
                        found.append(current)
                    current = None
                    if len(fields) >= 6 and library in fields[5] and "w" not in fields[1]:
                        start, end = (int(x, 16) for x in fields[0].split("-"))
                        current = (start, end)
                elif current and fields[0] in ("Private_Dirty:", "Anonymous:") and fields[1] != "0":
                    current = None
    except OSError:
        return []
    if current:
        found.append(current)
    return found


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
