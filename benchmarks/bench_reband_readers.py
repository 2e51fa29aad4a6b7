"""Benchmark: point queries on Reuters-21578 while `reband --drop-old` runs (PostgreSQL).

Index Reuters-21578 (about 21,600 stories), then run reader threads that repeat
`query_id('1017')`, whose exact copy 1311 must come back every time, while six re-bands with
drop_old alternate two bandings; during the fourth, an analyst's transaction holds the band
keys (it has read `bucket_sizes`), so the old partition can't be dropped at once. Prints the
queries that missed 1311 and the latency percentiles (docs/reliability.md, "Readers during
re-band").

Run from the repository root (a PostgreSQL server, like the tests'):
    .venv/bin/python benchmarks/bench_reband_readers.py [--pg URL] [--readers 2] [--reuters PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
import time
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import (  # noqa: E402 (the sibling script, for its database helpers)
    DEFAULT_PG,
    REUTERS,
    drop_pg_database,
    fresh_pg_database,
)

from simindex import Index  # noqa: E402
from simindex.store import database_url  # noqa: E402

TARGET, COPY = "1017", "1311"
BANDINGS = [(42, 3), (20, 6)] * 3
WITH_ANALYST = 3  # the re-band during which the analyst's transaction is open


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=DEFAULT_PG, help="a server where databases may be made")
    parser.add_argument("--readers", type=int, default=2, help="reader threads")
    parser.add_argument("--reuters", type=Path, default=REUTERS, help="reuters21578.jsonl.gz")
    args = parser.parse_args()
    with gzip.open(args.reuters, "rt", encoding="utf-8") as lines:
        documents = [(str(r["id"]), r["text"]) for r in map(json.loads, lines)]
    url = fresh_pg_database(args.pg, "bench_reband_readers")
    try:
        with Index.create(url, threshold=0.8) as index:
            index.add(documents, on_empty="skip")
        queries = run(url, args.readers)
    finally:
        drop_pg_database(args.pg, "bench_reband_readers")
    latencies = sorted(queries.latencies)
    print(
        f"{len(latencies):,} queries, {len(queries.misses)} without {COPY}; latency median "
        f"{latencies[len(latencies) // 2] * 1000:.0f} ms, p99 "
        f"{latencies[int(len(latencies) * 0.99)] * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )


class PointQueries:
    """Reader threads that repeat ``query_id(target)`` until the block ends, each timed;
    ``misses`` are the answers without ``copy``. Also used by tests/db/test_concurrency.py."""

    def __init__(self, url: str, target: str, copy: str, readers: int = 1):
        self.url, self.target, self.copy = url, target, copy
        self.latencies: list[float] = []
        self.misses: list[list[str]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._read) for _ in range(readers)]

    def _read(self) -> None:
        with Index.open(self.url) as reader:
            while not self._stop.is_set():
                started = time.perf_counter()
                found = [m.external_id for m in reader.query_id(self.target, threshold=0.5)]
                self.latencies.append(time.perf_counter() - started)
                if self.copy not in found:
                    self.misses.append(found)

    def __enter__(self) -> PointQueries:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def run(url: str, readers: int) -> PointQueries:
    analyst = sa.create_engine(database_url(url))
    with PointQueries(url, TARGET, COPY, readers) as queries, Index.open(url) as writer:
        for i, (bands, rows) in enumerate(BANDINGS):
            started = time.perf_counter()
            if i == WITH_ANALYST:
                with analyst.connect() as connection, connection.begin():
                    connection.exec_driver_sql("SELECT count(*) FROM bucket_sizes").all()
                    writer.reband(bands, rows, drop_old=True)
            else:
                writer.reband(bands, rows, drop_old=True)
            retired = writer.stats()["retired_bandings"]
            print(
                f"reband {bands} x {rows}{' (analyst open)' if i == WITH_ANALYST else ''}: "
                f"{time.perf_counter() - started:.1f} s; retired bandings: {retired}"
            )
    analyst.dispose()
    return queries


if __name__ == "__main__":
    main()
