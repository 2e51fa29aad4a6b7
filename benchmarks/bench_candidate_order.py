"""Benchmark: how many documents verification reads, by the order of the candidate pairs.

Verification reads the signatures of a block of candidate pairs (simindex.index.ESTIMATED_PAIRS
of them) at once, one read per distinct document of the block. This script collects an
index's candidate pairs (the active banding's buckets, as `simindex pairs --full` does) and
counts those reads, and the largest number of a block, for the pairs in (doc_a, doc_b) order
(Candidates.blocks) and grouped by component (Candidates.by_component, what verification
uses), with the components' sizes, and the seconds it takes to make the blocks (grouping by
component looks each pair's documents up: by a table indexed by id, and, for comparison, by
binary search), and, by component, the reads left if verification kept the signatures of the
last 1-16 slices' documents (a cache; what it would hold). It also times the signature estimate of every block's pairs as verification
makes it (minhash.estimate_rows) against gathering the two signature matrices for NumPy's
mean (minhash.estimate_jaccard), on random signatures of the index's length (the work does not
depend on the values). No pair is verified; nothing is written to the index.

Run from the repository root, on an index `simindex ingest` made (at 4M documents: about 8
minutes, most of it the kept-slices counts):
    .venv/bin/python benchmarks/bench_candidate_order.py --db URL [--write-results]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import finish  # noqa: E402 (the sibling scripts)

import simindex.pipeline.candidates  # noqa: E402
from simindex import Index  # noqa: E402
from simindex.index import ESTIMATED_PAIRS  # noqa: E402
from simindex.pipeline.candidates import Candidates, collect  # noqa: E402
from simindex.pipeline.cluster import components  # noqa: E402
from simindex.pipeline.minhash import estimate_jaccard, estimate_rows  # noqa: E402
from simindex.store import display_url  # noqa: E402

# How many of the last slices' documents a signature cache would keep, for reads_kept.
KEPT_SLICES = (1, 2, 4, 8, 16)


def candidates(index: Index) -> Candidates:
    """The active banding's candidate pairs, collected from its buckets."""
    with index._transaction() as connection:
        banding = index._active_banding(connection)["id"]
        return collect(index._store.iter_buckets(connection, banding, None))


