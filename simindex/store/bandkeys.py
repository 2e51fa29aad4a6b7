"""The band-key writer: the keys of one banding, in primary-key order, in bounded memory."""

from __future__ import annotations

from contextlib import closing
from typing import TYPE_CHECKING

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection

from simindex.errors import DatabaseError
from simindex.pipeline.chunking import ahead
from simindex.pipeline.runs import RunSpool

if TYPE_CHECKING:
    from simindex.store.base import Store

# Bytes of band keys a bulk load holds and sorts at a time.
BULK_SORT_MEMORY = 8 * 2**20
# Rows per statement that writes band keys.
WRITE_ROWS = 131_072
# Band-key rows a re-band in parts commits at a time: each part's pages pass through the WAL
# before the next part's reuse it.
PART_ROWS = 8_000_000


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

    A backend may load a new banding's keys into a table of their own, indexed and attached
    by finish() (Store.band_key_table: PostgreSQL's partitions).

    With ``parts`` (a re-band, on a backend that commits_in_parts), the rows are committed
    PART_ROWS at a time (Store.commit_part): in one transaction, SQLite's WAL holds every
    page the write makes until the commit, then copies them into the database, so the disk
    holds the banding twice; in parts, the WAL is copied after each part and written over
    from its start by the next (unless a reader's snapshot holds the copy back). Other
    writers may run between the parts, so the banding must be one they leave alone
    (``building``: loads fill complete bandings only); the caller brings it up to date in
    the last part's transaction (see local.bandings.reband). Each part checks that the
    banding still exists (by its id and creation time).
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
        self._parts = parts and store.commits_in_parts
        self._part_rows = 0  # rows written since the last part was committed
        self.committed = False  # whether a part was committed (the banding exists)
        # The banding's creation time, which tells it from a later one with its id.
        self.created_at = store.building_banding(connection, banding_id) if self._parts else None
        self._table, self._new_table = store.band_key_table(connection, banding_id, bulk)
        self._bulk = bulk
        self._held: list[tuple[np.ndarray, np.ndarray]] = []  # (ids, keys) not yet spooled
        self._held_bytes = 0
        self._spool: RunSpool | None = None
        self._runs: list[list[tuple[int, int]]] = []  # each band's runs in the spool
        self._rows = 0

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
        WRITE_ROWS at a time."""
        self._rows += band.shape[0]
        for start in range(0, band.shape[0], WRITE_ROWS):
            part = slice(start, start + WRITE_ROWS)
            rows = (band[part], key[part], document_id[part])
            self._store.write_band_key_rows(
                self._connection, self._table, self._banding_id, rows, self._new_table
            )
            self._part_rows += rows[0].shape[0]
            if self._parts and self._part_rows >= PART_ROWS:
                self._next_part()

    def _next_part(self) -> None:
        """Commit the rows so far and go on in a new transaction (see the class)."""
        self.committed = True  # perhaps only the parts before: local.bandings.reband checks
        self._store.commit_part(self._connection)
        self._part_rows = 0
        if self._store.building_banding(self._connection, self._banding_id) != self.created_at:
            raise DatabaseError(
                f"banding {self._banding_id} was removed while it was being built (by "
                "`simindex drop-banding`, or `simindex reband --drop-old`, which removes "
                "every other banding): this re-band stopped; run it again if its banding is "
                "still wanted"
            )

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
        """Write the held and spooled keys (see the class); index and attach a new table."""
        if self._held:
            self._spool_run()
        if self._spool is not None:
            self._write_spooled()
        if self._new_table:
            self._store.finish_band_key_table(
                self._connection, self._table, self._banding_id, self._rows
            )
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
