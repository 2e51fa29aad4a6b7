"""Inputs as they come and outputs that never destroy data: ingest, dedup and export."""

from __future__ import annotations

import csv
import errno
import gzip
import io
import json
import os
import signal
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from simindex import Index
from simindex.cli import app
from simindex.errors import DatabaseError
from simindex.io.readers import read_documents
from tests.cli.test_cli import run, runner
from tests.conftest import NEWS

ROWS = [json.loads(line) for line in NEWS.read_text().splitlines()]


def _pairs(db: str) -> set[tuple[str, str, str]]:
    exported = run("export", "--db", db, "--threshold", "0.5").stdout
    return {(r["id_a"], r["id_b"], r["similarity"]) for r in csv.DictReader(io.StringIO(exported))}


def _one_error(result, *words: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(word in lines[0] for word in words), lines[0]


# -- no output destroys data -------------------------------------------------------------


def test_no_output_may_be_an_input_another_output_or_the_database(tmp_path):
    source = tmp_path / "f.jsonl"
    source.write_bytes(NEWS.read_bytes())
    os.link(source, tmp_path / "hard.jsonl")
    os.symlink(source, tmp_path / "soft.jsonl")
    db = tmp_path / "v.db"
    run("ingest", str(source), "--db", str(db))
    run("pairs", "--db", str(db), "--top", "0")
    before = {p: p.read_bytes() for p in (source, db)}
    kept = str(tmp_path / "kept.jsonl")
    refused = [
        (["dedup", str(source), "-o", str(source)], "is also the input"),
        (["dedup", str(source), "-o", str(tmp_path / "hard.jsonl")], "is also the input"),
        (["dedup", str(source), "-o", str(tmp_path / "soft.jsonl")], "is also the input"),
        (["dedup", str(source), "-o", kept, "--dropped", kept], "is also the output"),
        # --format: a name with no output format's suffix is refused for that first.
        (["export", "--db", str(db), "-o", str(db), "--format", "csv"], "is also the database"),
        (["export", "--db", str(db), "-o", f"{db}-wal", "--format", "csv"], "is also the database"),
        (["report", "--db", str(db), "-o", str(db)], "is also the database file"),
        (
            ["ingest", str(source), "--db", str(db), "--on-error", "skip", "--error-log", str(db)],
            "is also the database file",
        ),
        (
            ["ingest", str(source), "--db", str(db), "--error-log", str(tmp_path / "soft.jsonl")],
            "is also the input",
        ),
    ]
    for args, message in refused:
        _one_error(run(*args, ok=False), message, "choose another output path")
        assert {p: p.read_bytes() for p in (source, db)} == before
    assert sorted(os.listdir(tmp_path)) == ["f.jsonl", "hard.jsonl", "soft.jsonl", "v.db"]


_KILLED_MIDWAY = """
import json, os, signal, sys, types
import simindex.io.writers as writers
from simindex.cli import app

written = 0

def dumps(*args, **kwargs):  # the writer's json.dumps: a kill -9 after 10 records
    global written
    written += 1
    if written == 10:
        os.kill(os.getpid(), signal.SIGKILL)
    return json.dumps(*args, **kwargs)

writers.json = types.SimpleNamespace(dumps=dumps)
app(sys.argv[1:])
"""


@pytest.mark.parametrize("command", ["export", "dedup"])
def test_a_command_killed_while_writing_leaves_no_partial_file_and_no_scratch(
    tmp_path, command, monkeypatch
):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    db = str(tmp_path / "v.db")
    output = tmp_path / "out.jsonl"
    output.write_text("the previous output\n")
    if command == "export":
        run("ingest", str(NEWS), "--db", db)
        run("pairs", "--db", db, "--threshold", "0.3", "--top", "0")
        args = ["export", "--db", db, "--threshold", "0.3", "-o", str(output)]
    else:
        args = ["dedup", str(NEWS), "-o", str(output)]
    process = subprocess.run(
        [sys.executable, "-c", _KILLED_MIDWAY, *args],
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()
    assert output.read_text() == "the previous output\n"
    left = {name for name in os.listdir(tmp_path) if not name.startswith("v.db")}
    assert left == {"out.jsonl", "tmp"}  # no partial or temporary file (v.db-wal may stay)
    if command == "dedup":  # kill -9 ran no clean-up: the next dedup removes the scratch
        assert len(os.listdir(scratch)) == 1
        monkeypatch.setattr("tempfile.tempdir", str(scratch))
        run("dedup", str(NEWS), "-o", str(tmp_path / "again.jsonl"))
        assert os.listdir(scratch) == []


def test_the_error_log_reaches_the_disk_before_the_documents_commit(db_url, tmp_path, monkeypatch):
    source, log = tmp_path / "in.jsonl", tmp_path / "errors.jsonl"
    source.write_text(NEWS.read_text() + "{not json\n")

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("simindex.cli.os.fsync", full_disk)
    args = ["ingest", str(source), "--db", db_url, "--on-error", "skip", "--error-log", str(log)]
    _one_error(run(*args, ok=False), f"{log}: can't write the error log: No space left")
    assert not log.exists()
    with pytest.raises(
        DatabaseError, match="holds no simindex index|no database file"
    ):  # nor a first index
        Index.open(db_url)
    monkeypatch.undo()
    assert "Added 100 new documents" in run(*args).stderr
    assert "not valid JSON" in log.read_text()


# -- inputs as they come ----------------------------------------------------------------


def _shards(directory) -> None:
    """The sample corpus as five shards of four formats (two compressed)."""
    directory.mkdir()
    parts = [ROWS[i : i + 20] for i in range(0, 100, 20)]
    lines = [b"".join(json.dumps(r).encode() + b"\n" for r in part) for part in parts]
    (directory / "1.jsonl.gz").write_bytes(gzip.compress(lines[0]))
    (directory / "2.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines[1]))
    pq.write_table(pa.Table.from_pylist(parts[2]), directory / "3.parquet", row_group_size=7)
    with open(directory / "4.csv", "w", newline="", encoding="utf-8-sig") as f:
        writer = csv.DictWriter(f, ["id", "source", "title", "text"])
        writer.writeheader()
        writer.writerows(parts[3])
    (directory / "5.jsonl").write_bytes(lines[4])


def test_parquet_and_a_directory_of_mixed_shards_give_the_pairs_of_json_lines(db_url, tmp_path):
    baseline = str(tmp_path / "baseline.db")
    run("ingest", str(NEWS), "--db", baseline)
    run("pairs", "--db", baseline, "--threshold", "0.5", "--top", "0")
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "news.parquet", row_group_size=30)
    _shards(tmp_path / "shards")
    ingested = run("ingest", str(tmp_path / "shards"), "--db", db_url)
    assert "Added 100 new documents" in ingested.stderr and "the index holds 100" in ingested.stderr
    run("pairs", "--db", db_url, "--threshold", "0.5", "--top", "0")
    from_parquet = str(tmp_path / "parquet.db")
    run("ingest", str(tmp_path / "news.parquet"), "--db", from_parquet)
    run("pairs", "--db", from_parquet, "--threshold", "0.5", "--top", "0")
    assert len(_pairs(baseline)) > 18
    assert _pairs(db_url) == _pairs(baseline) == _pairs(from_parquet)
    with Index.open(from_parquet) as index:
        assert index.stats().documents == 100


def test_a_glob_of_shards_names_the_shard_and_line_of_an_error(tmp_path):
    _shards(tmp_path / "shards")
    (tmp_path / "shards" / "6.jsonl").write_text('{"id": "x", "text": "fine"}\n{"id": "y"}\n')
    result = run(
        "ingest", str(tmp_path / "shards" / "*.jsonl*"), "--db", str(tmp_path / "i.db"), ok=False
    )
    _one_error(result, f"{tmp_path / 'shards' / '6.jsonl'}:2: no 'text' field")


def test_standard_input_in_every_format(tmp_path):
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(ROWS), buffer)
    inputs = {
        "jsonl.zst": (zstandard.ZstdCompressor().compress(NEWS.read_bytes()), []),
        "parquet": (buffer.getvalue(), []),
        "tsv": (
            "".join(f"{r['id']}\t{' '.join(r['text'].split())}\n" for r in ROWS).encode(),
            ["--format", "tsv"],
        ),
    }
    for name, (data, options) in inputs.items():
        db = str(tmp_path / f"{name}.db")
        result = runner_input(["ingest", "-", "--db", db, *options], data)
        assert "Added 100 new documents" in result.stderr, (name, result.output)


def runner_input(args: list[str], data: bytes):
    result = runner.invoke(app, args, input=data)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


# -- dedup ------------------------------------------------------------------------------


def test_dedup_keeps_parquet_as_parquet_from_a_file_stdin_or_shards(tmp_path):
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "news.parquet")
    run("dedup", str(tmp_path / "news.parquet"), "-o", str(tmp_path / "kept"))
    kept = pq.read_table(tmp_path / "kept")  # no extension: the input's format
    assert kept.num_rows == 82 and kept.column_names == ["id", "source", "title", "text"]
    piped = tmp_path / "piped"
    runner_input(["dedup", "-", "-o", str(piped)], (tmp_path / "news.parquet").read_bytes())
    assert pq.read_table(piped).equals(kept)
    _shards(tmp_path / "shards")
    run("dedup", str(tmp_path / "shards"), "-o", str(tmp_path / "kept.jsonl"))
    ids = [json.loads(line)["id"] for line in (tmp_path / "kept.jsonl").read_text().splitlines()]
    assert ids == kept.column("id").to_pylist()


