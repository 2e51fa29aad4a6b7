"""A SQLite re-band commits its band keys in parts (store.BandKeyWriter, Index.reband): the WAL
holds one part at a time, writers between the parts are caught up with, and a build that
fails or loses its banding leaves nothing behind (docs/reliability.md)."""

from __future__ import annotations

import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app
from simindex.errors import DatabaseError
from simindex.pipeline import banding as lsh
from simindex.store import SQLiteStore, bandkeys

runner = CliRunner()
PART_ROWS = 100  # the 100 news stories' keys of one band: a part per band


def _keys(url: str, banding_id: int) -> set[tuple[int, int, int]]:
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        rows = connection.exec_driver_sql(
            f"SELECT band, key, document_id FROM band_keys WHERE banding_id = {banding_id}"
        ).all()
    engine.dispose()
    return {tuple(row) for row in rows}


def _expected_keys(index: Index, bands: int, rows: int) -> set[tuple[int, int, int]]:
    """The band keys of every indexed document, computed from its stored signature."""
    with index._store.read() as connection:
        ids, sigs = zip(*index._store.signature_chunks(connection, index.spec.num_perm, 10**6))
    ids, keys = np.concatenate(ids), lsh.band_keys(np.concatenate(sigs), bands, rows)
    return {(b, int(keys[i, b]), int(d)) for i, d in enumerate(ids) for b in range(bands)}


def _between_parts(monkeypatch, action) -> list[int]:
    """Run ``action(part)`` between a re-band's parts (after a part's commit, before the
    next part begins: no lock held); returns the parts' count as they go."""
    begin = SQLiteStore._begin_part
    parts = []

    def hooked(store, connection):
        parts.append(len(parts) + 1)
        action(parts[-1])
        begin(store, connection)

    monkeypatch.setattr(SQLiteStore, "_begin_part", hooked)
    return parts


def _copies_checkpointing_every_commit(url: str, news) -> Index:
    """An index of 20 copies of the news stories (2,000 documents) whose connections copy the
    WAL into the database after every commit (SQLite's automatic checkpoint at one page; at
    its default, after 16 MB, a part being ~190 MB)."""
    index = Index.create(url, bands=16, rows=8)
    index.add([(f"{copy}-{i}", text, {}) for copy in range(20) for i, text, _ in news])
    index._store.engine.dispose()
    sa.event.listen(
        index._store.engine,
        "connect",
        lambda connection, _: connection.execute("PRAGMA wal_autocheckpoint = 1"),
    )
    return index


def test_a_sqlite_reband_in_parts_holds_one_part_in_the_wal(tmp_path, news, monkeypatch):
    """Each part's commit copies the WAL into the database (SQLite's automatic checkpoint,
    here after every commit), and the next part writes the WAL over from its start: the file
    never holds more than a part."""
    monkeypatch.setattr(bandkeys, "WRITE_ROWS", 1_000)  # the rows of an INSERT batch
    wal_sizes = {}
    for name, part_rows in [("whole", 10**9), ("parts", 1_000)]:
        monkeypatch.setattr(bandkeys, "PART_ROWS", part_rows)
        url = f"sqlite:///{tmp_path / name}.db"
        with _copies_checkpointing_every_commit(url, news) as index:
            parts = _between_parts(monkeypatch, lambda part: None)
            built = index.reband(10, 12)
            wal_sizes[name] = os.path.getsize(tmp_path / f"{name}.db-wal")
            assert _keys(url, built) == _expected_keys(index, 10, 12)
            assert [b["id"] for b in index.bandings() if b["is_active"]] == [built]
            assert index.check() == []
        assert len(parts) == (20 if name == "parts" else 0)  # 20,000 rows, 1,000 a part
    # One transaction's WAL holds every page of the banding; in parts, about a tenth.
    assert wal_sizes["parts"] * 4 < wal_sizes["whole"]


