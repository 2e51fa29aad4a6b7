"""Benchmark: a point query on one member of a 100,000-document hot bucket.

Every document is the same text, so all share every bucket. `query_id` of one of them runs in
a fresh process per bound: with --max-bucket-size (default 500) only that many members of a
bucket are read and compared; "unbounded" (a bound above the bucket's size) is what queries
did before they were bounded. Prints the time of the query and the process's peak RSS.

Run from the repository root:
    .venv/bin/python benchmarks/bench_hot_query.py [--db PATH_OR_URL] [--documents 100000]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

from simindex import Index

TEXT = "a story that every wire service carried word for word on the same day, " * 4


def measure(db: str, bound: int) -> None:
    with Index.open(db) as index:
        started = time.perf_counter()
        index.query_id("c000050", threshold=0.0, max_bucket_size=bound, limit=5)
        seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"max_bucket_size {bound:>9,}: {seconds:.2f} s, peak RSS {peak:,.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="hot-bucket.db")
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.measure:
        measure(args.db, args.measure)
        return
    with Index.create(args.db) as index:
        documents = ((f"c{i:06d}", TEXT) for i in range(args.documents))
        index.add(documents, batch_size=20_000)
    for bound in (500, args.documents + 1):
        command = [sys.executable, __file__, "--db", args.db, "--measure", str(bound)]
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
