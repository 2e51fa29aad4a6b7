"""Benchmark: the two signature schemes, simindex-v1 (128 hash functions) against simindex-v2
(one hash per shingle into 128 bins), on the whole dedup job.

For each scheme, ``simindex dedup CORPUS --scheme SCHEME`` on a generated corpus
(benchmarks/corpus.py) into a temporary SQLite index: wall time and peak RSS of the command,
then precision and recall of the documents it removed against the exact ground truth (as
bench_peers.py scores them). Both schemes verify candidates by exact Jaccard, so they differ
in speed and in the candidates they find (recall), not in precision.

Run from the repository root:
    python benchmarks/bench_schemes.py
    python benchmarks/bench_schemes.py --sizes 20000 100000 --results
"""

from __future__ import annotations

import argparse
import json
import tempfile

import corpus
import measure

TITLE = "Schemes: simindex-v1 against simindex-v2 (bench_schemes.py)"
SCHEMES = ["simindex-v1", "simindex-v2"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="+", default=["20000"], help="documents, or 'reuters'")
    parser.add_argument("--results", action="store_true", help="write the table to RESULTS.md")
    args = parser.parse_args()
    measure.warm_up()
    rows = []
    for size in args.sizes:
        path, truth = corpus.prepared(size)
        ids = [id_ for id_, _ in corpus.documents(path)]
        for scheme in SCHEMES:
            with tempfile.TemporaryDirectory() as work:
                kept_file = f"{work}/kept.jsonl"
                done = measure.simindex("dedup", str(path), "-o", kept_file, "--scheme", scheme)
                with open(kept_file, encoding="utf-8") as f:
                    kept = {json.loads(line)["id"] for line in f}
            removed = {row for row, id_ in enumerate(ids) if id_ not in kept}
            quality = corpus.dedup_quality(removed, truth, len(ids))
            rows.append(
                [
                    f"{len(ids):,}",
                    scheme,
                    f"{done.seconds:.1f}",
                    f"{done.peak_rss_mib:.0f}",
                    f"{quality['precision']:.4f}",
                    f"{quality['recall']:.4f}",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
    header = ["documents", "scheme", "dedup wall s", "peak RSS MiB", "precision", "recall"]
    body = measure.table(header, rows)
    print("\n" + body)
    if args.results:
        measure.write_section(TITLE, body)


if __name__ == "__main__":
    main()
