"""The CLI end to end: the main job, its outputs, and one-line errors for user mistakes."""

from __future__ import annotations

import csv
import gzip
import io
import json

import pytest
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app
from tests.conftest import NEWS

runner = CliRunner()


def run(*args: str, ok: bool = True):
    result = runner.invoke(app, list(args))
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_the_main_job(db_url, tmp_path):
    run("ingest", str(NEWS), "--db", db_url)
    pairs = run("pairs", "--db", db_url, "--threshold", "0.8")
    assert "n003" in pairs.stdout and "n019" in pairs.stdout
    assert "candidate pairs ->" in pairs.stderr

    exported = run("export", "--db", db_url, "--threshold", "0.9")
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert rows and all(float(r["similarity"]) >= 0.9 for r in rows)
    assert {"id_a", "id_b", "similarity", "exact_jaccard", "estimated_jaccard"} == set(rows[0])

    out = tmp_path / "pairs.jsonl"
    run("export", "--db", db_url, "--format", "jsonl", "-o", str(out))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == len(
        list(csv.DictReader(io.StringIO(run("export", "--db", db_url).stdout)))
    )

    query = run("query", "--db", db_url, "--id", "n001", "--json")
    assert json.loads(query.stdout.splitlines()[0])["id"] == "n005"

    stats = json.loads(run("stats", "--db", db_url, "--json").stdout)
    assert stats["documents"] == 100 and stats["exact_duplicate_groups"] == 4

    run("reband", "--db", db_url, "--bands", "42", "--rows", "3", "--drop-old", "--yes")
    bandings = json.loads(run("stats", "--db", db_url, "--json").stdout)["bandings"]
    assert [(b["bands"], b["rows"], b["is_active"]) for b in bandings] == [(42, 3, True)]
    run("db", "current", "--db", db_url)


def test_stats_json_is_the_library_result_as_plain_json(tmp_path):
    """`stats --json` keeps its keys, their order and their JSON shapes: IndexStats.to_dict
    (sequences as lists, largest clusters as objects, datetimes as text)."""
    db = str(tmp_path / "news.db")
    run("ingest", str(NEWS), "--db", db)
    unclustered = json.loads(run("stats", "--db", db, "--json").stdout)
    run("pairs", "--db", db, "--top", "0")
    run("clusters", "--db", db, "--top", "0")
    printed = json.loads(run("stats", "--db", db, "--json").stdout)
    with Index.open(db) as index:
        stats = index.stats()
    assert list(printed) == [
        "url", "spec", "keep_text", "threshold", "documents", "exact_duplicate_groups",
        "bandings", "retired_bandings", "active_banding", "pairs", "bucket_sizes",
        "largest_buckets", "cluster_sizes", "largest_clusters",
    ]  # fmt: skip
    assert printed == json.loads(json.dumps(stats.to_dict(), default=str))
    assert (unclustered["cluster_sizes"], unclustered["largest_clusters"]) == (None, [])
    assert printed["bandings"] == [
        {**b, "created_at": str(b["created_at"])} for b in stats.bandings
    ]
    assert printed["bucket_sizes"] == [list(pair) for pair in stats.bucket_sizes]
    assert printed["largest_buckets"] == [list(bucket) for bucket in stats.largest_buckets]
    assert printed["cluster_sizes"] == [list(pair) for pair in stats.cluster_sizes]
    assert printed["largest_clusters"] == [
        {"representative": c.representative, "size": c.size, "weakest": c.weakest}
        for c in stats.largest_clusters
    ]


