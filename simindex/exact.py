"""Exact all-pairs Jaccard join (no LSH): the ground truth LSH recall is measured against.

Prefix filtering (AllPairs): order every set's shingles from globally rarest to most common;
two sets with Jaccard >= t must share a shingle among the first |x| - ceil(t * |x|) + 1 of
each, so only pairs sharing a prefix shingle are compared, then exactly.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simindex.shingle import ShingleSets
from simindex.verify import exact_jaccard


def similar_pairs(sets: ShingleSets, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (a < b, rows of ``sets``) with exact Jaccard >= threshold (0 < t <= 1).

    Returns (rows_a, rows_b, jaccard), sorted by (a, b). Empty sets pair with nothing.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be within (0, 1], got {threshold}")
    counts = sets.counts
    owner = np.repeat(np.arange(len(sets)), counts)
    _, token, frequency = np.unique(sets.hashes, return_inverse=True, return_counts=True)
    rank = np.empty_like(frequency)
    rank[np.argsort(frequency, kind="stable")] = np.arange(frequency.shape[0])
    order = np.lexsort((rank[token], owner))  # per document, rarest shingle first
    position = np.arange(owner.shape[0]) - np.repeat(sets.offsets[:-1], counts)
    prefix = counts - np.ceil(threshold * counts - 1e-9).astype(np.int64) + 1
    in_prefix = position < np.repeat(prefix, counts)
    # Buckets: documents sharing a prefix shingle (token), as (members, offsets).
    chosen_tokens = token[order][in_prefix]
    chosen_owners = owner[order][in_prefix]
    by_token = np.argsort(chosen_tokens, kind="stable")
    members = chosen_owners[by_token]
    starts = np.flatnonzero(np.r_[True, np.diff(chosen_tokens[by_token]) != 0])
    offsets = np.r_[starts, members.shape[0]].astype(np.int64)
    a, b = _length_filtered_pairs(members, offsets, counts, threshold)
    packed = np.unique((a << 31) | b)
    a, b = packed >> 31, packed & ((1 << 31) - 1)
    jaccard = exact_jaccard(sets, a, b)
    keep = jaccard >= threshold
    return a[keep], b[keep], jaccard[keep]


def _length_filtered_pairs(members, offsets, sizes, threshold):
    """Pairs (a < b) inside each bucket whose set sizes allow Jaccard >= threshold
    (min size >= threshold * max size)."""
    total = _length_filtered_kernel(members, offsets, sizes, threshold, None, None)
    a = np.empty(total, dtype=np.int64)
    b = np.empty(total, dtype=np.int64)
    _length_filtered_kernel(members, offsets, sizes, threshold, a, b)
    return a, b


@njit(cache=True)
def _length_filtered_kernel(members, offsets, sizes, threshold, out_a, out_b):
    """Counts the pairs when out_a is None, else writes them."""
    count = 0
    for i in range(offsets.shape[0] - 1):
        bucket = members[offsets[i] : offsets[i + 1]]
        bucket = bucket[np.argsort(sizes[bucket], kind="mergesort")]
        for x in range(bucket.shape[0]):
            limit = sizes[bucket[x]] / threshold + 1e-9
            for y in range(x + 1, bucket.shape[0]):
                if sizes[bucket[y]] > limit:
                    break
                if out_a is not None:
                    out_a[count] = min(bucket[x], bucket[y])
                    out_b[count] = max(bucket[x], bucket[y])
                count += 1
    return count
