"""Exact all-pairs Jaccard join (no LSH): the ground truth LSH recall is measured against.

PPJoin (Xiao et al., 2008): order every set's shingles from globally rarest to most common;
two sets with Jaccard >= t share a shingle within the first |x| - ceil(t * |x|) + 1 of each
(prefix filter), have sizes within a factor t (length filter), and can't reach the needed
overlap if the shingles after a shared one are too few (positional filter). Sets are
processed from smallest to largest against an inverted index of the prefixes seen so far;
the few survivors are verified by merging their sorted hash arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simindex.shingle import ShingleSets
from simindex.verify import intersection_size

_EPSILON = 1e-9  # keeps ceil(t * n) exact when t * n is a whole number in floating point


def similar_pairs(sets: ShingleSets, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (a < b, rows of ``sets``) with exact Jaccard >= threshold (0 < t <= 1).

    Returns (rows_a, rows_b, jaccard), sorted by (a, b). Empty sets pair with nothing.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be within (0, 1], got {threshold}")
    counts = sets.counts
    _, token, frequency = np.unique(sets.hashes, return_inverse=True, return_counts=True)
    rank = np.empty_like(frequency)
    rank[np.argsort(frequency, kind="stable")] = np.arange(frequency.shape[0])
    owner = np.repeat(np.arange(len(sets)), counts)
    ranked = rank[token][np.lexsort((rank[token], owner))]  # per set, rarest first
    a, b, jaccard = _ppjoin(
        sets.hashes, sets.offsets, ranked.astype(np.int64), frequency.shape[0], threshold
    )
    order = np.lexsort((b, a))
    return a[order], b[order], jaccard[order]


@njit(cache=True)
def _ppjoin(hashes, offsets, ranked, n_tokens, t):
    n = offsets.shape[0] - 1
    sizes = offsets[1:] - offsets[:-1]
    prefix = np.zeros(n, dtype=np.int64)
    for x in range(n):
        if sizes[x]:
            prefix[x] = sizes[x] - int(np.ceil(t * sizes[x] - _EPSILON)) + 1
    # Inverted index of prefixes: for each token, (set, position) in processing order.
    per_token = np.zeros(n_tokens + 1, dtype=np.int64)
    for x in range(n):
        for i in range(prefix[x]):
            per_token[ranked[offsets[x] + i] + 1] += 1
    for w in range(n_tokens):
        per_token[w + 1] += per_token[w]
    entry_set = np.empty(per_token[n_tokens], dtype=np.int64)
    entry_position = np.empty(per_token[n_tokens], dtype=np.int64)
    head = per_token[:-1].copy()  # first entry still long enough
    fill = per_token[:-1].copy()  # one past the last entry added
    stamp = np.full(n, -1, dtype=np.int64)
    overlap = np.zeros(n, dtype=np.int64)
    touched = np.empty(n, dtype=np.int64)
    out_a = np.empty(1024, dtype=np.int64)
    out_b = np.empty(1024, dtype=np.int64)
    out_j = np.empty(1024, dtype=np.float64)
    found = 0
    for x in np.argsort(sizes, kind="mergesort"):
        size_x = sizes[x]
        if size_x == 0:
            continue
        n_touched = 0
        for i in range(prefix[x]):
            w = ranked[offsets[x] + i]
            while head[w] < fill[w] and sizes[entry_set[head[w]]] < t * size_x - _EPSILON:
                head[w] += 1  # too small for x, and for every larger set after it
            for e in range(head[w], fill[w]):
                y = entry_set[e]
                if stamp[y] != x:
                    stamp[y] = x
                    overlap[y] = 0
                    touched[n_touched] = y
                    n_touched += 1
                if overlap[y] < 0:
                    continue
                need = np.ceil(t / (1 + t) * (size_x + sizes[y]) - _EPSILON)
                rest = min(size_x - i - 1, sizes[y] - entry_position[e] - 1)
                overlap[y] = overlap[y] + 1 if overlap[y] + 1 + rest >= need else -1
        for i in range(prefix[x]):
            w = ranked[offsets[x] + i]
            entry_set[fill[w]] = x
            entry_position[fill[w]] = i
            fill[w] += 1
        for c in range(n_touched):
            y = touched[c]
            if overlap[y] <= 0:
                continue
            common = intersection_size(
                hashes, offsets[x], offsets[x + 1], offsets[y], offsets[y + 1]
            )
            jaccard = common / (size_x + sizes[y] - common)
            if jaccard >= t:
                if found == out_a.shape[0]:
                    out_a = np.concatenate((out_a, np.empty_like(out_a)))
                    out_b = np.concatenate((out_b, np.empty_like(out_b)))
                    out_j = np.concatenate((out_j, np.empty_like(out_j)))
                out_a[found], out_b[found] = min(x, y), max(x, y)
                out_j[found] = jaccard
                found += 1
    return out_a[:found], out_b[:found], out_j[:found]
