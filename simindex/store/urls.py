"""Database URLs and engines: what the user typed, as SQLAlchemy URL and configured engine.

A URL is a SQLite file path (or sqlite:///path) or a postgresql:// URL; passwords never
appear in messages (display_url).
"""

from __future__ import annotations

import os
import re
import sqlite3
import urllib.parse

import sqlalchemy as sa
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url

from simindex.defaults import application_name
from simindex.errors import DatabaseError, NoIndexError, ParameterError

DEFAULT_PATH = "simindex.db"
# How long a SQLite statement waits for a lock before it fails (writers wait by lock_timeout).
SQLITE_BUSY_TIMEOUT_MS = 30_000

# Bytes per page of a new SQLite index (SQLite's default: 4,096; an existing file keeps its
# own): a large write looks each page up among the frames it wrote before, a cost that grows
# with the square of its frames, so larger pages make fewer frames.
SQLITE_PAGE_SIZE = 16_384

# Query parameters that carry a secret in a PostgreSQL URL (libpq's names).
_SECRET_PARAMETERS = {"password", "sslpassword"}

# A schema name simindex accepts: lower-case letters, digits and _, as PostgreSQL folds
# unquoted names, so the name in SQL and in --schema are the same.
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


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
        configure_sqlite(engine)
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
            raise NoIndexError(f"there is no database file {path}: check the path")
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


def configure_sqlite(engine: Engine) -> None:
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
        # the WAL (SQLiteStore.load_mode) the mode can't change, and its end changes it back.
        journal_mode(dbapi_connection, "WAL")

    @event.listens_for(engine, "begin")
    def _begin(connection):
        # A writer takes the write lock up front, so what it reads (e.g. max(id)) stays true;
        # a load without the WAL (SQLiteStore.load_mode) takes the database whole.
        options = connection.get_execution_options()
        lock = options.get("simindex_lock", "IMMEDIATE") if options.get("simindex_write") else ""
        connection.exec_driver_sql(f"BEGIN {lock}")


def journal_mode(dbapi_connection: sqlite3.Connection, mode: str) -> str | None:
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


_SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def database_files(db: str | os.PathLike[str] | None) -> list[str]:
    """The files a SQLite database URL stands for (none for PostgreSQL or :memory:)."""
    try:
        url = database_url(db)
    except DatabaseError:  # not a usable URL: opening the database says so
        return []
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return []
    return [url.database + suffix for suffix in _SQLITE_SIDE_FILES]
