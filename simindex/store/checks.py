"""The SQL of `simindex check` and `simindex stats`: integrity findings and statistics."""

from __future__ import annotations

from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection, func, select

from simindex.store.pairs import named_pairs, similarity_cut
from simindex.store.schema import band_keys, clusters, documents, pairs, signatures


class ChecksSQL:
    """Integrity checks and statistics of an index (a part of Store)."""

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

    def bucket_counts(
        self, connection: Connection, banding_id: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(band, key, size) of every bucket of a banding, as int64 arrays."""
        query = (
            select(band_keys.c.band, band_keys.c.key, func.count())
            .where(band_keys.c.banding_id == banding_id)
            .group_by(band_keys.c.band, band_keys.c.key)
        )
        rows = np.array(connection.execute(query).all(), dtype=np.int64).reshape(-1, 3)
        return rows[:, 0], rows[:, 1], rows[:, 2]

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

    def largest_clusters(
        self, connection: Connection, banding_id: int, limit: int
    ) -> list[tuple[int, int]]:
        """(cluster id, size) of the ``limit`` largest clusters, largest (then smallest id)
        first."""
        size = func.count().label("size")
        query = (
            select(clusters.c.cluster_id, size)
            .where(clusters.c.banding_id == banding_id)
            .group_by(clusters.c.cluster_id)
            .order_by(size.desc(), clusters.c.cluster_id)
            .limit(limit)
        )
        return [(int(c), int(s)) for c, s in connection.execute(query)]

    def weakest_pairs(
        self, connection: Connection, banding_id: int, limit: int
    ) -> list[dict[str, Any]]:
        """The ``limit`` stored pairs of lowest similarity (rows like iter_pairs'), least
        similar first."""
        if limit < 1:
            return []
        query, similarity, order = named_pairs(banding_id)
        query = query.add_columns(pairs.c.exact_jaccard, pairs.c.estimated_jaccard)
        cut = similarity_cut(connection, banding_id, limit, best=False)
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
