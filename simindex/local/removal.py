"""Removing documents (by id, or by age), with their signatures, band keys, pairs and
cluster rows; and reading stored documents back."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import Connection

from simindex.errors import InputError, ParameterError
from simindex.local import runs
from simindex.local.clusters import rebuild_clusters, recluster
from simindex.local.context import Context
from simindex.pipeline import banding as lsh
from simindex.policies import ClusterPolicy
from simindex.results import Removal, StoredDocument


def delete(
    ctx: Context,
    external_ids: Iterable[str | int],
    *,
    dry_run: bool = False,
    must_exist: bool = False,
) -> Removal:
    """Remove documents by external id, with their signatures, band keys, pairs and
    cluster rows, in one transaction; the clusters they were in are recomputed from the
    remaining pairs. Ids that are not indexed are named in the result, or with
    ``must_exist`` raise InputError and nothing is removed; ``dry_run`` removes nothing
    and says what would go."""
    wanted = list(dict.fromkeys(str(i) for i in external_ids))
    with ctx.transaction(write=not dry_run) as connection:
        found = ctx.store.document_ids(connection, wanted)
        missing = [i for i in wanted if i not in found]
        if must_exist and missing:
            raise InputError(
                f"document id {missing[0]!r} is not indexed ({len(missing)} of the "
                f"{len(wanted)} ids to remove are not); nothing was removed"
            )
        if not dry_run:
            with runs.recorded(ctx, connection, "delete", {"ids": len(wanted)}) as run:
                ids = np.array(sorted(found.values()), dtype=np.int64)
                delete_documents(ctx, connection, ids)
                run.count(removed=len(found), not_found=len(missing))
    return Removal(removed=[i for i in wanted if i in found], not_found=missing, dry_run=dry_run)


def evict(ctx: Context, older_than: datetime, *, dry_run: bool = False) -> Removal:
    """Remove the documents ingested before ``older_than`` (like :meth:`delete`); a naive
    datetime is taken as UTC. A cut-off in the future is refused: it would remove
    documents ingested from now on too."""
    if older_than.tzinfo is None:
        older_than = older_than.replace(tzinfo=UTC)
    if older_than > datetime.now(UTC):
        raise ParameterError(
            f"the cut-off {older_than.isoformat()} is in the future, which would remove "
            "every document; give a time in the past (or a positive --days)"
        )
    with ctx.transaction(write=not dry_run) as connection:
        ids = ctx.store.ingested_before(connection, older_than)
        removed = ctx.store.external_ids_of(connection, ids)
        if not dry_run:
            parameters = {"older_than": older_than.isoformat()}
            with runs.recorded(ctx, connection, "evict", parameters) as run:
                delete_documents(ctx, connection, ids)
                run.count(removed=len(removed))
    return Removal(removed=removed, not_found=[], dry_run=dry_run)


def documents(ctx: Context, external_ids: Iterable[str | int]) -> dict[str, StoredDocument]:
    """The stored documents of those of ``external_ids`` that are indexed, by id."""
    wanted = [str(i) for i in external_ids]
    with ctx.transaction() as connection:
        found = ctx.store.document_records(connection, wanted)
    return {i: StoredDocument(**found[i]) for i in wanted if i in found}


def delete_documents(ctx: Context, connection: Connection, ids: np.ndarray) -> None:
    if not ids.size:
        return
    affected = {}
    for banding in ctx.store.bandings(connection):
        if banding["clusters_threshold"] is not None:
            held = ctx.store.clusters_of(connection, banding["id"], ids).values()
            old = np.unique(np.array(list(held), dtype=np.int64))
            members = ctx.store.cluster_members(connection, banding["id"], old)
            affected[banding["id"]] = (banding, np.setdiff1d(members, ids))
    sigs = ctx.store.signatures_of(connection, ids, ctx.spec.num_perm)
    for banding in ctx.store.bandings(connection):
        keys = lsh.band_keys(sigs, banding["bands"], banding["rows"])
        ctx.store.delete_band_keys(connection, banding["id"], ids, keys)
    ctx.store.delete_documents(connection, ids)
    for banding_id, (banding, members) in affected.items():
        policy = ClusterPolicy.from_stored(banding["clusters_rule"])
        if policy.mode == "star":  # who claims whom can change across the component
            rebuild_clusters(ctx, connection, banding_id, banding["clusters_threshold"], policy)
            continue
        doc_a, doc_b = ctx.store.pairs_at_least(
            connection, banding_id, banding["clusters_threshold"], among=members
        )
        inside = np.isin(doc_b, members)
        ctx.store.delete_clusters(connection, banding_id, members)
        documents, cluster_ids = recluster(ctx, connection, doc_a[inside], doc_b[inside], policy)
        ctx.store.insert_clusters(connection, banding_id, documents, cluster_ids)
