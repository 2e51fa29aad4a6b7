"""Benchmark: reading a .jsonl.gz corpus, inflated by ISA-L (what simindex.io.readers does) or by
zlib (Python's gzip module), and the whole of readers.read_documents (inflate, JSON, checks).

CPU seconds of this process, median of --repeat runs, on bench_pipeline.py's generated
corpus (made by its first run; default the 100k one).

Run from the repository root:
    .venv/bin/python benchmarks/bench_read.py [--corpus PATH] [--repeat 3] [--write-results]
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from isal import igzip

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import DATA, finish  # noqa: E402 (the sibling script)

from simindex.io.readers import read_documents  # noqa: E402

DEFAULT_CORPUS = DATA / "gen100000_seed20240601_v2.jsonl.gz"


def lines(open_compressed) -> int:
    with open_compressed() as raw:
        return sum(1 for _ in io.TextIOWrapper(raw, encoding="utf-8"))


def cpu_model() -> str:
    for line in (
        Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    ):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def cpu_seconds(work, repeat: int) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(repeat):
        started = time.process_time()
        count = work()
        times.append(time.process_time() - started)
    return statistics.median(times), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-results", action="store_true", help="append to RESULTS.md")
    args = parser.parse_args()
    if not args.corpus.is_file():
        sys.exit(f"{args.corpus} not found: run benchmarks/bench_pipeline.py once to make it")
    path = str(args.corpus)
    runs = {
        "lines, inflated by zlib (`gzip.GzipFile`)": lambda: lines(lambda: gzip.open(path)),
        "lines, inflated by ISA-L (`isal.igzip`)": lambda: lines(lambda: igzip.open(path)),
        "`readers.read_documents` (ISA-L, JSON, checks)": lambda: sum(
            1 for _ in read_documents(path)
        ),
    }
    rows = []
    for label, work in runs.items():
        seconds, count = cpu_seconds(work, args.repeat)
        rows.append(f"| {label} | {count:,} | {seconds:.2f} |")
        print(rows[-1], flush=True)
    command = f".venv/bin/python benchmarks/bench_read.py --repeat {args.repeat}"
    section = "\n".join(
        [
            f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: reading a .jsonl.gz corpus",
            "",
            f"- Machine: {cpu_model()}, nproc {os.cpu_count()}, Python "
            f"{platform.python_version()}; corpus `{args.corpus.relative_to(DATA.parents[1])}`",
            f"- Command: `{command}`",
            "",
            f"| what (median of {args.repeat}) | lines | CPU s |",
            "| --- | ---: | ---: |",
            *rows,
            "",
        ]
    )
    finish(section, args.write_results)


if __name__ == "__main__":
    main()
