"""Benchmark: where a point query's time goes, part by part.

`Index.query(text)` signs the text in the process, reads the documents that share a bucket with
it in one statement (past QUERY_TEXT_CANDIDATES of them, their signatures only, and in a second
statement the documents of those whose estimate passes), and compares them with it. For each
of a corpus's query texts (the edited copies bench_pipeline.py and bench_scale.py time, after
the same warm-up) this script times:

- whole: `Index.query(text)`, as bench_pipeline.py's query step times it;
- statement in whole: the driver's execute of its bucket lookup (its first statement), inside
  that call (the first time the statement reads its pages);
- sign: normalizing, shingling and signing the text;
- rest of whole: whole less sign and statement (band keys, SQLAlchemy, comparing the
  candidates with the text);
- and then, the same lookup again (its pages read once already): lookup, as `Index.query`
  makes it (band keys, SQLAlchemy, the rows fetched); driver, the same statement with the
  same parameters on the driver's own cursor (psycopg or sqlite3), the rows fetched; server
  (PostgreSQL), planning and execution time as EXPLAIN ANALYZE reports them, with the shared
  buffers it hit and those it had to read (a page not among PostgreSQL's shared buffers);
- round trip: `SELECT 1` on the driver's cursor;
- pages read per query (PostgreSQL): the blocks of the index's tables and indexes that were
  not among the shared buffers (read from the OS's page cache or the disk), over the whole
  run, warm-up included, per query (pg_statio_user_tables; a server process reports its
  counts when it ends, so they are read after the index's connections are closed). The
  repeats above find their pages in the buffers: these are the whole queries' reads.

Each figure is the median and the 99th percentile over the queries, in milliseconds.

Run from the repository root, on an index made from a generated corpus (bench_scale.py makes
the corpora and their query files):
    .venv/bin/python benchmarks/bench_query_parts.py --db URL \
        --queries benchmarks/data/gen4000000_seed20240601_v2_queries.json [--write-results]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import WARMUP_QUERIES, finish  # noqa: E402 (the sibling scripts)

from simindex import Index  # noqa: E402
from simindex.defaults import DEFAULT_MAX_BUCKET_SIZE  # noqa: E402
from simindex.index import QUERY_TEXT_CANDIDATES  # noqa: E402
from simindex.store import display_url  # noqa: E402


def measure(index: Index, texts: list[str]) -> dict[str, list[float]]:
    """Each part's seconds (and the candidates and buffers) of each query text."""
    statement: dict = {}

    @event.listens_for(index._store.engine, "before_cursor_execute")
    def capture(_conn, _cursor, sql, parameters, _context, _executemany):
        if "sql" not in statement:  # the lookup: a query's first statement
            statement.update(sql=sql, parameters=parameters, started=time.perf_counter())

    @event.listens_for(index._store.engine, "after_cursor_execute")
    def executed(*_):
        statement.setdefault("seconds", time.perf_counter() - statement["started"])

    postgres = index._store.dialect == "postgresql"
    parts: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        parts.setdefault(name, []).append(value)

    raw = index._store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        for text in texts:
            statement.clear()
            started = time.perf_counter()
            index.query(text)
            record("whole", time.perf_counter() - started)
            record("statement in whole", statement["seconds"])

            started = time.perf_counter()
            profile = index._text_profile(text)
            record("sign", time.perf_counter() - started)

            started = time.perf_counter()
            _, found = index._bucket_members(
                profile.signatures, DEFAULT_MAX_BUCKET_SIZE, QUERY_TEXT_CANDIDATES
            )
            record("lookup", time.perf_counter() - started)
            record("candidates", len(found))
            sql, parameters = statement["sql"], statement["parameters"]

            started = time.perf_counter()
            cursor.execute(sql, parameters)
            cursor.fetchall()
            record("driver", time.perf_counter() - started)

            started = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchall()
            record("round trip", time.perf_counter() - started)

            if postgres:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, parameters)
                plan = cursor.fetchone()[0][0]
                record("server", (plan["Planning Time"] + plan["Execution Time"]) / 1000)
                record("buffers hit", plan["Plan"]["Shared Hit Blocks"])
                record("buffers read", plan["Plan"]["Shared Read Blocks"])
        if not postgres:
            raw.rollback()
    finally:
        raw.close()
    columns = (parts["whole"], parts["sign"], parts["statement in whole"])
    parts["rest of whole"] = [whole - sign - run for whole, sign, run in zip(*columns, strict=True)]
    return parts


def blocks_read(index: Index) -> int | None:
    """The blocks the server has read for the index's tables and their indexes since its
    statistics were reset (None on SQLite)."""
    if index._store.dialect != "postgresql":
        return None
    columns = "heap_blks_read + coalesce(idx_blks_read, 0) + coalesce(toast_blks_read, 0)"
    statement = f"SELECT sum({columns}) FROM pg_statio_user_tables"
    with index._store.engine.connect() as connection:
        return int(connection.exec_driver_sql(statement).scalar_one())


def report(parts: dict[str, list[float]], db: str, queries: str, documents: int) -> str:
    lines = [
        f"## {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC: a point query's parts",
        "",
        f"- Machine: nproc {platform.os.cpu_count()}, {platform.machine()}, "
        f"Python {platform.python_version()}",
        f"- Command: `.venv/bin/python benchmarks/bench_query_parts.py --db {display_url(db)} "
        f"--queries {queries}`",
        f"- Index: {documents:,} documents; {len(parts['whole']):,} queries after "
        f"{WARMUP_QUERIES} untimed",
        "",
        "| part | p50 | p99 | mean |",
        "| --- | ---: | ---: | ---: |",
    ]
    order = ["whole", "statement in whole", "sign", "rest of whole", "lookup", "driver"]
    order += ["server", "round trip"]
    for name in order + ["candidates", "buffers hit", "buffers read", "pages read per query"]:
        if name not in parts:
            continue
        values = np.array(parts[name]) * (1000 if name in order else 1)
        unit = " ms" if name in order else ""
        cells = [f"{np.percentile(values, q):.2f}{unit}" for q in (50, 99)]
        lines.append(f"| {name} | {' | '.join(cells)} | {values.mean():.2f}{unit} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True, help="an index's database URL or SQLite path")
    parser.add_argument("--queries", required=True, help="a corpus's _queries.json")
    parser.add_argument("--write-results", action="store_true", help="append to RESULTS.md")
    args = parser.parse_args()
    texts = [q["text"] for q in json.loads(Path(args.queries).read_text(encoding="utf-8"))]
    with Index.open(args.db) as index:
        before = blocks_read(index)
        for text in texts[:WARMUP_QUERIES]:
            index.query(text)
        parts = measure(index, texts[WARMUP_QUERIES:])
        with index._transaction() as connection:
            documents = index._store.document_count(connection)
        index.close()  # its server processes end and report what they read
        if before is not None:
            time.sleep(1)
            parts["pages read per query"] = [(blocks_read(index) - before) / len(texts)]
    finish(report(parts, args.db, args.queries, documents), args.write_results)


if __name__ == "__main__":
    main()
