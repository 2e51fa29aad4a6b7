"""Benchmark: the same dedup on local Spark, against the CLI's, with the kept sets compared.

On a generated corpus (benchmarks/corpus.py): ``simindex dedup CORPUS -o kept.jsonl`` (a
temporary SQLite index) and ``simindex spark dedup CORPUS --out DIR --master local[N]``, each
its own process timed from outside with its start-up (Spark's: the JVM's too). Peak RSS is
the largest process's (for Spark, the driver's, the JVM's or a Python worker's, whichever is
largest; the sum over them is higher). The documents each kept must be the same set.

Needs the spark extra (pyspark) and Java 17.

Run from the repository root:
    python benchmarks/bench_spark.py
    python benchmarks/bench_spark.py --sizes 100000 400000 --master 'local[8]' --results
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import corpus
import measure

TITLE = "Spark: dedup on local Spark against the CLI (bench_spark.py)"


def spark_kept(out: Path) -> set[str]:
    import pyarrow.dataset as ds

    return set(
        ds.dataset(out / "kept", format="parquet").to_table(columns=["id"])["id"].to_pylist()
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000], help="documents")
    parser.add_argument("--master", default=f"local[{os.cpu_count() or 1}]", help="Spark master")
    parser.add_argument("--results", action="store_true", help="write the table to RESULTS.md")
    args = parser.parse_args()
    measure.warm_up()
    rows = []
    for size in args.sizes:
        path = corpus.corpus(size)
        with tempfile.TemporaryDirectory() as work:
            kept_file = Path(work) / "kept.jsonl"
            cli = measure.simindex("dedup", str(path), "-o", str(kept_file))
            with kept_file.open(encoding="utf-8") as f:
                cli_kept = {json.loads(line)["id"] for line in f}
            out = Path(work) / "spark"
            spark = measure.simindex(
                "spark", "dedup", str(path), "--out", str(out), "--master", args.master
            )
            kept = spark_kept(out)
        same = "yes" if kept == cli_kept else f"no ({len(kept ^ cli_kept):,} differ)"
        for name, done, count in (("`simindex dedup`", cli, len(cli_kept)),
                                  (f"`simindex spark dedup` ({args.master})", spark, len(kept))):  # fmt: skip
            rows.append([f"{size:,}", name, f"{done.seconds:.1f}", f"{done.peak_rss_mib:.0f}",
                         f"{count:,}", same])  # fmt: skip
            print(" | ".join(rows[-1]), flush=True)
    header = ["documents", "command", "wall s", "peak RSS MiB", "kept", "same kept set"]
    body = measure.table(header, rows)
    print("\n" + body)
    if args.results:
        measure.write_section(TITLE, body)


if __name__ == "__main__":
    main()
