"""Benchmark: simindex.datasketch.MinHashLSH (SQLite, PostgreSQL) against datasketch's
MinHashLSH in memory and on Redis: insert rate, query p50/p99 and index size.

Signatures are random affine32 hash values (num_perm 128), one in ten a near-copy of an
earlier one (a tenth of its values redrawn), inserted through an insertion session; the
queries are signatures of indexed keys. Redis: database 7 of 127.0.0.1:6379 (only that
database is flushed); PostgreSQL: a fresh database on the server of --postgres. Prints a
Markdown table.

    .venv/bin/python benchmarks/bench_datasketch.py --sizes 100000 1000000
"""

from __future__ import annotations

import argparse
import os
import pickle
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import sqlalchemy as sa
from datasketch import LeanMinHash
from datasketch import MinHashLSH as DatasketchLSH

from simindex.datasketch import MinHashLSH

NUM_PERM = 128
THRESHOLD = 0.8
QUERIES = 1000
REDIS_DB = 7


def signatures(n: int, seed: int = 0) -> np.ndarray:
    """(n, NUM_PERM) uint32: random rows, one in ten a near-copy of an earlier row."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2**32, size=(n, NUM_PERM), dtype=np.uint32)
    copies = np.arange(10, n, 10)
    originals = rng.integers(0, copies)
    values[copies] = values[originals]
    redrawn = rng.random((copies.size, NUM_PERM)) < 0.1
    values[copies] = np.where(redrawn, rng.integers(0, 2**32, redrawn.shape), values[copies])
    return values


@contextmanager
def redis_store() -> Iterator[tuple[dict, Callable[[], int]]]:
    import redis

    client = redis.Redis(db=REDIS_DB)
    client.flushdb()
    config = {"type": "redis", "basename": b"bench", "redis": {"db": REDIS_DB}}
    try:
        yield config, lambda: int(client.info("memory")["used_memory"])
    finally:
        client.flushdb()


@contextmanager
def postgres_url(admin: str) -> Iterator[str]:
    name = f"simindex_bench_{uuid.uuid4().hex[:8]}"
    url = sa.make_url(admin).set(drivername="postgresql+psycopg")
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        engine.dispose()


def postgres_size(url: str) -> int:
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        size = connection.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()
    engine.dispose()
    return int(size)


def measure(lsh, sketches: list[LeanMinHash], size: Callable[[], int]) -> dict[str, float]:
    """Insert every sketch in one session, then time QUERIES queries of indexed keys."""
    start = time.perf_counter()
    with lsh.insertion_session() as session:
        for i, sketch in enumerate(sketches):
            session.insert(i, sketch)
    inserted = time.perf_counter() - start
    picks = np.random.default_rng(1).integers(0, len(sketches), QUERIES)
    latencies = []
    for i in picks.tolist():
        begin = time.perf_counter()
        lsh.query(sketches[i])
        latencies.append(time.perf_counter() - begin)
    p50, p99 = np.percentile(np.array(latencies) * 1000, [50, 99])
    return {"rate": len(sketches) / inserted, "p50": p50, "p99": p99, "size": size()}


def run(n: int, postgres: str | None, backends: list[str]) -> list[tuple[str, dict]]:
    values = signatures(n)
    sketches = [LeanMinHash(seed=1, hashvalues=row, scheme="affine32") for row in values]
    rows = []
    if "memory" in backends:
        lsh = DatasketchLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
        rows.append(("datasketch, memory (pickled size)",
                     measure(lsh, sketches, lambda: len(pickle.dumps(lsh)))))  # fmt: skip
    if "redis" in backends:
        with redis_store() as (config, used):
            before = used()
            lsh = DatasketchLSH(threshold=THRESHOLD, num_perm=NUM_PERM, storage_config=config)
            rows.append(("datasketch, Redis", measure(lsh, sketches, lambda: used() - before)))
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "lsh.db"
            with MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, url=str(path)) as lsh:
                rows.append(("simindex, SQLite", measure(lsh, sketches, lambda: _files(path))))
    if "postgresql" in backends and postgres:
        with postgres_url(postgres) as url:
            with MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, url=url) as lsh:
                rows.append(("simindex, PostgreSQL", measure(lsh, sketches,
                                                              lambda: postgres_size(url))))  # fmt: skip
    return rows


def _files(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--postgres", default=os.environ.get("SIMINDEX_TEST_POSTGRES_URL"))
    parser.add_argument(
        "--backends", nargs="+", default=["memory", "redis", "sqlite", "postgresql"]
    )
    args = parser.parse_args()
    print("| signatures | index | inserts/s | query p50 (ms) | query p99 (ms) | size (MB) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for n in args.sizes:
        for name, m in run(n, args.postgres, args.backends):
            print(
                f"| {n:,} | {name} | {m['rate']:,.0f} | {m['p50']:.2f} | {m['p99']:.2f} "
                f"| {m['size'] / 2**20:,.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
