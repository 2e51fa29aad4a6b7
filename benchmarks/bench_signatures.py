"""Benchmark: raw text -> MinHash signatures (char 5-grams, 128 values), simindex vs others.

On the Reuters-21578 corpus ("text" field) it times, in one run and on the same documents:
  * simindex    normalize_batch + sign (what ingest runs: signatures and distinct shingle
                counts without sorted sets), in batches (numba, all cores), after an untimed
                warm-up call so JIT compilation / cache loading is reported separately, under
                scheme simindex-v2 (one-permutation hashing) and simindex-v1 (128 hash
                functions); and normalize_batch + shingle_sets + signatures (the sorted sets
                that exact verification needs, then signing them), under v2;
  * datasketch  normalize + Python 5-gram sets (utf-8 bytes) + MinHash.bulk, per batch;
  * rensa       normalize + Python 5-gram sets + RMinHash.update(list) / digest() per document;
and, on their own, normalize and normalize + Python 5-gram sets (the part datasketch and rensa
share). Documents whose normalized text is empty are dropped, untimed, for every tool.
Each pipeline runs --repeat times in a row and its fastest run is reported (the first run of
a process also pays for fresh memory pages, which a long ingest pays once).
A sanity check compares simindex's Jaccard estimates with exact 5-gram Jaccard on the most
similar pairs of documents that share a title. Peak RSS of the whole run is reported last.

Run from the repository root:
    .venv/bin/python benchmarks/bench_signatures.py                  # print the table
    .venv/bin/python benchmarks/bench_signatures.py --write-results  # also append RESULTS.md
    .venv/bin/python benchmarks/bench_signatures.py --limit 2000     # quick check
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import shlex
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from importlib.metadata import version
from itertools import combinations, islice
from pathlib import Path

import numba
import numpy as np
from datasketch import MinHash
from rensa import RMinHash

from simindex import SignatureSpec, estimate_jaccard, normalize, shingle_sets, signatures
from simindex.pipeline.minhash import sign
from simindex.pipeline.shingle import normalize_batch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "reuters21578.jsonl.gz"
RESULTS = REPO / "benchmarks" / "RESULTS.md"
RESULTS_HEADER = (
    "# Benchmark results\n\nSections appended by `bench_signatures.py --write-results`.\n"
)


def load_docs(path: Path, limit: int | None) -> list[dict]:
    """The first `limit` documents (all if None), minus those whose normalized text is empty."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in islice(f, limit)]
    return [doc for doc in docs if normalize(doc["text"])]


def batches(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def py_shingles(text: str, k: int) -> set[str]:
    """Distinct k-code-point substrings; a text shorter than k is its own single shingle."""
    if len(text) <= k:
        return {text}
    return {text[i : i + k] for i in range(len(text) - k + 1)}


def simindex_pipeline(texts: list[str], spec: SignatureSpec) -> np.ndarray:
    return sign(normalize_batch(texts), spec)[0]


V1 = SignatureSpec(scheme="simindex-v1")


def timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


# Each pipeline takes (texts, spec, batch_size); only simindex and datasketch work per batch.
def run_simindex(texts, spec, size):
    return np.concatenate([simindex_pipeline(batch, spec) for batch in batches(texts, size)])


def run_simindex_v1(texts, spec, size):
    return run_simindex(texts, V1, size)


def run_simindex_sets(texts, spec, size):
    for batch in batches(texts, size):
        signatures(shingle_sets(normalize_batch(batch), spec), spec)


def run_normalize(texts, spec, size):
    for text in texts:
        normalize(text)


def run_shingling(texts, spec, size):
    for text in texts:
        py_shingles(normalize(text), spec.k)


def run_datasketch(texts, spec, size):
    for batch in batches(texts, size):
        shingles = [[s.encode("utf-8") for s in py_shingles(normalize(t), spec.k)] for t in batch]
        MinHash.bulk(shingles, num_perm=spec.num_perm)


def run_rensa(texts, spec, size):
    for text in texts:
        m = RMinHash(num_perm=spec.num_perm, seed=spec.seed)
        m.update(list(py_shingles(normalize(text), spec.k)))
        m.digest()


PIPELINES = [
    ("simindex-v2: normalize_batch + sign (ingest)", run_simindex),
    ("simindex-v1: normalize_batch + sign (ingest)", run_simindex_v1),
    ("simindex-v2: normalize_batch + shingle_sets (sorted) + signatures", run_simindex_sets),
    ("Python: normalize only", run_normalize),
    ("Python: normalize + 5-gram sets (part of both below)", run_shingling),
    ("datasketch 2.0: Python shingling + MinHash.bulk", run_datasketch),
    ("rensa 0.5: Python shingling + RMinHash update/digest", run_rensa),
]


def jaccard_check(docs: list[dict], sigs: np.ndarray, spec: SignatureSpec, num_pairs: int) -> str:
    """simindex estimate vs exact Jaccard on the most similar pairs of same-title documents."""
    groups = defaultdict(list)
    for i, doc in enumerate(docs):
        groups[doc["title"]].append(i)
    pairs = [p for t, group in groups.items() if t.strip() for p in combinations(group, 2)]
    sets = {i: py_shingles(normalize(docs[i]["text"]), spec.k) for pair in pairs for i in pair}
    exact = np.array([len(sets[i] & sets[j]) / len(sets[i] | sets[j]) for i, j in pairs])
    ids = sorted(sets)  # same shingles in both implementations: compare the set sizes
    counts = shingle_sets([normalize(docs[i]["text"]) for i in ids], spec).counts
    same = int(sum(int(c) == len(sets[i]) for i, c in zip(ids, counts, strict=True)))
    top = np.argsort(-exact, kind="stable")[:num_pairs]
    if not len(top):
        return "Jaccard check: no two documents share a title"
    exact, pairs = exact[top], np.array(pairs)[top]
    diff = estimate_jaccard(sigs[pairs[:, 0]], sigs[pairs[:, 1]]) - exact
    theory_var = exact * (1 - exact) / spec.num_perm
    return (
        f"Jaccard check ({len(top)} most similar same-title pairs, exact J "
        f"{exact.min():.3f}..{exact.max():.3f}, {int((exact == 1).sum())} with J = 1): "
        f"mean |est - exact| = {np.abs(diff).mean():.4f}, mean(est - exact) = {diff.mean():+.4f}, "
        f"sd(est - exact) = {diff.std():.4f}; theoretical sd sqrt(J(1-J)/{spec.num_perm}): "
        f"mean over pairs {np.sqrt(theory_var).mean():.4f}, root-mean-square "
        f"{np.sqrt(theory_var.mean()):.4f}. Shingle counts, Python == simindex: "
        f"{same}/{len(ids)} documents"
    )


def machine_info() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
        platform.processor() or "unknown",
    )
    meminfo = Path("/proc/meminfo").read_text().split()
    ram_gib = int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20
    return (
        f"nproc {len(os.sched_getaffinity(0))}, {model}, {ram_gib:.1f} GiB RAM, "
        f"numba threads {numba.get_num_threads()}"
    )


