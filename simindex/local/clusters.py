"""Clusters: rebuilt from the stored pairs, kept up to date as pairs are found and documents
removed, and listed with each member's similarity to its representative."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator
from itertools import islice

import numpy as np
from sqlalchemy import Connection

from simindex.errors import SimindexError
from simindex.local import runs
from simindex.local.common import (
    VERIFY_TEXT_BYTES,
    check_pairs_cover,
    check_threshold,
    document_bytes,
    pair_spans,
    profiles,
    reported_similarity,
)
from simindex.local.context import Context
from simindex.local.runs import Run
from simindex.pipeline.runs import pair_documents
from simindex.policies import ClusterPolicy
from simindex.results import ClusterMember, ClusterReport, LargestCluster

# The largest clusters a report names, with their weakest member.
LARGEST_NAMED = 3


def cluster(
    ctx: Context, threshold: float | None, policy: ClusterPolicy, largest: int = LARGEST_NAMED
) -> ClusterReport:
    """Group the stored pairs with similarity >= threshold into clusters as ``policy``
    says, stored and named by their representative; the report names the ``largest``
    largest. Later :meth:`find_pairs` and :meth:`delete` calls keep them up to date."""
    threshold = ctx.threshold if threshold is None else check_threshold(threshold)
    started = time.perf_counter()
    parameters = {"threshold": threshold, **dataclasses.asdict(policy)}
    with (
        ctx.transaction(write=True) as connection,
        runs.recorded(ctx, connection, "clusters", parameters, threshold=threshold) as run,
    ):
        active = ctx.active_banding(connection)
        check_pairs_cover(ctx, connection, active, threshold)
        banding_id = active["id"]
        documents, cluster_ids = rebuild_clusters(ctx, connection, banding_id, threshold, policy)
        ctx.store.update_banding(
            connection, banding_id, clusters_threshold=threshold, clusters_rule=policy.stored()
        )
        named = largest_clusters(ctx, connection, banding_id, largest)
        sizes = np.unique(cluster_ids, return_counts=True)[1]
        run.keep = f"{policy.mode}, {policy.describe()}"
        run.count(clusters=int(sizes.size), clustered=int(documents.size))
        _record_decisions(ctx, connection, run, banding_id)
    return ClusterReport(
        threshold=threshold,
        rule=policy.describe(),
        clusters=int(sizes.size),
        documents=int(documents.size),
        largest=int(sizes.max()) if sizes.size else 0,
        seconds=time.perf_counter() - started,
        mode=policy.mode,
        largest_clusters=named,
    )


def largest_clusters(
    ctx: Context, connection: Connection, banding_id: int, limit: int
) -> tuple[LargestCluster, ...]:
    """The banding's ``limit`` largest clusters, each with its weakest member's similarity
    to the representative (compared here when the two were not paired directly)."""
    named = []
    for cluster_id, size in ctx.store.largest_clusters(connection, banding_id, limit):
        members = ctx.store.cluster_members(connection, banding_id, np.array([cluster_id]))
        members = members[members != cluster_id]
        weakest = 1.0
        for lo, hi in text_spans(
            ctx, connection, np.full(members.size, cluster_id), members, VERIFY_TEXT_BYTES
        ):
            span = members[lo:hi]
            found = similarities(ctx, connection, np.full(span.size, cluster_id), span)
            weakest = min(weakest, float(reported_similarity(*found).min()))
        (name,) = ctx.store.external_ids_of(connection, np.array([cluster_id]))
        named.append(LargestCluster(name, size, weakest))
    return tuple(named)


def rebuild_clusters(
    ctx: Context, connection: Connection, banding_id: int, threshold: float, policy: ClusterPolicy
) -> tuple[np.ndarray, np.ndarray]:
    """Replace the banding's clusters with those of its stored pairs at ``threshold``
    (analyzed after: see Store.analyze); their (documents, cluster ids)."""
    doc_a, doc_b = ctx.store.pairs_at_least(connection, banding_id, threshold)
    ctx.store.delete_clusters(connection, banding_id)
    documents, cluster_ids = recluster(ctx, connection, doc_a, doc_b, policy)
    ctx.store.insert_clusters(connection, banding_id, documents, cluster_ids)
    ctx.store.analyze(connection, "clusters")
    return documents, cluster_ids


def recluster(
    ctx: Context,
    connection: Connection,
    doc_a: np.ndarray,
    doc_b: np.ndarray,
    policy: ClusterPolicy,
) -> tuple[np.ndarray, np.ndarray]:
    """(documents, their cluster ids) of the edges (doc_a, doc_b) under ``policy``; the
    ingestion order is the document id."""
    from simindex.pipeline.cluster import RankFields, clusters_of

    def fields_of(documents: np.ndarray) -> RankFields:
        external_ids, lengths, hashes, values = ctx.store.rank_fields_of(
            connection, documents, policy.keep_by, policy.ties_by_external_id
        )
        return RankFields(documents, external_ids, lengths, hashes, values)

    return clusters_of(doc_a, doc_b, policy, fields_of)


def update_clusters(
    ctx: Context,
    connection: Connection,
    active: dict,
    threshold: float,
    since: int | None,
    found: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None],
) -> None:
    """Keep the banding's clusters in step with pairs just found (doc_a, doc_b,
    estimated, exact; only read when ``since`` is given: a full run's are re-read from
    the pairs table)."""
    cluster_threshold = active["clusters_threshold"]
    if cluster_threshold is None:
        return
    policy = ClusterPolicy.from_stored(active["clusters_rule"])
    doc_a, doc_b, estimated, exact = found
    strong = reported_similarity(estimated, exact) >= cluster_threshold
    doc_a, doc_b = doc_a[strong], doc_b[strong]
    banding_id = active["id"]
    if cluster_threshold < threshold:  # the pairs no longer reach that low
        ctx.store.delete_clusters(connection, banding_id)
        ctx.store.update_banding(connection, banding_id, clusters_threshold=None)
        return
    # Rebuilt pairs: rebuild clusters. A new pair can change which document claims which
    # anywhere in its component, so stars are rebuilt too.
    if since is None or policy.mode == "star":
        rebuild_clusters(ctx, connection, banding_id, cluster_threshold, policy)
        return
    # Incremental: merge the clusters the new pairs touch. Each old cluster enters as a
    # star (member - representative), which keeps it connected.
    touched = pair_documents(doc_a, doc_b)
    old = np.unique(
        np.array(
            list(ctx.store.clusters_of(connection, banding_id, touched).values()),
            dtype=np.int64,
        )
    )
    members = ctx.store.cluster_members(connection, banding_id, old)
    member_cluster = ctx.store.clusters_of(connection, banding_id, members)
    star_a = np.array([member_cluster[int(m)] for m in members], dtype=np.int64)
    documents, cluster_ids = recluster(
        ctx, connection, np.concatenate((doc_a, star_a)), np.concatenate((doc_b, members)), policy
    )
    ctx.store.delete_clusters(connection, banding_id, documents)
    ctx.store.insert_clusters(connection, banding_id, documents, cluster_ids)


def list_clusters(ctx: Context) -> Iterator[ClusterMember]:
    """Clustered documents of the active banding, representative first in each cluster."""
    with ctx.transaction() as connection:
        active = ctx.active_banding(connection)
        if active["clusters_threshold"] is None:
            raise SimindexError("clusters have not been built; run `simindex clusters` first")
        check_pairs_cover(ctx, connection, active, active["clusters_threshold"])
        for chunk, _, _, similarity in _member_chunks(ctx, connection, active["id"]):
            for row, value in zip(chunk, similarity.tolist(), strict=True):
                yield ClusterMember(
                    row["external_id"],
                    row["cluster"],
                    row["document_id"] == row["cluster_id"],
                    value,
                )


def _record_decisions(ctx: Context, connection: Connection, run: Run, banding_id: int) -> None:
    """The run's decisions: every member of the banding's clusters but the representatives."""
    for _, members, clusters, similarity in _member_chunks(ctx, connection, banding_id):
        held = members != clusters
        runs.record_decisions(ctx, connection, run, members[held], clusters[held], similarity[held])


def _member_chunks(
    ctx: Context, connection: Connection, banding_id: int
) -> Iterator[tuple[list[dict], np.ndarray, np.ndarray, np.ndarray]]:
    """The banding's clustered documents (Store.iter_clusters' rows) in chunks, with their
    document ids, cluster ids and similarity to the representative (1 for itself)."""
    rows = ctx.store.iter_clusters(connection, banding_id)
    while chunk := list(islice(rows, 10_000)):
        members = np.array([r["document_id"] for r in chunk], dtype=np.int64)
        clusters = np.array([r["cluster_id"] for r in chunk], dtype=np.int64)
        stored = [r["similarity"] for r in chunk]
        similarity = np.array(stored, dtype=np.float64)  # None: NaN
        similarity[members == clusters] = 1.0
        # Members reached through another member are compared here.
        todo = np.flatnonzero(np.isnan(similarity))
        for lo, hi in text_spans(ctx, connection, clusters[todo], members[todo], VERIFY_TEXT_BYTES):
            span = todo[lo:hi]
            similarity[span] = reported_similarity(
                *similarities(ctx, connection, clusters[span], members[span])
            )
        yield chunk, members, clusters, similarity


def clustered_duplicates(ctx: Context, external_ids: Iterable[str]) -> set[str]:
    """Those of ``external_ids`` that the active banding's clusters hold under another
    document (not their cluster's representative)."""
    with ctx.transaction() as connection:
        banding_id = ctx.active_banding(connection)["id"]
        return ctx.store.clustered_duplicates(connection, banding_id, list(external_ids))


def similarities(
    ctx: Context, connection: Connection, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """(estimated, exact or None) Jaccard of the stored documents a[i] and b[i]."""
    from simindex.pipeline.verify import compare

    ids = pair_documents(a, b)
    stored, _ = profiles(ctx, connection, ids)
    return compare(stored, np.searchsorted(ids, a), np.searchsorted(ids, b))


def text_spans(
    ctx: Context, connection: Connection, a: np.ndarray, b: np.ndarray, text_bytes: int
) -> Iterator[tuple[int, int]]:
    """[lo, hi) ranges of the pairs (a[i], b[i]) whose documents hold about
    ``text_bytes`` (see pair_spans), their sizes read on ``connection``."""
    ids = pair_documents(a, b)
    return pair_spans(a, b, ids, document_bytes(ctx, connection, ids), text_bytes)
