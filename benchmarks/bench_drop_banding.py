"""Benchmark: what `simindex drop-banding` costs on a large index: wall and CPU seconds, peak
RSS, and on SQLite the most the WAL held and the file's size before and after.

On SQLite the drop's transaction retires the banding, and its band keys are deleted after the
commit, one write transaction per band (Store._delete_retired_keys): the WAL holds about one
band's pages, each checkpoint copying them back and the next band's writing over them, and the
file keeps its size (the freed pages are reused by later writes). A reader whose snapshot is
older than the drop keeps the checkpoints from resetting the WAL: with --reader, another
connection holds such a snapshot (a read transaction begun before the drop) until the drop
ends, and the WAL grows with every band. On PostgreSQL the banding's partition is dropped
after the commit. The script first makes a banding to drop,
with `simindex reband --bands B --rows R --no-activate`, then drops it; each is a CLI process
timed from outside (bench_scale.run_step), the code of the working tree.

Run from the repository root, on an index made by `simindex ingest` (bench_scale.py makes the
corpora); the new banding takes about B/20 of the disk of a 20-band banding's keys, and on
SQLite as much again in the WAL while it is dropped:
    .venv/bin/python benchmarks/bench_drop_banding.py --db URL [--bands 42] [--rows 3]
        [--reader] [--write-results]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import finish, host  # noqa: E402 (the sibling scripts)
from bench_scale import run_step  # noqa: E402

SIMINDEX = [sys.executable, "-m", "simindex"]


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL or path; None for PostgreSQL."""
    if url.startswith("postgresql"):
        return None
    return Path(url.removeprefix("sqlite:///"))


def banding_ids(url: str) -> set[int]:
    said = subprocess.run(
        [*SIMINDEX, "stats", "--json", "--db", url], check=True, capture_output=True, text=True
    )
    return {banding["id"] for banding in json.loads(said.stdout)["bandings"]}


class LargestFile:
    """The largest size a file reaches while the block runs, polled every 0.1 s."""

    def __init__(self, path: Path):
        self.path, self.largest, self._done = path, 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._done.wait(0.1):
            self.largest = max(self.largest, self.path.stat().st_size if self.path.exists() else 0)

    def __enter__(self) -> LargestFile:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


@contextmanager
def reader_snapshot(path: Path) -> Iterator[None]:
    """Another connection to the SQLite file in a read transaction, begun now (its snapshot
    taken by its first read), held until the block ends."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("BEGIN")
        connection.execute("SELECT count(*) FROM bandings").fetchone()
        yield
    finally:
        connection.execute("ROLLBACK")
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="an index's URL or SQLite path")
    parser.add_argument("--bands", type=int, default=42)
    parser.add_argument("--rows", type=int, default=3)
    parser.add_argument(
        "--reader",
        action="store_true",
        help="SQLite: hold another connection's read snapshot from before the drop to its end",
    )
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    on = ["--db", args.db]
    before = banding_ids(args.db)
    reband = [*SIMINDEX, "reband", "--bands", str(args.bands), "--rows", str(args.rows)]
    built = run_step("reband --no-activate", [*reband, "--no-activate", *on], env=os.environ)
    (new,) = banding_ids(args.db) - before
    path = sqlite_path(args.db)
    if args.reader and path is None:
        sys.exit("--reader is for a SQLite index")
    size_before = path.stat().st_size if path else 0
    wal = LargestFile(Path(f"{path}-wal")) if path else None
    drop = [*SIMINDEX, "drop-banding", str(new), "--yes", *on]
    with ExitStack() as during:
        if args.reader:
            during.enter_context(reader_snapshot(path))
        if wal is not None:
            during.enter_context(wal)
        dropped = run_step(f"drop-banding {new}", drop, env=os.environ)
    if not (built["ok"] and dropped["ok"]):
        sys.exit(f"a step failed: {built.get('error') or dropped.get('error')}")
    rows = [
        f"| `reband --bands {args.bands} --rows {args.rows} --no-activate` | "
        f"{built['seconds']:.1f} | {built['cpu_seconds']:.1f} | {built['peak_rss_mib']:.0f} |",
        f"| `drop-banding {new}` | {dropped['seconds']:.1f} | {dropped['cpu_seconds']:.1f} | "
        f"{dropped['peak_rss_mib']:.0f} |",
    ]
    lines = [
        f"## {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC: `drop-banding` of a "
        f"{args.bands} x {args.rows} banding (bench_drop_banding.py)",
        "",
        f"- Machine: {host()}",
        f"- Index: {path or 'PostgreSQL'}",
        f"- Command: `.venv/bin/python benchmarks/bench_drop_banding.py --db URL --bands "
        f"{args.bands} --rows {args.rows}{' --reader' if args.reader else ''}`",
        *(
            ["- A reader held a snapshot from before the drop until it ended"]
            if args.reader
            else []
        ),
        "",
        "| step | wall s | CPU s | peak RSS MiB |",
        "| --- | ---: | ---: | ---: |",
        *rows,
        "",
    ]
    if wal is not None:
        lines += [
            f"The WAL held at most {wal.largest / 2**20:,.0f} MiB during the drop; the file "
            f"was {size_before / 2**20:,.0f} MiB before it and "
            f"{path.stat().st_size / 2**20:,.0f} MiB after.",
            "",
        ]
    finish("\n".join(lines), args.write_results)


if __name__ == "__main__":
    main()
