"""Benchmark: the whole near-duplicate job, simindex (PostgreSQL, SQLite) vs datasketch and rensa.

For each corpus it measures, every step in a fresh Python subprocess (so the peak RSS,
``getrusage(RUSAGE_SELF).ru_maxrss``, or a CLI command's own, belongs to that step alone):

  * simindex on PostgreSQL (a fresh ``bench_`` database) and on SQLite (a file under /tmp):
    the whole job as the commands a user runs, each its own process timed from outside with
    its start-up (``simindex init``, ``simindex ingest FILE.jsonl.gz`` with text kept,
    ``simindex pairs`` (candidates in SQL + exact verification at 0.8), ``simindex export -o
    pairs.csv``), and their sum (end to end); or, with --library, the same as library calls
    (``Index.add``, ``find_pairs(0.8)``, iterating ``index.pairs()``) timed inside the step's
    process; an ingest into an index made with --no-keep-text (keep_text=False);
    ``reband(42, 3)`` and back to 20 x 5; ``index.query(text)`` latency for 200 edited copies of
    corpus documents that are not in the index; database size per document;
  * datasketch 2.0 in memory: Python 5-gram sets of ``simindex.normalize(text)``,
    ``MinHash.bulk``, ``MinHashLSH(num_perm=128, params=(20, 5))`` insert, a query per document
    for all candidate pairs, then the MinHash estimate >= 0.8 (vectorized) as verification;
  * rensa 0.5 in memory: the same shingles, ``RMinHash.from_token_sets``, ``RMinHashLSH`` with
    20 bands x 5 rows (rensa needs num_perm divisible by the bands, so num_perm = 100: the same
    100 hashes that 20 x 5 uses out of 128), ``query_all``, estimate >= 0.8 as verification;
  * recall against the exact all-pairs ground truth (``simindex.pipeline.exact.similar_pairs`` on the
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
import hashlib
import io
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tarfile
import tempfile
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

GENERATOR_VERSION = 2  # bump when the corpus generator changes (it names the cache files)
DUPLICATE_RATE = 0.15  # share of generated documents that are edited copies
NEW_STORY_REPLACE = 0.30  # share of words a "new" story replaces with random words
SYNTHETIC_WORDS = 1_000_000  # size of the random-word vocabulary
QUERIES = 200
WARMUP_QUERIES = 5
THRESHOLD = 0.8
K = 5  # shingle length (simindex's default SignatureSpec)
BATCH = 5_000
DISTURBED = 0.2  # cores used by other processes during a step that make its timing suspect
# Timed steps that leave the databases as they found them, so a disturbed one can be run
# again (not find_pairs: run again, it is incremental and finds nothing new). Not the
# corpus and the exact ground truth: only their results matter (the truth takes an hour).
REPEATABLE = {"warmup", "export", "query", "datasketch", "rensa"}
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
        # Seeded random words for "new" stories: 3-10 random letters, from a vocabulary
        # large enough that a new story's 5-grams are not all shared with its ~N/21,577
        # siblings (stories made from the same Reuters story), as they would be with
        # Reuters words only (then the exact ground truth cost grew ~N**2: 755 s and
        # 9.5 GiB at 100k documents).
        lengths = rng.integers(3, 11, size=SYNTHETIC_WORDS)
        letters = (rng.integers(0, 26, size=int(lengths.sum())) + ord("a")).astype(np.uint8)
        joined = letters.tobytes().decode("ascii")
        ends = np.cumsum(lengths).tolist()
        self.synthetic = [joined[e - n : e] for e, n in zip(ends, lengths.tolist(), strict=True)]

    def word(self) -> str:
        """A random Reuters word (for edits of a copy)."""
        return self.vocab[int(self.rng.integers(len(self.vocab)))]

    def new_story(self) -> str:
        """A Reuters story, sentences shuffled, NEW_STORY_REPLACE of its words replaced by
        random synthetic words."""
        rng = self.rng
        story = self.stories[int(rng.integers(len(self.stories)))]
        words = " ".join(story[i] for i in rng.permutation(len(story))).split()
        replace = np.flatnonzero(rng.random(len(words)) < NEW_STORY_REPLACE)
        picks = rng.integers(len(self.synthetic), size=replace.size)
        for i, v in zip(replace.tolist(), picks.tolist(), strict=True):
            words[i] = self.synthetic[v]
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
    DATA.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    planted, docs = 0, []  # only the texts are kept: 4M documents are ~3.5 GB of str
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=3) as f:
        for doc in generate(name, texts, editor, docs):
            planted += "dup_of" in doc
            f.write(json.dumps(doc) + "\n")
    tmp.rename(path)
    # Queries: edited copies of random corpus documents (another seed: not in the corpus).
    editor.rng = np.random.default_rng(seed + 1_000_003)
    sources = editor.rng.choice(len(docs), size=QUERIES + WARMUP_QUERIES, replace=False)
    queries = [{"source": int(s), "text": editor.edited_copy(docs[s])} for s in sources]
    qpath.write_text(json.dumps(queries), encoding="utf-8")
    return {
        "cached": False,
        "docs": len(docs),
        "planted": planted,
        "seconds": time.perf_counter() - started,
    }


def generate(name: str, texts: list[str], editor: Editor, written: list[str]) -> Iterator[dict]:
    """The documents of corpus ``name`` (id = row number as a string; an edited copy names
    its source in ``dup_of``), each text also appended to ``written``."""
    if name == "reuters":
        written.extend(texts)
        yield from ({"id": str(i), "text": t} for i, t in enumerate(texts))
        return
    for i in range(int(name[len("gen") :])):
        if i and editor.rng.random() < DUPLICATE_RATE:
            source = int(editor.rng.integers(i))
            text = editor.edited_copy(written[source])
            written.append(text)
            yield {"id": str(i), "text": text, "dup_of": source}
        else:
            written.append(editor.new_story())
            yield {"id": str(i), "text": written[-1]}


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


def step_truth(corpus: str, out: str, max_shingles: int) -> dict:
    """Exact pairs with Jaccard >= THRESHOLD (simindex.pipeline.exact.similar_pairs), saved as .npz.

    similar_pairs needs ~120 bytes per shingle (9 GiB for 100k documents), so a corpus of more
    than ``max_shingles`` shingles is joined in windows by set size, which is still exact:
    J(A, B) >= t implies t * max(|A|, |B|) <= min(|A|, |B|), so with size classes
    [c * q**i, c * q**(i + 1)) where q = 1 / t, every such pair lies within two adjacent
    classes, and similar_pairs on the documents of classes i and i + 1 (for every i) finds
    each pair at least once (prefix filtering is exact for any token order).
    """
    from simindex import SignatureSpec, normalize, shingle_sets
    from simindex.pipeline.exact import similar_pairs
    from simindex.pipeline.shingle import ShingleSets
    from simindex.pipeline.verify import exact_jaccard

    started = time.perf_counter()
    spec = SignatureSpec()
    parts = [
        shingle_sets([normalize(t) for _, t in b], spec)
        for b in batched(iter_corpus(Path(corpus)), 20_000)
    ]
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
        windows = [
            np.flatnonzero((size_class == c) | (size_class == c + 1))
            for c in range(int(size_class.max()) + 1)
        ]
        windows = [w for w in windows if w.size > 1]
    found = []
    for rows in windows:
        a, b, _ = similar_pairs(ShingleSets(hashes, offsets).take(rows), THRESHOLD)
        found.append(pack_pairs(rows[a], rows[b]))
    packed = np.unique(np.concatenate(found))
    a, b = packed >> PAIR_SHIFT, packed & ((1 << PAIR_SHIFT) - 1)
    jaccard = exact_jaccard(ShingleSets(hashes, offsets), a, b)
    np.savez(out, a=a, b=b, jaccard=jaccard)
    stats = {
        "pairs": int(a.size),
        "pairs_085": int((jaccard >= 0.85).sum()),
        "shingles": int(hashes.size),
        "windows": len(windows),
        "largest_window_shingles": int(max(counts[w].sum() for w in windows)),
        "shingle_seconds": shingled,
        "seconds": time.perf_counter() - started,
        "peak_rss_mib": maxrss_mib(),
    }
    Path(out).with_suffix(".json").write_text(json.dumps(stats))  # for later runs' reports
    return stats


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
            rows.append((pair.id_a, pair.id_b, pair.similarity))
    seconds = time.perf_counter() - started
    save_pairs(out, [int(r[0]) for r in rows], [int(r[1]) for r in rows])
    return {"pairs": len(rows), "seconds": seconds}


def step_query(url: str, queries: str, rounds: int = 1) -> dict:
    """Point queries after a warm-up; ``rounds`` times over (one p50 over more queries, for
    comparing a change of tenths of a millisecond on a noisy host)."""
    from simindex import Index

    texts = json.loads(Path(queries).read_text(encoding="utf-8"))
    warm, timed_queries = texts[:WARMUP_QUERIES], texts[WARMUP_QUERIES:] * rounds
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
        # (place in the run, 1 the first timed query; ms) of the five slowest
        "slowest": [(int(i) + 1, float(ms[i])) for i in np.argsort(ms)[::-1][:5]],
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


# What the CLI prints to stderr, parsed for the report (the figures the commands state).
_CLI_FIGURES = {
    "ingest": (re.compile(r"Added ([\d,]+) new documents"), ("docs",)),
    "pairs": (
        re.compile(r"([\d,]+) candidate pairs -> ([\d,]+) new pairs"),
        ("candidates", "pairs"),
    ),
    "export": (re.compile(r"Exported ([\d,]+) pairs"), ("pairs",)),
}


def step_cli(args: list[str], profile_to: str | None = None) -> dict:
    """Run ``simindex ARGS...`` as a user does: its own process (``python -m simindex``, so
    interpreter start-up, imports and the schema check count), timed from outside. Returns
    its wall seconds, CPU seconds and peak RSS, and the figures it printed (see _CLI_FIGURES).
    ``profile_to``: run it under pyinstrument, writing the text profile there."""
    runner = [sys.executable, "-P", "-m"]  # -P: the measured simindex, not the cwd's
    if profile_to:
        runner += [
            "pyinstrument",
            "-i",
            "0.001",
            "-r",
            "text",
            "--no-color",
            "-o",
            profile_to,
            "-m",
        ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([*runner, "simindex", *args], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"simindex {args[0]} failed: {proc.stderr.strip()[-500:]}")
    result = {
        "seconds": seconds,
        "cpu_seconds": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
        "peak_rss_mib": after.ru_maxrss / 1024,  # the largest child's: the command's
    }
    if args[0] in _CLI_FIGURES:
        pattern, names = _CLI_FIGURES[args[0]]
        found = pattern.search(proc.stderr)
        if found is None:
            raise RuntimeError(f"simindex {args[0]}: no figures in {proc.stderr.strip()[-300:]!r}")
        result.update(zip(names, (int(g.replace(",", "")) for g in found.groups()), strict=True))
    return result


def csv_pairs(path: str, out: str) -> None:
    """The pairs of an exported CSV (external ids = row numbers), saved for recall."""
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        rows = [(int(r["id_a"]), int(r["id_b"])) for r in csv.DictReader(f)]
    save_pairs(out, [a for a, _ in rows], [b for _, b in rows])


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
    return {
        "docs": len(minhashes),
        "seconds": total,
        "candidates": int(packed.size),
        "pairs": int(kept.size),
        **{f"{k}_seconds": v for k, v in times.items()},
    }


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
    found = [
        (i << PAIR_SHIFT) | j
        for i, keys in enumerate(lsh.query_all(minhashes))
        for j in keys
        if j > i
    ]
    packed = np.unique(np.array(found, dtype=np.int64))
    t1 = time.perf_counter()
    sigs = np.array([m.digest() for m in minhashes], dtype=np.uint32)
    kept = verify_by_estimate(sigs, packed)
    times["query"], times["verify"] = t1 - t0, time.perf_counter() - t1
    total = time.perf_counter() - started
    np.save(out_candidates, packed)
    np.save(out_pairs, kept)
    return {
        "docs": len(minhashes),
        "seconds": total,
        "candidates": int(packed.size),
        "pairs": int(kept.size),
        **{f"{k}_seconds": v for k, v in times.items()},
    }


def step_warmup() -> dict:
    """Exercise every compiled kernel once on 300 Reuters stories (numba compiles or loads its
    cache here, not in a timed step), in a throw-away SQLite file; and compile what the CLI's
    first command would (kernels.compile_kernels: every kernel under both schemes, and the
    stamp that tells later commands so), or the first timed command compiles it."""
    import simindex
    from simindex import Index, SignatureSpec, normalize, shingle_sets
    from simindex.pipeline.exact import similar_pairs
    from simindex.pipeline.kernels import compile_kernels, kernels_cached

    started = time.perf_counter()
    if not kernels_cached():
        compile_kernels()
    texts = reuters_texts()[:300]
    with tempfile.TemporaryDirectory() as tmp:
        with Index.create(f"sqlite:///{tmp}/warmup.db") as index:
            index.add([(str(i), t) for i, t in enumerate(texts)])
            index.find_pairs(THRESHOLD)
            list(index.pairs(THRESHOLD))
            index.query(texts[0])
            index.reband(42, 3)
    similar_pairs(shingle_sets([normalize(t) for t in texts], SignatureSpec()), THRESHOLD)
    return {"seconds": time.perf_counter() - started, "simindex": simindex.__file__}


STEPS = {
    "warmup": step_warmup,
    "corpus": step_corpus,
    "truth": step_truth,
    "ingest": step_ingest,
    "find_pairs": step_find_pairs,
    "export": step_export,
    "query": step_query,
    "reband": step_reband,
    "cli": step_cli,
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
    result.setdefault("peak_rss_mib", maxrss_mib())  # a CLI step gives its command's
    result["start_rss_mib"] = baseline
    Path(out).write_text(json.dumps(result))


# -- the parent: orchestration --------------------------------------------------------------


def host() -> str:
    """The machine a benchmark ran on, as its reports name it: host name, cores, Python."""
    return f"{platform.node()}, {os.cpu_count()} cores, {platform.python_version()}"


# The /proc/diskstats columns disk_counters sums (0-based, after major, minor and name).
DISKSTATS = {"reads": 3, "read_sectors": 5, "read_ms": 6, "written_sectors": 9}


def disk_counters() -> dict[str, int]:
    """Counters of the whole disks (not partitions, loop or RAM) so far, summed: reads
    completed, sectors read, milliseconds spent reading, sectors written."""
    totals = dict.fromkeys(DISKSTATS, 0)
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            name = fields[2]
            if name.startswith(("loop", "ram")) or not Path(f"/sys/block/{name}").exists():
                continue
            for key, column in DISKSTATS.items():
                totals[key] += int(fields[column])
    return totals


def cached_relations(url: str) -> list[tuple[str, float, float]]:
    """(relation, MiB in the OS page cache, MiB on disk) of the database's relations of 8 MiB
    or more (util-linux's fincore over their segment files; the data directory must be
    readable: run as the server's user or root)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        data = Path(conn.execute("SHOW data_directory").fetchone()[0])
        relations = conn.execute(
            "SELECT c.oid::regclass::text, pg_relation_filepath(c.oid) FROM pg_class c "
            "WHERE c.relkind IN ('r', 'i', 't') AND pg_relation_size(c.oid) >= 8 * 1024 * 1024 "
            "ORDER BY pg_relation_size(c.oid) DESC"
        ).fetchall()
    found = []
    for name, path in relations:
        first = data / path
        files = [first, *sorted(first.parent.glob(f"{first.name}.*"), key=lambda f: f.name)]
        files = [str(f) for f in files if f.suffix.lstrip(".").isdigit() or f == first]
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE", *files],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        sizes = np.array([line.split() for line in out.splitlines()], dtype=np.int64)
        found.append((name, sizes[:, 0].sum() / 2**20, sizes[:, 1].sum() / 2**20))
    return found


def cpu_ticks() -> tuple[int, int]:
    """(busy CPU ticks of the whole machine, CPU ticks of PostgreSQL's processes), where the
    latter includes exited backends (the postmaster's cutime/cstime)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    busy = user + nice + system + irq + softirq + steal
    postgres = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        if name.startswith("postgres"):
            values = rest.split()  # fields 3.. of proc(5): utime is [11], cutime [13]
            postgres += sum(int(v) for v in values[11:15])
    return busy, postgres


def own_ticks() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * os.sysconf("SC_CLK_TCK")


def foreign_cores(seconds: float = 2.0) -> float:
    """CPU cores used by processes other than this benchmark and PostgreSQL, over a while."""
    busy0, pg0 = cpu_ticks()
    time.sleep(seconds)
    busy1, pg1 = cpu_ticks()
    return max(0.0, (busy1 - busy0) - (pg1 - pg0)) / os.sysconf("SC_CLK_TCK") / seconds


class Runner:
    def __init__(
        self, timeout: float, profile_dir: Path | None, wait_idle: float, code: Path | None
    ):
        self.timeout = timeout
        self.profile_dir = profile_dir
        self.wait_idle = wait_idle
        self.env = dict(os.environ)
        if code is not None:  # import simindex from a snapshot, not the working tree
            self.env["PYTHONPATH"] = os.pathsep.join(
                [str(code), *filter(None, [os.environ.get("PYTHONPATH")])]
            )

    def wait_until_idle(self) -> float:
        """Wait (up to wait_idle seconds) until other processes use < DISTURBED cores; returns
        the last measurement."""
        deadline = time.monotonic() + self.wait_idle
        load = foreign_cores(1.0)
        while load >= DISTURBED and time.monotonic() < deadline:
            print(f"(waiting: other processes use {load:.1f} cores)", end=" ", flush=True)
            time.sleep(10)
            load = foreign_cores(2.0)
        return load

    def run(self, step: str, label: str = "", profile: bool = False, **params) -> dict:
        """Run a step in a fresh subprocess; returns its result, or {"error": ...}.

        The result also says how much CPU other processes (not this step, not PostgreSQL)
        used meanwhile: ``foreign_cores``, in cores, averaged over the step. A step that can
        be repeated (REPEATABLE) is, up to twice, when that was DISTURBED or more."""
        if profile and self.profile_dir:
            params["profile"] = str(self.profile_dir / f"{label or step}.txt")
        print(f"  {label or step} ...", end=" ", flush=True)
        for attempt in range(1, 4):
            result = self._attempt(step, params)
            result["attempts"] = attempt
            disturbed = result.get("foreign_cores", 0) >= DISTURBED
            repeatable = step in REPEATABLE or (step == "cli" and params["args"][0] in REPEATABLE)
            if "error" in result or not disturbed or not repeatable or attempt == 3:
                break
            print(f"(disturbed: {result['foreign_cores']:.2f} cores; again)", end=" ", flush=True)
        shown = {k: v for k, v in result.items() if not isinstance(v, list)}
        print(
            ", ".join(
                f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()
            )
        )
        return result

    def _attempt(self, step: str, params: dict) -> dict:
        out = DATA / f".step_{os.getpid()}.json"
        out.unlink(missing_ok=True)
        command = [sys.executable, __file__, "--run-step", step, json.dumps(params), str(out)]
        idle_before = self.wait_until_idle() if self.wait_idle else None
        (busy0, pg0), own0 = cpu_ticks(), own_ticks()
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=self.timeout, env=self.env
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {self.timeout:.0f} s"}
        wall = time.perf_counter() - started
        (busy1, pg1), own1 = cpu_ticks(), own_ticks()
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"error": tail[0]}
        result = json.loads(out.read_text())
        out.unlink()
        result["process_seconds"] = wall
        other = (busy1 - busy0) - (pg1 - pg0) - (own1 - own0)
        result["foreign_cores"] = max(0.0, other / os.sysconf("SC_CLK_TCK") / wall)
        if idle_before is not None:
            result["foreign_cores_before"] = idle_before
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


def bench_simindex(
    runner: Runner, backend: str, name: str, corpus: Path, queries: Path, admin_url: str, args
) -> dict:
    """The whole job (ingest with text, pairs at 0.8, export), then size, query, reband;
    ingest without text into a second database.

    The job runs as the CLI commands a user types (``simindex init``, ``ingest``, ``pairs``,
    ``export -o pairs.csv``), each its own process, start-up included; with ``args.library``
    as library calls timed inside a fresh process instead (no start-up), as before."""
    tag = f"{name}_{backend}"
    pairs_file = DATA / f"{tag}_exported.npy"
    pairs_file.unlink(missing_ok=True)  # recall is of this run's export only
    if backend == "pg":
        text_db, plain_db = f"bench_pipeline_{name}_text", f"bench_pipeline_{name}_notext"
        url, plain_url = (
            fresh_pg_database(admin_url, text_db),
            fresh_pg_database(admin_url, plain_db),
        )
        size = lambda which: pg_size(admin_url, which)  # noqa: E731
    else:
        text_db, plain_db = (
            Path(f"/tmp/bench_pipeline_{name}_text.db"),
            Path(f"/tmp/bench_pipeline_{name}_notext.db"),
        )
        url, plain_url = fresh_sqlite(text_db), fresh_sqlite(plain_db)
        size = sqlite_size
    r: dict = {}
    run = lambda step, **p: runner.run(step, label=f"{tag}_{step}", profile=True, **p)  # noqa: E731

    def cli(label: str, *command: str) -> dict:
        profile = runner.profile_dir and str(runner.profile_dir / f"{tag}_cli_{label}.txt")
        return runner.run("cli", label=f"{tag}_cli_{label}", args=list(command), profile_to=profile)

    steps = ["ingest", "find_pairs", "export"]
    if args.library:
        r["ingest"] = run("ingest", url=url, corpus=str(corpus), keep_text=True)
        if "error" not in r["ingest"]:
            r["find_pairs"] = run("find_pairs", url=url)
            r["export"] = run("export", url=url, out=str(pairs_file))
    else:
        steps.insert(0, "init")
        exported_csv = DATA / f"{tag}_pairs.csv"
        r["init"] = cli("init", "init", "--db", url)
        if "error" not in r["init"]:
            r["ingest"] = cli("ingest", "ingest", str(corpus), "--db", url)
        if "error" not in r.get("ingest", {"error": ""}):
            r["find_pairs"] = cli("pairs", "pairs", "--db", url)
            r["export"] = cli("export", "export", "--db", url, "-o", str(exported_csv))
            if "error" not in r["export"]:
                csv_pairs(str(exported_csv), str(pairs_file))
                exported_csv.unlink()
    if "error" not in r.get("ingest", {"error": ""}):
        r["db_bytes"] = size(text_db)
        r["query"] = run("query", url=url, queries=str(queries))
        r["reband"] = run("reband", url=url)
    if args.library:
        r["ingest_notext"] = runner.run(
            "ingest",
            label=f"{tag}_ingest_notext",
            profile=True,
            url=plain_url,
            corpus=str(corpus),
            keep_text=False,
        )
    else:
        cli("init_notext", "init", "--db", plain_url, "--no-keep-text")
        r["ingest_notext"] = cli("ingest_notext", "ingest", str(corpus), "--db", plain_url)
    if "error" not in r["ingest_notext"]:
        r["db_bytes_notext"] = size(plain_db)
    done = [r.get(s, {"error": "not run"}) for s in steps]
    if not any("error" in s for s in done):
        r["end_to_end_seconds"] = sum(s["seconds"] for s in done)
        r["end_to_end_steps"] = steps
        if not args.library:
            r["end_to_end_cpu_seconds"] = sum(s["cpu_seconds"] for s in done)
    if pairs_file.exists():
        r["exported"] = str(pairs_file)
    if not args.keep_databases:
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
    path, qpath, tpath = (
        corpus_path(name, args.seed),
        queries_path(name, args.seed),
        truth_path(name, args.seed),
    )
    print(f"\n== corpus {name} ==")
    res: dict = {
        "name": name,
        "corpus_file": str(path.relative_to(REPO)),
        "via": "library" if args.library else "cli",
    }
    res["corpus"] = runner.run("corpus", label=f"{name}_corpus", name=name, seed=args.seed)
    if "error" in res["corpus"]:
        return res
    if tpath.exists():
        sidecar = tpath.with_suffix(".json")
        res["truth"] = {
            "cached": True,
            **(json.loads(sidecar.read_text()) if sidecar.exists() else {}),
        }
    else:
        res["truth"] = runner.run(
            "truth",
            label=f"{name}_truth",
            corpus=str(path),
            out=str(tpath),
            max_shingles=args.truth_max_shingles,
        )
    truth = None
    if tpath.exists():
        t = np.load(tpath)
        truth = {"packed": pack_pairs(t["a"], t["b"]), "jaccard": t["jaccard"]}
        order = np.argsort(truth["packed"])
        truth = {k: v[order] for k, v in truth.items()}
        res["truth"].update(
            pairs=int(truth["packed"].size), pairs_085=int((truth["jaccard"] >= 0.85).sum())
        )
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
            r = bench_simindex(runner, backend, name, path, qpath, args.pg_url, args)
            if truth is not None and "exported" in r:
                r["recall"] = recall(r["exported"], truth)
        else:
            cands, found = DATA / f"{name}_{tool}_candidates.npy", DATA / f"{name}_{tool}_pairs.npy"
            r = runner.run(
                tool,
                label=f"{name}_{tool}",
                corpus=str(path),
                out_candidates=str(cands),
                out_pairs=str(found),
            )
            if truth is not None and "error" not in r:
                r["recall_candidates"] = recall(cands, truth)
                r["recall"] = recall(found, truth)
        res[tool] = r
        if "recall" in r:
            rc = r["recall"]
            print(
                f"    recall >= 0.8: {rc['recall_080']:.4%} ({rc['missed_080']} missed), "
                f">= 0.85: {rc['recall_085']:.4%}; not in truth: {rc['not_in_truth']}"
            )
    return res


# -- the report -----------------------------------------------------------------------------


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def source_digest() -> str:
    """A digest of the working tree's simindex sources (to notice edits during a run)."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "simindex").rglob("*.py")) + sorted(REPO.glob("migrations/**/*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def snapshot(commit: str) -> Path:
    """simindex as of a git commit, exported to benchmarks/data/code-<commit>/ and laid out as
    the wheel ships it (migrations/ inside the package), so a run measures one fixed version
    however the working tree changes meanwhile."""
    target = DATA / f"code-{commit}"
    if not (target / "simindex" / "migrations").is_dir():
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", commit, "simindex", "migrations"],
            capture_output=True,
            check=True,
        ).stdout
        staging = Path(tempfile.mkdtemp(dir=DATA))
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
        (staging / "migrations").rename(staging / "simindex" / "migrations")
        staging.rename(target)
    return target


