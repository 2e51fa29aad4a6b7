"""Benchmark: where `simindex pairs --full` spends its time on PostgreSQL, on one index.

Loads bench_scale's generated corpus (--size documents) into a fresh PostgreSQL database
(`simindex ingest`, then a CHECKPOINT), runs `simindex pairs --full --top 0` twice on it (the
first run after the load, then the next: one index on the host, so no other index competes for
the OS's page cache), then times the parts of the step by themselves:

- the candidate buckets as ``Store.iter_buckets`` reads them (the GROUP BY and the parsing);
- the same table read other ways, in SQL alone, each ``COPY ... TO STDOUT`` drained: its
  index-only scan, ``count(*)`` per (band, key) without the arrays, and two window-function
  shapes that find the same buckets without grouping;
- signature look-ups as verification makes them (``Store.signatures_of``) of --blocks blocks of
  --block-ids random document ids: microseconds per id, and PostgreSQL's plan of one block
  (heap pages visited, buffers found in shared buffers or read from the OS);
- what verification does instead when the candidates name many documents: one pass over the
  signatures of their id range into a SignatureFile (here candidates of every other id, so
  every signature), and reads from it by id. A full rebuild makes the same pass, in a thread
  while the buckets are grouped (Index._signature_pass).

The database is dropped at the end unless --keep. Disk: ~4.1 KB per document (bench_scale).

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    .venv/bin/python benchmarks/bench_pairs_parts.py [--size 4000000] [--write-results]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import DEFAULT_PG, corpus_name, corpus_path, finish  # noqa: E402
from bench_scale import SEED, SIMINDEX, Database, in_child, run_step  # noqa: E402

from simindex import Index  # noqa: E402
from simindex.pipeline.candidates import Candidates  # noqa: E402
from simindex.signature_file import SignatureFile  # noqa: E402

# Session settings as Store.iter_buckets sets them (a streaming GroupAggregate on the key).
PLAN = "SET enable_hashagg = off; SET enable_sort = off; SET jit = off"
WINDOWED = "FROM band_keys WHERE banding_id = 1"
SQL_SHAPES = {
    "index-only scan alone: `count(*)`": f"SELECT count(*) {WINDOWED}",
    "`count(*)` per (band, key), no arrays": (
        f"SELECT count(*) {WINDOWED} GROUP BY band, key HAVING count(*) > 1"
    ),
    "`count(*) OVER (PARTITION BY band, key)`, members of buckets": (
        "SELECT band, key, document_id FROM (SELECT band, key, document_id, count(*) OVER "
        f"(PARTITION BY band, key) AS n {WINDOWED}) t WHERE n > 1"
    ),
    "`lag`/`lead` over the key order, members of buckets": (
        "SELECT band, key, document_id FROM (SELECT band, key, document_id, lag(key) OVER w "
        "AS pk, lag(band) OVER w AS pb, lead(key) OVER w AS nk, lead(band) OVER w AS nb "
        f"{WINDOWED} WINDOW w AS (ORDER BY band, key, document_id)) t "
        "WHERE (pk = key AND pb = band) OR (nk = key AND nb = band)"
    ),
}


def drained(url: str, query: str) -> tuple[float, int]:
    """(seconds, bytes) of ``COPY (query) TO STDOUT (FORMAT BINARY)`` read to the end."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PLAN)
        started, size = time.perf_counter(), 0
        with conn.cursor().copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)") as copy:
            for data in copy:
                size += len(data)
        return time.perf_counter() - started, size


def buckets(url: str) -> tuple[float, int]:
    """(seconds, buckets) of Store.iter_buckets over the whole active banding."""
    with Index.open(url) as index, index._transaction() as connection:
        banding = index._active_banding(connection)["id"]
        started, count = time.perf_counter(), 0
        for _, offsets in index._store.iter_buckets(connection, banding, None):
            count += offsets.size - 1
        return time.perf_counter() - started, count


