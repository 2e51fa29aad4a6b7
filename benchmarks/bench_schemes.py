"""Benchmark: accuracy of signature schemes simindex-v1 and simindex-v2, side by side, one run.

On Reuters-21578 (texts, and titles for documents with fewer shingles than bins):
  * estimator error per exact-Jaccard bin: mean (bias) and standard deviation of
    estimate - exact against the binomial sqrt(J(1-J)/num_perm), pooled over --seeds seeds;
    pairs are chosen by a third, independent signature (v1 with another seed, 64 x 2 bands)
    so that the choice does not favour the signatures being measured;
  * candidate rate per bin with the 20 x 5 banding (and the banding tuned for 0.5) against
    the S-curve 1 - (1 - s^r)^b averaged over the bin's pairs;
  * recall at 0.8 (20 x 5) and at 0.5 (banding tuned for 0.5) against the exact all-pairs
    ground truth, candidates verified by exact Jaccard as an index does (in memory: the
    candidates equal the database's, tests/db/test_reuters.py);
and recall at 0.8 on the generated corpora of bench_pipeline.py (--sizes; it generates and
caches them and their ground truth under benchmarks/data/).

Run from the repository root:
    .venv/bin/python benchmarks/bench_schemes.py                          # Reuters only
    .venv/bin/python benchmarks/bench_schemes.py --sizes 100000 400000 --write-results
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import bench_pipeline as pipeline  # noqa: E402

from simindex import SignatureSpec, band_keys, estimate_jaccard, normalize, shingle_sets  # noqa: E402
from simindex.pipeline import banding as lsh  # noqa: E402
from simindex.pipeline.candidates import collect, group_keys  # noqa: E402
from simindex.pipeline.exact import similar_pairs  # noqa: E402
from simindex.pipeline.minhash import signatures  # noqa: E402
from simindex.pipeline.shingle import ShingleSets  # noqa: E402
from simindex.pipeline.verify import exact_jaccard  # noqa: E402
from simindex.spec import SCHEMES  # noqa: E402

NUM_PERM = 128
BINS = np.round(np.arange(0, 1.01, 0.1), 1)
PAIRS_PER_BIN = 3000
SELECTION = SignatureSpec(scheme="simindex-v1", seed=987_654_321)  # chooses pairs, not measured


def load_reuters() -> tuple[list[str], list[str]]:
    """Normalized non-empty texts and titles of Reuters-21578."""
    with gzip.open(pipeline.REUTERS, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    texts = [t for t in (normalize(d["text"]) for d in docs) if t]
    titles = [t for t in (normalize(d.get("title") or "") for d in docs) if t]
    return texts, titles


def candidate_pairs(sigs: np.ndarray, bands: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    found = collect([group_keys(band_keys(sigs, bands, rows), np.arange(len(sigs)))])
    return found.doc_a, found.doc_b


def pairs_by_bin(sets: ShingleSets, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Up to PAIRS_PER_BIN pairs per exact-Jaccard bin (J >= 0.05), chosen independently of
    the measured signatures."""
    a, b = candidate_pairs(signatures(sets, SELECTION), 64, 2)
    jaccard = exact_jaccard(sets, a, b)
    keep = []
    for low, high in zip(BINS[:-1], BINS[1:], strict=True):
        inside = np.flatnonzero((jaccard >= max(low, 0.05)) & (jaccard < high + (high == 1)))
        keep.append(rng.permutation(inside)[:PAIRS_PER_BIN])
    keep = np.concatenate(keep)
    return a[keep], b[keep], jaccard[keep]


