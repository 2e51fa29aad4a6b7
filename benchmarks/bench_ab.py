"""Benchmark: one CLI step of two commits, in runs paired one after the other on this host.

A host's speed drifts by more than many changes are worth (this one's by 10-15% within an
hour), so two codes are compared pair by pair: for each pair, A's run then B's, each on a
fresh database (PostgreSQL's made after a CHECKPOINT, SQLite's a new file). Each commit runs
from its own snapshot (bench_pipeline.snapshot, its numba kernels compiled by a warm-up
first) with ``python -P -m simindex``. The corpus is bench_scale's (generated and cached
under benchmarks/data/).

Steps: ``ingest`` (the corpus into a new index, text kept), ``pairs`` (``pairs --full`` on
an index that each commit ingested once before its runs; with ``--one-index``, on one index
that A ingested, which both commits' runs rebuild in turn: half the disk and page cache, and
the same file under both, for changes that leave the schema alone), ``reband`` (bench_scale's
``reband --bands 42 --rows 3``, without activating it, on indexes made as for ``pairs``: each
run adds a banding) or ``dedup`` (the corpus through ``simindex dedup`` into a new index).

Run from the repository root:
    .venv/bin/python benchmarks/bench_ab.py A_COMMIT B_COMMIT --step ingest [--size 400000]
        [--pairs 5] [--backend pg|sqlite] [--one-index] [--write-results]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import (  # noqa: E402 (the sibling scripts)
    DEFAULT_PG,
    corpus_name,
    corpus_path,
    finish,
)
from bench_scale import (  # noqa: E402
    SEED,
    SIMINDEX,
    Database,
    commit_envs,
    in_child,
    run_step,
)

# The command of a step run on an index ingested before the runs.
STEP_ARGS = {
    "pairs": ["pairs", "--full", "--top", "0"],
    "reband": ["reband", "--bands", "42", "--rows", "3", "--no-activate", "-y"],
}


def fresh_database(args: argparse.Namespace, name: str) -> Database:
    database = Database(args.backend, name, args.pg_url, args.sqlite_dir)
    database.execute("CHECKPOINT")
    return database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--step", choices=["ingest", "pairs", "reband", "dedup"], required=True)
    parser.add_argument("--size", type=int, default=400_000)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--backend", choices=["pg", "sqlite"], default="pg")
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--sqlite-dir", type=Path, default=Path("/tmp"))
    parser.add_argument(
        "--one-index", action="store_true", help="pairs, reband: one index for both"
    )
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    envs = commit_envs((args.a, args.b))
    commits = list(envs)
    in_child("corpus", str(args.size))
    corpus = str(corpus_path(corpus_name(str(args.size)), SEED))
    ingest = ["ingest", corpus, "--db"]
    out = args.sqlite_dir / "bench_ab_dedup.jsonl"
    indexed: dict[str, Database] = {}
    scratch: Database | None = None  # the new index of an ingest or dedup run
    if args.step in ("pairs", "reband"):  # one index per commit, loaded once
        for i, commit in enumerate(commits[:1] if args.one_index else commits):
            indexed[commit] = fresh_database(args, f"bench_ab_{i}")
            run_step(
                f"{commit} ingest", [*SIMINDEX, *ingest, indexed[commit].url], env=envs[commit]
            )
        if args.one_index:
            indexed[commits[1]] = indexed[commits[0]]
    runs: dict[str, list[dict]] = {commit: [] for commit in commits}
    for pair in range(1, args.pairs + 1):
        for commit in commits:
            if args.step in ("pairs", "reband"):
                url = indexed[commit].url
                command = [*SIMINDEX, *STEP_ARGS[args.step], "--db", url]
            else:
                scratch = fresh_database(args, "bench_ab")
                command = (
                    [*SIMINDEX, *ingest, scratch.url]
                    if args.step == "ingest"
                    else [*SIMINDEX, "dedup", corpus, "-o", str(out), "--db", scratch.url]
                )
            result = run_step(f"pair {pair}: {commit} {args.step}", command, env=envs[commit])
            if not result["ok"]:
                sys.exit(f"Error: {commit} failed: {result['error']}")
            runs[commit].append(result)
    for path in out.parent.glob(f"{out.name}*"):  # the output and dedup's list of dropped
        path.unlink()
    for database in {*indexed.values(), *([scratch] if scratch else [])}:  # each once
        database.drop()

    a, b = (runs[c] for c in commits)
    differences = [rb["seconds"] - ra["seconds"] for ra, rb in zip(a, b, strict=True)]
    command = (
        f"`.venv/bin/python benchmarks/bench_ab.py {commits[0]} {commits[1]} --step {args.step} "
        f"--size {args.size} --pairs {args.pairs} --backend {args.backend}"
        f"{' --one-index' if args.one_index else ''}`"
    )
    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {args.step} of {commits[0]} (A) against "
        f"{commits[1]} (B), paired runs",
        "",
        f"- Machine: nproc {os.cpu_count()}, {platform.machine()}, Python {platform.python_version()}; "
        f"{'PostgreSQL on the same machine' if args.backend == 'pg' else 'SQLite'}",
        f"- Command: {command}",
        "",
        "| pair | A wall | B wall | B - A | A CPU | B CPU | A peak RSS | B peak RSS |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {i} | {ra['seconds']:.2f} s | {rb['seconds']:.2f} s | {d:+.2f} s | "
            f"{ra['cpu_seconds']:.1f} s | {rb['cpu_seconds']:.1f} s | "
            f"{ra['peak_rss_mib']:.0f} MiB | {rb['peak_rss_mib']:.0f} MiB |"
            for i, (ra, rb, d) in enumerate(zip(a, b, differences, strict=True), start=1)
        ),
        "",
        f"B - A: median {statistics.median(differences):+.2f} s, mean "
        f"{statistics.mean(differences):+.2f} s; B faster in "
        f"{sum(d < 0 for d in differences)} of {len(differences)} pairs.",
        "",
    ]
    finish("\n".join(lines), args.write_results)


if __name__ == "__main__":
    main()