def versions() -> str:
    pkgs = ["simindex", "numpy", "numba", "datasketch", "rensa"]
    return f"Python {platform.python_version()}, " + ", ".join(f"{p} {version(p)}" for p in pkgs)


def table(rows: list[tuple[str, float]], n_docs: int, reference: float) -> str:
    lines = ["| pipeline | seconds | docs/s | simindex-v2 docs/s ÷ this |", "|---|---:|---:|---:|"]
    for name, secs in rows:
        lines.append(f"| {name} | {secs:.2f} | {n_docs / secs:,.0f} | {secs / reference:.1f}× |")
    return "\n".join(lines)


def append_results(report: str, corpus: str) -> None:
    """Append a dated section (machine, versions, command, report) to RESULTS.md."""
    if not RESULTS.exists():
        RESULTS.write_text(RESULTS_HEADER, encoding="utf-8")
    command = f"{os.path.relpath(sys.executable)} {shlex.join(sys.argv)}"
    with RESULTS.open("a", encoding="utf-8") as f:
        f.write(
            f"\n## {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: signature throughput\n\n"
            f"- Machine: {machine_info()}\n- Versions: {versions()}\n- Corpus: {corpus}\n"
            f"- Command: `{command}`\n\n{report}\n"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="JSON lines, .gz")
    parser.add_argument("--limit", type=int, default=None, help="only the first N documents")
    parser.add_argument("--batch-size", type=int, default=5000, help="documents per batch")
    parser.add_argument("--pairs", type=int, default=500, help="pairs in the Jaccard check")
    parser.add_argument("--repeat", type=int, default=3, help="runs per pipeline (best kept)")
    parser.add_argument("--write-results", action="store_true", help="append to RESULTS.md")
    args = parser.parse_args()
    if not args.corpus.is_file():
        sys.exit(f"corpus not found: {args.corpus} (pass --corpus PATH to a .jsonl.gz file)")

    spec = SignatureSpec()
    docs = load_docs(args.corpus, args.limit)
    texts = [doc["text"] for doc in docs]
    n = len(texts)
    print(f"{n:,} non-empty documents, {sum(map(len, texts)):,} characters; {spec.describe()}")

    warmup, _ = timed(simindex_pipeline, texts[:8], spec)
    simindex_pipeline(texts[:8], V1)
    rows, sigs = [], None
    for name, run in PIPELINES:
        secs, out = min(
            (timed(run, texts, spec, args.batch_size) for _ in range(args.repeat)),
            key=lambda run_result: run_result[0],
        )
        rows.append((name, secs))
        sigs = out if run is run_simindex else sigs

    report = "\n".join(
        [
            table(rows, n, rows[0][1]),
            "",
            f"Seconds: the fastest of {args.repeat} runs of each pipeline.",
            f"simindex warm-up on 8 documents (numba JIT or cache load, untimed): {warmup:.2f} s",
            jaccard_check(docs, sigs, spec, args.pairs),
            f"Peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB",
        ]
    )
    print(report)
    if args.write_results:
        append_results(
            report, f"{args.corpus.name}, {n:,} non-empty documents, batch size {args.batch_size:,}"
        )
        print(f"appended to {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
