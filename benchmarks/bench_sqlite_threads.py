"""Benchmark: whether two threads of one process read a SQLite index faster than one.

`pairs --full` on SQLite first groups the active banding's band keys into buckets
(Store.iter_buckets: one GROUP BY band, key over every row), on one connection, while the
second core is idle. This script times that statement, the bucket texts fetched and dropped,
on an index made by `simindex ingest`, each way in a fresh process:

- ``one connection``: the statement a split grouping runs (store._BAND_BUCKETS), a band at
  a time, for every band;
- ``two threads``: two connections of one process, each grouping half the bands (even and
  odd) in a thread of its own; the sqlite3 module lets go of the GIL while SQLite works;
- ``two threads, memory statistics off``: the same, in a process that turned SQLite's memory
  statistics off before opening a connection (sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0),
  called through ctypes after sqlite3_shutdown). With them on, as SQLite is built by default,
  every allocation of every connection of the process takes one global mutex;
- ``two processes``: each half in a process of its own.

It also sizes the text of the odd bands' buckets: the temporary file that the second process
of a split grouping (Store._split_buckets) writes.

Nothing is written. Linux with the sqlite3 module linked to a shared libsqlite3 (the ctypes
calls find SQLite's functions through it). Run from the repository root:
    .venv/bin/python benchmarks/bench_sqlite_threads.py --db PATH [--db PATH ...] [--repeat 2]
        [--write-results]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import finish, host  # noqa: E402 (the sibling scripts)

SQLITE_CONFIG_MEMSTATUS = 9
CASES = {
    "one connection": "one",
    "two threads": "threads",
    "two threads, memory statistics off": "threads-nostats",
    "two processes": "processes",
}


def group(path: str, bands: list[int], statement: str) -> tuple[int, int]:
    """Group the active banding's keys of ``bands`` as iter_buckets does (a band at a time
    here, so a connection can take any set of bands) by ``statement`` (store._BAND_BUCKETS,
    given as an argument: a process of its own imports no simindex): (buckets of two or more, bytes of
    their text as Store._split_buckets' second process writes it, a line a bucket)."""
    connection = sqlite3.connect(path, check_same_thread=False)
    (banding,) = connection.execute("SELECT id FROM bandings WHERE is_active").fetchone()
    buckets = text = 0
    for band in bands:
        rows = connection.execute(statement, {"banding_id": banding, "band": band})
        for (ids,) in rows:
            buckets, text = buckets + 1, text + len(ids) + 1
    connection.close()
    return buckets, text


def memory_statistics_off() -> None:
    """Turn SQLite's memory statistics off for this process, before any connection."""
    import _sqlite3
    import ctypes

    library = ctypes.CDLL(_sqlite3.__file__)
    said = (
        library.sqlite3_shutdown(),
        library.sqlite3_config(SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0)),
        library.sqlite3_initialize(),
    )
    if any(said):
        sys.exit(f"could not turn SQLite's memory statistics off: {said}")


def run_case(path: str, case: str, bands: int, statement: str) -> dict:
    """One way of grouping every band, in this process (or two, for ``processes``)."""
    halves = [list(range(0, bands, 2)), list(range(1, bands, 2))]
    if case == "threads-nostats":
        memory_statistics_off()
    started = time.perf_counter()
    if case == "one":
        found = [group(path, list(range(bands)), statement)]
    elif case == "processes":
        children = [
            subprocess.Popen(
                [sys.executable, __file__, "--group", path, ",".join(map(str, half)), statement],
                stdout=subprocess.PIPE,
                text=True,
            )
            for half in halves
        ]
        found = [tuple(json.loads(child.communicate()[0])) for child in children]
    else:
        found = []
        threads = [
            threading.Thread(target=lambda h=half: found.append(group(path, h, statement)))
            for half in halves
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return {
        "seconds": time.perf_counter() - started,
        "buckets": sum(b for b, _ in found),
        "text": sum(t for _, t in found),
    }


def measure(path: str, case: str, bands: int, statement: str) -> dict:
    said = subprocess.run(
        [sys.executable, __file__, "--case", path, case, str(bands), statement],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(said.stdout)


def main() -> None:
    if sys.argv[1:2] == ["--case"]:
        print(json.dumps(run_case(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])))
        return
    if sys.argv[1:2] == ["--group"]:
        print(json.dumps(group(sys.argv[2], [int(b) for b in sys.argv[3].split(",")], sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", action="append", required=True, help="a SQLite index's path")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    from simindex.store import _BAND_BUCKETS as statement  # the statement `pairs` runs

    started = datetime.now(UTC)
    lines = [
        f"## {started:%Y-%m-%d %H:%M} UTC: SQLite's grouping of band keys in one thread, two "
        "threads and two processes (bench_sqlite_threads.py)",
        "",
        f"- Machine: {host()}; SQLite {sqlite3.sqlite_version}",
        "- Command: `.venv/bin/python benchmarks/bench_sqlite_threads.py "
        + " ".join(f"--db {db}" for db in args.db)
        + f" --repeat {args.repeat}`",
        "",
        "| index | documents | way | seconds (each run) | median | buckets |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    spooled = []
    for path in args.db:
        connection = sqlite3.connect(path)
        (documents,) = connection.execute("SELECT count(*) FROM documents").fetchone()
        (bands,) = connection.execute("SELECT bands FROM bandings WHERE is_active").fetchone()
        connection.close()
        for name, case in CASES.items():
            runs = [measure(path, case, bands, statement) for _ in range(args.repeat)]
            seconds = [run["seconds"] for run in runs]
            lines.append(
                f"| {path} | {documents:,} | {name} | "
                + ", ".join(f"{s:.2f}" for s in seconds)
                + f" | {statistics.median(seconds):.2f} | {runs[0]['buckets']:,} |"
            )
            print(lines[-1], flush=True)
        _, text = group(path, list(range(1, bands, 2)), statement)
        spooled.append(
            f"- {path}: {text / 2**20:,.1f} MiB ({text / documents:.1f} bytes a document)"
        )
    lines += [
        "",
        "The odd bands' buckets as text, what the second process of Store._split_buckets "
        "writes to its temporary file:",
        "",
        *spooled,
    ]
    finish("\n".join(lines) + "\n", args.write_results)


if __name__ == "__main__":
    main()