def code_info(live: bool) -> dict:
    head = git("rev-parse", "--short=10", "HEAD")
    dirty = bool(git("status", "--porcelain", "--", "simindex", "migrations"))
    if live:
        note = f"working tree at {head}" + (" with uncommitted changes" if dirty else "")
        return {"commit": head, "code": note, "digest": source_digest()}
    note = f"commit {head}, exported to benchmarks/data/code-{head}/"
    if dirty:
        note += " (uncommitted changes in the working tree are not measured)"
    return {"commit": head, "code": note, "path": str(snapshot(head))}


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
        + ", ".join(
            f"{p} {version(p)}"
            for p in ["simindex", "numpy", "numba", "sqlalchemy", "psycopg", "datasketch", "rensa"]
        ),
    }
    try:
        with pg_admin(admin_url) as conn:
            show = {
                s: conn.execute(f"SHOW {s}").fetchone()[0]
                for s in (
                    "server_version",
                    "shared_buffers",
                    "work_mem",
                    "maintenance_work_mem",
                    "synchronous_commit",
                    "max_wal_size",
                    "autovacuum",
                )
            }
        info["postgres"] = ", ".join(f"{k} {v}" for k, v in show.items())
    except Exception as exc:  # reported, not fatal: SQLite still runs
        info["postgres"] = f"unavailable ({type(exc).__name__})"
    import sqlite3

    info["sqlite"] = sqlite3.sqlite_version
    return info


