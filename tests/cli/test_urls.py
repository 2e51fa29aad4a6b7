"""Database URLs on the command line: where --db goes, what it may name, what is never
printed (passwords), and one `Error:` line for every database the CLI can't use."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from importlib.metadata import version

import pytest
import sqlalchemy as sa

from simindex.store import database_url, display_url
from tests.cli.test_cli import run
from tests.conftest import NEWS

SECRET = "s3cr3t-pw"


def _one_error_line(result, *fragments: str) -> str:
    """The command failed with exit 1 and one `Error:` line holding every fragment."""
    assert result.exit_code == 1, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception  # not a bug's traceback
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h/db", "postgresql://u:***@h/db"),
        (f"postgresql://u@h:5432/db?password={SECRET}", "postgresql://u@h:5432/db?password=***"),
        (f"postgresql://u@h/db?sslmode=off&PASSWORD={SECRET}", "postgresql://u@h/db?sslmode=off&PASSWORD=***"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
        (sa.make_url(f"postgresql+psycopg://u:{SECRET}@h/db"), "postgresql+psycopg://u:***@h/db"),
        ("postgresql://h/db", "postgresql://h/db"),
        ("some/file?.db", "some/file?.db"),
    ],
)  # fmt: skip
def test_display_url_masks_every_password(url, shown):
    assert display_url(url) == shown


def test_db_before_the_command_and_after_it(tmp_path):
    before, after = str(tmp_path / "before.db"), str(tmp_path / "after.db")
    run("--db", before, "ingest", str(NEWS))
    run("init", "--db", after)
    assert "documents  100" in run("--db", before, "stats").stdout
    assert "documents  0" in run("--db", before, "stats", "--db", after).stdout  # after wins
    assert "up to date" in run("--db", before, "db", "current").stdout


def test_version():
    assert run("--version").stdout.strip() == f"simindex {version('simindex')}"


def test_a_path_is_a_path_not_a_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("a?b.db", "e%41f.db"):
        run("init", "--db", name)
        assert "up to date" in run("db", "current", "--db", name).stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a?b.db", "e%41f.db"]


@pytest.mark.parametrize(
    ("db", "fragment"),
    [
        (":memory:", "in-memory SQLite database keeps nothing"),
        ("sqlite://", "in-memory SQLite database keeps nothing"),
        ("mysql://u@h/db", "not mysql"),
        ("postgresql://u@h:abc/db", "its port is not a number"),
        ("postgresql://u:p@ss@h/db", "holds an '@'; write it as %40"),
    ],
)
def test_urls_that_cant_work_are_refused(db, fragment):
    for command in (["stats"], ["init"], ["db", "current"], ["db", "upgrade"]):
        line = _one_error_line(run(*command, "--db", db, ok=False), fragment)
        assert "ss@h" not in line


def test_read_only_commands_never_create_a_database(tmp_path):
    typo = tmp_path / "typo.db"
    for command in (["stats"], ["check"], ["query", "x"], ["db", "current"], ["db", "upgrade"]):
        _one_error_line(run(*command, "--db", str(typo), ok=False), f"no database file {typo}")
    assert not typo.exists()


def test_a_file_of_random_bytes_is_one_error_line(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(8192))
    for command in (["stats"], ["check"], ["init"], ["ingest", str(NEWS)], ["db", "current"],
                    ["db", "upgrade"]):  # fmt: skip
        _one_error_line(run(*command, "--db", str(junk), ok=False), "not a usable SQLite database")


def test_check_reports_a_damaged_sqlite_file(tmp_path):
    truncated, damaged = tmp_path / "truncated.db", tmp_path / "damaged.db"
    run("ingest", str(NEWS), "--db", str(truncated))
    shutil.copy(truncated, damaged)
    with open(truncated, "r+b") as f:
        f.truncate(os.path.getsize(truncated) // 2)
    _one_error_line(run("check", "--db", str(truncated), ok=False), "disk image is malformed")
    with sqlite3.connect(damaged) as connection:  # overwrite an index that opening never reads
        (page_size,) = connection.execute("PRAGMA page_size").fetchone()
        (root,) = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'ix_documents_content_hash'"
        ).fetchone()
    connection.close()
    with open(damaged, "r+b") as f:
        f.seek((root - 1) * page_size + 200)
        f.write(b"\x07" * (page_size - 400))
    result = run("check", "--db", str(damaged), ok=False)
    assert result.exit_code == 1
    assert result.stderr.startswith("Problem: the database file is damaged: "), result.stderr


def test_a_read_only_sqlite_file_answers_queries_and_refuses_writes(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "news.db"
    run("ingest", str(NEWS), "--db", str(db))
    script = (
        "import json; from typer.testing import CliRunner; from simindex.cli import app\n"
        "commands = [['query', '--id', 'n003'], ['stats'], ['check'], ['db', 'current'],"
        " ['delete', 'n003', '--yes']]\n"
        f"results = [CliRunner().invoke(app, [*c, '--db', {str(db)!r}]) for c in commands]\n"
        "print(json.dumps([[r.exit_code, r.stdout, r.stderr] for r in results]))"
    )
    if os.geteuid() == 0:  # root writes anywhere: a read-only bind mount in a namespace
        if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "true"]).returncode:
            pytest.skip("no unshare: can't make a read-only mount")
        mount = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}"
        command = ["unshare", "-rm", "sh", "-c", f'{mount} && exec "$@"', "sh"]
    else:
        db.chmod(0o444)
        folder.chmod(0o555)
        command = []
    done = subprocess.run([*command, sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (query, stats, check, current, delete) = json.loads(done.stdout)
    assert query[0] == 0 and "n019" in query[1]
    assert stats[0] == 0 and "documents  100" in stats[1]
    assert check[0] == 0 and "consistent" in check[2]
    assert current[0] == 0 and "up to date" in current[1]
    assert delete[0] == 1 and delete[2].startswith("Error: database ")
    assert "readonly database" in delete[2] and len(delete[2].strip().splitlines()) == 1


def test_negative_seeds_are_a_usage_error(tmp_path):
    db = str(tmp_path / "news.db")
    run("ingest", str(NEWS), "--db", db)
    for args in (["evaluate"], ["tune", "--threshold", "0.8"]):
        result = run(*args, "--db", db, "--seed", "-1", ok=False)
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert "Invalid value for '--seed': -1 is not in the range x>=0" in result.stderr


def test_db_current_on_a_newer_schema_says_to_upgrade_simindex(db_url):
    run("init", "--db", db_url)
    engine = sa.create_engine(database_url(db_url))
    with engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    engine.dispose()
    current = run("db", "current", "--db", db_url).stdout
    assert "upgrade simindex" in current and "db upgrade" not in current
    _one_error_line(run("db", "upgrade", "--db", db_url, ok=False), "upgrade simindex")


def test_a_failed_first_ingest_leaves_no_index_and_init_works(db_url, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "a fine first story"}\n{"id": "b", "text": \n')
    _one_error_line(run("ingest", str(bad), "--db", db_url, ok=False), "bad.jsonl:2")
    assert "banding 14 bands x 8 rows" in run("init", "--db", db_url, "--threshold", "0.9").stderr


def test_an_application_table_is_named(db_url):
    engine = sa.create_engine(database_url(db_url))
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE pairs (mine TEXT)")
    engine.dispose()
    elsewhere = "another file with --db" if db_url.startswith("sqlite") else "--schema NAME"
    for command in (["init"], ["ingest", str(NEWS)]):
        _one_error_line(run(*command, "--db", db_url, ok=False), "(pairs)", elsewhere)


def test_a_banding_built_without_activation_is_activated_later(tmp_path):
    db = str(tmp_path / "news.db")
    run("ingest", str(NEWS), "--db", db)
    built = run("reband", "--db", db, "--bands", "10", "--rows", "10", "--no-activate")
    assert "`simindex activate 2` activates it" in built.stderr
    assert "Banding 2 is now active" in run("activate", "2", "--db", db).stderr
    assert json.loads(run("stats", "--json", "--db", db).stdout)["active_banding"] == 2
    _one_error_line(run("activate", "7", "--db", db, ok=False), "there is no banding 7")


def test_a_password_in_the_url_is_never_printed(pg_url, tmp_path):
    db = f"{pg_url}?password={SECRET}"
    run("ingest", str(NEWS), "--db", db)
    outputs = [
        run("stats", "--json", "--db", db).stdout,
        run("check", "--db", db).stderr,
        _one_error_line(run("init", "--db", db, ok=False), "already holds a simindex index"),
    ]
    run("report", "--db", db, "-o", str(tmp_path / "r.html"), "--sample", "40")
    outputs.append((tmp_path / "r.html").read_text(encoding="utf-8"))
    assert all("password=***" in output for output in outputs), outputs
    assert not any(SECRET in output for output in outputs)
    down = f"postgresql://u:{SECRET}@127.0.0.1:1/db?password={SECRET}"
    for command in (["stats"], ["db", "current"], ["db", "upgrade"]):
        line = _one_error_line(run(*command, "--db", down, ok=False), "Is the server running")
        assert SECRET not in line
    line = _one_error_line(run("stats", "--db", f"postgresql://u:x@{SECRET}@h/db", ok=False))
    assert SECRET not in line


def test_schema_before_the_command_like_db(pg_url):
    run("--db", pg_url, "--schema", "news", "init", "--threshold", "0.9")
    assert "default threshold 0.9" in run("--schema", "news", "stats", "--db", pg_url).stdout
    result = run("--db", pg_url, "stats", ok=False)  # the public schema holds no index
    _one_error_line(result, "holds no simindex index")


def test_every_command_that_opens_an_index_reads_the_schema(pg_url):
    """`show` too: before the command, after it, and from SIMINDEX_SCHEMA."""
    run("ingest", str(NEWS), "--db", pg_url, "--schema", "news")
    assert '"n001"' in run("show", "n001", "--json", "--db", pg_url, "--schema", "news").stdout
    assert '"n001"' in run("--schema", "news", "show", "n001", "--json", "--db", pg_url).stdout
    _one_error_line(run("show", "n001", "--db", pg_url, ok=False), "holds no simindex index")