def accuracy_table(sets: ShingleSets, seeds: int, label: str, rng) -> str:
    a, b, jaccard = pairs_by_bin(sets, rng)
    tuned = lsh.tune_threshold(NUM_PERM, 0.5).chosen
    lines = [
        f"**{label}**: {a.size:,} pairs; shingles per document in these pairs: median "
        f"{int(np.median(sets.counts[np.r_[a, b]]))}, {np.mean(sets.counts[np.r_[a, b]] < NUM_PERM):.0%}"
        f" below {NUM_PERM}. Error = estimate - exact over {seeds} seeds; candidate rate = share "
        f"of pairs sharing a band key (seed 1), against the S-curve's mean over the bin.",
        "",
        "| exact J | pairs | theory sd | v1 bias | v1 sd | v2 bias | v2 sd | v1 / v2 / S-curve "
        f"20x5 | v1 / v2 / S-curve {tuned.bands}x{tuned.rows} |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    errors, collide = {}, {}
    for scheme in SCHEMES:
        runs = [signatures(sets, SignatureSpec(scheme=scheme, seed=s)) for s in range(1, seeds + 1)]
        errors[scheme] = np.stack([estimate_jaccard(s[a], s[b]) - jaccard for s in runs])
        collide[scheme] = {
            (bands, rows): (
                band_keys(runs[0], bands, rows)[a] == band_keys(runs[0], bands, rows)[b]
            ).any(1)
            for bands, rows in [(20, 5), (tuned.bands, tuned.rows)]
        }
    for low, high in zip(BINS[:-1], BINS[1:], strict=True):
        inside = (jaccard >= low) & (jaccard < high + (high == 1))
        if not inside.any():
            continue
        j = jaccard[inside]
        theory = np.sqrt(np.mean(j * (1 - j)) / NUM_PERM)
        cells = [f"{low:.1f}-{high:.1f}", f"{inside.sum():,}", f"{theory:.4f}"]
        for scheme in SCHEMES:
            e = errors[scheme][:, inside]
            cells += [f"{e.mean():+.4f}", f"{e.std():.4f}"]
        for bands, rows in [(20, 5), (tuned.bands, tuned.rows)]:
            curve = np.mean(lsh.candidate_probability(j, bands, rows))
            rates = [collide[s][(bands, rows)][inside].mean() for s in SCHEMES]
            cells.append(" / ".join(f"{x:.3f}" for x in [*rates, curve]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def recall(
    sets: ShingleSets, truth: tuple[np.ndarray, np.ndarray], threshold: float, bands: int, rows: int
) -> str:
    """Per scheme: true pairs found by banding + exact verification, of all true pairs."""
    true = set(zip(truth[0].tolist(), truth[1].tolist(), strict=True))
    cells = []
    for scheme in SCHEMES:
        started = time.perf_counter()
        a, b = candidate_pairs(signatures(sets, SignatureSpec(scheme=scheme)), bands, rows)
        verified = exact_jaccard(sets, a, b) >= threshold
        found = set(zip(a[verified].tolist(), b[verified].tolist(), strict=True))
        hit = len(found & true)
        cells.append(
            f"{scheme}: {hit:,} of {len(true):,} ({hit / max(len(true), 1):.4%}), "
            f"{a.size:,} candidates, {time.perf_counter() - started:.1f} s"
        )
    return "; ".join(cells)


def generated(size: str) -> tuple[ShingleSets, tuple[np.ndarray, np.ndarray]]:
    """A bench_pipeline corpus (generated and cached if needed) and its truth at 0.8."""
    name = pipeline.corpus_name(size)
    seed = 20240601
    pipeline.step_corpus(name, seed)
    path, truth_file = pipeline.corpus_path(name, seed), pipeline.truth_path(name, seed)
    if not truth_file.exists():
        pipeline.step_truth(str(path), str(truth_file), 400_000_000)
    truth = np.load(truth_file)
    texts = [normalize(t) for _, t in pipeline.iter_corpus(path)]
    return shingle_sets(texts, SELECTION), (truth["a"], truth["b"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reuters", type=Path, default=pipeline.REUTERS, help=".jsonl.gz")
    parser.add_argument("--seeds", type=int, default=5, help="seeds pooled per scheme")
    parser.add_argument("--sizes", nargs="*", default=[], help="generated corpora, e.g. 100000")
    parser.add_argument("--write-results", action="store_true", help="append to RESULTS.md")
    args = parser.parse_args()
    pipeline.REUTERS = args.reuters  # the generated corpora are made from it too
    rng = np.random.default_rng(20261123)
    started = time.perf_counter()
    texts, titles = load_reuters()
    text_sets = shingle_sets(texts, SELECTION)
    title_sets = shingle_sets(titles, SELECTION)
    out = [
        accuracy_table(text_sets, args.seeds, f"Reuters texts ({len(texts):,})", rng),
        "",
        accuracy_table(title_sets, args.seeds, f"Reuters titles ({len(titles):,}, short)", rng),
        "",
    ]
    tuned = lsh.tune_threshold(NUM_PERM, 0.5).chosen
    for threshold, (bands, rows) in [(0.8, (20, 5)), (0.5, (tuned.bands, tuned.rows))]:
        a, b, _ = similar_pairs(text_sets, threshold)
        out.append(
            f"- Recall at {threshold} on Reuters texts ({bands} x {rows}): "
            + recall(text_sets, (a, b), threshold, bands, rows)
        )
    for size in args.sizes:
        sets, truth = generated(size)
        out.append(f"- Recall at 0.8 on gen{size} (20 x 5): " + recall(sets, truth, 0.8, 20, 5))
        del sets
    out.append(f"\nWhole run: {time.perf_counter() - started:.0f} s.")
    report = "\n".join(out)
    print(report)
    if args.write_results:
        command = f"{os.path.relpath(sys.executable)} {shlex.join(sys.argv)}"
        with pipeline.RESULTS.open("a", encoding="utf-8") as f:
            f.write(
                f"\n## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: signature schemes, accuracy\n\n"
                f"- Machine: nproc {len(os.sched_getaffinity(0))}, load average "
                f"{os.getloadavg()[0]:.1f} at the end (other work on the machine)\n"
                f"- Command: `{command}`\n\n{report}\n"
            )


if __name__ == "__main__":
    main()
