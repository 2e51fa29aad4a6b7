"""`simindex spark dedup` and simindex.spark.dedup keep, drop, pair and cluster exactly what
`simindex dedup` and Index.find_pairs + cluster do on SQLite."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import simindex.spark
from simindex import Index
from simindex.io.readers import expand_inputs, read_documents
from tests.cli.test_cli import run

BOILERPLATE = "Subscribe to our newsletter for more news like this."
HOT = 520  # copies of the boilerplate: one bucket past the hot-bucket limit (500)


def _corpus(n: int, seed: int) -> list[dict]:
    """n records: random stories, edited copies of earlier ones (near-duplicates), exact
    copies, a hot bucket of boilerplate, empty texts and non-ASCII text."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(4000)] + ["Straße", "ĳssel", "ﬁne", "naïve", "東京"]
    records: list[dict] = []
    for i in range(n):
        roll = rng.random()
        if i < HOT:
            text = BOILERPLATE if i % 2 else f"  {BOILERPLATE.upper()}\n"
        elif roll < 0.01:
            text = " \t" if roll < 0.005 else ""
        elif roll < 0.3 and len(records) > HOT:
            source = records[int(rng.integers(HOT, len(records)))]["text"].split()
            for _ in range(int(rng.integers(0, 6))):
                spot = int(rng.integers(len(source) + 1))
                if rng.random() < 0.5 and source:
                    del source[min(spot, len(source) - 1)]
                else:
                    source.insert(spot, words[int(rng.integers(len(words)))])
            text = " ".join(source)
        else:
            text = " ".join(
                words[j] for j in rng.integers(0, len(words), int(rng.integers(20, 120)))
            )
        records.append({"id": f"d{i}", "text": text, "n": i})
    order = rng.permutation(n)  # the boilerplate spread over the input
    return [records[i] for i in order]


