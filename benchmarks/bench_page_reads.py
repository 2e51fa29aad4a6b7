"""Benchmark: which tables' pages `simindex pairs --full` reads on SQLite, and on which thread.

SQLite reads its file a page at a time (pread64 of one page) whenever a page is not in the
connection's own page cache, and each such read copies the page from the OS page cache into
the process: on a large index, the kernel's copying grows faster than the corpus
(benchmarks/RESULTS.md, 2026-11-28 19:46 UTC). This script runs `simindex pairs --full --top
0` on a SQLite index under ``strace -ff -y -e trace=pread64`` (a trace file per thread, each
read with the path of its file descriptor), then names the table or index of every page read
from the database file (SQLite's dbstat table, read before the run: a page the run frees and
reuses counts for its owner before) and counts the reads per table and thread. Reads of the
WAL are counted apart, all of them: the pages the run wrote, read back, and those its
checkpoints copy into the database. strace slows the run several times over (its time is not
the step's): the counts are what it is for. At 4M documents the traces take ~0.5 GB of the
temporary directory.

Run from the repository root, on a SQLite index made by `simindex ingest` (needs strace):
    .venv/bin/python benchmarks/bench_page_reads.py --db /tmp/index.db [--write-results]
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import finish, host  # noqa: E402 (the sibling scripts)

_READ = re.compile(r"^pread64\(\d+<([^>]+)>, .*, (\d+), (\d+)\) = (\d+)$")


def page_owners(db: Path) -> tuple[dict[int, str], int]:
    """Page number -> table or index name, and the page size."""
    with sqlite3.connect(db) as connection:
        owners = dict((page, name) for name, page in connection.execute(
            "SELECT name, pageno FROM dbstat"))  # fmt: skip
        (page_size,) = connection.execute("PRAGMA page_size").fetchone()
    return owners, page_size


def traced_reads(db: Path) -> tuple[Counter, float, str]:
    """(table or index, "(WAL)" or another file's "(NAME)", thread) -> reads; the traced
    run's seconds and the last line it printed."""
    owners, page_size = page_owners(db)
    with tempfile.TemporaryDirectory() as scratch:
        prefix = Path(scratch) / "trace"
        command = ["strace", "-ff", "-y", "-e", "trace=pread64", "-e", "signal=none"]
        command += ["-o", str(prefix), sys.executable, "-m", "simindex", "pairs", "--full"]
        started = time.perf_counter()
        run = subprocess.run([*command, "--top", "0", "--db", str(db)],
                             check=True, capture_output=True, text=True)  # fmt: skip
        seconds = time.perf_counter() - started
        reads: Counter = Counter()
        files = sorted(Path(scratch).glob("trace.*"), key=lambda p: int(p.suffix[1:]))
        for number, path in enumerate(files):
            with path.open() as lines:
                for line in lines:
                    found = _READ.match(line.rstrip("\n"))
                    if found is None:
                        continue
                    file, _, offset, _ = found.groups()
                    if file == str(db.resolve()):
                        name = owners.get(int(offset) // page_size + 1, "(no table)")
                    else:
                        name = "(WAL)" if file.endswith("-wal") else f"({Path(file).name})"
                    reads[(name, f"thread {number + 1}")] += 1
    return reads, seconds, (run.stdout + run.stderr).strip().splitlines()[-1]


def report(db: Path, reads: Counter, seconds: float, said: str) -> str:
    lines = [
        f"## {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC: the pages `pairs --full` "
        f"reads on SQLite, by table and thread ({db.name})",
        "",
        f"`simindex pairs` said: {said}",
        "",
        f"Reads (pread64) in all: {sum(reads.values()):,}; the traced run took {seconds:.1f} s "
        "(strace's time included). Threads are numbered in the order they started.",
        "",
        "| table or index | thread | reads |",
        "| --- | --- | ---: |",
        *(f"| {name} | {thread} | {count:,} |" for (name, thread), count in reads.most_common()),
        "",
        f"Machine: {host()}. Command: `.venv/bin/python benchmarks/bench_page_reads.py --db {db}`.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="a SQLite index file")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    reads, seconds, said = traced_reads(args.db)
    finish(report(args.db, reads, seconds, said), args.write_results)


if __name__ == "__main__":
    main()