def look_ups(url: str, blocks: int, block_ids: int, documents: int) -> tuple[list[float], dict]:
    """Microseconds per id of Store.signatures_of for random blocks of ids, and the plan's
    counts for one more such block."""
    rng = np.random.default_rng(SEED)

    def draw() -> np.ndarray:
        return np.sort(rng.choice(documents, block_ids, replace=False) + 1)

    per_id = []
    with Index.open(url) as index, index._transaction() as connection:
        for _ in range(blocks):
            ids = draw()
            started = time.perf_counter()
            index._store.signatures_of(connection, ids, index.spec.num_perm)
            per_id.append((time.perf_counter() - started) / ids.size * 1e6)
    listed = ",".join(map(str, draw().tolist()))
    explain = (
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT document_id, minhashes FROM signatures "
        f"WHERE document_id = ANY('{{{listed}}}'::bigint[])"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        plan = conn.execute(explain).fetchone()[0][0]
    return per_id, plan


def signature_pass(url: str, blocks: int, block_ids: int, documents: int) -> tuple[float, list]:
    """Seconds of the pass that `pairs` makes instead of look-ups when the candidates name
    many documents (Index._candidate_signatures, given candidate pairs of every other id: the
    4M corpus's candidates are half of them), and microseconds per id of reading random
    blocks of those ids back from its file."""
    rng = np.random.default_rng(SEED)
    wanted = np.arange(1, documents + 1, 2, dtype=np.int64)
    candidates = Candidates(0, 0, (wanted[:-1], wanted[1:]))  # pairs naming every one
    with Index.open(url) as index, index._transaction() as connection:
        started = time.perf_counter()
        with index._candidate_signatures(connection, candidates) as signatures:
            seconds, per_id = time.perf_counter() - started, []
            if not isinstance(getattr(signatures, "__self__", None), SignatureFile):
                raise SystemExit("the candidates of every other id are looked up: no pass")
            for _ in range(blocks):
                ids = np.sort(rng.choice(wanted, block_ids, replace=False))
                started = time.perf_counter()
                signatures(ids)
                per_id.append((time.perf_counter() - started) / ids.size * 1e6)
    return seconds, per_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4_000_000)
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--block-ids", type=int, default=3_000)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    in_child("corpus", str(args.size))
    corpus = str(corpus_path(corpus_name(str(args.size)), SEED))
    database = Database("pg", "bench_pairs_parts", args.pg_url, Path("/tmp"))
    try:
        database.execute("CHECKPOINT")
        ingest = run_step("ingest", [*SIMINDEX, "ingest", corpus, "--db", database.url])
        database.execute("CHECKPOINT")
        pairs_command = [*SIMINDEX, "pairs", "--full", "--top", "0", "--db", database.url]
        pairs = [run_step(f"pairs {i}", pairs_command) for i in (1, 2)]
        bucket_seconds, bucket_count = buckets(database.url)
        shapes = {name: drained(database.url, query) for name, query in SQL_SHAPES.items()}
        per_id, plan = look_ups(database.url, args.blocks, args.block_ids, args.size)
        pass_seconds, file_per_id = signature_pass(
            database.url, args.blocks, args.block_ids, args.size
        )
    finally:
        if not args.keep:
            database.drop()

    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: where `pairs --full` goes, on one index",
        "",
        f"- Machine: nproc {os.cpu_count()}, {platform.machine()}, Python "
        f"{platform.python_version()}; PostgreSQL on the same machine",
        f"- Command: `.venv/bin/python benchmarks/bench_pairs_parts.py --size {args.size} "
        f"--blocks {args.blocks} --block-ids {args.block_ids}`",
        "",
        "| step | wall s | CPU s (simindex) | PostgreSQL CPU s | peak RSS MiB |",
        "| --- | ---: | ---: | ---: | ---: |",
        *(
            f"| {name} | {r['seconds']:.2f} | {r['cpu_seconds']:.1f} | "
            f"{r['postgres_cpu_seconds']:.1f} | {r['peak_rss_mib']:.0f} |"
            for name, r in [
                (f"`simindex ingest` of {args.size:,} documents", ingest),
                ("`pairs --full`, the first run after the load", pairs[0]),
                ("`pairs --full`, the next", pairs[1]),
            ]
        ),
        "",
        "| the buckets, read by itself | seconds | output |",
        "| --- | ---: | ---: |",
        f"| `Store.iter_buckets` (GROUP BY band, key with `array_agg`, parsed) | "
        f"{bucket_seconds:.1f} | {bucket_count:,} buckets |",
        *(f"| {name} | {s:.1f} | {size / 1e6:,.0f} MB |" for name, (s, size) in shapes.items()),
        "",
        f"Signature look-ups (`Store.signatures_of`, {args.blocks} blocks of {args.block_ids:,} "
        f"random ids): median {statistics.median(per_id):.1f} µs per id (from "
        f"{min(per_id):.1f} to {max(per_id):.1f}). One more block's plan: "
        f"{plan['Plan']['Node Type']}, {plan['Plan'].get('Exact Heap Blocks', 0):,} heap "
        f"pages, {plan['Plan']['Shared Hit Blocks']:,} buffers found in shared buffers and "
        f"{plan['Plan']['Shared Read Blocks']:,} read from the OS, "
        f"{plan['Execution Time']:.1f} ms in the server.",
        "",
        f"The pass over the signatures of candidates of every other id ({args.size // 2:,} "
        f"documents, their range every id) into a SignatureFile, by itself: "
        f"{pass_seconds:.1f} s; then {args.blocks} blocks of {args.block_ids:,} "
        f"random ids of them read back from the file: median "
        f"{statistics.median(file_per_id):.1f} µs per id.",
        "",
    ]
    finish("\n".join(lines), args.write_results)


if __name__ == "__main__":
    main()