def fmt_s(x: float) -> str:
    return f"{x:,.1f} s" if x >= 10 else f"{x:,.2f} s"


def fmt_pct(x: float) -> str:
    return "—" if x != x else f"{100 * x:.3f}%"


def peak_rss(tool_result: dict) -> float | None:
    """The largest peak RSS among a tool's steps (MiB)."""
    return max((r["peak_rss_mib"] for _, r in step_results(tool_result)), default=None)


def step_results(node, path=""):
    """(label, result) of every step result (a dict with peak_rss_mib) inside ``node``."""
    if isinstance(node, dict):
        if "peak_rss_mib" in node:
            yield path, node
        for key, value in node.items():
            yield from step_results(value, f"{path}/{key}" if path else key)


def show(result: dict | None, fmt) -> str:
    """fmt(result), unless the step was not run, failed or was skipped."""
    if result is None:
        return "not run"
    if "skipped" in result:
        return "skipped"
    if "error" in result:
        return f"failed: {result['error'][:60]}"
    try:
        text = fmt(result)
    except KeyError:
        return "—"
    return text + " †" if result.get("foreign_cores", 0) >= DISTURBED else text


# Cell formatters. simindex ones get a step's result, or (marked "tool") the tool's results.
def _cpu(s):
    return f", CPU {fmt_s(s['cpu_seconds'])}" if "cpu_seconds" in s else ""


