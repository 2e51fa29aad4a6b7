"""Benchmark: the whole deduplication job, simindex against the tools a user would otherwise
pick (datasketch, rensa, text-dedup, datatrove), on the same corpus.

Each tool reads the corpus file (benchmarks/corpus.py: JSON lines, gzip) and removes its
near-duplicates at similarity 0.8, keeping one document per cluster, in a process of its
own, timed from outside with its start-up; its peak RSS is ``ru_maxrss`` of that process (or
of its largest worker process, for the tools that start workers). Then the documents it
removed are scored against the exact ground truth (every pair with Jaccard >= 0.8 of
character 5-grams, computed once per corpus and cached): precision is the share of removed
documents that have a true near-duplicate; recall the share of the removals an exact
deduplication makes (k - 1 of each group of k true near-duplicates) that the tool made.

  simindex      ``simindex dedup CORPUS -o kept.jsonl`` (a temporary SQLite index; candidates
                verified by exact Jaccard)
  simindex-pg   the same with ``--db`` a fresh PostgreSQL database
  datasketch    ``MinHash.bulk`` of Python 5-gram sets of ``simindex.normalize(text)``,
                ``MinHashLSH(threshold=0.8, num_perm=128)``, a query per document, candidates
                kept where the MinHash estimate is >= 0.8, connected components
  rensa         the same shingles, ``RMinHash`` and ``RMinHashLSH`` with 20 bands x 5 rows
                (num_perm 100: rensa needs it divisible by the bands), the same verification
  text-dedup    ``python -m text_dedup.minhash`` (word 5-grams, threshold 0.8, 128
                permutations; no verification)
  datatrove     its four MinHash stages (signatures, buckets, clusters, filter) with its
                defaults (word 5-grams, 14 buckets x 8 hashes; no verification; sha1 as
                the hash, its xxhash failing on str) on local executors, a worker per core

A tool that is not installed is skipped with a note. text-dedup pins libraries (datasets,
rich, urllib3) that may clash with simindex's, so it can live in a virtual environment of
its own: ``--text-dedup-python /path/to/venv/bin/python``.

Run from the repository root (the peers: ``pip install datasketch rensa datatrove``):
    python benchmarks/bench_peers.py                           # Reuters as it is (~20k docs)
    python benchmarks/bench_peers.py --sizes reuters 100000 --results
    python benchmarks/bench_peers.py --tools simindex datasketch --sizes 20000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import corpus
import measure
import numpy as np

TOOLS = ["simindex", "simindex-pg", "datasketch", "rensa", "text-dedup", "datatrove"]
TITLE = "Peers: the whole dedup job (bench_peers.py)"
BATCH = 5_000


# -- the in-memory peers, run in a child process (``--run-peer``) ----------------------------


def shingles(text: str, k: int = 5) -> set[str]:
    """simindex's shingles: distinct k-character substrings of the normalized text."""
    from simindex import normalize

    text = normalize(text)
    if len(text) <= k:
        return {text}
    return {text[i : i + k] for i in range(len(text) - k + 1)}


def batches(path: Path):
    batch: list[str] = []
    for _, text in corpus.documents(path):
        batch.append(text)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def removed_by_estimate(signatures: np.ndarray, candidates: set[tuple[int, int]]) -> list[int]:
    """Keep the candidate pairs whose MinHash estimate is >= the threshold, join them into
    components and remove all but the earliest document of each."""
    pairs = np.array(sorted(candidates), np.int64).reshape(-1, 2)
    similar = np.mean(signatures[pairs[:, 0]] == signatures[pairs[:, 1]], axis=1)
    kept = pairs[similar >= corpus.THRESHOLD]
    component = corpus.components(kept, len(signatures))
    return np.flatnonzero(component != np.arange(len(signatures))).tolist()


def run_datasketch(path: Path) -> list[int]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=corpus.THRESHOLD, num_perm=128)
    minhashes: list = []
    for batch in batches(path):
        sets = [[s.encode() for s in shingles(t)] for t in batch]
        signed = MinHash.bulk(sets, num_perm=128)
        with lsh.insertion_session() as session:
            for key, minhash in enumerate(signed, start=len(minhashes)):
                session.insert(key, minhash, check_duplication=False)
        minhashes.extend(signed)
    candidates = {(i, j) for i, m in enumerate(minhashes) for j in lsh.query(m) if j > i}
    return removed_by_estimate(np.stack([m.hashvalues for m in minhashes]), candidates)


