"""Destructive commands behave like it: delete, evict and drop-banding ask on a terminal (--yes for
scripts), have --dry-run, name the ids that were not found and refuse nonsensical windows;
the library returns what was (or would be) removed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app, prompt
from simindex.errors import ParameterError

runner = CliRunner()

DOCUMENTS = [
    ("a", "the first story about the harbour and its ferries"),
    ("b", "a second story about mountain roads in winter"),
    ("c", "a third story about the price of bread and milk"),
]


def run(*args: str, ok: bool = True, input: str | None = None):
    result = runner.invoke(app, list(args), input=input)
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


@pytest.fixture
def db(db_url) -> str:
    with Index.create(db_url) as index:
        index.add(DOCUMENTS)
    return db_url


def _ids(db: str) -> list[str]:
    with Index.open(db) as index:
        return sorted(index.documents(["a", "b", "c"]))


def test_delete_names_the_ids_it_did_not_find(db):
    result = run("delete", "a", "nosuch", "a", "--db", db, "--yes")
    assert result.stderr.endswith("Removed 1 of 2 documents; not found: nosuch\n")
    assert _ids(db) == ["b", "c"]


def test_dry_runs_list_what_would_go_and_remove_nothing(db):
    result = run("delete", "b", "c", "zz", "--db", db, "--dry-run")
    assert result.stdout.split() == ["b", "c"]
    assert "Would remove 2 of 3 documents; not found: zz" in result.stderr
    evict = run("evict", "--days", "0", "--db", db, "--dry-run")
    assert sorted(evict.stdout.split()) == ["a", "b", "c"]
    assert evict.stderr.startswith("Would remove 3 documents ingested before ")
    assert _ids(db) == ["a", "b", "c"]


def test_without_a_terminal_or_yes_nothing_is_removed(db):
    for args in (["delete", "a"], ["evict", "--days", "0"]):
        result = run(*args, "--db", db, ok=False)
        assert result.exit_code == 1
        assert result.stderr.splitlines()[-1].startswith("Error: ") and "--yes" in result.stderr
        assert "--dry-run" in result.stderr
    assert _ids(db) == ["a", "b", "c"]


def test_on_a_terminal_it_asks_first(db, monkeypatch):
    monkeypatch.setattr(prompt, "interactive", lambda: True)
    declined = run("delete", "a", "b", "--db", db, input="n\n", ok=False)
    assert declined.exit_code == 1 and "Remove 2 documents from" in declined.stderr
    assert "Nothing changed." in declined.stderr and _ids(db) == ["a", "b", "c"]
    accepted = run("evict", "--days", "0", "--db", db, input="y\n")
    assert "Removed 3 documents ingested before" in accepted.stderr and _ids(db) == []


def test_reband_drop_old_confirms_too(db, monkeypatch):
    refused = run("reband", "--bands", "42", "--rows", "3", "--drop-old", "--db", db, ok=False)
    assert refused.exit_code == 1 and "--drop-old deletes the other bandings" in refused.stderr
    monkeypatch.setattr(prompt, "interactive", lambda: True)
    declined = run(
        "reband", "--bands", "42", "--rows", "3", "--drop-old", "--db", db, input="n\n", ok=False
    )
    assert declined.exit_code == 1 and "Drop the other bandings" in declined.stderr
    with Index.open(db) as index:
        assert [(b["bands"], b["rows"]) for b in index.bandings()] == [(20, 5)]
    run("reband", "--bands", "42", "--rows", "3", "--drop-old", "--db", db, input="y\n")
    with Index.open(db) as index:
        assert [(b["bands"], b["rows"]) for b in index.bandings()] == [(42, 3)]


def test_drop_banding_confirms_and_refuses_the_active_one(db, monkeypatch):
    run("reband", "--bands", "42", "--rows", "3", "--no-activate", "--db", db)
    refused = run("drop-banding", "2", "--db", db, ok=False)
    assert refused.exit_code == 1 and "drop-banding deletes a banding for good" in refused.stderr
    monkeypatch.setattr(prompt, "interactive", lambda: True)
    declined = run("drop-banding", "2", "--db", db, input="n\n", ok=False)
    assert declined.exit_code == 1 and "Drop banding 2" in declined.stderr
    active = run("drop-banding", "1", "--db", db, "--yes", ok=False)
    assert active.exit_code == 1 and isinstance(active.exception, SystemExit)
    assert active.stderr.startswith("Error: banding 1 is the active one")
    with Index.open(db) as index:
        assert [b["id"] for b in index.bandings()] == [1, 2]
    assert "Dropped banding 2" in run("drop-banding", "2", "--db", db, input="y\n").stderr
    with Index.open(db) as index:
        assert [(b["bands"], b["rows"]) for b in index.bandings()] == [(20, 5)]


def test_stats_names_the_keys_a_stopped_sqlite_drop_left_and_drop_banding_deletes_them(tmp_path):
    db = f"sqlite:///{tmp_path / 'index.db'}"
    with Index.create(db) as index:
        index.add(DOCUMENTS)
    run("reband", "--bands", "42", "--rows", "3", "--no-activate", "--db", db)
    with Index.open(db) as index, index._store.write() as connection:
        index._store.drop_banding(connection, 2)  # a drop stopped right after its commit
    said = run("stats", "--db", db).stdout
    assert "retired bandings 2: their band keys are deleted by `simindex drop-banding ID`" in said
    assert "Dropped banding 2" in run("drop-banding", "2", "--db", db, "--yes").stderr
    assert "retired bandings" not in run("stats", "--db", db).stdout
    assert json.loads(run("stats", "--json", "--db", db).stdout)["retired_bandings"] == []


@pytest.mark.parametrize("days", ["-1", "nan", "inf", "-inf", "1e12"])
def test_evict_refuses_a_nonsensical_window(tmp_path, days):
    # Refused before the database is opened: one backend is enough.
    db = f"sqlite:///{tmp_path / 'index.db'}"
    with Index.create(db) as index:
        index.add(DOCUMENTS)
    result = run("evict", "--days", days, "--db", db, "--yes", ok=False)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("Error: --days must be a number of days from 0 to 365,000")
    assert _ids(db) == ["a", "b", "c"]


def test_evict_refuses_a_cut_off_in_the_future(db):
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")
    result = run("evict", "--older-than", tomorrow, "--db", db, "--yes", ok=False)
    assert result.exit_code == 1 and "is in the future" in result.stderr
    with Index.open(db) as index, pytest.raises(ParameterError, match="in the future"):
        index.evict(datetime.now(UTC) + timedelta(hours=1))
    assert _ids(db) == ["a", "b", "c"]


def test_the_library_says_what_was_and_would_be_removed(db):
    with Index.open(db) as index:
        planned = index.delete(["c", 7, "a"], dry_run=True)
        assert (planned.removed, planned.not_found, planned.dry_run) == (["c", "a"], ["7"], True)
        assert index.stats().documents == 3
        done = index.delete(["c", "a"])
        assert (done.removed, done.not_found, done.dry_run) == (["c", "a"], [], False)
        assert index.evict(datetime.now(UTC), dry_run=True).removed == ["b"]
        assert index.stats().documents == 1
        assert index.evict(datetime.now(UTC)).removed == ["b"]
        assert index.stats().documents == 0


def test_show_reads_the_stored_document(db):
    shown = json.loads(run("show", "b", "--db", db, "--json").stdout)
    assert shown["external_id"] == "b" and shown["text"] == DOCUMENTS[1][1]
    assert shown["metadata"] is None and shown["ingested_at"]
