"""All SQL: connecting, bulk loads, band-key look-ups, candidate buckets, pairs, statistics.

Statements are SQLAlchemy Core over the tables in schema.py, with dialect branches only
where the fast path differs: PostgreSQL loads through ``COPY`` (band keys in binary
format straight from numpy), SQLite through ``executemany`` in large transactions.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import re
import sqlite3
import threading
import time
import urllib.parse
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection, Engine, event, func, select
from sqlalchemy.engine import make_url

from simindex.defaults import DEFAULT_LOCK_TIMEOUT, application_name
from simindex.errors import DatabaseError, ParameterError
from simindex.pipeline.chunking import ahead, spans
from simindex.pipeline.runs import RunSpool
from simindex.spec import SIGNATURE_DTYPE
from simindex.store.schema import (
    band_keys,
    bandings,
    clusters,
    documents,
    index_settings,
    metadata,
    pairs,
    signatures,
)

if TYPE_CHECKING:
    from simindex.signature_file import SignatureFile

DEFAULT_PATH = "simindex.db"
# Bound parameters per statement: below SQLite's 32,766 and PostgreSQL's 65,535.
MAX_PARAMS = 30_000
# Signatures one SQLite statement returns as one blob (see _selected_signatures): 51 MB at 128
# values, far below SQLite's limit of 1 GB on a value.
MAX_SELECTED = 100_000
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Bytes per page of a new SQLite index (SQLite's default: 4,096; an existing file keeps its
# own). A large write goes through the WAL a page at a time, each page first looked up among
# the frames the transaction wrote before, in one hash table per 4,096 frames: a cost that
# grows with the square of the write (`reband` with 4 KiB pages: 0.05 s of CPU at 400k
# documents, 6.0 s at 4M; benchmarks/RESULTS.md, 2026-11-28 18:48 UTC). Pages four times
# larger: a quarter of the frames, so a quarter of the look-ups, each through a quarter of
# the hash tables.
SQLITE_PAGE_SIZE = 16_384
# SQLite's page cache (KiB) of the connection that stores verified pairs, while it does
# (SQLite's default: 2,000). The pairs land all over the pairs' two indexes: `pairs --full`
# at 4M documents took 163.7 s with the default, 141.5 s with this cache for every writer
# (one paired run: benchmarks/RESULTS.md, 2026-11-27 19:17 UTC). For every writer, `dedup`
# at 4M peaked at 322 MiB; for pairs alone, at 263 MiB (same file, 18:50-20:35).
SQLITE_PAIRS_CACHE_KIB = 32 * 1024
WRITER_LOCK = 0x51D1DE  # the PostgreSQL advisory lock key that serializes simindex writers
# Query parameters that carry a secret in a PostgreSQL URL (libpq's names).
_SECRET_PARAMETERS = {"password", "sslpassword"}
# The analysts' views the migrations create (docs/sql.md).
_VIEWS = {"similar_pairs", "document_clusters", "cluster_sizes", "bucket_sizes"}
# A SQLite WAL file at least this large after a write transaction: the pooled connections
# are closed (see Store._release_wal).
WAL_RELEASE_BYTES = 64 * 2**20
# Dropping a retired banding's partition makes new queries queue behind it: each attempt
# gives up after this long, and so many attempts are made, this far apart.
DROP_LOCK_TIMEOUT_MS = 200
DROP_ATTEMPTS = 5
DROP_PAUSE = 0.5
# A schema name simindex accepts: lower-case letters, digits and _, as PostgreSQL folds
# unquoted names, so the name in SQL and in --schema are the same.
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
log = logging.getLogger("simindex")
_REPEATED_KEY = re.compile(r"Key \(external_id\)=\((.*)\) already exists\.", re.DOTALL)


def database_url(url: str | os.PathLike[str] | None) -> sa.URL:
    """The SQLAlchemy URL for what the user typed: nothing (./simindex.db), a file path
    (SQLite; taken as it is, so ``a?b.db`` and ``e%41f.db`` are file names), sqlite:///path,
    or a postgresql:// URL (driven by psycopg 3). Raises DatabaseError for anything else."""
    text = os.fspath(url) if url else DEFAULT_PATH
    if "://" not in text:
        return _sqlite_url(sa.URL.create("sqlite", database=text))
    scheme = text.split("://", 1)[0].split("+")[0]  # any driver named: ours is used
    if _user_part(text).count("@") > 1:
        raise DatabaseError(
            f"can't use database URL {display_url(text)}: its user or password holds an '@'; "
            "write it as %40"
        )
    try:
        parsed = make_url(text)
    except (sa.exc.ArgumentError, ValueError) as exc:
        problem = "its port is not a number" if isinstance(exc, ValueError) else str(exc)
        raise DatabaseError(
            f"can't use database URL {display_url(text)}: {problem} "
            "(expected postgresql://user@host:port/database, or a SQLite file path)"
        ) from None
    if scheme in ("postgres", "postgresql"):
        return parsed.set(drivername="postgresql+psycopg")
    if scheme == "sqlite":
        return _sqlite_url(parsed)
    raise DatabaseError(
        f"simindex supports SQLite (a file path or sqlite:///path) and PostgreSQL "
        f"(postgresql://...), not {scheme}: {display_url(text)}"
    )


def _sqlite_url(url: sa.URL) -> sa.URL:
    if url.database in (None, "", ":memory:") or url.query.get("mode") == "memory":
        raise DatabaseError(
            "an in-memory SQLite database keeps nothing after the command; give a file path"
        )
    return url


def _user_part(url: str) -> str:
    """What precedes the host in a URL's authority, with its '@' (empty if none): up to the
    last '@' before the query, so an unescaped '@' in a password stays in it."""
    authority = url.split("://", 1)[1].partition("?")[0]
    user, at, _ = authority.rpartition("@")
    return user + at


def display_url(url: str | sa.URL) -> str:
    """The URL for messages, logs and reports: a password in the user part or in a query
    parameter is shown as ***; a file path as it is."""
    if isinstance(url, sa.URL):
        if url.get_backend_name() == "sqlite":  # the file name as given, unescaped
            return f"sqlite:///{url.database}"
        url = url.render_as_string(hide_password=False)
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    user = _user_part(url)
    if user:
        name, colon, _ = user[:-1].partition(":")
        rest = f"{name}{':***' if colon else ''}@{rest[len(user) :]}"
    base, question, query = rest.partition("?")
    if question:
        masked = []
        for parameter in query.split("&"):
            key, equals, _ = parameter.partition("=")
            secret = equals and key.lower() in _SECRET_PARAMETERS
            masked.append(f"{key}=***" if secret else parameter)
        base += "?" + "&".join(masked)
    return f"{scheme}://{base}"


def create_engine(
    url: sa.URL | str, schema: str | None = None, *, must_exist: bool = False
) -> Engine:
    """An engine for a URL from database_url (``schema``: see _configure_connections).
    ``must_exist``: a missing SQLite file is an error naming the path (a command that only
    reads never creates a database)."""
    url = make_url(url)
    if url.get_backend_name() == "sqlite":
        url = _sqlite_access(url, must_exist)
    try:
        engine = sa.create_engine(url)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
        raise DatabaseError(f"can't use database URL {display_url(url)}: {exc}") from None
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
    elif engine.dialect.name != "postgresql":
        raise DatabaseError(
            f"simindex supports SQLite and PostgreSQL, not {engine.dialect.name} ({display_url(url)})"
        )
    _configure_connections(engine, schema)
    return engine


def _sqlite_access(url: sa.URL, must_exist: bool) -> sa.URL:
    """A SQLite file we can't write (a read-only mount, a read-only file or folder) is
    opened read-only and immutable: reading a WAL database otherwise needs to create its
    -shm file. Queries work; a write fails with "attempt to write a readonly database"."""
    path = url.database or ""
    if url.query.get("uri"):  # a file: URI the user wrote, with its own options
        return url
    if not os.path.exists(path):
        if must_exist:
            raise DatabaseError(
                f"there is no database file {path}: check the path, or create an index "
                f"there with `simindex init --db {path}`"
            )
        return url
    folder = os.path.dirname(os.path.abspath(path))
    if os.access(path, os.W_OK) and os.access(folder, os.W_OK):
        return url
    return sa.URL.create(
        "sqlite",
        database="file:" + urllib.parse.quote(os.path.abspath(path)),
        query={"mode": "ro", "immutable": "1", "uri": "true"},
    )


def _configure_connections(engine: Engine, schema: str | None) -> None:
    """On PostgreSQL, name each connection for pg_stat_activity and, with ``schema``, keep
    the index in that schema: it is the connection's whole search_path, so every unqualified
    table, view, sequence and partition simindex makes or reads is that schema's (several
    indexes share a database, and the warehouse's own tables are never seen). The schema is
    created with the index (migrations/env.py reads it from the connection's info)."""
    if schema is not None and engine.dialect.name != "postgresql":
        raise ParameterError(
            f"--schema {schema} is for PostgreSQL; on SQLite an index is a file of its own: "
            "give another file with --db instead"
        )
    if schema is not None and not SCHEMA_NAME.fullmatch(schema):
        raise ParameterError(
            f"schema name {schema!r} must be lower-case letters, digits and _ (at most 63, "
            "not starting with a digit), e.g. --schema news"
        )
    if engine.dialect.name != "postgresql":
        return

    @event.listens_for(engine, "do_connect")
    def _name(_dialect, _record, _cargs, cparams):
        if "application_name" not in cparams and "PGAPPNAME" not in os.environ:
            cparams["application_name"] = application_name.get()

    if schema is None:
        return

    @event.listens_for(engine, "connect", insert=True)  # before SQLAlchemy's first queries
    def _search_path(dbapi_connection, record):
        record.info["simindex_schema"] = schema
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True  # a SET in a transaction ends with it
        dbapi_connection.execute(f'SET search_path TO "{schema}"')
        dbapi_connection.autocommit = autocommit


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        # simindex emits BEGIN itself (below), so the driver must not.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")  # before the file is made
        cursor.close()
        # Readers never wait for a writer; but while a first load holds the file without
        # the WAL (Store._without_wal) the mode can't change, and its end changes it back.
        _journal_mode(dbapi_connection, "WAL")

    @event.listens_for(engine, "begin")
    def _begin(connection):
        # A writer takes the write lock up front, so what it reads (e.g. max(id)) stays true;
        # a load without the WAL (Store._without_wal) takes the database whole.
        options = connection.get_execution_options()
        lock = options.get("simindex_lock", "IMMEDIATE") if options.get("simindex_write") else ""
        connection.exec_driver_sql(f"BEGIN {lock}")


def _journal_mode(dbapi_connection: sqlite3.Connection, mode: str) -> str | None:
    """Switch a SQLite connection's journal mode without waiting: the mode it is in after,
    None if another connection holds a lock that the switch needs."""
    timeout = dbapi_connection.execute("PRAGMA busy_timeout").fetchone()[0]
    dbapi_connection.execute("PRAGMA busy_timeout = 0")
    try:
        return dbapi_connection.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
        return None
    finally:
        dbapi_connection.execute(f"PRAGMA busy_timeout = {timeout}")


