"""Benchmark: why a point query's p99 on PostgreSQL is higher right after a load.

bench_scale.py times 200 point queries right after `simindex ingest` and again after a
CHECKPOINT; at 4M documents the p99 right after the load moves between runs (4.07, 6.78,
11.28 ms) while the p50 and the figures after a CHECKPOINT move much less. This script loads
bench_scale's generated corpus (--size documents) into a fresh PostgreSQL database with
`simindex ingest`, then times the same queries as bench_pipeline's query step (after its
warm-up), and beside each one records what the host and the server were doing while it ran:

- the kernel's dirty and writeback page-cache bytes (/proc/meminfo), before the query;
- the bytes the disks read and wrote during it (/proc/diskstats, whole disks);
- the documents sharing a bucket with the query (its candidates), the KiB of text its
  statement read with them (none past QUERY_TEXT_CANDIDATES: Store.documents_in_buckets), and the
  ms of that statement run once more after it;
- the bytes PostgreSQL's checkpointer wrote during it (/proc/PID/io, so run as the server's
  user or root), and what it waited on before it (pg_stat_activity: "CheckpointerMain" when
  no checkpoint runs).

These are read outside the timed call, on a second connection and from /proc. Before and
after the queries it also reports how much of each of the database's large relations the OS
page cache holds (util-linux's fincore).

It prints the queries at or above the 95th percentile with these figures and their place in
the run (1: the first timed query), and the medians of the figures for the slow and the other
queries. Then it runs CHECKPOINT, waits for the kernel's dirty pages to be written (sync),
and does the same again.

Disk: ~4.1 KB per document (bench_scale); the database is dropped at the end unless --keep.

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    .venv/bin/python benchmarks/bench_after_load.py [--size 4000000] [--write-results]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import (  # noqa: E402
    DEFAULT_PG,
    WARMUP_QUERIES,
    cached_relations,
    corpus_name,
    corpus_path,
    disk_counters,
    finish,
    host,
    pg_admin,
    queries_path,
)
from bench_scale import SEED, SIMINDEX, Database, run_step, use_code  # noqa: E402

from simindex.index import QUERY_TEXT_CANDIDATES  # noqa: E402


def meminfo_kib(*fields: str) -> int:
    """Sum of /proc/meminfo's ``fields`` (kB)."""
    total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            if name in fields:
                total += int(value.split()[0])
    return total


def disk_sectors() -> tuple[int, int]:
    """Sectors read and written so far by the whole disks."""
    counters = disk_counters()
    return counters["read_sectors"], counters["written_sectors"]


def written_chars(pid: int) -> int:
    """Bytes the process has passed to write() so far (/proc/PID/io)."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def timed_queries(url: str, texts: list[str]) -> list[dict]:
    """Each query's latency and what ran beside it (see the module docstring)."""
    from simindex import Index

    rows = []
    with psycopg.connect(url, autocommit=True) as watcher, Index.open(url) as index:
        pid, _ = watcher.execute(CHECKPOINTER).fetchone()
        for text in texts[:WARMUP_QUERIES]:
            index.query(text)
        for text in texts[WARMUP_QUERIES:]:
            event = watcher.execute(CHECKPOINTER).fetchone()[1]
            dirty = meminfo_kib("Dirty", "Writeback")
            disk, wrote = disk_sectors(), written_chars(pid)
            started = time.perf_counter()
            index.query(text)
            ms = (time.perf_counter() - started) * 1000
            disk_after, wrote_after = disk_sectors(), written_chars(pid)
            candidates, text_kib, again_ms = bucket_members(index, text)
            rows.append({
                "n": len(rows) + 1,
                "ms": ms,
                "dirty_mib": dirty / 1024,
                "disk_read_kib": (disk_after[0] - disk[0]) / 2,
                "disk_written_kib": (disk_after[1] - disk[1]) / 2,
                "checkpointer_kib": (wrote_after - wrote) / 1024,
                "candidates": candidates,
                "text_kib": text_kib,
                "again_ms": again_ms,
                "checkpointer": event or "running",
            })  # fmt: skip
    return rows


def bucket_members(index, text: str) -> tuple[int, float, float]:
    """The documents sharing a bucket with a query of ``text`` (its candidates), the KiB of
    text the statement that reads them read, and that statement's ms, run again (its pages
    cached now): the work of one query, measured after its timed call, through the Index's
    own look-up."""
    from simindex.defaults import DEFAULT_MAX_BUCKET_SIZE

    signatures = index._text_profile(text).signatures
    started = time.perf_counter()
    _, found = index._bucket_members(signatures, DEFAULT_MAX_BUCKET_SIZE, QUERY_TEXT_CANDIDATES)
    again_ms = (time.perf_counter() - started) * 1000
    text_bytes = sum(len((row[1] or "").encode()) for row in found.values())
    return len(found), text_bytes / 1024, again_ms


