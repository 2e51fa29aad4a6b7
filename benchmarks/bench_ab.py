"""Benchmark: one CLI step at two git commits, timed in alternating runs in one session.

A host's speed drifts by more than many changes are worth, so the two commits take turns:
pair 1 runs A then B, pair 2 B then A, and so on. Each commit runs from its own copy of
``simindex/`` and ``migrations/`` (``git archive``, in a temporary folder), as
``python -m simindex`` with that copy first on PYTHONPATH, its kernels compiled by an
untimed warm-up. Each run is a fresh database and its own process: wall time and peak RSS.

Steps: ``ingest`` (the corpus into a new index), ``pairs`` (``pairs --full`` on an index
that run ingested first, untimed) or ``dedup`` (``simindex dedup CORPUS``).

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    python benchmarks/bench_ab.py HEAD~1 HEAD
    python benchmarks/bench_ab.py main my-branch --step dedup --size 100000 --pairs 5 --results
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import corpus
import measure


def title(args: argparse.Namespace) -> str:
    """One section of RESULTS.md per step, size and backend, so that runs do not replace
    each other's tables."""
    backend = "PostgreSQL" if args.backend == "pg" else "SQLite"
    return f"A/B: `simindex {args.step}` on {args.size:,} documents, {backend} (bench_ab.py)"


def spread(values: list[float], digits: int) -> str:
    """The median of ``values`` and their range."""
    low, high = min(values), max(values)
    return f"{statistics.median(values):.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def report(runs: dict[str, list[measure.Measured]], args: argparse.Namespace) -> str:
    """Each commit's wall time and peak RSS, then B's divided by A's in each pair of runs."""
    rows = []
    for label, commit in (("A", args.a), ("B", args.b)):
        done = runs[commit]
        rows.append([f"{label}: `{commit}`", spread([r.seconds for r in done], 2),
                     spread([r.cpu_seconds for r in done], 1),
                     spread([r.peak_rss_mib for r in done], 0)])  # fmt: skip
    pairs = list(zip(runs[args.a], runs[args.b], strict=True))
    ratios = [
        ["B ÷ A"]
        + [spread([getattr(b, field) / getattr(a, field) for a, b in pairs], 2)
           for field in ("seconds", "cpu_seconds", "peak_rss_mib")]
    ]  # fmt: skip
    faster = sum(b.seconds < a.seconds for a, b in pairs)
    return (
        f"`simindex {args.step}` on {args.size:,} documents ({args.backend}), {args.pairs} "
        f"pairs of runs in alternating order; B faster than A in {faster} of {args.pairs} "
        "pairs. Each cell: the median (range); the ratios are those of each pair's two runs.\n\n"
        + measure.table(["commit", "wall s", "CPU s", "peak RSS MiB"], rows + ratios)
    )


def snapshot(commit: str, folder: Path) -> dict[str, str]:
    """simindex as of ``commit``, laid out as installed (migrations inside the package) in
    ``folder``; the environment that runs it."""
    archive = subprocess.run(
        ["git", "-C", str(measure.REPO), "archive", commit, "simindex", "migrations"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    shutil.move(folder / "migrations", folder / "simindex" / "migrations")
    # python -m puts the current directory (a checkout's root, with a simindex/ of its own)
    # ahead of PYTHONPATH: safe-path mode leaves it out, so the snapshot is what runs
    return {**os.environ, "PYTHONPATH": str(folder), "PYTHONSAFEPATH": "1"}


def run_step(step: str, path: Path, env: dict[str, str], args: argparse.Namespace, work: str):
    with measure.database(args.backend, "bench_ab", args.pg_url, Path(work)) as url:
        if step == "dedup":
            return measure.simindex("dedup", str(path), "-o", f"{work}/kept.jsonl", "--db", url,
                                    env=env)  # fmt: skip
        ingest = measure.simindex("ingest", str(path), "--db", url, env=env)
        if step == "ingest":
            return ingest
        return measure.simindex("pairs", "--full", "--db", url, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("a", help="commit A (any git revision)")
    parser.add_argument("b", help="commit B")
    parser.add_argument("--step", default="ingest", choices=["ingest", "pairs", "dedup"])
    parser.add_argument("--size", type=int, default=20_000, help="documents")
    parser.add_argument("--pairs", type=int, default=3, help="A/B pairs of runs")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "pg"])
    parser.add_argument("--pg-url", default=measure.DEFAULT_PG, help="PostgreSQL (CREATE DATABASE)")
    parser.add_argument("--results", action="store_true", help="write the table to RESULTS.md")
    args = parser.parse_args()
    path = corpus.corpus(args.size)
    runs: dict[str, list[measure.Measured]] = {args.a: [], args.b: []}
    with tempfile.TemporaryDirectory() as work:
        envs = {}
        for commit in runs:
            folder = Path(work) / f"code-{len(envs)}"
            folder.mkdir()
            envs[commit] = snapshot(commit, folder)
            measure.warm_up(envs[commit])
        for pair in range(args.pairs):
            for commit in (args.a, args.b) if pair % 2 == 0 else (args.b, args.a):
                done = run_step(args.step, path, envs[commit], args, work)
                runs[commit].append(done)
                print(f"pair {pair + 1} {commit}: {done.seconds:.2f} s, "
                      f"{done.peak_rss_mib:.0f} MiB", flush=True)  # fmt: skip
    body = report(runs, args)
    print("\n" + body)
    if args.results:
        measure.write_section(title(args), body, args.pg_url if args.backend == "pg" else None)


if __name__ == "__main__":
    main()
