"""Benchmark: signing throughput, raw text to 128 MinHash values (character 5-grams), simindex
against datasketch and rensa, in documents per second.

On one corpus (benchmarks/corpus.py; by default Reuters as it is), in batches of 5,000:

  simindex     ``simindex.normalize`` of each text, ``simindex.shingle_sets`` and
               ``simindex.signatures`` (numba, all cores), for each signature scheme
  datasketch   the same normalization, Python sets of 5-grams, ``MinHash.bulk``
  rensa        the same normalization and sets, ``RMinHash.from_token_sets``

Each pipeline runs --repeat times and its fastest run counts; simindex's kernels are
compiled (or loaded from their cache) by an untimed call first. A peer that is not installed
is skipped.

Run from the repository root:
    python benchmarks/bench_signatures.py
    python benchmarks/bench_signatures.py --size 100000 --results
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from collections.abc import Callable

import corpus
import measure

TITLE = "Signatures: signing throughput (bench_signatures.py)"
BATCH = 5_000
K = 5


def python_shingles(text: str) -> set[str]:
    if len(text) <= K:
        return {text}
    return {text[i : i + K] for i in range(len(text) - K + 1)}


def simindex_signer(scheme: str) -> Callable[[list[str]], object]:
    from simindex import SignatureSpec, normalize, shingle_sets, signatures

    spec = SignatureSpec(scheme=scheme)

    def sign(texts: list[str]) -> object:
        return signatures(shingle_sets([normalize(t) for t in texts], spec), spec)

    return sign


def datasketch_signer() -> Callable[[list[str]], object]:
    from datasketch import MinHash

    from simindex import normalize

    def sign(texts: list[str]) -> object:
        sets = [[s.encode() for s in python_shingles(normalize(t))] for t in texts]
        return MinHash.bulk(sets, num_perm=128)

    return sign


def rensa_signer() -> Callable[[list[str]], object]:
    from rensa import RMinHash

    from simindex import normalize

    def sign(texts: list[str]) -> object:
        sets = [list(python_shingles(normalize(t))) for t in texts]
        return RMinHash.from_token_sets(sets, num_perm=128, seed=1)

    return sign


SIGNERS = {
    "simindex (simindex-v2)": (None, lambda: simindex_signer("simindex-v2")),
    "simindex (simindex-v1)": (None, lambda: simindex_signer("simindex-v1")),
    "datasketch (MinHash.bulk)": ("datasketch", datasketch_signer),
    "rensa (RMinHash)": ("rensa", rensa_signer),
}


def fastest(sign: Callable[[list[str]], object], batches: list[list[str]], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for batch in batches:
            sign(batch)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="reuters", help="'reuters' or a number of documents")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the fastest counts")
    parser.add_argument("--results", action="store_true", help="write the table to RESULTS.md")
    args = parser.parse_args()
    texts = [text for _, text in corpus.documents(corpus.corpus(args.size))]
    batches = [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]
    rows, notes = [], []
    for name, (module, make) in SIGNERS.items():
        if module and importlib.util.find_spec(module) is None:
            notes.append(f"{name} skipped: {module} is not installed.")
            continue
        sign = make()
        sign(texts[:100])  # untimed: numba compiles or loads its kernels here
        seconds = fastest(sign, batches, args.repeat)
        rows.append([name, f"{seconds:.2f}", f"{len(texts) / seconds:,.0f}"])
        print(" | ".join(rows[-1]), flush=True)
    header = ["signer", "seconds", "documents / s"]
    body = f"{len(texts):,} documents ({args.size}), 128 values each, best of {args.repeat}.\n\n"
    body += measure.table(header, rows) + ("\n\n" + " ".join(notes) if notes else "")
    print("\n" + body)
    if args.results:
        measure.write_section(TITLE, body)


if __name__ == "__main__":
    main()
