"""A CLI that starts fast: --help loads neither numba, NumPy, SQLAlchemy, psycopg, pyarrow nor
pyspark; a command that runs no kernel loads neither numba, pyarrow, psycopg (on SQLite) nor
Alembic; one that runs kernels does not let numba import SciPy's linear algebra nor pyarrow
import pandas; and the first run after install says that it compiles the kernels (once)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simindex import Index, cli, kernels
from tests.conftest import FIRST_COMPILE, NEWS, compile_from_empty

HEAVY = ("numba", "numpy", "sqlalchemy", "psycopg", "alembic", "pyarrow", "pyspark")
# What a command that only reads the database needs not: the kernels' compiler, the stages'
# Arrow, PostgreSQL's driver for a SQLite index, the migrations' engine for an index at the
# current revision.
NOT_FOR_READING = ("numba", "llvmlite", "pyarrow", "psycopg", "alembic", "mako", "pyspark")

# Run the CLI in a fresh interpreter: its exit status, and the heavy modules it loaded.
PROBE = """
import sys
from simindex.cli import app
try:
    app(sys.argv[1:])
except SystemExit as exit:
    print("exit status:", exit.code or 0)
print("heavy modules:", *(m for m in {heavy!r} if m in sys.modules))
"""


@pytest.mark.parametrize(
    "args", [[], ["--help"], ["stats", "--help"], ["pairs", "--help"], ["spark", "--help"]]
)
def test_help_loads_no_heavy_module(args):
    probe = PROBE.format(heavy=HEAVY)
    result = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines()[-1] == "heavy modules:", result.stdout


def test_importing_the_cli_loads_no_heavy_module():
    code = f"import sys, simindex.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_the_first_run_says_it_compiles_once(tmp_path, monkeypatch):
    compiled = []
    monkeypatch.setattr(kernels, "kernels_cached", lambda: bool(compiled))
    monkeypatch.setattr(kernels, "compile_kernels", lambda: compiled.append(True))
    db = str(tmp_path / "i.db")
    runner = CliRunner()
    first = runner.invoke(cli.app, ["init", "--db", db])
    assert first.exit_code == 0
    stats = [runner.invoke(cli.app, ["stats", "--db", db]) for _ in range(2)]
    assert "Compiling simindex's numba kernels, once" in stats[0].stderr
    assert "Compiled in" in stats[0].stderr and compiled == [True]
    assert "Compiling" not in stats[1].stderr


def test_compile_kernels_leaves_every_kernel_cached(tmp_path):
    """From an empty numba cache, as after install (a fresh interpreter: ~25 s of compiling):
    the suite's first compile when the session started with an empty cache (see
    tests/conftest.py, first_compile), else one into a cache of the test's own."""
    result = FIRST_COMPILE.get("result") or compile_from_empty(
        {
            **os.environ,
            "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
        }
    )
    assert result.stdout.split() == ["True", str(len(list(kernels._kernels())))], result.stderr
    assert len(list(kernels._kernels())) >= 10


