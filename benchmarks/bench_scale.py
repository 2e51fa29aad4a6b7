"""Benchmark: the CLI steps at chosen corpus sizes, on SQLite and PostgreSQL: wall time and
peak RSS of each command, and the ratios between sizes.

For each size (a generated corpus, benchmarks/corpus.py) and backend, in a fresh database:
``simindex init``, ``simindex ingest CORPUS``, ``simindex pairs``, ``simindex export -o
pairs.csv``, then ``simindex dedup CORPUS`` into another fresh database. Each command is its
own process, timed from outside with its start-up; its peak RSS is ``ru_maxrss`` from
``wait4``. A warm-up command first compiles simindex's kernels, so no step pays for that.

``--env NAME...`` runs every step under each named environment variant (ENVIRONMENTS), the
variants taking turns step by step (step 1 A then B, step 2 B then A, ...) each in its own
database, so a drift in the host's speed does not favour one; ``--rounds N`` repeats the
whole for a median and a spread. Every variable any variant sets is removed from the
environment of all of them, so ``as-is`` is the CLI's own behaviour (it sets
OMP_WAIT_POLICY=PASSIVE unless the user set it) and ``omp-active`` overrides that with
ACTIVE (OpenMP's threads spin between parallel loops instead of sleeping). A last table gives each variant's wall time, CPU time and peak RSS divided by the
first variant's, per round.

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    python benchmarks/bench_scale.py                                  # 20k documents
    python benchmarks/bench_scale.py --sizes 100000 400000 --results
    python benchmarks/bench_scale.py --sizes 100000 --backends sqlite --env as-is omp-active
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path

import corpus
import measure

TITLE = "Scale: CLI steps by corpus size (bench_scale.py)"
STEPS = ["init", "ingest", "pairs", "export", "dedup"]
BACKENDS = {"sqlite": "SQLite", "pg": "PostgreSQL"}
# the named environments of the measured commands: the variables each one sets
ENVIRONMENTS = {
    "as-is": {},
    "omp-active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "omp-passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}


def environment(variant: str) -> dict[str, str]:
    """This process's environment without any variable a variant sets, then ``variant``'s."""
    chosen = {name for settings in ENVIRONMENTS.values() for name in settings}
    env = {k: v for k, v in os.environ.items() if k not in chosen}
    return {**env, **ENVIRONMENTS[variant]}


def commands(step: str, path: Path, url: str, work: str) -> list[str]:
    """The arguments of ``simindex STEP`` (``dedup`` writes into its own fresh database)."""
    return {
        "init": ["init", "--db", url],
        "ingest": ["ingest", str(path), "--db", url],
        "pairs": ["pairs", "--db", url],
        "export": ["export", "--db", url, "-o", f"{work}/pairs.csv"],
        "dedup": ["dedup", str(path), "-o", f"{work}/kept.jsonl", "--db", url],
    }[step]


def steps(size: int, backend: str, round_: int, args: argparse.Namespace) -> dict:
    """{variant: {step: Measured}} of one round at ``size`` on ``backend``, the variants
    taking turns at going first from one step to the next."""
    path = corpus.corpus(size)
    done: dict[str, dict[str, measure.Measured]] = {variant: {} for variant in args.env}
    with ExitStack() as stack:
        urls, works = {}, {}
        for variant in args.env:
            name = f"bench_scale_{backend}_{size}_{variant.replace('-', '_')}"
            works[variant] = stack.enter_context(tempfile.TemporaryDirectory())
            for suffix in ("", "_dedup"):
                urls[variant, suffix] = stack.enter_context(
                    measure.database(backend, name + suffix, args.pg_url, args.sqlite_dir)
                )
        for number, step in enumerate(STEPS):
            order = args.env if (number + round_) % 2 == 0 else args.env[::-1]
            for variant in order:
                url = urls[variant, "_dedup" if step == "dedup" else ""]
                m = measure.simindex(*commands(step, path, url, works[variant]),
                                     env=environment(variant))  # fmt: skip
                done[variant][step] = m
                print(f"  {size:,} {backend} {variant} {step}: {m.seconds:.1f} s, "
                      f"{m.cpu_seconds:.1f} s CPU, {m.peak_rss_mib:.0f} MiB",
                      flush=True)  # fmt: skip
    return done


def described(variant: str) -> str:
    settings = ENVIRONMENTS[variant]
    return " ".join(f"{k}={v}" for k, v in settings.items()) or "nothing set"


def spread(values: list[float], digits: int, unit: str = "") -> str:
    """The median of ``values``, with their range when there are several."""
    text = f"{statistics.median(values):.{digits}f}{unit}"
    if len(values) > 1:
        text += f" ({min(values):.{digits}f}-{max(values):.{digits}f})"
    return text


def report(runs: dict, args: argparse.Namespace) -> str:
    """``runs[(backend, size, variant)]`` is a list (one per round) of {step: Measured}."""
    columns = [(b, s, v) for b in args.backends for s in args.sizes for v in args.env]

    def label(backend: str, size: int, variant: str) -> str:
        return f"{BACKENDS[backend]} {size:,}" + (f", {variant}" if len(args.env) > 1 else "")

    def cell(column: tuple, step: str) -> str:
        rounds = runs[column]
        seconds = spread([r[step].seconds for r in rounds], 1, " s")
        return f"{seconds} / {statistics.median(r[step].peak_rss_mib for r in rounds):.0f} MiB"

    rounds_text = f"median of {args.rounds} rounds (range)" if args.rounds > 1 else "one round"
    parts = [
        f"Each cell: wall seconds, {rounds_text} / median peak RSS MiB of the command.",
        measure.table(["step", *(label(*c) for c in columns)],
                      [[f"`{step}`"] + [cell(c, step) for c in columns] for step in STEPS]),
    ]  # fmt: skip
    base = args.env[0]
    if len(args.sizes) > 1:
        pairs = list(zip(args.sizes, args.sizes[1:], strict=False))
        ratio_columns = [(b, lo, hi) for b in args.backends for lo, hi in pairs]

        def seconds(b: str, s: int, step: str) -> float:
            return statistics.median(r[step].seconds for r in runs[(b, s, base)])

        rows = [
            [f"`{step}`"]
            + [f"{seconds(b, hi, step) / seconds(b, lo, step):.2f}x" for b, lo, hi in ratio_columns]
            for step in STEPS
        ]
        header = [f"{BACKENDS[b]} {hi:,} ÷ {lo:,}" for b, lo, hi in ratio_columns]
        parts += [
            f"Wall time ratios between sizes ({base}):",
            measure.table(["step", *header], rows),
        ]
    for variant in args.env[1:]:
        pairs_ = [(b, s) for b in args.backends for s in args.sizes]

        def ratios(b: str, s: int, step: str, field: str, variant: str = variant) -> str:
            values = [
                getattr(other[step], field) / getattr(mine[step], field)
                for mine, other in zip(runs[(b, s, base)], runs[(b, s, variant)], strict=True)
            ]
            return spread(values, 2)

        rows = [
            [f"`{step}`", *(ratios(b, s, step, field) for b, s in pairs_
                            for field in ("seconds", "cpu_seconds", "peak_rss_mib"))]
            for step in STEPS
        ]  # fmt: skip
        header = [f"{BACKENDS[b]} {s:,} {what}" for b, s in pairs_
                  for what in ("wall", "CPU", "peak RSS")]  # fmt: skip
        parts += [
            f"{variant} ÷ {base} ({described(variant)} against {described(base)}), "
            "the ratio of each round's pair of runs, "
            f"{'median (range)' if args.rounds > 1 else 'one round'}; above 1: {variant} "
            "costs more:",
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
        "--env", nargs="+", default=["as-is"], choices=list(ENVIRONMENTS),
        help="environment variants of the measured commands (the first is the reference)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every variant")
    parser.add_argument("--pg-url", default=measure.DEFAULT_PG, help="PostgreSQL (CREATE DATABASE)")
    parser.add_argument("--sqlite-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--results", action="store_true", help="write the tables to RESULTS.md")
    args = parser.parse_args()
    measure.warm_up()
    runs: dict = {}
    for backend in args.backends:
        for size in args.sizes:
            for round_ in range(args.rounds):
                for variant, done in steps(size, backend, round_, args).items():
                    runs.setdefault((backend, size, variant), []).append(done)
    body = report(runs, args)
    print("\n" + body)
    if args.results:
        measure.write_section(TITLE, body, args.pg_url)


if __name__ == "__main__":
    main()