def _command(s):
    return f"{fmt_s(s['seconds'])}{_cpu(s)}, {s['peak_rss_mib']:,.0f} MiB"


def _ingest(s):
    return (
        f"{fmt_s(s['seconds'])} ({s['docs'] / s['seconds']:,.0f} docs/s){_cpu(s)}, "
        f"{s['peak_rss_mib']:,.0f} MiB"
    )


def _find_pairs(s):
    return (
        f"{fmt_s(s['seconds'])}: {s['candidates']:,} candidates → {s['pairs']:,} pairs "
        f"(exact J){_cpu(s)}, {s['peak_rss_mib']:,.0f} MiB"
    )


def _export(s):
    return f"{fmt_s(s['seconds'])} ({s['pairs']:,} pairs){_cpu(s)}, {s['peak_rss_mib']:,.0f} MiB"


def _recall(r):
    c = r["recall"]
    return (
        f"{fmt_pct(c['recall_080'])} / {fmt_pct(c['recall_085'])} "
        f"({c['missed_080']:,} missed; {c['not_in_truth']:,} reported pairs have J < 0.8)"
    )


def _query(s):
    return (
        f"{s['p50_ms']:.2f} / {s['p99_ms']:.2f} ms "
        f"({s['found_source']}/{s['queries']} find their source)"
    )


