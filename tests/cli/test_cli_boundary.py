"""The CLI's boundary with the user: numbers out of range are usage errors, no file is
written unasked, and Ctrl-C says what was committed and exits with 130."""

from __future__ import annotations

import os

import pytest

from simindex import Index
from simindex.errors import DatabaseError
from tests.cli.test_cli import run
from tests.conftest import NEWS


@pytest.mark.parametrize(
    "args",
    [
        ["query", "text", "--limit", "-1"],
        ["query", "text", "--limit", "0"],
        ["query", "text", "--threshold", "1.5"],
        ["pairs", "--top", "-1"],
        ["pairs", "--max-bucket-size", "1"],
        ["clusters", "--top", "-3"],
        ["ingest", "x.jsonl", "--batch-size", "0"],
        ["evaluate", "--sample", "1"],
        ["tune", "--threshold", "-0.1"],
        ["init", "--num-perm", "0"],
        ["dedup", "x.jsonl", "-o", "y.jsonl", "--threshold", "2"],
        ["ingest", "x.jsonl", "--lock-timeout", "-5"],
    ],
    ids=" ".join,
)
def test_a_number_out_of_range_is_a_usage_error(args, tmp_path):
    result = run(*args, "--db", str(tmp_path / "i.db"), ok=False)
    assert result.exit_code == 2, result.output
    assert "is not in the range" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "i.db").exists()


def test_ingest_writes_no_error_log_unasked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "in.jsonl"
    source.write_text(NEWS.read_text() + "{bad json\n" + '{"id": "blank", "text": " "}\n')
    result = run("ingest", str(source), "--db", "i.db", "--on-error", "skip")
    assert sorted(os.listdir(tmp_path)) == ["i.db", "in.jsonl"]
    summary = result.stderr.replace("\n", " ")
    assert "skipped 1 empty (no text after normalization: 'blank')" in summary
    assert f"Skipped 1 bad record(s), the first: {source}:101:" in summary
    assert "--error-log FILE lists them all" in summary


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_during_ingest_commits_nothing_and_exits_130(db_url, monkeypatch):
    monkeypatch.setattr(Index, "add", _interrupt)
    result = run("ingest", str(NEWS), "--db", db_url, ok=False)
    assert result.exit_code == 130
    assert result.stderr.strip() == "interrupted: nothing of this command was committed"
    with pytest.raises(DatabaseError, match="holds no simindex index|no database file"):
        Index.open(db_url)


def test_ctrl_c_during_dedup_into_an_index_says_what_stays(db_url, tmp_path, monkeypatch):
    kept = tmp_path / "kept.jsonl"
    monkeypatch.setattr(Index, "find_pairs", _interrupt)
    result = run("dedup", str(NEWS), "-o", str(kept), "--db", db_url, ok=False)
    assert result.exit_code == 130 and not kept.exists()
    assert result.stderr.strip().startswith(
        "interrupted: the input's documents were added to the index; no output was written"
    )
    with Index.open(db_url) as index:
        assert index.stats().documents == 100
    monkeypatch.undo()
    again = run("dedup", str(NEWS), "-o", str(kept), "--db", db_url)
    assert "100 records were indexed before with the same text" in again.stderr
    assert len(kept.read_text().splitlines()) == 82


def test_ctrl_c_during_a_dedup_of_its_own_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(Index, "cluster", _interrupt)
    result = run("dedup", str(NEWS), "-o", str(tmp_path / "kept.jsonl"), ok=False)
    assert result.exit_code == 130
    assert "interrupted: nothing was written" in result.stderr
    assert os.listdir(tmp_path) == []


def test_ctrl_c_in_a_reading_command_says_it_changes_nothing(tmp_path, monkeypatch):
    db = str(tmp_path / "i.db")
    run("ingest", str(NEWS), "--db", db)
    monkeypatch.setattr(Index, "stats", _interrupt)
    result = run("stats", "--db", db, "--json", ok=False)
    assert result.exit_code == 130
    assert result.stderr.strip() == "interrupted: this command changes nothing"