def test_a_reader_across_parts_holds_the_wal_back_until_it_ends(tmp_path, news, monkeypatch):
    """A reader's transaction spanning a part's commit pins the WAL: SQLite cannot write it
    over from its start, so the parts committed meanwhile pile up in it; once the reader ends,
    the next part's copy empties it and the parts after write it over again. The reader sees
    its snapshot throughout, and the banding comes out whole."""
    monkeypatch.setattr(bandkeys, "WRITE_ROWS", 1_000)
    monkeypatch.setattr(bandkeys, "PART_ROWS", 1_000)
    path = tmp_path / "index.db"
    with _copies_checkpointing_every_commit(f"sqlite:///{path}", news) as index:
        count = "SELECT count(*) FROM band_keys"
        wal_sizes, seen = [], []
        with closing(sqlite3.connect(path, isolation_level=None)) as reader:

            def read_across(part: int) -> None:
                wal_sizes.append(os.path.getsize(f"{path}-wal"))
                if part == 2:
                    reader.execute("BEGIN")
                    seen.append(reader.execute(count).fetchone()[0])
                if part == 7:
                    seen.append(reader.execute(count).fetchone()[0])
                    reader.execute("COMMIT")
                    seen.append(reader.execute(count).fetchone()[0])

            _between_parts(monkeypatch, read_across)
            built = index.reband(10, 12)
        assert _keys(f"sqlite:///{path}", built) == _expected_keys(index, 10, 12)
        assert index.check() == []
    # wal_sizes[k - 1]: the WAL after part k's commit. The reader began after part 2's copy
    # had emptied the WAL, so it reads the database file alone and part 3 wrote the WAL over
    # from its start; but no copy into the file could follow while the reader read it, so
    # parts 4-8 piled up (part 8 began before a copy after the reader's end). From part 9 on,
    # each part wrote the WAL over from its start again: it no longer grew.
    held, after = wal_sizes[2:8], wal_sizes[8:]
    assert all(later > earlier for earlier, later in itertools.pairwise(held)), wal_sizes
    assert held[-1] > 4 * held[0] and after and max(after) == held[-1], wal_sizes
    assert seen[0] == seen[1] < seen[2]  # its snapshot, then the parts committed meanwhile


def test_writers_between_the_parts_are_caught_up_with(tmp_path, news, monkeypatch):
    monkeypatch.setattr(bandkeys, "PART_ROWS", PART_ROWS)
    url = f"sqlite:///{tmp_path / 'index.db'}"
    first, later = news[:70], news[70:]
    with Index.create(url, bands=16, rows=8) as index:
        index.add(first)
        deleted = [first[0][0], first[33][0]]
        replaced = (first[5][0], later[0][1], {})  # the same id, another text: a new document

        def other_writers(part: int) -> None:
            with Index.open(url) as other:
                if part == 2:
                    other.add(later[1:15])
                    other.delete(deleted)
                if part == 5:
                    other.add([replaced], on_duplicate="replace")
                    other.add(later[15:])

        parts = _between_parts(monkeypatch, other_writers)
        built = index.reband(10, 12)
        assert len(parts) >= 5
        assert index.stats().documents == 70 - 2 + 29
        assert _keys(url, built) == _expected_keys(index, 10, 12)
        assert index.check() == []


@pytest.fixture
def indexed(tmp_path, news, monkeypatch) -> Iterator[tuple[str, Index]]:
    """(url, index) of the news stories in SQLite, re-bands committing PART_ROWS a part."""
    monkeypatch.setattr(bandkeys, "PART_ROWS", PART_ROWS)
    url = f"sqlite:///{tmp_path / 'index.db'}"
    with Index.create(url, bands=16, rows=8) as index:
        index.add(news)
        yield url, index


def test_a_reband_that_fails_between_parts_leaves_no_banding(indexed, monkeypatch):
    url, index = indexed
    before = index.bandings()

    def fail(part: int) -> None:
        if part == 3:
            raise OSError(28, "No space left on device")

    _between_parts(monkeypatch, fail)
    with pytest.raises(OSError, match="No space left"):
        index.reband(10, 12)
    assert index.bandings() == before
    assert _keys(url, before[-1]["id"] + 1) == set()
    assert index.check() == []


def test_a_reband_whose_banding_another_drops_stops_with_a_clear_error(indexed, monkeypatch):
    """`reband --drop-old` elsewhere, between this re-band's parts, removes its banding."""
    url, index = indexed
    kept = []

    def other_reband(part: int) -> None:
        if part == 2:
            monkeypatch.setattr(bandkeys, "PART_ROWS", 10**9)  # theirs: whole
            with Index.open(url) as other:
                kept.append(other.reband(20, 6, drop_old=True))
            monkeypatch.setattr(bandkeys, "PART_ROWS", PART_ROWS)

    _between_parts(monkeypatch, other_reband)
    with pytest.raises(DatabaseError, match="was removed while it was being built"):
        index.reband(10, 12)
    assert [b["id"] for b in index.bandings()] == kept
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        keyed = connection.exec_driver_sql("SELECT DISTINCT banding_id FROM band_keys").all()
    engine.dispose()
    assert [row[0] for row in keyed] == kept  # no stray keys of the stopped re-band
    assert index.check() == []