def test_ingest_reads_csv_tsv_and_gzip_and_takes_the_db_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMINDEX_DATABASE_URL", str(tmp_path / "env.db"))
    (tmp_path / "a.csv").write_text(
        'doc,body\nc1,"first text, with a comma"\nc2,second text here\n'
    )
    (tmp_path / "b.tsv").write_text("t1\tthird text here\nt2\tfourth text\n")
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": 7, "text": "a gzipped document"}) + "\n")
    run("ingest", str(tmp_path / "a.csv"), "--id-field", "doc", "--text-field", "body")
    run("ingest", str(tmp_path / "b.tsv"), str(tmp_path / "c.jsonl.gz"))
    assert json.loads(run("stats", "--json").stdout)["documents"] == 5


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"id": "a", "text": "fine"}\n{"id": "b", "text": \n', "bad.jsonl:2: not valid JSON"),
        (b'{"id": "a", "body": "x"}\n', "bad.jsonl:1: no 'text' field (fields: id, body)"),
        (b'{"id": "a", "text": "caf\xe9"}\n', "is not valid utf-8"),
        (b'{"id": "a", "text": "one"}\n{"id": "a", "text": "two"}\n', "'a' appears twice"),
        (b'{"id": "a", "text": "\\ud800"}\n', "lone surrogate"),
        (b'{"id": "a", "text": "nul \\u0000 here"}\n', "holds a NUL character"),
    ],
)
def test_bad_input_is_one_line_and_adds_nothing(tmp_path, content, message):
    db = str(tmp_path / "i.db")
    (tmp_path / "bad.jsonl").write_bytes(content)
    result = run("ingest", str(tmp_path / "bad.jsonl"), "--db", db, ok=False)
    assert result.exit_code == 1
    assert message in result.stderr.replace("\n", " ")
    assert "Traceback" not in result.output
    # A failed first ingest leaves no index (it would be created with the documents).
    assert "there is no database file" in run("stats", "--db", db, ok=False).stderr


def test_a_database_that_is_down_is_one_line_without_the_password():
    result = run("stats", "--db", "postgresql://me:hunter2@127.0.0.1:1/x", ok=False)
    assert result.exit_code == 1
    assert "Error: database postgresql+psycopg://me:***@127.0.0.1:1/x failed" in result.stderr
    assert "hunter2" not in result.output and "Traceback" not in result.output


def test_init_refuses_nonsense_with_the_arithmetic(tmp_path):
    result = run("init", "--db", str(tmp_path / "x.db"), "--bands", "42", "--rows", "4", ok=False)
    assert "bands*rows must be <= num_perm, got 42*4=168 > 128" in result.stderr
    result = run("init", "--db", str(tmp_path / "x.db"), "-k", "65", ok=False)
    assert "k (shingle length) must be an integer in 1..64, got 65" in result.stderr


def test_export_before_pairs_names_the_command_to_run(tmp_path):
    db = str(tmp_path / "x.db")
    run("ingest", str(NEWS), "--db", db)
    result = run("export", "--db", db, "-o", str(tmp_path / "out.csv"), ok=False)
    assert "run `simindex pairs --threshold 0.8` first" in result.stderr
    assert not (tmp_path / "out.csv").exists()


def test_tune_reports_the_published_numbers():
    result = run("tune", "--low", "0.05", "--p-low", "0.001", "--high", "0.5", "--p-high", "0.99")
    assert "No banding within 128 hashes meets the targets" in result.stdout
    assert "best compromise: 35 bands x 3 rows" in result.stdout
    assert "num_perm needed to meet them: 288" in result.stdout
    result = run("tune", "--threshold", "0.8")
    assert "chosen: 20 bands x 5 rows" in result.stdout
    assert "P(0.8) = 0.999644" in result.stdout
    assert "P(0.4) = 0.18605" in result.stdout


def test_on_error_skip_logs_each_bad_record_and_adds_the_rest(tmp_path):
    lines = [
        '{"id": "a", "text": "hello world here"}',
        "{bad json",
        '{"id": "b"}',
        '{"id": "c", "text": "nul \\u0000"}',
        '{"id": "d", "text": "fine text too"}',
    ]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    db, log = str(tmp_path / "i.db"), tmp_path / "errors.jsonl"
    result = run(
        "ingest",
        str(tmp_path / "in.jsonl"),
        "--db",
        db,
        "--on-error",
        "skip",
        "--error-log",
        str(log),
    )
    assert f"Listed 3 bad record(s) in {log}" in result.stderr.replace("\n", " ")
    errors = [json.loads(line)["error"] for line in log.read_text().splitlines()]
    assert [e.split(": ")[0] for e in errors] == [f"{tmp_path}/in.jsonl:{n}" for n in (2, 3, 4)]
    assert json.loads(run("stats", "--db", db, "--json").stdout)["documents"] == 2
