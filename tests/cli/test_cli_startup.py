"""A CLI that starts fast: --help loads neither numba, NumPy, SQLAlchemy, psycopg nor pyarrow, and the
first run after install says that it compiles the kernels (once)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from simindex import cli, kernels

HEAVY = ("numba", "numpy", "sqlalchemy", "psycopg", "alembic", "pyarrow")

# Run the CLI in a fresh interpreter and list the heavy modules it loaded.
PROBE = """
import sys
from simindex.cli import app
try:
    app(sys.argv[1:])
except SystemExit:
    pass
print("heavy modules:", *(m for m in {heavy!r} if m in sys.modules))
"""


@pytest.mark.parametrize("args", [[], ["--help"], ["stats", "--help"], ["pairs", "--help"]])
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
    """From an empty numba cache, as after install (a fresh interpreter: ~25 s of compiling)."""
    code = (
        "from simindex import kernels\n"
        "assert not kernels.kernels_cached()\n"
        "kernels.compile_kernels()\n"
        "print(kernels.kernels_cached(), len(list(kernels._kernels())))"
    )
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment
    )
    assert result.stdout.split() == ["True", str(len(list(kernels._kernels())))], result.stderr
    assert len(list(kernels._kernels())) >= 10
