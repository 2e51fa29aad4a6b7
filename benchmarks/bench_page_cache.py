"""Benchmark: what this host's kernel charges for writing a file, by where its pages come from.

A step that writes gigabytes (a SQLite WAL, a sort's runs, the database growing) asks the
kernel for a new page-cache page per 4 KiB. On a virtual machine whose free memory is handed
back to the host (free page reporting, a balloon), a page the guest has not used lately must
first be given back by the host, which the guest pays for as kernel time in the copy or the
zeroing that touches it. So the same bytes cost more at 4M documents, whose files outgrow the
memory that smaller runs keep recycling, than at 400k. This script writes --gb GB to a file in
1 MiB writes (no fsync: the page cache only) four ways and reports the wall and kernel CPU
seconds of each:

- new: a new file, after the memory of earlier runs was freed --pause seconds before;
- overwritten: the same file written again from its start (its pages are cached: no new ones);
- new, freed just before: a new file right after the previous one was deleted;
- new, freed --pause s before: the same after a pause (time for the memory to go back).

Disk: --gb GB in --dir, written and deleted (nothing is flushed on purpose; the kernel writes
some back). Run from the repository root:
    .venv/bin/python benchmarks/bench_page_cache.py [--gb 4] [--pause 20] [--dir /tmp]
        [--write-results]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import finish  # noqa: E402 (the sibling script)

BLOCK = 2**20
PAGE_REPORTING = Path("/sys/module/page_reporting/parameters/page_reporting_order")


def write(path: Path, gigabytes: float, truncate: bool = True) -> tuple[float, float]:
    """Wall and kernel CPU seconds of writing ``gigabytes`` to ``path`` from its start."""
    data = os.urandom(BLOCK)
    blocks = int(gigabytes * 2**30 // BLOCK)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else 0)
    before, started = resource.getrusage(resource.RUSAGE_SELF).ru_stime, time.perf_counter()
    fd = os.open(path, flags, 0o600)
    try:
        for _ in range(blocks):
            os.write(fd, data)
    finally:
        os.close(fd)
    wall = time.perf_counter() - started
    return wall, resource.getrusage(resource.RUSAGE_SELF).ru_stime - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=4.0)
    parser.add_argument("--pause", type=float, default=20.0)
    parser.add_argument("--dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    first, second = args.dir / "bench_page_cache_1", args.dir / "bench_page_cache_2"
    runs = []
    try:
        time.sleep(args.pause)
        runs.append(("new", write(first, args.gb)))
        runs.append(("overwritten (its pages cached)", write(first, args.gb, truncate=False)))
        first.unlink()
        runs.append(("new, memory freed just before", write(second, args.gb)))
        second.unlink()
        time.sleep(args.pause)
        runs.append((f"new, memory freed {args.pause:g} s before", write(first, args.gb)))
    finally:
        for path in (first, second):
            path.unlink(missing_ok=True)

    reporting = PAGE_REPORTING.read_text().strip() if PAGE_REPORTING.exists() else "absent"
    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: the kernel's cost of writing a file, by "
        "where its pages come from",
        "",
        f"- Machine: nproc {os.cpu_count()}, {platform.machine()}, kernel {platform.release()}; "
        f"free page reporting (page_reporting_order): {reporting}",
        "- Command: `.venv/bin/python benchmarks/bench_page_cache.py "
        f"--gb {args.gb:g} --pause {args.pause:g} --dir {args.dir}`",
        "",
        f"| {args.gb:g} GB written in 1 MiB writes to | wall s | kernel CPU s | GB/s |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, (wall, kernel) in runs:
        lines.append(f"| {name} | {wall:.2f} | {kernel:.2f} | {args.gb / wall:.2f} |")
    finish("\n".join(lines) + "\n", args.write_results)


if __name__ == "__main__":
    main()
