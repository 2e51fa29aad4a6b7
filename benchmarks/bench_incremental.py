"""Benchmark: adding batches to an existing index, with pairs found only for the new ones.

On each backend, in a fresh database: the first documents of a generated corpus
(benchmarks/corpus.py) are indexed and paired (``Index.add``, ``find_pairs``: the base),
then --batches batches of --batch new documents each are added and paired in turn. A batch's
``find_pairs`` pairs only the new documents (with each other and with the index), so its
time should follow the batch, not the index. Times are measured inside this process
(library calls), after an untimed warm-up.

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    python benchmarks/bench_incremental.py                       # 20k = 16k base + 4 x 1k
    python benchmarks/bench_incremental.py --size 400000 --batch 10000 --results
"""

from __future__ import annotations

import argparse
import tempfile
import time
from itertools import islice
from pathlib import Path

import corpus
import measure

TITLE = "Incremental: batches added to an existing index (bench_incremental.py)"
BACKENDS = {"sqlite": "SQLite", "pg": "PostgreSQL"}


def timed(call):
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def bench(backend: str, args: argparse.Namespace) -> list[list[str]]:
    from simindex import Index

    path = corpus.corpus(args.size)
    base = args.size - args.batch * args.batches
    documents = corpus.documents(path)
    rows = []
    with (
        measure.database(backend, "bench_incremental", args.pg_url, args.sqlite_dir) as url,
        Index.create(url) as index,
    ):
        add, _ = timed(lambda: index.add(islice(documents, base)))
        pairs, report = timed(index.find_pairs)
        rows.append([BACKENDS[backend], f"base: {base:,}", f"{add:.2f}", f"{pairs:.2f}",
                     f"{report.pairs:,}"])  # fmt: skip
        for number in range(1, args.batches + 1):
            add, _ = timed(lambda: index.add(islice(documents, args.batch)))
            pairs, report = timed(index.find_pairs)
            rows.append([BACKENDS[backend], f"batch {number}: +{args.batch:,}", f"{add:.2f}",
                         f"{pairs:.2f}", f"{report.pairs:,}"])  # fmt: skip
            print(" | ".join(rows[-1]), flush=True)
    return rows


def warm_up() -> None:
    from simindex import Index

    texts = list(islice(corpus.documents(corpus.corpus("reuters")), 300))
    with tempfile.TemporaryDirectory() as folder, Index.create(f"{folder}/warm.db") as index:
        index.add(texts)
        index.find_pairs()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=20_000, help="documents in all")
    parser.add_argument("--batch", type=int, default=1_000, help="documents per batch")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--pg-url", default=measure.DEFAULT_PG, help="PostgreSQL (CREATE DATABASE)")
    parser.add_argument("--sqlite-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--results", action="store_true", help="write the table to RESULTS.md")
    args = parser.parse_args()
    warm_up()
    rows = [row for backend in args.backends for row in bench(backend, args)]
    header = ["backend", "documents added", "add s", "find_pairs s", "new pairs"]
    body = measure.table(header, rows)
    print("\n" + body)
    if args.results:
        measure.write_section(TITLE, body, args.pg_url)


if __name__ == "__main__":
    main()
