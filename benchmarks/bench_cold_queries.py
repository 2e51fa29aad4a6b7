"""Benchmark: point queries of two commits on PostgreSQL with nothing cached (or, with --warm,
with the index cached), in paired runs.

Right after a load the OS page cache may hold only part of a 4M index (bench_after_load.py,
RESULTS.md 2026-11-29 07:23: 1,533 of 2,232 MiB of the signatures), so a query reads some of
its pages from the disk, and how many follows how many rows it reads at random. A host's
speed drifts too much for two separate loads to compare two commits' queries, so this script
loads bench_scale's corpus once (or takes --db, an index of it), and then, for each pair, for
commit A and then B (B first in even pairs): empties the OS page cache (sync, then
/proc/sys/vm/drop_caches) and restarts PostgreSQL (its shared buffers), and runs
bench_pipeline's query step (the timed queries after its warm-up) with that commit's code,
recording its p50 / p99 and what the disks read. Both commits read the same index from the
same cold state, every page of it from the disk the first time.

Needs root (drop_caches) and Debian's pg_ctlcluster (--cluster), except with --warm. Disk:
~4.1 KB per document (bench_scale); a database it loads is dropped at the end unless --keep.

Run from the repository root:
    .venv/bin/python benchmarks/bench_cold_queries.py A_COMMIT B_COMMIT [--size 4000000]
        [--db URL] [--pairs 3] [--warm] [--cluster 15/main] [--keep] [--write-results]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import (  # noqa: E402 (the sibling scripts)
    DEFAULT_PG,
    corpus_name,
    corpus_path,
    finish,
    host,
    queries_path,
)
from bench_scale import (  # noqa: E402
    SEED,
    SIMINDEX,
    Database,
    commit_envs,
    differences,
    in_child,
    query_latency,
    run_step,
    taking_turns,
)

from simindex.store import display_url  # noqa: E402


def cold(cluster: str) -> None:
    """Nothing of the index cached: the OS page cache emptied, PostgreSQL restarted."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    version, name = cluster.split("/")
    subprocess.run(["pg_ctlcluster", version, name, "restart"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--size", type=int, default=4_000_000)
    parser.add_argument("--db", help="an index of the --size corpus (else one is loaded)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="empty no cache, restart nothing")
    parser.add_argument("--cluster", default="15/main", help="pg_ctlcluster's VERSION/NAME")
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--keep", action="store_true", help="keep a database it loads")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    envs = commit_envs((args.a, args.b))
    commits = list(envs)
    name = corpus_name(str(args.size))
    queries = queries_path(name, SEED)
    loaded = None
    if args.db is None:
        in_child("corpus", str(args.size))
        loaded = Database("pg", f"cold_queries_{args.size}", args.pg_url, Path("."))
        corpus = str(corpus_path(name, SEED))
        run_step(f"{commits[0]} ingest", [*SIMINDEX, "ingest", corpus, "--db", loaded.url],
                 env=envs[commits[0]])  # fmt: skip
    url = args.db or loaded.url
    runs: dict[str, list[dict]] = {commit: [] for commit in commits}
    for pair, commit in taking_turns(commits, args.pairs):
        print(f"pair {pair}: {commit}")
        if not args.warm:
            cold(args.cluster)
        runs[commit].append(query_latency(url, queries, env=envs[commit]))
    if loaded is not None and not args.keep:
        loaded.drop()

    def cells(run: dict) -> str:
        disk = run["disk"]
        mean = disk["read_ms"] / disk["reads"] if disk["reads"] else 0.0
        return (
            f"{run['p50_ms']:.2f} | {run['p99_ms']:.2f} | {disk['reads']:,} | "
            f"{disk['read_sectors'] / 2048:.1f} | {mean:.2f}"
        )

    a, b = (runs[c] for c in commits)
    command = (
        f"`.venv/bin/python benchmarks/bench_cold_queries.py {commits[0]} {commits[1]} "
        f"--size {args.size}{f' --db {display_url(args.db)}' if args.db else ''} "
        f"--pairs {args.pairs}"
        f"{' --warm' if args.warm else ''}`"
    )
    state = "with the index cached" if args.warm else "with nothing cached"
    before_each = (
        "Nothing was emptied or restarted between runs"
        if args.warm
        else "Before each run the OS page cache was emptied and PostgreSQL restarted"
    )
    lines = [
        f"## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: point queries of {commits[0]} (A) against "
        f"{commits[1]} (B) on PostgreSQL {state}, {args.size:,} documents, paired "
        "runs (bench_cold_queries.py)",
        "",
        f"{before_each}; each run is "
        f"bench_pipeline's query step ({a[0]['queries']} timed queries after its warm-up). "
        "Disk: whole disks during the run (reads, MiB, mean ms a read).",
        "",
        "| pair | A p50 ms | A p99 ms | A reads | A MiB | A ms a read | B p50 ms | B p99 ms | "
        "B reads | B MiB | B ms a read |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {i} | {cells(ra)} | {cells(rb)} |"
            for i, (ra, rb) in enumerate(zip(a, b, strict=True), start=1)
        ),
        "",
        *differences(a, b, ("p50_ms", "p99_ms"), "ms"),
        "",
        f"Machine: {host()}. Command: {command}.",
        "",
    ]
    finish("\n".join(lines), args.write_results)


if __name__ == "__main__":
    main()
