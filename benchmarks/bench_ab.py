"""Benchmark: one CLI step at two git commits, timed in alternating runs in one session.

A host's speed drifts by more than many changes are worth, so the two commits take turns:
pair 1 runs A then B, pair 2 B then A, and so on. Each commit runs from its own copy of
``simindex/`` and ``migrations/`` (``git archive``, in a temporary folder), as
``python -m simindex`` with that copy first on PYTHONPATH, its kernels compiled by an
untimed warm-up. Each run is a fresh database and its own process: wall time and peak RSS.

Steps: ``ingest`` (the corpus into a new index), ``pairs`` (``pairs --full`` on an index
that run ingested first, untimed), ``stats`` (likewise: a short command, mostly start-up),
``query`` (likewise: a point query of a sentence, which runs the signing kernels),
``dedup`` (``simindex dedup CORPUS``) or ``job`` (the whole job as four commands: ``init``,
``ingest``, ``pairs``, ``export -o pairs.csv``; their wall and CPU seconds summed, the
largest peak RSS).

``--peer rensa`` (or datasketch, datatrove) also runs that tool's whole dedup of the corpus
(as bench_peers.py does) between A and B in every pair, and gives each commit's figures
divided by the peer's of the same pair: the ratio to the peer, A's against B's.

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    python benchmarks/bench_ab.py HEAD~1 HEAD
    python benchmarks/bench_ab.py main my-branch --step dedup --size 100000 --pairs 5 --results
    python benchmarks/bench_ab.py 52fe369 main --step job --backend pg --size 400000 --peer rensa
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import bench_peers
import corpus
import measure

FIELDS = ("seconds", "cpu_seconds", "peak_rss_mib")
# The text of the query step's point query.
QUERY = "The company said its third-quarter profit rose on higher sales of its main products."


def title(args: argparse.Namespace) -> str:
    """One section of RESULTS.md per step, size and backend, so that runs do not replace
    each other's tables."""
    backend = "PostgreSQL" if args.backend == "pg" else "SQLite"
    peer = f", against {args.peer}" if args.peer else ""
    return f"A/B: `simindex {args.step}` on {args.size:,} documents, {backend}{peer} (bench_ab.py)"


def spread(values: list[float], digits: int) -> str:
    """The median of ``values`` and their range."""
    low, high = min(values), max(values)
    return f"{statistics.median(values):.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def ratio_row(label: str, tops: list[measure.Measured], bottoms: list[measure.Measured]):
    """``tops`` divided by ``bottoms`` run by run, each field's median (range)."""
    return [label] + [
        spread([getattr(t, field) / getattr(b, field) for t, b in zip(tops, bottoms, strict=True)],
               2)
        for field in FIELDS
    ]  # fmt: skip


