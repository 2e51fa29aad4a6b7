"""Readers during `reband --drop-old`, and writers that wait for each other (docs/reliability.md,
"Concurrent writers" and "Readers during re-band")."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app
from simindex.errors import DatabaseError, ParameterError
from simindex.store import DROP_LOCK_TIMEOUT_MS, urls
from simindex.store import postgres as postgres_store
from simindex.store import sqlite as sqlite_store


class PointQueries:
    """Reader threads that repeat ``query_id(target)`` until the block ends, each timed;
    ``misses`` are the answers without ``copy``."""

    def __init__(self, url: str, target: str, copy: str, readers: int = 1):
        self.url, self.target, self.copy = url, target, copy
        self.latencies: list[float] = []
        self.misses: list[list[str]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._read) for _ in range(readers)]

    def _read(self) -> None:
        with Index.open(self.url) as reader:
            while not self._stop.is_set():
                started = time.perf_counter()
                found = [m.external_id for m in reader.query_id(self.target, threshold=0.5)]
                self.latencies.append(time.perf_counter() - started)
                if self.copy not in found:
                    self.misses.append(found)

    def __enter__(self) -> PointQueries:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


runner = CliRunner()
# A point query's own time is a few milliseconds; a reader held up by a DROP waits at most
# DROP_LOCK_TIMEOUT_MS. Twice that, plus room for two busy cores, bounds every query here.
LONGEST_QUERY = 2 * DROP_LOCK_TIMEOUT_MS / 1000 + 0.5


def test_point_queries_during_rebands_always_see_one_banding_and_never_wait_long(
    pg_url, news, monkeypatch
):
    monkeypatch.setattr(postgres_store, "DROP_ATTEMPTS", 2)  # each waits as long; fewer: faster
    with Index.create(pg_url, threshold=0.8, bands=16, rows=8) as index:
        index.add(news)
        index.find_pairs()
        best = next(iter(index.pairs()))
    target, copy = best.id_a, best.id_b

    analyst = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    with PointQueries(pg_url, target, copy) as queries, Index.open(pg_url) as writer:
        for bands, rows in [(32, 4), (16, 8)] * 3:
            writer.reband(bands, rows, drop_old=True)
        # An analyst's open transaction that has read the band keys: the old partition
        # can't be dropped while it lasts, and queries must not queue behind the DROP.
        with analyst.connect() as connection, connection.begin():
            connection.exec_driver_sql("SELECT count(*) FROM bucket_sizes").scalar_one()
            kept = writer.reband(32, 4, drop_old=True)
            retired = writer.stats().retired_bandings
            assert len(retired) == 1 and retired[0] != kept
            shown = runner.invoke(app, ["stats", "--db", pg_url]).stdout
            assert f"retired bandings {retired[0]}: their band keys are dropped" in shown
            assert [b["id"] for b in writer.bandings()] == [kept]
        writer.delete(["not-indexed"])  # a later write drops it
        assert writer.stats().retired_bandings == ()
        assert writer.check() == []
    analyst.dispose()
    latencies, misses = queries.latencies, queries.misses
    longest = max(latencies)
    print(f"\nlongest point query during re-bands: {longest * 1000:.0f} ms of {len(latencies)}")
    assert not misses, f"{len(misses)} of {len(latencies)} queries missed {copy}"
    assert len(latencies) > 20
    assert longest < LONGEST_QUERY


def test_a_reader_keeps_its_snapshot_and_band_keys_through_a_reband_drop_old(
    pg_url, news, monkeypatch
):
    """The race of a point query: the active banding read, then a re-band commits and drops
    it, then its band keys read. The reader holds band_keys, so the old partition is only
    retired, and it reads the banding it started with, whole."""
    monkeypatch.setattr(postgres_store, "DROP_ATTEMPTS", 1)
    with Index.create(pg_url, bands=16, rows=8) as index:
        index.add(news)
        store = index._store
        with store.read() as connection:
            (old,) = [b["id"] for b in store.bandings(connection) if b["is_active"]]
            new = index.reband(32, 4, drop_old=True)
            assert [b["id"] for b in store.bandings(connection)] == [old]
            sizes = store.bucket_sizes(connection, old)
        assert sum(size * count for size, count in sizes) == len(news) * 16
        assert index.stats().retired_bandings == (old,)
        assert [b["id"] for b in index.bandings()] == [new]
        index.delete([])  # a later write drops it
        assert index.stats().retired_bandings == ()


def test_a_waiting_writer_says_who_holds_the_lock_and_gives_up_after_lock_timeout(pg_url):
    """`producer | simindex ingest -` holds the writer lock while it waits on stdin; a
    `delete` meanwhile names it (its pg_stat_activity application_name) and gives up."""
    Index.create(pg_url).close()
    record = json.dumps({"id": "a", "text": "the quick brown fox jumps over the lazy dog"})
    producer = subprocess.Popen(
        [sys.executable, "-m", "simindex", "ingest", "-", "--format", "jsonl", "--db", pg_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        producer.stdin.write(record + "\n")
        producer.stdin.flush()  # ...and the producer keeps stdin open: ingest holds the lock
        deadline = time.monotonic() + 60
        while True:
            started = time.perf_counter()
            result = runner.invoke(
                app, ["delete", "b", "--db", pg_url, "--lock-timeout", "0.5", "--yes"]
            )
            waited = time.perf_counter() - started
            if result.exit_code != 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert result.exit_code == 1, result.output
        assert 0.5 <= waited < 5
        assert "Waiting up to 0.5 s for the index's writer lock, held by simindex ingest (pid" in (
            result.stderr
        )
        error = result.stderr.strip().splitlines()[-1]
        assert error.startswith("Error: gave up after waiting 0.5 s for simindex ingest (pid ")
        assert "--lock-timeout" in error
        assert "Traceback" not in result.output
    finally:
        _, stderr = producer.communicate(timeout=60)  # closes stdin: the ingest ends
    assert producer.returncode == 0, stderr
    with Index.open(pg_url) as index:
        assert index.stats().documents == 1


def test_a_writer_waits_at_most_lock_timeout_for_another(db_url, caplog):
    with Index.create(db_url) as holder:
        holder.add([("z", "a first story, so that the next load is not a first load")])
        entered, release = threading.Event(), threading.Event()

        def documents():
            yield ("a", "the quick brown fox jumps over the lazy dog")
            entered.set()  # the add's transaction is open, its lock held
            release.wait(30)

        thread = threading.Thread(target=lambda: holder.add(documents(), batch_size=1))
        thread.start()
        try:
            assert entered.wait(30)
            for seconds in (0.5, 0):  # 0: don't wait (PostgreSQL's lock_timeout 0 is no limit)
                with Index.open(db_url, lock_timeout=seconds) as other:
                    started = time.perf_counter()
                    with pytest.raises(DatabaseError, match=f"gave up after waiting {seconds} s"):
                        other.delete(["a"])
                    assert seconds <= time.perf_counter() - started < seconds + 2
            assert "Waiting up to 0.5 s for " in caplog.text
            assert "Waiting up to 0 s" not in caplog.text
        finally:
            release.set()
            thread.join()
    with Index.open(db_url) as index:
        assert index.stats().documents == 2
    with pytest.raises(ParameterError, match="lock timeout must be"):
        Index.open(db_url, lock_timeout=-1)


def test_a_first_load_into_sqlite_skips_the_wal_and_holds_the_file_until_it_commits(
    tmp_path, news, monkeypatch
):
    """Into an index with no documents, add() writes with a rollback journal, not the WAL
    (SQLiteStore.load_mode), and leaves the file in WAL mode. Meanwhile the file is the load's
    alone: a reader waits for it, then says why. A later add() goes through the WAL."""
    monkeypatch.setattr(urls, "SQLITE_BUSY_TIMEOUT_MS", 300)
    path, wal = tmp_path / "first.db", tmp_path / "first.db-wal"
    entered, release = threading.Event(), threading.Event()

    def documents():
        yield from news[:50]
        entered.set()  # the load's transaction is open
        release.wait(30)

    with Index.create(path) as loader:
        thread = threading.Thread(target=lambda: loader.add(documents(), batch_size=10))
        thread.start()
        try:
            assert entered.wait(30)
            with pytest.raises(DatabaseError, match="locked by another process \\(a first load"):
                with Index.open(path) as reader:
                    reader.stats()
        finally:
            release.set()
            thread.join()
        assert not wal.exists() or wal.stat().st_size == 0
        with Index.open(path) as reader:
            assert reader.stats().documents == 50
        loader.add(news[50:])
        assert wal.stat().st_size > 0
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("SELECT count(*) FROM documents").fetchone() == (len(news),)


def test_a_first_load_goes_through_the_wal_when_another_connection_has_the_file_open(
    tmp_path, news
):
    path = tmp_path / "shared.db"
    Index.create(path).close()
    with closing(sqlite3.connect(path)) as other:
        assert other.execute("SELECT count(*) FROM documents").fetchone() == (0,)
        with Index.open(path) as index:
            index.add(news)
            assert (tmp_path / "shared.db-wal").stat().st_size > 0
        assert other.execute("SELECT count(*) FROM documents").fetchone() == (len(news),)


def test_sqlite_stores_pairs_with_a_larger_page_cache_and_sets_it_back_after(tmp_path, news):
    """Verified pairs land all over the pairs' indexes, so their inserts get a larger cache;
    every other transaction keeps SQLite's default, so dedup's ingest and pairs don't hold
    two large caches at once."""
    seen = []
    with Index.create(tmp_path / "cache.db") as index:
        index.add(news)
        store = index._store
        with store.write() as connection:
            before = connection.exec_driver_sql("PRAGMA cache_size").scalar_one()
        insert = store.insert_pairs

        def recording(connection, *args):
            seen.append(connection.exec_driver_sql("PRAGMA cache_size").scalar_one())
            insert(connection, *args)

        store.insert_pairs = recording
        index.find_pairs()
        with store.write() as connection:
            after = connection.exec_driver_sql("PRAGMA cache_size").scalar_one()
    assert seen and set(seen) == {-sqlite_store.SQLITE_PAIRS_CACHE_KIB}
    assert after == before == -2_000  # SQLite's default


def test_a_new_sqlite_index_has_large_pages_and_one_made_with_small_pages_keeps_them(
    tmp_path, news
):
    """A new file gets store.SQLITE_PAGE_SIZE; an index whose file was made with SQLite's
    default pages (an earlier simindex) keeps them through every write, WAL ones included."""
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with closing(sqlite3.connect(old)) as connection:
        connection.execute("PRAGMA page_size = 4096")
        connection.execute("VACUUM")  # an empty database file with 4 KiB pages
    for path in (new, old):
        with Index.create(path, threshold=0.8) as index:
            index.add(news[:60])  # the first load (rollback journal)
            index.add(news[60:])  # through the WAL
            index.reband(16, 8)
            index.find_pairs()
            assert index.check() == [] and index.stats().documents == len(news)
    sizes = {}
    for path in (new, old):
        with closing(sqlite3.connect(path)) as connection:
            sizes[path] = connection.execute("PRAGMA page_size").fetchone()[0]
    assert sizes == {new: urls.SQLITE_PAGE_SIZE, old: 4096}
    found = {}
    for path in (new, old):
        with Index.open(path) as index:
            found[path] = sorted((p.id_a, p.id_b) for p in index.pairs())
    assert found[new] == found[old] and found[new]
