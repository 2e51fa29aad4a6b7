"""What several verbs of the executor share: parameter checks, the expected recall, stored
documents as profiles, matches."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection

from simindex.defaults import DEFAULT_RECALL
from simindex.errors import LowRecallWarning, ParameterError, SimindexError
from simindex.local.context import Context
from simindex.pipeline import banding as lsh
from simindex.pipeline.chunking import spans
from simindex.results import Match, Pair

if TYPE_CHECKING:
    from simindex.pipeline.verify import Profiles

# Text (and signature) bytes of the documents of one verification chunk: its memory is a
# small multiple of this (normalized code points, shingle hashes), whatever the pair count.
VERIFY_TEXT_BYTES = 2**20


def check_threshold(threshold: float) -> float:
    if not 0 <= threshold <= 1:
        raise ParameterError(f"threshold must be within [0, 1], got {threshold}")
    return threshold


def check_seed(seed: int) -> None:
    if seed < 0:
        raise ParameterError(f"seed must be a non-negative integer, got {seed}")


def expected_recall(banding: dict[str, Any], threshold: float, num_perm: int) -> float:
    """P(threshold) of the banding: the share of pairs at the threshold it makes candidates.
    Warns (LowRecallWarning) when that is below the recall the tuner aims for, with the fix."""
    bands, rows = banding["bands"], banding["rows"]
    recall = lsh.candidate_probability(threshold, bands, rows)
    if recall >= DEFAULT_RECALL - 1e-9:
        return recall
    if threshold > 0 and lsh.tune_threshold(num_perm, threshold).feasible:
        fix = (
            f"run `simindex reband --threshold {threshold:g}` (the banding `simindex tune "
            f"--threshold {threshold:g}` picks; `tune --db` shows its cost on this index first)"
        )
    else:
        fix = f"no banding of {num_perm} hashes reaches it at that similarity"
    warnings.warn(
        f"the active banding ({bands} bands x {rows} rows) finds a pair at similarity "
        f"{threshold:g} with probability {recall:.1%} (expected recall; the target is "
        f"{DEFAULT_RECALL:g}); {fix}",
        LowRecallWarning,
        stacklevel=4,
    )
    return recall


def reported_similarity(estimated: np.ndarray, exact: np.ndarray | None) -> np.ndarray:
    """The similarity reported: exact Jaccard when known, else the estimate."""
    return estimated if exact is None else exact


def matches_of(
    names: list[str | None],
    rows: np.ndarray,
    estimated: np.ndarray,
    exact: np.ndarray | None,
    threshold: float,
) -> list[Match]:
    """Matches for profile rows with similarity >= threshold, best first."""
    similarity = reported_similarity(estimated, exact)
    matches = [
        Match(names[row], float(estimated[p]), None if exact is None else float(exact[p]))
        for p, row in enumerate(rows.tolist())
        if similarity[p] >= threshold
    ]
    return sorted(matches, key=lambda m: (-m.similarity, m.external_id))


def to_pair(row: dict[str, Any]) -> Pair:
    return Pair(row["id_a"], row["id_b"], row["exact_jaccard"], row["estimated_jaccard"])


def pair_spans(
    a: np.ndarray, b: np.ndarray, ids: np.ndarray, sizes: np.ndarray, text_bytes: int
) -> Iterator[tuple[int, int]]:
    """[lo, hi) ranges of the pairs (a[i], b[i]) whose documents hold about ``text_bytes``
    (one pair at least), ``sizes`` being the bytes of the sorted document ``ids``. A run of
    equal a[i] counts a's size once, so pairs sorted by a make fewer ranges."""
    first_of_a = np.r_[True, a[1:] != a[:-1]]
    cost = sizes[np.searchsorted(ids, b)]
    cost += sizes[np.searchsorted(ids, a)] * first_of_a
    return spans(np.cumsum(cost), text_bytes)


def profiles(ctx: Context, connection: Connection, ids: np.ndarray) -> tuple[Profiles, list[str]]:
    """Stored signatures (and shingle sets from stored text) of document ids, and their
    external ids, in the order of ``ids``."""
    return as_profiles(ctx, ids, ctx.store.documents_of(connection, ids))


def as_profiles(
    ctx: Context, ids: np.ndarray, rows: Mapping[int, tuple[str | None, str | None, bytes]]
) -> tuple[Profiles, list[str]]:
    """Profiles of documents from their stored rows (see Store.documents_of)."""
    from simindex.pipeline.minhash import unpack
    from simindex.pipeline.shingle import normalize_batch, shingle_sets
    from simindex.pipeline.verify import Profiles

    sigs = unpack([rows[int(i)][2] for i in ids], ctx.spec.num_perm)
    names = [rows[int(i)][0] for i in ids]
    if not ctx.keep_text:
        return Profiles(sigs, None), names
    sets = shingle_sets(normalize_batch([rows[int(i)][1] or "" for i in ids]), ctx.spec)
    return Profiles(sigs, sets), names


def document_bytes(ctx: Context, connection: Connection, ids: np.ndarray) -> np.ndarray:
    """What each of the sorted document ids weighs in a verification chunk: its
    signature's bytes and its stored text's."""
    sizes = np.full(ids.shape, 4 * ctx.spec.num_perm, dtype=np.int64)
    if ctx.keep_text:
        sizes += ctx.store.text_sizes(connection, ids)
    return sizes


def check_pairs_cover(ctx: Context, connection: Connection, active: dict, threshold: float) -> None:
    found_at = active["pairs_threshold"]
    if found_at is None:
        raise SimindexError(
            "pairs have not been found with the active banding; "
            f"run `simindex pairs --threshold {threshold}` first"
        )
    if threshold < found_at - 1e-12:
        raise SimindexError(
            f"pairs were found at threshold {found_at}, so those between {threshold} and "
            f"{found_at} are unknown; run `simindex pairs --threshold {threshold}` first"
        )
    if ctx.store.max_document_id(connection) > active["pairs_through"]:
        raise SimindexError(
            "documents were added since pairs were found; run `simindex pairs "
            f"--threshold {found_at}` first (it looks at the new documents only)"
        )
