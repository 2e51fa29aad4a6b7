"""An index's life: created all or nothing, half-created ones completed, never created by a
reader, activated, and point queries bounded on hot buckets."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command

from simindex import Index
from simindex.errors import DatabaseError, DuplicateIdError, NoIndexError, ParameterError
from simindex.index import schema_revision, upgrade_schema
from simindex.spec import SignatureSpec
from simindex.store import SQLiteStore, Store, create_engine, database_url, migrate, store_of
from tests.cli.test_cli import run
from tests.conftest import NEWS
from tests.db.test_reliability import _corpus, _simindex


def _tables(url: str) -> list[str]:
    engine = sa.create_engine(database_url(url))
    try:
        return sorted(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _execute(url: str, *statements: str) -> None:
    engine = create_engine(database_url(url))
    with engine.begin() as connection:
        for statement in statements:
            connection.exec_driver_sql(statement)
    engine.dispose()


def _half_created(url: str, revision: str = "head") -> None:
    """What older versions left when killed between their two transactions: the schema
    (at ``revision``), no settings row."""
    engine = create_engine(database_url(url))
    with engine.begin() as connection:
        command.upgrade(migrate._config(connection), revision)
    engine.dispose()


def test_a_failure_while_creating_leaves_nothing(db_url, monkeypatch):
    def fail(*args):
        raise RuntimeError("killed between the settings and the banding")

    monkeypatch.setattr(Store, "activate_banding", fail)
    with pytest.raises(RuntimeError):
        Index.create(db_url)
    assert _tables(db_url) == []
    monkeypatch.undo()
    with Index.create(db_url, threshold=0.9) as index:
        assert index.threshold == 0.9


def test_a_first_add_that_fails_leaves_no_index(db_url, news):
    index, created = Index.open_or_create(db_url)
    assert created
    with index, pytest.raises(DuplicateIdError):
        index.add([news[0], news[0]])
    assert _tables(db_url) == []
    with Index.create(db_url, threshold=0.9) as index:
        assert index.threshold == 0.9


def test_a_deferred_index_is_created_with_its_first_documents(db_url, news):
    index, created = Index.open_or_create(db_url, threshold=0.7)
    with index:
        assert created and index.add(news[:5]).added == 5
    with Index.open(db_url) as index:
        assert index.threshold == 0.7 and index.stats().documents == 5
        assert index.check() == []


@pytest.mark.parametrize("revision", ["0001", "head"])
def test_a_half_created_index_is_recognised_and_completed(db_url, news, revision):
    _half_created(db_url, revision)
    with pytest.raises(NoIndexError, match=r"half-created simindex index.*Index\.create"):
        Index.open(db_url)
    with Index.create(db_url, threshold=0.9) as index:
        assert index.completed_half_created
        index.add(news[:3])
    with Index.open(db_url) as index:
        assert index.threshold == 0.9 and index.check() == []
    assert schema_revision(db_url)[0] == migrate.HEAD_REVISION


def test_ingest_completes_a_half_created_index(db_url, news):
    _half_created(db_url)
    index, created = Index.open_or_create(db_url)
    with index:
        assert created and index.completed_half_created
        index.add(news[:3])
    with Index.open(db_url) as index:
        assert index.stats().documents == 3


def test_db_upgrade_of_an_empty_database_creates_nothing(db_url):
    Index.open_or_create(db_url)[0].close()  # no SQLite file is made until the first add
    if db_url.startswith("sqlite"):
        with pytest.raises(NoIndexError, match="there is no database file"):
            upgrade_schema(db_url)
        assert not Path(database_url(db_url).database).exists()
        return
    with pytest.raises(DatabaseError, match="holds no simindex index to upgrade.*simindex init"):
        upgrade_schema(db_url)
    assert _tables(db_url) == []
    assert schema_revision(db_url)[::2] == (
        None,
        "no simindex index here: `simindex init` creates one",
    )


def test_db_upgrade_brings_an_old_index_to_the_head(db_url):
    _half_created(db_url, "0001")
    engine = create_engine(database_url(db_url))
    with engine.begin() as connection:
        store_of(engine).write_settings(
            connection, {**SignatureSpec().to_dict(), "keep_text": True, "threshold": 0.8,
                         "created_by": "simindex 0.0.1"}
        )  # fmt: skip
    engine.dispose()
    assert schema_revision(db_url)[2].endswith(
        "run `simindex db upgrade` (with the same --db) first"
    )
    assert upgrade_schema(db_url) == ("0001", migrate.HEAD_REVISION)
    assert schema_revision(db_url)[2] == "up to date"


def test_on_a_newer_schema_db_current_says_to_upgrade_simindex(db_url):
    Index.create(db_url).close()
    _execute(db_url, "UPDATE alembic_version SET version_num = '9999'")
    revision, _, advice = schema_revision(db_url)
    assert revision == "9999"
    assert "upgrade simindex" in advice and "db upgrade" not in advice
    with pytest.raises(DatabaseError, match="made by a newer simindex; upgrade simindex"):
        upgrade_schema(db_url)


@pytest.mark.parametrize("table", ["documents", "pairs"])
def test_an_application_table_of_the_same_name_is_named_and_left_alone(db_url, table):
    _execute(db_url, f"CREATE TABLE {table} (note TEXT)", f"INSERT INTO {table} VALUES ('mine')")
    elsewhere = "another file with --db" if db_url.startswith("sqlite") else "--schema NAME"
    with pytest.raises(DatabaseError, match=f"not a simindex index \\({table}\\).*{elsewhere}"):
        Index.create(db_url)
    with pytest.raises(DatabaseError, match=f"\\({table}\\)"):
        Index.open_or_create(db_url)
    assert _tables(db_url) == [table]


def test_readers_never_create_a_sqlite_file(tmp_path):
    missing = tmp_path / "typo.db"
    for read in (Index.open, schema_revision, upgrade_schema):
        with pytest.raises(DatabaseError, match=f"there is no database file {missing}"):
            read(str(missing))
    assert not missing.exists()


def test_a_built_banding_is_activated_later_and_incomplete_ones_are_refused(db_url, news):
    with Index.create(db_url) as index:
        index.add(news)
        first = index.query_id("n003", threshold=0.5)
        built = index.reband(10, 10, activate=False)
        assert [b["id"] for b in index.bandings() if b["is_active"]] == [1]
        index.activate(built)
        assert [b["id"] for b in index.bandings() if b["is_active"]] == [built]
        assert index.query_id("n003", threshold=0.5)[0] == first[0]
        with pytest.raises(ParameterError, match="there is no banding 99"):
            index.activate(99)
    _execute(db_url, "UPDATE bandings SET state = 'building' WHERE id = 1")
    with Index.open(db_url) as index:
        with pytest.raises(ParameterError, match="banding 1 is building, not complete"):
            index.activate(1)


def test_one_inactive_banding_is_dropped_with_its_keys_and_pairs(db_url, news):
    with Index.create(db_url) as index:
        index.add(news)
        index.find_pairs()
        kept = {(p.id_a, p.id_b) for p in index.pairs()}
        spare = index.reband(42, 3)
        index.find_pairs()
        index.cluster()
        index.activate(1)
        with pytest.raises(ParameterError, match="banding 1 is the active one"):
            index.drop_banding(1)
        with pytest.raises(ParameterError, match="there is no banding 99"):
            index.drop_banding(99)
        index.drop_banding(spare)
        assert [b["id"] for b in index.bandings()] == [1]
        assert {(p.id_a, p.id_b) for p in index.pairs()} == kept
        assert index.check() == []
    engine = create_engine(database_url(db_url))
    with engine.connect() as connection:
        for table in ("band_keys", "pairs", "clusters"):
            left = f"SELECT count(*) FROM {table} WHERE banding_id = {spare}"
            assert connection.exec_driver_sql(left).scalar() == 0
    engine.dispose()


def _keys_of(url: str, banding_id: int) -> int:
    engine = create_engine(database_url(url))
    with engine.connect() as connection:
        sql = f"SELECT count(*) FROM band_keys WHERE banding_id = {banding_id}"
        count = connection.exec_driver_sql(sql).scalar()
    engine.dispose()
    return count


def test_sqlite_drops_a_bandings_keys_a_band_at_a_time_and_finishes_a_stopped_drop(
    tmp_path, news, monkeypatch
):
    """The drop's commit retires the banding; its keys go a band a transaction after it (the
    WAL holds one band's pages), and a drop stopped among them leaves the rest retired: used
    by nothing, listed by stats, never mixed with a new banding's, deleted by the next drop."""
    url = f"sqlite:///{tmp_path / 'drop.db'}"
    with Index.create(url) as index:
        index.add(news)
        documents = index.stats().documents
        spare = index.reband(42, 3, activate=False)
        assert _keys_of(url, spare) == 42 * documents
        commits = []
        sa.event.listen(index._store.engine, "commit", lambda _: commits.append(1))
        looked = SQLiteStore.retired_bandings

        def stopped_after_five_bands(self, connection):
            if len(commits) == 6:  # the drop's own, then five bands'
                raise KeyboardInterrupt
            return looked(self, connection)

        monkeypatch.setattr(SQLiteStore, "retired_bandings", stopped_after_five_bands)
        with pytest.raises(KeyboardInterrupt):
            index.drop_banding(spare)
        monkeypatch.setattr(SQLiteStore, "retired_bandings", looked)
        assert _keys_of(url, spare) == 37 * documents
        assert [b["id"] for b in index.bandings()] == [1]
        assert index.stats().retired_bandings == (spare,)
        assert index.check() == []
        assert index.query_id("n003", threshold=0.5)
        newer = index.reband(20, 5, activate=False)  # not the retired banding's id
        assert newer == spare + 1 and _keys_of(url, newer) == 20 * documents
        commits.clear()
        index.drop_banding(spare)  # finishes the stopped drop
        assert len(commits) == 1 + 37 + 1  # the drop's, a band's each, the last look's
        assert _keys_of(url, spare) == 0 and _keys_of(url, newer) == 20 * documents
        assert index.stats().retired_bandings == ()
        assert [b["id"] for b in index.bandings()] == [1, newer]


