"""Benchmark: how each part of `simindex dedup` after clustering grows with the corpus.

`dedup` is ingest, pairs and clusters (bench_scale times each as its own command), then two
passes the other commands do not make: the kept records (the input read again, each batch's
ids looked up among the clustered duplicates, the rest written out) and the dropped list (every
clustered document with its representative and their similarity). This script builds one index
per --sizes corpus (bench_scale's generated corpora: `ingest`, `pairs`, `clusters`), then
times these parts, each in its own process and the sizes interleaved part by part:

- ``read``: the input read as `dedup` reads it the second time, records counted;
- ``kept``: the same, each batch's ids asked of ``Index.clustered_duplicates`` (``read`` +
  the look-ups);
- ``kept_written``: ``kept`` written as `dedup` writes it (JSON lines);
- ``listing``: the clustered documents as ``Store.iter_clusters`` lists them (with the
  stored similarity of those paired with their representative), nothing else;
- ``dropped``: ``Index.clusters()`` as `dedup` uses it (``listing`` + the similarity of the
  members paired with their representative only through another member), the
  non-representatives written as the CSV it writes;
- ``dedup``: the whole command, of the corpus into a fresh index, and the wall time it spent
  in each Index method it calls (``add`` is the indexing, ``clusters`` the dropped list's
  look-ups; the rest is reading the input the second time and writing), with the process's
  peak RSS so far (MiB) when each last returned: where its time and memory go when the
  stages run in one process, one after the other.

The ratio column is the time at the largest size ÷ the smallest. Disk: bench_scale's
figures for one index per size (~2.7 KB per document on SQLite, ~4.1 KB on PostgreSQL), plus
the kept records (~the corpus, uncompressed) while ``kept_written`` runs.

The measured code is a snapshot of git HEAD (bench_scale.use_code; --live: the working
tree), its kernels compiled before the first step.

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    .venv/bin/python benchmarks/bench_dedup_parts.py --backend sqlite [--write-results]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import (  # noqa: E402
    DATA,
    DEFAULT_PG,
    corpus_name,
    corpus_path,
    finish,
    host,
    maxrss_mib,
    pg_admin,
)
from bench_scale import SEED, SIMINDEX, Database, run_step, use_code  # noqa: E402

PARTS = ["read", "kept", "kept_written", "listing", "dropped", "dedup"]
# The Index methods `dedup` calls, timed inside the whole command by the ``dedup`` part.
STAGES = ["add", "find_pairs", "cluster", "clustered_duplicates", "clusters"]


def timed_dedup(corpus: str, url: str) -> str:
    """The whole `simindex dedup` of ``corpus`` into a fresh index at ``url``, with the wall
    seconds spent in each Index method it calls (a generator's: in its steps) and the process's
    peak RSS so far when each last returned (so where the peak was reached)."""
    import functools

    from simindex import Index
    from simindex.cli import app

    spent = dict.fromkeys(STAGES, 0.0)
    peak = dict.fromkeys(STAGES, 0.0)

    def timing(name, method):
        @functools.wraps(method)
        def call(*args, **kwargs):
            started = time.perf_counter()
            result = method(*args, **kwargs)
            spent[name] += time.perf_counter() - started
            if name == "clusters":
                return steps_timed(name, result)
            peak[name] = maxrss_mib()
            return result

        return call

    def steps_timed(name, rows):
        while True:
            started = time.perf_counter()
            row = next(rows, None)
            spent[name] += time.perf_counter() - started
            if row is None:
                peak[name] = maxrss_mib()
                return
            yield row

    for name in STAGES:
        setattr(Index, name, timing(name, getattr(Index, name)))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=DATA) as scratch:
        out = str(Path(scratch) / "kept.jsonl")
        app(["dedup", corpus, "-o", out, "--db", url], standalone_mode=False)
    whole = time.perf_counter() - started
    rest = whole - sum(spent.values())
    stages = ", ".join(f"{k} {spent[k]:.1f} s (peak {peak[k]:.0f})" for k in STAGES)
    return f"{stages}, the rest {rest:.1f} s"


def part(name: str, corpus: str, url: str) -> str:
    """Run one part on the index at ``url``; what it counted."""
    from simindex import Index
    from simindex.cli import _kept, _records_of
    from simindex.io.writers import write_records

    if name == "dedup":
        return timed_dedup(corpus, url)
    records = _records_of([corpus], "jsonl", "id", "text", "utf-8")
    with Index.open(url) as index:
        if name == "read":
            return f"{sum(1 for _ in records):,} records"
        if name in ("kept", "kept_written"):
            kept = _kept(records, "id", index, once=False)
            if name == "kept":
                return f"{sum(1 for _ in kept):,} kept"
            with tempfile.TemporaryDirectory(dir=DATA) as scratch:
                out = str(Path(scratch) / "kept.jsonl")
                return f"{write_records(kept, ['id', 'text'], 'jsonl', out):,} written"
        if name == "listing":
            with index._transaction() as connection:
                active = index._active_banding(connection)["id"]
                rows = index._store.iter_clusters(connection, active)
                return f"{sum(1 for _ in rows):,} clustered"
        rows = (
            {"id": r.external_id, "representative": r.cluster, "similarity": r.similarity}
            for r in index.clusters()
            if not r.is_representative
        )
        with tempfile.TemporaryDirectory(dir=DATA) as scratch:
            out = str(Path(scratch) / "dropped.csv")
            fields = ["id", "representative", "similarity"]
            return f"{write_records(rows, fields, 'csv', out):,} dropped"


def built(backend: str, name: str, pg: str, sqlite_dir: Path) -> bool:
    """Whether a kept index of that name exists (made by an earlier run with --keep)."""
    if backend == "sqlite":
        return (sqlite_dir / f"{name}.db").exists()
    with pg_admin(pg) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return found is not None


def flushed(backend: str, pg: str) -> None:
    """Dirty pages written out before a timed part, so none pays for another's writes."""
    os.sync()
    if backend == "pg":
        with pg_admin(pg) as conn:
            conn.execute("CHECKPOINT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=[400_000, 4_000_000])
    parser.add_argument("--backend", choices=["sqlite", "pg"], default="sqlite")
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    parser.add_argument("--sqlite-dir", type=Path, default=DATA)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS)
    parser.add_argument("--keep", action="store_true", help="keep the indexes (and reuse them)")
    parser.add_argument("--live", action="store_true", help="the working tree, not git HEAD")
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(part(*args.child), file=sys.stderr)
        return
    started = datetime.now(UTC)
    code = use_code(args.live)
    indexes = {}
    for size in args.sizes:
        corpus = corpus_path(corpus_name(str(size)), SEED)
        if not corpus.exists():
            sys.exit(f"{corpus} is missing: generate it with bench_scale.py (its `corpus` step)")
        name = f"dedup_parts_{args.backend}_{size}"
        if args.keep and built(args.backend, name, args.pg_url, args.sqlite_dir):
            db = Database(args.backend, name, args.pg_url, args.sqlite_dir, fresh=False)
        else:
            db = Database(args.backend, name, args.pg_url, args.sqlite_dir)
            on = ["--db", db.url]
            for step in (
                ["ingest", str(corpus)],
                ["pairs", "--top", "0"],
                ["clusters", "--top", "0"],
            ):
                flushed(args.backend, args.pg_url)
                if not run_step(f"{step[0]} ({size:,})", [*SIMINDEX, *step, *on])["ok"]:
                    sys.exit(f"{step[0]} failed")
        indexes[size] = (db, str(corpus))
    times: dict[str, dict[int, dict]] = {p: {} for p in args.parts}
    for name in args.parts:
        for size, (db, corpus) in indexes.items():
            flushed(args.backend, args.pg_url)
            target = db
            if name == "dedup":
                target = Database(args.backend, f"{db.name}_dedup", args.pg_url, args.sqlite_dir)
            command = [sys.executable, __file__, "--child", name, corpus, target.url]
            times[name][size] = run_step(f"{name} ({size:,})", command)
            if target is not db:
                target.drop()
    if not args.keep:
        for db, _ in indexes.values():
            db.drop()
    small, large = min(args.sizes), max(args.sizes)
    lines = [
        f"## dedup after clustering, part by part ({args.backend}, bench_dedup_parts.py)",
        "",
        "Each cell: wall seconds / CPU seconds of the part's process / peak RSS MiB, and what "
        "it counted; each part ran at every size before the next part.",
        "",
        "| part | " + " | ".join(f"{s:,}" for s in args.sizes) + f" | {large:,} ÷ {small:,} |",
        "|---|" + "---|" * (len(args.sizes) + 1),
    ]
    for name in args.parts:
        cells = [
            f"{r['seconds']:.1f} s / {r['cpu_seconds']:.1f} s / {r['peak_rss_mib']:.0f} MiB "
            f"({(r['summary'] or ['?'])[0]})"
            for r in (times[name][s] for s in args.sizes)
        ]
        ratio = times[name][large]["seconds"] / times[name][small]["seconds"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio:.1f}x |")
    lines += [
        "",
        f"Run {started:%Y-%m-%d %H:%M} - {datetime.now(UTC):%H:%M} UTC, code "
        f"{code['code']}. Machine: {host()}. Command: "
        f"`.venv/bin/python benchmarks/bench_dedup_parts.py --backend {args.backend} "
        f"--sizes {' '.join(map(str, args.sizes))} --parts {' '.join(args.parts)}`.",
    ]
    finish("\n".join(lines) + "\n", args.write_results)


if __name__ == "__main__":
    main()