def _reband(s):
    return f"{fmt_s(s['reband_seconds'])} / {fmt_s(s['back_seconds'])}"


def _size(r, docs):
    return (
        f"{r['db_bytes'] / docs:,.0f} / {r['db_bytes_notext'] / docs:,.0f} B "
        f"({r['db_bytes'] / 2**20:,.0f} / {r['db_bytes_notext'] / 2**20:,.0f} MiB)"
    )


def _mem_ingest(s):
    return (
        f"shingles + MinHash {fmt_s(s['signatures_seconds'])} "
        f"({s['docs'] / s['signatures_seconds']:,.0f} docs/s), "
        f"LSH insert {fmt_s(s['insert_seconds'])}"
    )


def _mem_pairs(s):
    return (
        f"query all {fmt_s(s['query_seconds'])}: {s['candidates']:,} candidates → "
        f"{s['pairs']:,} pairs (estimate ≥ 0.8, {fmt_s(s['verify_seconds'])})"
    )


def _mem_recall(s):
    return _recall(s) + f"; candidates {fmt_pct(s['recall_candidates']['recall_080'])}"


def table_rows(res: dict, docs: int) -> list[list[str]]:
    """The per-corpus table: one row per measure, one column per tool."""
    pg, lite = res.get("simindex-pg"), res.get("simindex-sqlite")
    mem = [res.get("datasketch"), res.get("rensa")]

    def simindex(step_fmt=None, step=None, tool_fmt=None):
        cells = []
        for r in (pg, lite):
            if r is None:
                cells.append("not run")
            elif step:
                cells.append(show(r.get(step, {"error": "not run"}), step_fmt))
            else:
                cells.append(show(r, tool_fmt))
        return cells

    def memory(fmt=None):
        return [show(r, fmt) if fmt else "—" for r in mem]

    def end_to_end(r):
        if "end_to_end_seconds" not in r:  # datasketch, rensa: one step
            return f"**{fmt_s(r['seconds'])}**"
        steps = [r[name] for name in r["end_to_end_steps"]]
        mark = " †" if any(st.get("foreign_cores", 0) >= DISTURBED for st in steps) else ""
        cpu = r.get("end_to_end_cpu_seconds")
        return f"**{fmt_s(r['end_to_end_seconds'])}**{mark}" + (
            f" (CPU of the commands {fmt_s(cpu)})" if cpu is not None else ""
        )

    def rss(r):
        return f"{peak_rss(r):,.0f} MiB"

    cli = res.get("via") == "cli"
    init = [["`simindex init`", *simindex(_command, "init"), *memory()]] if cli else []
    return [
        *init,
        [
            "`simindex ingest`, text kept" if cli else "ingest, text kept",
            *simindex(_ingest, "ingest"),
            *memory(_mem_ingest),
        ],
        [
            "`simindex ingest`, index made with --no-keep-text"
            if cli
            else "ingest, keep_text=False",
            *simindex(_ingest, "ingest_notext"),
            *memory(),
        ],
        [
            "`simindex pairs` (candidates + verification at 0.8)"
            if cli
            else "candidates + verification at 0.8",
            *simindex(_find_pairs, "find_pairs"),
            *memory(_mem_pairs),
        ],
        [
            "`simindex export -o pairs.csv`" if cli else "export (iterate `index.pairs()`)",
            *simindex(_export, "export"),
            "— (in memory)",
            "— (in memory)",
        ],
        [
            "**end to end** (init + ingest + pairs + export, each a process)"
            if cli
            else "**end to end** (ingest + pairs + export)",
            *simindex(tool_fmt=end_to_end),
            *memory(end_to_end),
        ],
        ["peak RSS (largest step)", *simindex(tool_fmt=rss), *memory(rss)],
        ["recall of exact J ≥ 0.8 / ≥ 0.85", *simindex(tool_fmt=_recall), *memory(_mem_recall)],
        ["point query p50 / p99 (200 new texts)", *simindex(_query, "query"), *memory()],
        ["reband to 42 x 3 / back to 20 x 5", *simindex(_reband, "reband"), *memory()],
        [
            "database per document, text kept / not",
            *simindex(tool_fmt=lambda r: _size(r, docs)),
            *memory(),
        ],
    ]


