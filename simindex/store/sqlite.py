"""SQLite, the embedded backend: one file, writers take turns by BEGIN IMMEDIATE, readers
read WAL snapshots; bulk writes are multi-row INSERTs in large transactions."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection, func, select

from simindex.errors import DatabaseError
from simindex.spec import SIGNATURE_DTYPE
from simindex.store.base import Store, log
from simindex.store.documents import OTHER_LENGTH
from simindex.store.rows import (
    duration_text,
    grouped_chunks,
    in_chunks,
    key_rows,
    listed_integers,
)
from simindex.store.schema import band_keys, bandings
from simindex.store.urls import journal_mode

# Signatures one statement returns as one blob (see signatures_where_ids), far below
# SQLite's limit of 1 GB on a value.
MAX_SELECTED = 100_000
# The page cache (KiB) of the connection that stores verified pairs, while it does: the
# pairs land all over the pairs' two indexes, which the default cache (2,000) can't hold.
SQLITE_PAIRS_CACHE_KIB = 32 * 1024
# A WAL file at least this large after a write transaction: the pooled connections are
# closed (see after_write).
WAL_RELEASE_BYTES = 64 * 2**20
# How long a write committed in parts waits for another writer between two parts (at least):
# giving up would throw away the parts committed before.
PART_LOCK_TIMEOUT = 3600.0
# Rows per INSERT of documents, signatures, pairs and clusters (seven bound parameters a row
# at most, within SQLite's 32,766), and of band keys (two each): one statement of many rows
# crosses from Python into SQLite once for all of them.
_SQLITE_ROWS = 100
_SQLITE_KEY_ROWS = 250
# Errors that come from the environment (file, disk, locks), not from simindex.
_USER_ERRORS = (
    "unable to open database",
    "disk I/O error",
    "database or disk is full",
    "attempt to write a readonly database",
)
# Errors of a file that is damaged or not a database at all.
_DAMAGE = ("file is not a database", "database disk image is malformed")


class SQLiteStore(Store):
    """An index in a SQLite file."""

    dialect = "sqlite"
    elsewhere = "another file with --db"
    commits_in_parts = True
    text_bytes_sql = "length(CAST(text AS BLOB))"
    bucket_ids_sql = "group_concat({})"
    list_sql = "group_concat({})"

    @property
    def path(self) -> str | None:
        """The index's file, or None for one named by a file: URI (with options of its own)."""
        url = self.engine.url
        return None if url.query.get("uri") else url.database

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def creating(self) -> Iterator[None]:
        """A file that the creating transaction makes is removed if the transaction fails,
        so that a failed first load leaves no empty database behind."""
        path = self.path
        new = path is not None and not os.path.exists(path)
        try:
            yield
        except BaseException:
            if new:
                self.engine.dispose()
                for suffix in ("", "-wal", "-shm", "-journal"):
                    if os.path.exists(path + suffix):
                        os.remove(path + suffix)
            raise

    def current_state(self):
        """No file is no index (and reading its state would make the file)."""
        path = self.path
        if path is not None and not os.path.exists(path):
            return "none"
        return super().current_state()

    @contextmanager
    def load_mode(self, connection: Connection, load: bool) -> Iterator[None]:
        """A load into a SQLite index with no documents yet runs with a rollback journal,
        holding the database whole (BEGIN EXCLUSIVE), then WAL mode comes back. In the WAL
        every page the load writes is written twice (into the WAL, then by the checkpoint
        into the file), and each page the cache lacks is looked up in a WAL index that
        grows with the transaction; a rollback journal keeps only the pages that existed
        before the load, which an empty index hardly has. Readers of an empty index lose
        nothing by waiting for it. When another connection has the file open,
        the mode can't change and the load runs in the WAL as any write does."""
        if not load or self._holds_documents(connection):
            yield
            return
        self.engine.dispose()  # the pool's idle connections, which would keep the WAL open
        dbapi = connection.connection.dbapi_connection
        if journal_mode(dbapi, "DELETE") != "delete":
            yield
            return
        connection.execution_options(simindex_lock="EXCLUSIVE")  # this connection's last
        try:
            yield
        finally:
            journal_mode(dbapi, "WAL")  # if a reader is waiting, its connection does it

    @staticmethod
    def _holds_documents(connection: Connection) -> bool:
        """Whether a SQLite index has documents, asked outside a transaction (the driver
        begins none: urls.configure_sqlite); False before its tables exist."""
        dbapi = connection.connection.dbapi_connection
        try:
            return dbapi.execute("SELECT 1 FROM documents LIMIT 1").fetchone() is not None
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return False

    def begin_write(self, connection: Connection) -> sa.RootTransaction:
        """BEGIN IMMEDIATE (see urls.configure_sqlite): a writer takes the write lock up front,
        so what it reads (e.g. max(id)) stays true."""
        self._wait_for_writer(connection)
        try:
            return connection.begin()
        except sa.exc.OperationalError as exc:
            if "database is locked" in str(exc.orig):
                raise self.lock_timeout_error("another writer") from None
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
        self._wait_for_writer(connection, timeout)
        dbapi = connection.connection.dbapi_connection
        try:
            dbapi.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "database is locked" in str(exc):
                raise self.lock_timeout_error("another writer", timeout) from None
            raise
        dbapi.execute(f"PRAGMA busy_timeout = {int(self.lock_timeout * 1000)}")

    def _wait_for_writer(self, connection: Connection, timeout: float | None = None) -> None:
        """Say so if another writer holds the database, and wait for it up to ``timeout``
        (lock_timeout if None): SQLite's busy_timeout bounds BEGIN IMMEDIATE, whose failure
        lock_timeout_error explains."""
        timeout = self.lock_timeout if timeout is None else timeout
        dbapi = connection.connection.dbapi_connection
        dbapi.execute("PRAGMA busy_timeout = 0")
        try:
            dbapi.execute("BEGIN IMMEDIATE")
            dbapi.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if "database is locked" not in str(exc):
                raise  # e.g. a read-only file: user_error says so
            if not timeout:
                raise self.lock_timeout_error("another writer", timeout) from None
            log.warning(
                "Waiting up to %s for another writer of the database to finish",
                duration_text(timeout),
            )
        dbapi.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")

    def after_write(self) -> None:
        """After a large write to SQLite: its WAL file holds every page the transaction wrote
        (gigabytes for millions of documents), and each pooled connection keeps the WAL's
        index mapped (counted in the process's memory). Close the
        pooled connections: the mappings go, and the last connection to the database (unless
        another process has it open) copies the WAL into it and removes the file. Never waits
        for another process's readers, as a checkpoint that truncates would."""
        wal = f"{self.engine.url.database}-wal"
        if os.path.exists(wal) and os.path.getsize(wal) >= WAL_RELEASE_BYTES:
            self.engine.dispose()

    def user_error(self, exc: Exception, reason: str, url: str) -> DatabaseError | None:
        if reason == "database is locked":
            return DatabaseError(
                f"database {url} is locked by another process (a first load into an "
                "empty SQLite index holds the whole file until it commits): try again "
                "when it is done"
            )
        if reason.startswith(_DAMAGE):
            return DatabaseError(
                f"{url} is not a usable SQLite database ({reason}): give the right --db, "
                "or restore the file from a backup"
            )
        if reason.startswith(_USER_ERRORS):
            return DatabaseError(
                f"database {url} failed: {reason}. Check the file's path and "
                "permissions, and the free disk space"
            )
        return None

    # -- documents and signatures ----------------------------------------------------------

    def allocate_document_ids(self, connection: Connection, count: int) -> np.ndarray:
        # AUTOINCREMENT: never below an id handed out before, even if it was deleted; the
        # write transaction holds the lock.
        used = connection.exec_driver_sql(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'documents'), 0),"
            " coalesce((SELECT max(id) FROM documents), 0))"
        ).scalar_one()
        start = int(used)
        return np.arange(start + 1, start + 1 + count, dtype=np.int64)

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
        # With microseconds, in SQLAlchemy's text format, so that comparisons with bound
        # datetimes are right.
        stamp = ingested_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        rows = zip(
            ids.tolist(),
            external_ids,
            content_hashes,
            shingle_counts.tolist(),
            texts,
            [None if m is None else json.dumps(m) for m in metadata],
            itertools.repeat(stamp, len(ids)),
            strict=False,
        )
        columns = ["id", "external_id", "content_hash", "shingle_count", "text", "metadata",
                   "ingested_at"]  # fmt: skip
        self.bulk_insert(connection, table, columns, rows)

    def insert_signatures(
        self,
        connection: Connection,
        ids: np.ndarray,
        sigs: np.ndarray,
        table: str = "signatures",
        frozen: bool = False,
    ) -> None:
        packed = np.ascontiguousarray(sigs, dtype=SIGNATURE_DTYPE)
        rows = zip(ids.tolist(), (row.tobytes() for row in packed), strict=True)
        self.bulk_insert(connection, table, ["document_id", "minhashes"], rows)

    def bulk_insert(
        self, connection: Connection, table: str, columns: list[str], rows: Iterable[Sequence]
    ) -> None:
        cursor = connection.connection.dbapi_connection.cursor()
        _sqlite_inserts(
            cursor,
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ",
            f"({', '.join('?' for _ in columns)})",
            list(itertools.chain.from_iterable(rows)),
            _SQLITE_ROWS,
        )
        cursor.close()

    def signatures_where_ids(
        self, connection: Connection, ids: np.ndarray, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        found, matrix = [np.empty(0, np.int64)], [np.empty((0, num_perm), np.uint32)]
        for chunk in in_chunks(ids, MAX_SELECTED):
            among, params = self._among(chunk, "BIGINT")
            some = self._aggregated_signatures(connection, f"document_id {among}", params, num_perm)
            found.append(some[0])
            matrix.append(some[1])
        return np.concatenate(found), np.concatenate(matrix)

    def signatures_after(
        self, connection: Connection, last: int, rows: int, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        where = "document_id > :last ORDER BY document_id LIMIT :rows"
        return self._aggregated_signatures(
            connection, where, {"last": last, "rows": rows}, num_perm
        )

    def _aggregated_signatures(
        self, connection: Connection, where: str, params: dict, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(document ids, signatures as (n, num_perm) uint32) of the rows ``where`` selects
        (our SQL, with ``params``), sorted by id. The rows come back as one row of
        aggregates (ids as text, the signatures concatenated as one blob): a row at a time,
        each would take and give back the GIL, which the threads that verify and store
        pairs beside these reads hold most of the time."""
        statement = (
            "SELECT group_concat(document_id), min(length(minhashes)), max(length(minhashes)), "
            "CAST(group_concat(minhashes, '') AS BLOB) "
            f"FROM (SELECT document_id, minhashes FROM signatures WHERE {where}) AS s"
        )
        ids, shortest, longest, blob = connection.execute(sa.text(statement), params).one()
        if ids is None:
            return np.empty(0, np.int64), np.empty((0, num_perm), np.uint32)
        if shortest != 4 * num_perm or longest != 4 * num_perm:
            raise DatabaseError(OTHER_LENGTH)
        found = listed_integers(ids)
        matrix = np.frombuffer(blob, dtype=SIGNATURE_DTYPE).reshape(-1, num_perm)
        if (np.diff(found) < 0).any():  # an aggregate takes its subquery's order by rule only
            order = np.argsort(found)
            return found[order], matrix[order].astype(np.uint32)
        return found, matrix.astype(np.uint32)

    def utf8_rows(
        self, connection: Connection, among: str, params: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        statement = (
            "SELECT group_concat(id), group_concat(length(t)), "
            "CAST(group_concat(t, '') AS BLOB) FROM (SELECT id, "
            f"CAST(coalesce(text, '') AS BLOB) AS t FROM documents WHERE id {among} "
            "ORDER BY id) AS s"
        )
        found, lengths, data = connection.execute(sa.text(statement), params).one()
        return (
            listed_integers(found),
            listed_integers(lengths),
            np.frombuffer(data or b"", np.uint8),
        )

    def bucket_documents_join(self, few: str) -> str:
        return f"LEFT JOIN documents d ON d.id = s.document_id AND {few}"

    def storage_problems(self, connection: Connection) -> list[str]:
        """PRAGMA quick_check's findings (at most ten)."""
        rows = connection.exec_driver_sql("PRAGMA quick_check(10)").scalars()
        found = [line for row in rows for line in row.splitlines() if not line.startswith("***")]
        if found == ["ok"]:
            return []
        return [f"the database file is damaged: {finding}" for finding in found]

    def stored_time(self, moment: datetime) -> datetime:
        return moment.astimezone(UTC).replace(tzinfo=None)  # stored as naive UTC text

    # -- bandings --------------------------------------------------------------------------

    def new_banding_id(self, connection: Connection) -> int | None:
        """One above any banding's and any band key's: SQLite would give the largest id
        again, not one whose band keys are still there, retired (see drop_banding)."""
        taken = [select(func.max(bandings.c.id)), select(func.max(band_keys.c.banding_id))]
        return 1 + max(connection.scalar(query) or 0 for query in taken)

    def retired_bandings(self, connection: Connection) -> list[int]:
        # band_keys' banding ids, each found through its key
        kept = set(connection.execute(select(bandings.c.id)).scalars())
        retired, after = [], 0
        next_id = select(func.min(band_keys.c.banding_id))
        while found := connection.scalar(next_id.where(band_keys.c.banding_id > after)):
            after = int(found)
            if after not in kept:
                retired.append(after)
        return retired

    def drop_retired_bandings(self, attempts: int | None = None) -> list[int]:
        """Delete the band keys of retired bandings a band at a time, each band in a write
        transaction of its own, so the WAL holds one band's pages at a time (while no reader
        keeps an older snapshot). Run by the command that retired them, after its commit;
        one stopped midway, or kept waiting past lock_timeout by another writer (logged),
        leaves the rest retired (used by nothing, listed by stats) for `drop-banding ID` to
        delete: the command's own change is committed already."""
        while True:
            try:
                with self.write() as connection:
                    retired = self.retired_bandings(connection)
                    if not retired:
                        return []
                    where = band_keys.c.banding_id == retired[0]
                    band = connection.scalar(select(func.min(band_keys.c.band)).where(where))
                    connection.execute(band_keys.delete().where(where, band_keys.c.band == band))
            except DatabaseError as exc:  # the lock wait (write) gave up
                log.warning("The band keys of retired bandings stay, to be deleted later: %s", exc)
                return []

    def write_band_key_rows(
        self,
        connection: Connection,
        table: str,
        banding_id: int,
        rows: tuple[np.ndarray, np.ndarray, np.ndarray],
        new_table: bool,
    ) -> None:
        """_SQLITE_KEY_ROWS rows per INSERT, the banding and the band written into the
        statement (one statement per band in the rows)."""
        band, key, document_id = rows
        cursor = connection.connection.dbapi_connection.cursor()
        values = np.column_stack((key, document_id))
        bounds = [0, *(np.flatnonzero(np.diff(band)) + 1).tolist(), band.shape[0]]
        insert = f"INSERT INTO {table} (banding_id, band, key, document_id) VALUES "
        for start, end in itertools.pairwise(bounds):
            row = f"({int(banding_id)}, {int(band[start])}, ?, ?)"
            flat = values[start:end].reshape(-1).tolist()
            _sqlite_inserts(cursor, insert, row, flat, _SQLITE_KEY_ROWS)
        cursor.close()

    # -- candidates and pairs --------------------------------------------------------------

    def banding_buckets(
        self, connection: Connection, banding_id: int, chunk_size: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        statement = (
            "SELECT group_concat(document_id) FROM band_keys WHERE banding_id = :banding_id "
            "GROUP BY band, key HAVING count(*) > 1"
        )
        result = connection.execute(
            sa.text(statement),
            {"banding_id": banding_id},
            execution_options={"stream_results": True, "yield_per": chunk_size},
        )
        yield from grouped_chunks(result, chunk_size)

    def _among(self, values: list, sql_type: str) -> tuple[str, dict[str, Any]]:
        return "IN (SELECT value FROM json_each(:among))", {"among": json.dumps(values)}

    def _rows_source(
        self, columns: dict[str, Sequence[Any]], sql_type: str = "BIGINT"
    ) -> tuple[str, dict[str, Any]]:
        names = list(columns)
        values = [np.asarray(column) for column in columns.values()]
        fields = ", ".join(
            f"json_extract(value, '$[{i}]') AS {name}" for i, name in enumerate(names)
        )
        rows = json.dumps(np.column_stack(values).tolist())
        return f"(SELECT {fields} FROM json_each(:wanted)) AS wanted", {"wanted": rows}

    @contextmanager
    def pair_inserts(self, connection: Connection) -> Iterator[None]:
        """With a page cache of SQLITE_PAIRS_CACHE_KIB, set back to the connection's own after."""
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
        exact_values = itertools.repeat(None) if exact is None else exact.tolist()
        rows = zip(
            itertools.repeat(banding_id),
            doc_a.tolist(),
            doc_b.tolist(),
            estimated.tolist(),
            exact_values,
            strict=False,
        )
        columns = ["banding_id", "doc_a", "doc_b", "estimated_jaccard", "exact_jaccard"]
        while chunk := list(itertools.islice(rows, 100_000)):
            self.bulk_insert(connection, "pairs", columns, chunk)

    def delete_band_keys(
        self, connection: Connection, banding_id: int, document_ids: np.ndarray, keys: np.ndarray
    ) -> None:
        band, key, document_id = key_rows(keys, document_ids)
        source, params = self._rows_source({"band": band, "key": key, "document_id": document_id})
        statement = (
            "DELETE FROM band_keys WHERE banding_id = :banding_id "
            f"AND (band, key, document_id) IN (SELECT band, key, document_id FROM {source})"
        )
        connection.execute(sa.text(statement), {**params, "banding_id": banding_id})


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
