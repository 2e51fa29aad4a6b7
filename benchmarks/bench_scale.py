"""Benchmark: the CLI steps at chosen corpus sizes, on SQLite and PostgreSQL: wall time and
peak RSS of each command, and the ratios between sizes.

For each size (a generated corpus, benchmarks/corpus.py) and backend, in a fresh database:
``simindex init``, ``simindex ingest CORPUS``, ``simindex pairs``, ``simindex export -o
pairs.csv``, then ``simindex dedup CORPUS`` into another fresh database. Each command is its
own process, timed from outside with its start-up; its peak RSS is ``ru_maxrss`` from
``wait4``. A warm-up command first compiles simindex's kernels, so no step pays for that.

``--malloc cli glibc`` runs every step twice, once with the CLI's own glibc malloc settings
(at most 2 arenas, mmap threshold 4 MiB, trim threshold 16 MiB) and once with glibc's
defaults, given to the child through the variables the CLI defers to:
MALLOC_ARENA_MAX = 8 x cores (glibc's default limit on 64-bit), MALLOC_MMAP_THRESHOLD_ =
MALLOC_TRIM_THRESHOLD_ = 131072 (their default starting values). Setting the thresholds pins
them, where glibc by default raises them as large blocks are freed (up to 32 MiB): the
"glibc" column is glibc's start without that adjustment. A last table gives the peak RSS
with glibc's defaults divided by the CLI's (above 1: the CLI's settings save memory).

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    python benchmarks/bench_scale.py                                  # 20k documents
    python benchmarks/bench_scale.py --sizes 100000 400000 --results
    python benchmarks/bench_scale.py --backends sqlite --malloc cli glibc
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import corpus
import measure

TITLE = "Scale: CLI steps by corpus size (bench_scale.py)"
STEPS = ["init", "ingest", "pairs", "export", "dedup"]
BACKENDS = {"sqlite": "SQLite", "pg": "PostgreSQL"}
GLIBC_MMAP_THRESHOLD = 128 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MIN (and trim threshold)


def malloc_env(setting: str) -> dict[str, str]:
    """The environment of the measured commands: "cli" leaves the CLI's malloc settings in
    force (a user's variables removed), "glibc" overrides them with glibc's defaults."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
    }
    if setting == "glibc":
        env["MALLOC_ARENA_MAX"] = str(8 * (os.cpu_count() or 1))
        env["MALLOC_MMAP_THRESHOLD_"] = str(GLIBC_MMAP_THRESHOLD)
        env["MALLOC_TRIM_THRESHOLD_"] = str(GLIBC_MMAP_THRESHOLD)
    return env


def steps(size: int, backend: str, setting: str, args: argparse.Namespace) -> dict:
    """The Measured of each step at ``size`` on ``backend`` under a malloc ``setting``."""
    path = corpus.corpus(size)
    env = malloc_env(setting)
    done: dict[str, measure.Measured] = {}
    name = f"bench_scale_{backend}_{size}"
    with tempfile.TemporaryDirectory() as work:
        with measure.database(backend, name, args.pg_url, args.sqlite_dir) as url:
            done["init"] = measure.simindex("init", "--db", url, env=env)
            done["ingest"] = measure.simindex("ingest", str(path), "--db", url, env=env)
            done["pairs"] = measure.simindex("pairs", "--db", url, env=env)
            export = ["export", "--db", url, "-o", f"{work}/pairs.csv"]
            done["export"] = measure.simindex(*export, env=env)
        with measure.database(backend, f"{name}_dedup", args.pg_url, args.sqlite_dir) as url:
            dedup = ["dedup", str(path), "-o", f"{work}/kept.jsonl", "--db", url]
            done["dedup"] = measure.simindex(*dedup, env=env)
    for step, m in done.items():
        print(f"  {size:,} {backend} {setting} {step}: {m.seconds:.1f} s, {m.peak_rss_mib:.0f} MiB")
    return done


def report(runs: dict, args: argparse.Namespace) -> str:
    columns = [(b, s, m) for b in args.backends for s in args.sizes for m in args.malloc]

    def label(backend: str, size: int, setting: str) -> str:
        suffix = f", {setting} malloc" if len(args.malloc) > 1 else ""
        return f"{BACKENDS[backend]} {size:,}{suffix}"

    cells = [
        [f"`{step}`"]
        + [f"{runs[c][step].seconds:.1f} s / {runs[c][step].peak_rss_mib:.0f} MiB" for c in columns]
        for step in STEPS
    ]
    parts = [
        "Each cell: wall seconds / peak RSS MiB of the command.",
        measure.table(["step", *(label(*c) for c in columns)], cells),
    ]
    if len(args.sizes) > 1:
        pairs = list(zip(args.sizes, args.sizes[1:], strict=False))
        ratio_columns = [(b, lo, hi) for b in args.backends for lo, hi in pairs]
        rows = [
            [f"`{step}`"]
            + [
                f"{runs[(b, hi, args.malloc[0])][step].seconds / runs[(b, lo, args.malloc[0])][step].seconds:.2f}x"
                for b, lo, hi in ratio_columns
            ]
            for step in STEPS
        ]
        header = [f"{BACKENDS[b]} {hi:,} ÷ {lo:,}" for b, lo, hi in ratio_columns]
        parts += ["Wall time ratios between sizes:", measure.table(["step", *header], rows)]
    if "cli" in args.malloc and "glibc" in args.malloc:
        pairs_ = [(b, s) for b in args.backends for s in args.sizes]
        rows = [
            [f"`{step}`"]
            + [
                f"{runs[(b, s, 'glibc')][step].peak_rss_mib / runs[(b, s, 'cli')][step].peak_rss_mib:.2f}"
                for b, s in pairs_
            ]
            for step in STEPS
        ]
        header = [f"{BACKENDS[b]} {s:,}" for b, s in pairs_]
        parts += [
            "Peak RSS with glibc's default malloc settings ÷ with the CLI's (arena max 2, mmap "
            "threshold 4 MiB, trim threshold 16 MiB); glibc's thresholds pinned at 128 KiB:",
            measure.table(["step", *header], rows),
        ]
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000], help="documents")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument(
        "--malloc", nargs="+", default=["cli"], choices=["cli", "glibc"],
        help="malloc settings of the measured commands: the CLI's, glibc's defaults, or both",
    )  # fmt: skip
    parser.add_argument("--pg-url", default=measure.DEFAULT_PG, help="PostgreSQL (CREATE DATABASE)")
    parser.add_argument("--sqlite-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--results", action="store_true", help="write the tables to RESULTS.md")
    args = parser.parse_args()
    measure.warm_up()
    runs = {}
    cases = [(backend, size) for backend in args.backends for size in args.sizes]
    for number, (backend, size) in enumerate(cases):
        # the malloc settings take turns at going first, so a drift in the host's speed
        # does not always favour the same one
        for setting in args.malloc if number % 2 == 0 else args.malloc[::-1]:
            runs[(backend, size, setting)] = steps(size, backend, setting, args)
    body = report(runs, args)
    print("\n" + body)
    if args.results:
        measure.write_section(TITLE, body, args.pg_url)


if __name__ == "__main__":
    main()
