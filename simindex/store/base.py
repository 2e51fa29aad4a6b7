"""The dialect-neutral part of a store: transactions, driver errors, the index's state,
settings, bandings and candidate buckets. Each backend (sqlite.py, postgres.py) subclasses
Store and overrides what its database does differently; nothing above the store asks
which database it is.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection, Engine, select

from simindex.defaults import DEFAULT_LOCK_TIMEOUT
from simindex.errors import DatabaseError, ParameterError
from simindex.store.checks import ChecksSQL
from simindex.store.documents import DocumentsSQL
from simindex.store.pairs import PairsSQL
from simindex.store.rows import duration_text, grouped_chunks, int_rows, key_rows
from simindex.store.runs import RunsSQL
from simindex.store.schema import band_keys, bandings, documents, index_settings, metadata, pairs
from simindex.store.urls import display_url

if TYPE_CHECKING:
    from simindex.store.bandkeys import BandKeyWriter

log = logging.getLogger("simindex")
# The analysts' views the migrations create (docs/sql.md).
_VIEWS = {"similar_pairs", "document_clusters", "cluster_sizes", "bucket_sizes"}
_INTEGRITY_ERRORS = (sa.exc.IntegrityError, sqlite3.IntegrityError)

IndexState = Literal["none", "half-created", "index"]


def psycopg_errors(*names: str) -> tuple[type[Exception], ...]:
    """psycopg's exception classes ``names``, if psycopg is loaded: only a PostgreSQL index
    loads it (SQLite never pays for its import), and nothing else raises them."""
    module = sys.modules.get("psycopg")
    return tuple(getattr(module, name) for name in names) if module else ()


class Store(DocumentsSQL, PairsSQL, ChecksSQL, RunsSQL):
    """The SQL of one index database. Methods take the Connection of an open transaction;
    a backend subclass supplies the statements its database runs differently."""

    # The backend's name, as SQLAlchemy's dialect names it.
    dialect: ClassVar[str]
    # Where else to keep an index when the database holds tables of the same names.
    elsewhere: ClassVar[str]
    # Whether the database's unique index on external_id names a repeated id in a load into
    # an empty index, so that the load looks no id up (see repeated_external_id).
    unique_index_checks: ClassVar[bool] = False
    # Whether a full `pairs` reads every signature into a SignatureFile on a second
    # connection while the buckets are grouped, instead of looking them up in blocks: where
    # look-ups of a large share of the index cost a random page read each.
    signature_pass_while_grouping: ClassVar[bool] = False
    # Whether a re-band commits its band keys in parts (see BandKeyWriter).
    commits_in_parts: ClassVar[bool] = False
    # SQL: the bytes of a document's stored text; a bucket's ids as one text; integers of an
    # expression ({}) as one comma-separated text (read back by rows.listed_integers).
    text_bytes_sql: ClassVar[str]
    bucket_ids_sql: ClassVar[str]
    list_sql: ClassVar[str]

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
        self.schema = schema
        self.lock_timeout = lock_timeout

    def describe(self) -> str:
        """The database (password hidden) and the schema, for messages."""
        url = display_url(self.engine.url)
        return url if self.schema is None else f"{url} (schema {self.schema})"

    def close(self) -> None:
        self.engine.dispose()

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction: one snapshot for the whole call (see begin_snapshot)."""
        with self.engine.connect() as connection, connection.begin():
            self.begin_snapshot(connection)
            yield connection

    def begin_snapshot(self, connection: Connection) -> None:
        """Make a read transaction's snapshot and locks, before its first query."""

    @contextmanager
    def statement(self) -> Iterator[Connection]:
        """A connection whose statements need no transaction around them: each sees one
        snapshot and holds its locks until it ends (here: a read transaction)."""
        with self.read() as connection:
            yield connection

    @contextmanager
    def write(self, load: bool = False) -> Iterator[Connection]:
        """A transaction that may write. Writers take turns, readers never wait: a writer
        that has to wait says for whom (logged), and gives up after ``lock_timeout`` seconds
        with a DatabaseError. ``load``: the transaction adds documents (see load_mode).
        After the commit, the backend tidies up (see after_write)."""
        with self.engine.connect() as connection:
            connection = connection.execution_options(simindex_write=True)
            with self.load_mode(connection, load), self.begin_write(connection):
                self.take_writer_lock(connection)
                yield connection
        self.after_write()

    @contextmanager
    def load_mode(self, connection: Connection, load: bool) -> Iterator[None]:
        """How a transaction that adds documents runs (as any write, here)."""
        yield

    def begin_write(self, connection: Connection) -> sa.RootTransaction:
        return connection.begin()

    def take_writer_lock(self, connection: Connection) -> None:
        """Make other writers wait for this transaction (where BEGIN does not)."""

    def after_write(self) -> None:
        """Work after a write transaction ends, outside it."""

    @contextmanager
    def transaction(self, write: bool = False, load: bool = False) -> Iterator[Connection]:
        """A read() or write() transaction whose driver errors become DatabaseError."""
        with self.errors(), self.write(load) if write else self.read() as connection:
            yield connection

    @contextmanager
    def creating(self) -> Iterator[None]:
        """The block of the transaction that creates the index: a backend whose database is
        made by that transaction removes it again if the block fails."""
        yield

    def lock_timeout_error(self, who: str, timeout: float | None = None) -> DatabaseError:
        timeout = self.lock_timeout if timeout is None else timeout
        return DatabaseError(
            f"gave up after waiting {duration_text(timeout)} for {who}, which is writing "
            f"to the index in {self.describe()}; try again when it is done, or wait longer "
            "with --lock-timeout SECONDS (SIMINDEX_LOCK_TIMEOUT)"
        )

    # -- driver errors ---------------------------------------------------------------------

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Turn driver errors (server down, wrong password, disk full, a damaged file, ...)
        into DatabaseError; other database errors are bugs and keep their traceback. Bulk
        loads use the driver's cursor directly, so its own exception classes come too."""
        try:
            yield
        except (sa.exc.DBAPIError, sqlite3.Error, *psycopg_errors("Error")) as exc:
            orig = getattr(exc, "orig", None) or exc
            reason = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
            url = display_url(self.engine.url)
            if isinstance(exc, (*_INTEGRITY_ERRORS, *psycopg_errors("IntegrityError"))):
                raise DatabaseError(f"database {url} refused the change: {reason}") from None
            error = self.user_error(exc, reason, url)
            if error is None:
                raise  # e.g. a syntax error: a bug, keep the traceback
            raise error from None

    def user_error(self, exc: Exception, reason: str, url: str) -> DatabaseError | None:
        """The DatabaseError for a driver error that comes from the environment (the file,
        the disk, the server, locks), or None for one that is a bug."""
        return None

    # -- the index's state -----------------------------------------------------------------

    def index_state(self, connection: Connection) -> IndexState:
        """What the database holds: no index; half an index (a schema with no settings row
        and no documents, as older versions could leave it); or an index. Raises
        DatabaseError for tables that would collide with an index's, or a schema with
        documents but no settings."""
        colliding = self.colliding_tables(connection)
        if colliding:
            raise DatabaseError(
                f"{self.describe()} already holds tables that are not a simindex index "
                f"({', '.join(colliding)}); keep the index elsewhere: {self.elsewhere}"
            )
        if not self.has_tables(connection):
            return "none"
        if self.read_settings(connection) is not None:
            return "index"
        if self.document_count(connection):
            raise DatabaseError(
                f"{self.describe()} holds documents but no index settings: it was not written "
                "by simindex; give another --db"
            )
        return "half-created"

    def current_state(self) -> IndexState:
        """index_state in a read transaction of its own."""
        with self.errors(), self.read() as connection:
            return self.index_state(connection)

    def already_an_index(self) -> DatabaseError:
        return DatabaseError(
            f"{self.describe()} already holds a simindex index; open it, or choose another database"
        )

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

    def update_settings(self, connection: Connection, **values: Any) -> None:
        connection.execute(index_settings.update().values(**values))

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
        banding_id = self.new_banding_id(connection)
        if banding_id is not None:
            values["id"] = banding_id
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
        would hold every page of them until the commit."""
        connection.execute(pairs.delete().where(pairs.c.banding_id == banding_id))
        connection.execute(bandings.delete().where(bandings.c.id == banding_id))

    def band_key_writer(
        self, connection: Connection, banding_id: int, *, bulk: bool, parts: bool = False
    ) -> BandKeyWriter:
        """Where the band keys of one banding are written (bulk, parts: see BandKeyWriter)."""
        from simindex.store.bandkeys import BandKeyWriter

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

    def new_banding_id(self, connection: Connection) -> int | None:
        """The id a new banding takes, or None for the database's own choice."""
        return None

    def retired_bandings(self, connection: Connection) -> list[int]:
        """Ids of the bandings whose band keys wait to be removed: keys of a banding id that
        has no banding row."""
        raise NotImplementedError

    def drop_retired_bandings(self, attempts: int | None = None) -> list[int]:
        """Remove the band keys of retired bandings, after the transaction that retired
        them, without holding readers up for long; returns the ids still retired."""
        raise NotImplementedError

    # -- band keys (BandKeyWriter) ---------------------------------------------------------

    def band_key_table(
        self, connection: Connection, banding_id: int, bulk: bool
    ) -> tuple[str, bool]:
        """The table a banding's keys are written into, and whether it is a new one that
        finish_band_key_table must index and attach (a bulk load into a table of its own)."""
        return "band_keys", False

    def write_band_key_rows(
        self,
        connection: Connection,
        table: str,
        banding_id: int,
        rows: tuple[np.ndarray, np.ndarray, np.ndarray],
        new_table: bool,
    ) -> None:
        """Rows (band, key, document_id) of one banding into ``table``."""
        raise NotImplementedError

    def finish_band_key_table(
        self, connection: Connection, table: str, banding_id: int, rows: int
    ) -> None:
        """Index and attach a new table of ``rows`` band keys (see band_key_table)."""

    def commit_part(self, connection: Connection) -> None:
        """Commit a write's work so far and go on in a new transaction (commits_in_parts)."""
        raise NotImplementedError

    # -- candidates ------------------------------------------------------------------------

    def iter_buckets(
        self,
        connection: Connection,
        banding_id: int,
        touching: np.ndarray | None = None,
        chunk_size: int = 50_000,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Buckets (band, key) with two or more documents, grouped by the database; with
        ``touching`` (int64 keys of shape (n, bands), e.g. of the documents added since pairs
        were last found), only those buckets, each found through the primary key.

        Yields chunks as (members, offsets): bucket i of a chunk holds document ids
        ``members[offsets[i]:offsets[i + 1]]``.
        """
        if touching is None:
            yield from self.banding_buckets(connection, banding_id, chunk_size)
            return
        band, key, _ = key_rows(touching)
        wanted = np.unique(np.column_stack((band, key)), axis=0)  # each bucket once
        joined, params = self._sharing_buckets(
            banding_id, {"band": wanted[:, 0], "key": wanted[:, 1]}
        )
        statement = (
            f"SELECT {self.bucket_ids_sql.format('k.document_id')} FROM {joined} "
            "GROUP BY wanted.band, wanted.key HAVING count(*) > 1"
        )
        result = connection.execute(
            sa.text(statement),
            params,
            execution_options={"stream_results": True, "yield_per": chunk_size},
        )
        yield from grouped_chunks(result, chunk_size)

    def banding_buckets(
        self, connection: Connection, banding_id: int, chunk_size: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """iter_buckets of a whole banding."""
        raise NotImplementedError

    def lookup(
        self, connection: Connection, banding_id: int, keys: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Indexed documents sharing a bucket with query row i of ``keys`` (int64, (m, bands)).

        Returns (query_rows, document_ids), each distinct pair once.
        """
        band, key, q = key_rows(keys, np.arange(keys.shape[0]))
        joined, params = self._sharing_buckets(banding_id, {"q": q, "band": band, "key": key})
        found = connection.execute(
            sa.text(f"SELECT DISTINCT wanted.q, k.document_id FROM {joined} ORDER BY 1, 2"),
            params,
        ).all()
        pairs_found = int_rows(found, 2)
        return pairs_found[:, 0], pairs_found[:, 1]

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

    def _among(self, values: list, sql_type: str) -> tuple[str, dict[str, Any]]:
        """``IN values`` as SQL (to follow a column) and its bound parameter, however many
        values (nothing is chunked)."""
        raise NotImplementedError

    def _rows_source(
        self, columns: dict[str, Sequence[Any]], sql_type: str = "BIGINT"
    ) -> tuple[str, dict[str, Any]]:
        """A FROM item named ``wanted`` whose rows are the given columns (integers, or values
        of ``sql_type``), and its bound parameters: one parameter per column however many
        rows, so no statement is chunked or compiled per size; SQLite's CROSS JOIN (in the
        callers) makes these rows the outer loop."""
        raise NotImplementedError

    def analyze(self, connection: Connection, table: str) -> None:
        """Fresh planner statistics of ``table`` (our name), just written in bulk, where the
        database keeps them."""

    # -- what each backend writes and reads its own way ------------------------------------

    def allocate_document_ids(self, connection: Connection, count: int) -> np.ndarray:
        """``count`` new document ids (int64), safe against concurrent writers."""
        raise NotImplementedError

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
        """``ingested_at``: an aware datetime, stored as UTC. ``table``: documents, or a
        staging table of its columns (see StagedLoad). ``frozen``: ``table`` was
        created in this transaction, and the rows may be written as a later VACUUM FREEZE
        would leave them, so their first reader does not dirty their pages again."""
        raise NotImplementedError

    def insert_signatures(
        self,
        connection: Connection,
        ids: np.ndarray,
        sigs: np.ndarray,
        table: str = "signatures",
        frozen: bool = False,
    ) -> None:
        """Signatures (uint32, (len(ids), num_perm)), each stored as minhash.pack does, into
        ``table``; ``table`` and ``frozen`` as for insert_documents."""
        raise NotImplementedError

    def bulk_insert(
        self, connection: Connection, table: str, columns: list[str], rows: Iterable[Sequence]
    ) -> None:
        """Rows into ``table`` by the database's bulk path (``table`` and ``columns`` are our
        constants)."""
        raise NotImplementedError

    def signatures_where_ids(
        self, connection: Connection, ids: np.ndarray, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(document ids, signatures (n, num_perm)) stored for ``ids``, in any order."""
        raise NotImplementedError

    def signatures_after(
        self, connection: Connection, last: int, rows: int, num_perm: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(document ids, signatures (n, num_perm)) of the first ``rows`` ids above
        ``last``, in id order."""
        raise NotImplementedError

    def utf8_rows(
        self, connection: Connection, among: str, params: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, text lengths in bytes, the texts as UTF-8 uint8) of the documents whose
        id is ``among`` (see _among), concatenated by the database into one row."""
        raise NotImplementedError

    def bucket_documents_join(self, few: str) -> str:
        """SQL joining signatures ``s`` to their documents ``d`` (external_id, text) when
        the condition ``few`` holds (see documents_in_buckets)."""
        raise NotImplementedError

    def listed(self, expression: str) -> str:
        """SQL aggregating the integers ``expression`` into one comma-separated text."""
        return self.list_sql.format(expression)

    def storage_problems(self, connection: Connection) -> list[str]:
        """Damage to the database's own storage, one sentence per finding, where the
        database does not check its pages as it reads them."""
        return []

    def insert_pairs(
        self,
        connection: Connection,
        banding_id: int,
        doc_a: np.ndarray,
        doc_b: np.ndarray,
        estimated: np.ndarray,
        exact: np.ndarray | None,
    ) -> None:
        raise NotImplementedError

    def delete_band_keys(
        self, connection: Connection, banding_id: int, document_ids: np.ndarray, keys: np.ndarray
    ) -> None:
        """The band keys of documents (``keys``: int64 of shape (len(document_ids), bands),
        computed from their signatures), each row found through the primary key."""
        raise NotImplementedError

    def stored_time(self, moment: datetime) -> datetime:
        """An aware datetime as the database compares it with stored ones."""
        return moment
