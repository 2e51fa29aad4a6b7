"""Benchmark: query-then-insert of a few documents at a time, two commits in paired runs.

An ETL job that checks each few new records against the index before it adds them calls
``Index.add(batch, find_duplicates=0.8)`` with a batch of a few documents. For each pair, for
commit A and then B (B first in even pairs), a fresh process with that commit's code (its
snapshot, bench_pipeline.snapshot, kernels compiled by a warm-up first) creates a SQLite index
in a temporary directory, adds the first --seed texts of bench_scale's 400k query file
(edited copies of the corpus's documents) in one call, then the others --batch at a time with
``find_duplicates=0.8``, three times over under new ids, and reports the p50 and p99 of those
calls' wall times.

Run from the repository root:
    .venv/bin/python benchmarks/bench_small_adds.py A_COMMIT B_COMMIT [--pairs 4] [--batch 2]
        [--seed 100] [--write-results]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import corpus_name, finish, host, queries_path  # noqa: E402
from bench_scale import SEED, commit_envs, differences, taking_turns  # noqa: E402

QUERIES = queries_path(corpus_name("400000"), SEED)


def measure(batch: int, seed: int) -> dict:
    """p50 / p99 ms of the small adds, with the code this process imports."""
    import numpy as np

    from simindex import Index

    texts = [q["text"] for q in json.loads(QUERIES.read_text(encoding="utf-8"))]
    seconds = []
    with tempfile.TemporaryDirectory() as folder, Index.create(f"{folder}/i.db") as index:
        index.add([(f"seed-{i}", text) for i, text in enumerate(texts[:seed])])
        for repeat in range(3):
            rest = [(f"{repeat}-{i}", text) for i, text in enumerate(texts[seed:])]
            for start in range(0, len(rest), batch):
                started = time.perf_counter()
                index.add(rest[start : start + batch], find_duplicates=0.8)
                seconds.append(time.perf_counter() - started)
    ms = np.array(seconds) * 1000
    return {"adds": ms.size, "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99))}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", nargs="?")
    parser.add_argument("b", nargs="?")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.batch, args.seed)))
        return
    envs = commit_envs((args.a, args.b))
    commits = list(envs)
    runs: dict[str, list[dict]] = {commit: [] for commit in commits}
    child = [sys.executable, "-P", __file__, "--child", "--batch", str(args.batch)]
    for pair, commit in taking_turns(commits, args.pairs):
        done = subprocess.run([*child, "--seed", str(args.seed)], env=envs[commit],
                              check=True, capture_output=True, text=True)  # fmt: skip
        runs[commit].append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"pair {pair}: {commit} {runs[commit][-1]}")
    a, b = (runs[c] for c in commits)
    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: query-then-insert of {args.batch} "
        f"documents at a time, {commits[0]} (A) against {commits[1]} (B), paired runs "
        "(bench_small_adds.py)",
        "",
        f"Each run: {a[0]['adds']} calls of `Index.add(batch, find_duplicates=0.8)` into a "
        f"SQLite index of {args.seed} documents and growing.",
        "",
        "| pair | A p50 ms | A p99 ms | B p50 ms | B p99 ms |",
        "| ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {i} | {ra['p50_ms']:.2f} | {ra['p99_ms']:.2f} | {rb['p50_ms']:.2f} | "
            f"{rb['p99_ms']:.2f} |"
            for i, (ra, rb) in enumerate(zip(a, b, strict=True), start=1)
        ),
        "",
        *differences(a, b, ("p50_ms", "p99_ms"), "ms"),
        "",
        f"Machine: {host()}. Command: `.venv/bin/python benchmarks/bench_small_adds.py "
        f"{commits[0]} {commits[1]} --pairs {args.pairs} --batch {args.batch} --seed "
        f"{args.seed}`.",
        "",
    ]
    finish("\n".join(lines), args.write_results)


if __name__ == "__main__":
    main()
