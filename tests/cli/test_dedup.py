"""`simindex dedup` and the cluster, delete and evict commands, end to end."""

from __future__ import annotations

import csv
import gzip
import json

import pyarrow.parquet as pq

from tests.cli.test_cli import run
from tests.conftest import NEWS

PLANTED_AT_08 = 18  # planted copies of the sample corpus with 5-gram Jaccard >= 0.8


def test_dedup_keeps_one_record_per_cluster_and_reports_the_rest(tmp_path):
    out = tmp_path / "kept.jsonl"
    run("dedup", str(NEWS), "-o", str(out))
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    dropped = list(csv.DictReader(open(tmp_path / "kept.jsonl.dropped.csv")))
    original = [json.loads(line) for line in NEWS.read_text().splitlines()]
    assert len(kept) + len(dropped) == len(original) and len(dropped) == PLANTED_AT_08
    assert kept == [r for r in original if r["id"] not in {d["id"] for d in dropped}]
    by_id = {d["id"]: d for d in dropped}
    assert by_id["n019"]["representative"] == "n003" and float(by_id["n019"]["similarity"]) == 1.0
    assert all(float(d["similarity"]) >= 0.8 for d in dropped)


def test_dedup_of_csv_to_gzip_and_parquet_with_the_longest_kept(tmp_path):
    rows = [json.loads(line) for line in NEWS.read_text().splitlines()]
    source = tmp_path / "news.csv"
    with open(source, "w", newline="") as f:
        writer = csv.DictWriter(f, ["id", "source", "title", "text"])
        writer.writeheader()
        writer.writerows(rows)
    run("dedup", str(source), "-o", str(tmp_path / "kept.csv.gz"), "--keep", "longest")
    with gzip.open(tmp_path / "kept.csv.gz", "rt") as f:
        kept = list(csv.DictReader(f))
    assert list(kept[0]) == ["id", "source", "title", "text"]
    kept_ids = {r["id"] for r in kept}
    # n039 updates n017 (Jaccard 0.804) with added sentences: the longer one is kept.
    assert "n039" in kept_ids and "n017" not in kept_ids
    assert len(kept) == len(rows) - PLANTED_AT_08
    run("dedup", str(source), "-o", str(tmp_path / "kept.parquet"), "--threshold", "0.5")
    table = pq.read_table(tmp_path / "kept.parquet")
    assert table.column_names == ["id", "source", "title", "text"]
    assert table.num_rows == len(rows) - 30


def test_clusters_export_delete_and_evict(tmp_path):
    db = str(tmp_path / "i.db")
    run("ingest", str(NEWS), "--db", db)
    run("pairs", "--db", db, "--top", "0")
    shown = run("clusters", "--db", db, "--rule", "longest")
    assert "18 clusters hold 36 documents" in shown.stderr
    run(
        "export",
        "--db",
        db,
        "--what",
        "clusters",
        "--format",
        "parquet",
        "-o",
        str(tmp_path / "c.parquet"),
    )
    clusters = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert len(clusters) == 36 and sum(r["is_representative"] for r in clusters) == 18
    removed = run("delete", "n003", "n019", "nope", "--db", db, "--yes")
    assert "Removed 2 of 3 documents" in removed.stderr
    after = list(
        csv.DictReader(run("export", "--db", db, "--what", "clusters").stdout.splitlines())
    )
    assert len(after) == 34
    assert "Removed 0 documents" in run("evict", "--db", db, "--days", "1", "--yes").stderr
    assert "Removed 98 documents" in run("evict", "--db", db, "--days", "0", "--yes").stderr


def test_dedup_and_evict_errors_are_one_line(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    result = run("dedup", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"), ok=False)
    assert "'a' appears twice" in result.stderr and not (tmp_path / "o.jsonl").exists()
    result = run("evict", "--db", str(tmp_path / "none.db"), ok=False)
    assert "give --older-than or --days" in result.stderr


def test_dedup_into_an_index_reports_the_input_records_only(db_url, tmp_path):
    """An index of the sample corpus (18 planted duplicates of its own), and an input of three
    edited copies of indexed stories and one new text: the summary and the dropped report
    speak of those four records, each dropped one naming the indexed story it duplicates."""
    original = [json.loads(line) for line in NEWS.read_text().splitlines()]
    run("ingest", str(NEWS), "--db", db_url)
    run("pairs", "--db", db_url, "--top", "0")
    run("clusters", "--db", db_url, "--top", "0")
    copies = {f"copy{i}": original[i] for i in (0, 1, 2)}
    lines = [
        json.dumps({"id": new_id, "text": story["text"] + " (updated)"})
        for new_id, story in copies.items()
    ]
    lines.append(json.dumps({"id": "fresh", "text": "A text that no indexed story resembles."}))
    source, kept = tmp_path / "input.jsonl", tmp_path / "kept.jsonl"
    source.write_text("\n".join(lines) + "\n")
    result = run("dedup", str(source), "-o", str(kept), "--db", db_url)
    summary = result.stderr.replace("\n", " ")
    assert "kept 1 records" in summary and "dropped 3 (3 of them duplicate documents" in summary
    assert [json.loads(line)["id"] for line in kept.read_text().splitlines()] == ["fresh"]
    report = list(csv.DictReader(open(tmp_path / "kept.jsonl.dropped.csv")))
    assert sorted(r["id"] for r in report) == sorted(copies)
    clusters = {
        r["external_id"]: r["cluster"]
        for r in csv.DictReader(
            run("export", "--db", db_url, "--what", "clusters").stdout.splitlines()
        )
    }
    for row in report:  # the indexed story itself, or the one its cluster keeps
        story = copies[row["id"]]["id"]
        assert row["representative"] == clusters.get(story, story)


def test_dedup_advises_only_the_duplicate_choices_it_has(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "x y z"}\n{"id": "a", "text": "y"}\n')
    result = run("dedup", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"), ok=False)
    assert "--on-duplicate skip" in result.stderr and "replace" not in result.stderr


def test_dedup_takes_the_max_chars_its_advice_names(tmp_path):
    kept = tmp_path / "kept.jsonl"
    too_long = run("dedup", str(NEWS), "-o", str(kept), "--max-chars", "100", ok=False)
    assert "--max-chars" in too_long.stderr and not kept.exists()
    run("dedup", str(NEWS), "-o", str(kept), "--max-chars", "100000")
    assert len(kept.read_text().splitlines()) == 100 - PLANTED_AT_08
