"""PostgreSQL, the production backend: writers take turns by an advisory lock, readers read
REPEATABLE READ snapshots; bulk writes are binary COPY, each banding's band keys a partition."""

from __future__ import annotations

import itertools
import json
import re
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection

from simindex.errors import DatabaseError
from simindex.spec import SIGNATURE_DTYPE
from simindex.store.base import Store, log, psycopg_errors
from simindex.store.documents import OTHER_LENGTH
from simindex.store.pgcopy import (
    PG_BINARY_HEADER,
    PG_BINARY_TRAILER,
    copy_band_keys,
    copy_binary,
    document_tuples,
    freeze,
    pair_tuple,
    signature_tuple,
)
from simindex.store.rows import duration_text, key_rows, parse_id_arrays

if TYPE_CHECKING:
    from simindex.store.staging import StagedLoad

WRITER_LOCK = 0x51D1DE  # the advisory lock key that serializes simindex writers
# Dropping a retired banding's partition makes new queries queue behind it: each attempt
# gives up after this long, and so many attempts are made, this far apart.
DROP_LOCK_TIMEOUT_MS = 200
DROP_ATTEMPTS = 5
DROP_PAUSE = 0.5
# Characters of text per part of a COPY of documents (each part is laid out, then sent).
COPY_TEXT_CHARS = 2**20
# Sort memory for building a bulk-loaded partition's primary key (this transaction only):
# about what an in-memory sort of its rows takes (BULK_INDEX_BYTES_PER_ROW), within these
# bounds. Rows that arrive sorted and fit are built in one pass without parallel workers
# (their runs would go through temporary files to be merged); more rows than fit in the
# largest are sorted externally, by parallel workers too.
BULK_INDEX_MEMORY = (256 * 2**20, 1024 * 2**20)
BULK_INDEX_BYTES_PER_ROW = 80
_REPEATED_KEY = re.compile(r"Key \(external_id\)=\((.*)\) already exists\.", re.DOTALL)


