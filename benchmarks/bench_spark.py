"""Benchmark: the near-duplicate job on Spark (local[1], local[2]) against the single process,
and the Spark ingest into PostgreSQL against ``Index.add``.

Corpus: bench_pipeline.py's generator (N documents from Reuters-21578, ~15% edited copies,
cached in benchmarks/data/), written as S plain JSON-lines shards of ``id`` and ``text`` (Spark
reads one file per task, so a corpus is sharded to run in parallel). Steps, each a fresh
process whose process tree (driver, JVM, Python workers) is sampled from /proc every 0.2 s:

  * single: what ``simindex dedup`` runs, through the library: ``Index.add`` of the shards
    into a scratch SQLite file (text kept), ``find_pairs(0.8)`` (exact verification),
    ``cluster()``; the dropped documents are the non-representatives of ``clusters()``;
  * spark-dedup local[1] / local[2]: ``simindex spark dedup SHARDS --out DIR --master ...``,
    with Spark's event log on: the time of each Spark stage (submission to completion) and
    the tasks' executor CPU time;
  * pg-index: ``Index.add`` of the shards into a fresh PostgreSQL database (text kept);
  * spark-ingest local[2]: ``simindex spark ingest SHARDS --db ... --master local[2]`` into
    another fresh database.

Checks: the pairs (id_a, id_b) and the dropped documents with their representatives of the
three dedup runs are identical; the two PostgreSQL indexes hold the same documents under the
same ids with the same signatures and band keys (a digest of each table). Peak memory is the
largest sum of the tree's RSS seen in a sample, by role (driver Python, JVM, Python workers)
and in all; CPU seconds are the tree's (user + system, from /proc). Parallel efficiency:
(local[1] seconds / local[2] seconds) / 2. The machine's other load (CPU used by processes
outside the tree, PostgreSQL excluded) is measured during every step.

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    .venv/bin/python benchmarks/bench_spark.py --docs 20000                 # smoke run
    .venv/bin/python benchmarks/bench_spark.py --docs 1000000 --write-results
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_pipeline as pipeline  # noqa: E402 (the sibling script, for its corpus generator)

REPO = pipeline.REPO
DATA = pipeline.DATA
RESULTS = pipeline.RESULTS
THRESHOLD = pipeline.THRESHOLD
SAMPLE_SECONDS = 0.2
SHOWN_STAGES = 4  # the longest Spark stages named in the report
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


# -- the corpus as shards ----------------------------------------------------------------------


def shards(docs: int, count: int, seed: int) -> Path:
    """The generated corpus of ``docs`` documents as ``count`` JSON-lines shards (cached)."""
    name = pipeline.corpus_name(str(docs))
    folder = DATA / f"{name}_seed{seed}_v{pipeline.GENERATOR_VERSION}_shards{count}"
    if folder.exists():
        return folder
    if not pipeline.corpus_path(name, seed).exists():
        pipeline.step_corpus(name, seed)
    scratch = folder.with_suffix(".tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    files = [(scratch / f"part-{i:04d}.jsonl").open("w", encoding="utf-8") for i in range(count)]
    per_shard = -(-docs // count)
    with gzip.open(pipeline.corpus_path(name, seed), "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines):
            doc = json.loads(line)
            files[number // per_shard].write(
                json.dumps({"id": doc["id"], "text": doc["text"]}) + "\n"
            )
    for file in files:
        file.close()
    scratch.rename(folder)
    return folder


def iter_shards(folder: Path):
    for path in sorted(folder.glob("*.jsonl")):
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                doc = json.loads(line)
                yield doc["id"], doc["text"]


# -- steps run in a child process ----------------------------------------------------------------


def step_single(folder: str, out: str) -> dict:
    """Index.add into a scratch SQLite file, find_pairs, cluster: what `simindex dedup` runs."""
    from simindex import Index

    db = Path(out) / "single.db"
    times = {}
    started = time.perf_counter()
    with Index.create(f"sqlite:///{db}", threshold=THRESHOLD) as index:
        index.add(iter_shards(Path(folder)), batch_size=pipeline.BATCH)
        times["sign + load"] = time.perf_counter() - started
        mark = time.perf_counter()
        report = index.find_pairs(THRESHOLD)
        times["candidates + verification"] = time.perf_counter() - mark
        mark = time.perf_counter()
        index.cluster(THRESHOLD)
        dropped = {m.external_id: m.cluster for m in index.clusters() if not m.is_representative}
        times["components + representatives"] = time.perf_counter() - mark
        pairs = [(p.id_a, p.id_b) for p in index.pairs(THRESHOLD)]
    save(out, "single", pairs, dropped)
    return {"stages": times, "candidates": report.candidates, "pairs": len(pairs),
            "dropped": len(dropped)}  # fmt: skip


def step_pg_index(folder: str, url: str) -> dict:
    from simindex import Index

    started = time.perf_counter()
    with Index.create(url, threshold=THRESHOLD) as index:
        result = index.add(iter_shards(Path(folder)), batch_size=pipeline.BATCH)
    return {"stages": {"sign + load": time.perf_counter() - started}, "added": result.added}


STEPS = {"single": step_single, "pg-index": step_pg_index}


def save(out: str, label: str, pairs: list[tuple[str, str]], dropped: dict[str, str]) -> None:
    """Pairs and dropped documents as sorted integer arrays (ids are row numbers)."""
    ordered = sorted((min(int(a), int(b)), max(int(a), int(b))) for a, b in pairs)
    pair_array = np.array(ordered, np.int64).reshape(-1, 2)
    drop_array = np.array(sorted((int(d), int(r)) for d, r in dropped.items()), np.int64)
    np.savez(Path(out) / f"{label}.npz", pairs=pair_array, dropped=drop_array.reshape(-1, 2))


def spark_outputs(out_dir: Path, label: str, out: str) -> dict:
    """The pairs and dropped documents `simindex spark dedup` wrote (Parquet), saved as save()."""
    import pyarrow.dataset as ds

    pairs = ds.dataset(out_dir / "pairs", format="parquet").to_table(columns=["id_a", "id_b"])
    dropped = ds.dataset(out_dir / "dropped", format="parquet").to_table(
        columns=["id", "representative"]
    )
    save(
        out,
        label,
        list(zip(pairs["id_a"].to_pylist(), pairs["id_b"].to_pylist(), strict=True)),
        dict(zip(dropped["id"].to_pylist(), dropped["representative"].to_pylist(), strict=True)),
    )
    return {"pairs": pairs.num_rows, "dropped": dropped.num_rows}


# -- the parent: measuring a process tree ---------------------------------------------------------


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, user + system ticks) of a process, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def _role(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    if "java" in command.split(" ", 1)[0]:
        return "jvm"
    if "pyspark.daemon" in command or "pyspark.worker" in command or "pyspark/daemon" in command:
        return "workers"
    return "driver"


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except OSError:
        return 0


class TreeSampler(threading.Thread):
    """Samples a process tree: peak RSS by role and in all, CPU ticks and role per process."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.stop = root, threading.Event()
        self.peak = {"driver": 0, "jvm": 0, "workers": 0, "all": 0}
        self.ticks: dict[int, int] = {}
        self.roles: dict[int, str] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(SAMPLE_SECONDS)

    def sample(self) -> None:
        parents: dict[int, list[int]] = {}
        stats = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and (found := _stat(int(entry.name))):
                stats[int(entry.name)] = found
                parents.setdefault(found[0], []).append(int(entry.name))
        tree, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            if pid in stats:
                tree.append(pid)
                todo.extend(parents.get(pid, []))
        now = {"driver": 0, "jvm": 0, "workers": 0}
        for pid in tree:
            role = _role(pid)  # not cached: a launcher script becomes the JVM (exec)
            if role in now:
                now[role] += _rss(pid)
                self.roles[pid] = role
            self.ticks[pid] = max(self.ticks.get(pid, 0), stats[pid][1])
        for role, value in now.items():
            self.peak[role] = max(self.peak[role], value)
        self.peak["all"] = max(self.peak["all"], sum(now.values()))


