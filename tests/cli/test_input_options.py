"""The reading options of ingest and dedup: CSV layouts, lenient decoding, shard directories."""

from __future__ import annotations

import json

from simindex import Index
from tests.cli.test_cli import run

STORY = "Stocks rose on Monday as investors weighed the central bank's latest decision."


def test_ingest_reads_a_semicolon_csv_and_a_headerless_one(tmp_path):
    (tmp_path / "semi.csv").write_text(f"id;text\na;{STORY}\nb;{STORY} Again.\n")
    (tmp_path / "bare.csv").write_text(f'x1,"{STORY}"\nx2,other words entirely\n')
    db = str(tmp_path / "i.db")
    run("ingest", str(tmp_path / "semi.csv"), "--db", db)
    run("ingest", str(tmp_path / "bare.csv"), "--db", db, "--no-header")
    with Index.open(db) as index:
        assert set(index.texts(["a", "b", "x1", "x2"])) == {"a", "b", "x1", "x2"}
        assert index.texts(["x1"])["x1"] == STORY


def test_a_directory_names_the_files_it_skipped(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "part-1.jsonl").write_text(json.dumps({"id": "a", "text": STORY}) + "\n")
    (shards / "README.txt").write_text("not a shard\n")
    result = run("ingest", str(shards), "--db", str(tmp_path / "i.db"))
    assert "skipped 1 file(s)" in result.stderr and "README.txt" in result.stderr


def test_undecodable_bytes_are_replaced_and_counted_when_asked(tmp_path):
    source = tmp_path / "mixed.jsonl"
    source.write_bytes(
        b'{"id": "u1", "text": "caf\xc3\xa9 cr\xc3\xa8me"}\n{"id": "u2", "text": "bad \xff byte"}\n'
    )
    strict = run("ingest", str(source), "--db", str(tmp_path / "s.db"), ok=False)
    assert "mixed.jsonl:2" in strict.stderr and "--encoding-errors replace" in strict.stderr
    out = tmp_path / "kept.jsonl"
    lenient = run("dedup", str(source), "-o", str(out), "--encoding-errors", "replace")
    assert "1 record(s) held bytes that are not utf-8" in lenient.stderr
    texts = [json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert texts == ["café crème", "bad \ufffd byte"]


def test_dedup_takes_the_csv_layout(tmp_path):
    source = tmp_path / "semi.csv"
    source.write_text(f"id;text\na;{STORY}\nb;{STORY}!\nc;other words entirely here\n")
    out = tmp_path / "kept.csv"
    run("dedup", str(source), "-o", str(out), "--delimiter", ";")
    assert [line.split(",")[0] for line in out.read_text().splitlines()] == ["id", "a", "c"]