class Store:
    """The SQL of one index database. Methods take the Connection of an open transaction."""

    def __init__(
        self,
        engine: Engine,
        schema: str | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    ):
        if not 0 <= lock_timeout < 10**6:
            raise ParameterError(
                f"lock timeout must be a number of seconds in [0, 1e6), got {lock_timeout}"
            )
        self.engine = engine
        self.dialect = engine.dialect.name
        self.schema = schema
        self.lock_timeout = lock_timeout
        self._band_keys_exist = False  # learnt by read(); an index's tables are never dropped

    @property
    def sqlite_file(self) -> str | None:
        """The SQLite index's file, for a second process to open by its path (None on
        PostgreSQL, for a database in memory, or one named by a file: URI with options of its
        own, which the second process would not share)."""
        url = self.engine.url
        if self.dialect != "sqlite" or url.database in (None, "", ":memory:"):
            return None
        return None if url.query.get("uri") else url.database

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction: one snapshot for the whole call. On PostgreSQL it is
        REPEATABLE READ (the active banding and its band keys come from the same moment)
        and holds ACCESS SHARE on band_keys, so the partition of a banding a re-band just
        retired is not dropped under it (a dropped table is gone for every snapshot).
        SQLite's read transactions are snapshots already (WAL)."""
        with self.engine.connect() as connection:
            if self.dialect == "sqlite":
                with connection.begin():
                    yield connection
                return
            with connection.begin():
                # Before the first query, which takes the snapshot; in one round trip once
                # band_keys is known to exist (a point query's latency is mostly round trips).
                snapshot = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
                lock = "LOCK TABLE band_keys IN ACCESS SHARE MODE"
                if self._band_keys_exist:
                    connection.exec_driver_sql(f"{snapshot}; {lock}")
                else:
                    connection.exec_driver_sql(snapshot)
                    try:
                        with connection.begin_nested():
                            connection.exec_driver_sql(lock)
                        self._band_keys_exist = True
                    except sa.exc.ProgrammingError as exc:
                        import psycopg  # loaded already: PostgreSQL's driver

                        if not isinstance(exc.orig, psycopg.errors.UndefinedTable):
                            raise
                        # no index here yet: nothing to protect
                yield connection

    def _release_wal(self) -> None:
        """After a large write to SQLite: its WAL file holds every page the transaction wrote
        (gigabytes for millions of documents), and each pooled connection keeps the WAL's
        index mapped (17 MB at 4M documents, counted in the process's memory). Close the
        pooled connections: the mappings go, and the last connection to the database (unless
        another process has it open) copies the WAL into it and removes the file. Never waits
        for another process's readers, as a checkpoint that truncates would."""
        if self.dialect != "sqlite":
            return
        wal = f"{self.engine.url.database}-wal"
        if os.path.exists(wal) and os.path.getsize(wal) >= WAL_RELEASE_BYTES:
            self.engine.dispose()

    @contextmanager
    def statement(self) -> Iterator[Connection]:
        """A connection whose statements need no transaction around them: each sees one
        snapshot and holds its locks (band_keys' among them) until it ends. On PostgreSQL it
        is in autocommit, which saves the BEGIN and COMMIT round trips; SQLite's is a read
        transaction as in read()."""
        if self.dialect == "sqlite":
            with self.read() as connection:
                yield connection
            return
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            yield connection

    @contextmanager
    def write(self, load: bool = False) -> Iterator[Connection]:
        """A transaction that may write. Writers take turns, readers never wait: on SQLite
        through BEGIN IMMEDIATE, on PostgreSQL through a transaction-level advisory lock
        (so two ingests of overlapping ids can't both pass the duplicate check, and pairs
        found while documents arrive stay consistent). A writer that has to wait says for
        whom (logged), and gives up after ``lock_timeout`` seconds with a DatabaseError.
        ``load``: the transaction adds documents, which into a SQLite index that holds none
        yet go in without the WAL (see _without_wal). Afterwards, PostgreSQL partitions of
        retired bandings are dropped if they can be at once (see drop_retired_bandings),
        and a large SQLite WAL is let go (see _release_wal)."""
        with self.engine.connect() as connection:
            connection = connection.execution_options(simindex_write=True)
            with self._without_wal(connection, load), self._begin_write(connection):
                if self.dialect == "postgresql":
                    self._take_writer_lock(connection)
                yield connection
        if self.dialect == "postgresql":  # SQLite's: see drop_retired_bandings
            self.drop_retired_bandings(attempts=1)
        self._release_wal()

    @contextmanager
    def _without_wal(self, connection: Connection, load: bool) -> Iterator[None]:
        """A load into a SQLite index with no documents yet runs with a rollback journal,
        holding the database whole (BEGIN EXCLUSIVE), then WAL mode comes back. In the WAL
        every page the load writes is written twice (into the WAL, then by the checkpoint
        into the file), and each page the cache lacks is looked up in a WAL index that
        grows with the transaction; a rollback journal keeps only the pages that existed
        before the load, which an empty index hardly has: 4M documents went in in 327 s
        instead of 468 s (benchmarks/RESULTS.md, 2026-11-27 04:35 UTC). Readers of an empty
        index lose nothing by waiting for it. When another connection has the file open,
        the mode can't change and the load runs in the WAL as any write does."""
        if self.dialect != "sqlite" or not load or self._holds_documents(connection):
            yield
            return
        self.engine.dispose()  # the pool's idle connections, which would keep the WAL open
        dbapi = connection.connection.dbapi_connection
        if _journal_mode(dbapi, "DELETE") != "delete":
            yield
            return
        connection.execution_options(simindex_lock="EXCLUSIVE")  # this connection's last
        try:
            yield
        finally:
            _journal_mode(dbapi, "WAL")  # if a reader is waiting, its connection does it

    @staticmethod
    def _holds_documents(connection: Connection) -> bool:
        """Whether a SQLite index has documents, asked outside a transaction (the driver
        begins none: _configure_sqlite); False before its tables exist."""
        dbapi = connection.connection.dbapi_connection
        try:
            return dbapi.execute("SELECT 1 FROM documents LIMIT 1").fetchone() is not None
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return False

    def _begin_write(self, connection: Connection) -> sa.RootTransaction:
        if self.dialect == "postgresql":
            return connection.begin()
        self._wait_for_sqlite_writer(connection)
        try:
            return connection.begin()
        except sa.exc.OperationalError as exc:
            if "database is locked" in str(exc.orig):
                raise self._lock_timeout_error("another writer") from None
            raise

    def commit_part(self, connection: Connection) -> None:
        """Commit a SQLite write transaction's work so far and go on in a new one, begun as
        any write is (waiting for another writer up to lock_timeout): a write committed in
        parts keeps one part at a time in the WAL (see BandKeyWriter). Other writers may run
        between the parts."""
        connection.connection.dbapi_connection.execute("COMMIT")
        self._begin_part(connection)

    def _begin_part(self, connection: Connection) -> None:
        """Begin a write's next part, waiting for another writer up to PART_LOCK_TIMEOUT (or
        lock_timeout, if longer): giving up would throw away the parts committed before."""
        timeout = max(self.lock_timeout, PART_LOCK_TIMEOUT)
        self._wait_for_sqlite_writer(connection, timeout)
        dbapi = connection.connection.dbapi_connection
        try:
            dbapi.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "database is locked" in str(exc):
                raise self._lock_timeout_error("another writer", timeout) from None
            raise
        dbapi.execute(f"PRAGMA busy_timeout = {int(self.lock_timeout * 1000)}")

    def _writer_lock_key(self) -> str:
        """The advisory lock's two keys, as SQL: one lock per index (schema), so the
        indexes of one database don't wait for each other."""
        return f"{WRITER_LOCK}, {zlib.crc32((self.schema or '').encode()) & 0x7FFFFFFF}"

    def _try_writer_lock(self, connection: Connection) -> bool:
        """Take the writer lock for the transaction if it is free."""
        lock = self._writer_lock_key()
        return connection.exec_driver_sql(f"SELECT pg_try_advisory_xact_lock({lock})").scalar_one()

    def _take_writer_lock(self, connection: Connection) -> None:
        if self._try_writer_lock(connection):
            return
        lock = self._writer_lock_key()
        holder = connection.exec_driver_sql(
            "SELECT a.pid, a.application_name, now() - a.xact_start FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            f"AND l.granted AND l.objsubid = 2 AND (l.classid, l.objid) = ({lock})"
        ).first()
        who = "another writer"
        if holder is not None:
            pid, name, running = holder
            who = f"{name or 'a client'} (pid {pid}, in its transaction for {_seconds(running)})"
        if not self.lock_timeout:
            raise self._lock_timeout_error(who)
        log.warning(
            "Waiting up to %s for the index's writer lock, held by %s",
            _seconds(self.lock_timeout),
            who,
        )
        milliseconds = max(1, round(self.lock_timeout * 1000))  # 0 would mean no limit
        connection.exec_driver_sql(f"SET LOCAL lock_timeout = {milliseconds}")
        try:
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({lock})")
        except sa.exc.OperationalError as exc:
            import psycopg

            if isinstance(exc.orig, psycopg.errors.LockNotAvailable):
                raise self._lock_timeout_error(who) from None
            raise
        connection.exec_driver_sql("RESET lock_timeout")

    def _wait_for_sqlite_writer(self, connection: Connection, timeout: float | None = None) -> None:
        """Say so if another writer holds the database, and wait for it up to ``timeout``
        (lock_timeout if None): SQLite's busy_timeout bounds BEGIN IMMEDIATE, whose failure
        _lock_timeout_error explains."""
        timeout = self.lock_timeout if timeout is None else timeout
        dbapi = connection.connection.dbapi_connection
        dbapi.execute("PRAGMA busy_timeout = 0")
        try:
            dbapi.execute("BEGIN IMMEDIATE")
            dbapi.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if "database is locked" not in str(exc):
                raise  # e.g. a read-only file: _database_errors says so
            if not timeout:
                raise self._lock_timeout_error("another writer", timeout) from None
            log.warning(
                "Waiting up to %s for another writer of the database to finish",
                _seconds(timeout),
            )
        dbapi.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")

    def _lock_timeout_error(self, who: str, timeout: float | None = None) -> DatabaseError:
        timeout = self.lock_timeout if timeout is None else timeout
        return DatabaseError(
            f"gave up after waiting {_seconds(timeout)} for {who}, which is writing "
            f"to the index in {self.describe()}; try again when it is done, or wait longer "
            "with --lock-timeout SECONDS (SIMINDEX_LOCK_TIMEOUT)"
        )

    def describe(self) -> str:
        """The database (password hidden) and the schema, for messages."""
        url = display_url(self.engine.url)
        return url if self.schema is None else f"{url} (schema {self.schema})"

    # -- settings --------------------------------------------------------------------------

    def has_tables(self, connection: Connection) -> bool:
        return sa.inspect(connection).has_table("index_settings")

    def colliding_tables(self, connection: Connection) -> list[str]:
        """Tables and views named like simindex's own in a database without a simindex
        schema (an application's ``documents`` table, another tool's ``alembic_version``):
        creating an index there would collide with them."""
        inspector = sa.inspect(connection)
        present = {*inspector.get_table_names(), *inspector.get_view_names()}
        if "index_settings" in present:
            return []
        return sorted(present & {*metadata.tables, *_VIEWS, "alembic_version"})

    def read_settings(self, connection: Connection) -> dict[str, Any] | None:
        row = connection.execute(select(index_settings)).mappings().first()
        return dict(row) if row else None

    def write_settings(self, connection: Connection, values: dict[str, Any]) -> None:
        connection.execute(index_settings.insert().values(id=1, **values))

    # -- documents -------------------------------------------------------------------------

    def document_ids(self, connection: Connection, external_ids: Sequence[str]) -> dict[str, int]:
        """external id -> document id, for those of ``external_ids`` that are indexed."""
        return self._by_external_id(connection, external_ids, "id")

    def content_hashes(self, connection: Connection, external_ids: Sequence[str]) -> dict[str, int]:
        """external id -> content hash, for those of ``external_ids`` that are indexed."""
        return self._by_external_id(connection, external_ids, "content_hash")

    def _by_external_id(
        self, connection: Connection, external_ids: Sequence[str], column: str
    ) -> dict[str, int]:
        among, params = self._among(list(external_ids), "TEXT")
        found = connection.execute(
            sa.text(f"SELECT external_id, {column} FROM documents WHERE external_id {among}"),
            params,
        )
        return {external_id: int(value) for external_id, value in found}

    def allocate_document_ids(self, connection: Connection, count: int) -> np.ndarray:
        """``count`` new document ids (int64). Safe against concurrent writers: PostgreSQL
        draws them from the sequence; on SQLite the write transaction holds the lock."""
        if self.dialect == "postgresql":
            first = self.reserve_document_ids(connection, count)
            return np.arange(first, first + count, dtype=np.int64)
        # AUTOINCREMENT: never below an id handed out before, even if it was deleted.
        used = connection.exec_driver_sql(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'documents'), 0),"
            " coalesce((SELECT max(id) FROM documents), 0))"
        ).scalar_one()
        start = int(used)
        return np.arange(start + 1, start + 1 + count, dtype=np.int64)

    def reserve_document_ids(self, connection: Connection, count: int) -> int:
        """The first of ``count`` consecutive new document ids drawn from the PostgreSQL
        sequence (the caller holds the writer lock), without materializing them."""
        # One step of the sequence for the whole range: simindex writers take turns (the
        # advisory lock), so no other nextval() falls inside it.
        last = connection.exec_driver_sql(
            "SELECT setval(pg_get_serial_sequence('documents', 'id'), "
            f"nextval(pg_get_serial_sequence('documents', 'id')) + {int(count) - 1})"
        ).scalar_one()
        return int(last) - int(count) + 1

    def insert_documents(
        self,
        connection: Connection,
        ids: np.ndarray,
        external_ids: Sequence[str],
        content_hashes: Sequence[int],
        shingle_counts: np.ndarray,
        texts: Sequence[str | None],
        metadata: Sequence[dict | None],
        ingested_at: datetime,
        table: str = "documents",
        frozen: bool = False,
    ) -> None:
        """``ingested_at``: an aware datetime, stored as UTC (SQLite: with microseconds, in
        SQLAlchemy's text format, so that comparisons with bound datetimes are right).
        ``table``: documents, or a staging table of its columns (see StagedLoad).

        ``frozen``: ``table`` was created in this transaction, and PostgreSQL writes the rows
        as VACUUM FREEZE leaves them (COPY ... FREEZE). Otherwise the first reader of each
        row sets its commit hint bits, dirtying the page, which the server writes out again
        when it evicts it (tests/db/test_postgres.py counts the pages). The first `pairs
        --full` after loading 4M documents took 94.6 s without it, 92.4 s with it (one paired
        run: benchmarks/RESULTS.md, 2026-11-26 02:49 UTC). SQLite has no such bits."""
        columns = ["id", "external_id", "content_hash", "shingle_count", "text", "metadata",
                   "ingested_at"]  # fmt: skip
        metadata_json = [None if m is None else json.dumps(m) for m in metadata]
        if self.dialect == "postgresql":
            # Laid out a part at a time, each of about COPY_TEXT_CHARS of text.
            sizes = np.fromiter((len(t or "") for t in texts), np.int64, len(texts))
            rows = (
                _document_tuples(
                    ids[lo:hi], external_ids[lo:hi], content_hashes[lo:hi],
                    shingle_counts[lo:hi], texts[lo:hi], metadata_json[lo:hi], ingested_at,
                )
                for lo, hi in spans(np.cumsum(sizes), COPY_TEXT_CHARS)
            )  # fmt: skip
            _copy_binary(connection, f"{table} ({', '.join(columns)})", rows, _freeze(frozen))
            return
        stamp = ingested_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        rows = list(
            zip(
                ids.tolist(),
                external_ids,
                content_hashes,
                shingle_counts.tolist(),
                texts,
                metadata_json,
                [stamp] * len(ids),
                strict=True,
            )
        )
        self._bulk_insert(connection, table, columns, rows)

    def defer_content_hash_index(self, connection: Connection, created_here: bool) -> bool:
        """Drop the index on documents.content_hash until :meth:`build_content_hash_index` at
        the end of the same transaction (a failed load rolls the drop back too), and say
        whether it did. Content hashes are random, so each insert into the live index lands
        on a leaf page the cache doesn't hold: a first ingest of 4M documents into SQLite took
        314 s that way and 219 s this way (benchmarks/RESULTS.md, 2026-11-25 03:29-03:45 UTC).
        SQLite's readers keep reading their snapshot, index included; on PostgreSQL the drop
        would lock readers out of documents until the load commits, so it is done only when
        the table was ``created_here``, in this transaction, where no reader sees it."""
        if self.dialect == "postgresql" and not created_here:
            return False
        connection.execute(sa.schema.DropIndex(_CONTENT_HASH_INDEX))
        return True

    def build_content_hash_index(self, connection: Connection) -> None:
        """The index :meth:`defer_content_hash_index` dropped, built in one sort."""
        connection.execute(sa.schema.CreateIndex(_CONTENT_HASH_INDEX))

    @staticmethod
    def repeated_external_id(error: Exception) -> str | None:
        """The external id that a failed insert of documents repeated, from PostgreSQL's
        error detail ("Key (external_id)=(x) already exists."); None for any other error,
        or a detail in another language (lc_messages)."""
        diag = getattr(error, "diag", None)  # a psycopg error's
        if diag is None or diag.sqlstate != "23505":  # unique_violation
            return None
        if diag.constraint_name != "uq_documents_external_id":
            return None
        found = _REPEATED_KEY.fullmatch(diag.message_detail or "")
        return found and found.group(1)

    def insert_signatures(
        self,
        connection: Connection,
        ids: np.ndarray,
        sigs: np.ndarray,
        table: str = "signatures",
        frozen: bool = False,
    ) -> None:
        """Signatures (uint32, (len(ids), num_perm)), each stored as minhash.pack does, into
        ``table`` (signatures, or a staging table of its columns); ``frozen`` as for
        :meth:`insert_documents`."""
        packed = np.ascontiguousarray(sigs, dtype=SIGNATURE_DTYPE)
        if self.dialect == "postgresql":
            tuples = np.empty(len(ids), dtype=_signature_tuple(packed.shape[1]))
            tuples["fields"], tuples["id_len"], tuples["sig_len"] = 2, 8, packed.shape[1] * 4
            tuples["document_id"] = ids
            tuples["minhashes"] = packed
            _copy_binary(connection, f"{table} (document_id, minhashes)", [tuples], _freeze(frozen))
            return
        rows = zip(ids.tolist(), (row.tobytes() for row in packed), strict=True)
        self._bulk_insert(connection, table, ["document_id", "minhashes"], rows)

    def _bulk_insert(
        self, connection: Connection, table: str, columns: list[str], rows: Iterable[Sequence]
    ) -> None:
        """PostgreSQL: COPY; SQLite: INSERTs of _SQLITE_ROWS rows each (see _sqlite_inserts).
        ``table`` and ``columns`` are our constants."""
        if self.dialect == "postgresql":
            cursor = connection.connection.dbapi_connection.cursor()
            with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        cursor = connection.connection.dbapi_connection.cursor()
        _sqlite_inserts(
            cursor,
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ",
            f"({', '.join('?' for _ in columns)})",
            list(itertools.chain.from_iterable(rows)),
            _SQLITE_ROWS,
        )
        cursor.close()

    def document_count(self, connection: Connection) -> int:
        return connection.scalar(select(func.count()).select_from(documents))

    def sample_document_ids(self, connection: Connection, size: int, seed: int) -> np.ndarray:
        """A uniform random sample of ``size`` document ids (all of them when there are no
        more), sorted. Drawn by numpy as positions among the sorted ids, so a seed names the
        same sample on both backends (SQL's random() can't be seeded on SQLite); the ids
        stream past, only the sample's are kept."""
        count = self.document_count(connection)
        wanted = np.arange(count)
        if count > size:
            wanted = np.sort(np.random.default_rng(seed).choice(count, size, replace=False))
        streamed = {"stream_results": True, "yield_per": 100_000}
        result = connection.execute(
            select(documents.c.id).order_by(documents.c.id), execution_options=streamed
        )
        chosen, seen = [np.empty(0, np.int64)], 0
        for rows in result.partitions():
            ids = _int_rows(rows, 1).reshape(-1)
            lo, hi = np.searchsorted(wanted, [seen, seen + ids.size])
            chosen.append(ids[wanted[lo:hi] - seen])
            seen += ids.size
        return np.concatenate(chosen)

    def signatures_of(self, connection: Connection, ids: np.ndarray, num_perm: int) -> np.ndarray:
        """The stored signatures of document ids, in their order (uint32, (n, num_perm)); a
        DatabaseError names a document that has none, or a signature of another length."""
        if self.dialect == "postgresql":
            listed = ",".join(map(str, ids.tolist()))  # integers only: COPY takes no parameters
            found, matrix = self._copied_signatures(
                connection, f"document_id = ANY('{{{listed}}}'::bigint[])", num_perm
            )
        else:
            found, matrix = [np.empty(0, np.int64)], [np.empty((0, num_perm), np.uint32)]
            for chunk in _chunks(ids.tolist(), MAX_SELECTED):
                among, params = self._among(chunk, "BIGINT")
                some = self._selected_signatures(
                    connection, f"document_id {among}", params, num_perm
                )
                found.append(some[0])
                matrix.append(some[1])
            found, matrix = np.concatenate(found), np.concatenate(matrix)
        at = np.zeros(ids.shape[0], np.int64)  # the row of each id, where found
        if found.size:
            order = np.argsort(found)
            at = order[np.searchsorted(found, ids, sorter=order).clip(max=found.size - 1)]
        missing = ids[found[at] != ids] if found.size else ids
        if missing.size:
            raise DatabaseError(
                f"{missing.size} of {ids.size} documents have no stored signature (the first: "
                f"id {missing[0]}): run `simindex check`"
            )
        return matrix[at].astype(np.uint32, copy=False)

    def signature_chunks(
        self, connection: Connection, num_perm: int, rows: int, after: int = 0
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The stored signatures of the documents with ids above ``after``, in id order, as
        (ids, uint32 (n, num_perm)) chunks of ``rows`` documents, by keyset paging: each
        chunk holds every signature between the previous chunk's last id and its own."""
        last = after
        while True:
            if self.dialect == "postgresql":
                where = f"document_id > {int(last)} ORDER BY document_id LIMIT {int(rows)}"
                ids, matrix = self._copied_signatures(connection, where, num_perm)
            else:
                where = "document_id > :last ORDER BY document_id LIMIT :rows"
                params = {"last": last, "rows": rows}
                ids, matrix = self._selected_signatures(connection, where, params, num_perm)
            if not ids.size:
                return
            yield ids, matrix.astype(np.uint32, copy=False)
            last = int(ids[-1])

    def _selected_signatures(
        self, connection: Connection, where: str, params: dict, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """SQLite's (document ids, signatures as (n, num_perm) uint32) of the rows ``where``
        selects (our SQL, with ``params``), sorted by id. The rows come back as one row of
        aggregates (ids as text, the signatures concatenated as one blob), as PostgreSQL's
        COPY gives them: a row at a time, each took and gave back the GIL, which the threads
        that verify and store pairs beside these reads hold most of the time (`pairs --full`
        at 4M documents 119.1 s before, 110.6 s after, one paired run: benchmarks/RESULTS.md,
        2026-11-27 17:43 UTC)."""
        statement = (
            "SELECT group_concat(document_id), min(length(minhashes)), max(length(minhashes)), "
            "CAST(group_concat(minhashes, '') AS BLOB) "
            f"FROM (SELECT document_id, minhashes FROM signatures WHERE {where}) AS s"
        )
        ids, shortest, longest, blob = connection.execute(sa.text(statement), params).one()
        if ids is None:
            return np.empty(0, np.int64), np.empty((0, num_perm), np.uint32)
        if shortest != 4 * num_perm or longest != 4 * num_perm:
            raise DatabaseError(_OTHER_LENGTH)
        found = _listed_integers(ids)
        matrix = np.frombuffer(blob, dtype=SIGNATURE_DTYPE).reshape(-1, num_perm)
        if (np.diff(found) < 0).any():  # an aggregate takes its subquery's order by rule only
            order = np.argsort(found)
            return found[order], matrix[order].astype(np.uint32)
        return found, matrix.astype(np.uint32)

    def _copied_signatures(
        self, connection: Connection, where: str, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """PostgreSQL's (document ids, signatures as (n, num_perm) little-endian uint32) of
        the rows ``where`` (our SQL, no parameters: COPY takes none) selects, in its order, by
        COPY ... TO STDOUT (FORMAT BINARY): numpy reads the rows as a matrix. The rows are
        appended to one buffer as they come (joined at the end, they were held twice)."""
        statement = (
            f"COPY (SELECT document_id, minhashes FROM signatures WHERE {where}) "
            "TO STDOUT (FORMAT BINARY)"
        )
        cursor = connection.connection.dbapi_connection.cursor()
        data = bytearray()
        try:
            with cursor.copy(statement) as copy:
                for message in copy:
                    data += message
        finally:
            cursor.close()
        body = memoryview(data)[len(_PG_BINARY_HEADER) : -len(_PG_BINARY_TRAILER)]
        row = _signature_tuple(num_perm)
        if len(body) % row.itemsize:
            raise DatabaseError(_OTHER_LENGTH)
        rows = np.frombuffer(body, dtype=row)
        if (rows["fields"] != 2).any() or (rows["sig_len"] != 4 * num_perm).any():
            raise DatabaseError(_OTHER_LENGTH)
        return rows["document_id"].astype(np.int64), rows["minhashes"]

    def utf8_texts(self, connection: Connection, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stored texts of the sorted document ids, in their order, as UTF-8: (data, uint8;
        offsets, int64, n + 1), a text not kept empty. The database concatenates them into
        one row (ids, lengths and texts; see _selected_signatures): no Python object is made
        per text. Raises DatabaseError if a document is not stored."""
        among, params = self._among(ids.tolist(), "BIGINT")
        if self.dialect == "postgresql":
            text = "convert_to(coalesce(text, ''), 'UTF8')"
            statement = (
                "SELECT string_agg(int8send(id), ''), string_agg(int4send(octet_length(t)), ''), "
                f"string_agg(t, '') FROM (SELECT id, {text} AS t FROM documents WHERE id {among} "
                "ORDER BY id) AS s"
            )
            found, lengths, data = connection.execute(sa.text(statement), params).one()
            found = np.frombuffer(found or b"", ">i8").astype(np.int64)
            lengths = np.frombuffer(lengths or b"", ">i4").astype(np.int64)
            data = np.frombuffer(data or b"", np.uint8)
        else:
            statement = (
                "SELECT group_concat(id), group_concat(length(t)), "
                "CAST(group_concat(t, '') AS BLOB) FROM (SELECT id, "
                f"CAST(coalesce(text, '') AS BLOB) AS t FROM documents WHERE id {among} "
                "ORDER BY id) AS s"
            )
            found, lengths, data = connection.execute(sa.text(statement), params).one()
            found, lengths = _listed_integers(found), _listed_integers(lengths)
            data = np.frombuffer(data or b"", np.uint8)
        if found.shape == ids.shape and (found == ids).all():
            offsets = np.zeros(ids.size + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            return data, offsets
        # An aggregate takes a sorted subquery's rows in order as a rule, not by promise.
        order = np.argsort(found, kind="stable")
        if found.shape != ids.shape or (found[order] != ids).any():
            missing = ids.size - int(np.isin(ids, found).sum())
            raise DatabaseError(
                f"{missing} of {ids.size} documents are not stored: run `simindex check`"
            )
        return _take_texts(data, lengths, order)

    def external_ids_of(self, connection: Connection, ids: np.ndarray) -> list[str]:
        """The external ids of document ids, in the order of ``ids``."""
        among, params = self._among(ids.tolist(), "BIGINT")
        rows = connection.execute(
            sa.text(f"SELECT id, external_id FROM documents WHERE id {among}"), params
        )
        names = dict(rows.all())
        return [names[i] for i in ids.tolist()]

    def document_records(
        self, connection: Connection, external_ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """external id -> its stored external_id, text (None when not kept), metadata and
        ingested_at, for those of ``external_ids`` that are indexed."""
        query = select(
            documents.c.external_id,
            documents.c.text,
            documents.c.metadata,
            documents.c.ingested_at,
        )
        found: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(list(external_ids), MAX_PARAMS):
            for row in connection.execute(query.where(documents.c.external_id.in_(chunk))):
                found[row.external_id] = dict(row._mapping)
        return found

    def documents_of(
        self, connection: Connection, ids: np.ndarray
    ) -> dict[int, tuple[str, str | None, bytes]]:
        """id -> (external_id, text, signature blob) for the given document ids."""
        among, params = self._among(ids.tolist(), "BIGINT")
        return self._document_rows(connection, f"d.id {among}", params)

    def documents_in_buckets(
        self,
        connection: Connection,
        banding_id: int,
        keys: np.ndarray,
        max_bucket_size: int,
        with_text: int,
    ) -> dict[int, tuple[str | None, str | None, bytes]]:
        """Like documents_of, for the documents sharing a bucket with any row of ``keys``
        (int64, (m, bands)): a point query's candidates, in one round trip. Of each bucket
        only the ``max_bucket_size`` lowest document ids (the earliest documents) are taken,
        each bucket read along the primary key up to the last of them: a hot bucket costs
        that many rows, not its size. Past ``with_text`` documents in all, only the
        signatures are read (external id and text None; SQLite still finds the documents'
        rows, not their texts): most such candidates share a sentence with the query and no
        more, and their documents' rows (text, often in TOAST) are the pages a query reads
        at random, so the caller reads those of the few its estimate keeps. Nothing when
        ``banding_id`` is not the active banding (checked in the same statement, so in the
        same snapshot as the band keys)."""
        band, key, _ = _key_rows(keys)
        source, params = self._rows_source({"band": band, "key": key})
        last = (
            "SELECT k.document_id FROM band_keys k WHERE k.banding_id = :banding_id "
            "AND k.band = wanted.band AND k.key = wanted.key "
            "ORDER BY k.document_id LIMIT 1 OFFSET :offset"
        )
        bounded = (
            f"SELECT wanted.band, wanted.key, coalesce(({last}), {np.iinfo(np.int64).max}) "
            f"AS last_id FROM {source}"
        )
        members = (
            f"SELECT k.document_id FROM ({bounded}) AS bucket CROSS JOIN band_keys k "
            "WHERE k.banding_id = :banding_id AND k.band = bucket.band "
            "AND k.key = bucket.key AND k.document_id <= bucket.last_id"
        )
        active = "SELECT 1 FROM bandings WHERE id = :banding_id AND is_active"
        few = "(SELECT count(DISTINCT document_id) FROM members) <= :with_text"
        # PostgreSQL reads documents only when ``few`` holds as a WHERE of its own (a
        # one-time filter), not as a condition of the join (tested on each joined row).
        documents = (
            f"LEFT JOIN LATERAL (SELECT external_id, text FROM documents WHERE id = "
            f"s.document_id AND {few}) AS d ON true"
            if self.dialect == "postgresql"
            else f"LEFT JOIN documents d ON d.id = s.document_id AND {few}"
        )
        statement = (
            f"WITH members AS MATERIALIZED ({members}) "
            f"SELECT s.document_id, d.external_id, d.text, s.minhashes FROM signatures s "
            f"{documents} "
            f"WHERE s.document_id IN (SELECT document_id FROM members) AND EXISTS ({active})"
        )
        params = {
            **params,
            "banding_id": banding_id,
            "offset": max_bucket_size - 1,
            "with_text": with_text,
        }
        return _by_id(connection.execute(sa.text(statement), params))

    def text_sizes(self, connection: Connection, ids: np.ndarray) -> np.ndarray:
        """Bytes of stored text (0 when not kept) of each of the sorted document ids."""
        among, params = self._among(ids.tolist(), "BIGINT")
        size = (
            "octet_length(text)" if self.dialect == "postgresql" else "length(CAST(text AS BLOB))"
        )
        statement = (  # one row of aggregates, as in _selected_signatures
            f"SELECT {self._listed('id')}, {self._listed(f'coalesce({size}, 0)')} "
            f"FROM documents WHERE id {among}"
        )
        found, lengths = connection.execute(sa.text(statement), params).one()
        sizes = np.zeros(ids.shape[0], dtype=np.int64)
        sizes[np.searchsorted(ids, _listed_integers(found))] = _listed_integers(lengths)
        return sizes

    def _listed(self, expression: str) -> str:
        """SQL aggregating the integers ``expression`` into one comma-separated text (read
        back by _listed_integers)."""
        if self.dialect == "postgresql":
            return f"string_agg(CAST({expression} AS text), ',')"
        return f"group_concat({expression})"

    def storage_problems(self, connection: Connection) -> list[str]:
        """Damage to a SQLite file itself (PRAGMA quick_check), one sentence per finding (at
        most ten); PostgreSQL checks its pages as it reads them."""
        if self.dialect != "sqlite":
            return []
        rows = connection.exec_driver_sql("PRAGMA quick_check(10)").scalars()
        found = [line for row in rows for line in row.splitlines() if not line.startswith("***")]
        if found == ["ok"]:
            return []
        return [f"the database file is damaged: {finding}" for finding in found]

    def _document_rows(
        self, connection: Connection, condition: str, params: dict[str, Any]
    ) -> dict[int, tuple[str, str | None, bytes]]:
        rows = connection.execute(
            sa.text(
                "SELECT d.id, d.external_id, d.text, s.minhashes FROM documents d "
                f"JOIN signatures s ON s.document_id = d.id WHERE {condition}"
            ),
            params,
        )
        return _by_id(rows)

    # -- bandings --------------------------------------------------------------------------

    def create_banding(self, connection: Connection, bands: int, rows: int) -> int:
        # created_at to the microsecond (the column's default has seconds): with the id, it
        # tells a banding from a later one that reused a dropped banding's id.
        values: dict[str, Any] = {
            "bands": bands,
            "rows": rows,
            "state": "building",
            "is_active": False,
            "created_at": datetime.now(UTC),
        }
        if self.dialect == "sqlite":  # SQLite would give the largest id again: not one whose
            # band keys are still there, retired (see drop_banding)
            taken = [select(func.max(bandings.c.id)), select(func.max(band_keys.c.banding_id))]
            values["id"] = 1 + max(connection.scalar(query) or 0 for query in taken)
        result = connection.execute(bandings.insert().values(**values).returning(bandings.c.id))
        return int(result.scalar_one())

    def complete_banding(self, connection: Connection, banding_id: int) -> None:
        connection.execute(
            bandings.update().where(bandings.c.id == banding_id).values(state="complete")
        )

    def activate_banding(self, connection: Connection, banding_id: int) -> None:
        connection.execute(bandings.update().where(bandings.c.is_active).values(is_active=False))
        connection.execute(
            bandings.update().where(bandings.c.id == banding_id).values(is_active=True)
        )

    def drop_banding(self, connection: Connection, banding_id: int) -> None:
        """Remove a banding with its pairs and clusters. Its band keys stay, retired (no
        banding row: nothing uses them), until drop_retired_bandings removes them after this
        transaction: on PostgreSQL a DROP of the partition takes ACCESS EXCLUSIVE on
        band_keys, which would hold up every reader until the commit; on SQLite the WAL
        would hold every page of them until the commit (3,841 MiB for a 42 x 3 banding of
        4M documents: benchmarks/RESULTS.md, 2026-11-29 13:49 UTC)."""
        connection.execute(pairs.delete().where(pairs.c.banding_id == banding_id))
        connection.execute(bandings.delete().where(bandings.c.id == banding_id))

    def retired_bandings(self, connection: Connection) -> list[int]:
        """Ids of the bandings whose band keys (a PostgreSQL partition, SQLite's rows) wait
        to be removed: keys of a banding id that has no banding row."""
        if self.dialect == "sqlite":  # band_keys' banding ids, each found through its key
            kept = set(connection.execute(select(bandings.c.id)).scalars())
            retired, after = [], 0
            next_id = select(func.min(band_keys.c.banding_id))
            while found := connection.scalar(next_id.where(band_keys.c.banding_id > after)):
                after = int(found)
                if after not in kept:
                    retired.append(after)
            return retired
        rows = connection.exec_driver_sql(
            "SELECT substr(c.relname, length('band_keys_') + 1)::int AS banding_id "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass('band_keys') "
            "AND NOT EXISTS (SELECT FROM bandings b WHERE c.relname = 'band_keys_' || b.id) "
            "ORDER BY 1"
        )
        return [int(i) for (i,) in rows]

    def drop_retired_bandings(self, attempts: int | None = None) -> list[int]:
        """Drop the partitions of retired bandings (PostgreSQL), each attempt in a short
        transaction that gives up after DROP_LOCK_TIMEOUT_MS: a reader that holds band_keys
        (an analyst's open transaction) would otherwise make the DROP, and every query
        behind it, wait without limit. Skipped while another writer works (it drops them
        when it ends). Returns the ids still retired. ``attempts``: DROP_ATTEMPTS if None.
        On SQLite, the keys of retired bandings are deleted (see _delete_retired_keys)."""
        retired: list[int] = []
        if self.dialect == "sqlite":
            self._delete_retired_keys()
            return retired
        for attempt in range(DROP_ATTEMPTS if attempts is None else attempts):
            if attempt:
                time.sleep(DROP_PAUSE)
            try:
                with self.engine.connect() as connection, connection.begin():
                    if not self._try_writer_lock(connection):
                        return self.retired_bandings(connection)
                    retired = self.retired_bandings(connection)
                    if not retired:
                        return []
                    connection.exec_driver_sql(f"SET LOCAL lock_timeout = {DROP_LOCK_TIMEOUT_MS}")
                    connection.exec_driver_sql(
                        f"DROP TABLE {', '.join(_partition(i) for i in retired)}"
                    )
                    return []
            except sa.exc.OperationalError as exc:
                import psycopg

                if not isinstance(exc.orig, psycopg.errors.LockNotAvailable):
                    raise
        return retired

    def _delete_retired_keys(self) -> None:
        """SQLite: delete the band keys of retired bandings a band at a time, each band in a
        write transaction of its own (see write), so the WAL holds one band's pages at a time
        (while no reader keeps an older snapshot). Run by the command that retired them, after
        its commit; one stopped midway, or kept waiting past lock_timeout by another writer
        (logged), leaves the rest retired (used by nothing, listed by stats) for
        `drop-banding ID` to delete: the command's own change is committed already."""
        while True:
            try:
                with self.write() as connection:
                    retired = self.retired_bandings(connection)
                    if not retired:
                        return
                    where = band_keys.c.banding_id == retired[0]
                    band = connection.scalar(select(func.min(band_keys.c.band)).where(where))
                    connection.execute(band_keys.delete().where(where, band_keys.c.band == band))
            except DatabaseError as exc:  # the lock wait (write) gave up
                log.warning("The band keys of retired bandings stay, to be deleted later: %s", exc)
                return

    def band_key_writer(
        self, connection: Connection, banding_id: int, *, bulk: bool, parts: bool = False
    ) -> BandKeyWriter:
        """Where the band keys of one banding are written (bulk, parts: see BandKeyWriter)."""
        return BandKeyWriter(self, connection, banding_id, bulk, parts)

    def building_banding(self, connection: Connection, banding_id: int) -> datetime | None:
        """When the banding was created, if it exists and is building (else None): a SQLite
        banding's id is reused once it is dropped and its keys deleted, its creation time is
        not."""
        return connection.scalar(
            select(bandings.c.created_at).where(
                bandings.c.id == banding_id, bandings.c.state == "building"
            )
        )

    def signature_count(self, connection: Connection, through: int) -> int:
        """Stored signatures of the documents with ids up to ``through``."""
        return int(
            connection.scalar(
                select(func.count())
                .select_from(signatures)
                .where(signatures.c.document_id <= through)
            )
        )

    def delete_unindexed_band_keys(self, connection: Connection, banding_id: int) -> None:
        """The band keys of a banding whose document is not indexed (deleted while a
        re-band in parts wrote them): a pass over the banding's keys."""
        connection.execute(
            band_keys.delete().where(
                band_keys.c.banding_id == banding_id,
                band_keys.c.document_id.not_in(select(documents.c.id)),
            )
        )

    def bandings(self, connection: Connection) -> list[dict[str, Any]]:
        rows = connection.execute(select(bandings).order_by(bandings.c.id)).mappings()
        return [dict(r) for r in rows]

    def update_banding(self, connection: Connection, banding_id: int, **values: Any) -> None:
        connection.execute(bandings.update().where(bandings.c.id == banding_id).values(**values))

    def max_document_id(self, connection: Connection) -> int:
        return int(connection.scalar(select(func.coalesce(func.max(documents.c.id), 0))))

    def document_id_range(self, connection: Connection) -> tuple[int, int]:
        """The smallest and largest document ids ((1, 0) in an empty index)."""
        low, high = connection.execute(
            select(func.coalesce(func.min(documents.c.id), 1), func.max(documents.c.id))
        ).one()
        return int(low), int(high if high is not None else low - 1)

    # -- candidates ------------------------------------------------------------------------

    def iter_buckets(
        self,
        connection: Connection,
        banding_id: int,
        touching: np.ndarray | None = None,
        chunk_size: int = 50_000,
        split: int | None = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Buckets (band, key) with two or more documents, grouped by the database; with
        ``touching`` (int64 keys of shape (n, bands), e.g. of the documents added since pairs
        were last found), only those buckets, each found through the primary key. With
        ``split`` (the banding's bands), a whole SQLite banding is grouped by two processes
        at once (see _split_buckets), where a second one can read the file.

        Yields chunks as (members, offsets): bucket i of a chunk holds document ids
        ``members[offsets[i]:offsets[i + 1]]``.
        """
        if touching is None and self.dialect == "postgresql":
            yield from self._copied_buckets(connection, banding_id, chunk_size)
            return
        path = self.sqlite_file
        if touching is None and split and split > 1 and path:
            yield from self._split_buckets(connection, banding_id, split, path, chunk_size)
            return
        if touching is None:
            params: dict[str, Any] = {"banding_id": banding_id}
            statement = (
                "SELECT group_concat(document_id) FROM band_keys WHERE banding_id = :banding_id "
                "GROUP BY band, key HAVING count(*) > 1"
            )
        else:
            # Each bucket's ids as one line of text, which NumPy parses (_parse_id_arrays).
            aggregate = (
                "array_agg(k.document_id)::text"
                if self.dialect == "postgresql"
                else "group_concat(k.document_id)"
            )
            band, key, _ = _key_rows(touching)
            wanted = np.unique(np.column_stack((band, key)), axis=0)  # each bucket once
            joined, params = self._sharing_buckets(
                banding_id, {"band": wanted[:, 0], "key": wanted[:, 1]}
            )
            statement = (
                f"SELECT {aggregate} FROM {joined} "
                "GROUP BY wanted.band, wanted.key HAVING count(*) > 1"
            )
        result = connection.execute(
            sa.text(statement),
            params,
            execution_options={"stream_results": True, "yield_per": chunk_size},
        )
        yield from _grouped_chunks(result, chunk_size)

    def _split_buckets(
        self, connection: Connection, banding_id: int, bands: int, path: str, chunk_size: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """SQLite's iter_buckets of a whole banding, grouped by two processes at once: a
        second process (_GROUPING_PROCESS) groups the odd bands on a connection of its own
        into a temporary file, as text, while ``connection`` groups the even ones; then the
        file's buckets follow. SQLite counts each allocation of a process under one mutex
        (while its memory statistics are on, as it is built: cli._sqlite_settings turns them
        off for the CLI alone), so two connections of one process group slower than one; two
        processes, twice as
        fast (4M documents: 29.35 s on one connection, 45.26 s on two of one process, 15.09 s
        in two processes: benchmarks/bench_sqlite_threads.py, RESULTS.md 2026-11-29 15:49
        UTC). The second process reads the snapshot ``connection`` sees: a writer's, no other
        writer commits until it ends, and it changes no band key. Where no second process
        can start, ``connection`` groups every band."""
        import tempfile

        even, odd = list(range(0, bands, 2)), list(range(1, bands, 2))
        with tempfile.TemporaryFile() as grouped:
            process = _second_process(
                _GROUPING_PROCESS, path, _BAND_BUCKETS, grouped, banding_id, ",".join(map(str, odd))
            )
            if process is None:
                even = list(range(bands))
            try:
                for band in even:
                    result = connection.execute(
                        sa.text(_BAND_BUCKETS),
                        {"banding_id": banding_id, "band": band},
                        execution_options={"stream_results": True, "yield_per": chunk_size},
                    )
                    yield from _grouped_chunks(result, chunk_size)
                if process is None:
                    return
                _, said = process.communicate()
                _check_exit(process.returncode, said, f"grouped the odd bands of {path}")
                grouped.seek(0)
                rest = b""
                while block := grouped.read(GROUPED_TEXT_BYTES):
                    lines, _, rest = (rest + block).rpartition(b"\n")
                    if lines:
                        yield _parse_id_arrays(lines + b"\n")
            finally:
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()

    def copy_signatures(self, file: SignatureFile, stop: threading.Event) -> SignatureFile | None:
        """Write the stored signatures of the file's ids into it, by a second process
        (_SIGNATURE_PROCESS) that reads them from SQLite's file in id order on a connection
        of its own, as _split_buckets groups bands: a thread of this process would share
        SQLite's allocation mutex with the command's connections outside the CLI (see
        cli._sqlite_settings). It reads the snapshot the writer sees, as _split_buckets's
        process does (see there). Ends early, its file unfilled, once ``stop`` is set; None
        where no process can start."""
        import subprocess

        path = self.sqlite_file
        process = _second_process(
            _SIGNATURE_PROCESS, path, _ID_SIGNATURES, file.fileno(),
            file.first, file.last, file.row_bytes, SIGNATURE_ROWS,
        )  # fmt: skip
        if process is None:
            return None
        with process:
            while True:
                try:
                    _, said = process.communicate(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    if stop.is_set():
                        process.kill()
        if not stop.is_set():
            _check_exit(process.returncode, said, f"read the signatures of {path}")
            file.take_written()
        return file

    def _copied_buckets(
        self, connection: Connection, banding_id: int, chunk_size: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """PostgreSQL's iter_buckets of a whole banding, by COPY ... TO STDOUT: the server
        groups the next buckets while these are parsed (a cursor's FETCH would make each side
        wait for the other), and numpy parses the arrays' text, not Python."""
        run = connection.exec_driver_sql
        # Walk the primary key in order (a streaming GroupAggregate): a hash aggregate or a
        # sort of every row spills to disk at small work_mem.
        run("SET LOCAL enable_hashagg = off")
        run("SET LOCAL enable_sort = off")
        statement = (
            "COPY (SELECT array_agg(document_id) FROM band_keys "
            f"WHERE banding_id = {int(banding_id)} GROUP BY band, key HAVING count(*) > 1) "
            "TO STDOUT"
        )
        cursor = connection.connection.dbapi_connection.cursor()
        try:
            with cursor.copy(statement) as copy:
                while rows := list(itertools.islice(copy, chunk_size)):
                    yield _parse_id_arrays(b"".join(rows))
        finally:
            cursor.close()
            run("RESET enable_hashagg")
            run("RESET enable_sort")

    def lookup(
        self, connection: Connection, banding_id: int, keys: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Indexed documents sharing a bucket with query row i of ``keys`` (int64, (m, bands)).

        Returns (query_rows, document_ids), each distinct pair once.
        """
        band, key, q = _key_rows(keys, np.arange(keys.shape[0]))
        joined, params = self._sharing_buckets(banding_id, {"q": q, "band": band, "key": key})
        found = connection.execute(
            sa.text(f"SELECT DISTINCT wanted.q, k.document_id FROM {joined} ORDER BY 1, 2"),
            params,
        ).all()
        pairs_found = _int_rows(found, 2)
        return pairs_found[:, 0], pairs_found[:, 1]

    def _among(self, values: list, sql_type: str) -> tuple[str, dict[str, Any]]:
        """``IN values`` as SQL (to follow a column) and its bound parameter: one array on
        PostgreSQL, one JSON list on SQLite, however many values (nothing is chunked)."""
        if self.dialect == "postgresql":
            return f"= ANY(CAST(:among AS {sql_type}[]))", {"among": values}
        return "IN (SELECT value FROM json_each(:among))", {"among": json.dumps(values)}

    def _sharing_buckets(
        self, banding_id: int, columns: dict[str, np.ndarray]
    ) -> tuple[str, dict[str, Any]]:
        """``FROM ... WHERE`` pairing each row of ``columns`` (which has band and key) with
        the band_keys rows ``k`` of its bucket, found through the primary key; and its
        parameters."""
        source, params = self._rows_source(columns)
        joined = (
            f"{source} CROSS JOIN band_keys k WHERE k.banding_id = :banding_id "
            "AND k.band = wanted.band AND k.key = wanted.key"
        )
        return joined, {**params, "banding_id": banding_id}

    def _rows_source(
        self, columns: dict[str, Sequence[Any]], sql_type: str = "BIGINT"
    ) -> tuple[str, dict[str, Any]]:
        """A FROM item named ``wanted`` whose rows are the given columns (integers, or values
        of ``sql_type``), and its bound parameters: unnest() of arrays on PostgreSQL,
        json_each() on SQLite. One parameter per column however many rows, so no statement
        is chunked or compiled per size; SQLite's CROSS JOIN (in the callers) makes these
        rows the outer loop."""
        names = list(columns)
        values = [np.asarray(column) for column in columns.values()]
        if self.dialect == "postgresql":
            arrays = ", ".join(f"CAST(:{name} AS {sql_type}[])" for name in names)
            return (
                f"unnest({arrays}) AS wanted({', '.join(names)})",
                {name: column.tolist() for name, column in zip(names, values, strict=True)},
            )
        fields = ", ".join(
            f"json_extract(value, '$[{i}]') AS {name}" for i, name in enumerate(names)
        )
        rows = json.dumps(np.column_stack(values).tolist())
        return f"(SELECT {fields} FROM json_each(:wanted)) AS wanted", {"wanted": rows}

    def analyze(self, connection: Connection, table: str) -> None:
        """Fresh planner statistics of ``table`` (our name), just written in bulk, on
        PostgreSQL: autovacuum analyzes it later or never (a server may run without it), and
        until then its queries are planned for a few thousand rows, not millions (the
        listing of clusters, a new banding's GROUP BY). SQLite keeps no statistics (its joins
        are ordered in the SQL)."""
        if self.dialect == "postgresql":
            connection.exec_driver_sql(f"ANALYZE {table}")

    # -- pairs -----------------------------------------------------------------------------

    def delete_pairs(self, connection: Connection, banding_id: int) -> None:
        connection.execute(pairs.delete().where(pairs.c.banding_id == banding_id))

    @contextmanager
    def pair_inserts(self, connection: Connection) -> Iterator[None]:
        """The block in which ``connection`` stores verified pairs: on SQLite with a page
        cache of SQLITE_PAIRS_CACHE_KIB, set back to the connection's own after."""
        if self.dialect != "sqlite":
            yield
            return
        before = connection.exec_driver_sql("PRAGMA cache_size").scalar_one()
        connection.exec_driver_sql(f"PRAGMA cache_size = -{SQLITE_PAIRS_CACHE_KIB}")
        try:
            yield
        finally:
            connection.exec_driver_sql(f"PRAGMA cache_size = {int(before)}")

    def insert_pairs(
        self,
        connection: Connection,
        banding_id: int,
        doc_a: np.ndarray,
        doc_b: np.ndarray,
        estimated: np.ndarray,
        exact: np.ndarray | None,
    ) -> None:
        if self.dialect == "postgresql":
            tuples = np.empty(len(doc_a), dtype=_pair_tuple(exact is not None))
            tuples["fields"], tuples["banding_len"], tuples["banding"] = 5, 4, banding_id
            tuples["a_len"], tuples["b_len"], tuples["estimated_len"] = 8, 8, 8
            tuples["doc_a"], tuples["doc_b"], tuples["estimated"] = doc_a, doc_b, estimated
            tuples["exact_len"] = -1 if exact is None else 8  # -1: NULL, no value follows
            if exact is not None:
                tuples["exact"] = exact
            columns = "banding_id, doc_a, doc_b, estimated_jaccard, exact_jaccard"
            _copy_binary(connection, f"pairs ({columns})", [tuples])
            return
        exact_values = [None] * len(doc_a) if exact is None else exact.tolist()
        rows = list(
            zip(
                [banding_id] * len(doc_a),
                doc_a.tolist(),
                doc_b.tolist(),
                estimated.tolist(),
                exact_values,
                strict=True,
            )
        )
        columns = ["banding_id", "doc_a", "doc_b", "estimated_jaccard", "exact_jaccard"]
        for chunk in _chunks(rows, 100_000):
            self._bulk_insert(connection, "pairs", columns, chunk)

    def iter_pairs(
        self, connection: Connection, banding_id: int, threshold: float, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Stored pairs with external ids and similarity >= threshold, most similar first;
        the first ``limit`` of them if given (see _similarity_cut)."""
        if limit == 0:
            return
        query, similarity, order = _named_pairs(banding_id)
        query = query.add_columns(pairs.c.exact_jaccard, pairs.c.estimated_jaccard)
        if limit is not None:
            cut = _similarity_cut(connection, banding_id, limit, best=True, threshold=threshold)
            threshold = threshold if cut is None else cut  # a cut is >= threshold
            query = query.limit(limit)
        query = query.where(similarity >= threshold).order_by(similarity.desc(), *order)
        streamed = {"stream_results": True, "yield_per": 10_000}
        for row in connection.execute(query, execution_options=streamed).mappings():
            yield dict(row)

    def pairs_at_least(
        self,
        connection: Connection,
        banding_id: int,
        threshold: float,
        among: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(doc_a, doc_b) of stored pairs with similarity >= threshold; with ``among``, only
        pairs whose first document is one of those ids."""
        similarity = func.coalesce(pairs.c.exact_jaccard, pairs.c.estimated_jaccard)
        query = select(pairs.c.doc_a, pairs.c.doc_b).where(
            pairs.c.banding_id == banding_id, similarity >= threshold
        )
        chunks = [None] if among is None else list(_chunks(among.tolist(), MAX_PARAMS))
        found = [np.empty((0, 2), np.int64)]
        streamed = {"stream_results": True, "yield_per": 100_000}
        for chunk in chunks:
            chunk_query = query if chunk is None else query.where(pairs.c.doc_a.in_(chunk))
            result = connection.execute(chunk_query, execution_options=streamed)
            found.extend(_int_rows(rows, 2) for rows in result.partitions())
        rows = np.concatenate(found)
        return rows[:, 0].copy(), rows[:, 1].copy()

    # -- clusters --------------------------------------------------------------------------

    def cluster_members(
        self, connection: Connection, banding_id: int, cluster_ids: np.ndarray
    ) -> np.ndarray:
        """Document ids of the given clusters."""
        found: list[int] = []
        for chunk in _chunks(cluster_ids.tolist(), MAX_PARAMS):
            found.extend(
                connection.scalars(
                    select(clusters.c.document_id).where(
                        clusters.c.banding_id == banding_id, clusters.c.cluster_id.in_(chunk)
                    )
                )
            )
        return np.array(sorted(found), dtype=np.int64)

    def clusters_of(
        self, connection: Connection, banding_id: int, ids: np.ndarray
    ) -> dict[int, int]:
        """document id -> cluster id, for those of ``ids`` that are in a cluster."""
        found: dict[int, int] = {}
        for chunk in _chunks(ids.tolist(), MAX_PARAMS):
            query = select(clusters.c.document_id, clusters.c.cluster_id).where(
                clusters.c.banding_id == banding_id, clusters.c.document_id.in_(chunk)
            )
            found.update((d, c) for d, c in connection.execute(query))
        return found

    def clustered_duplicates(
        self, connection: Connection, banding_id: int, external_ids: list[str]
    ) -> set[str]:
        """Those of ``external_ids`` in a cluster of the banding that another document
        represents."""
        # The asked ids drive the join (SQLite's CROSS JOIN keeps this order), each found
        # through external_id's index: else SQLite scans every cluster row once per call,
        # which made `dedup` quadratic (benchmarks/RESULTS.md, 2026-11-24 05:38-07:15).
        wanted, params = self._rows_source({"external_id": external_ids}, "TEXT")
        rows = connection.execute(
            sa.text(
                f"SELECT d.external_id FROM {wanted} CROSS JOIN documents d "
                "CROSS JOIN clusters c WHERE d.external_id = wanted.external_id "
                "AND c.banding_id = :banding_id AND c.document_id = d.id "
                "AND c.cluster_id <> c.document_id"
            ),
            {**params, "banding_id": banding_id},
        )
        return set(rows.scalars())

    def delete_clusters(
        self, connection: Connection, banding_id: int, document_ids: np.ndarray | None = None
    ) -> None:
        """Cluster rows of the banding (of the given documents only, if given)."""
        if document_ids is None:
            connection.execute(clusters.delete().where(clusters.c.banding_id == banding_id))
            return
        for chunk in _chunks(document_ids.tolist(), MAX_PARAMS):
            connection.execute(
                clusters.delete().where(
                    clusters.c.banding_id == banding_id, clusters.c.document_id.in_(chunk)
                )
            )

    def insert_clusters(
        self,
        connection: Connection,
        banding_id: int,
        document_ids: np.ndarray,
        cluster_ids: np.ndarray,
    ) -> None:
        for start in range(0, document_ids.size, 100_000):
            ids = document_ids[start : start + 100_000]
            rows = zip(
                itertools.repeat(banding_id, ids.size),
                ids.tolist(),
                cluster_ids[start : start + 100_000].tolist(),
                strict=True,
            )
            self._bulk_insert(
                connection, "clusters", ["banding_id", "document_id", "cluster_id"], list(rows)
            )

    def iter_clusters(self, connection: Connection, banding_id: int) -> Iterator[dict[str, Any]]:
        """Clustered documents: external_id, cluster (the representative's external id),
        document_id, cluster_id, and similarity: the stored pair's (exact, else estimated)
        when the document was paired with its representative directly, else None (and for
        the representative); ordered by cluster, representative first."""
        member = documents.alias("member")
        representative = documents.alias("representative")
        first = clusters.c.document_id < clusters.c.cluster_id
        query = (
            select(
                member.c.external_id,
                representative.c.external_id.label("cluster"),
                clusters.c.document_id,
                clusters.c.cluster_id,
                func.coalesce(pairs.c.exact_jaccard, pairs.c.estimated_jaccard).label("similarity"),
            )
            .join(member, member.c.id == clusters.c.document_id)
            .join(representative, representative.c.id == clusters.c.cluster_id)
            .outerjoin(
                pairs,
                sa.and_(
                    pairs.c.banding_id == clusters.c.banding_id,
                    pairs.c.doc_a
                    == sa.case((first, clusters.c.document_id), else_=clusters.c.cluster_id),
                    pairs.c.doc_b
                    == sa.case((first, clusters.c.cluster_id), else_=clusters.c.document_id),
                ),
            )
            .where(clusters.c.banding_id == banding_id)
            .order_by(
                clusters.c.cluster_id,
                clusters.c.document_id != clusters.c.cluster_id,
                clusters.c.document_id,
            )
        )
        streamed = {"stream_results": True, "yield_per": 10_000}
        for row in connection.execute(query, execution_options=streamed).mappings():
            yield dict(row)

    def shingle_counts_of(self, connection: Connection, ids: np.ndarray) -> np.ndarray:
        """Shingle counts aligned with the (sorted) document ids."""
        found: dict[int, int] = {}
        for chunk in _chunks(ids.tolist(), MAX_PARAMS):
            query = select(documents.c.id, documents.c.shingle_count).where(
                documents.c.id.in_(chunk)
            )
            found.update((i, c) for i, c in connection.execute(query))
        return np.array([found[int(i)] for i in ids], dtype=np.int64)

    # -- deleting --------------------------------------------------------------------------

    def ingested_before(self, connection: Connection, moment: datetime) -> np.ndarray:
        """Ids of documents ingested before the aware datetime ``moment``."""
        if self.dialect == "sqlite":  # stored as naive UTC text
            moment = moment.astimezone(UTC).replace(tzinfo=None)
        ids = connection.scalars(select(documents.c.id).where(documents.c.ingested_at < moment))
        return np.array(sorted(ids), dtype=np.int64)

    def delete_documents(self, connection: Connection, ids: np.ndarray) -> None:
        """Documents with their signatures, pairs and cluster rows (no foreign key cascades
        to them; band keys: see :meth:`delete_band_keys`). A banding id leads every index of
        pairs and clusters, so each statement names all bandings, to be an index look-up."""
        among, params = self._among(ids.tolist(), "BIGINT")
        every_banding = "banding_id IN (SELECT id FROM bandings)"
        for statement in (
            f"DELETE FROM pairs WHERE {every_banding} AND doc_a {among}",
            f"DELETE FROM pairs WHERE {every_banding} AND doc_b {among}",
            f"DELETE FROM clusters WHERE {every_banding} AND document_id {among}",
            f"DELETE FROM signatures WHERE document_id {among}",
            f"DELETE FROM documents WHERE id {among}",
        ):
            connection.execute(sa.text(statement), params)

    def delete_band_keys(
        self, connection: Connection, banding_id: int, document_ids: np.ndarray, keys: np.ndarray
    ) -> None:
        """The band keys of documents (``keys``: int64 of shape (len(document_ids), bands),
        computed from their signatures), each row found through the primary key."""
        band, key, document_id = _key_rows(keys, document_ids)
        source, params = self._rows_source({"band": band, "key": key, "document_id": document_id})
        if self.dialect == "postgresql":
            statement = (
                f"DELETE FROM band_keys k USING {source} WHERE k.banding_id = :banding_id "
                "AND k.band = wanted.band AND k.key = wanted.key "
                "AND k.document_id = wanted.document_id"
            )
        else:
            statement = (
                "DELETE FROM band_keys WHERE banding_id = :banding_id "
                f"AND (band, key, document_id) IN (SELECT band, key, document_id FROM {source})"
            )
        connection.execute(sa.text(statement), {**params, "banding_id": banding_id})

    # -- staged loads ----------------------------------------------------------------------

    def staged_load(self, name: str, bandings: Sequence[int]) -> StagedLoad:
        """The staging tables ``name``_* of a load by many writers (see StagedLoad), for band
        keys of the given bandings (a key per banding: ids, or positions before an index and
        its bandings exist)."""
        return StagedLoad(self, name, bandings)

    # -- integrity -------------------------------------------------------------------------

    def integrity_problems(self, connection: Connection) -> list[str]:
        """What is inconsistent in the index, one sentence each (empty: all is well)."""
        problems = []

        def unmatched(table: sa.Table, column: sa.Column, other: sa.Table, key: sa.Column) -> int:
            """Rows of ``table`` whose ``column`` matches no ``key`` of ``other``."""
            query = select(func.count()).select_from(table).outerjoin(other, key == column)
            return connection.scalar(query.where(key.is_(None)))

        no_signature = unmatched(documents, documents.c.id, signatures, signatures.c.document_id)
        if no_signature:
            problems.append(f"{no_signature} document(s) have no signature")
        stray = unmatched(signatures, signatures.c.document_id, documents, documents.c.id)
        if stray:
            problems.append(f"{stray} signature(s) belong to no document")

        def missing(column: sa.Column) -> sa.ColumnElement[bool]:
            return ~sa.exists().where(documents.c.id == column)

        stray = connection.scalar(
            select(func.count())
            .select_from(pairs)
            .where(missing(pairs.c.doc_a) | missing(pairs.c.doc_b))
        )
        if stray:
            problems.append(f"{stray} pair(s) name a document that is not indexed")
        stray = unmatched(clusters, clusters.c.document_id, documents, documents.c.id)
        if stray:
            problems.append(f"{stray} cluster row(s) name a document that is not indexed")
        all_bandings = self.bandings(connection)
        active = [b for b in all_bandings if b["is_active"]]
        if len(active) != 1:
            problems.append(f"{len(active)} bandings are active (there must be exactly one)")
        if any(b["state"] != "complete" for b in active):
            problems.append("the active banding is not complete")
        document_count = self.document_count(connection)
        for banding in all_bandings:
            if banding["state"] != "complete":
                continue
            per_document = (
                select(band_keys.c.document_id, func.count().label("key_count"))
                .join(documents, documents.c.id == band_keys.c.document_id)
                .where(band_keys.c.banding_id == banding["id"])
                .group_by(band_keys.c.document_id)
                .subquery()
            )
            keyed, wrong = connection.execute(
                select(
                    func.count(),
                    func.coalesce(
                        func.sum(
                            sa.case((per_document.c.key_count != banding["bands"], 1), else_=0)
                        ),
                        0,
                    ),
                ).select_from(per_document)
            ).one()
            orphans = connection.scalar(
                select(func.count())
                .select_from(band_keys)
                .outerjoin(documents, documents.c.id == band_keys.c.document_id)
                .where(band_keys.c.banding_id == banding["id"], documents.c.id.is_(None))
            )
            name = f"banding {banding['id']} ({banding['bands']} x {banding['rows']})"
            if keyed != document_count or wrong:
                problems.append(
                    f"{name}: {document_count - keyed} document(s) have no band keys, "
                    f"{wrong} an incomplete set"
                )
            if orphans:
                problems.append(f"{name}: {orphans} band keys belong to no document")
        return problems

    # -- statistics ------------------------------------------------------------------------

    def bucket_sizes(self, connection: Connection, banding_id: int) -> list[tuple[int, int]]:
        """(bucket size, number of buckets of that size), ascending by size."""
        sizes = (
            select(func.count().label("size"))
            .where(band_keys.c.banding_id == banding_id)
            .group_by(band_keys.c.band, band_keys.c.key)
            .subquery()
        )
        query = select(sizes.c.size, func.count()).group_by(sizes.c.size).order_by(sizes.c.size)
        return [(int(s), int(c)) for s, c in connection.execute(query)]

    def largest_buckets(
        self, connection: Connection, banding_id: int, limit: int
    ) -> list[tuple[int, int, int]]:
        """(band, key, size) of the largest buckets."""
        size = func.count().label("size")
        query = (
            select(band_keys.c.band, band_keys.c.key, size)
            .where(band_keys.c.banding_id == banding_id)
            .group_by(band_keys.c.band, band_keys.c.key)
            .having(func.count() > 1)
            .order_by(size.desc(), band_keys.c.band, band_keys.c.key)
            .limit(limit)
        )
        return [(int(b), int(k), int(s)) for b, k, s in connection.execute(query)]

    def cluster_sizes(self, connection: Connection, banding_id: int) -> list[tuple[int, int]]:
        """(cluster size, number of clusters of that size), ascending by size."""
        sizes = (
            select(func.count().label("size"))
            .where(clusters.c.banding_id == banding_id)
            .group_by(clusters.c.cluster_id)
            .subquery()
        )
        query = select(sizes.c.size, func.count()).group_by(sizes.c.size).order_by(sizes.c.size)
        return [(int(s), int(c)) for s, c in connection.execute(query)]

    def weakest_pairs(
        self, connection: Connection, banding_id: int, limit: int
    ) -> list[dict[str, Any]]:
        """The ``limit`` stored pairs of lowest similarity (rows like iter_pairs'), least
        similar first."""
        if limit < 1:
            return []
        query, similarity, order = _named_pairs(banding_id)
        query = query.add_columns(pairs.c.exact_jaccard, pairs.c.estimated_jaccard)
        cut = _similarity_cut(connection, banding_id, limit, best=False)
        if cut is not None:
            query = query.where(similarity <= cut)
        query = query.order_by(similarity, *order).limit(limit)
        return [dict(row) for row in connection.execute(query).mappings()]

    def pair_count(
        self, connection: Connection, banding_id: int, threshold: float | None = None
    ) -> int:
        """Stored pairs of the banding (with similarity >= threshold, when given)."""
        query = select(func.count()).select_from(pairs).where(pairs.c.banding_id == banding_id)
        if threshold is not None:
            similarity = func.coalesce(pairs.c.exact_jaccard, pairs.c.estimated_jaccard)
            query = query.where(similarity >= threshold)
        return connection.scalar(query)

    def exact_duplicate_groups(self, connection: Connection) -> int:
        """Number of content hashes shared by two or more documents."""
        groups = (
            select(documents.c.content_hash)
            .group_by(documents.c.content_hash)
            .having(func.count() > 1)
            .subquery()
        )
        return connection.scalar(select(func.count()).select_from(groups))


def _similarity_cut(
    connection: Connection,
    banding_id: int,
    limit: int,
    best: bool,
    threshold: float | None = None,
) -> float | None:
    """The similarity of the ``limit``-th stored pair (limit >= 1) from the best end, or the
    weakest, among those >= threshold; None when there are fewer. Read from the pairs alone,
    so a query of the pairs up to it joins and sorts those only (ties at the cut included),
    not every stored pair with its external ids: the ten best of 52,301 pairs in 0.013-0.019 s
    instead of 0.22-0.28 s (benchmarks/bench_best_pairs.py, RESULTS.md 2026-11-24 23:57 UTC)."""
    similarity = func.coalesce(pairs.c.exact_jaccard, pairs.c.estimated_jaccard)
    query = select(similarity).where(pairs.c.banding_id == banding_id)
    if threshold is not None:
        query = query.where(similarity >= threshold)
    query = query.order_by(similarity.desc() if best else similarity)
    return connection.execute(query.offset(limit - 1).limit(1)).scalar()


def _named_pairs(banding_id: int) -> tuple[sa.Select, sa.ColumnElement, tuple]:
    """The banding's stored pairs as id_a, id_b (external ids) and similarity (exact when
    known), with that similarity and the external ids to order by."""
    doc_a = documents.alias("doc_a")
    doc_b = documents.alias("doc_b")
    similarity = func.coalesce(pairs.c.exact_jaccard, pairs.c.estimated_jaccard)
    query = (
        select(
            doc_a.c.external_id.label("id_a"),
            doc_b.c.external_id.label("id_b"),
            similarity.label("similarity"),
        )
        .join(doc_a, doc_a.c.id == pairs.c.doc_a)
        .join(doc_b, doc_b.c.id == pairs.c.doc_b)
        .where(pairs.c.banding_id == banding_id)
    )
    return query, similarity, (doc_a.c.external_id, doc_b.c.external_id)


# Sort memory for building a bulk-loaded partition's primary key (this transaction only):
# about what an in-memory sort of its rows takes (BULK_INDEX_BYTES_PER_ROW, measured with
# trace_sort), within these bounds. Rows that arrive sorted and fit are built in one pass
# without parallel workers (their runs would go through temporary files to be merged);
# more rows than fit in the largest are sorted externally, by parallel workers too.
BULK_INDEX_MEMORY = (256 * 2**20, 1024 * 2**20)
BULK_INDEX_BYTES_PER_ROW = 80
# Characters of text per part of a COPY of documents (each part is laid out, then sent).
COPY_TEXT_CHARS = 2**20
# Bytes of band keys a bulk load holds and sorts at a time (see BandKeyWriter); rows per
# statement (one COPY, or one executemany on SQLite) that writes band keys; band-key rows per
# SQLite INSERT (two bound parameters each): one statement of many rows crosses from Python
# into SQLite once for all of them, executemany once a row.
BULK_SORT_MEMORY = 8 * 2**20
# Band-key rows a SQLite re-band commits at a time (see BandKeyWriter): ~190 MB of WAL, at
# the 24 bytes a row of a whole 4M re-band's (4.06 GB for 168M rows: bench_growth, RESULTS.md
# 2026-11-28 18:48 UTC).
SQLITE_PART_ROWS = 8_000_000
# How long a write committed in parts waits for another writer between two parts (at least).
PART_LOCK_TIMEOUT = 3600.0
_WRITE_ROWS = 131_072
_SQLITE_KEY_ROWS = 250
# Rows per SQLite INSERT of other bulk writes (documents, signatures, pairs; seven bound
# parameters a row at most, within SQLite's 32,766). A row per statement, the writing thread
# waited for the GIL back after each row: ingest at 4M took 196.0 s, at 100 rows 163.6 s (one
# paired run: benchmarks/RESULTS.md, 2026-11-28 16:26 UTC).
_SQLITE_ROWS = 100


def _sqlite_inserts(
    cursor: sqlite3.Cursor, insert: str, values: str, flat: list, per_statement: int
) -> None:
    """Rows into SQLite, given as one flat list of their bound values: ``insert`` is the
    statement up to VALUES, ``values`` one row's tuple (its ? are a row's values). Sent
    ``per_statement`` rows per INSERT, the last rows one at a time, each way by one
    executemany, which crosses from Python into SQLite once a statement."""
    width = values.count("?")
    step = width * per_statement
    whole = len(flat) // step * step
    cursor.executemany(
        insert + ", ".join([values] * per_statement),
        (flat[start : start + step] for start in range(0, whole, step)),
    )
    cursor.executemany(
        insert + values, (flat[start : start + width] for start in range(whole, len(flat), width))
    )


def _by_id(rows: Iterable[Any]) -> dict[int, tuple[str | None, str | None, bytes]]:
    """Rows of (id, external id, text, signature blob) as id -> (external id, text, blob)."""
    return {int(i): (e, t, bytes(blob)) for i, e, t, blob in rows}


def _key_rows(
    keys: np.ndarray, owners: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A key matrix (int64, (n, bands)) as rows: (band, key, owner of the row) arrays of
    n * bands, row by row; owner is None when ``owners`` (one per matrix row) is not given."""
    n, bands = keys.shape
    owner = None if owners is None else np.repeat(owners, bands)
    return np.tile(np.arange(bands, dtype=np.int64), n), keys.reshape(-1), owner


# What exact duplicates are found by (stats, docs/sql.md): see Store.defer_content_hash_index.
_CONTENT_HASH_INDEX = next(i for i in documents.indexes if i.name == "ix_documents_content_hash")


def _partition(banding_id: int) -> str:
    """The PostgreSQL partition of band_keys that holds one banding's keys."""
    return f"band_keys_{int(banding_id)}"


class BandKeyWriter:
    """Writes the band keys of one banding, batch after batch; then :meth:`finish`.

    Rows go in in (band, key, document_id) order, the primary key's. When ``bulk`` is
    allowed (no one reads the call's own keys before it ends), the keys are held until
    BULK_SORT_MEMORY bytes of them have arrived, then each band's rows are sorted and
    spooled to a temporary file as a run; finish() merges the runs band by band and writes
    the whole banding in that order, holding about BULK_SORT_MEMORY however large the
    corpus: a B-tree then grows at its right edge only (SQLite), and an index build over
    sorted rows is a single pass (PostgreSQL's sort notices sorted input), several times
    faster than over rows sorted batch by batch. Without bulk, each batch goes in at once,
    sorted. Document ids must ascend from call to call (new documents get growing ids).

    On PostgreSQL, a banding whose partition does not exist yet (a first ingest, a re-band)
    is loaded, when ``bulk`` is allowed, into a new table without indexes, by COPY ...
    FREEZE (so the rows are all-visible and GROUP BY band, key can be an index-only scan
    with no VACUUM); finish() builds its primary key with one sort and attaches it as the
    banding's partition, so readers see nothing of it until then. Inserting the same rows
    into a live B-tree of random keys is several times slower.

    With ``parts`` (a re-band of a SQLite index), the rows are committed SQLITE_PART_ROWS at
    a time (Store.commit_part). In one transaction, SQLite's WAL holds every page the write
    makes until the commit (4 GB for a re-band of 4M documents), then copies them into the
    database: every page is written twice, each time to a new page of a file; the disk holds the
    banding twice. In parts, the WAL is copied after each part and written over from its
    start by the next (unless a reader's snapshot holds the copy back), whose pages are
    then in memory already: on a virtual machine that hands free memory back to its host,
    a new page costs the kernel three to nine times as much (benchmarks/bench_page_cache.py).
    Other writers may run between the parts, so the banding must be one they leave alone
    (``building``: loads fill complete bandings only); the caller brings it up to date in
    the last part's transaction (see Index.reband). Each part checks that the banding still
    exists (by its id and creation time).
    """

    def __init__(
        self,
        store: Store,
        connection: Connection,
        banding_id: int,
        bulk: bool,
        parts: bool = False,
    ):
        self._store, self._connection, self._banding_id = store, connection, banding_id
        self._parts = parts and store.dialect == "sqlite"
        self._part_rows = 0  # rows written since the last part was committed
        self.committed = False  # whether a part was committed (the banding exists)
        # The banding's creation time, which tells it from a later one with its id.
        self.created_at = store.building_banding(connection, banding_id) if self._parts else None
        self._table = "band_keys"
        self._new_table = False
        self._bulk = bulk
        self._held: list[tuple[np.ndarray, np.ndarray]] = []  # (ids, keys) not yet spooled
        self._held_bytes = 0
        self._spool: RunSpool | None = None
        self._runs: list[list[tuple[int, int]]] = []  # each band's runs in the spool
        self._rows = 0
        if store.dialect != "postgresql":
            return
        self._table = _partition(banding_id)
        exists = connection.exec_driver_sql(
            f"SELECT to_regclass('{self._table}') IS NOT NULL"
        ).scalar_one()
        if exists:
            return
        # banding_id defaults to the partition's banding: COPY leaves it out (a third less
        # to send and parse).
        if bulk:
            connection.exec_driver_sql(
                f"CREATE TABLE {self._table} (LIKE band_keys, "
                f"CONSTRAINT {self._table}_banding CHECK (banding_id = {int(banding_id)}))"
            )  # the CHECK proves the partition bound, so ATTACH PARTITION needs no scan
            connection.exec_driver_sql(
                f"ALTER TABLE {self._table} ALTER banding_id SET DEFAULT {int(banding_id)}"
            )
            self._new_table = True
        else:
            connection.exec_driver_sql(
                f"CREATE TABLE {self._table} PARTITION OF band_keys "
                f"(banding_id DEFAULT {int(banding_id)}) FOR VALUES IN ({int(banding_id)})"
            )

    def write(self, document_ids: np.ndarray, keys: np.ndarray) -> None:
        """Band keys of documents: ``keys`` is int64 of shape (len(document_ids), bands)."""
        ids = document_ids.astype(np.int64)
        if not self._bulk:
            self.write_sorted(ids, keys)
            return
        keys = np.array(keys, dtype=np.int64)  # its own copy: not a view keeping a batch
        self._held.append((ids, keys))
        self._held_bytes += ids.nbytes + keys.nbytes
        if self._held_bytes >= BULK_SORT_MEMORY:
            self._spool_run()

    def write_sorted(self, ids: np.ndarray, keys: np.ndarray) -> None:
        """The rows of a key matrix (int64, (len(ids), bands)) in primary-key order, given
        ``ids`` ascending: each band's keys by a stable sort, so equal keys keep their ids
        in order."""
        for band in range(keys.shape[1]):
            order = np.argsort(keys[:, band], kind="stable")
            self.write_rows(np.full(ids.size, band), keys[order, band], ids[order])

    def write_rows(self, band: np.ndarray, key: np.ndarray, document_id: np.ndarray) -> None:
        """Rows (band, key, document_id), best in primary-key order (see the class), sent
        _WRITE_ROWS at a time."""
        self._rows += band.shape[0]
        for start in range(0, band.shape[0], _WRITE_ROWS):
            part = slice(start, start + _WRITE_ROWS)
            if self._store.dialect == "postgresql":
                _copy_band_keys(
                    self._connection, self._table, band[part], key[part], document_id[part],
                    _freeze(self._new_table),
                )  # fmt: skip
            else:
                self._insert_sqlite(band[part], key[part], document_id[part])
                self._part_rows += band[part].shape[0]
                if self._parts and self._part_rows >= SQLITE_PART_ROWS:
                    self._next_part()

    def _next_part(self) -> None:
        """Commit the rows so far and go on in a new transaction (see the class)."""
        self.committed = True  # perhaps only the parts before: Index.reband checks
        self._store.commit_part(self._connection)
        self._part_rows = 0
        if self._store.building_banding(self._connection, self._banding_id) != self.created_at:
            raise DatabaseError(
                f"banding {self._banding_id} was removed while it was being built (by "
                "`simindex drop-banding`, or `simindex reband --drop-old`, which removes "
                "every other banding): this re-band stopped; run it again if its banding is "
                "still wanted"
            )

    def _insert_sqlite(self, band: np.ndarray, key: np.ndarray, document_id: np.ndarray) -> None:
        """Rows into SQLite's band_keys, _SQLITE_KEY_ROWS per INSERT, the banding and the
        band written into the statement (one statement per band in the rows)."""
        cursor = self._connection.connection.dbapi_connection.cursor()
        rows = np.column_stack((key, document_id))
        bounds = [0, *(np.flatnonzero(np.diff(band)) + 1).tolist(), band.shape[0]]
        insert = "INSERT INTO band_keys (banding_id, band, key, document_id) VALUES "
        for start, end in itertools.pairwise(bounds):
            values = f"({int(self._banding_id)}, {int(band[start])}, ?, ?)"
            flat = rows[start:end].reshape(-1).tolist()
            _sqlite_inserts(cursor, insert, values, flat, _SQLITE_KEY_ROWS)
        cursor.close()

    def insert_staged(self, rows: str) -> None:
        """Band keys from a query of rows (band, key, document_id) in this database (staged
        ones, StagedLoad.band_keys), in primary-key order; then :meth:`finish`."""
        self._connection.execute(
            sa.text(
                f"INSERT INTO {self._table} (banding_id, band, key, document_id) "
                f"SELECT :banding_id, band, key, document_id FROM ({rows}) AS staged "
                "ORDER BY band, key, document_id"
            ),
            {"banding_id": self._banding_id},
        )

    def finish(self) -> None:
        """Write the held and spooled keys (see the class); on PostgreSQL, index and attach
        a new partition."""
        if self._held:
            self._spool_run()
        if self._spool is not None:
            self._write_spooled()
        if not self._new_table:
            return
        run = self._connection.exec_driver_sql
        least, most = BULK_INDEX_MEMORY
        needed = self._rows * BULK_INDEX_BYTES_PER_ROW
        run(f"SET LOCAL maintenance_work_mem = '{max(least, min(most, needed)) // 1024}kB'")
        if needed <= most:
            run("SET LOCAL max_parallel_maintenance_workers = 0")
        run(
            f"ALTER TABLE {self._table} ADD CONSTRAINT {self._table}_pkey "
            "PRIMARY KEY (banding_id, band, key, document_id)"
        )
        run("RESET maintenance_work_mem")
        run("RESET max_parallel_maintenance_workers")
        run(
            f"ALTER TABLE band_keys ATTACH PARTITION {self._table} "
            f"FOR VALUES IN ({self._banding_id})"
        )
        self._store.analyze(self._connection, self._table)
        self._new_table = False

    def _spool_run(self) -> None:
        """The held keys as a run of each band: its keys sorted (stably: equal keys keep their
        ids ascending), with their ids."""
        ids = np.concatenate([i for i, _ in self._held])
        bands = self._held[0][1].shape[1]
        if self._spool is None:
            self._spool = RunSpool()
            self._runs = [[] for _ in range(bands)]
        for band in range(bands):
            column = np.concatenate([k[:, band] for _, k in self._held])
            order = np.argsort(column, kind="stable")
            self._runs[band].append(self._spool.add(column[order], ids[order]))
        self._held, self._held_bytes = [], 0

    def _write_spooled(self) -> None:
        """Each band's rows of every run, merged in (key, document_id) order, holding about
        BULK_SORT_MEMORY of them."""
        spool, self._spool = self._spool, None
        assert spool is not None
        merged = (
            (band, keys, ids)
            for band, runs in enumerate(self._runs)
            for keys, ids in spool.merged(runs, BULK_SORT_MEMORY)
        )
        try:
            # The next rows are merged (NumPy, outside the GIL) while these are sent.
            with closing(ahead(merged)) as rows:
                for band, keys, ids in rows:
                    self.write_rows(np.full(keys.size, band), keys, ids)
        finally:
            spool.close()
        self._runs = []


# A SQLite band's buckets of two or more documents, each as its ids' text (group_concat).
_BAND_BUCKETS = (
    "SELECT group_concat(document_id) FROM band_keys "
    "WHERE banding_id = :banding_id AND band = :band GROUP BY key HAVING count(*) > 1"
)
# The programs of a SQLite index's second processes (Store._split_buckets, copy_signatures):
# Python with SQLite's module alone (no NumPy, SQLAlchemy or numba to load), its arguments the
# index's file, a statement to run and its own. Each reads in one read transaction, and stops
# once the command that started it has gone (a kill -9) rather than hold an old snapshot that
# keeps SQLite's checkpoints from finishing. A full disk under its output ends it with
# _NO_SPACE_EXIT; a stored signature of another length, with _OTHER_LENGTH said.
_NO_SPACE_EXIT = 28
_OTHER_LENGTH = "stored signatures differ in length from the index's: run `simindex check`"
_PROCESS_START = """
import errno, os, sqlite3, sys
parent = os.getppid()
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("PRAGMA query_only = 1")
connection.execute("BEGIN")
statement = sys.argv[2]


def orphaned():
    return os.getppid() != parent
"""
_PROCESS_END = f"""
try:
    run(*sys.argv[3:])
except OSError as exc:
    if exc.errno != errno.ENOSPC:
        raise
    sys.exit({_NO_SPACE_EXIT})
"""
# Groups the banding's bands given (comma-separated) with _BAND_BUCKETS, writing each bucket
# as a line of its ids to its standard output.
_GROUPING_PROCESS = (
    _PROCESS_START
    + """
def run(banding, bands):
    out = sys.stdout.buffer
    for band in bands.split(","):
        rows = connection.execute(statement, {"banding_id": int(banding), "band": int(band)})
        while not orphaned() and (chunk := rows.fetchmany(50000)):
            out.write(("\\n".join([ids for (ids,) in chunk]) + "\\n").encode())
    out.flush()
"""
    + _PROCESS_END
)
# Reads the signatures of the ids first..last with _ID_SIGNATURES, ``rows`` at a time, and
# writes each at row (id - first) of its output, a SignatureFile's file (a run of consecutive
# ids in one write), then, after the rows, a byte per id of the range, 1 for those written.
_SIGNATURE_PROCESS = (
    _PROCESS_START
    + f"""
def write(data, at):
    view = memoryview(data)
    while view:
        done = os.pwrite(1, view, at)
        view, at = view[done:], at + done


def run(first, last, row, rows):
    first, last, row = int(first), int(last), int(row)
    written = bytearray(last - first + 1)
    found = connection.execute(statement, {{"first": first, "last": last}})
    while not orphaned() and (chunk := found.fetchmany(int(rows))):
        if any(len(signature) != row for _, signature in chunk):
            sys.exit({_OTHER_LENGTH!r})
        low, high = chunk[0][0], chunk[-1][0]
        if high - low == len(chunk) - 1:
            write(b"".join([signature for _, signature in chunk]), (low - first) * row)
            written[low - first : high - first + 1] = bytes([1]) * len(chunk)
        else:
            for at, signature in chunk:
                write(signature, (at - first) * row)
                written[at - first] = 1
    write(written, len(written) * row)
"""
    + _PROCESS_END
)
# Signatures the signature-reading process reads at a time.
SIGNATURE_ROWS = 5_000
_ID_SIGNATURES = (
    "SELECT document_id, minhashes FROM signatures "
    "WHERE document_id BETWEEN :first AND :last ORDER BY document_id"
)


def _second_process(program: str, path: str, statement: str, out: Any, *args: object) -> Any:
    """Start one of a SQLite index's second processes (``program``: _GROUPING_PROCESS or
    _SIGNATURE_PROCESS) on the file ``path``, with its ``statement`` and arguments, its output
    into ``out`` (a file or descriptor) and its errors kept for _check_exit: the Popen, or None
    where no process can start."""
    import subprocess
    import sys

    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-c", program, path, statement, *map(str, args)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE,
        )  # fmt: skip
    except OSError:
        return None


def _check_exit(code: int, said: bytes, did: str) -> None:
    """Raise for a second process that failed (see _split_buckets, copy_signatures): a full
    disk under its output as ENOSPC, which the CLI names the temporary directory for; else a
    DatabaseError naming what it ``did`` and the last line it said."""
    if code == _NO_SPACE_EXIT:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if code:
        lines = said.decode(errors="replace").strip().splitlines()
        raise DatabaseError(
            f"the process that {did} failed: {lines[-1] if lines else 'no message'}"
        )


# Bytes of the second grouping process's text read at a time.
GROUPED_TEXT_BYTES = 4 * 2**20
_PG_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, extension length
_PG_BINARY_TRAILER = b"\xff\xff"
# An integer array's text ({1,2}) to the numbers alone, split by spaces.
_ARRAY_TEXT_SEPARATORS = bytes.maketrans(b"{},\n", b"    ")
_BAND_KEY_TUPLE = np.dtype(
    [
        ("fields", ">i2"),
        ("band_len", ">i4"), ("band", ">i2"),
        ("key_len", ">i4"), ("key", ">i8"),
        ("doc_len", ">i4"), ("document_id", ">i8"),
    ]
)  # fmt: skip


# A documents row in COPY's binary format, around its variable-width fields: the head
# (field count, id, external_id's length), external_id, the middle (content_hash,
# shingle_count, text's length), text, metadata's length, metadata, the tail (ingested_at,
# in microseconds since 2000-01-01 UTC). A length of -1 is NULL.
_DOCUMENT_HEAD = np.dtype(
    [("fields", ">i2"), ("id_len", ">i4"), ("id", ">i8"), ("external_id_len", ">i4")]
)
_DOCUMENT_MIDDLE = np.dtype(
    [
        ("hash_len", ">i4"), ("hash", ">i8"),
        ("count_len", ">i4"), ("count", ">i4"),
        ("text_len", ">i4"),
    ]
)  # fmt: skip
_DOCUMENT_TAIL = np.dtype([("time_len", ">i4"), ("time", ">i8")])


class StagedLoad:
    """Documents loaded by many independent writers (the tasks of a distributed job, each in
    its own transaction) into staging tables, then moved into the index in one transaction
    of the driver: until then the index does not change, and if the job fails its staging
    tables are dropped and the index is as it was. PostgreSQL only.

    Each writer loads one *part* (a task's partition of the input): its documents get staging
    ids ``part << 32 | row`` (row counting from 0 in the part), and it records the part's
    row count in the same transaction. A retried or duplicated attempt of a part finds it
    recorded and writes nothing (see :meth:`claim`), so a part is loaded exactly once.
    :meth:`move` gives the documents consecutive ids from the index's sequence, in order of
    (part, row): the input's order.

    Tables: ``<name>_documents`` and ``<name>_signatures`` (the columns of documents and
    signatures), ``<name>_keys_<banding>`` (band, key, document_id), ``<name>_parts`` (part,
    rows) and ``<name>_rejected`` (external_id, problem; a null problem: an empty document).
    Unlogged: they are rebuilt by a rerun, never recovered.
    """

    def __init__(self, store: Store, name: str, bandings: Sequence[int]):
        if not SCHEMA_NAME.fullmatch(name):
            raise ParameterError(f"staging table name {name!r} is not a plain identifier")
        self._store, self.name, self.bandings = store, name, list(bandings)
        self._skipped = False  # skip_duplicates unstaged documents in this transaction

    def keys_table(self, banding: int) -> str:
        return f"{self.name}_keys_{int(banding)}"

    def _tables(self) -> list[str]:
        kinds = ["documents", "signatures", "parts", "rejected"]
        return [f"{self.name}_{kind}" for kind in kinds] + [
            self.keys_table(b) for b in self.bandings
        ]

    def create(self, connection: Connection) -> None:
        """Create the staging tables (and the index's schema, which a new index has not yet
        made: an empty schema is no index, and the index's creation takes it)."""
        run = connection.exec_driver_sql
        if self._store.schema is not None:
            run(f'CREATE SCHEMA IF NOT EXISTS "{self._store.schema}"')
        run(
            f"CREATE UNLOGGED TABLE {self.name}_documents (id BIGINT NOT NULL, "
            "external_id TEXT NOT NULL, content_hash BIGINT NOT NULL, "
            "shingle_count INTEGER NOT NULL, text TEXT, metadata JSONB, "
            "ingested_at TIMESTAMPTZ NOT NULL)"
        )
        run(
            f"CREATE UNLOGGED TABLE {self.name}_signatures "
            "(document_id BIGINT NOT NULL, minhashes BYTEA NOT NULL)"
        )
        for banding in self.bandings:
            run(
                f"CREATE UNLOGGED TABLE {self.keys_table(banding)} "
                "(band SMALLINT NOT NULL, key BIGINT NOT NULL, document_id BIGINT NOT NULL)"
            )
        run(
            f"CREATE UNLOGGED TABLE {self.name}_parts "
            "(part INTEGER PRIMARY KEY, rows BIGINT NOT NULL)"
        )
        run(f"CREATE UNLOGGED TABLE {self.name}_rejected (external_id TEXT, problem TEXT)")

    def drop(self) -> None:
        """Drop the staging tables (those that exist), in a transaction of their own."""
        with self._store.engine.connect() as connection, connection.begin():
            tables = ", ".join(self._tables())
            connection.exec_driver_sql(f"DROP TABLE IF EXISTS {tables}")

    def claim(self, connection: Connection, part: int) -> bool:
        """Whether this transaction is to load ``part``: False if an attempt has loaded it
        already. Attempts of one part take turns (a transaction-level advisory lock), so a
        second one waits for the first's commit or rollback."""
        lock = f"{zlib.crc32(self.name.encode()) & 0x7FFFFFFF}, {int(part)}"
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({lock})")
        loaded = connection.exec_driver_sql(
            f"SELECT count(*) FROM {self.name}_parts WHERE part = {int(part)}"
        ).scalar_one()
        return not loaded

    def write(
        self,
        connection: Connection,
        ids: np.ndarray,
        columns: dict[str, Any],
        sigs: np.ndarray,
        keys: dict[int, np.ndarray],
    ) -> None:
        """Documents with staging ``ids``: ``columns`` are insert_documents' arguments
        (external_ids, content_hashes, shingle_counts, texts, metadata, ingested_at),
        ``sigs`` their signatures and ``keys`` their band keys by banding (int64, (n, bands))."""
        self._store.insert_documents(connection, ids, **columns, table=f"{self.name}_documents")
        self._store.insert_signatures(connection, ids, sigs, table=f"{self.name}_signatures")
        for banding, banding_keys in keys.items():
            band, key, doc = _key_rows(banding_keys, ids)
            _copy_band_keys(connection, self.keys_table(banding), band, key, doc)

    def reject(self, connection: Connection, external_ids: list[str], problems: list) -> None:
        """Documents not loaded: why (None: empty after normalization)."""
        self._store._bulk_insert(
            connection,
            f"{self.name}_rejected",
            ["external_id", "problem"],
            zip(external_ids, problems, strict=True),
        )

    def finish_part(self, connection: Connection, part: int, rows: int) -> None:
        connection.exec_driver_sql(
            f"INSERT INTO {self.name}_parts (part, rows) VALUES ({int(part)}, {int(rows)})"
        )

    # -- the driver's side ----------------------------------------------------------------

    def parts(self, connection: Connection) -> dict[int, int]:
        """part -> rows loaded, of the parts loaded."""
        found = connection.exec_driver_sql(f"SELECT part, rows FROM {self.name}_parts")
        return {int(part): int(rows) for part, rows in found}

    def rejected(self, connection: Connection, limit: int) -> tuple[int, int, list[tuple]]:
        """(malformed documents, empty ones, the first ``limit`` rows (external_id, problem))."""
        malformed, empty = connection.exec_driver_sql(
            f"SELECT count(problem), count(*) - count(problem) FROM {self.name}_rejected"
        ).one()
        rows = connection.exec_driver_sql(
            f"SELECT external_id, problem FROM {self.name}_rejected "
            f"ORDER BY problem IS NULL, external_id LIMIT {int(limit)}"
        ).all()
        return int(malformed), int(empty), [tuple(r) for r in rows]

    def duplicates(self, connection: Connection, limit: int) -> tuple[int, int, list[str]]:
        """(external ids staged twice or more, staged ids already indexed, up to ``limit``
        examples of either)."""
        repeated = (
            f"SELECT external_id FROM {self.name}_documents GROUP BY external_id "
            "HAVING count(*) > 1"
        )
        existing = (
            f"SELECT s.external_id FROM {self.name}_documents s "
            "JOIN documents d ON d.external_id = s.external_id"
        )
        count = "SELECT count(*) FROM ({}) AS found"
        repeats = connection.exec_driver_sql(count.format(repeated)).scalar_one()
        indexed = connection.exec_driver_sql(count.format(existing)).scalar_one()
        examples = connection.exec_driver_sql(
            f"({existing} LIMIT {int(limit)}) UNION ({repeated} LIMIT {int(limit)}) "
            f"ORDER BY 1 LIMIT {int(limit)}"
        ).scalars()
        return int(repeats), int(indexed), list(examples)

    def skip_duplicates(self, connection: Connection) -> int:
        """Unstage the copies of external ids that are indexed already or staged earlier (the
        first copy in input order stays), and say how many went. The transaction's later
        moves leave out their signatures and band keys."""
        connection.exec_driver_sql(
            "CREATE TEMPORARY TABLE staged_skipped (id BIGINT PRIMARY KEY) ON COMMIT DROP"
        )
        skipped = connection.exec_driver_sql(
            f"WITH gone AS (DELETE FROM {self.name}_documents s WHERE EXISTS "
            "(SELECT FROM documents d WHERE d.external_id = s.external_id) OR EXISTS "
            f"(SELECT FROM {self.name}_documents e WHERE e.external_id = s.external_id "
            "AND e.id < s.id) RETURNING s.id) "
            "INSERT INTO staged_skipped SELECT id FROM gone"
        ).rowcount
        self._skipped = bool(skipped)
        return int(skipped)

    def move(self, connection: Connection) -> int:
        """Move the staged documents and signatures into the index, with new ids drawn from
        its sequence (the caller holds the writer lock); band keys follow through
        BandKeyWriter.insert_staged. Returns the number of documents moved."""
        parts = self.parts(connection)
        total = sum(parts.values())
        first = self._store.reserve_document_ids(connection, max(total, 1))
        # Per part, what turns a staging id into its new id.
        connection.exec_driver_sql(
            "CREATE TEMPORARY TABLE staged_offsets ON COMMIT DROP AS "
            f"SELECT part, {int(first)} + coalesce(sum(rows) OVER (ORDER BY part ROWS "
            "BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) - (part::BIGINT << 32) AS shift "
            f"FROM {self.name}_parts"
        )
        connection.exec_driver_sql(
            "INSERT INTO documents (id, external_id, content_hash, shingle_count, text, "
            "metadata, ingested_at) SELECT s.id + o.shift, s.external_id, s.content_hash, "
            "s.shingle_count, s.text, s.metadata, s.ingested_at "
            f"FROM {self.name}_documents s JOIN staged_offsets o ON o.part = s.id >> 32"
        )
        moved = connection.exec_driver_sql(
            "INSERT INTO signatures (document_id, minhashes) "
            f"SELECT s.document_id + o.shift, s.minhashes FROM {self.name}_signatures s "
            f"JOIN staged_offsets o ON o.part = s.document_id >> 32{self._kept('s.document_id')}"
        ).rowcount
        for table in ("documents", "signatures"):
            self._store.analyze(connection, table)
        return int(moved)

    def band_keys(self, banding: int) -> str:
        """A query of the staged band keys of ``banding`` as (band, key, document_id) with the
        documents' new ids (in the transaction of :meth:`move`)."""
        return (
            "SELECT s.band, s.key, s.document_id + o.shift AS document_id "
            f"FROM {self.keys_table(banding)} s JOIN staged_offsets o "
            f"ON o.part = s.document_id >> 32{self._kept('s.document_id')}"
        )

    def _kept(self, column: str) -> str:
        if not self._skipped:
            return ""
        return f" WHERE NOT EXISTS (SELECT FROM staged_skipped k WHERE k.id = {column})"


def _copy_band_keys(
    connection: Connection,
    table: str,
    band: np.ndarray,
    key: np.ndarray,
    document_id: np.ndarray,
    options: str = "",
) -> None:
    """COPY rows (band, key, document_id) into ``table`` in binary format."""
    tuples = np.empty(band.shape[0], dtype=_BAND_KEY_TUPLE)
    tuples["fields"] = 3
    tuples["band_len"], tuples["key_len"], tuples["doc_len"] = 2, 8, 8
    tuples["band"], tuples["key"], tuples["document_id"] = band, key, document_id
    _copy_binary(connection, f"{table} (band, key, document_id)", [tuples], options)


def _pair_tuple(exact: bool) -> np.dtype:
    """A pairs row in COPY's binary format; without ``exact``, exact_jaccard is NULL."""
    fields = [
        ("fields", ">i2"),
        ("banding_len", ">i4"), ("banding", ">i4"),
        ("a_len", ">i4"), ("doc_a", ">i8"),
        ("b_len", ">i4"), ("doc_b", ">i8"),
        ("estimated_len", ">i4"), ("estimated", ">f8"),
        ("exact_len", ">i4"),
    ]  # fmt: skip
    return np.dtype(fields + [("exact", ">f8")] if exact else fields)


def _signature_tuple(num_perm: int) -> np.dtype:
    return np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"), ("document_id", ">i8"),
            ("sig_len", ">i4"), ("minhashes", SIGNATURE_DTYPE, (num_perm,)),
        ]
    )  # fmt: skip


def _freeze(frozen: bool) -> str:
    """The option of a binary COPY that writes its rows frozen (see insert_documents)."""
    return ", FREEZE" if frozen else ""


def _copy_binary(
    connection: Connection,
    target: str,
    parts: Iterable[np.ndarray | bytes],
    options: str = "",
) -> None:
    """COPY target FROM STDIN (FORMAT BINARY) of tuples, part after part (each made as it is
    sent when ``parts`` is a generator): laid out by numpy (a structured array of field
    lengths and big-endian values) or already as bytes, so no Python runs per row here."""
    cursor = connection.connection.dbapi_connection.cursor()
    with cursor.copy(f"COPY {target} FROM STDIN (FORMAT BINARY{options})") as copy:
        copy.write(_PG_BINARY_HEADER)
        for part in parts:
            copy.write(part if isinstance(part, bytes) else part.tobytes())
        copy.write(_PG_BINARY_TRAILER)


def _document_tuples(
    ids: np.ndarray,
    external_ids: Sequence[str],
    content_hashes: Sequence[int],
    shingle_counts: np.ndarray,
    texts: Sequence[str | None],
    metadata_json: Sequence[str | None],
    ingested_at: datetime,
) -> bytes:
    """Documents as COPY ... (FORMAT BINARY) tuples: the fixed-width fields of every row laid
    out by numpy, the variable ones (UTF-8 text; jsonb is a version byte and the JSON text)
    joined between them by bytes.join, so no Python formats, escapes or parses a value."""
    n = len(external_ids)
    ext = [x.encode("utf-8") for x in external_ids]
    text = [b"" if t is None else t.encode("utf-8") for t in texts]
    meta = [b"" if m is None else b"\x01" + m.encode("utf-8") for m in metadata_json]
    head = np.empty(n, dtype=_DOCUMENT_HEAD)
    head["fields"], head["id_len"], head["id"] = 7, 8, ids
    head["external_id_len"] = [len(x) for x in ext]
    middle = np.empty(n, dtype=_DOCUMENT_MIDDLE)
    middle["hash_len"], middle["hash"] = 8, np.asarray(content_hashes, dtype=np.int64)
    middle["count_len"], middle["count"] = 4, shingle_counts
    middle["text_len"] = [-1 if t is None else len(b) for t, b in zip(texts, text, strict=True)]
    meta_len = np.array(
        [-1 if m is None else len(b) for m, b in zip(metadata_json, meta, strict=True)],
        dtype=">i4",
    )
    since_2000 = ingested_at - datetime(2000, 1, 1, tzinfo=UTC)
    tail = np.array([(8, since_2000 // timedelta(microseconds=1))], dtype=_DOCUMENT_TAIL)
    fields = zip(
        head.view(f"V{_DOCUMENT_HEAD.itemsize}").tolist(),
        ext,
        middle.view(f"V{_DOCUMENT_MIDDLE.itemsize}").tolist(),
        text,
        meta_len.view("V4").tolist(),
        meta,
        itertools.repeat(tail.tobytes(), n),
        strict=True,
    )
    return b"".join(itertools.chain.from_iterable(fields))


def _seconds(value: float | timedelta) -> str:
    """A duration (seconds or a timedelta) for messages: '2.5 s', '12 min', '1 h'."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"


def _parse_id_arrays(text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Lines of integer arrays in PostgreSQL's text format (b"{3,5}\\n{1,2,9}\\n"), or of
    SQLite's group_concat (b"3,5\\n1,2,9\\n"), as (members, offsets): array i holds
    ``members[offsets[i]:offsets[i + 1]]``."""
    chars = np.frombuffer(text, dtype=np.uint8)
    line_ends = np.flatnonzero(chars == ord("\n"))
    commas = np.flatnonzero(chars == ord(","))
    offsets = np.zeros(line_ends.shape[0] + 1, dtype=np.int64)
    offsets[1:] = np.searchsorted(commas, line_ends) + np.arange(1, line_ends.shape[0] + 1)
    members = np.fromstring(text.translate(_ARRAY_TEXT_SEPARATORS), dtype=np.int64, sep=" ")
    return members, offsets


def _grouped_chunks(
    result: sa.CursorResult, chunk_size: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The buckets of a SQLite grouping's rows (each bucket's ids, group_concat's text),
    ``chunk_size`` rows at a time, as (members, offsets) (see _parse_id_arrays)."""
    for partition in result.partitions(chunk_size):
        yield _parse_id_arrays(("\n".join(g for (g,) in partition) + "\n").encode())


def _listed_integers(text: str | None) -> np.ndarray:
    """The integers of a comma-separated text (Store._listed; None: no rows), as int64."""
    return np.fromstring(text or "", dtype=np.int64, sep=",")


def _int_rows(rows: Sequence[Sequence[int]], columns: int) -> np.ndarray:
    """Result rows of integers as an int64 array of shape (len(rows), columns); read value
    by value (np.array() of Row objects probes each row for array attributes, slowly)."""
    values = itertools.chain.from_iterable(rows)
    return np.fromiter(values, dtype=np.int64, count=len(rows) * columns).reshape(-1, columns)


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _take_texts(
    data: np.ndarray, lengths: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated texts (``data``, text i of ``lengths[i]`` bytes) in the given order:
    (data, offsets (int64, n + 1)), gathered in one indexing (an int64 index per byte)."""
    starts = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    taken = lengths[order]
    offsets = np.zeros(order.shape[0] + 1, dtype=np.int64)
    np.cumsum(taken, out=offsets[1:])
    # Byte j of taken text i sits at starts[order[i]] + (j - offsets[i]).
    shift = np.repeat(starts[order] - offsets[:-1], taken)
    return data[shift + np.arange(offsets[-1], dtype=np.int64)], offsets
