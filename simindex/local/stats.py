"""The state of an index as a whole: integrity, statistics."""

from __future__ import annotations

from simindex.local.clusters import LARGEST_NAMED, largest_clusters
from simindex.local.context import Context
from simindex.results import IndexStats
from simindex.store import display_url


def check(ctx: Context) -> list[str]:
    """Integrity problems of the index (an empty list when it is consistent): documents
    without a signature or a complete set of band keys for every complete banding,
    band keys of no document, not exactly one active and complete banding."""
    with ctx.transaction() as connection:
        damage = ctx.store.storage_problems(connection)
        return damage or ctx.store.integrity_problems(connection)


def stats(ctx: Context, largest: int = 10) -> IndexStats:
    """Documents, bandings, and the active banding's bucket sizes, largest buckets and
    largest clusters (each with its weakest member's similarity to the representative)."""
    with ctx.transaction() as connection:
        active = ctx.active_banding(connection)
        clustered = active["clusters_threshold"] is not None
        return IndexStats(
            url=display_url(ctx.store.engine.url),
            spec=ctx.spec.to_dict(),
            keep_text=ctx.keep_text,
            threshold=ctx.threshold,
            documents=ctx.store.document_count(connection),
            exact_duplicate_groups=ctx.store.exact_duplicate_groups(connection),
            bandings=tuple(ctx.store.bandings(connection)),
            retired_bandings=tuple(ctx.store.retired_bandings(connection)),
            active_banding=active["id"],
            pairs=ctx.store.pair_count(connection, active["id"]),
            bucket_sizes=tuple(ctx.store.bucket_sizes(connection, active["id"])),
            largest_buckets=tuple(ctx.store.largest_buckets(connection, active["id"], largest)),
            cluster_sizes=tuple(ctx.store.cluster_sizes(connection, active["id"]))
            if clustered
            else None,
            largest_clusters=largest_clusters(ctx, connection, active["id"], LARGEST_NAMED)
            if clustered
            else (),
        )