class PostgresStore(Store):
    """An index in a PostgreSQL database (in ``schema``, if given)."""

    dialect = "postgresql"
    elsewhere = "another database with --db, or --schema NAME"
    unique_index_checks = True
    signature_pass_while_grouping = True
    text_bytes_sql = "octet_length(text)"
    bucket_ids_sql = "array_agg({})::text"
    list_sql = "string_agg(CAST({} AS text), ',')"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._band_keys_exist = False  # learnt by read(); an index's tables are never dropped

    def begin_snapshot(self, connection: Connection) -> None:
        """REPEATABLE READ (the active banding and its band keys come from the same moment),
        holding ACCESS SHARE on band_keys, so the partition of a banding a re-band just
        retired is not dropped under it (a dropped table is gone for every snapshot)."""
        # In one round trip once band_keys is known to exist (a point query's latency is
        # mostly round trips).
        snapshot = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
        lock = "LOCK TABLE band_keys IN ACCESS SHARE MODE"
        if self._band_keys_exist:
            connection.exec_driver_sql(f"{snapshot}; {lock}")
            return
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

    @contextmanager
    def statement(self) -> Iterator[Connection]:
        """In autocommit, which saves the BEGIN and COMMIT round trips; each statement holds
        its locks (band_keys' among them) until it ends."""
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            yield connection

    def _writer_lock_key(self) -> str:
        """The advisory lock's two keys, as SQL: one lock per index (schema), so the
        indexes of one database don't wait for each other."""
        return f"{WRITER_LOCK}, {zlib.crc32((self.schema or '').encode()) & 0x7FFFFFFF}"

    def _try_writer_lock(self, connection: Connection) -> bool:
        """Take the writer lock for the transaction if it is free."""
        lock = self._writer_lock_key()
        return connection.exec_driver_sql(f"SELECT pg_try_advisory_xact_lock({lock})").scalar_one()

    def take_writer_lock(self, connection: Connection) -> None:
        """A transaction-level advisory lock, so two ingests of overlapping ids can't both
        pass the duplicate check, and pairs found while documents arrive stay consistent."""
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
            who = (
                f"{name or 'a client'} (pid {pid}, in its transaction for {duration_text(running)})"
            )
        if not self.lock_timeout:
            raise self.lock_timeout_error(who)
        log.warning(
            "Waiting up to %s for the index's writer lock, held by %s",
            duration_text(self.lock_timeout),
            who,
        )
        milliseconds = max(1, round(self.lock_timeout * 1000))  # 0 would mean no limit
        connection.exec_driver_sql(f"SET LOCAL lock_timeout = {milliseconds}")
        try:
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({lock})")
        except sa.exc.OperationalError as exc:
            import psycopg

            if isinstance(exc.orig, psycopg.errors.LockNotAvailable):
                raise self.lock_timeout_error(who) from None
            raise
        connection.exec_driver_sql("RESET lock_timeout")

    def after_write(self) -> None:
        """Drop the partitions of retired bandings if that can be done at once."""
        self.drop_retired_bandings(attempts=1)

    def user_error(self, exc: Exception, reason: str, url: str) -> DatabaseError | None:
        operational = (sa.exc.OperationalError, sa.exc.InterfaceError)
        if isinstance(exc, (*operational, *psycopg_errors("OperationalError", "InterfaceError"))):
            return DatabaseError(
                f"database {url} failed: {reason}. Is the server running, the URL right and "
                "the disk not full? (a local PostgreSQL: `docker compose up -d`)"
            )
        return None

    def allocate_document_ids(self, connection: Connection, count: int) -> np.ndarray:
        first = self.reserve_document_ids(connection, count)
        return np.arange(first, first + count, dtype=np.int64)

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
        """By binary COPY, laid out a part at a time, each of about COPY_TEXT_CHARS of text.
        ``frozen``: COPY ... FREEZE; otherwise the first reader of each row sets its commit
        hint bits, dirtying the page, which the server writes out again when it evicts it
        (tests/db/test_postgres.py counts the pages)."""
        from simindex.pipeline.chunking import spans

        columns = ["id", "external_id", "content_hash", "shingle_count", "text", "metadata",
                   "ingested_at"]  # fmt: skip
        metadata_json = [None if m is None else json.dumps(m) for m in metadata]
        sizes = np.fromiter((len(t or "") for t in texts), np.int64, len(texts))
        rows = (
            document_tuples(
                ids[lo:hi], external_ids[lo:hi], content_hashes[lo:hi],
                shingle_counts[lo:hi], texts[lo:hi], metadata_json[lo:hi], ingested_at,
            )
            for lo, hi in spans(np.cumsum(sizes), COPY_TEXT_CHARS)
        )  # fmt: skip
        copy_binary(connection, f"{table} ({', '.join(columns)})", rows, freeze(frozen))

    def defer_content_hash_index(self, connection: Connection, created_here: bool) -> bool:
        """Only when the table was ``created_here``: elsewhere the drop would lock readers out
        of documents until the load commits."""
        return created_here and super().defer_content_hash_index(connection, created_here)

    def repeated_external_id(self, error: Exception) -> str | None:
        """From PostgreSQL's error detail ("Key (external_id)=(x) already exists."); None
        for any other error, or a detail in another language (lc_messages)."""
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
        packed = np.ascontiguousarray(sigs, dtype=SIGNATURE_DTYPE)
        tuples = np.empty(len(ids), dtype=signature_tuple(packed.shape[1]))
        tuples["fields"], tuples["id_len"], tuples["sig_len"] = 2, 8, packed.shape[1] * 4
        tuples["document_id"] = ids
        tuples["minhashes"] = packed
        copy_binary(connection, f"{table} (document_id, minhashes)", [tuples], freeze(frozen))

    def bulk_insert(
        self, connection: Connection, table: str, columns: list[str], rows: Iterable[Sequence]
    ) -> None:
        cursor = connection.connection.dbapi_connection.cursor()
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def signatures_where_ids(
        self, connection: Connection, ids: np.ndarray, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        listed = ",".join(map(str, ids.tolist()))  # integers only: COPY takes no parameters
        where = f"document_id = ANY('{{{listed}}}'::bigint[])"
        return self._copied_signatures(connection, where, num_perm)

    def signatures_after(
        self, connection: Connection, last: int, rows: int, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        where = f"document_id > {int(last)} ORDER BY document_id LIMIT {int(rows)}"
        return self._copied_signatures(connection, where, num_perm)

    def _copied_signatures(
        self, connection: Connection, where: str, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(document ids, signatures as (n, num_perm) little-endian uint32) of
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
        body = memoryview(data)[len(PG_BINARY_HEADER) : -len(PG_BINARY_TRAILER)]
        row = signature_tuple(num_perm)
        if len(body) % row.itemsize:
            raise DatabaseError(OTHER_LENGTH)
        rows = np.frombuffer(body, dtype=row)
        if (rows["fields"] != 2).any() or (rows["sig_len"] != 4 * num_perm).any():
            raise DatabaseError(OTHER_LENGTH)
        return rows["document_id"].astype(np.int64), rows["minhashes"]

    def utf8_rows(
        self, connection: Connection, among: str, params: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        text = "convert_to(coalesce(text, ''), 'UTF8')"
        statement = (
            "SELECT string_agg(int8send(id), ''), string_agg(int4send(octet_length(t)), ''), "
            f"string_agg(t, '') FROM (SELECT id, {text} AS t FROM documents WHERE id {among} "
            "ORDER BY id) AS s"
        )
        found, lengths, data = connection.execute(sa.text(statement), params).one()
        return (
            np.frombuffer(found or b"", ">i8").astype(np.int64),
            np.frombuffer(lengths or b"", ">i4").astype(np.int64),
            np.frombuffer(data or b"", np.uint8),
        )

    def bucket_documents_join(self, few: str) -> str:
        # Documents are read only when ``few`` holds as a WHERE of its own (a one-time
        # filter), not as a condition of the join (tested on each joined row).
        return (
            "LEFT JOIN LATERAL (SELECT external_id, text FROM documents WHERE id = "
            f"s.document_id AND {few}) AS d ON true"
        )

    def retired_bandings(self, connection: Connection) -> list[int]:
        """Partitions of band_keys whose banding has no row."""
        rows = connection.exec_driver_sql(
            "SELECT substr(c.relname, length('band_keys_') + 1)::int AS banding_id "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass('band_keys') "
            "AND NOT EXISTS (SELECT FROM bandings b WHERE c.relname = 'band_keys_' || b.id) "
            "ORDER BY 1"
        )
        return [int(i) for (i,) in rows]

    def drop_retired_bandings(self, attempts: int | None = None) -> list[int]:
        """Drop the partitions of retired bandings, each attempt in a short
        transaction that gives up after DROP_LOCK_TIMEOUT_MS: a reader that holds band_keys
        (an analyst's open transaction) would otherwise make the DROP, and every query
        behind it, wait without limit. Skipped while another writer works (it drops them
        when it ends). Returns the ids still retired. ``attempts``: DROP_ATTEMPTS if None."""
        retired: list[int] = []
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
                        f"DROP TABLE {', '.join(partition(i) for i in retired)}"
                    )
                    return []
            except sa.exc.OperationalError as exc:
                import psycopg

                if not isinstance(exc.orig, psycopg.errors.LockNotAvailable):
                    raise
        return retired

    def banding_buckets(
        self, connection: Connection, banding_id: int, chunk_size: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """By COPY ... TO STDOUT: the server
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
                    yield parse_id_arrays(b"".join(rows))
        finally:
            cursor.close()
            run("RESET enable_hashagg")
            run("RESET enable_sort")

    def _among(self, values: list, sql_type: str) -> tuple[str, dict[str, Any]]:
        return f"= ANY(CAST(:among AS {sql_type}[]))", {"among": values}

    def _rows_source(
        self, columns: dict[str, Sequence[Any]], sql_type: str = "BIGINT"
    ) -> tuple[str, dict[str, Any]]:
        names = list(columns)
        arrays = ", ".join(f"CAST(:{name} AS {sql_type}[])" for name in names)
        return (
            f"unnest({arrays}) AS wanted({', '.join(names)})",
            {name: np.asarray(column).tolist() for name, column in columns.items()},
        )

    def analyze(self, connection: Connection, table: str) -> None:
        """Autovacuum analyzes a table later or never (a server may run without it), and
        until then its queries are planned for a few thousand rows, not millions (the
        listing of clusters, a new banding's GROUP BY)."""
        connection.exec_driver_sql(f"ANALYZE {table}")

    def insert_pairs(
        self,
        connection: Connection,
        banding_id: int,
        doc_a: np.ndarray,
        doc_b: np.ndarray,
        estimated: np.ndarray,
        exact: np.ndarray | None,
    ) -> None:
        tuples = np.empty(len(doc_a), dtype=pair_tuple(exact is not None))
        tuples["fields"], tuples["banding_len"], tuples["banding"] = 5, 4, banding_id
        tuples["a_len"], tuples["b_len"], tuples["estimated_len"] = 8, 8, 8
        tuples["doc_a"], tuples["doc_b"], tuples["estimated"] = doc_a, doc_b, estimated
        tuples["exact_len"] = -1 if exact is None else 8  # -1: NULL, no value follows
        if exact is not None:
            tuples["exact"] = exact
        columns = "banding_id, doc_a, doc_b, estimated_jaccard, exact_jaccard"
        copy_binary(connection, f"pairs ({columns})", [tuples])

    def delete_band_keys(
        self, connection: Connection, banding_id: int, document_ids: np.ndarray, keys: np.ndarray
    ) -> None:
        band, key, document_id = key_rows(keys, document_ids)
        source, params = self._rows_source({"band": band, "key": key, "document_id": document_id})
        statement = (
            f"DELETE FROM band_keys k USING {source} WHERE k.banding_id = :banding_id "
            "AND k.band = wanted.band AND k.key = wanted.key "
            "AND k.document_id = wanted.document_id"
        )
        connection.execute(sa.text(statement), {**params, "banding_id": banding_id})

    def staged_load(self, name: str, bandings: Sequence[int]) -> StagedLoad:
        """The staging tables ``name``_* of a load by many writers (see StagedLoad), for band
        keys of the given bandings (a key per banding: ids, or positions before an index and
        its bandings exist)."""
        from simindex.store.staging import StagedLoad

        return StagedLoad(self, name, bandings)

    # -- band keys: a partition per banding ------------------------------------------------

    def band_key_table(
        self, connection: Connection, banding_id: int, bulk: bool
    ) -> tuple[str, bool]:
        """The banding's partition. One that does not exist yet (a first ingest, a re-band)
        is, in ``bulk``, a new table without indexes, loaded by COPY ... FREEZE (so the rows
        are all-visible and GROUP BY band, key can be an index-only scan with no VACUUM),
        which finish_band_key_table indexes with one sort and attaches, so readers see
        nothing of it until then: inserting the same rows into a live B-tree of random keys
        is several times slower."""
        table = partition(banding_id)
        exists = connection.exec_driver_sql(
            f"SELECT to_regclass('{table}') IS NOT NULL"
        ).scalar_one()
        if exists:
            return table, False
        # banding_id defaults to the partition's banding: COPY leaves it out (a third less
        # to send and parse).
        if not bulk:
            connection.exec_driver_sql(
                f"CREATE TABLE {table} PARTITION OF band_keys "
                f"(banding_id DEFAULT {int(banding_id)}) FOR VALUES IN ({int(banding_id)})"
            )
            return table, False
        connection.exec_driver_sql(
            f"CREATE TABLE {table} (LIKE band_keys, "
            f"CONSTRAINT {table}_banding CHECK (banding_id = {int(banding_id)}))"
        )  # the CHECK proves the partition bound, so ATTACH PARTITION needs no scan
        connection.exec_driver_sql(
            f"ALTER TABLE {table} ALTER banding_id SET DEFAULT {int(banding_id)}"
        )
        return table, True

    def write_band_key_rows(
        self,
        connection: Connection,
        table: str,
        banding_id: int,
        rows: tuple[np.ndarray, np.ndarray, np.ndarray],
        new_table: bool,
    ) -> None:
        copy_band_keys(connection, table, *rows, freeze(new_table))

    def finish_band_key_table(
        self, connection: Connection, table: str, banding_id: int, rows: int
    ) -> None:
        run = connection.exec_driver_sql
        least, most = BULK_INDEX_MEMORY
        needed = rows * BULK_INDEX_BYTES_PER_ROW
        run(f"SET LOCAL maintenance_work_mem = '{max(least, min(most, needed)) // 1024}kB'")
        if needed <= most:
            run("SET LOCAL max_parallel_maintenance_workers = 0")
        run(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey "
            "PRIMARY KEY (banding_id, band, key, document_id)"
        )
        run("RESET maintenance_work_mem")
        run("RESET max_parallel_maintenance_workers")
        run(f"ALTER TABLE band_keys ATTACH PARTITION {table} FOR VALUES IN ({int(banding_id)})")
        self.analyze(connection, table)


def partition(banding_id: int) -> str:
    """The partition of band_keys that holds one banding's keys."""
    return f"band_keys_{int(banding_id)}"
