"""Benchmark: how long the `simindex` command takes to start.

Times, in fresh processes, `simindex --help`, `simindex --version`, `simindex stats --help`
and `import simindex.cli` (no library loaded), then the fixed cost of real commands on a
two-document SQLite index (`stats`, `query`): warm, with numba's kernel cache filled, and
cold, the first run after install, with an empty cache (NUMBA_CACHE_DIR pointed at a new
directory), when the CLI compiles every kernel once and says so. Each warm figure is the
median of --repeat runs: wall-clock seconds, and CPU seconds (user + system), which the load
of other processes on the machine disturbs less.

Run from the repository root:
    .venv/bin/python benchmarks/bench_startup.py [--repeat 7] [--write-results]
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parent.parent
SIMINDEX = [sys.executable, "-m", "simindex"]


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit status) of one run of command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    status = subprocess.run(command, env=env, capture_output=True).returncode
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, status


def median_run(command: list[str], env: dict[str, str], repeat: int) -> tuple[str, str]:
    """Median wall and CPU seconds as text; "failed" when the command exits non-zero."""
    runs = [timed(command, env) for _ in range(repeat)]
    if any(status for _, _, status in runs):
        return "failed", "failed"
    return tuple(f"{statistics.median(r[i] for r in runs):.3f}" for i in (0, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        db = str(Path(scratch) / "tiny.db")
        corpus = Path(scratch) / "tiny.jsonl"
        corpus.write_text(
            '{"id": "a", "text": "a short story about the harbour"}\n'
            '{"id": "b", "text": "a short story about the harbor"}\n'
        )
        env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(scratch) / "numba-cold")}
        # Cold: the first command after install compiles every kernel (and says so).
        cold = timed([*SIMINDEX, "ingest", str(corpus), "--db", db], env)
        warm_query = timed([*SIMINDEX, "query", "--db", db, "a short story"], env)
        cases = {
            "`simindex --help`": ["--help"],
            "`simindex --version`": ["--version"],
            "`simindex stats --help`": ["stats", "--help"],
            "`simindex stats --db tiny.db`": ["stats", "--db", db],
            "`simindex query --db tiny.db TEXT`": ["query", "--db", db, "a short story"],
        }
        rows = [
            ("`python -c 'import simindex.cli'`", [sys.executable, "-c", "import simindex.cli"]),
            *((name, [*SIMINDEX, *words]) for name, words in cases.items()),
        ]
        results = [(name, *median_run(command, env, args.repeat)) for name, command in rows]

    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: CLI start-up",
        "",
        f"- Machine: nproc {os.cpu_count()}, {platform.machine()}, Python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f} at the end "
        "(other processes share the cores: CPU seconds are the steadier figure)",
        f"- Command: `.venv/bin/python benchmarks/bench_startup.py --repeat {args.repeat}`",
        "",
        "| command (warm: kernels cached) | wall s (median) | CPU s (median) |",
        "| --- | ---: | ---: |",
        *(f"| {name} | {wall} | {cpu} |" for name, wall, cpu in results),
        "",
        "| cold: first run after install (empty numba cache) | wall s | CPU s |",
        "| --- | ---: | ---: |",
        f"| `simindex ingest tiny.jsonl` (compiles every kernel, once) | {cold[0]:.1f} | "
        f"{cold[1]:.1f} |",
        f"| the next command, `simindex query` | {warm_query[0]:.2f} | {warm_query[1]:.2f} |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write_results:
        with open(ROOT / "benchmarks" / "RESULTS.md", "a", encoding="utf-8") as results_file:
            results_file.write("\n" + text)


if __name__ == "__main__":
    main()
