"""Benchmark: point-query latency (p50, p99) on SQLite and PostgreSQL.

On each backend, a generated corpus (benchmarks/corpus.py) is loaded with ``simindex
ingest`` into a fresh database; then, in this process, ``Index.query(text)`` runs for
--queries texts that are edited copies of corpus documents (not in the index), after
--warmup untimed ones. Reported: latency percentiles in milliseconds, and the share of
queries whose source document was among the matches.

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    python benchmarks/bench_query.py
    python benchmarks/bench_query.py --sizes 100000 1000000 --results
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import corpus
import measure

TITLE = "Query latency: point queries (bench_query.py)"
BACKENDS = {"sqlite": "SQLite", "pg": "PostgreSQL"}


def latencies(url: str, texts: list[tuple[str, str]], warmup: int) -> tuple[list[float], int]:
    """Milliseconds of each timed query, and how many found their source document."""
    from simindex import Index

    with Index.open(url) as index:
        for _, text in texts[:warmup]:
            index.query(text)
        times, found = [], 0
        for source, text in texts[warmup:]:
            started = time.perf_counter()
            matches = index.query(text)
            times.append((time.perf_counter() - started) * 1000)
            found += any(m.external_id == source for m in matches)
    return times, found


def index_bytes(url: str) -> int:
    """What the index occupies on disk: the SQLite file (and its WAL), or PostgreSQL's
    tables with their indexes and TOAST."""
    import sqlalchemy as sa

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        if engine.dialect.name == "sqlite":
            path = Path(engine.url.database)
            return sum(f.stat().st_size for f in (path, Path(f"{path}-wal")) if f.exists())
        with engine.connect() as connection:
            return connection.exec_driver_sql(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
            ).scalar_one()
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000], help="documents")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--pg-url", default=measure.DEFAULT_PG, help="PostgreSQL (CREATE DATABASE)")
    parser.add_argument("--sqlite-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--results", action="store_true", help="write the table to RESULTS.md")
    args = parser.parse_args()
    measure.warm_up()
    rows = []
    for size in args.sizes:
        path = corpus.corpus(size)
        texts = corpus.queries(path, args.queries + args.warmup)
        for backend in args.backends:
            with measure.database(backend, "bench_query", args.pg_url, args.sqlite_dir) as url:
                measure.simindex("ingest", str(path), "--db", url)
                times, found = latencies(url, texts, args.warmup)
                size_on_disk = index_bytes(url)
            rows.append(
                [
                    f"{size:,}",
                    BACKENDS[backend],
                    f"{statistics.median(times):.2f}",
                    f"{measure.percentile(times, 99):.2f}",
                    f"{found / len(times):.3f}",
                    f"{size_on_disk / size:,.0f}",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    header = ["documents", "backend", "p50 ms", "p99 ms", "source found", "index bytes / doc"]
    body = f"{args.queries} timed queries after {args.warmup} untimed.\n\n"
    body += measure.table(header, rows)
    print("\n" + body)
    if args.results:
        measure.write_section(TITLE, body, args.pg_url)


if __name__ == "__main__":
    main()