def ratio_table(res: dict) -> str:
    """Time and peak RSS of datasketch and rensa divided by simindex's (> 1: simindex better)."""
    lines = [
        "| simindex on | datasketch time ÷ simindex | rensa time ÷ simindex "
        "| datasketch peak RSS ÷ simindex | rensa peak RSS ÷ simindex |",
        "|---|---:|---:|---:|---:|",
    ]
    for tool, label in (("simindex-pg", "PostgreSQL"), ("simindex-sqlite", "SQLite")):
        mine = res.get(tool) or {}
        if "end_to_end_seconds" not in mine:
            continue
        cells = []
        for what in ("time", "rss"):
            for other in (res.get("datasketch"), res.get("rensa")):
                if not other or "error" in other or "skipped" in other:
                    cells.append("skipped" if other and "skipped" in other else "—")
                elif what == "time":
                    cells.append(f"{other['seconds'] / mine['end_to_end_seconds']:.2f}×")
                else:
                    cells.append(f"{other['peak_rss_mib'] / peak_rss(mine):.2f}×")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def foreign_note(res: dict) -> str:
    loads = [(r["foreign_cores"], label) for label, r in step_results(res) if "foreign_cores" in r]
    if not loads:
        return ""
    worst, where = max(loads)
    text = (
        f"CPU used by other processes (not the benchmark, not PostgreSQL) during the steps: "
        f"mean {np.mean([x for x, _ in loads]):.2f} cores, max {worst:.2f} ({where})."
    )
    if worst >= DISTURBED:
        text += (
            f" † marks steps during which they used {DISTURBED} cores or more (on "
            "2 cores): those times are suspect."
        )
    return text


