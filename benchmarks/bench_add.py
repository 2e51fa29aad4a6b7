"""Benchmark: ``Index.add`` of Reuters-21578 into a fresh SQLite file, CPU time and wall time.

Each repeat adds the whole corpus (text kept, default batch size) to a new index; the first,
untimed, run fills numba's compile cache. Reported: the minimum and median over the repeats of
the process's CPU time (user + system, all threads) and wall time, and the CPU cores other
processes used during the run (the machine is shared: CPU time is the figure to compare then).

    .venv/bin/python benchmarks/bench_add.py --repeats 5
    PYTHONPATH=/tmp/snapshot .venv/bin/python benchmarks/bench_add.py   # another version
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import foreign_cores, reuters_texts  # noqa: E402 (the sibling script)

import simindex  # noqa: E402
from simindex import Index  # noqa: E402


def add_once(documents: list[tuple[str, str]]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one Index.add of ``documents`` into a new SQLite index."""
    with tempfile.TemporaryDirectory() as folder:
        with Index.create(Path(folder) / "bench.db") as index:
            cpu, wall = time.process_time(), time.perf_counter()
            index.add(documents)
            return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    documents = [(str(i), text) for i, text in enumerate(reuters_texts())]
    add_once(documents)  # warm-up: numba's cache, the OS file cache
    before = foreign_cores()
    runs = [add_once(documents) for _ in range(args.repeats)]
    after = foreign_cores()
    cpu, wall = [r[0] for r in runs], [r[1] for r in runs]
    print(f"simindex from {Path(simindex.__file__).parent}")
    print(f"{len(documents):,} documents, {args.repeats} repeats")
    print(f"CPU  s: min {min(cpu):.3f}  median {statistics.median(cpu):.3f}")
    print(f"wall s: min {min(wall):.3f}  median {statistics.median(wall):.3f}")
    print(f"other processes: {before:.2f} cores before, {after:.2f} after")


if __name__ == "__main__":
    main()