def test_a_banding_that_took_the_id_of_the_one_being_built_is_left_alone(indexed, monkeypatch):
    """Between two parts, the banding being built is dropped and a new one gets its id (a
    SQLite banding's id is reused once the dropped one's keys are gone): the re-band stops,
    and the new banding stays whole."""
    url, index = indexed
    taken = []

    def drop_and_reuse(part: int) -> None:
        if part == 2:
            with Index.open(url) as other:
                (building,) = [b for b in other.bandings() if b["state"] == "building"]
                other.drop_banding(building["id"])
                with other._store.write() as connection:
                    taken.append(other._store.create_banding(connection, 10, 12))
            assert taken == [building["id"]]

    _between_parts(monkeypatch, drop_and_reuse)
    with pytest.raises(DatabaseError, match="was removed while it was being built"):
        index.reband(10, 12)
    assert [(b["id"], b["state"]) for b in index.bandings()][-1] == (taken[0], "building")
    assert _keys(url, taken[0]) == set()  # what the stopped re-band wrote went with it


def test_a_failure_after_the_last_commit_keeps_the_complete_banding(indexed, monkeypatch):
    """An interrupt while SQLite copies the WAL into the database after the commit."""
    url, index = indexed

    def interrupted(store):
        raise KeyboardInterrupt

    monkeypatch.setattr(SQLiteStore, "after_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        index.reband(10, 12)
    monkeypatch.undo()
    (built,) = [b for b in index.bandings() if b["is_active"]]
    assert (built["bands"], built["state"]) == (10, "complete")
    assert _keys(url, built["id"]) == _expected_keys(index, 10, 12)
    assert index.check() == []


def test_between_parts_a_reband_waits_for_another_writer_past_its_lock_timeout(
    indexed, monkeypatch, caplog
):
    """Giving up would throw away the parts committed: it waits up to PART_LOCK_TIMEOUT."""
    url, index = indexed
    holding, release = threading.Event(), threading.Event()

    def other_writer() -> None:
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)) as db:
            db.execute("BEGIN IMMEDIATE")
            holding.set()
            release.wait(10)
            db.execute("COMMIT")

    def hold_the_lock(part: int) -> None:
        if part == 2:
            threading.Thread(target=other_writer).start()
            holding.wait(10)
            threading.Timer(1.0, release.set).start()  # twice --lock-timeout

    _between_parts(monkeypatch, hold_the_lock)
    with Index.open(url, lock_timeout=0.5) as impatient:
        built = impatient.reband(10, 12)
    assert "Waiting up to 1 h for another writer" in caplog.text
    assert _keys(url, built) == _expected_keys(index, 10, 12)
    assert index.check() == []


KILLED_REBAND = """
import os, signal, sys
from simindex import Index
from simindex.store import bandkeys, sqlite
bandkeys.PART_ROWS = 100
begin = sqlite.SQLiteStore._begin_part
def killed(self, connection, parts=[]):
    parts.append(1)
    if len(parts) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    begin(self, connection)
sqlite.SQLiteStore._begin_part = killed
with Index.open(sys.argv[1]) as index:
    index.reband(10, 12)
"""


def test_a_reband_killed_between_parts_leaves_an_unused_banding_that_drop_banding_removes(
    tmp_path, news
):
    url = f"sqlite:///{tmp_path / 'index.db'}"
    with Index.create(url, bands=20, rows=5) as index:
        index.add(news)
        index.find_pairs()
        before = {(p.id_a, p.id_b) for p in index.pairs()}
    killed = subprocess.run([sys.executable, "-c", KILLED_REBAND, url], capture_output=True)
    assert killed.returncode == -signal.SIGKILL
    with Index.open(url) as index:
        (left,) = [b for b in index.bandings() if b["state"] == "building"]
        assert len(_keys(url, left["id"])) == 300  # three parts committed, killed before the fourth
        assert index.check() == []
        assert {(p.id_a, p.id_b) for p in index.pairs()} == before  # the active banding's
    shown = runner.invoke(app, ["stats", "--db", url]).stdout
    assert f"building bandings {left['id']}: a `simindex reband` is building them" in shown
    assert "`simindex drop-banding ID` removes one" in shown
    result = runner.invoke(app, ["drop-banding", str(left["id"]), "-y", "--db", url])
    assert result.exit_code == 0, result.output
    assert f"Dropped banding {left['id']}" in result.stderr
    with Index.open(url) as index:
        assert [(b["bands"], b["state"]) for b in index.bandings()] == [(20, "complete")]
        assert _keys(url, left["id"]) == set() and index.check() == []
        assert {(p.id_a, p.id_b) for p in index.pairs()} == before