def reads(blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[int, int, int, float]:
    """(pairs, document reads, largest reads of a block, seconds) when ``blocks`` are cut
    into ESTIMATED_PAIRS pairs as verification cuts them."""
    started = time.perf_counter()
    pairs = total = largest = 0
    for a, b in slices(blocks):
        pairs += a.size
        count = np.unique(np.concatenate((a, b))).size
        total, largest = total + count, max(largest, count)
    return pairs, total, largest, time.perf_counter() - started


def reads_kept(blocks: Iterable[tuple[np.ndarray, np.ndarray]], kept: int) -> tuple[int, int]:
    """(document reads, most documents held) when verification keeps the signatures of the
    last ``kept`` slices' documents and reads only the others: what a signature cache of
    that many slices would save and hold."""
    recent: list[np.ndarray] = []
    total = held = 0
    for a, b in slices(blocks):
        ids = np.unique(np.concatenate((a, b)))
        known = np.unique(np.concatenate(recent)) if recent else np.empty(0, np.int64)
        total += int((~np.isin(ids, known, assume_unique=True)).sum())
        recent = [*recent, ids][-kept:]
        held = max(held, int(np.unique(np.concatenate(recent)).size))
    return total, held


def slices(blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> Iterable[tuple[np.ndarray, ...]]:
    """The pairs of ``blocks`` ESTIMATED_PAIRS at a time, as verification cuts them."""
    for a, b in blocks:
        for start in range(0, a.size, ESTIMATED_PAIRS):
            yield a[start : start + ESTIMATED_PAIRS], b[start : start + ESTIMATED_PAIRS]


def estimate_seconds(blocks: Iterable[tuple[np.ndarray, np.ndarray]], num_perm: int) -> dict:
    """Seconds to estimate every slice's pairs, each way, on random signatures of its
    documents (the two ways' results compared)."""
    rng = np.random.default_rng(0)
    spent = {"gathered": 0.0, "by row": 0.0}
    for a, b in slices(blocks):
        ids = np.unique(np.concatenate((a, b)))
        signed = rng.integers(0, 4, size=(ids.size, num_perm)).astype(np.uint32)
        rows_a, rows_b = np.searchsorted(ids, a), np.searchsorted(ids, b)
        started = time.perf_counter()
        gathered = estimate_jaccard(signed[rows_a], signed[rows_b])
        spent["gathered"] += time.perf_counter() - started
        started = time.perf_counter()
        by_row = estimate_rows(signed, rows_a, rows_b)
        spent["by row"] += time.perf_counter() - started
        assert np.array_equal(gathered, by_row)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True, help="an index's database URL or SQLite path")
    parser.add_argument("--write-results", action="store_true", help="append to RESULTS.md")
    args = parser.parse_args()
    with Index.open(args.db) as index:
        with index._transaction() as connection:
            documents = index._store.document_count(connection)
        a, b = candidates(index).arrays()
        _, component = components(a, b)
        del a, b
        _, sizes = np.unique(component, return_counts=True)
        del component
        ordered = reads(candidates(index).blocks())
        grouped = reads(candidates(index).by_component())
        table_span, simindex.pipeline.candidates.TABLE_SPAN = (
            simindex.pipeline.candidates.TABLE_SPAN,
            0,
        )
        searched = reads(candidates(index).by_component())
        simindex.pipeline.candidates.TABLE_SPAN = table_span
        kept = {k: reads_kept(candidates(index).by_component(), k) for k in KEPT_SLICES}
        estimates = estimate_seconds(candidates(index).by_component(), index.spec.num_perm)
    started = datetime.now(UTC)
    lines = [
        f"## {started:%Y-%m-%d %H:%M} UTC: documents verification reads, by candidate order",
        "",
        f"- Machine: nproc {platform.os.cpu_count()}, {platform.machine()}, "
        f"Python {platform.python_version()}",
        f"- Command: `.venv/bin/python benchmarks/bench_candidate_order.py --db "
        f"{display_url(args.db)}`",
        f"- Index: {documents:,} documents; {ordered[0]:,} candidate pairs over "
        f"{sizes.sum():,} documents in {sizes.size:,} components (largest {sizes.max():,}; "
        f"{(sizes <= 10).sum():,} of at most 10 documents); blocks of {ESTIMATED_PAIRS:,} pairs",
        "",
        "| order | document reads | reads per document | most reads in a block | seconds to make the blocks |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, (_, total, largest, seconds) in (
        ("(doc_a, doc_b): `Candidates.blocks`", ordered),
        ("by component: `Candidates.by_component`", grouped),
        ("by component, positions by binary search (`TABLE_SPAN = 0`)", searched),
    ):
        lines.append(
            f"| {name} | {total:,} | {total / sizes.sum():.2f} | {largest:,} | {seconds:.1f} |"
        )
    lines += [
        "",
        "By component, keeping the signatures of the last slices' documents and reading only "
        "the others:",
        "",
        "| slices kept | document reads | fewer than none kept | most signatures held |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for k, (total, held) in kept.items():
        lines.append(
            f"| {k} | {total:,} | {1 - total / grouped[1]:.1%} | {held:,} "
            f"({held * 4 * index.spec.num_perm / 2**20:.1f} MiB) |"
        )
    lines += [
        "",
        f"Signature estimates of every block's pairs ({index.spec.num_perm} values a "
        f"signature): gathered matrices and NumPy's mean {estimates['gathered']:.2f} s, "
        f"`estimate_rows` {estimates['by row']:.2f} s.",
    ]
    finish("\n".join(lines) + "\n", args.write_results)


if __name__ == "__main__":
    main()
