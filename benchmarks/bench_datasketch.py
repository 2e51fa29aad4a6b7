"""Benchmark: simindex.datasketch.MinHashLSH (SQLite, PostgreSQL) against datasketch's
MinHashLSH in memory and on Redis: insert rate, query p50/p99 and index size.

Signatures are random affine32 hash values (num_perm 128), one in ten a near-copy of an
earlier one (a tenth of its values redrawn), inserted through an insertion session; the
queries are signatures of indexed keys. Redis: database 7 of 127.0.0.1:6379 (only that
database is flushed); PostgreSQL: a fresh database on the server of --postgres. Prints a
Markdown table; --results writes it to RESULTS.md.

    python benchmarks/bench_datasketch.py --sizes 100000 1000000 --results
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import measure as bench
import numpy as np
import sqlalchemy as sa
from datasketch import LeanMinHash
from datasketch import MinHashLSH as DatasketchLSH

from simindex.datasketch import MinHashLSH

NUM_PERM = 128
THRESHOLD = 0.8
QUERIES = 1000
REDIS_DB = 7
TITLE = "datasketch: simindex.datasketch.MinHashLSH against datasketch (bench_datasketch.py)"
NAMES = {
    "memory": "datasketch, memory (pickled size)",
    "redis": "datasketch, Redis",
    "sqlite": "simindex, SQLite",
    "postgresql": "simindex, PostgreSQL",
}


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


def one(backend: str, sketches: list[LeanMinHash], postgres: str | None) -> dict[str, float]:
    """Build and query one index of ``backend`` on ``sketches``, in a fresh store."""
    if backend == "memory":
        lsh = DatasketchLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
        return measure(lsh, sketches, lambda: len(pickle.dumps(lsh)))
    if backend == "redis":
        with redis_store() as (config, used):
            before = used()
            lsh = DatasketchLSH(threshold=THRESHOLD, num_perm=NUM_PERM, storage_config=config)
            return measure(lsh, sketches, lambda: used() - before)
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "lsh.db"
            with MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, url=str(path)) as lsh:
                return measure(lsh, sketches, lambda: _files(path))
    with postgres_url(postgres) as url:
        with MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, url=url) as lsh:
            return measure(lsh, sketches, lambda: postgres_size(url))


def run(n: int, postgres: str | None, backends: list[str], rounds: int) -> dict[str, list[dict]]:
    """{backend: one result per round}; the backends run in reversed order every other
    round, so a drift in the host's speed does not always favour the same one."""
    values = signatures(n)
    sketches = [LeanMinHash(seed=1, hashvalues=row, scheme="affine32") for row in values]
    chosen = [b for b in backends if b != "postgresql" or postgres]
    results: dict[str, list[dict]] = {backend: [] for backend in chosen}
    for round_ in range(rounds):
        for backend in chosen if round_ % 2 == 0 else chosen[::-1]:
            results[backend].append(one(backend, sketches, postgres))
            m = results[backend][-1]
            print(f"  {n:,} {backend} round {round_ + 1}: {m['rate']:,.0f}/s, "
                  f"p50 {m['p50']:.2f} ms, p99 {m['p99']:.2f} ms", flush=True)  # fmt: skip
    return results


def spread(values: list[float], fmt: str) -> str:
    """The median of ``values``, with their range when there are several."""
    text = format(statistics.median(values), fmt)
    if len(values) > 1:
        text += f" ({format(min(values), fmt)}-{format(max(values), fmt)})"
    return text


def _files(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument(
        "--postgres", default=os.environ.get("SIMINDEX_TEST_POSTGRES_URL", bench.DEFAULT_PG)
    )
    parser.add_argument("--backends", nargs="+", default=list(NAMES), choices=list(NAMES))
    parser.add_argument("--rounds", type=int, default=2, help="runs of every backend")
    parser.add_argument("--results", action="store_true", help="write the table to RESULTS.md")
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        for backend, done in run(n, args.postgres, args.backends, args.rounds).items():
            rows.append([f"{n:,}", NAMES[backend],
                         spread([m["rate"] for m in done], ",.0f"),
                         spread([m["p50"] for m in done], ".2f"),
                         spread([m["p99"] for m in done], ".2f"),
                         f"{statistics.median(m['size'] for m in done) / 2**20:,.1f}"])  # fmt: skip
    header = ["signatures", "index", "inserts/s", "query p50 ms", "query p99 ms", "size MB"]
    body = (
        f"Each cell: the median of {args.rounds} runs (range), the backends in alternating "
        "order; one process, no start-up.\n\n" + bench.table(header, rows)
    )
    print("\n" + body)
    if args.results:
        bench.write_section(TITLE, body, args.postgres)


if __name__ == "__main__":
    main()