def corpus_section(res: dict) -> str:
    c = res.get("corpus", {})
    if "error" in c:
        return f"### {res['name']}\n\ncorpus generation failed: {c['error']}\n"
    docs = c["docs"]
    if res["name"] == "reuters":
        desc = "Reuters-21578, non-empty texts"
    else:
        desc = f"generated from Reuters-21578, {c['planted']:,} planted edited copies"
    t = res.get("truth", {})
    if "pairs" in t:
        truth = (
            f"Exact ground truth (`simindex.pipeline.exact.similar_pairs`, same 5-gram shingles): "
            f"{t['pairs']:,} pairs with J ≥ 0.8, {t['pairs_085']:,} with J ≥ 0.85"
        )
        if "seconds" in t:
            when = " by an earlier run" if t.get("cached") else ""
            truth += (
                f"; computed{when} in {fmt_s(t['seconds'])}, peak RSS {t['peak_rss_mib']:,.0f} MiB"
            )
            if t.get("windows", 1) > 1:
                truth += f" ({t['windows']} windows by set size)"
            if t.get("note"):
                truth += f" ({t['note']})"
        else:
            truth += " (cached by an earlier run)"
    else:
        truth = f"Exact ground truth unavailable ({t.get('error', 'not computed')})"
    rows = table_rows(res, docs)
    table = "\n".join(
        [
            "| | simindex PostgreSQL | simindex SQLite | datasketch 2.0 (memory) | rensa 0.5 (memory) |",
            "|---|---|---|---|---|",
        ]
        + ["| " + " | ".join(row) + " |" for row in rows]
    )
    notes = [foreign_note(res)]
    skipped = [
        f"{tool} ({res[tool]['skipped']})"
        for tool in TOOLS
        if isinstance(res.get(tool), dict) and "skipped" in res[tool]
    ]
    if skipped:
        notes.append("Skipped: " + "; ".join(skipped) + ".")
    not_run = [tool for tool in TOOLS if tool not in res]
    if not_run:
        notes.append("Not run (--only): " + ", ".join(not_run) + ".")
    return (
        f"### {res['name']}: {docs:,} documents ({desc}; `{res['corpus_file']}`)\n\n"
        f"{truth}.\n\n{table}\n\n"
        "End-to-end seconds and peak RSS of the other tool ÷ simindex's (> 1: simindex is "
        f"faster / smaller):\n\n{ratio_table(res)}\n\n" + "\n".join(n for n in notes if n) + "\n"
    )


def targets(results: list[dict]) -> str:
    by_name = {r["name"]: r for r in results}

    def get(name, *path):
        node = by_name.get(name)
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node

    lines = ["| target | measured | verdict |", "|---|---|---|"]

    def row(target, value, shown, ok):
        verdict = "not measured" if value is None else "met" if ok(value) else "**not met**"
        lines.append(f"| {target} | {'—' if value is None else shown(value)} | {verdict} |")

    mine, rensa = (
        get("gen100000", "simindex-pg", "end_to_end_seconds"),
        get("gen100000", "rensa", "seconds"),
    )
    how = "through the CLI" if results and results[0].get("via") == "cli" else "as library calls"
    row(
        f"100k whole job into PostgreSQL ({how}: ingest with text, pairs at 0.8 with exact "
        "verification, export) ≥ 2× as fast as rensa's in-memory pipeline, same run",
        None if mine is None or rensa is None else rensa / mine,
        lambda v: f"{v:.2f}× ({fmt_s(mine)} vs rensa {fmt_s(rensa)})",
        lambda v: v >= 2,
    )
    row(
        f"400k end to end on PostgreSQL ({how}) ≤ 30 s",
        get("gen400000", "simindex-pg", "end_to_end_seconds"),
        fmt_s,
        lambda v: v <= 30,
    )
    pg, lite = (
        get("gen400000", "simindex-pg", "ingest", "seconds"),
        get("gen400000", "simindex-sqlite", "ingest", "seconds"),
    )
    row(
        "400k ingest (text kept) on SQLite within 1.25× PostgreSQL's",
        None if pg is None or lite is None else lite / pg,
        lambda v: f"{v:.2f}× ({fmt_s(lite)} vs {fmt_s(pg)})",
        lambda v: v <= 1.25,
    )
    row(
        "point query p50 ≤ 2 ms on PostgreSQL at 400k",
        get("gen400000", "simindex-pg", "query", "p50_ms"),
        "{:.2f} ms".format,
        lambda v: v <= 2,
    )
    row(
        "point query p99 ≤ 10 ms on PostgreSQL at 400k",
        get("gen400000", "simindex-pg", "query", "p99_ms"),
        "{:.2f} ms".format,
        lambda v: v <= 10,
    )
    for tool, label in (("simindex-pg", "PostgreSQL"), ("simindex-sqlite", "SQLite")):
        rss = get("gen400000", tool, "ingest", "peak_rss_mib")
        row(
            f"peak ingest RSS < 600 MB at 400k ({label}, text kept)",
            None if rss is None else rss * 2**20 / 1e6,
            "{:,.0f} MB".format,
            lambda v: v < 600,
        )
    row(
        "re-band 400k (to 42 x 3) on PostgreSQL ≤ 20 s",
        get("gen400000", "simindex-pg", "reband", "reband_seconds"),
        fmt_s,
        lambda v: v <= 20,
    )
    for r in results:
        for tool, label in (("simindex-pg", "PostgreSQL"), ("simindex-sqlite", "SQLite")):
            row(
                f"recall at 0.8 ≥ 99.9% ({r['name']}, {label})",
                get(r["name"], tool, "recall", "recall_080"),
                fmt_pct,
                lambda v: v >= 0.999,
            )
    return "\n".join(lines)


