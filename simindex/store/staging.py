"""Staging for a load by many writers (the tasks of a Spark job): staging tables each task
fills in a transaction of its own, moved into the index in one transaction of the driver."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection

from simindex.errors import ParameterError
from simindex.store.pgcopy import copy_band_keys
from simindex.store.rows import key_rows
from simindex.store.urls import SCHEMA_NAME

if TYPE_CHECKING:
    from simindex.store.postgres import PostgresStore


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

    def __init__(self, store: PostgresStore, name: str, bandings: Sequence[int]):
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

    @contextmanager
    def task(self) -> Iterator[Connection]:
        """A transaction of a task (a writer outside the index's process) that stages a part."""
        with self._store.engine.connect() as connection, connection.begin():
            yield connection

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
            band, key, doc = key_rows(banding_keys, ids)
            copy_band_keys(connection, self.keys_table(banding), band, key, doc)

    def reject(self, connection: Connection, external_ids: list[str], problems: list) -> None:
        """Documents not loaded: why (None: empty after normalization)."""
        self._store.bulk_insert(
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


class StagedPart:
    """One task's part of a staged load, in the task's own transaction (see staged_part)."""

    def __init__(self, staged: StagedLoad, connection: Connection, part: int):
        self._staged, self._connection, self.part = staged, connection, part

    def claim(self) -> bool:
        """Whether this attempt is to load the part (see StagedLoad.claim)."""
        return self._staged.claim(self._connection, self.part)

    def write(
        self,
        ids: np.ndarray,
        columns: dict[str, Any],
        sigs: np.ndarray,
        keys: dict[int, np.ndarray],
    ) -> None:
        """See StagedLoad.write."""
        self._staged.write(self._connection, ids, columns, sigs, keys)

    def reject(self, external_ids: list[str], problems: list) -> None:
        """See StagedLoad.reject."""
        self._staged.reject(self._connection, external_ids, problems)

    def finish(self, rows: int) -> None:
        """Record the part loaded, with its ``rows`` documents."""
        self._staged.finish_part(self._connection, self.part, rows)


class StagedMove:
    """The driver's side of a staged load, in a write transaction of the index: what was
    staged, and its move into the index (see Index.load_transaction)."""

    def __init__(self, store: PostgresStore, connection: Connection, staged: StagedLoad):
        self._store, self._connection, self._staged = store, connection, staged
        self.moved = 0  # documents moved in

    def complete_bandings(self) -> dict[int, tuple[int, int]]:
        """(bands, rows) of the index's complete bandings, by id, in id order."""
        bandings = self._store.bandings(self._connection)
        return {b["id"]: (b["bands"], b["rows"]) for b in bandings if b["state"] == "complete"}

    def parts(self) -> dict[int, int]:
        return self._staged.parts(self._connection)

    def rejected(self, limit: int) -> tuple[int, int, list[tuple]]:
        return self._staged.rejected(self._connection, limit)

    def duplicates(self, limit: int) -> tuple[int, int, list[str]]:
        return self._staged.duplicates(self._connection, limit)

    def skip_duplicates(self) -> int:
        return self._staged.skip_duplicates(self._connection)

    def move(self, targets: dict[int, int]) -> int:
        """Move the staged documents into the index, and the staged band keys of each staged
        banding into the index's banding ``targets[staged]``; the number of documents moved."""
        moved = self._staged.move(self._connection)
        self.moved += moved
        for staged_banding, banding_id in targets.items():
            writer = self._store.band_key_writer(self._connection, banding_id, bulk=True)
            writer.insert_staged(self._staged.band_keys(staged_banding))
            writer.finish()
        return moved

    def document_count(self) -> int:
        return self._store.document_count(self._connection)