@pytest.fixture
def stamped(tmp_path, monkeypatch) -> dict[str, str]:
    """The environment of a run whose kernels are compiled and stamped as such (the stamp in
    a cache directory of the test's own)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    if not kernels.kernels_cached():
        kernels.compile_kernels()
    assert kernels.kernels_cached() and kernels._stamp_path().is_file()
    return dict(os.environ)


@pytest.mark.parametrize(
    "command",
    [["stats"], ["show", "n001"], ["export", "--what", "pairs"], ["db", "current"]],
    ids=" ".join,
)
def test_a_command_that_runs_no_kernel_loads_no_numba_psycopg_or_alembic(
    command, tmp_path, news, stamped
):
    db = str(tmp_path / "news.db")
    with Index.create(db) as index:
        index.add(news[:10])
        index.find_pairs()
    probe = PROBE.format(heavy=NOT_FOR_READING)
    result = subprocess.run(
        [sys.executable, "-c", probe, *command, "--db", db],
        capture_output=True,
        text=True,
        env=stamped,
    )
    assert result.stdout.splitlines()[-2:] == ["exit status: 0", "heavy modules:"], (
        result.stdout + result.stderr
    )


@pytest.mark.parametrize("command", ["query", "ingest", "pairs"])
def test_a_command_that_runs_kernels_spares_itself_scipy_and_pandas(
    command, tmp_path, news, stamped
):
    """With SciPy installed, numba's CPU target imports scipy.linalg to find a BLAS, which no
    kernel uses; with pandas installed, pyarrow imports it on its first array (0.4 s and
    ~48 MiB), which no command but Spark's uses: the CLI's commands run without both. Only
    ingest loads pyarrow at all (stages.sign); query and pairs verify without it."""
    pytest.importorskip("scipy")
    pytest.importorskip("pandas")
    db = str(tmp_path / "news.db")
    with Index.create(db) as index:
        index.add(news[:10])
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t, _ in news[10:20]))
    arguments = {"query": [news[0][1]], "ingest": [str(new)], "pairs": ["--full"]}[command]
    probe = PROBE.format(heavy=("numba", "pyarrow", "scipy.linalg", "pandas"))
    result = subprocess.run(
        [sys.executable, "-c", probe, command, "--db", db, *arguments],
        capture_output=True,
        text=True,
        env=stamped,
    )
    loaded = "heavy modules: numba" + (" pyarrow" if command == "ingest" else "")  # pairs: none
    assert result.stdout.splitlines()[-2:] == ["exit status: 0", loaded], (
        result.stdout + result.stderr
    )


def test_creating_an_index_spares_alembic_its_highlighting(tmp_path):
    """Alembic's templates (mako) import pygments, where installed, to highlight their errors
    (~0.1 s): `init` runs the migrations without it."""
    pytest.importorskip("pygments")
    probe = PROBE.format(heavy=("alembic", "pygments"))
    result = subprocess.run(
        [sys.executable, "-c", probe, "init", "--db", str(tmp_path / "new.db")],
        capture_output=True,
        text=True,
    )
    assert result.stdout.splitlines()[-2:] == ["exit status: 0", "heavy modules: alembic"], (
        result.stdout + result.stderr
    )


def test_without_blas_lifts_its_block_when_it_ends():
    pytest.importorskip("scipy")
    code = (
        "from simindex.pipeline import kernels\n"
        "with kernels.without_blas():\n"
        "    try:\n"
        "        import scipy.linalg.cython_blas\n"
        "    except ImportError:\n"
        "        print('blocked')\n"
        "import scipy.linalg.cython_blas\n"
        "print('imported')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == ["blocked", "imported"], result.stderr


def test_a_current_stamp_answers_without_numba(stamped):
    code = "import sys; from simindex.pipeline import kernels; print(kernels.kernels_cached(), 'numba' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=stamped
    )
    assert result.stdout.split() == ["True", "False"], result.stderr


def test_a_stale_stamp_is_not_trusted(stamped, tmp_path):
    fingerprint = kernels._fingerprint()
    assert kernels._stamp_holds(fingerprint)
    # A kernel module or numba was replaced (an upgrade): numba must be asked again.
    python, cache_dir, files = fingerprint
    touched = [[path, mtime + 1, size] for path, mtime, size in files]
    assert not kernels._stamp_holds([python, cache_dir, touched])
    assert not kernels._stamp_holds([python, str(tmp_path / "another-numba-cache"), files])
    # numba's cache files went (a cleared __pycache__): the stamp does not hold either...
    stamp = kernels._stamp_path()
    recorded = json.loads(stamp.read_text())
    recorded["index_files"].append(str(tmp_path / "cleared.nbi"))
    stamp.write_text(json.dumps(recorded))
    assert not kernels._stamp_holds(fingerprint)
    # ... and the next check asks numba, which still holds every kernel, and stamps anew.
    assert kernels.kernels_cached() and kernels._stamp_holds(fingerprint)


def test_an_unwritable_cache_directory_only_costs_the_stamp(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    assert kernels.kernels_cached()
    assert not kernels._stamp_path().exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["stats", "--db", "x.db"], "stats"),
        (["--db", "x.db", "stats"], "stats"),
        (["--db=x.db", "--schema", "s", "db", "current"], "db"),
        (["--version"], None),
        ([], None),
    ],
)
def test_the_entry_point_finds_the_subcommand(argv, expected):
    assert cli._command_name(argv) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--db", "{db}", "stats"], "scheme     simindex-v2"),
        (["db", "current", "--db", "{db}"], "simindex needs:"),
        (["stat", "--db", "{db}"], "No such command 'stat'. Did you mean 'stats'?"),
        (["--help"], "activate"),
    ],
)
def test_the_entry_point_builds_only_the_command_asked_for(args, expected, tmp_path):
    """`simindex` (the console script, simindex.cli:run) leaves the other commands out; a
    global option before the command, a group and a typo still work."""
    db = str(tmp_path / "i.db")
    Index.create(db).close()
    result = subprocess.run(
        [sys.executable, "-m", "simindex", *(a.format(db=db) for a in args)],
        capture_output=True,
        text=True,
    )
    assert expected in result.stdout + result.stderr


def test_the_entry_point_limits_glibc_arenas_and_keeps_its_mmap_and_trim_thresholds(
    monkeypatch,
):
    """Two heap arenas, blocks of 4 MiB or more always mapped on their own, and up to 16 MiB
    free at the top of a heap kept (see cli._malloc_settings); a user's MALLOC_ARENA_MAX,
    MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ is left to glibc."""
    calls = []

    class Libc:
        def mallopt(self, option, value):
            calls.append((option, value))
            return 1

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr("ctypes.CDLL", lambda name: Libc())
    for name in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    cli._malloc_settings()
    expected = [(-8, 2), (-3, 4194304), (-1, 16777216)]
    assert calls == expected
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    cli._malloc_settings()
    assert calls == expected


# SQLite's count of the memory it holds, after a connection has stored 10,000 rows, with
# and without the process's SQLite settings.
MEMORY_STATISTICS_PROBE = """
import _sqlite3, ctypes, sqlite3, sys
from simindex import cli
if sys.argv[1] == "settings":
    cli.process_settings()
