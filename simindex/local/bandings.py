"""Bandings: re-banding from the stored signatures (the new banding found its pairs and
clusters before it is active), activating one, dropping one."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from simindex.errors import ParameterError
from simindex.local import runs
from simindex.local.clusters import rebuild_clusters
from simindex.local.common import check_threshold
from simindex.local.context import Context
from simindex.local.pairs import pairs_of_banding
from simindex.pipeline import banding as lsh
from simindex.policies import ClusterPolicy
from simindex.store import BandKeyWriter

log = logging.getLogger("simindex")
# Band-key rows per write of a re-band to its bulk writer (which holds and sorts them in
# bounded memory: BandKeyWriter): the signatures of a chunk times the bands.
REBAND_STREAM_ROWS = 200_000


def reband(
    ctx: Context,
    bands: int | None = None,
    rows: int | None = None,
    *,
    threshold: float | None = None,
    activate: bool = True,
    drop_old: bool = False,
) -> int:
    """Build a banding (``bands`` x ``rows``, or the tuner's for ``threshold``) from the
    stored signatures; readers keep using the active banding until the build commits.
    Returns its id.

    With ``activate``, the new banding replaces the active one with what it had: if the
    active banding had pairs, the new one's are found in the same transaction (at
    ``threshold`` if given, else at the old pairs' threshold), and its clusters too if it
    had clusters; ``threshold`` becomes the index's threshold. So the index answers as
    before, the analysts' views included, from the commit on.

    The build runs in one transaction, or on a store that commits_in_parts with its band
    keys committed in parts (see BandKeyWriter), the banding ``building`` (used by nothing)
    until the last part, whose transaction adds the keys of documents indexed meanwhile,
    removes those of documents deleted meanwhile, and completes it; a build that fails
    removes its banding.

    ``drop_old`` removes the other bandings when the build completes, and their band keys
    right after (see Store.drop_retired_bandings): those it can't remove at once stay
    retired (unused, listed by stats) until a later write or `drop-banding`."""
    if threshold is not None:
        if bands is not None or rows is not None:
            raise ParameterError("give threshold, or bands and rows, not both")
        if not 0 < check_threshold(threshold):
            raise ParameterError(f"threshold must be within (0, 1], got {threshold}")
        bands, rows = lsh.banding_for(ctx.spec.num_perm, threshold)
    if bands is None or rows is None:
        raise ParameterError("give bands and rows, or threshold")
    lsh.check_banding(bands, rows, ctx.spec.num_perm)
    writer = None
    try:
        parameters = {"bands": bands, "rows": rows, "threshold": threshold}
        parameters |= {"activate": activate, "drop_old": drop_old}
        with (
            ctx.transaction(write=True) as connection,
            runs.recorded(ctx, connection, "reband", parameters, threshold=threshold) as run,
        ):
            old = ctx.active_banding(connection)
            banding_id = ctx.store.create_banding(connection, bands, rows)
            through = ctx.store.max_document_id(connection)
            writer = ctx.store.band_key_writer(connection, banding_id, bulk=True, parts=True)
            per_chunk = max(1, REBAND_STREAM_ROWS // bands)
            scanned = write_keys(ctx, connection, writer, bands, rows, per_chunk)
            writer.finish()
            if writer.committed:
                catch_up(ctx, connection, banding_id, (bands, rows), through, scanned)
            ctx.store.complete_banding(connection, banding_id)
            if activate:
                ctx.store.activate_banding(connection, banding_id)
                _take_over(ctx, connection, old, banding_id, threshold)
            if drop_old:  # those of now: others may have come between the parts
                for banding in ctx.store.bandings(connection):
                    if banding["id"] != banding_id and (activate or not banding["is_active"]):
                        ctx.store.drop_banding(connection, banding["id"])
            run.count(banding=banding_id, documents=scanned)
    except BaseException:
        if writer is not None and writer.committed:
            discard_banding(ctx, banding_id, writer.created_at)
        raise
    if activate and threshold is not None:
        ctx.use_settings({**ctx.settings, "threshold": threshold})
    if drop_old:
        with ctx.store.errors():
            ctx.store.drop_retired_bandings()
    return banding_id


def _take_over(
    ctx: Context,
    connection: Connection,
    old: dict[str, Any],
    banding_id: int,
    threshold: float | None,
) -> None:
    """Give the new active banding what the ``old`` one had: pairs (at ``threshold``, if
    given, which becomes the index's) and clusters."""
    if threshold is not None:
        ctx.store.update_settings(connection, threshold=threshold)
    pairs_threshold = old["pairs_threshold"] if threshold is None else threshold
    if old["pairs_threshold"] is None:
        return
    banding = next(b for b in ctx.store.bandings(connection) if b["id"] == banding_id)
    pairs_of_banding(ctx, connection, banding, pairs_threshold, since=None)
    if old["clusters_threshold"] is None:
        return
    clusters_threshold = max(old["clusters_threshold"], pairs_threshold)
    rule = old["clusters_rule"]
    policy = ClusterPolicy.from_stored(rule)
    rebuild_clusters(ctx, connection, banding_id, clusters_threshold, policy)
    ctx.store.update_banding(
        connection, banding_id, clusters_threshold=clusters_threshold, clusters_rule=rule
    )


def catch_up(
    ctx: Context,
    connection: Connection,
    banding_id: int,
    shape: tuple[int, int],
    through: int,
    scanned: int,
) -> None:
    """Bring a banding built in parts up to date with the documents indexed and deleted
    between the parts: its keys were computed from the ``scanned`` signatures of the
    documents up to id ``through``. The new documents' keys are added; if some of those
    documents are gone, the keys of documents not indexed are removed."""
    bands, rows = shape
    writer = ctx.store.band_key_writer(connection, banding_id, bulk=False)
    per_chunk = max(1, REBAND_STREAM_ROWS // bands)
    write_keys(ctx, connection, writer, bands, rows, per_chunk, after=through)
    if ctx.store.signature_count(connection, through) < scanned:
        ctx.store.delete_unindexed_band_keys(connection, banding_id)


def write_keys(
    ctx: Context,
    connection: Connection,
    writer: BandKeyWriter,
    bands: int,
    rows: int,
    per_chunk: int,
    after: int = 0,
) -> int:
    """Write the band keys of the stored signatures of ids above ``after``, read
    ``per_chunk`` at a time; returns how many documents were keyed."""
    keyed = 0
    chunks = ctx.store.signature_chunks(connection, ctx.spec.num_perm, per_chunk, after)
    for ids, sigs in chunks:
        writer.write(ids, lsh.band_keys(sigs, bands, rows))
        keyed += ids.size
    return keyed


def discard_banding(ctx: Context, banding_id: int, created_at: datetime | None) -> None:
    """Remove a banding whose build failed after committing parts of it, if it is still
    that one and still building: a failure after the last part's commit (an interrupt
    while SQLite copies the WAL) leaves the complete banding. If the removal fails too
    (the database is gone, the disk full), it stays ``building``: used by nothing, listed
    by `simindex stats`, removed by `simindex drop-banding`; if only the deletion of its
    band keys after it fails, they stay retired, which `drop-banding` deletes too."""
    try:
        with ctx.transaction(write=True) as connection:
            if ctx.store.building_banding(connection, banding_id) == created_at:
                ctx.store.drop_banding(connection, banding_id)
    except Exception as exc:  # the build's own error is the one to report
        log.warning("Could not remove banding %s, left building: %s", banding_id, exc)
        return
    try:
        ctx.store.drop_retired_bandings()
    except Exception as exc:
        log.warning("Banding %s removed; its band keys stay retired: %s", banding_id, exc)


def activate(ctx: Context, banding_id: int) -> None:
    """Make a complete banding (built by ``reband(..., activate=False)``) the active
    one, with the pairs and clusters the active one had found anew for it (as ``reband``
    does), so queries, pairs and the SQL views answer as before from the commit on."""
    with (
        ctx.transaction(write=True) as connection,
        runs.recorded(ctx, connection, "activate", {"banding": banding_id}),
    ):
        if (state := banding_row(ctx, connection, banding_id)["state"]) != "complete":
            raise ParameterError(
                f"banding {banding_id} is {state}, not complete: it can't "
                "be activated; build a new one with `simindex reband`"
            )
        old = ctx.active_banding(connection)
        if old["id"] == banding_id:
            return
        ctx.store.activate_banding(connection, banding_id)
        _take_over(ctx, connection, old, banding_id, None)


def drop_banding(ctx: Context, banding_id: int) -> None:
    """Remove one banding that is not the active one, with its band keys, pairs and
    clusters: one kept with ``activate=False`` and no longer wanted, or one a killed
    re-band left ``building``, or one retired whose band keys a stopped drop left (see
    Store.retired_bandings). A re-band still building it stops at its next part with a
    clear error. On PostgreSQL its partition is dropped after the commit, as
    :meth:`reband` drops old ones; on SQLite its keys are deleted after the commit, a band
    at a time, as for ``drop_old`` (see Store.drop_banding)."""
    with (
        ctx.transaction(write=True) as connection,
        runs.recorded(ctx, connection, "drop-banding", {"banding": banding_id}),
    ):
        if banding_id not in ctx.store.retired_bandings(connection):  # else: finish it
            if banding_row(ctx, connection, banding_id)["is_active"]:
                raise ParameterError(
                    f"banding {banding_id} is the active one: queries and pairs use it; "
                    "activate another first (`simindex activate ID`)"
                )
            ctx.store.drop_banding(connection, banding_id)
    with ctx.store.errors():
        ctx.store.drop_retired_bandings()


def banding_row(ctx: Context, connection: Connection, banding_id: int) -> dict[str, Any]:
    """The row of banding ``banding_id``; a clear error if there is none."""
    for banding in ctx.store.bandings(connection):
        if banding["id"] == banding_id:
            return banding
    raise ParameterError(f"there is no banding {banding_id}; `simindex stats` lists the bandings")
