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
        latencies, misses = run(url, args.readers)
    finally:
        drop_pg_database(args.pg, "bench_reband_readers")
    latencies.sort()
    print(
        f"{len(latencies):,} queries, {len(misses)} without {COPY}; latency median "
        f"{latencies[len(latencies) // 2] * 1000:.0f} ms, p99 "
        f"{latencies[int(len(latencies) * 0.99)] * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )


def run(url: str, readers: int) -> tuple[list[float], list[list[str]]]:
    stop = threading.Event()
    latencies: list[float] = []
    misses: list[list[str]] = []

    def read() -> None:
        with Index.open(url) as reader:
            while not stop.is_set():
                started = time.perf_counter()
                found = [m.external_id for m in reader.query_id(TARGET, threshold=0.5)]
                latencies.append(time.perf_counter() - started)
                if COPY not in found:
                    misses.append(found)

    threads = [threading.Thread(target=read) for _ in range(readers)]
    for thread in threads:
        thread.start()
    analyst = sa.create_engine(database_url(url))
    try:
        with Index.open(url) as writer:
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
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        analyst.dispose()
    return latencies, misses


if __name__ == "__main__":
    main()