connection = sqlite3.connect(":memory:")
connection.execute("CREATE TABLE t (x)")
connection.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10_000)])
used = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
used.restype = ctypes.c_int64
print(used())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="set on Linux only")
def test_the_process_settings_turn_sqlite_memory_statistics_off():
    """With its statistics on, SQLite counts every allocation under one mutex of the process
    and reports the bytes it holds; the CLI's process settings turn them off before any
    connection (see cli._sqlite_settings), and then it reports none."""

    def memory_used(mode: str) -> int:
        run = subprocess.run(
            [sys.executable, "-c", MEMORY_STATISTICS_PROBE, mode],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return int(run.stdout)

    if memory_used("default") == 0:
        pytest.skip("this SQLite is built with its memory statistics off")
    assert memory_used("default") > 100_000
    assert memory_used("settings") == 0


# Blocks of 3 MiB made, filled and freed 100 times (from the heap, below the mmap threshold):
# the page faults that this costs, with and without the process's malloc settings.
REFAULT_PROBE = """
import ctypes, resource, sys
from simindex import cli
if sys.argv[1] == "settings":
    cli._malloc_settings()
else:  # the mmap threshold alone, fixed as the CLI fixes it
    ctypes.CDLL("libc.so.6").mallopt(cli._M_MMAP_THRESHOLD, 4 * 2**20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    block = b"x" * (3 * 2**20)
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc settings",
)
def test_a_batch_freed_at_the_top_of_the_heap_is_not_faulted_in_again():
    """With the mmap threshold fixed, glibc's trim threshold stays at 128 KiB and each freed
    block at the top of the heap goes back to the system, its pages faulted in again by the
    next: about 768 faults a 3 MiB block. The CLI's settings keep it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def faults(mode: str) -> int:
        run = subprocess.run(
            [sys.executable, "-c", REFAULT_PROBE, mode], env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        return int(run.stdout)

    mmap_threshold_only, with_settings = faults("mmap-threshold-only"), faults("settings")
    assert mmap_threshold_only > 50 * 768, f"{mmap_threshold_only} page faults for 100 blocks"
    assert with_settings < 5 * 768, f"{with_settings} page faults for 100 blocks"


# 128 MiB of the heap in 64 KiB blocks, one in 16 kept: free memory between live blocks, which
# no trim at the top of the heap reaches. The resident MiB before and after the release.
HOLES_PROBE = """
from simindex import cli
cli._malloc_settings()
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
blocks = [bytes([i % 256]) * 65536 for i in range(2048)]
kept = blocks[::16]
del blocks
before = rss()
cli._return_free_memory()
print(before, rss())
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc_trim",
)
def test_free_memory_between_live_blocks_goes_back_to_the_system():
    """What dedup does between ingest and finding pairs (cli._return_free_memory): the
    freed blocks' pages leave the resident set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    run = subprocess.run(
        [sys.executable, "-c", HOLES_PROBE], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    before, after = map(int, run.stdout.split())
    assert before - after >= 100, f"{before} MiB resident before, {after} after"


# Index.add of an ASCII batch, then one with other text, in a fresh process: how many types
# the whitespace kernel was loaded for.
ONE_TYPE_PROBE = """
import sys
from simindex import Index, shingle
documents = [
    ("a", "plain ascii words for a first batch of one"),
    ("b", "Grüße aus Köln, a batch whose text is not ascii"),
]
with Index.create(sys.argv[1]) as index:
    index.add(documents, batch_size=1)
print(len(shingle._collapse_whitespace.signatures))
"""


def test_ascii_and_other_batches_load_the_whitespace_kernel_once(tmp_path, stamped):
    """ASCII texts are lower-cased in numpy, other texts rebuilt from Python's bytes: both
    hand the whitespace kernel read-only arrays, so a process loads it once from numba's
    cache (each load maps LLVM's code for the moment), not once per type."""
    run = subprocess.run(
        [sys.executable, "-c", ONE_TYPE_PROBE, str(tmp_path / "i.db")],
        env=stamped,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1"], run.stdout


# The console script's process settings, read as the process ends (after cli.run's own exit
# handler, which freezes the objects still alive).
SETTINGS_PROBE = """
import atexit, gc, os, sys
from simindex import cli
blas = lambda: os.environ.get("OPENBLAS_NUM_THREADS")
atexit.register(lambda: print("settings:", gc.get_threshold()[0], blas()))
sys.argv = ["simindex", *sys.argv[1:]]
cli.run()
"""


@pytest.mark.parametrize(("blas_threads", "expected"), [(None, "1"), ("3", "3")])
def test_the_entry_point_collects_rarely_and_still_closes_the_index(
    tmp_path, stamped, blas_threads, expected
):
    """A collection every 20,000 new objects, one OpenBLAS thread unless the user says
    otherwise, and the objects alive at exit frozen: the index is closed before that, so
    SQLite's write-ahead log is folded into the database file and removed as usual."""
    env = {k: v for k, v in stamped.items() if k != "OPENBLAS_NUM_THREADS"}
    if blas_threads:
        env["OPENBLAS_NUM_THREADS"] = blas_threads
    db = tmp_path / "i.db"
    for args in (["ingest", str(NEWS), "--db", str(db)], ["pairs", "--db", str(db)]):
        result = subprocess.run(
            [sys.executable, "-c", SETTINGS_PROBE, *args], env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[-1] == f"settings: 20000 {expected}"
        assert not Path(f"{db}-wal").exists()
    with Index.open(str(db)) as index:
        assert index.stats()["documents"] == 100 and list(index.pairs())


# The resident MiB of the files whose path contains ``name`` in this process.
LIBRARY_RSS = """
def library_rss(name):
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if fields and not fields[0].endswith(":"):
            inside = len(fields) >= 6 and name in fields[5]
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total // 1024
"""
# ... of llvmlite's library (LLVM, which numba compiles with).
LLVM_RSS = LIBRARY_RSS + "llvm_rss = lambda: library_rss('libllvmlite')\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc are Linux's")
def test_llvm_code_is_unmapped_after_each_compile_inside_the_block():
    code = LLVM_RSS + (
        "from simindex.pipeline import kernels\n"
        "with kernels.llvm_code_released():\n"
        "    from numba import njit\n"  # numba imported inside the block: the hook installs
        "    assert njit(lambda x: x + 1)(1) == 2\n"
        "    first = llvm_rss()\n"
        "    assert njit(lambda x: x * 3)(2) == 6\n"  # LLVM runs again after a release
        "    second = llvm_rss()\n"
        "assert njit(lambda x: x - 1)(1) == 0\n"
        "print(first, second, llvm_rss())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    first, second, outside = map(int, result.stdout.split())
    # What stays is llvmlite's relocated data (private pages, never released): ~2 MiB.
    assert first <= 4 and second <= 4, result.stdout
    assert outside >= 10, "a compile after the block maps LLVM's code again"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc are Linux's")
def test_a_command_that_runs_kernels_leaves_llvm_unmapped(tmp_path, news, stamped):
    db = str(tmp_path / "news.db")
    with Index.create(db) as index:
        index.add(news[:10])
    probe = LLVM_RSS + PROBE.format(heavy=("numba",)) + "print('llvm MiB:', llvm_rss())\n"
    result = subprocess.run(
        [sys.executable, "-c", probe, "query", "--db", db, news[0][1]],
        capture_output=True,
        text=True,
        env=stamped,
    )
    lines = result.stdout.splitlines()
    assert lines[-3:-1] == ["exit status: 0", "heavy modules: numba"], result.stdout + result.stderr
    assert int(lines[-1].split()[-1]) <= 4, lines[-1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc are Linux's")
def test_dedup_unmaps_pyarrow_before_it_finds_pairs(tmp_path, news, stamped):
    """Signing loads pyarrow; dedup then releases its libraries' pages, which finding pairs
    does not use (without the release, this run ends with tens of MiB of them resident)."""
    corpus = tmp_path / "news.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t, _ in news))
    probe = LIBRARY_RSS + PROBE.format(heavy=("pyarrow",)) + "print(library_rss('/pyarrow/'))\n"
    result = subprocess.run(
        [sys.executable, "-c", probe, "dedup", str(corpus), "-o", str(tmp_path / "kept.jsonl")],
        capture_output=True,
        text=True,
        env=stamped,
    )
    lines = result.stdout.splitlines()
    assert lines[-3:-1] == ["exit status: 0", "heavy modules: pyarrow"], (
        result.stdout + result.stderr
    )
    assert int(lines[-1]) <= 4, f"{lines[-1]} MiB of pyarrow's libraries resident"