def report(runs: dict[str, list[measure.Measured]], args: argparse.Namespace) -> str:
    """Each commit's (and the peer's) wall time and peak RSS, then B's divided by A's in
    each pair of runs, and each commit's divided by the peer's."""
    named = [("A: ", args.a), ("B: ", args.b)] + ([("", args.peer)] if args.peer else [])
    rows = []
    for label, run in named:
        done = runs[run]
        name = f"{label}`{run}`" if label else run
        rows.append([name, spread([r.seconds for r in done], 2),
                     spread([r.cpu_seconds for r in done], 1),
                     spread([r.peak_rss_mib for r in done], 0)])  # fmt: skip
    rows.append(ratio_row("B ÷ A", runs[args.b], runs[args.a]))
    if args.peer:
        rows.append(ratio_row(f"A ÷ {args.peer}", runs[args.a], runs[args.peer]))
        rows.append(ratio_row(f"B ÷ {args.peer}", runs[args.b], runs[args.peer]))
    pairs = list(zip(runs[args.a], runs[args.b], strict=True))
    faster = sum(b.seconds < a.seconds for a, b in pairs)
    return (
        f"`simindex {args.step}` on {args.size:,} documents ({args.backend}), {args.pairs} "
        f"pairs of runs in alternating order; B faster than A in {faster} of {args.pairs} "
        "pairs. Each cell: the median (range); the ratios are those of each pair's two runs.\n\n"
        + measure.table(["commit", "wall s", "CPU s", "peak RSS MiB"], rows)
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


def summed(commands: list[measure.Measured]) -> measure.Measured:
    """Commands run one after another as one: wall and CPU seconds added, the largest peak."""
    return measure.Measured(
        sum(c.seconds for c in commands),
        sum(c.cpu_seconds for c in commands),
        max(c.peak_rss_mib for c in commands),
        "",
    )


def run_peer(tool: str, path: Path, work: str) -> measure.Measured:
    """The peer's whole dedup of the corpus in a process of its own, as bench_peers runs it."""
    folder = Path(work) / "peer"
    folder.mkdir(exist_ok=True)
    return measure.run([sys.executable, bench_peers.__file__, "--run-peer", tool, str(path),
                        str(folder)])  # fmt: skip


def run_step(step: str, path: Path, env: dict[str, str], args: argparse.Namespace, work: str):
    with measure.database(args.backend, "bench_ab", args.pg_url, Path(work)) as url:
        if step == "dedup":
            return measure.simindex("dedup", str(path), "-o", f"{work}/kept.jsonl", "--db", url,
                                    env=env)  # fmt: skip
        if step == "job":
            return summed([
                measure.simindex("init", "--db", url, env=env),
                measure.simindex("ingest", str(path), "--db", url, env=env),
                measure.simindex("pairs", "--db", url, env=env),
                measure.simindex("export", "--db", url, "-o", f"{work}/pairs.csv", env=env),
            ])  # fmt: skip
        ingest = measure.simindex("ingest", str(path), "--db", url, env=env)
        if step == "ingest":
            return ingest
        if step == "stats":
            return measure.simindex("stats", "--db", url, env=env)
        if step == "query":
            return measure.simindex("query", QUERY, "--db", url, env=env)
        return measure.simindex("pairs", "--full", "--db", url, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("a", help="commit A (any git revision)")
    parser.add_argument("b", help="commit B")
    parser.add_argument(
        "--step", default="ingest", choices=["ingest", "pairs", "stats", "query", "dedup", "job"]
    )
    parser.add_argument("--peer", choices=sorted(bench_peers.PEERS_IN_PROCESS),
                        help="also run this tool in every pair, for each commit's ratio to it")  # fmt: skip
    parser.add_argument("--size", type=int, default=20_000, help="documents")
    parser.add_argument("--pairs", type=int, default=3, help="A/B pairs of runs")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "pg"])
    parser.add_argument("--pg-url", default=measure.DEFAULT_PG, help="PostgreSQL (CREATE DATABASE)")
    parser.add_argument("--results", action="store_true", help="write the table to RESULTS.md")
    args = parser.parse_args()
    path = corpus.corpus(args.size)
    runs: dict[str, list[measure.Measured]] = {args.a: [], args.b: []}
    if args.peer:
        runs[args.peer] = []
    with tempfile.TemporaryDirectory() as work:
        envs = {}
        for commit in (args.a, args.b):
            folder = Path(work) / f"code-{len(envs)}"
            folder.mkdir()
            envs[commit] = snapshot(commit, folder)
            measure.warm_up(envs[commit])
        for pair in range(args.pairs):
            order = [args.a, args.peer, args.b] if args.peer else [args.a, args.b]
            for run in order if pair % 2 == 0 else order[::-1]:
                if run == args.peer:
                    done = run_peer(args.peer, path, work)
                else:
                    done = run_step(args.step, path, envs[run], args, work)
                runs[run].append(done)
                print(f"pair {pair + 1} {run}: {done.seconds:.2f} s, "
                      f"{done.peak_rss_mib:.0f} MiB", flush=True)  # fmt: skip
    body = report(runs, args)
    print("\n" + body)
    if args.results:
        measure.write_section(title(args), body, args.pg_url if args.backend == "pg" else None)


if __name__ == "__main__":
    main()