def run_rensa(path: Path) -> list[int]:
    from rensa import RMinHash, RMinHashLSH

    lsh = RMinHashLSH(threshold=corpus.THRESHOLD, num_perm=100, num_bands=20)
    minhashes: list = []
    for batch in batches(path):
        signed = RMinHash.from_token_sets([list(shingles(t)) for t in batch], num_perm=100, seed=1)
        lsh.insert_many(signed, start_key=len(minhashes))
        minhashes.extend(signed)
    candidates = {(i, j) for i, keys in enumerate(lsh.query_all(minhashes)) for j in keys if j > i}
    signatures = np.array([m.digest() for m in minhashes], dtype=np.uint32)
    return removed_by_estimate(signatures, candidates)


def run_datatrove(path: Path, work: Path) -> list[int]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    # Its default hash (xxhash) fails on str with xxhash 4 ("Strings must be encoded"): sha1.
    config = MinhashConfig(hash_config=HashConfig(hash_fc="sha1"))
    logs, cores = str(work / "logs"), os.cpu_count() or 1

    def reader() -> JsonlReader:
        return JsonlReader(str(path.parent), glob_pattern=path.name, doc_progress=False)

    stages = [
        ([reader(), MinhashDedupSignature(str(work / "signatures"), config=config)], 1),
        (
            [MinhashDedupBuckets(str(work / "signatures"), str(work / "buckets"), config=config)],
            config.num_buckets,
        ),
        ([MinhashDedupCluster(str(work / "buckets"), str(work / "remove"), config=config)], 1),
        ([reader(), MinhashDedupFilter(str(work / "remove")), JsonlWriter(str(work / "kept"))], 1),
    ]
    for number, (pipeline, tasks) in enumerate(stages):
        LocalPipelineExecutor(
            pipeline=pipeline,
            tasks=tasks,
            workers=min(tasks, cores),
            logging_dir=f"{logs}/{number}",
            skip_completed=False,
        ).run()
    kept = {
        json.loads(line)["id"]
        for file in (work / "kept").glob("*.jsonl.gz")
        for line in _gzip_lines(file)
    }
    return [row for row, (id_, _) in enumerate(corpus.documents(path)) if id_ not in kept]


def _gzip_lines(path: Path):
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as f:
        yield from f


PEERS_IN_PROCESS = {"datasketch": run_datasketch, "rensa": run_rensa, "datatrove": run_datatrove}
MODULES = {"datasketch": "datasketch", "rensa": "rensa", "datatrove": "datatrove"}


def run_peer(tool: str, path: Path, work: Path) -> None:
    runner = PEERS_IN_PROCESS[tool]
    removed = runner(path, work) if tool == "datatrove" else runner(path)
    np.save(work / "removed.npy", np.array(removed, np.int64))


# -- the parent: one measured process per tool ------------------------------------------------


def kept_rows(kept_ids: set[str], path: Path) -> list[int]:
    return [row for row, (id_, _) in enumerate(corpus.documents(path)) if id_ not in kept_ids]


def text_dedup_kept(output: Path) -> set[str]:
    """The ids of the records text-dedup kept (its output is a saved Hugging Face dataset:
    Arrow stream files)."""
    import pyarrow as pa

    kept: set[str] = set()
    for file in sorted(output.glob("*.arrow")):
        with pa.memory_map(str(file)) as source:
            kept.update(pa.ipc.open_stream(source).read_all().column("id").to_pylist())
    return kept


def measure_tool(tool: str, path: Path, work: Path, args: argparse.Namespace) -> dict:
    """Run one tool on the corpus; its Measured figures and the rows it removed."""
    if tool in PEERS_IN_PROCESS:
        command = [sys.executable, __file__, "--run-peer", tool, str(path), str(work)]
        done = measure.run(command)
        return {"measured": done, "removed": set(np.load(work / "removed.npy").tolist())}
    if tool == "text-dedup":
        output = work / "kept"
        done = measure.run(
            [
                args.text_dedup_python, "-m", "text_dedup.minhash", "--path", "json",
                "--data_files", str(path), "--split", "train", "--cache_dir",
                str(work / "cache"), "--output", str(output), "--column", "text",
                "--threshold", str(corpus.THRESHOLD), "--num_perm", "128", "--ngram", "5",
                "--min_length", "0", "--num_proc", str(os.cpu_count() or 1),
            ]
        )  # fmt: skip
        return {"measured": done, "removed": set(kept_rows(text_dedup_kept(output), path))}
    kept_file = work / "kept.jsonl"
    if tool == "simindex-pg":
        with measure.postgres_database(args.pg_url, "bench_peers") as url:
            done = measure.simindex("dedup", str(path), "-o", str(kept_file), "--db", url)
    else:
        done = measure.simindex("dedup", str(path), "-o", str(kept_file))
    kept = {json.loads(line)["id"] for line in kept_file.open(encoding="utf-8")}
    return {"measured": done, "removed": set(kept_rows(kept, path))}


