"""Point queries: the indexed documents similar to a text, or to an indexed document."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from simindex.defaults import DEFAULT_MAX_BUCKET_SIZE
from simindex.errors import EmptyDocumentError, InputError, ParameterError
from simindex.local.common import (
    as_profiles,
    check_threshold,
    expected_recall,
    matches_of,
    profiles,
)
from simindex.local.context import Context
from simindex.pipeline import banding as lsh
from simindex.results import Match

if TYPE_CHECKING:
    from simindex.pipeline.verify import Profiles

# Candidates of a point query up to which its one statement reads their texts too (see
# Store.documents_in_buckets); past it, a second statement reads the documents of those
# whose estimate passes. Most queries have one to three.
QUERY_TEXT_CANDIDATES = 8


def query(
    ctx: Context,
    text: str,
    *,
    threshold: float | None = None,
    limit: int | None = None,
    max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
) -> list[Match]:
    """Indexed documents similar to ``text`` (>= threshold; default the index's), best
    first. Of a bucket with more than ``max_bucket_size`` members only that many (the
    earliest documents) are compared, as find_pairs links a hot bucket's members to
    one: a match found only through such buckets, and not among their earliest
    members, is missed. That bounds a query's time and memory on skewed data."""
    profile = text_profile(ctx, text)
    return query_profile(ctx, profile, threshold, limit, max_bucket_size, exclude=None)


def text_profile(ctx: Context, text: str) -> Profiles:
    """The signature (and shingle set, when text is kept) of a query text."""
    from simindex.pipeline.minhash import signatures
    from simindex.pipeline.shingle import normalize, shingle_sets
    from simindex.pipeline.verify import Profiles

    normalized = normalize(text)
    if not normalized:
        raise EmptyDocumentError("the query text is empty after normalization: nothing to compare")
    sets = shingle_sets([normalized], ctx.spec)
    return Profiles(signatures(sets, ctx.spec), sets if ctx.keep_text else None)


def query_signature(ctx: Context, signature: object) -> list[str]:
    """The external ids of every indexed document that shares a bucket of the active
    banding with ``signature`` (num_perm integers in [0, 2**32), under the index's scheme):
    all candidates, unverified and unbounded, as datasketch's MinHashLSH.query answers.
    Raises ParameterError for a wrong length or values, SpecMismatchError for an index
    whose signatures simindex makes from text."""
    from simindex.local.ingest import as_signatures

    ctx.spec.require_signature_scheme()
    signatures = as_signatures(signature, ctx.spec.num_perm, 1)
    _, found = bucket_members(ctx, signatures, sys.maxsize, sys.maxsize)
    return [row[0] for row in found.values() if row[0] is not None]


def bucket_counts(ctx: Context) -> list[dict[int, int]]:
    """Per band of the active banding, bucket key -> the number of documents in it."""
    with ctx.transaction() as connection:
        active = ctx.active_banding(connection)
        band, key, size = ctx.store.bucket_counts(connection, active["id"])
    counts: list[dict[int, int]] = [{} for _ in range(active["bands"])]
    for b, k, n in zip(band.tolist(), key.tolist(), size.tolist(), strict=True):
        counts[b][k] = n
    return counts


def query_id(
    ctx: Context,
    external_id: str,
    *,
    threshold: float | None = None,
    limit: int | None = None,
    max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
) -> list[Match]:
    """Indexed documents similar to the indexed document ``external_id`` (itself
    excluded, though it counts among a bucket's members); hot buckets are bounded as in
    :meth:`query`."""
    with ctx.transaction() as connection:
        found = ctx.store.document_ids(connection, [external_id])
        if not found:
            raise InputError(f"no document with id {external_id!r} is indexed")
        document_id = found[external_id]
        profile, _ = profiles(ctx, connection, np.array([document_id], dtype=np.int64))
    return query_profile(ctx, profile, threshold, limit, max_bucket_size, exclude=document_id)


def query_profile(
    ctx: Context,
    profile: Profiles,
    threshold: float | None,
    limit: int | None,
    max_bucket_size: int,
    exclude: int | None,
) -> list[Match]:
    from simindex.pipeline.verify import compare, estimate_floor

    threshold = ctx.threshold if threshold is None else check_threshold(threshold)
    if max_bucket_size < 1:
        raise ParameterError(f"max_bucket_size must be at least 1, got {max_bucket_size}")
    floor = estimate_floor(threshold, ctx.spec.num_perm) if ctx.keep_text else threshold
    # Without a floor every candidate's document is needed: read in the lookup itself.
    with_text = QUERY_TEXT_CANDIDATES if floor > 0 else sys.maxsize
    for _ in range(2):  # again, once, if a candidate went between the two statements
        active, found = bucket_members(ctx, profile.signatures, max_bucket_size, with_text)
        found.pop(exclude, None)
        doc_ids, complete = plausible_candidates(ctx, profile.signatures, found, floor)
        if complete:
            break
    expected_recall(active, threshold, ctx.spec.num_perm)
    if not doc_ids.size:
        return []
    stored, names = as_profiles(ctx, doc_ids, found)
    rows = np.arange(1, doc_ids.size + 1)  # the query is row 0 of the pool
    estimated, exact = compare(profile.concat(stored), np.zeros_like(rows), rows)
    matches = matches_of([None, *names], rows, estimated, exact, threshold)
    return matches[:limit] if limit is not None else matches


def plausible_candidates(
    ctx: Context,
    signature: np.ndarray,
    found: dict[int, tuple[str | None, str | None, bytes]],
    floor: float,
) -> tuple[np.ndarray, bool]:
    """The sorted ids of a query's candidates (``found``, see bucket_members) whose
    estimate against the query's ``signature`` is at least ``floor`` (verify.estimate_floor,
    as `pairs` rules pairs out; without kept text the threshold: the estimate is the
    verdict), and whether all of them are still there. Those ``found`` holds without their
    external id and text are read, in one statement, into ``found``; one deleted (or
    replaced, which gives it a new id) since the lookup is left out, and the answer is then
    not complete."""
    from simindex.pipeline.minhash import estimate_rows, unpack

    ids = np.array(sorted(found), dtype=np.int64)
    if not ids.size:
        return ids, True
    stored = unpack([found[int(i)][2] for i in ids], ctx.spec.num_perm)
    sigs = np.concatenate([signature, stored])  # the query is row 0
    estimated = estimate_rows(sigs, np.zeros_like(ids), np.arange(1, ids.size + 1))
    ids = ids[estimated >= floor]
    unread = ids[[found[int(i)][0] is None for i in ids.tolist()]]
    if not unread.size:
        return ids, True
    with ctx.statement() as connection:
        read = ctx.store.documents_of(connection, unread)
    found.update(read)
    return ids[[found[int(i)][0] is not None for i in ids.tolist()]], len(read) == unread.size


def bucket_members(
    ctx: Context, signatures: np.ndarray, max_bucket_size: int, with_text: int
) -> tuple[dict[str, Any], dict[int, tuple[str | None, str | None, bytes]]]:
    """The active banding and the stored rows of the documents sharing one of its buckets
    with ``signatures`` (see Store.documents_in_buckets: past ``with_text`` of them, their
    signatures only). One statement, with no
    transaction around it, in the common case (a point query's time is mostly round
    trips): the banding a query last used is assumed still active, and the lookup itself
    checks that it is. An empty answer may mean a re-band replaced it, so the active
    banding is read again and, if it changed, the lookup repeated with the new one."""
    with ctx.statement() as connection:
        active = ctx.active or ctx.active_banding(connection)
        while True:
            keys = lsh.band_keys(signatures, active["bands"], active["rows"])
            found = ctx.store.documents_in_buckets(
                connection, active["id"], keys, max_bucket_size, with_text
            )
            latest = active if found else ctx.active_banding(connection)
            if latest["id"] == active["id"]:
                break
            active = latest
    ctx.active = active
    return active, found
