"""Benchmark: adding 1,000 documents to a 100,000-document index, against a full run.

On each backend: index the first 100,000 documents of a generated corpus (bench_pipeline's
generator, 101,000 documents, ~15% planted near-duplicates), find pairs at 0.8 and build
clusters (the full run, timed); then add the last 1,000 documents and run `find_pairs` again,
which is incremental and updates the clusters (timed); finally rebuild everything from scratch
(`find_pairs(full=True)` + `cluster`, timed) and check that both ways give the same pairs and
clusters.

Run from the repository root:
    .venv/bin/python benchmarks/bench_incremental.py [--base 100000 --new 1000] [--write-results]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import (  # noqa: E402 (the sibling script, for its corpus generator)
    DEFAULT_PG,
    RESULTS,
    corpus_path,
    drop_pg_database,
    fresh_pg_database,
    step_corpus,
)

from simindex import Index  # noqa: E402


def documents(path: Path, start: int, stop: int):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in islice(f, start, stop):
            doc = json.loads(line)
            yield doc["id"], doc["text"]


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


def run(url: str, path: Path, base: int, new: int) -> dict:
    with Index.create(url) as index:
        _, ingest_base = timed(index.add, documents(path, 0, base))
        _, pairs_full = timed(index.find_pairs)
        _, clusters_full = timed(index.cluster)
        _, ingest_new = timed(index.add, documents(path, base, base + new))
        report, pairs_incremental = timed(index.find_pairs)
        assert report.incremental
        incremental = (
            {(p.id_a, p.id_b) for p in index.pairs()},
            {(c.external_id, c.cluster) for c in index.clusters()},
        )
        _, pairs_rebuilt = timed(index.find_pairs, full=True)
        _, clusters_rebuilt = timed(index.cluster)
        rebuilt = (
            {(p.id_a, p.id_b) for p in index.pairs()},
            {(c.external_id, c.cluster) for c in index.clusters()},
        )
    return {
        "ingest base (s)": ingest_base,
        "pairs + clusters, full run on the base (s)": pairs_full + clusters_full,
        f"ingest {new:,} new (s)": ingest_new,
        "pairs + clusters, incremental (s)": pairs_incremental,
        "new candidates verified": report.candidates,
        "new pairs": report.pairs,
        "pairs + clusters, full rebuild after (s)": pairs_rebuilt + clusters_rebuilt,
        "incremental / full rebuild": pairs_incremental / (pairs_rebuilt + clusters_rebuilt),
        "same pairs and clusters as the rebuild": incremental == rebuilt,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=100_000)
    parser.add_argument("--new", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    name = f"gen{args.base + args.new}"
    step_corpus(name, args.seed)
    path = corpus_path(name, args.seed)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        results["SQLite"] = run(f"sqlite:///{scratch}/incremental.db", path, args.base, args.new)
    database = "bench_incremental"
    try:
        url = fresh_pg_database(args.pg_url, database)
        results["PostgreSQL"] = run(url, path, args.base, args.new)
    finally:
        drop_pg_database(args.pg_url, database)
    rows = list(results["SQLite"])
    table = ["| step | SQLite | PostgreSQL |", "| --- | ---: | ---: |"]
    for row in rows:
        cells = [results[b][row] for b in ("SQLite", "PostgreSQL")]
        table.append(f"| {row} | " + " | ".join(_cell(c) for c in cells) + " |")
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv])
    section = "\n".join(
        [
            f"\n## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: incremental pairs and clusters",
            "",
            f"- Machine: nproc {os.cpu_count()}; corpus {path.name}: the first {args.base:,} "
            f"documents, then {args.new:,} more",
            f"- Command: `{command}`",
            "",
            *table,
            "",
        ]
    )
    print(section)
    if args.write_results:
        with open(RESULTS, "a", encoding="utf-8") as f:
            f.write(section)


def _cell(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 1 else f"{value:.2f}"
    return f"{value:,}"


if __name__ == "__main__":
    main()