def test_dedup_output_in_every_format_reads_back_and_dedups_to_itself(tmp_path):
    source = tmp_path / "in.jsonl"
    tricky = {"id": "multi\tline", "text": 'a story\nover "lines"\r\twith a \\ backslash'}
    source.write_text(NEWS.read_text() + json.dumps(tricky) + "\n")
    wanted = None
    for name in ("kept.tsv", "kept.csv", "kept.jsonl", "kept.parquet"):
        run("dedup", str(source), "-o", str(tmp_path / name))
        kept = [d[:2] for d in read_documents(str(tmp_path / name))]
        assert kept == (wanted := wanted or kept) and (tricky["id"], tricky["text"]) in kept
        again = str(tmp_path / f"again-{name}")
        run("dedup", str(tmp_path / name), "-o", again, "--dropped", f"{again}.dropped.csv")
        assert [d[:2] for d in read_documents(again)] == kept


def test_dedup_keeps_records_it_cannot_sign_and_says_how_many(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(NEWS.read_text() + json.dumps({"id": "blank", "text": " \n "}) + "\n")
    result = run("dedup", str(source), "-o", str(tmp_path / "kept.jsonl"))
    assert "kept 83 records (1 of them empty, kept unindexed)" in result.stderr
    kept = (tmp_path / "kept.jsonl").read_text().splitlines()
    assert json.loads(kept[-1])["id"] == "blank"
    _one_error(
        run("dedup", str(source), "-o", str(tmp_path / "k.jsonl"), "--on-empty", "fail", ok=False),
        "'blank' has no text",
    )


def test_dedup_with_repeated_ids_advises_its_own_option(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(NEWS.read_text() + NEWS.read_text().splitlines()[0] + "\n")
    kept = tmp_path / "kept.jsonl"
    _one_error(run("dedup", str(source), "-o", str(kept), ok=False), "--on-duplicate skip")
    run("dedup", str(source), "-o", str(kept), "--on-duplicate", "skip")
    assert len(kept.read_text().splitlines()) == 82  # the repeated record is written once


def test_dedup_into_db_killed_after_adding_its_documents_can_be_run_again(db_url, tmp_path):
    with Index.create(db_url) as index:  # what the first transaction of a killed dedup left
        index.add([(r["id"], r["text"], None) for r in ROWS[:60]])
    kept = tmp_path / "kept.jsonl"
    result = run("dedup", str(NEWS), "-o", str(kept), "--db", db_url)
    assert "60 records were indexed before with the same text" in result.stderr
    assert len(kept.read_text().splitlines()) == 82
    changed = tmp_path / "changed.jsonl"
    changed.write_text(json.dumps({"id": "n001", "text": "another text altogether"}) + "\n")
    conflict = run("dedup", str(changed), "-o", str(tmp_path / "k.jsonl"), "--db", db_url, ok=False)
    _one_error(conflict, "'n001' is already indexed", "--on-duplicate skip")


# -- summaries and formats ---------------------------------------------------------------


def test_ingest_counts_and_lists_empty_documents_instead_of_failing(db_url, tmp_path):
    source, log = tmp_path / "in.jsonl", tmp_path / "errors.jsonl"
    blanks = [json.dumps({"id": f"blank{i}", "text": "\t"}) for i in range(7)]
    source.write_text(NEWS.read_text() + "\n".join(blanks) + "\n")
    result = run("ingest", str(source), "--db", db_url, "--error-log", str(log))
    summary = result.stderr.replace("\n", " ")
    assert "Added 100 new documents" in summary and "the index holds 100" in summary
    assert "skipped 7 empty (no text after normalization: 'blank0', 'blank1'" in summary
    assert [json.loads(line)["id"] for line in log.read_text().splitlines()] == [
        f"blank{i}" for i in range(7)
    ]
    again = run("ingest", str(NEWS), "--db", db_url, "--on-duplicate", "skip").stderr
    assert "Added 0 new documents" in again and "the index holds 100" in again
    strict = run(
        "ingest",
        str(source),
        "--db",
        db_url,
        "--on-empty",
        "fail",
        "--on-duplicate",
        "skip",
        ok=False,
    )
    _one_error(strict, "'blank0' has no text")


def test_export_format_follows_the_name_and_clusters_say_rows_and_clusters(tmp_path):
    db = str(tmp_path / "v.db")
    run("ingest", str(NEWS), "--db", db)
    run("pairs", "--db", db, "--top", "0")
    run("clusters", "--db", db, "--top", "0")
    run("export", "--db", db, "-o", str(tmp_path / "pairs.parquet"))
    assert pq.read_table(tmp_path / "pairs.parquet").num_rows == 18
    exported = run("export", "--db", db, "--what", "clusters", "-o", str(tmp_path / "c.jsonl.gz"))
    assert "Exported 36 member rows of 18 clusters (jsonl)" in exported.stderr
    with gzip.open(tmp_path / "c.jsonl.gz", "rt") as f:
        assert len(f.read().splitlines()) == 36
    run("export", "--db", db, "-o", str(tmp_path / "pairs.jsonl.zst"))
    packed = (tmp_path / "pairs.jsonl.zst").read_bytes()
    assert len(zstandard.ZstdDecompressor().decompressobj().decompress(packed).splitlines()) == 18
    conflict = run(
        "export", "--db", db, "-o", str(tmp_path / "x.parquet"), "--format", "csv", ok=False
    )
    _one_error(conflict, "the name says parquet but --format says csv")
    assert not (tmp_path / "x.parquet").exists()


def test_export_to_a_name_with_no_output_format_is_an_error_naming_the_formats(tmp_path):
    db = str(tmp_path / "v.db")
    run("ingest", str(NEWS), "--db", db)
    run("pairs", "--db", db, "--top", "0")
    _one_error(
        run("export", "--db", db, "-o", str(tmp_path / "pairs.xlsx"), ok=False),
        "pairs.xlsx: can't write a .xlsx file: name the output .csv, .jsonl, .tsv or .parquet",
    )
    assert not (tmp_path / "pairs.xlsx").exists()
    run("export", "--db", db, "-o", str(tmp_path / "pairs.xlsx"), "--format", "csv")
    assert (tmp_path / "pairs.xlsx").read_text().startswith("id_a,id_b,")
    _one_error(
        run("export", "--db", db, "-o", str(tmp_path / "pairs.tsv"), ok=False),
        "id<TAB>text (tsv) holds 'id' and 'text'",
    )