def missing(tool: str, args: argparse.Namespace) -> str | None:
    """Why ``tool`` cannot run here, or None."""
    if tool in MODULES and importlib.util.find_spec(MODULES[tool]) is None:
        return f"{tool} is not installed (pip install {tool})"
    if tool == "text-dedup":
        probe = [args.text_dedup_python, "-c", "import text_dedup.minhash"]
        if subprocess.run(probe, capture_output=True).returncode != 0:
            return "text-dedup is not installed for --text-dedup-python (pip install text-dedup)"
    if tool == "simindex-pg" and measure.postgres_version(args.pg_url) is None:
        return f"no PostgreSQL at {args.pg_url}"
    return None


def bench(size: str, args: argparse.Namespace) -> tuple[str, list[str]]:
    """The table of one corpus and the notes on the tools skipped."""
    print(f"{size}: the corpus and its exact ground truth ...", flush=True)
    path, truth = corpus.prepared(size)
    docs = sum(1 for _ in corpus.documents(path))
    rows, notes = [], []
    for tool in args.tools:
        reason = missing(tool, args)
        if reason:
            print(f"  {tool}: skipped, {reason}")
            notes.append(f"{tool} skipped: {reason}.")
            continue
        work = Path(tempfile.mkdtemp(prefix=f"bench_peers_{tool}_"))
        try:
            result = measure_tool(tool, path, work, args)
        except RuntimeError as error:
            print(f"  {tool}: FAILED {error}")
            notes.append(f"{tool} failed: {str(error).splitlines()[-1][:200]}")
            continue
        finally:
            shutil.rmtree(work, ignore_errors=True)
        done = result["measured"]
        quality = corpus.dedup_quality(result["removed"], truth, docs)
        rows.append(
            [
                tool,
                f"{done.seconds:.1f}",
                f"{done.peak_rss_mib:,.0f}",
                f"{quality['removed']:,}",
                f"{quality['precision']:.4f}",
                f"{quality['recall']:.4f}",
            ]
        )
        print(f"  {' | '.join(rows[-1])}", flush=True)
    header = ["tool", "wall s", "peak RSS MiB", "removed", "precision", "recall"]
    caption = (
        f"### {size if size == 'reuters' else f'{int(size):,} generated'} documents "
        f"({docs:,}; {len(truth):,} true pairs, {quality_should(truth, docs):,} documents an "
        "exact dedup removes)"
    )
    return caption + "\n\n" + measure.table(header, rows), notes


def quality_should(truth: np.ndarray, docs: int) -> int:
    return corpus.dedup_quality(set(), truth, docs)["should_remove"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", nargs="+", default=["reuters"],
        help="corpora: 'reuters' (the stories as they are) or numbers of documents",
    )  # fmt: skip
    parser.add_argument("--tools", nargs="+", default=TOOLS, choices=TOOLS)
    parser.add_argument("--pg-url", default=measure.DEFAULT_PG, help="PostgreSQL (CREATE DATABASE)")
    parser.add_argument(
        "--text-dedup-python", default=sys.executable,
        help="the Python that has text-dedup installed (default: this one)",
    )  # fmt: skip
    parser.add_argument("--results", action="store_true", help="write the tables to RESULTS.md")
    parser.add_argument("--run-peer", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_peer:
        tool, path, work = args.run_peer
        run_peer(tool, Path(path), Path(work))
        return
    measure.warm_up()
    sections, notes = [], []
    for size in args.sizes:
        text, skipped = bench(size, args)
        sections.append(text)
        notes += [n for n in skipped if n not in notes]
    body = "\n\n".join(sections + ([" ".join(notes)] if notes else []))
    print("\n" + body)
    if args.results:
        measure.write_section(TITLE, body, args.pg_url)


if __name__ == "__main__":
    main()
