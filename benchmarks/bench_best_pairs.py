"""Benchmark: the best (and the weakest) stored pairs up to a limit, as `simindex pairs` prints
them and the report lists them, against taking the first ones of every stored pair.

On an index whose pairs were found (say bench_scale's 400k one, kept with --keep, or one made
by `simindex ingest` and `simindex pairs`), each way --repeat times in this process.

Run from the repository root:
    .venv/bin/python benchmarks/bench_best_pairs.py --db URL [--limit 10] [--repeat 3]
        [--write-results]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import finish  # noqa: E402 (the sibling script)

from simindex import Index  # noqa: E402


def timed(call) -> tuple[float, list]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    rows = []
    with Index.open(args.db) as index:
        stored = index.stats()["pairs"]
        for _ in range(args.repeat):
            early, first = timed(lambda: list(itertools.islice(index.pairs(), args.limit)))
            cut, best = timed(lambda: list(index.pairs(limit=args.limit)))
            weakest, _ = timed(lambda: index.weakest_pairs(args.limit))
            rows.append((early, cut, weakest, first == best))
    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: the {args.limit} best pairs of {stored:,}",
        "",
        f"- Command: `.venv/bin/python benchmarks/bench_best_pairs.py --db URL --limit "
        f"{args.limit} --repeat {args.repeat}`",
        "",
        "| run | first of `pairs()` | `pairs(limit=)` | `weakest_pairs()` | same pairs |",
        "| ---: | ---: | ---: | ---: | --- |",
        *(
            f"| {i} | {e:.3f} s | {c:.3f} s | {w:.3f} s | {same} |"
            for i, (e, c, w, same) in enumerate(rows, 1)
        ),
        "",
    ]
    finish("\n".join(lines), args.write_results)


if __name__ == "__main__":
    main()