def _shards(records: list[dict], folder: Path) -> None:
    """Three shards of the records, in order: gzipped JSON lines, JSON lines, Parquet."""
    folder.mkdir()
    thirds = np.array_split(np.arange(len(records)), 3)
    with gzip.open(folder / "a.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(records[i], ensure_ascii=False) + "\n" for i in thirds[0])
    with open(folder / "b.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(records[i], ensure_ascii=False) + "\n" for i in thirds[1])
    pq.write_table(pa.Table.from_pylist([records[i] for i in thirds[2]]), folder / "c.parquet")


def _jsonl(folder: Path) -> list[dict]:
    return [
        json.loads(line) for path in sorted(folder.glob("part-*.json*")) for line in path.open()
    ]


def _local_index(path: Path, inputs: list[str], rule: str, keep_text: bool = True) -> Index:
    index = Index.create(str(path), keep_text=keep_text)
    index.add(d for p in inputs for d in read_documents(p))
    report = index.find_pairs(0.8)
    assert report.hot_buckets > 0  # the corpus exercises the hot-bucket rule
    index.cluster(0.8, keep=rule, mode="star")
    return index


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus") / "shards"
    _shards(_corpus(5000, seed=11), folder)
    return folder


def test_spark_dedup_keeps_drops_pairs_and_clusters_as_the_library(spark, shards, tmp_path):
    local = tmp_path / "kept.jsonl"
    run("dedup", str(shards), "-o", str(local), "--keep", "longest")
    out = tmp_path / "out"
    result = run(
        "spark", "dedup", str(shards), "--out", str(out), "--keep", "longest",
        "--output-format", "jsonl",
    )  # fmt: skip
    kept = _jsonl(out / "kept")
    expected_kept = [json.loads(line) for line in local.open()]
    assert sorted(kept, key=lambda r: r["n"]) == sorted(expected_kept, key=lambda r: r["n"])
    expected_dropped = {
        r["id"]: (r["representative"], float(r["similarity"]))
        for r in csv.DictReader(open(f"{local}.dropped.csv"))
    }
    dropped = {r["id"]: (r["representative"], r["similarity"]) for r in _jsonl(out / "dropped")}
    assert dropped.keys() == expected_dropped.keys() and len(dropped) > HOT
    for i, (representative, similarity) in dropped.items():
        assert representative == expected_dropped[i][0]
        assert similarity == pytest.approx(expected_dropped[i][1], abs=1e-12)

    index = _local_index(tmp_path / "i.db", expand_inputs([str(shards)]), "longest")
    with index:
        pairs = {(p.id_a, p.id_b): p.exact_jaccard for p in index.pairs(0.8)}
        clusters = {(c.external_id, c.cluster) for c in index.clusters()}
    spark_pairs = {(r["id_a"], r["id_b"]): r["exact"] for r in _jsonl(out / "pairs")}
    assert spark_pairs.keys() == pairs.keys()
    assert all(spark_pairs[p] == pytest.approx(pairs[p], abs=1e-12) for p in pairs)
    assert {(r["id"], r["representative"]) for r in _jsonl(out / "clusters")} == clusters
    empty = sum(1 for r in kept if not r["text"].strip())
    assert empty > 0 and _jsonl(out / "problems")
    assert f"{len(pairs):,} similar pairs" in result.stderr
    assert f"{empty:,} empty document(s) kept unindexed" in result.stderr


def test_notebook_dedup_by_estimate_in_engine_keeps_the_earliest_as_the_library(
    spark, shards, tmp_path
):
    records = [r for p in expand_inputs([str(shards)]) for r in read_documents(p)][:2000]
    rows = [{"id": i, "text": t, "position": p} for p, (i, t, _) in enumerate(records)]
    frame = spark.createDataFrame(rows, "id string, text string, position long").coalesce(1)
    # Components in the engine (large-star/small-star), not on the driver.
    result = simindex.spark.dedup(
        frame, keep="earliest", mode="components", exact=False, max_driver_edges=0
    )
    path = tmp_path / "i.db"
    index = Index.create(str(path), keep_text=False)
    with index:
        index.add((i, t) for i, t, _ in records)
        index.find_pairs(0.8)
        index.cluster(0.8, keep="earliest")
        pairs = {(p.id_a, p.id_b): p.estimated_jaccard for p in index.pairs(0.8)}
        drop = {c.external_id: c.cluster for c in index.clusters() if not c.is_representative}
    spark_pairs = {(r["id_a"], r["id_b"]): r for r in result.pairs.collect()}
    assert spark_pairs.keys() == pairs.keys()
    assert all(r["exact"] is None for r in spark_pairs.values())
    assert all(spark_pairs[p]["estimated"] == pairs[p] for p in pairs)
    assert {r["id"]: r["representative"] for r in result.dropped.collect()} == drop
    kept = [r["id"] for r in result.kept.orderBy("position").collect()]
    assert kept == [r["id"] for r in rows if r["id"] not in drop]
    assert result.summary.dropped == len(drop) and result.summary.pairs == len(pairs)


def test_spark_dedup_refuses_a_lone_surrogate_or_a_damaged_file_and_leaves_no_output(
    spark, tmp_path
):
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": "bad \\ud800 text"}\n')
    out = tmp_path / "out"
    result = run("spark", "dedup", str(source), "--out", str(out), ok=False)
    assert result.exit_code == 1
    assert "Error: " in result.output and "in.jsonl:2: " in result.output
    assert "lone surrogate" in result.output and "Traceback" not in result.output
    assert not out.exists()
    damaged = tmp_path / "damaged.jsonl.gz"
    damaged.write_bytes(gzip.compress(source.read_bytes() * 50)[:-30])
    result = run("spark", "dedup", str(damaged), "--out", str(out), "--on-error", "skip", ok=False)
    assert result.exit_code == 1 and "damaged or truncated gzip" in result.output
    assert not out.exists()
    out.mkdir()
    (out / "x").write_text("")
    result = run("spark", "dedup", str(source), "--out", str(out), ok=False)
    assert result.exit_code == 1 and "not an empty directory" in result.output


def test_spark_dedup_skips_bad_records_and_repeated_ids_when_asked(spark, tmp_path):
    source = tmp_path / "in.jsonl"
    lines = [
        {"id": "a", "text": "the same story told twice over"},
        "{not json",
        {"id": "b", "text": "the same story told twice over!"},
        {"id": "a", "text": "a later copy of the id a"},
        {"id": "c", "text": ""},
        {"id": "d", "text": "something else entirely, long enough"},
    ]
    source.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    out = tmp_path / "out"
    result = run(
        "spark", "dedup", str(source), "--out", str(out), "--on-error", "skip",
        "--on-duplicate", "skip",
    )  # fmt: skip
    kept = pq.read_table(out / "kept").to_pylist()
    assert sorted(r["id"] for r in kept) == ["a", "c", "d"]
    assert pq.read_table(out / "dropped").to_pylist()[0]["representative"] == "a"
    problems = pq.read_table(out / "problems").to_pylist()
    assert [p["id"] for p in problems] == [None, "a", "c"]
    assert "in.jsonl:2: not valid JSON" in problems[0]["problem"]
    assert "1 bad record(s) left out, 1 repeated id(s) left out" in result.stderr


@pytest.mark.parametrize("order", ["max", "min"])
def test_spark_dedup_keeps_by_a_field_in_star_mode_as_the_library(spark, shards, tmp_path, order):
    """The same kept set by a metadata field (the records' position ``n``, spread over the
    shards), and every dropped record within the threshold of the record kept for it."""
    local = tmp_path / "kept.jsonl"
    how = ["--keep-by", "n", "--keep-order", order]
    run("dedup", str(shards), "-o", str(local), *how)
    out = tmp_path / "out"
    run("spark", "dedup", str(shards), "--out", str(out), *how, "--output-format", "jsonl")
    expected = {r["id"] for r in map(json.loads, local.open())}
    assert {r["id"] for r in _jsonl(out / "kept")} == expected
    dropped = _jsonl(out / "dropped")
    local_dropped = {
        r["id"]: r["representative"] for r in csv.DictReader(open(f"{local}.dropped.csv"))
    }
    assert {r["id"]: r["representative"] for r in dropped} == local_dropped
    assert all(r["similarity"] >= 0.8 for r in dropped)
    n = {r["id"]: r["n"] for r in _jsonl(out / "kept")}
    better = max if order == "max" else min
    for r in dropped:  # a representative is the best of the records it claimed
        assert better(n[r["representative"]], r["n"]) == n[r["representative"]]
