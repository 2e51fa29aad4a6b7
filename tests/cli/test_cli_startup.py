"""The CLI's own process: the first run after install says that it compiles the kernels
(once), and the console script sets its libraries' environment and glibc's threshold for
mapped blocks for itself (a user's own settings win), and freezes what is alive at exit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from simindex.cli import app
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


def console_script(
    args: list[str], *, before: str = "", after: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``simindex ARGS`` run by the console script (cli.run) in a process of its own, the
    Python ``before`` and ``after`` run around it (the command's exit ends only the command)."""
    program = "\n".join([
        "import sys",
        before,
        "from simindex import cli",
        f"sys.argv = ['simindex', *{args!r}]",
        "try:\n    cli.run()\nexcept SystemExit:\n    pass",
        after,
    ])  # fmt: skip
    return subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, "PASSIVE"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE")],
)
def test_the_console_script_sets_its_libraries_environment_unless_the_user_did(given, expected):
    env = {
        **{k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"},
        **given,
    }
    after = "import os; print(os.environ.get('OMP_WAIT_POLICY'))"
    result = console_script(["--version"], after=after, env=env)
    assert result.stdout.splitlines()[-1] == expected, result.stderr


# glibc's count of mapped bytes (mallinfo2), and a 16 MiB block freed before the command,
# which raises glibc's default threshold for mapped blocks past 5 MiB.
MALLINFO = """
import ctypes
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
freed = bytearray(16 * 2**20)
del freed
"""
# Whether a 5 MiB block taken after the command is mapped on its own.
MAPPED_AFTER = """
before = libc.mallinfo2().hblkhd
block = bytearray(5 * 2**20)
print(libc.mallinfo2().hblkhd - before >= len(block))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc's allocator only",
)
@pytest.mark.parametrize(
    ("given", "mapped"), [({}, "True"), ({"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20)}, "False")]
)
def test_the_console_script_maps_large_blocks_apart_unless_the_user_chose(given, mapped):
    chosen = ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
    env = {**{k: v for k, v in os.environ.items() if k not in chosen}, **given}
    result = console_script(["--version"], before=MALLINFO, after=MAPPED_AFTER, env=env)
    assert result.stdout.splitlines()[-1] == mapped, result.stderr


def test_the_console_script_leaves_what_is_alive_at_exit_out_of_the_last_collection(tmp_path):
    """A command that ran kernels ends without the interpreter walking numba's objects; a
    library caller's collector is left alone (tests/unit/test_layout.py). The count is
    printed by a handler registered before the script's own, so called after them."""
    db = str(tmp_path / "i.db")
    before = "import atexit, gc; atexit.register(lambda: print(gc.get_freeze_count()))"
    result = console_script(["ingest", str(NEWS), "--db", db], before=before)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.splitlines()[-1]) > 10_000


def loaded(modules: list[str], *args: str) -> list[str]:
    """The ``modules`` that ``simindex ARGS`` loaded."""
    after = f"print(sorted(m for m in {modules!r} if m in sys.modules))"
    result = console_script(list(args), after=after)
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.splitlines()[-1])  # a printed list of names


def test_commands_load_no_package_they_do_not_use(tmp_path):
    """pandas is installed here (the spark extra): pyarrow would import it, and numba's BLAS
    probe scipy where installed, into every command (simindex.cli.imports); Index signs
    Python strings with NumPy alone (simindex.pipeline.signing), so pyarrow's libraries,
    which would stay mapped for the rest of the command, load for Parquet only."""
    pytest.importorskip("pandas")
    output = tmp_path / "kept.jsonl"
    declined = ["pandas", "pyarrow", "scipy", "pygments"]
    assert loaded(declined, "dedup", str(NEWS), "-o", str(output)) == []
    assert output.read_text().count("\n") == 82


def test_help_starts_without_the_database_and_numeric_libraries():
    """--help and a command's --help list options: loading SQLAlchemy, NumPy and numba would
    more than double their start-up."""
    heavy = ["sqlalchemy", "numpy", "numba"]
    assert loaded(heavy, "--help") == []
    assert loaded(heavy, "ingest", "--help") == []
    assert loaded(heavy, "export", "--help") == []