def test_a_sqlite_drop_holds_the_write_lock_for_each_band_and_leaves_the_rest_when_kept_waiting(
    tmp_path, news, monkeypatch, caplog
):
    """Each band's delete is a write from its first statement (another writer can't slip in
    between its look and its delete); a lock wait that gives up ends the deletion with a
    warning, not an error (the drop is committed), and leaves the rest to the next drop."""
    path = tmp_path / "drop.db"
    url = f"sqlite:///{path}"
    with Index.create(url) as index:
        index.add(news)
        documents = index.stats().documents
        spare = index.reband(42, 3, activate=False)
        looks, locked = [], []
        look = SQLiteStore.retired_bandings

        def another_writer_tries(self, connection):
            looks.append(1)
            if len(looks) == 3:  # in the second band's transaction
                other = sqlite3.connect(path, timeout=0)
                try:
                    other.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:
                    locked.append(str(exc))
                other.close()
            return look(self, connection)

        wait = SQLiteStore._wait_for_writer

        def gives_up_before_the_fourth_band(self, connection, *args):
            if len(looks) == 4:
                raise self.lock_timeout_error("another writer")
            return wait(self, connection, *args)

        monkeypatch.setattr(SQLiteStore, "retired_bandings", another_writer_tries)
        monkeypatch.setattr(SQLiteStore, "_wait_for_writer", gives_up_before_the_fourth_band)
        with caplog.at_level("WARNING", logger="simindex"):
            index.drop_banding(spare)
        monkeypatch.undo()
        assert locked == ["database is locked"]
        assert "retired bandings stay, to be deleted later: gave up" in caplog.text
        assert _keys_of(url, spare) == 39 * documents
        assert index.stats().retired_bandings == (spare,)
        index.drop_banding(spare)
        assert _keys_of(url, spare) == 0 and index.stats().retired_bandings == ()


