"""Crashes, concurrent writers, dropped connections and damage: nothing lost, nothing doubled."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import sqlalchemy as sa

import simindex
from simindex import Index
from simindex.errors import DatabaseError, InputError
from simindex.pipeline.documents import MAX_ID_BYTES
from simindex.store import database_url


def _corpus(path, start: int, stop: int, seed: int = 1) -> None:
    """Documents `d<start>` .. `d<stop - 1>` of random words (a few seconds to ingest)."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(5000)])
    with open(path, "w") as f:
        for i in range(start, stop):
            text = " ".join(words[rng.integers(0, 5000, 120)])
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")


def _simindex(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "simindex", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _count(url: str) -> int:
    with Index.open(url) as index:
        return index.stats().documents


def test_check_finds_damage(db_url, news):
    with Index.create(db_url) as index:
        index.add(news)
        index.find_pairs()
        index.cluster()
        assert index.check() == []
    engine = sa.create_engine(database_url(db_url))
    with engine.begin() as connection:
        connection.exec_driver_sql("INSERT INTO pairs VALUES (1, 3, 997, 0.9, 0.9, '2026-01-01')")
        connection.exec_driver_sql("INSERT INTO pairs VALUES (1, 996, 997, 0.9, 0.9, '2026-01-01')")
        connection.exec_driver_sql("INSERT INTO clusters VALUES (1, 996, 3)")
        connection.exec_driver_sql("DELETE FROM band_keys WHERE document_id = 5 AND band = 3")
        connection.exec_driver_sql("DELETE FROM signatures WHERE document_id = 7")
        connection.exec_driver_sql("INSERT INTO band_keys VALUES (1, 0, 123, 999)")
        connection.exec_driver_sql(
            "INSERT INTO signatures SELECT 998, minhashes FROM signatures WHERE document_id = 8"
        )
    engine.dispose()
    with Index.open(db_url) as index:
        assert index.check() == [
            "1 document(s) have no signature",
            "1 signature(s) belong to no document",
            "2 pair(s) name a document that is not indexed",
            "1 cluster row(s) name a document that is not indexed",
            "banding 1 (20 x 5): 0 document(s) have no band keys, 1 an incomplete set",
            "banding 1 (20 x 5): 1 band keys belong to no document",
        ]


def test_signatures_come_in_the_order_asked_and_a_missing_one_is_named(db_url, news):
    """Store.signatures_of, which verification, delete and the candidate estimate read: the
    signatures in the order of the ids asked (not the database's), equal to signing the
    texts again; a document without one is a DatabaseError that says what to run."""
    with Index.create(db_url) as index:
        index.add(news[:10])
        store, spec = index._store, index.spec
        ids = np.array([7, 2, 9, 1], dtype=np.int64)
        with store.engine.connect() as connection:
            got = store.signatures_of(connection, ids, spec.num_perm)
            chunks = list(store.signature_chunks(connection, spec.num_perm, 4, after=1))
            assert [c.tolist() for c, _ in chunks] == [[2, 3, 4, 5], [6, 7, 8, 9], [10]]
            in_order = np.concatenate([m for _, m in chunks])
            assert np.array_equal(in_order[ids[:3] - 2], got[:3])  # reband's, verification's
            connection.exec_driver_sql("DELETE FROM signatures WHERE document_id = 9")
            with pytest.raises(DatabaseError, match=r"1 of 4 documents .* \(the first: id 9\)"):
                store.signatures_of(connection, ids, spec.num_perm)
            short = sa.text("UPDATE signatures SET minhashes = :blob WHERE document_id = 7")
            connection.execute(short, {"blob": bytes(4)})  # PostgreSQL parses rows by length
            with pytest.raises(DatabaseError, match="differ in length"):
                store.signatures_of(connection, ids[:2], spec.num_perm)
            with pytest.raises(DatabaseError, match="differ in length"):
                list(store.signature_chunks(connection, spec.num_perm, 3))
            connection.rollback()
    texts = [simindex.normalize(news[i - 1][1]) for i in ids]
    assert np.array_equal(got, simindex.signatures(simindex.shingle_sets(texts, spec), spec))


def test_signatures_read_a_few_statements_at_a_time_are_the_same(db_url, news, monkeypatch):
    """SQLite reads MAX_SELECTED signatures a statement (each one row of aggregates): more
    ids than that take several statements and give the same rows, in the order asked."""
    with Index.create(db_url) as index:
        index.add(news[:10])
        store, num_perm = index._store, index.spec.num_perm
        ids = np.array([7, 2, 9, 1, 10, 3, 5], dtype=np.int64)
        with store.engine.connect() as connection:
            whole = store.signatures_of(connection, ids, num_perm)
            monkeypatch.setattr(simindex.store.sqlite, "MAX_SELECTED", 3)
            assert np.array_equal(store.signatures_of(connection, ids, num_perm), whole)
            everything = np.concatenate(
                [m for _, m in store.signature_chunks(connection, num_perm, 100)]
            )
    assert np.array_equal(whole, everything[ids - 1])


def test_texts_are_read_as_utf8_in_id_order_and_a_missing_document_is_named(db_url, news):
    """Verification's texts: each stored text's UTF-8 bytes and their sizes, in the order of
    the sorted ids, whatever its characters; an id with no document is a DatabaseError, not a
    wrong text."""
    stored = [
        ("a", "Plain ASCII TEXT"),
        ("b", "\tTabs  AND spaces "),
        ("c", "Ünïcödé \u6771\u4eac \U0001f600"),
        *news[:3],
    ]
    with Index.create(db_url) as index:
        index.add(stored)
        store = index._store
        ids = np.array([1, 2, 3, 5], dtype=np.int64)
        with store.engine.connect() as connection:
            data, offsets = store.utf8_texts(connection, ids)
            sizes = store.text_sizes(connection, np.append(ids, 99))
            with pytest.raises(DatabaseError, match="1 of 2 documents are not stored"):
                store.utf8_texts(connection, np.array([2, 99], dtype=np.int64))
    got = [data[offsets[i] : offsets[i + 1]].tobytes().decode("utf-8") for i in range(4)]
    assert got == [stored[i - 1][1] for i in ids.tolist()]
    assert sizes.tolist() == [len(stored[i - 1][1].encode()) for i in ids.tolist()] + [0]


def test_kill_9_during_ingest_leaves_a_consistent_index_and_a_rerun_completes(db_url, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    _corpus(corpus, 0, 15_000)
    Index.create(db_url).close()
    rng = np.random.default_rng(0)
    for attempt in range(3):
        process = _simindex("ingest", str(corpus), "--db", db_url, "--batch-size", "1000")
        time.sleep(float(rng.uniform(0.5, 2.5)))
        process.send_signal(signal.SIGKILL)
        process.wait()
        with Index.open(db_url) as index:
            assert index.check() == [], f"attempt {attempt}"
            assert index.stats().documents in (0, 15_000)  # all or nothing
    done = _simindex("ingest", str(corpus), "--db", db_url, "--on-duplicate", "skip")
    assert done.wait() == 0, done.stderr.read()
    with Index.open(db_url) as index:
        assert index.check() == [] and index.stats().documents == 15_000


def test_concurrent_writers_lose_nothing_and_double_nothing(db_url, tmp_path):
    """Three processes at once, overlapping and disjoint ids (SQLite writers wait their turn)."""
    ranges = [(0, 3000), (2000, 5000), (6000, 7000)]
    for n, (start, stop) in enumerate(ranges):
        _corpus(tmp_path / f"part{n}.jsonl", start, stop, seed=0)
    Index.create(db_url).close()
    processes = [
        _simindex(
            "ingest", str(tmp_path / f"part{n}.jsonl"), "--db", db_url, "--on-duplicate", "skip"
        )
        for n in range(len(ranges))
    ]
    for process in processes:
        assert process.wait() == 0, process.stderr.read()
    with Index.open(db_url) as index:
        assert index.check() == []
        assert index.stats().documents == 6000  # d0..d4999 and d6000..d6999, each once


def test_a_dropped_connection_mid_ingest_is_one_clear_error_and_writes_nothing(pg_url, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    _corpus(corpus, 0, 15_000)
    Index.create(pg_url).close()
    process = _simindex("ingest", str(corpus), "--db", pg_url, "--batch-size", "1000")
    admin = sa.create_engine(database_url(pg_url), isolation_level="AUTOCOMMIT")
    database = sa.make_url(database_url(pg_url)).database
    killed = 0
    with admin.connect() as connection:
        for _ in range(100):
            time.sleep(0.1)
            killed = connection.exec_driver_sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                f"WHERE datname = '{database}' AND pid <> pg_backend_pid() AND state <> 'idle'"
            ).scalar()
            if killed or process.poll() is not None:
                break
    admin.dispose()
    assert killed, "the ingest finished before its connection could be dropped"
    assert process.wait() == 1
    stderr = process.stderr.read()
    assert stderr.strip().startswith("Error: database postgresql+psycopg://")
    # libpq names the server's reason when it read it before the socket closed, else the
    # close (under load, a run cut mid-COPY sometimes ends that way).
    assert "administrator command" in stderr or "server closed the connection" in stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1
    assert _count(pg_url) == 0


def test_tricky_ids_and_texts_are_stored_as_given(db_url):
    docs = [
        ("'; DROP TABLE documents; --", "robert'); DROP TABLE students; -- the first text"),
        ('"quoted" id', "SELECT * FROM pairs WHERE 1 = 1 OR 'a' = 'a'"),
        ("x" * MAX_ID_BYTES, "y " * 5_000),
        ("ünïcødé ✓ 🎉", "emoji text 🎉🎉 and ümlauts here"),
        ("tab\tand\\N", "a\tb\\c\nd\r\ne \\N \\. end\\"),  # COPY's special characters
    ]
    with Index.create(db_url) as index:
        assert index.add(docs).added == len(docs)
        for external_id, text in docs:
            assert index.query(text, threshold=1.0)[0].external_id == external_id
        assert index.check() == []
    engine = sa.create_engine(database_url(db_url))
    with engine.connect() as connection:
        stored = set(connection.exec_driver_sql("SELECT external_id, text FROM documents"))
    engine.dispose()
    assert stored == set(docs)


def test_a_document_over_the_size_limit_is_refused_and_nothing_is_added(db_url):
    with Index.create(db_url) as index:
        with pytest.raises(
            InputError, match="'big' has 101 characters, more than the limit of 100"
        ):
            index.add([("ok", "fine"), ("big", "z" * 101)], max_chars=100)
        assert index.stats().documents == 0


def test_a_full_temporary_directory_is_one_clear_error_and_the_pairs_are_kept(
    pg_url, news, monkeypatch
):
    """`pairs --full` on PostgreSQL writes every signature to a temporary file while the
    buckets are grouped; a disk that fills up under it is one line naming the temporary
    directory and TMPDIR, exit 1, and the pairs found before are still stored."""
    import errno

    from typer.testing import CliRunner

    from simindex.cli import app

    with Index.create(pg_url, threshold=0.5) as index:
        index.add(news)
        index.find_pairs()
        before = sorted((p.id_a, p.id_b) for p in index.pairs(0.5))

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("simindex.signature_file.os.pwrite", full)
    result = CliRunner().invoke(app, ["pairs", "--full", "--threshold", "0.5", "--db", pg_url])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("Error: no space left on the device of the temporary directory")
    assert "TMPDIR" in lines[-1] and "Traceback" not in result.output
    monkeypatch.undo()
    with Index.open(pg_url) as index:
        assert sorted((p.id_a, p.id_b) for p in index.pairs(0.5)) == before and len(before) == 30


def test_a_full_disk_is_one_clear_error_and_the_index_is_unchanged(tmp_path, news):
    url = f"sqlite:///{tmp_path / 'small.db'}"
    with Index.create(url) as index:
        index.add(news[:10])
        engine = index._store.engine
        engine.dispose()

        def nearly_full(connection, _record):
            """Let the file grow by a few pages only: the next big write fills the "disk"."""
            (pages,) = connection.execute("PRAGMA page_count").fetchone()
            connection.execute(f"PRAGMA max_page_count = {pages + 3}")

        sa.event.listen(engine, "connect", nearly_full)
        with pytest.raises(DatabaseError, match="database or disk is full"):
            index.add(news[10:])
    with Index.open(url) as index:
        assert index.stats().documents == 10 and index.check() == []