def measure(command: list[str], env: dict[str, str] | None = None) -> dict:
    """Run a command; its wall seconds, the tree's CPU seconds and peak RSS (MiB), and the CPU
    cores other processes (PostgreSQL excluded) used meanwhile."""
    (busy0, pg0), started = pipeline.cpu_ticks(), time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    sampler = TreeSampler(process.pid)
    sampler.start()
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - started
    sampler.stop.set()
    sampler.join()
    busy1, pg1 = pipeline.cpu_ticks()
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    tree_ticks = sum(sampler.ticks.values())
    other = (busy1 - busy0) - (pg1 - pg0) - tree_ticks
    return {
        "seconds": wall,
        "cpu_seconds": tree_ticks / TICK,
        "cpu_by_role": {
            role: sum(t for pid, t in sampler.ticks.items() if sampler.roles.get(pid) == role)
            / TICK
            for role in ("driver", "jvm", "workers")
        },
        "peak_mib": {role: value / 2**20 for role, value in sampler.peak.items()},
        "foreign_cores": max(0.0, other / TICK / wall),
        "stdout": stdout,
        "stderr": stderr,
    }


def run_step(step: str, **params) -> dict:
    out = DATA / f".bench_spark_{os.getpid()}.json"
    command = [sys.executable, __file__, "--run-step", step, json.dumps(params), str(out)]
    result = measure(command)
    result.update(json.loads(out.read_text()))
    out.unlink()
    return result