def test_point_queries_read_at_most_max_bucket_size_members_of_a_bucket(db_url):
    """300 copies share every bucket: a bounded query compares only the earliest members."""
    text = "the same story told three hundred times over, word for word"
    with Index.create(db_url) as index:
        index.add([(f"c{i:03d}", text) for i in range(300)])
        assert len(index.query_id("c150", threshold=0.0)) == 299
        bounded = index.query_id("c150", threshold=0.0, max_bucket_size=10)
        assert sorted(m.external_id for m in bounded) == [f"c{i:03d}" for i in range(10)]
        assert len(index.query(text, max_bucket_size=5)) == 5
        with pytest.raises(ParameterError, match="max_bucket_size must be at least 1"):
            index.query(text, max_bucket_size=0)


def test_negative_seeds_are_refused(db_url, news):
    with Index.create(db_url) as index:
        index.add(news[:10])
        with pytest.raises(ParameterError, match="seed must be a non-negative integer, got -1"):
            index.evaluate(seed=-1)
        with pytest.raises(ParameterError, match="seed must be a non-negative integer, got -1"):
            index.estimate_candidates([(20, 5)], seed=-1)


@pytest.mark.parametrize(("first", "window"), [("init", 0.3), ("ingest", 1.5)])
def test_kill_9_during_a_first_init_or_ingest_leaves_nothing_or_everything(
    db_url, tmp_path, first, window
):
    corpus = tmp_path / "corpus.jsonl"
    _corpus(corpus, 0, 4000)
    arguments = ["init"] if first == "init" else ["ingest", str(corpus), "--batch-size", "500"]
    rng = np.random.default_rng(len(first))
    for attempt in range(2):
        process = _simindex(*arguments, "--db", db_url)
        _wait_until_connected(db_url, process)
        try:  # killed at a random moment of its work, unless it finishes first
            finished = process.wait(timeout=float(rng.uniform(0, window))) == 0
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            finished = process.wait() == 0
        if _tables(db_url):
            with Index.open(db_url) as index:  # not half-created: it opens
                assert index.check() == [], f"attempt {attempt}"
                assert index.stats().documents == (0 if first == "init" else 4000)
        else:
            assert not finished, f"attempt {attempt}: exit 0 but no index"
            Index.create(db_url, threshold=0.9).close()  # the user's next step works
        _reset(db_url)


def _wait_until_connected(url: str, process: subprocess.Popen) -> None:
    """Until the process has connected to the database (its start-up is over)."""
    engine = create_engine(database_url(url))
    try:
        for _ in range(3000):
            if process.poll() is not None:
                return
            if engine.dialect.name == "sqlite":
                if Path(engine.url.database).exists():
                    return
            else:
                with engine.connect() as connection:
                    others = connection.exec_driver_sql(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    ).scalar()
                if others:
                    return
            time.sleep(0.01)
    finally:
        engine.dispose()


def _reset(url: str) -> None:
    """Remove everything, so the next first command starts on an empty database."""
    engine = create_engine(database_url(url))
    if engine.dialect.name == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(engine.url.database + suffix).unlink(missing_ok=True)
    else:
        with engine.begin() as connection:
            connection.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    engine.dispose()


def test_init_and_ingest_say_they_completed_a_half_created_index(db_url):
    _half_created(db_url)
    stats = run("stats", "--db", db_url, ok=False)
    assert "half-created simindex index" in stats.stderr
    assert "Completed the half-created index" in run("ingest", str(NEWS), "--db", db_url).stderr
