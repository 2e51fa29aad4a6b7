"""Benchmark: what verification's look-ups cost in `simindex pairs --full`, and what reading
text sizes costs it.

Verification (Index._verify) runs three threads: a worker that reads the next pairs'
signatures and rules pairs out by their estimate, then reads the text sizes of the pairs left
(Index._plausible; the sizes cut the pairs into chunks of about VERIFY_TEXT_BYTES of text); the
command's own thread, which reads each chunk's texts and stores its pairs; and a worker that
compares a chunk. This script runs `simindex pairs --full --top 0` on an existing index, each
run a fresh process, and times inside it:

- signatures: the worker's look-ups of signatures (``Store.signatures_of``): wall and thread
  CPU seconds, and the ids looked up (an id once per block of pairs that names it);
- text sizes: the worker's look-ups of text sizes (``Store.text_sizes``), the same way;
- waiting: the seconds the command's thread waited for the worker's next pairs (the worker's
  share of the critical path).

Runs alternate between the code as it is and the same code with the text sizes not read
(every document counted as the mean size of a sample of 10,000 stored texts): the second is
the most that keeping each text's size beside its signature (read with it, no second look-up)
could save. Its chunks hold about as much text, and its pairs are the same.

Run from the repository root, on an index made from a generated corpus (bench_scale.py makes
the corpora):
    .venv/bin/python benchmarks/bench_verify_parts.py --db URL [--pairs 2] [--write-results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import finish  # noqa: E402 (the sibling scripts)

from simindex.store import display_url  # noqa: E402

VARIANTS = {"as is": False, "sizes not read": True}


def child(db: str, skip_sizes: bool, assumed_bytes: int) -> dict[str, Any]:
    """One `simindex pairs --full --top 0` in this process, timed as the module says."""
    from simindex import index, store
    from simindex.cli import run

    parts = {name: {"wall": 0.0, "cpu": 0.0, "ids": 0} for name in ("signatures", "text sizes")}

    def timed(name: str, function: Any) -> Any:
        def wrapper(self: Any, connection: Any, ids: np.ndarray, *rest: Any) -> Any:
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(self, connection, ids, *rest)
            finally:
                parts[name]["wall"] += time.perf_counter() - wall
                parts[name]["cpu"] += time.thread_time() - cpu
                parts[name]["ids"] += int(ids.size)

        return wrapper

    def assumed(self: Any, connection: Any, ids: np.ndarray) -> np.ndarray:
        return np.full(ids.shape[0], assumed_bytes, np.int64)

    sizes = assumed if skip_sizes else store.Store.text_sizes
    store.Store.text_sizes = timed("text sizes", sizes)
    store.Store.signatures_of = timed("signatures", store.Store.signatures_of)
    plausible, waited = index.Index._plausible, [0.0]

    def waiting(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        pairs = plausible(self, *args, **kwargs)
        while True:
            started = time.perf_counter()
            item = next(pairs, None)
            waited[0] += time.perf_counter() - started
            if item is None:
                return
            yield item

    index.Index._plausible = waiting
    sys.argv = ["simindex", "pairs", "--full", "--top", "0", "--db", db]
    started = time.perf_counter()
    try:
        run()
    except SystemExit as exc:
        if exc.code:
            raise
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "wall": time.perf_counter() - started,
        "cpu": usage.ru_utime + usage.ru_stime,
        "parts": parts,
        "waiting": waited[0],
    }


def mean_text_bytes(db: str) -> int:
    """The mean stored text's bytes over a sample of 10,000 documents."""
    from simindex import Index

    with Index.open(db) as index, index._store.read() as connection:
        ids = index._store.sample_document_ids(connection, 10_000, seed=1)
        return int(index._store.text_sizes(connection, ids).mean())


def one_run(args: argparse.Namespace, skip_sizes: bool) -> dict[str, Any]:
    command = [sys.executable, __file__, "--db", args.db, "--child", str(int(skip_sizes))]
    command += ["--assumed-bytes", str(args.assumed_bytes)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def section(args: argparse.Namespace, runs: list[tuple[str, dict[str, Any]]]) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "`.venv/bin/python benchmarks/bench_verify_parts.py --db URL"
    command += f" --pairs {args.pairs}`"
    lines = [
        f"## {now}: verification's look-ups in `pairs --full`, and text sizes not read",
        "",
        f"- Machine: nproc {os.cpu_count()}, {platform.machine()}, Python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f} at the end",
        f"- Index: {display_url(args.db)}",
        f"- Command: {command}",
        f'- "sizes not read": every document counted as {args.assumed_bytes:,} bytes of '
        "text (the mean of a sample of up to 10,000 stored texts)",
        "",
        "| run | code | wall s | CPU s | signatures: wall / CPU s, ids | text sizes: wall / "
        "CPU s, ids | waiting for the worker s |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for number, (variant, run) in enumerate(runs, 1):
        sig, sizes = run["parts"]["signatures"], run["parts"]["text sizes"]
        sized = f"{sizes['wall']:.2f} / {sizes['cpu']:.2f}, {sizes['ids']:,}"
        lines.append(
            f"| {number} | {variant} | {run['wall']:.2f} | {run['cpu']:.2f} | "
            f"{sig['wall']:.2f} / {sig['cpu']:.2f}, {sig['ids']:,} | "
            f"{sized if variant == 'as is' else '(not read)'} | {run['waiting']:.2f} |"
        )
    walls = {v: [r["wall"] for name, r in runs if name == v] for v in VARIANTS}
    medians = {v: statistics.median(w) for v, w in walls.items()}
    lines += [
        "",
        f"Median wall: as is {medians['as is']:.2f} s, sizes not read "
        f"{medians['sizes not read']:.2f} s.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True, help="an index's URL or SQLite path")
    parser.add_argument("--pairs", type=int, default=2, help="runs of each variant, alternated")
    parser.add_argument("--assumed-bytes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--child", choices=["0", "1"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.db, args.child == "1", args.assumed_bytes)))
        return
    args.assumed_bytes = mean_text_bytes(args.db)
    runs = []
    for _ in range(args.pairs):
        for variant, skip_sizes in VARIANTS.items():
            runs.append((variant, one_run(args, skip_sizes)))
            print(f"{variant}: {runs[-1][1]['wall']:.2f} s", flush=True)
    finish(section(args, runs), args.write_results)


if __name__ == "__main__":
    main()
