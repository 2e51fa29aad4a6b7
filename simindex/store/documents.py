"""The SQL of documents and signatures: ids, look-ups, texts, samples."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection, func, select

from simindex.errors import DatabaseError
from simindex.store.rows import (
    MAX_PARAMS,
    by_id,
    in_chunks,
    int_rows,
    key_rows,
    listed_integers,
    take_texts,
)
from simindex.store.schema import documents, signatures

OTHER_LENGTH = "stored signatures differ in length from the index's: run `simindex check`"
# What exact duplicates are found by (stats, docs/sql.md): see defer_content_hash_index.
_CONTENT_HASH_INDEX = next(i for i in documents.indexes if i.name == "ix_documents_content_hash")


class DocumentsSQL:
    """Documents and their signatures (a part of Store)."""

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

    def defer_content_hash_index(self, connection: Connection, created_here: bool) -> bool:
        """Drop the index on documents.content_hash until :meth:`build_content_hash_index` at
        the end of the same transaction (a failed load rolls the drop back too), and say
        whether it did: content hashes are random, so each insert into the live index lands
        on a leaf page the cache doesn't hold, where one sort at the end builds it in order.
        A backend whose readers would wait on the drop does it only when the table was
        ``created_here``, in this transaction, where no reader sees it."""
        connection.execute(sa.schema.DropIndex(_CONTENT_HASH_INDEX))
        return True

    def build_content_hash_index(self, connection: Connection) -> None:
        """The index :meth:`defer_content_hash_index` dropped, built in one sort."""
        connection.execute(sa.schema.CreateIndex(_CONTENT_HASH_INDEX))

    def repeated_external_id(self, error: Exception) -> str | None:
        """The external id that a failed insert of documents repeated, where the database's
        unique index names it (see Store.unique_index_checks); else None."""
        return None

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
            ids = int_rows(rows, 1).reshape(-1)
            lo, hi = np.searchsorted(wanted, [seen, seen + ids.size])
            chosen.append(ids[wanted[lo:hi] - seen])
            seen += ids.size
        return np.concatenate(chosen)

    def signatures_of(self, connection: Connection, ids: np.ndarray, num_perm: int) -> np.ndarray:
        """The stored signatures of document ids, in their order (uint32, (n, num_perm)); a
        DatabaseError names a document that has none, or a signature of another length."""
        found, matrix = self.signatures_where_ids(connection, ids, num_perm)
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
            ids, matrix = self.signatures_after(connection, last, rows, num_perm)
            if not ids.size:
                return
            yield ids, matrix.astype(np.uint32, copy=False)
            last = int(ids[-1])

    def utf8_texts(self, connection: Connection, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stored texts of the sorted document ids, in their order, as UTF-8: (data, uint8;
        offsets, int64, n + 1), a text not kept empty. The database concatenates them into
        one row (ids, lengths and texts; see utf8_rows): no Python object is made
        per text. Raises DatabaseError if a document is not stored."""
        among, params = self._among(ids.tolist(), "BIGINT")
        found, lengths, data = self.utf8_rows(connection, among, params)
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
        return take_texts(data, lengths, order)

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
        for chunk in in_chunks(list(external_ids), MAX_PARAMS):
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
        band, key, _ = key_rows(keys)
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
        documents = self.bucket_documents_join(few)
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
        return by_id(connection.execute(sa.text(statement), params))

    def text_sizes(self, connection: Connection, ids: np.ndarray) -> np.ndarray:
        """Bytes of stored text (0 when not kept) of each of the sorted document ids."""
        among, params = self._among(ids.tolist(), "BIGINT")
        size = self.text_bytes_sql
        statement = (  # one row of aggregates, as in utf8_rows
            f"SELECT {self.listed('id')}, {self.listed(f'coalesce({size}, 0)')} "
            f"FROM documents WHERE id {among}"
        )
        found, lengths = connection.execute(sa.text(statement), params).one()
        sizes = np.zeros(ids.shape[0], dtype=np.int64)
        sizes[np.searchsorted(ids, listed_integers(found))] = listed_integers(lengths)
        return sizes

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
        return by_id(rows)

    def max_document_id(self, connection: Connection) -> int:
        return int(connection.scalar(select(func.coalesce(func.max(documents.c.id), 0))))

    def document_id_range(self, connection: Connection) -> tuple[int, int]:
        """The smallest and largest document ids ((1, 0) in an empty index)."""
        low, high = connection.execute(
            select(func.coalesce(func.min(documents.c.id), 1), func.max(documents.c.id))
        ).one()
        return int(low), int(high if high is not None else low - 1)

    def signature_count(self, connection: Connection, through: int) -> int:
        """Stored signatures of the documents with ids up to ``through``."""
        return int(
            connection.scalar(
                select(func.count())
                .select_from(signatures)
                .where(signatures.c.document_id <= through)
            )
        )
