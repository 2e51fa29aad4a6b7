"""Benchmark: where a step on SQLite grows faster than the corpus, function by function.

A ratio of wall times (bench_scale.py: time at 4M over time at 400k) says that a step grows
faster than the corpus, not where. For each of two corpus sizes (bench_scale's generated
corpora), this script makes a SQLite index with `simindex ingest` (kept in --dir, so later
runs reuse it), runs one step under `perf record` (CPU-clock sampling of the command and its
threads, user and kernel code), and lists the functions (SQLite's, NumPy's, CPython's, the
kernel's; numba's compiled kernels as one) by how far their CPU seconds at the larger size
exceed the size ratio times their seconds at the smaller: the part of the step that grows
faster than the corpus.

Steps: ``reband`` (bench_scale's ``reband --bands 42 --rows 3``, not activated: each run adds
a banding to the index) and ``pairs`` (``pairs --full``).

Needs Linux perf, allowed to sample the command (root, or kernel.perf_event_paranoid <= 1).
Disk: each index as bench_scale's SQLite one (~2.8 KB per document, 11 GB at 4M), plus
~1 KB per document for each ``reband`` run. Run from the repository root:
    .venv/bin/python benchmarks/bench_growth.py --step reband [--sizes 400000 4000000]
        [--dir /tmp] [--top 15] [--write-results]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import corpus_name, corpus_path, finish, git  # noqa: E402 (sibling scripts)
from bench_scale import SEED, SIMINDEX, in_child, warm_up  # noqa: E402

STEP_ARGS = {
    "reband": ["reband", "--bands", "42", "--rows", "3", "--no-activate", "-y"],
    "pairs": ["pairs", "--full", "--top", "0"],
}
FREQUENCY = 499  # samples a second a thread: ~2 ms apart, too few to slow the command
# A line of `perf report -F period,dso,sym`: CPU nanoseconds, object, [k]ernel or [.]user, name.
REPORT_LINE = re.compile(r"\s*(\d+)\s+(.+?)\s+\[(.)\]\s+(.+?)\s*$")


def index_of(size: int, directory: Path) -> Path:
    """The SQLite index of the ``size`` corpus, made by `simindex ingest` unless it exists."""
    path = directory / f"bench_growth_{size}.db"
    if not path.exists():
        in_child("corpus", str(size))
        corpus = corpus_path(corpus_name(str(size)), SEED)
        print(f"ingest {size:,} into {path} ...", flush=True)
        subprocess.run([*SIMINDEX, "ingest", str(corpus), "--db", str(path)], check=True,
                       capture_output=True)  # fmt: skip
    return path


def page_size(path: Path) -> int:
    """The index file's page size (a new index's is store.SQLITE_PAGE_SIZE, an older one's its
    own): the WAL and page-cache costs this script finds depend on it."""
    with closing(sqlite3.connect(path)) as connection:
        return int(connection.execute("PRAGMA page_size").fetchone()[0])


def profile(step: str, path: Path) -> tuple[float, Counter]:
    """Wall seconds of the step on the index at ``path`` and its CPU seconds by function."""
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "perf.data"
        os.sync()  # no earlier write is flushed during the step
        started = time.perf_counter()
        subprocess.run(
            ["perf", "record", "-F", str(FREQUENCY), "-o", str(data), "--",
             *SIMINDEX, *STEP_ARGS[step], "--db", str(path)],
            check=True, capture_output=True,
        )  # fmt: skip
        wall = time.perf_counter() - started
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--stdio", "--no-children",
             "--sort", "dso,sym", "-F", "period,dso,sym"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    seconds: Counter = Counter()
    for line in report.splitlines():
        found = REPORT_LINE.match(line)
        if not found or line.startswith("#"):
            continue
        nanoseconds, dso, kind, name = found.groups()
        if dso.startswith("[JIT]"):
            name = "numba kernels (compiled code)"
        elif name.startswith("0x"):
            name = f"unresolved code in {dso}"
        seconds[("kernel" if kind == "k" else "user", name)] += int(nanoseconds) / 1e9
    return wall, seconds


def ratio_of(large: float, small: float) -> str:
    """large / small, or a dash where the small one is too few samples to divide by."""
    return f"{large / small:.1f}x" if small >= 5 / FREQUENCY else "—"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", choices=sorted(STEP_ARGS), required=True)
    parser.add_argument("--sizes", type=int, nargs=2, default=[400_000, 4_000_000])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("Error: this benchmark needs Linux perf (`perf` is not on PATH)")
    small, large = sorted(args.sizes)
    warm_up(dict(os.environ))
    paths = {size: index_of(size, args.dir) for size in (small, large)}
    runs = {size: profile(args.step, path) for size, path in paths.items()}
    pages = sorted({page_size(path) for path in paths.values()})
    edited = " with uncommitted changes" if git("status", "--porcelain", "simindex") else ""
    (wall_s, cpu_s), (wall_l, cpu_l) = runs[small], runs[large]
    ratio = large / small
    names = set(cpu_s) | set(cpu_l)
    excess = {name: cpu_l[name] - ratio * cpu_s[name] for name in names}

    def total(seconds: Counter, part: str | None = None) -> float:
        return sum(v for (kind, _), v in seconds.items() if part in (None, kind))

    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: where `{args.step}` on SQLite grows "
        f"faster than the corpus, by function ({small:,} and {large:,} documents)",
        "",
        f"- Machine: nproc {os.cpu_count()}, {platform.machine()}, Python "
        f"{platform.python_version()}; SQLite indexes made by `simindex ingest`, pages of "
        f"{' and '.join(f'{p:,}' for p in pages)} bytes",
        f"- Code: simindex of {git('rev-parse', '--short=10', 'HEAD')}{edited}",
        f"- Command: `.venv/bin/python benchmarks/bench_growth.py --step {args.step} "
        f"--sizes {small} {large}`; `perf record -F {FREQUENCY}` of "
        f"`simindex {' '.join(STEP_ARGS[args.step])}`",
        "",
        f"| | {small:,} | {large:,} | ratio |",
        "| --- | ---: | ---: | ---: |",
        f"| wall | {wall_s:.2f} s | {wall_l:.2f} s | {ratio_of(wall_l, wall_s)} |",
        *(
            f"| CPU, {part or 'all'} | {total(cpu_s, part):.2f} s | {total(cpu_l, part):.2f} s "
            f"| {ratio_of(total(cpu_l, part), total(cpu_s, part))} |"
            for part in (None, "user", "kernel")
        ),
        "",
        f"The functions whose CPU at {large:,} exceeds {ratio:g} times theirs at {small:,} "
        f"the most (excess = seconds at {large:,} - {ratio:g} x seconds at {small:,}):",
        "",
        f"| function | where | {small:,} | {large:,} | ratio | excess |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        *(
            f"| {name} | {kind} | {cpu_s[(kind, name)]:.2f} s | {cpu_l[(kind, name)]:.2f} s | "
            f"{ratio_of(cpu_l[(kind, name)], cpu_s[(kind, name)])} | "
            f"{excess[(kind, name)]:+.2f} s |"
            for kind, name in sorted(names, key=lambda n: -excess[n])[: args.top]
        ),
        "",
        f"Excess of all functions together: {sum(excess.values()):+.2f} s.",
    ]
    finish("\n".join(lines), args.write_results)


if __name__ == "__main__":
    main()