METHODS = {
    "cli": "simindex's job runs as the commands a user types, each its own process timed from "
    "outside, interpreter start-up and imports included (`python -m simindex init --db URL`, "
    "`ingest FILE.jsonl.gz --db URL`, `pairs --db URL`, `export --db URL -o pairs.csv`); "
    "CPU is the command's user + system seconds. Query and reband latency, and the other "
    "tools, are timed inside a fresh Python process (start-up excluded; numba cache loading "
    "included).",
    "library": "every step runs in a fresh Python process and is timed inside it (interpreter "
    "start-up and imports excluded; numba cache loading included); simindex's job is library "
    "calls (`Index.add`, `find_pairs`, iterating `index.pairs()`).",
}


def report(results: list[dict], info: dict, command: str) -> str:
    when = info.get("finished") or datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    warmup = show(info.get("warmup"), lambda w: fmt_s(w["seconds"]))
    sections = "\n".join(corpus_section(r) for r in results)
    return f"""## {when} UTC: end-to-end pipeline

- Machine: nproc {info["nproc"]}, {info["cpu"]}, {info["ram_gib"]:.1f} GiB RAM
- PostgreSQL: {info["postgres"]} (same machine); SQLite {info["sqlite"]} (a file in /tmp)
- simindex: {info.get("code", "working tree (version not recorded)")}
- Versions: {info["versions"]}
- Command: `{command}`
- Warm-up before the corpora (every numba kernel compiled or loaded from its cache, on 300
  stories; not part of any figure below): {warmup}
- Method: {METHODS[results[0].get("via", "library") if results else "library"]} Peak RSS is
  that process's `ru_maxrss` (PostgreSQL's own memory is not included). simindex ingests by
  streaming the .jsonl.gz file (batches of 5,000); datasketch and rensa stream it too, keep every signature in
  memory, and verify candidates by the MinHash estimate (simindex: by the exact Jaccard of the
  stored text). rensa's RMinHashLSH needs the bands to divide num_perm, so it uses 100 hashes
  (20 x 5 uses 100 hashes in every tool). Point queries: {QUERIES} edited copies of random
  corpus documents (not indexed), after {WARMUP_QUERIES} untimed warm-up queries. Database
  size: `pg_database_size` or the SQLite files, after find_pairs.

{sections}
### Targets

{targets(results)}
"""


def append_results(section: str) -> None:
    if not RESULTS.exists():
        RESULTS.write_text("# Benchmark results\n", encoding="utf-8")
    with RESULTS.open("a", encoding="utf-8") as f:
        f.write("\n" + section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes",
        nargs="+",
        default=["reuters", "100000", "400000"],
        help="corpora: 'reuters' and/or generated sizes (e.g. 20000 for a smoke run)",
    )
    parser.add_argument("--seed", type=int, default=20240601, help="corpus generator seed")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_PG),
        help="PostgreSQL server URL where bench_* databases may be created",
    )
    parser.add_argument("--only", nargs="+", choices=TOOLS, help="run only these tools")
    parser.add_argument(
        "--skip-slow",
        action="store_true",
        help="skip datasketch on corpora larger than --slow-above documents",
    )
    parser.add_argument("--slow-above", type=int, default=150_000)
    parser.add_argument(
        "--truth-max-shingles",
        type=int,
        default=40_000_000,
        help="larger corpora: exact join in windows by set size (less memory)",
    )
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per step")
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0,
        metavar="SECONDS",
        help="before each step, wait up to this long for other processes to go idle",
    )
    parser.add_argument("--keep-databases", action="store_true", help="don't drop them at the end")
    parser.add_argument(
        "--library",
        action="store_true",
        help="time simindex's job as library calls in one process each, not as CLI commands",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run simindex steps under pyinstrument (benchmarks/data/profiles/)",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="import simindex from the working tree (default: a snapshot of git HEAD)",
    )
    parser.add_argument("--write-results", action="store_true", help="append to RESULTS.md")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="PATH",
        help="don't run: report the results saved by an earlier run (benchmarks/data/*.json)",
    )
    parser.add_argument("--run-step", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_step:
        child_main(*args.run_step)
        return
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        finish(report(saved["results"], saved["info"], saved["command"]), args.write_results)
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
    code = code_info(args.live)
    info["code"] = code["code"]
    print(f"nproc {info['nproc']}, {info['cpu']}; PostgreSQL {info['postgres']}")
    print(f"simindex: {info['code']}")
    runner = Runner(
        args.timeout, profile_dir, args.wait_idle, None if args.live else Path(code["path"])
    )
    info["warmup"] = runner.run("warmup")
    saved_to = DATA / f"pipeline_{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    results = []
    for size in args.sizes:
        results.append(bench_corpus(runner, size, args))
        saved = {"command": command, "info": info, "results": results}
        saved_to.write_text(json.dumps(saved, indent=1, default=str))
    info["finished"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    if args.live and source_digest() != code["digest"]:
        info["code"] += "; **simindex's sources changed during the run** (rerun without --live)"
    saved_to.write_text(
        json.dumps({"command": command, "info": info, "results": results}, indent=1)
    )
    print(f"\nresults saved to {saved_to.relative_to(REPO)}")
    finish(report(results, info, command), args.write_results)


def finish(section: str, write: bool) -> None:
    print("\n" + section)
    if write:
        append_results(section)
        print(f"appended to {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