def spark_stages(log_dir: Path) -> list[dict]:
    """Per Spark stage of the event log in ``log_dir``: name, the pipeline step it ran for (its
    job description, "simindex <step>"), tasks and wall seconds (submission to completion), in
    submission order. (The log's executor CPU time is the JVM's alone, not the Python
    workers', so it is not reported.)"""
    (log,) = [p for p in log_dir.iterdir() if p.is_file() and not p.name.startswith(".")]
    stages: dict[int, dict] = {}
    steps: dict[int, str] = {}
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["Event"] == "SparkListenerStageSubmitted":
            described = (event.get("Properties") or {}).get("spark.job.description") or ""
            steps[event["Stage Info"]["Stage ID"]] = described.removeprefix("simindex ")
        elif event["Event"] == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            stages[info["Stage ID"]] = {
                "name": info["Stage Name"],
                "step": steps.get(info["Stage ID"]) or "other",
                "tasks": info["Number of Tasks"],
                "submitted": info["Submission Time"] / 1000,
                "completed": info["Completion Time"] / 1000,
                "seconds": (info["Completion Time"] - info["Submission Time"]) / 1000,
            }
    return sorted(stages.values(), key=lambda s: s["submitted"])


def spark_steps(stages: list[dict]) -> dict[str, float]:
    """Wall seconds of each pipeline step: from its first stage's submission to its last
    stage's completion (the steps run one after the other), in order."""
    spans: dict[str, list[float]] = {}
    for stage in stages:
        span = spans.setdefault(stage["step"], [stage["submitted"], stage["completed"]])
        span[0], span[1] = min(span[0], stage["submitted"]), max(span[1], stage["completed"])
    return {step: end - start for step, (start, end) in spans.items()}