def cache_lines(label: str, relations: list[tuple[str, float, float]]) -> list[str]:
    cells = ", ".join(f"{n} {r:,.0f} of {s:,.0f} MiB" for n, r, s in relations)
    return [f"{label}, in the OS page cache: {cells}.", ""]


# The checkpointer's process id and what it waits on ("CheckpointerMain": no checkpoint).
CHECKPOINTER = "SELECT pid, wait_event FROM pg_stat_activity WHERE backend_type = 'checkpointer'"


def summary(label: str, rows: list[dict]) -> list[str]:
    """Markdown lines: the p50 / p99, the slow queries, and medians of slow against the rest."""
    ms = np.array([r["ms"] for r in rows])
    cut = np.percentile(ms, 95)
    slow = [r for r in rows if r["ms"] >= cut]
    rest = [r for r in rows if r["ms"] < cut]
    figures = [
        "ms", "candidates", "text_kib", "again_ms",
        "dirty_mib", "disk_read_kib", "disk_written_kib", "checkpointer_kib",
    ]  # fmt: skip
    lines = [
        f"### {label}: p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms "
        f"({len(rows)} queries)",
        "",
        "| | query's place in the run | ms | candidates | their text KiB | their statement "
        "again, ms | dirty + writeback MiB | disk read KiB | disk written KiB | "
        "checkpointer wrote KiB | checkpointer's wait before |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(slow, key=lambda r: -r["ms"]):
        cells = " | ".join(f"{r[f]:.1f}" for f in figures)
        lines.append(f"| slow | {r['n']} | {cells} | {r['checkpointer']} |")
    for name, group in (("median of the slow", slow), ("median of the rest", rest)):
        place = np.median([r["n"] for r in group])
        cells = " | ".join(f"{np.median([r[f] for r in group]):.1f}" for f in figures)
        busy = sum(r["checkpointer"] != "CheckpointerMain" for r in group)
        lines.append(
            f"| {name} | {place:.0f} | {cells} | in a checkpoint: {busy} of {len(group)} |"
        )
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4_000_000)
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--live", action="store_true", help="the working tree, not git HEAD")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    name = corpus_name(str(args.size))
    corpus, queries = corpus_path(name, SEED), queries_path(name, SEED)
    if not corpus.exists():
        sys.exit(f"{corpus} is missing: generate it with bench_scale.py (its `corpus` step)")
    texts = [q["text"] for q in json.loads(queries.read_text(encoding="utf-8"))]
    started = datetime.now(UTC)
    code = use_code(args.live)
    db = Database("pg", f"after_load_{args.size}", args.pg_url, Path("."))
    os.sync()
    with pg_admin(args.pg_url) as conn:
        conn.execute("CHECKPOINT")
    load = run_step(f"ingest ({args.size:,})", [*SIMINDEX, "ingest", str(corpus), "--db", db.url])
    cached_after_load = cached_relations(db.url)
    after_load = timed_queries(db.url, texts)
    cached_after_queries = cached_relations(db.url)
    db.execute("CHECKPOINT")
    os.sync()
    after_checkpoint = timed_queries(db.url, texts)
    if not args.keep:
        db.drop()
    lines = [
        f"## {started:%Y-%m-%d %H:%M} UTC: point queries on PostgreSQL right after a load of "
        f"{args.size:,} documents and after a CHECKPOINT, with what ran beside each "
        "(bench_after_load.py)",
        "",
        f"The load: `simindex ingest` {load['seconds']:.1f} s. Slow: the queries at or above "
        "the 95th percentile. Dirty + writeback: the kernel's, before the query; disk: whole "
        "disks, during it; checkpointer: what it wrote during the query and what it waited "
        "on before it. Candidates: the documents sharing a bucket with the query; their text: "
        f"what its statement read of it (none past {QUERY_TEXT_CANDIDATES} candidates); that "
        "statement again: its ms run once more right after the query.",
        "",
        *cache_lines("Right after the load", cached_after_load),
        *summary("Right after the load", after_load),
        *cache_lines("After these queries", cached_after_queries),
        *summary("After a CHECKPOINT and a sync", after_checkpoint),
        f"Code: {code['code']}. Machine: {host()}. Command: "
        f"`.venv/bin/python benchmarks/bench_after_load.py --size {args.size}`.",
    ]
    finish("\n".join(lines) + "\n", args.write_results)


if __name__ == "__main__":
    main()
