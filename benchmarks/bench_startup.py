"""Benchmark: how long the `simindex` command takes to start.

Times, in fresh processes, `simindex --help`, `simindex --version`, `simindex stats --help` and
`import simindex.cli` (no library loaded), numba's floor (its import and one cached kernel:
what a command that runs kernels pays beyond one that runs none), then the fixed cost of real
commands on a two-document SQLite index: those that run no kernel (`stats`, `show`, `export`),
and those that do (`query`, `pairs --full`: an incremental `pairs` with no new document runs
none, `ingest` of two documents already indexed, `dedup` of a two-document file), warm: numba's
kernel cache filled and the stamp that records it written (see simindex/kernels.py). Cold is
the first run after install, with an empty numba cache (NUMBA_CACHE_DIR and XDG_CACHE_HOME
pointed at new directories), when the CLI compiles every kernel once and says so. simindex's
modules are byte-compiled first, as installing the package does (with PYTHONDONTWRITEBYTECODE
set, an editable install would compile them from source in every run, a tenth of a second that
an installed simindex does not pay). Each warm figure is over --repeat runs: the median and the
fastest wall-clock seconds, and the median CPU seconds (user + system), which the load of other
processes on the machine disturbs less.

Run from the repository root:
    .venv/bin/python benchmarks/bench_startup.py [--repeat 7] [--write-results]
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import simindex

ROOT = Path(__file__).resolve().parent.parent
SIMINDEX = [sys.executable, "-m", "simindex"]


# What any command that runs a kernel pays on top of one that runs none: numba's import and
# its CPU target's set-up, here with the smallest cached kernel, under the CLI's process
# settings and without the BLAS probe, as the CLI runs it (simindex/cli.py, kernels.py); less
# the `import simindex.cli` row, it is numba's share.
NUMBA_FLOOR = (
    "`import simindex.cli`, then numba and one cached kernel (`cluster.flatten`), as the CLI"
)
LOAD_ONE_KERNEL = """
from simindex import cli
cli.process_settings()
import numpy as np
from simindex.pipeline.kernels import without_blas
with without_blas():
    from simindex.pipeline.cluster import flatten
    flatten(np.arange(2))
"""


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit status) of one run of command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    status = subprocess.run(command, env=env, capture_output=True).returncode
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, status


def summary(command: list[str], env: dict[str, str], repeat: int) -> tuple[str, str, str]:
    """Median wall, fastest wall and median CPU seconds as text; "failed" when the command
    exits non-zero."""
    runs = [timed(command, env) for _ in range(repeat)]
    if any(status for _, _, status in runs):
        return "failed", "failed", "failed"
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    return (
        f"{statistics.median(walls):.3f}",
        f"{min(walls):.3f}",
        f"{statistics.median(cpus):.3f}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    compileall.compile_dir(os.path.dirname(simindex.__file__), quiet=1)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        db = str(Path(scratch) / "tiny.db")
        corpus = Path(scratch) / "tiny.jsonl"
        corpus.write_text(
            '{"id": "a", "text": "a short story about the harbour"}\n'
            '{"id": "b", "text": "a short story about the harbor"}\n'
        )
        env = {
            **os.environ,
            "NUMBA_CACHE_DIR": str(Path(scratch) / "numba-cold"),
            "XDG_CACHE_HOME": str(Path(scratch) / "cache"),
        }
        # Cold: the first command after install compiles every kernel (and says so).
        cold = timed([*SIMINDEX, "ingest", str(corpus), "--db", db], env)
        after_cold = timed([*SIMINDEX, "query", "--db", db, "a short story"], env)
        timed([*SIMINDEX, "pairs", "--db", db], env)  # export needs pairs
        ingest = ["ingest", str(corpus), "--db", db, "--on-duplicate", "skip"]
        dedup = ["dedup", str(corpus), "-o", str(Path(scratch) / "kept.jsonl")]
        cases = {
            "`simindex --help`": ["--help"],
            "`simindex --version`": ["--version"],
            "`simindex stats --help`": ["stats", "--help"],
            "`simindex stats --db tiny.db`": ["stats", "--db", db],
            "`simindex show --db tiny.db a`": ["show", "--db", db, "a"],
            "`simindex export --db tiny.db`": ["export", "--db", db],
            "`simindex query --db tiny.db TEXT` (kernels)": ["query", "--db", db, "a short story"],
            "`simindex pairs --full --db tiny.db` (kernels)": ["pairs", "--full", "--db", db],
            "`simindex ingest tiny.jsonl --db tiny.db --on-duplicate skip` (kernels)": ingest,
            "`simindex dedup tiny.jsonl -o kept.jsonl` (kernels)": dedup,
        }
        rows = [
            ("`python -c 'import simindex.cli'`", [sys.executable, "-c", "import simindex.cli"]),
            (NUMBA_FLOOR, [sys.executable, "-c", LOAD_ONE_KERNEL]),
            *((name, [*SIMINDEX, *words]) for name, words in cases.items()),
        ]
        results = [(name, *summary(command, env, args.repeat)) for name, command in rows]

    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: CLI start-up",
        "",
        f"- Machine: nproc {os.cpu_count()}, {platform.machine()}, Python "
        f"{platform.python_version()}; load average {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end (other processes share the cores: CPU seconds "
        "are the steadier figure)",
        f"- Command: `.venv/bin/python benchmarks/bench_startup.py --repeat {args.repeat}`",
        "",
        f"| command (warm: kernels cached), {args.repeat} runs | wall s (median) | "
        "wall s (fastest) | CPU s (median) |",
        "| --- | ---: | ---: | ---: |",
        *(f"| {name} | {wall} | {fastest} | {cpu} |" for name, wall, fastest, cpu in results),
        "",
        "| cold: first run after install (empty numba cache) | wall s | CPU s |",
        "| --- | ---: | ---: |",
        f"| `simindex ingest tiny.jsonl` (compiles every kernel, once) | {cold[0]:.1f} | "
        f"{cold[1]:.1f} |",
        f"| the next command, `simindex query` | {after_cold[0]:.2f} | {after_cold[1]:.2f} |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write_results:
        with open(ROOT / "benchmarks" / "RESULTS.md", "a", encoding="utf-8") as results_file:
            results_file.write("\n" + text)


if __name__ == "__main__":
    main()