def spark_env(log_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    log_dir.mkdir(parents=True, exist_ok=True)
    env["PYSPARK_SUBMIT_ARGS"] = (
        f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{log_dir} "
        "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false "
        "--driver-memory 2g pyspark-shell"
    )
    return env


def simindex_command() -> list[str]:
    return [sys.executable, "-m", "simindex"]


# -- the run -------------------------------------------------------------------------------------


def bench(args: argparse.Namespace) -> dict:
    folder = shards(args.docs, args.shards, args.seed)
    work = DATA / f"bench_spark_{args.docs}"
    if "single" in args.only:  # else compare with the single process of an earlier run
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    print(f"corpus: {folder}")

    if "single" in args.only:
        print("single ...", flush=True)
        results["single"] = run_step("single", folder=str(folder), out=str(work))
        announce(results["single"])
    for cores in (1, 2):
        label = f"local[{cores}]"
        if "spark-dedup" not in args.only:
            continue
        print(f"spark dedup {label} ...", flush=True)
        out_dir, log_dir = work / f"dedup_{cores}", work / f"events_dedup_{cores}"
        for stale in (out_dir, log_dir):  # an earlier run's
            shutil.rmtree(stale, ignore_errors=True)
        command = [*simindex_command(), "spark", "dedup", str(folder), "--out", str(out_dir),
                   "--master", label, "--threshold", str(THRESHOLD)]  # fmt: skip
        result = measure(command, spark_env(log_dir))
        result["spark_stages"] = spark_stages(log_dir)
        result["stages"] = spark_steps(result["spark_stages"])
        result.update(spark_outputs(out_dir, label, str(work)))
        shutil.rmtree(out_dir)
        results[f"spark-dedup {label}"] = result
        announce(result)
    if "ingest" in args.only:
        databases = {"pg-index": "bench_spark_index", "spark-ingest local[2]": "bench_spark_ingest"}
        urls = {k: pipeline.fresh_pg_database(args.pg_url, v) for k, v in databases.items()}
        try:
            print("pg-index ...", flush=True)
            results["pg-index"] = run_step("pg-index", folder=str(folder), url=urls["pg-index"])
            print("spark ingest local[2] ...", flush=True)
            log_dir = work / "events_ingest"
            command = [*simindex_command(), "spark", "ingest", str(folder), "--db",
                       urls["spark-ingest local[2]"], "--master", "local[2]"]  # fmt: skip
            result = measure(command, spark_env(log_dir))
            result["spark_stages"] = spark_stages(log_dir)
            said = re.search(
                r"staged in ([\d.]+) s, moved into the index in ([\d.]+) s", result["stderr"]
            )
            result["stages"] = {
                "sign + stage (job)": float(said[1]),
                "move (transaction)": float(said[2]),
            }
            results["spark-ingest local[2]"] = result
            digests = {k: index_digest(url) for k, url in urls.items()}
            results["ingest_identical"] = digests["pg-index"] == digests["spark-ingest local[2]"]
            for key, name in databases.items():
                results[key]["database_bytes"] = pipeline.pg_size(args.pg_url, name)
        finally:
            for name in databases.values():
                pipeline.drop_pg_database(args.pg_url, name)
    results["identical"] = compare(work)
    return results


def announce(result: dict) -> None:
    """A finished step's figures, at once (a long run's log shows them before its end)."""
    figures = {k: result[k] for k in ("seconds", "cpu_seconds", "cpu_by_role", "peak_mib")}
    print(f"  {json.dumps(figures, default=round)}", flush=True)


def index_digest(url: str) -> dict[str, str]:
    """A digest of each table of an index, rows in key order (equal tables, equal digests)."""
    import psycopg

    queries = {
        "documents": "SELECT md5(string_agg(md5(concat_ws('|', id, external_id, content_hash, "
        "shingle_count, md5(text))), '' ORDER BY id)) FROM documents",
        "signatures": "SELECT md5(string_agg(md5(minhashes), '' ORDER BY document_id)) "
        "FROM signatures",
        "band_keys": "SELECT md5(string_agg(concat_ws(',', band, key, document_id), '|' "
        "ORDER BY band, key, document_id)) FROM band_keys",
    }
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as connection:
        return {k: connection.execute(q).fetchone()[0] for k, q in queries.items()}


def compare(work: Path) -> dict[str, bool]:
    """Whether each Spark run's pairs and dropped documents equal the single process's."""
    runs = {p.stem: np.load(p) for p in work.glob("*.npz")}
    if "single" not in runs:
        return {}
    single = runs.pop("single")
    return {
        label: bool(
            np.array_equal(single["pairs"], found["pairs"])
            and np.array_equal(single["dropped"], found["dropped"])
        )
        for label, found in runs.items()
    }


# -- the report ------------------------------------------------------------------------------------


def report(args: argparse.Namespace, results: dict, started: datetime, load: tuple) -> str:
    lines = [
        f"## {started:%Y-%m-%d %H:%M} UTC: Spark (local[1], local[2]) against the single process",
        "",
        f"- Machine: nproc {os.cpu_count()}, {platform.processor() or platform.machine()}, "
        f"load average {load[0]:.2f} before the run and {load[1]:.2f} after it",
        f"- Versions: Python {platform.python_version()}, pyspark {version('pyspark')}, "
        f"pyarrow {version('pyarrow')}, numba {version('numba')}",
        f"- Command: `.venv/bin/python benchmarks/bench_spark.py {' '.join(sys.argv[1:])}`",
        f"- Corpus: {args.docs:,} generated documents (bench_pipeline.py's generator, seed "
        f"{args.seed}) in {args.shards} JSON-lines shards; threshold {THRESHOLD}, exact "
        "verification, text kept",
        "",
        "| run | wall s | CPU s (tree) | CPU s driver / JVM / workers | CPU us/doc "
        "| peak MiB driver / JVM / workers / all | other load (cores) |",
        "|---|---:|---:|---|---:|---|---:|",
    ]
    for label, result in results.items():
        if not isinstance(result, dict) or "seconds" not in result:
            continue
        peak, cpu = result["peak_mib"], result["cpu_by_role"]
        lines.append(
            f"| {label} | {result['seconds']:.1f} | {result['cpu_seconds']:.1f} | "
            f"{cpu['driver']:.1f} / {cpu['jvm']:.1f} / {cpu['workers']:.1f} | "
            f"{result['cpu_seconds'] / args.docs * 1e6:,.0f} | {peak['driver']:,.0f} / "
            f"{peak['jvm']:,.0f} / {peak['workers']:,.0f} / {peak['all']:,.0f} | "
            f"{result['foreign_cores']:.2f} |"
        )
    lines.append("")
    for label, result in results.items():
        if isinstance(result, dict) and "stages" in result:
            parts = ", ".join(f"{k} {v:.1f} s" for k, v in result["stages"].items())
            lines.append(f"- {label} stages: {parts}")
        if isinstance(result, dict) and "spark_stages" in result:
            stages = result["spark_stages"]
            longest = sorted(stages, key=lambda s: -s["seconds"])[:SHOWN_STAGES]
            parts = "; ".join(
                f"{s['name'].split(' at ')[0]} ({s['tasks']} tasks) {s['seconds']:.1f} s"
                for s in longest
            )
            lines.append(
                f"- {label}: {len(stages)} Spark stages, {sum(s['seconds'] for s in stages):.0f} "
                f"s in all (some overlap); the longest: {parts}"
            )
    one, two = results.get("spark-dedup local[1]"), results.get("spark-dedup local[2]")
    if one and two:
        speedup = one["seconds"] / two["seconds"]
        lines.append(
            f"- Parallel efficiency local[2] vs local[1]: speed-up {speedup:.2f}x, "
            f"efficiency {speedup / 2:.0%}"
        )
    lines.append(
        "- Identical pairs and clusters (the dropped documents with their representatives) "
        f"vs single: {results['identical']}"
    )
    if "ingest_identical" in results:
        lines.append(
            "- Spark ingest and Index.add made identical indexes (documents, ids, signatures, "
            f"band keys): {results['ingest_identical']}"
        )
    for key in ("pg-index", "spark-ingest local[2]"):
        if key in results and "database_bytes" in results[key]:
            size = results[key]["database_bytes"]
            lines.append(
                f"- {key} database: {size / 2**20:,.0f} MiB ({size / args.docs:,.0f} B/doc)"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--pg-url", default=pipeline.DEFAULT_PG)
    parser.add_argument(
        "--only", nargs="+", default=["single", "spark-dedup", "ingest"],
        choices=["single", "spark-dedup", "ingest"],
    )  # fmt: skip
    parser.add_argument("--write-results", action="store_true", help="append to RESULTS.md")
    parser.add_argument("--run-step", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_step:
        step, params, out = args.run_step
        result = STEPS[step](**json.loads(params))
        Path(out).write_text(json.dumps(result))
        return
    started, load_before = datetime.now(UTC), os.getloadavg()[0]
    results = bench(args)
    text = report(args, results, started, (load_before, os.getloadavg()[0]))
    print(text)
    (DATA / f"bench_spark_{args.docs}.json").write_text(json.dumps(results, default=str, indent=1))
    if args.write_results:
        with RESULTS.open("a", encoding="utf-8") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
