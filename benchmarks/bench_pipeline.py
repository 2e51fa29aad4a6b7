"""Benchmark: the whole near-duplicate job, simindex (PostgreSQL, SQLite) vs datasketch and rensa.

For each corpus it measures, every step in a fresh Python subprocess (so the peak RSS,
``getrusage(RUSAGE_SELF).ru_maxrss``, belongs to that step alone):

  * simindex on PostgreSQL (a fresh ``bench_`` database) and on SQLite (a file under /tmp):
    ingest with text kept (streamed from the .jsonl.gz file, as the CLI does), ``find_pairs(0.8)``
    (candidates in SQL + exact verification), export (iterate ``index.pairs()``), the sum of
    the three (end to end); ingest with ``keep_text=False`` into a second database;
    ``reband(42, 3)`` and back to 20 x 5; ``index.query(text)`` latency for 200 edited copies of
    corpus documents that are not in the index; database size per document;
  * datasketch 2.0 in memory: Python 5-gram sets of ``simindex.normalize(text)``,
    ``MinHash.bulk``, ``MinHashLSH(num_perm=128, params=(20, 5))`` insert, a query per document
    for all candidate pairs, then the MinHash estimate >= 0.8 (vectorized) as verification;
  * rensa 0.5 in memory: the same shingles, ``RMinHash.from_token_sets``, ``RMinHashLSH`` with
    20 bands x 5 rows (rensa needs num_perm divisible by the bands, so num_perm = 100: the same
    100 hashes that 20 x 5 uses out of 128), ``query_all``, estimate >= 0.8 as verification;
  * recall against the exact all-pairs ground truth (``simindex.exact.similar_pairs`` on the
    same shingles), cached per corpus in benchmarks/data/.

Corpora: Reuters-21578 ("text", empty texts skipped), and N-document corpora generated from it
with a seed: ~15% of the documents are edited copies of an earlier generated document (1-5
word substitutions/deletions/insertions, sometimes a sentence appended or removed), the rest
are "new" stories (a Reuters story with its sentences shuffled and 30% of its words replaced
by random Reuters words, so two new stories are not near-duplicates). Generated corpora,
queries and ground truth are cached as files under benchmarks/data/ (git-ignored).

Run from the repository root (PostgreSQL at --pg-url must allow CREATE DATABASE):
    .venv/bin/python benchmarks/bench_pipeline.py --sizes reuters 20000             # smoke run
    .venv/bin/python benchmarks/bench_pipeline.py --sizes reuters 100000 400000 \\
        --skip-slow --write-results                                     # the recorded run
    .venv/bin/python benchmarks/bench_pipeline.py --sizes 100000 --only simindex-pg --profile
        # pyinstrument profiles of each simindex step, in benchmarks/data/profiles/
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
REUTERS = REPO.parent / "shared" / "data" / "reuters21578.jsonl.gz"
DATA = REPO / "benchmarks" / "data"
RESULTS = REPO / "benchmarks" / "RESULTS.md"
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
TOOLS = ["simindex-pg", "simindex-sqlite", "datasketch", "rensa"]

GENERATOR_VERSION = 1  # bump when the corpus generator changes (it names the cache files)
DUPLICATE_RATE = 0.15  # share of generated documents that are edited copies
NEW_STORY_REPLACE = 0.30  # share of words a "new" story replaces with random words
QUERIES = 200
WARMUP_QUERIES = 5
THRESHOLD = 0.8
K = 5  # shingle length (simindex's default SignatureSpec)
BATCH = 5_000
PAIR_SHIFT = 31  # a pair (a, b) is packed as a << 31 | b


# -- corpora -------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(" ".join(text.split())) if s]


def reuters_texts() -> list[str]:
    """Reuters-21578 texts, in file order, minus those that normalize to nothing."""
    from simindex import normalize

    with gzip.open(REUTERS, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    return [t for t in texts if normalize(t)]


def corpus_name(size: str) -> str:
    return "reuters" if size == "reuters" else f"gen{int(size)}"


def corpus_path(name: str, seed: int) -> Path:
    if name == "reuters":
        return DATA / "reuters.jsonl.gz"
    return DATA / f"{name}_seed{seed}_v{GENERATOR_VERSION}.jsonl.gz"


def queries_path(name: str, seed: int) -> Path:
    path = corpus_path(name, seed)
    return path.with_name(path.name.removesuffix(".jsonl.gz") + "_queries.json")


def truth_path(name: str, seed: int) -> Path:
    path = corpus_path(name, seed)
    return path.with_name(path.name.removesuffix(".jsonl.gz") + "_truth.npz")


class Editor:
    """Seeded text edits over the Reuters sentences and vocabulary."""

    def __init__(self, texts: list[str], rng: np.random.Generator):
        self.rng = rng
        self.stories = [split_sentences(t) for t in texts]
        self.pool = [s for story in self.stories for s in story]
        self.vocab = sorted({w for t in texts for w in t.split() if w.isalpha()})

    def word(self) -> str:
        return self.vocab[int(self.rng.integers(len(self.vocab)))]

    def new_story(self) -> str:
        """A Reuters story, sentences shuffled, NEW_STORY_REPLACE of its words replaced."""
        rng = self.rng
        story = self.stories[int(rng.integers(len(self.stories)))]
        words = " ".join(story[i] for i in rng.permutation(len(story))).split()
        replace = np.flatnonzero(rng.random(len(words)) < NEW_STORY_REPLACE)
        for i, v in zip(replace, rng.integers(len(self.vocab), size=replace.size), strict=True):
            words[i] = self.vocab[v]
        return " ".join(words)

    def edited_copy(self, text: str) -> str:
        """1-5 word substitutions/deletions/insertions; 20%: a sentence removed (of 3+);
        25%: a random Reuters sentence appended."""
        rng = self.rng
        sentences = split_sentences(text)
        if len(sentences) >= 3 and rng.random() < 0.20:
            del sentences[int(rng.integers(len(sentences)))]
        if rng.random() < 0.25:
            sentences.append(self.pool[int(rng.integers(len(self.pool)))])
        words = " ".join(sentences).split()
        for _ in range(int(rng.integers(1, 6))):
            op = int(rng.integers(3))
            if op == 0:
                words[int(rng.integers(len(words)))] = self.word()
            elif op == 1 and len(words) > 1:
                del words[int(rng.integers(len(words)))]
            else:
                words.insert(int(rng.integers(len(words) + 1)), self.word())
        return " ".join(words)


def step_corpus(name: str, seed: int) -> dict:
    """Write the corpus (id = row number as a string) and its query texts, unless cached."""
    path, qpath = corpus_path(name, seed), queries_path(name, seed)
    if path.exists() and qpath.exists():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            docs = [json.loads(line).get("dup_of") for line in f]
        return {"cached": True, "docs": len(docs), "planted": sum(d is not None for d in docs)}
    started = time.perf_counter()
    texts = reuters_texts()
    editor = Editor(texts, np.random.default_rng(seed))
    docs: list[dict] = []
    if name == "reuters":
        docs = [{"id": str(i), "text": t} for i, t in enumerate(texts)]
    else:
        for i in range(int(name[len("gen") :])):
            if i and editor.rng.random() < DUPLICATE_RATE:
                source = int(editor.rng.integers(i))
                docs.append({"id": str(i), "text": editor.edited_copy(docs[source]["text"]),
                             "dup_of": source})  # fmt: skip
            else:
                docs.append({"id": str(i), "text": editor.new_story()})
    DATA.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=3) as f:
        for doc in docs:
            f.write(json.dumps(doc) + "\n")
    tmp.rename(path)
    # Queries: edited copies of random corpus documents (another seed: not in the corpus).
    editor.rng = np.random.default_rng(seed + 1_000_003)
    sources = editor.rng.choice(len(docs), size=QUERIES + WARMUP_QUERIES, replace=False)
    queries = [{"source": int(s), "text": editor.edited_copy(docs[s]["text"])} for s in sources]
    qpath.write_text(json.dumps(queries), encoding="utf-8")
    return {
        "cached": False,
        "docs": len(docs),
        "planted": sum("dup_of" in d for d in docs),
        "seconds": time.perf_counter() - started,
    }


def iter_corpus(path: Path) -> Iterator[tuple[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            yield doc["id"], doc["text"]


def batched(items, size: int) -> Iterator[list]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def subset(hashes: np.ndarray, offsets: np.ndarray, rows: np.ndarray):
    """The ShingleSets of some rows (sorted) of a (hashes, offsets) collection."""
    from simindex.shingle import ShingleSets

    counts = offsets[rows + 1] - offsets[rows]
    new_offsets = np.zeros(rows.size + 1, np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    take = np.repeat(offsets[rows] - new_offsets[:-1], counts) + np.arange(new_offsets[-1])
    return ShingleSets(hashes[take], new_offsets)


def step_truth(corpus: str, out: str, max_shingles: int) -> dict:
    """Exact pairs with Jaccard >= THRESHOLD (simindex.exact.similar_pairs), saved as .npz.

    similar_pairs needs ~120 bytes per shingle (9 GiB for 100k documents), so a corpus of more
    than ``max_shingles`` shingles is joined in windows by set size, which is still exact:
    J(A, B) >= t implies t * max(|A|, |B|) <= min(|A|, |B|), so with size classes
    [c * q**i, c * q**(i + 1)) where q = 1 / t, every such pair lies within two adjacent
    classes, and similar_pairs on the documents of classes i and i + 1 (for every i) finds
    each pair at least once (prefix filtering is exact for any token order).
    """
    from simindex import SignatureSpec, normalize, shingle_sets
    from simindex.exact import similar_pairs

    started = time.perf_counter()
    spec = SignatureSpec()
    parts = [shingle_sets([normalize(t) for _, t in b], spec) for b in batched(iter_corpus(Path(corpus)), 20_000)]  # fmt: skip
    hashes = np.concatenate([p.hashes for p in parts])
    counts = np.concatenate([p.counts for p in parts])
    del parts
    offsets = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    shingled = time.perf_counter() - started
    if hashes.size <= max_shingles:
        windows = [np.arange(counts.size)]
    else:
        size_class = np.floor(np.log(counts) / np.log(1 / THRESHOLD) + 1e-9).astype(np.int64)
        windows = [np.flatnonzero((size_class == c) | (size_class == c + 1))
                   for c in range(int(size_class.max()) + 1)]  # fmt: skip
        windows = [w for w in windows if w.size > 1]
    found = []
    for rows in windows:
        a, b, _ = similar_pairs(subset(hashes, offsets, rows), THRESHOLD)
        found.append(pack_pairs(rows[a], rows[b]))
    packed = np.unique(np.concatenate(found))
    a, b = packed >> PAIR_SHIFT, packed & ((1 << PAIR_SHIFT) - 1)
    from simindex.shingle import ShingleSets
    from simindex.verify import exact_jaccard

    jaccard = exact_jaccard(ShingleSets(hashes, offsets), a, b)
    np.savez(out, a=a, b=b, jaccard=jaccard)
    return {
        "pairs": int(a.size),
        "pairs_085": int((jaccard >= 0.85).sum()),
        "shingles": int(hashes.size),
        "windows": len(windows),
        "largest_window_shingles": int(max(counts[w].sum() for w in windows)),
        "shingle_seconds": shingled,
        "seconds": time.perf_counter() - started,
    }


# -- simindex steps (run in a child process) ------------------------------------------------


def step_ingest(url: str, corpus: str, keep_text: bool) -> dict:
    from simindex import Index

    started = time.perf_counter()
    with Index.create(url, keep_text=keep_text) as index:
        result = index.add(iter_corpus(Path(corpus)))
    return {"docs": result.added, "seconds": time.perf_counter() - started}


def step_find_pairs(url: str) -> dict:
    from simindex import Index

    started = time.perf_counter()
    with Index.open(url) as index:
        report = index.find_pairs(THRESHOLD)
    return {
        "seconds": time.perf_counter() - started,
        "inner_seconds": report.seconds,
        "candidates": report.candidates,
        "pairs": report.pairs,
        "hot_buckets": report.hot_buckets,
        "largest_bucket": report.largest_bucket,
    }


def step_export(url: str, out: str) -> dict:
    """Iterate every stored pair (as an export does); the ids are saved, untimed, for recall."""
    from simindex import Index

    started = time.perf_counter()
    rows = []
    with Index.open(url) as index:
        for pair in index.pairs(THRESHOLD):
            rows.append((pair["id_a"], pair["id_b"], pair["similarity"]))
    seconds = time.perf_counter() - started
    save_pairs(out, [int(r[0]) for r in rows], [int(r[1]) for r in rows])
    return {"pairs": len(rows), "seconds": seconds}


def step_query(url: str, queries: str) -> dict:
    from simindex import Index

    texts = json.loads(Path(queries).read_text(encoding="utf-8"))
    warm, timed_queries = texts[:WARMUP_QUERIES], texts[WARMUP_QUERIES:]
    with Index.open(url) as index:
        started = time.perf_counter()
        for q in warm:
            index.query(q["text"])
        warmup = time.perf_counter() - started
        latencies, found, matches = [], 0, 0
        for q in timed_queries:
            t0 = time.perf_counter()
            result = index.query(q["text"])
            latencies.append(time.perf_counter() - t0)
            matches += len(result)
            found += any(m.external_id == str(q["source"]) for m in result)
    ms = np.array(latencies) * 1000
    return {
        "queries": len(ms),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "max_ms": float(ms.max()),
        "warmup_seconds": warmup,
        "found_source": found,
        "matches": matches,
    }


def step_reband(url: str) -> dict:
    from simindex import Index

    with Index.open(url) as index:
        t0 = time.perf_counter()
        index.reband(42, 3)
        t1 = time.perf_counter()
        index.reband(20, 5)
        t2 = time.perf_counter()
    return {"reband_seconds": t1 - t0, "back_seconds": t2 - t1}


# -- in-memory competitors (run in a child process) -----------------------------------------


def py_shingles(text: str, k: int = K) -> set[str]:
    """Distinct k-code-point substrings; a text shorter than k is its own single shingle."""
    if len(text) <= k:
        return {text}
    return {text[i : i + k] for i in range(len(text) - k + 1)}


def pack_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    return (lo.astype(np.int64) << PAIR_SHIFT) | hi.astype(np.int64)


def save_pairs(out: str, a, b) -> None:
    np.save(out, np.unique(pack_pairs(np.asarray(a, np.int64), np.asarray(b, np.int64))))


def verify_by_estimate(sigs: np.ndarray, packed: np.ndarray) -> np.ndarray:
    """The candidate pairs whose MinHash estimate is >= THRESHOLD (vectorized, in chunks)."""
    keep = []
    for start in range(0, packed.size, 1_000_000):
        chunk = packed[start : start + 1_000_000]
        a, b = chunk >> PAIR_SHIFT, chunk & ((1 << PAIR_SHIFT) - 1)
        keep.append(chunk[np.mean(sigs[a] == sigs[b], axis=1) >= THRESHOLD])
    return np.concatenate(keep) if keep else np.empty(0, np.int64)


def step_datasketch(corpus: str, out_candidates: str, out_pairs: str) -> dict:
    from datasketch import MinHash, MinHashLSH

    from simindex import normalize

    times = dict.fromkeys(["signatures", "insert", "query", "verify"], 0.0)
    started = time.perf_counter()
    lsh = MinHashLSH(num_perm=128, params=(20, 5))
    minhashes: list = []
    for batch in batched(iter_corpus(Path(corpus)), BATCH):
        t0 = time.perf_counter()
        shingles = [[s.encode("utf-8") for s in py_shingles(normalize(t))] for _, t in batch]
        ms = MinHash.bulk(shingles, num_perm=128)
        t1 = time.perf_counter()
        with lsh.insertion_session() as session:
            for key, m in zip(range(len(minhashes), len(minhashes) + len(ms)), ms, strict=True):
                session.insert(key, m, check_duplication=False)
        times["signatures"] += t1 - t0
        times["insert"] += time.perf_counter() - t1
        minhashes.extend(ms)
    t0 = time.perf_counter()
    found = [(i << PAIR_SHIFT) | j for i, m in enumerate(minhashes) for j in lsh.query(m) if j > i]
    packed = np.unique(np.array(found, dtype=np.int64))
    t1 = time.perf_counter()
    sigs = np.stack([m.hashvalues for m in minhashes])
    kept = verify_by_estimate(sigs, packed)
    times["query"], times["verify"] = t1 - t0, time.perf_counter() - t1
    total = time.perf_counter() - started
    np.save(out_candidates, packed)
    np.save(out_pairs, kept)
    return {"docs": len(minhashes), "seconds": total, "candidates": int(packed.size),
            "pairs": int(kept.size), **{f"{k}_seconds": v for k, v in times.items()}}  # fmt: skip


def step_rensa(corpus: str, out_candidates: str, out_pairs: str) -> dict:
    from rensa import RMinHash, RMinHashLSH

    from simindex import normalize

    times = dict.fromkeys(["signatures", "insert", "query", "verify"], 0.0)
    started = time.perf_counter()
    lsh = RMinHashLSH(threshold=THRESHOLD, num_perm=100, num_bands=20)
    minhashes: list = []
    for batch in batched(iter_corpus(Path(corpus)), BATCH):
        t0 = time.perf_counter()
        token_sets = [list(py_shingles(normalize(t))) for _, t in batch]
        ms = RMinHash.from_token_sets(token_sets, num_perm=100, seed=1)
        t1 = time.perf_counter()
        lsh.insert_many(ms, start_key=len(minhashes))
        times["signatures"] += t1 - t0
        times["insert"] += time.perf_counter() - t1
        minhashes.extend(ms)
    t0 = time.perf_counter()
    found = [(i << PAIR_SHIFT) | j for i, keys in enumerate(lsh.query_all(minhashes)) for j in keys if j > i]  # fmt: skip
    packed = np.unique(np.array(found, dtype=np.int64))
    t1 = time.perf_counter()
    sigs = np.array([m.digest() for m in minhashes], dtype=np.uint32)
    kept = verify_by_estimate(sigs, packed)
    times["query"], times["verify"] = t1 - t0, time.perf_counter() - t1
    total = time.perf_counter() - started
    np.save(out_candidates, packed)
    np.save(out_pairs, kept)
    return {"docs": len(minhashes), "seconds": total, "candidates": int(packed.size),
            "pairs": int(kept.size), **{f"{k}_seconds": v for k, v in times.items()}}  # fmt: skip


STEPS = {
    "corpus": step_corpus,
    "truth": step_truth,
    "ingest": step_ingest,
    "find_pairs": step_find_pairs,
    "export": step_export,
    "query": step_query,
    "reband": step_reband,
    "datasketch": step_datasketch,
    "rensa": step_rensa,
}


def maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child_main(step: str, params_json: str, out: str) -> None:
    """Run one step in this (fresh) process and write its result, with peak RSS, as JSON."""
    params = json.loads(params_json)
    profile = params.pop("profile", None)
    baseline = maxrss_mib()
    if profile:
        from pyinstrument import Profiler

        with Profiler(interval=0.001) as profiler:
            result = STEPS[step](**params)
        Path(profile).write_text(profiler.output_text(unicode=True, color=False, show_all=False))
    else:
        result = STEPS[step](**params)
    result.update(peak_rss_mib=maxrss_mib(), start_rss_mib=baseline)
    Path(out).write_text(json.dumps(result))


# -- the parent: orchestration --------------------------------------------------------------


class Runner:
    def __init__(self, timeout: float, profile_dir: Path | None):
        self.timeout = timeout
        self.profile_dir = profile_dir

    def run(self, step: str, label: str = "", profile: bool = False, **params) -> dict:
        """Run a step in a fresh subprocess; returns its result, or {"error": ...}."""
        out = DATA / f".step_{os.getpid()}.json"
        out.unlink(missing_ok=True)
        if profile and self.profile_dir:
            params["profile"] = str(self.profile_dir / f"{label or step}.txt")
        command = [sys.executable, __file__, "--run-step", step, json.dumps(params), str(out)]
        started = time.perf_counter()
        print(f"  {label or step} ...", end=" ", flush=True)
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            print(f"timed out after {self.timeout:.0f} s")
            return {"error": f"timed out after {self.timeout:.0f} s"}
        wall = time.perf_counter() - started
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            print(f"FAILED: {tail[0]}")
            return {"error": tail[0]}
        result = json.loads(out.read_text())
        out.unlink()
        result["process_seconds"] = wall
        shown = {k: v for k, v in result.items() if not isinstance(v, list)}
        print(", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()))
        return result


def pg_admin(admin_url: str):
    import psycopg

    return psycopg.connect(admin_url, autocommit=True)


def pg_url(admin_url: str, dbname: str) -> str:
    return admin_url.rsplit("/", 1)[0] + "/" + dbname


def fresh_pg_database(admin_url: str, dbname: str) -> str:
    assert dbname.startswith("bench_")
    with pg_admin(admin_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    return pg_url(admin_url, dbname)


def drop_pg_database(admin_url: str, dbname: str) -> None:
    assert dbname.startswith("bench_")
    with pg_admin(admin_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def pg_size(admin_url: str, dbname: str) -> int:
    with pg_admin(admin_url) as conn:
        return int(conn.execute("SELECT pg_database_size(%s)", (dbname,)).fetchone()[0])


def sqlite_files(path: Path) -> list[Path]:
    return [path, Path(f"{path}-wal"), Path(f"{path}-shm")]


def fresh_sqlite(path: Path) -> str:
    for f in sqlite_files(path):
        f.unlink(missing_ok=True)
    return f"sqlite:///{path}"


def sqlite_size(path: Path) -> int:
    return sum(f.stat().st_size for f in sqlite_files(path) if f.exists())


def bench_simindex(runner: Runner, backend: str, name: str, corpus: Path, queries: Path,
                   admin_url: str, keep: bool) -> dict:  # fmt: skip
    """Ingest (text kept), find_pairs, export, size, query, reband; ingest without text."""
    tag = f"{name}_{backend}"
    pairs_file = DATA / f"{tag}_exported.npy"
    if backend == "pg":
        text_db, plain_db = f"bench_pipeline_{name}_text", f"bench_pipeline_{name}_notext"
        url, plain_url = fresh_pg_database(admin_url, text_db), fresh_pg_database(admin_url, plain_db)
        size = lambda which: pg_size(admin_url, which)  # noqa: E731
    else:
        text_db, plain_db = Path(f"/tmp/bench_pipeline_{name}_text.db"), Path(f"/tmp/bench_pipeline_{name}_notext.db")  # fmt: skip
        url, plain_url = fresh_sqlite(text_db), fresh_sqlite(plain_db)
        size = sqlite_size
    r: dict = {}
    run = lambda step, **p: runner.run(step, label=f"{tag}_{step}", profile=True, **p)  # noqa: E731
    r["ingest"] = run("ingest", url=url, corpus=str(corpus), keep_text=True)
    if "error" not in r["ingest"]:
        r["find_pairs"] = run("find_pairs", url=url)
        r["export"] = run("export", url=url, out=str(pairs_file))
        r["db_bytes"] = size(text_db)
        r["query"] = run("query", url=url, queries=str(queries))
        r["reband"] = run("reband", url=url)
    r["ingest_notext"] = runner.run("ingest", label=f"{tag}_ingest_notext", profile=True,
                                    url=plain_url, corpus=str(corpus), keep_text=False)  # fmt: skip
    if "error" not in r["ingest_notext"]:
        r["db_bytes_notext"] = size(plain_db)
    steps = [r.get(s, {"error": "not run"}) for s in ("ingest", "find_pairs", "export")]
    if not any("error" in s for s in steps):
        r["end_to_end_seconds"] = sum(s["seconds"] for s in steps)
    if pairs_file.exists():
        r["exported"] = str(pairs_file)
    if not keep:
        if backend == "pg":
            drop_pg_database(admin_url, text_db)
            drop_pg_database(admin_url, plain_db)
        else:
            for f in sqlite_files(text_db) + sqlite_files(plain_db):
                f.unlink(missing_ok=True)
    return r


def recall(found_file: str | Path, truth: dict) -> dict:
    """Recall of the exact pairs (>= 0.8 and >= 0.85) among found pairs; found pairs that are
    not exact pairs >= 0.8."""
    found = np.load(found_file)
    t08 = truth["packed"]
    t085 = t08[truth["jaccard"] >= 0.85]
    return {
        "recall_080": float(np.isin(t08, found).mean()) if t08.size else float("nan"),
        "recall_085": float(np.isin(t085, found).mean()) if t085.size else float("nan"),
        "missed_080": int((~np.isin(t08, found)).sum()),
        "missed_085": int((~np.isin(t085, found)).sum()),
        "not_in_truth": int((~np.isin(found, t08)).sum()),
    }


def bench_corpus(runner: Runner, size: str, args) -> dict:
    name = corpus_name(size)
    path, qpath, tpath = corpus_path(name, args.seed), queries_path(name, args.seed), truth_path(name, args.seed)  # fmt: skip
    print(f"\n== corpus {name} ==")
    res: dict = {"name": name, "corpus_file": str(path.relative_to(REPO))}
    res["corpus"] = runner.run("corpus", label=f"{name}_corpus", name=name, seed=args.seed)
    if "error" in res["corpus"]:
        return res
    if tpath.exists():
        res["truth"] = {"cached": True}
    else:
        res["truth"] = runner.run("truth", label=f"{name}_truth", corpus=str(path), out=str(tpath))
    truth = None
    if tpath.exists():
        t = np.load(tpath)
        truth = {"packed": pack_pairs(t["a"], t["b"]), "jaccard": t["jaccard"]}
        order = np.argsort(truth["packed"])
        truth = {k: v[order] for k, v in truth.items()}
        res["truth"].update(pairs=int(truth["packed"].size),
                            pairs_085=int((truth["jaccard"] >= 0.85).sum()))  # fmt: skip
    docs = res["corpus"]["docs"]
    for tool in TOOLS:
        if args.only and tool not in args.only:
            continue
        if tool == "datasketch" and args.skip_slow and docs > args.slow_above:
            print(f"  datasketch skipped (--skip-slow, {docs:,} docs > {args.slow_above:,})")
            res[tool] = {"skipped": f"--skip-slow: {docs:,} documents > {args.slow_above:,}"}
            continue
        if tool.startswith("simindex"):
            backend = tool.split("-")[1]
            backend = "pg" if backend == "pg" else "sqlite"
            r = bench_simindex(runner, backend, name, path, qpath, args.pg_url, args.keep_databases)
            if truth is not None and "exported" in r:
                r["recall"] = recall(r["exported"], truth)
        else:
            cands, found = DATA / f"{name}_{tool}_candidates.npy", DATA / f"{name}_{tool}_pairs.npy"
            r = runner.run(tool, label=f"{name}_{tool}", corpus=str(path),
                           out_candidates=str(cands), out_pairs=str(found))  # fmt: skip
            if truth is not None and "error" not in r:
                r["recall_candidates"] = recall(cands, truth)
                r["recall"] = recall(found, truth)
        res[tool] = r
        if "recall" in r:
            rc = r["recall"]
            print(f"    recall >= 0.8: {rc['recall_080']:.4%} ({rc['missed_080']} missed), "
                  f">= 0.85: {rc['recall_085']:.4%}; not in truth: {rc['not_in_truth']}")  # fmt: skip
    return res


# -- the report -----------------------------------------------------------------------------


def machine_info(admin_url: str) -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
        platform.processor() or "unknown",
    )
    meminfo = Path("/proc/meminfo").read_text().split()
    info = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "ram_gib": int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20,
        "versions": f"Python {platform.python_version()}, "
        + ", ".join(f"{p} {version(p)}" for p in
                    ["simindex", "numpy", "numba", "sqlalchemy", "psycopg", "datasketch", "rensa"]),  # fmt: skip
    }
    try:
        with pg_admin(admin_url) as conn:
            show = {s: conn.execute(f"SHOW {s}").fetchone()[0] for s in
                    ("server_version", "shared_buffers", "work_mem", "maintenance_work_mem",
                     "synchronous_commit", "max_wal_size")}  # fmt: skip
        info["postgres"] = ", ".join(f"{k} {v}" for k, v in show.items())
    except Exception as exc:  # reported, not fatal: SQLite still runs
        info["postgres"] = f"unavailable ({type(exc).__name__})"
    import sqlite3

    info["sqlite"] = sqlite3.sqlite_version
    return info


def fmt_s(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f} s" if x >= 10 else f"{x:,.2f} s"


def fmt_mib(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f} MiB"


def fmt_pct(x: float | None) -> str:
    return "—" if x is None or x != x else f"{100 * x:.2f}%"


def cell(r: dict | None, fmt) -> str:
    """fmt(r) unless the step is missing, failed, or skipped."""
    if r is None:
        return "not run"
    if "skipped" in r:
        return "skipped"
    if "error" in r:
        return f"failed: {r['error'][:60]}"
    return fmt(r)


def simindex_rows(res: dict, docs: int) -> dict[str, list[str]]:
    """Rows of the per-corpus table for the simindex columns (PG, SQLite)."""
    rows: dict[str, list[str]] = {}
    for tool in ("simindex-pg", "simindex-sqlite"):
        r = res.get(tool)
        g = (lambda step, r=r: None if r is None else r.get(step, {"error": "not run"}))
        add = lambda key, text: rows.setdefault(key, []).append(text)  # noqa: E731
        add("ingest, text kept", cell(g("ingest"), lambda s: f"{fmt_s(s['seconds'])} ({s['docs'] / s['seconds']:,.0f} docs/s), {fmt_mib(s['peak_rss_mib'])}"))
        add("ingest, keep_text=False", cell(g("ingest_notext"), lambda s: f"{fmt_s(s['seconds'])} ({s['docs'] / s['seconds']:,.0f} docs/s), {fmt_mib(s['peak_rss_mib'])}"))
        add("candidates + verification at 0.8", cell(g("find_pairs"), lambda s: f"{fmt_s(s['seconds'])}: {s['candidates']:,} candidates → {s['pairs']:,} pairs (exact J), {fmt_mib(s['peak_rss_mib'])}"))
        add("export (iterate pairs)", cell(g("export"), lambda s: f"{fmt_s(s['seconds'])} ({s['pairs']:,} pairs), {fmt_mib(s['peak_rss_mib'])}"))
        add("**end to end** (ingest + pairs + export)", "—" if r is None or "end_to_end_seconds" not in r else f"**{fmt_s(r['end_to_end_seconds'])}**")
        add("peak RSS (largest step)", "—" if r is None else fmt_mib(max((v["peak_rss_mib"] for v in r.values() if isinstance(v, dict) and "peak_rss_mib" in v), default=None)))
        add("recall, exact J ≥ 0.8 / ≥ 0.85", "—" if r is None or "recall" not in r else f"{fmt_pct(r['recall']['recall_080'])} / {fmt_pct(r['recall']['recall_085'])} ({r['recall']['missed_080']} missed; {r['recall']['not_in_truth']} false)")
        add("point query p50 / p99 (200 new texts)", cell(g("query"), lambda s: f"{s['p50_ms']:.2f} / {s['p99_ms']:.2f} ms ({s['found_source']}/{s['queries']} find their source)"))
        add("reband 42 x 3 / back to 20 x 5", cell(g("reband"), lambda s: f"{fmt_s(s['reband_seconds'])} / {fmt_s(s['back_seconds'])}"))
        add("database size per document (text kept / not)", "—" if r is None or "db_bytes" not in r else f"{r['db_bytes'] / docs:,.0f} / {r.get('db_bytes_notext', float('nan')) / docs:,.0f} B ({r['db_bytes'] / 2**20:,.0f} / {r.get('db_bytes_notext', float('nan')) / 2**20:,.0f} MiB)")
    return rows


def memory_rows(res: dict) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for tool in ("datasketch", "rensa"):
        r = res.get(tool)
        add = lambda key, text: rows.setdefault(key, []).append(text)  # noqa: E731
        add("ingest, text kept", cell(r, lambda s: f"shingles + MinHash {fmt_s(s['signatures_seconds'])} ({s['docs'] / s['signatures_seconds']:,.0f} docs/s), LSH insert {fmt_s(s['insert_seconds'])}"))
        add("ingest, keep_text=False", "—")
        add("candidates + verification at 0.8", cell(r, lambda s: f"query all {fmt_s(s['query_seconds'])}: {s['candidates']:,} candidates → {s['pairs']:,} pairs (estimate ≥ 0.8, {fmt_s(s['verify_seconds'])})"))
        add("export (iterate pairs)", "— (in memory)")
        add("**end to end** (ingest + pairs + export)", cell(r, lambda s: f"**{fmt_s(s['seconds'])}**"))
        add("peak RSS (largest step)", cell(r, lambda s: fmt_mib(s["peak_rss_mib"])))
        add("recall, exact J ≥ 0.8 / ≥ 0.85", cell(r, lambda s: f"{fmt_pct(s['recall']['recall_080'])} / {fmt_pct(s['recall']['recall_085'])} ({s['recall']['missed_080']} missed; {s['recall']['not_in_truth']} false); candidates {fmt_pct(s['recall_candidates']['recall_080'])}" if "recall" in s else "—"))
        for key in ("point query p50 / p99 (200 new texts)", "reband 42 x 3 / back to 20 x 5", "database size per document (text kept / not)"):
            add(key, "—")
    return rows


def ratio_table(res: dict) -> str:
    """Time and peak RSS of datasketch and rensa divided by simindex's (> 1: simindex better)."""
    lines = ["| simindex backend | datasketch time ÷ simindex | rensa time ÷ simindex | datasketch peak RSS ÷ simindex | rensa peak RSS ÷ simindex |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for tool, label in (("simindex-pg", "PostgreSQL"), ("simindex-sqlite", "SQLite")):
        r = res.get(tool) or {}
        if "end_to_end_seconds" not in r:
            continue
        rss = max((v["peak_rss_mib"] for v in r.values() if isinstance(v, dict) and "peak_rss_mib" in v), default=None)
        cells = []
        for what in ("seconds", "peak_rss_mib"):
            for other in ("datasketch", "rensa"):
                o = res.get(other)
                if not o or "error" in o or "skipped" in o:
                    cells.append("skipped" if o and "skipped" in o else "—")
                    continue
                mine = r["end_to_end_seconds"] if what == "seconds" else rss
                cells.append(f"{o[what] / mine:.2f}×")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def corpus_section(res: dict) -> str:
    c = res.get("corpus", {})
    if "error" in c:
        return f"### {res['name']}\n\ncorpus generation failed: {c['error']}\n"
    docs = c["docs"]
    t = res.get("truth", {})
    desc = "Reuters-21578, non-empty texts" if res["name"] == "reuters" else "generated from Reuters-21578 (seeded; ~15% edited copies)"
    truth_line = (
        f"Exact ground truth (`simindex.exact.similar_pairs`, same 5-gram shingles): {t['pairs']:,} pairs with J ≥ 0.8, {t['pairs_085']:,} with J ≥ 0.85"
        + (f"; computed in {fmt_s(t['seconds'])}, peak RSS {fmt_mib(t['peak_rss_mib'])}" if "seconds" in t else " (cached from an earlier run)")
        if "pairs" in t else f"Exact ground truth: unavailable ({t.get('error', 'not computed')})"
    )
    head = "| | simindex PostgreSQL | simindex SQLite | datasketch 2.0 (memory) | rensa 0.5 (memory) |\n|---|---|---|---|---|"
    sim, mem = simindex_rows(res, docs), memory_rows(res)
    body = "\n".join(f"| {k} | " + " | ".join(sim[k] + mem[k]) + " |" for k in sim)
    skipped = [f"{tool}: {res[tool]['skipped']}" for tool in TOOLS if isinstance(res.get(tool), dict) and "skipped" in res[tool]]
    not_run = [tool for tool in TOOLS if tool not in res]
    notes = []
    if skipped:
        notes.append("Skipped: " + "; ".join(skipped) + ".")
    if not_run:
        notes.append("Not run (--only): " + ", ".join(not_run) + ".")
    return (
        f"### {res['name']}: {docs:,} documents ({desc}; `{res['corpus_file']}`)\n\n"
        f"{truth_line}.\n\n{head}\n{body}\n\n"
        f"Ratios (end-to-end seconds and peak RSS of the other tool ÷ simindex's; > 1 means simindex is faster / smaller):\n\n{ratio_table(res)}\n"
        + ("\n" + "\n".join(notes) + "\n" if notes else "")
    )


def targets(results: list[dict]) -> str:
    by_name = {r["name"]: r for r in results}

    def get(name, *path):
        node = by_name.get(name)
        for p in path:
            if not isinstance(node, dict) or p not in node:
                return None
            node = node[p]
        return node

    def row(target, measured, ok):
        verdict = "not measured" if measured is None else ("met" if ok else "**not met**")
        return f"| {target} | {measured if measured is not None else '—'} | {verdict} |"

    lines = ["| target | measured | verdict |", "|---|---|---|"]
    e100 = get("gen100000", "simindex-pg", "end_to_end_seconds")
    lines.append(row("100k into PostgreSQL, whole job (ingest with text + candidates + exact verification at 0.8 + export) ≤ 15 s", None if e100 is None else fmt_s(e100), e100 is not None and e100 <= 15))
    e400 = get("gen400000", "simindex-pg", "end_to_end_seconds")
    lines.append(row("400k end to end on PostgreSQL ≤ 60 s", None if e400 is None else fmt_s(e400), e400 is not None and e400 <= 60))
    q = get("gen400000", "simindex-pg", "query")
    ok_q = q is not None and "p50_ms" in q
    lines.append(row("point query p50 ≤ 2 ms on PostgreSQL at 400k", f"{q['p50_ms']:.2f} ms" if ok_q else None, ok_q and q["p50_ms"] <= 2))
    lines.append(row("point query p99 ≤ 10 ms on PostgreSQL at 400k", f"{q['p99_ms']:.2f} ms" if ok_q else None, ok_q and q["p99_ms"] <= 10))
    for tool, label in (("simindex-pg", "PostgreSQL"), ("simindex-sqlite", "SQLite")):
        rss = get("gen400000", tool, "ingest", "peak_rss_mib")
        mb = None if rss is None else rss * 2**20 / 1e6
        lines.append(row(f"peak ingest RSS < 600 MB at 400k ({label}, text kept)", None if mb is None else f"{mb:,.0f} MB", mb is not None and mb < 600))
    rb = get("gen400000", "simindex-pg", "reband", "reband_seconds")
    lines.append(row("re-band 400k (to 42 x 3, PostgreSQL) ≤ 20 s", None if rb is None else fmt_s(rb), rb is not None and rb <= 20))
    for r in results:
        for tool, label in (("simindex-pg", "PostgreSQL"), ("simindex-sqlite", "SQLite")):
            rc = get(r["name"], tool, "recall", "recall_080")
            if rc is not None:
                lines.append(row(f"recall at 0.8 ≥ 99% ({r['name']}, {label})", fmt_pct(rc), rc >= 0.99))
    return "\n".join(lines)


def report(results: list[dict], info: dict, command: str, args) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    sections = "\n".join(corpus_section(r) for r in results)
    return (
        f"## {when} UTC: end-to-end pipeline (bench_pipeline.py)\n\n"
        f"- Machine: nproc {info['nproc']}, {info['cpu']}, {info['ram_gib']:.1f} GiB RAM\n"
        f"- PostgreSQL: {info['postgres']} (same machine); SQLite {info['sqlite']} (file in /tmp)\n"
        f"- Versions: {info['versions']}\n"
        f"- Command: `{command}`\n"
        f"- Every step runs in a fresh Python process; times are measured inside it (interpreter start-up and imports excluded, numba cache loading included); "
        f"peak RSS is that process's `ru_maxrss` (the PostgreSQL server's memory is not included). simindex ingests by streaming the .jsonl.gz file; "
        f"datasketch and rensa stream it too, keep all signatures in memory, and verify candidates by the MinHash estimate (simindex: exact Jaccard of stored text). "
        f"rensa uses num_perm = 100 (RMinHashLSH needs bands to divide num_perm; 20 x 5 uses 100 hashes in every tool). "
        f"Point queries: 200 edited copies of random corpus documents, after {WARMUP_QUERIES} untimed warm-up queries. "
        f"Database size: `pg_database_size` / SQLite file + WAL, after find_pairs.\n\n"
        f"{sections}\n### Targets\n\n{targets(results)}\n"
    )


def append_results(section: str) -> None:
    if not RESULTS.exists():
        RESULTS.write_text("# Benchmark results\n", encoding="utf-8")
    with RESULTS.open("a", encoding="utf-8") as f:
        f.write("\n" + section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["reuters", "100000", "400000"],
                        help="corpora: 'reuters' and/or generated sizes (e.g. 20000 for a smoke run)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=20240601, help="corpus generator seed")
    parser.add_argument("--pg-url", default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG),
                        help="PostgreSQL server URL where bench_* databases may be created")  # fmt: skip
    parser.add_argument("--only", nargs="+", choices=TOOLS, help="run only these tools")
    parser.add_argument("--skip-slow", action="store_true",
                        help="skip datasketch on corpora larger than --slow-above documents")  # fmt: skip
    parser.add_argument("--slow-above", type=int, default=150_000)
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per step")
    parser.add_argument("--keep-databases", action="store_true", help="don't drop them at the end")
    parser.add_argument("--profile", action="store_true",
                        help="run simindex steps under pyinstrument (benchmarks/data/profiles/)")  # fmt: skip
    parser.add_argument("--write-results", action="store_true", help="append to RESULTS.md")
    parser.add_argument("--run-step", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_step:
        child_main(*args.run_step)
        return
    if args.profile and args.write_results:
        parser.error("--profile slows the steps down: don't combine it with --write-results")
    if not REUTERS.is_file():
        sys.exit(f"Reuters corpus not found: {REUTERS}")
    DATA.mkdir(parents=True, exist_ok=True)
    profile_dir = DATA / "profiles" if args.profile else None
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)
    command = f"{os.path.relpath(sys.executable)} {shlex.join(sys.argv)}"
    info = machine_info(args.pg_url)
    print(f"nproc {info['nproc']}, {info['cpu']}; PostgreSQL: {info['postgres']}")
    runner = Runner(args.timeout, profile_dir)
    results = []
    for size in args.sizes:
        results.append(bench_corpus(runner, size, args))
        (DATA / "pipeline_results.json").write_text(json.dumps(results, indent=1, default=str))
    section = report(results, info, command, args)
    print("\n" + section)
    if args.write_results:
        append_results(section)
        print(f"appended to {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
