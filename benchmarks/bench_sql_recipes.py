"""Benchmark: docs/sql.md's "similar to X" recipes (neighbors, candidates) on an index.

Runs each recipe 5 times per document id (its 'n001' replaced by the id) and prints the
median and every run. The figures in docs/sql.md come from the 400,000-document corpus of
bench_pipeline.py, indexed with the CLI:

    .venv/bin/python benchmarks/bench_pipeline.py --sizes 400000 --only simindex-pg \\
        --keep-databases        # or any run that generates benchmarks/data/gen400000_*
    .venv/bin/simindex ingest benchmarks/data/gen400000_seed20240601_v2.jsonl.gz --db URL
    .venv/bin/simindex pairs --db URL
    .venv/bin/python benchmarks/bench_sql_recipes.py --db URL 0 398840 123456
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from simindex import Index
from simindex.errors import LowRecallWarning
from simindex.store import database_url

SQL_GUIDE = Path(__file__).resolve().parents[1] / "docs" / "sql.md"
RUNS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True, help="the index (SQLite path or postgresql:// URL)")
    parser.add_argument("ids", nargs="+", help="external ids of indexed documents")
    args = parser.parse_args()
    url = database_url(args.db)
    recipes = re.findall(r"```sql\n(.*?)```", SQL_GUIDE.read_text(encoding="utf-8"), re.S)
    named = {"neighbors": [r for r in recipes if "FROM neighbors" in r]}
    for recipe in recipes:
        if "candidates AS" in recipe:
            postgres_only = recipe.startswith("-- PostgreSQL only")
            if postgres_only and not url.startswith("postgresql"):
                continue
            named["candidates (PostgreSQL)" if postgres_only else "candidates"] = [recipe]
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        for name, (recipe,) in named.items():
            statement = sa.text(recipe.replace("'n001'", ":x"))
            for external_id in args.ids:
                _time(
                    name, external_id, lambda x, s=statement: connection.execute(s, {"x": x}).all()
                )
    engine.dispose()
    warnings.simplefilter("ignore", LowRecallWarning)  # threshold 0: every candidate, on purpose
    with Index.open(args.db) as index:  # the same question through the library, for scale
        for external_id in args.ids:
            _time("Index.query_id", external_id, lambda x: index.query_id(x, threshold=0))


def _time(name: str, external_id: str, ask: Callable[[str], list]) -> None:
    """Print the median and every one of RUNS answers to ``ask(external_id)``."""
    seconds = []
    for _ in range(RUNS):
        started = time.perf_counter()
        rows = ask(external_id)
        seconds.append(time.perf_counter() - started)
    runs = " ".join(f"{s * 1000:.1f}" for s in seconds)
    print(
        f"{name:24} id={external_id:8} rows={len(rows):3} "
        f"median {statistics.median(seconds) * 1000:8.1f} ms  (runs: {runs})"
    )


if __name__ == "__main__":
    main()
