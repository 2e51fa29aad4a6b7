"""The CLI's own process: the first run after install says that it compiles the kernels
(once), and the console script sets glibc's malloc and its libraries' environment for itself
(a user's own settings win)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from simindex.cli import app, process
from simindex.cli import kernels as cli_kernels
from simindex.pipeline import kernels
from tests.conftest import FIRST_COMPILE, NEWS, compile_from_empty


def test_the_first_run_says_it_compiles_once(tmp_path, monkeypatch):
    """Before the first command that runs kernels; a command that runs none does not ask."""
    compiled = []
    monkeypatch.setattr(kernels, "kernels_cached", lambda: bool(compiled))
    monkeypatch.setattr(cli_kernels, "compile_kernels", lambda: compiled.append(True))
    db = str(tmp_path / "i.db")
    runner = CliRunner()
    first = runner.invoke(app, ["ingest", str(NEWS), "--db", db])
    assert first.exit_code == 0, first.output
    assert "Compiling simindex's numba kernels, once" in first.stderr
    assert "Compiled in" in first.stderr and compiled == [True]
    stats = runner.invoke(app, ["stats", "--db", db])
    assert "Compiling" not in stats.stderr and compiled == [True]
    query = runner.invoke(app, ["query", "--db", db, "--id", "n001"])
    assert query.exit_code == 0 and "Compiling" not in query.stderr


def test_compile_kernels_leaves_every_kernel_cached(tmp_path):
    """From an empty numba cache, as after install (a fresh interpreter: ~25 s of compiling):
    the suite's first compile when the session started with an empty cache (see
    tests/conftest.py, first_compile), else one into a cache of the test's own."""
    result = FIRST_COMPILE.get("result") or compile_from_empty(
        {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    )
    assert result.stdout.split() == ["True", str(len(list(kernels._kernels())))], result.stderr
    assert len(list(kernels._kernels())) >= 10


# The environment that the console script leaves, after `simindex --version`.
ENVIRONMENT_PROBE = """
import os, sys
from simindex import cli
sys.argv = ["simindex", "--version"]
try:
    cli.run()
except SystemExit:
    pass
print(os.environ.get("OMP_WAIT_POLICY"), os.environ.get("ARROW_DEFAULT_MEMORY_POOL"))
"""


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, "PASSIVE system"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE system")],
)
def test_the_console_script_sets_its_libraries_environment_unless_the_user_did(given, expected):
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if k not in ("OMP_WAIT_POLICY", "ARROW_DEFAULT_MEMORY_POOL")
        },
        **given,
    }
    result = subprocess.run(
        [sys.executable, "-c", ENVIRONMENT_PROBE], env=env, capture_output=True, text=True
    )
    assert result.stdout.splitlines()[-1] == expected, result.stderr


def test_the_console_script_limits_glibc_arenas_and_keeps_its_mmap_and_trim_thresholds(
    monkeypatch,
):
    """Two heap arenas, blocks of 4 MiB or more always mapped on their own, and up to 16 MiB
    free at the top of a heap kept (see cli.process.malloc_settings); a user's
    MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ is left to glibc."""
    calls = []

    class Libc:
        def mallopt(self, option, value):
            calls.append((option, value))
            return 1

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr("ctypes.CDLL", lambda name: Libc())
    for name in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    process.malloc_settings()
    expected = [(-8, 2), (-3, 4194304), (-1, 16777216)]
    assert calls == expected
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    process.malloc_settings()
    assert calls == expected


# Blocks of 3 MiB made, filled and freed 100 times (from the heap, below the mmap threshold):
# the page faults that this costs, with and without the process's malloc settings.
REFAULT_PROBE = """
import ctypes, resource, sys
from simindex.cli import process
if sys.argv[1] == "settings":
    process.malloc_settings()
else:  # the mmap threshold alone, fixed as the CLI fixes it
    ctypes.CDLL("libc.so.6").mallopt(process._M_MMAP_THRESHOLD, 4 * 2**20)
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
