"""The SQL of pairs and clusters: storing, listing and deleting them, and removing documents."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection, func, select

from simindex.store.rows import MAX_PARAMS, in_chunks, int_rows
from simindex.store.schema import clusters, documents, pairs


class PairsSQL:
    """Pairs, clusters and the removal of documents (a part of Store)."""

    def delete_pairs(self, connection: Connection, banding_id: int) -> None:
        connection.execute(pairs.delete().where(pairs.c.banding_id == banding_id))

    @contextmanager
    def pair_inserts(self, connection: Connection) -> Iterator[None]:
        """The block in which ``connection`` stores verified pairs (a backend may tune the
        connection for it, and sets it back after)."""
        yield

    def iter_pairs(
        self, connection: Connection, banding_id: int, threshold: float, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Stored pairs with external ids and similarity >= threshold, most similar first;
        the first ``limit`` of them if given (see similarity_cut)."""
        if limit == 0:
            return
        query, similarity, order = named_pairs(banding_id)
        query = query.add_columns(pairs.c.exact_jaccard, pairs.c.estimated_jaccard)
        if limit is not None:
            cut = similarity_cut(connection, banding_id, limit, best=True, threshold=threshold)
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
        chunks = [None] if among is None else list(in_chunks(among, MAX_PARAMS))
        found = [np.empty((0, 2), np.int64)]
        streamed = {"stream_results": True, "yield_per": 100_000}
        for chunk in chunks:
            chunk_query = query if chunk is None else query.where(pairs.c.doc_a.in_(chunk))
            result = connection.execute(chunk_query, execution_options=streamed)
            found.extend(int_rows(rows, 2) for rows in result.partitions())
        rows = np.concatenate(found)
        return rows[:, 0].copy(), rows[:, 1].copy()

    def cluster_members(
        self, connection: Connection, banding_id: int, cluster_ids: np.ndarray
    ) -> np.ndarray:
        """Document ids of the given clusters."""
        found: list[int] = []
        for chunk in in_chunks(cluster_ids, MAX_PARAMS):
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
        for chunk in in_chunks(ids, MAX_PARAMS):
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
        # which makes `dedup` quadratic.
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
        for chunk in in_chunks(document_ids, MAX_PARAMS):
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
            self.bulk_insert(
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

    def rank_fields_of(
        self, connection: Connection, ids: np.ndarray, keep_by: str | None, external_ids: bool
    ) -> tuple[list[str] | None, np.ndarray, np.ndarray, list[Any] | None]:
        """What a keep policy ranks the (sorted) document ids by, aligned with ``ids``: their
        external ids (if ``external_ids``, else None), shingle counts and content hashes
        (int64) and, with ``keep_by``, that field of their metadata (None if absent; else
        None). Filled in place chunk by chunk: a clustered document costs 16 bytes here, plus
        its external id and value only where the policy ranks by them."""
        count = ids.shape[0]
        counts, hashes = np.zeros(count, np.int64), np.zeros(count, np.int64)
        names: list[Any] | None = [None] * count if external_ids else None
        values: list[Any] | None = [None] * count if keep_by is not None else None
        columns = [documents.c.id, documents.c.shingle_count, documents.c.content_hash]
        columns += [documents.c.external_id] if external_ids else []
        columns += [documents.c.metadata] if keep_by is not None else []
        for chunk in in_chunks(ids, MAX_PARAMS):
            rows = connection.execute(select(*columns).where(documents.c.id.in_(chunk))).all()
            at = np.searchsorted(ids, np.array([row[0] for row in rows], np.int64))
            counts[at] = [row[1] for row in rows]
            hashes[at] = [row[2] for row in rows]
            for position, row in zip(at.tolist(), rows, strict=True):
                if names is not None:
                    names[position] = row[3]
                if values is not None:
                    values[position] = (row[-1] or {}).get(keep_by)
        return names, counts, hashes, values

    def ingested_before(self, connection: Connection, moment: datetime) -> np.ndarray:
        """Ids of documents ingested before the aware datetime ``moment``."""
        stored = self.stored_time(moment)
        ids = connection.scalars(select(documents.c.id).where(documents.c.ingested_at < stored))
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


def similarity_cut(
    connection: Connection,
    banding_id: int,
    limit: int,
    best: bool,
    threshold: float | None = None,
) -> float | None:
    """The similarity of the ``limit``-th stored pair (limit >= 1) from the best end, or the
    weakest, among those >= threshold; None when there are fewer. Read from the pairs alone,
    so a query of the pairs up to it joins and sorts those only (ties at the cut included),
    not every stored pair with its external ids."""
    similarity = func.coalesce(pairs.c.exact_jaccard, pairs.c.estimated_jaccard)
    query = select(similarity).where(pairs.c.banding_id == banding_id)
    if threshold is not None:
        query = query.where(similarity >= threshold)
    query = query.order_by(similarity.desc() if best else similarity)
    return connection.execute(query.offset(limit - 1).limit(1)).scalar()


def named_pairs(banding_id: int) -> tuple[sa.Select, sa.ColumnElement, tuple]:
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
