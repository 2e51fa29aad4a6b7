"""Exact all-pairs Jaccard join (no LSH): the ground truth LSH recall is measured against.

PPJoin (Xiao et al., 2008): order every set's shingles from globally rarest to most common;
two sets with Jaccard >= t share a shingle within the first |x| - ceil(t * |x|) + 1 of each
(prefix filter), have sizes within a factor t (length filter), and can't reach the needed
overlap if the shingles after a shared one are too few (positional filter). Sets are
processed from smallest to largest against an inverted index of the prefixes seen so far;
the few survivors are verified by merging their sorted token arrays.

The sets are first recoded as token ranks (:func:`rank_tokens`), int32 instead of uint64
hashes, chunk by chunk: the join holds ~4 bytes a shingle, not the ~40 of sorting every
hash with its owner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from numba import njit

from simindex.pipeline.shingle import ShingleSets
from simindex.pipeline.verify import intersection_size

_EPSILON = 1e-9  # keeps ceil(t * n) exact when t * n is a whole number in floating point
_LOOKUP_STEP = 1 << 20  # hashes looked up at a time (8 bytes of positions each)


@dataclass(frozen=True)
class RankedSets:
    """Shingle sets with each hash replaced by its token's rank: tokens ordered from the
    rarest (in the fewest sets) to the most common, ties by hash value; each set sorted
    ascending, so rarest first. The ranks are a bijection of the hashes, so intersections
    (and Jaccard) are the same, in 4 bytes a shingle (int32; int64 past 2**31 tokens).
    Tokens of rank < ``shared`` are in one set only and can't make a pair."""

    sets: ShingleSets
    tokens: int
    shared: int


def rank_tokens(chunks: Callable[[], Iterable[ShingleSets]]) -> RankedSets:
    """The sets of every chunk ``chunks()`` yields, in order, as :class:`RankedSets`.

    ``chunks`` is called twice and must yield the same sets both times (the tokens are
    counted, then recoded), so that only one chunk's hashes need be held at a time (callers
    shingle each chunk as it is asked for): the memory is ~4 bytes a shingle and ~20 bytes
    a distinct token, besides one chunk."""
    distinct, frequency = np.empty(0, np.uint64), np.empty(0, np.int32)
    for chunk in chunks():
        values, counts = np.unique(chunk.hashes, return_counts=True)
        distinct, frequency = _merge_counts(distinct, frequency, values, counts)
        del chunk, values, counts
    tokens, shared = distinct.shape[0], int(np.count_nonzero(frequency == 1))
    rank = np.empty(tokens, np.int32 if tokens < 2**31 else np.int64)
    _rank_by_frequency(frequency, rank)
    ranked = np.empty(int(frequency.sum()), rank.dtype)  # a set holds a token once
    del frequency
    offsets, done = [np.zeros(1, np.int64)], 0
    for chunk in chunks():
        for lo in range(0, chunk.hashes.shape[0], _LOOKUP_STEP):
            part = chunk.hashes[lo : lo + _LOOKUP_STEP]
            ranked[done + lo : done + lo + part.shape[0]] = rank[np.searchsorted(distinct, part)]
        offsets.append(chunk.offsets[1:] + done)
        done += chunk.hashes.shape[0]
        del chunk
    sets = ShingleSets(ranked, np.concatenate(offsets))
    _sort_runs(sets.hashes, sets.offsets)
    return RankedSets(sets, tokens, shared)


@njit(cache=True, nogil=True)
def _rank_by_frequency(frequency, rank):
    """rank[token]: the token's place when ordered by frequency, ties by position (a stable
    counting sort, without argsort's 8 bytes a token)."""
    start = np.zeros(frequency.max() + 2 if frequency.shape[0] else 1, np.int64)
    for f in frequency:
        start[f + 1] += 1
    for f in range(1, start.shape[0]):
        start[f] += start[f - 1]
    for token in range(frequency.shape[0]):
        rank[token] = start[frequency[token]]
        start[frequency[token]] += 1


@njit(cache=True, nogil=True)
def _merge_counts(values_a, counts_a, values_b, counts_b):
    """The union of two ascending arrays of distinct values, with their counts summed
    (views of arrays as long as both inputs: a copy would hold them twice)."""
    values = np.empty(values_a.shape[0] + values_b.shape[0], values_a.dtype)
    counts = np.empty(values.shape[0], counts_a.dtype)
    i = j = n = 0
    while i < values_a.shape[0] or j < values_b.shape[0]:
        if j == values_b.shape[0] or (i < values_a.shape[0] and values_a[i] < values_b[j]):
            values[n], counts[n] = values_a[i], counts_a[i]
            i += 1
        elif i == values_a.shape[0] or values_b[j] < values_a[i]:
            values[n], counts[n] = values_b[j], counts_b[j]
            j += 1
        else:
            values[n], counts[n] = values_a[i], counts_a[i] + counts_b[j]
            i += 1
            j += 1
        n += 1
    return values[:n], counts[:n]


@njit(cache=True, nogil=True)
def _sort_runs(values, offsets):
    """Sort each run values[offsets[i]:offsets[i + 1]] in place."""
    for i in range(offsets.shape[0] - 1):
        values[offsets[i] : offsets[i + 1]].sort()


def similar_pairs(
    sets: ShingleSets | RankedSets, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (a < b, rows of ``sets``) with exact Jaccard >= threshold (0 < t <= 1).

    Returns (rows_a, rows_b, jaccard), sorted by (a, b). Empty sets pair with nothing.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be within (0, 1], got {threshold}")
    ranked = sets if isinstance(sets, RankedSets) else rank_tokens(lambda: [sets])
    a, b, jaccard = _ppjoin(
        ranked.sets.hashes, ranked.sets.offsets, ranked.tokens, ranked.shared, threshold
    )
    order = np.lexsort((b, a))
    return a[order], b[order], jaccard[order]


@njit(cache=True, nogil=True)
def _ppjoin(ranked, offsets, n_tokens, shared, t):
    n = offsets.shape[0] - 1
    sizes = offsets[1:] - offsets[:-1]
    prefix = np.zeros(n, dtype=np.int64)
    for x in range(n):
        if sizes[x]:
            prefix[x] = sizes[x] - int(np.ceil(t * sizes[x] - _EPSILON)) + 1
    # Inverted index of prefixes: for each token in 2+ sets (slot w - shared), (set,
    # position) in processing order. A token of one set only would find nothing.
    slots = n_tokens - shared
    per_token = np.zeros(slots + 1, dtype=np.int64)
    for x in range(n):
        for i in range(prefix[x]):
            w = ranked[offsets[x] + i] - shared
            if w >= 0:
                per_token[w + 1] += 1
    for w in range(slots):
        per_token[w + 1] += per_token[w]
    entry_set = np.empty(per_token[slots], dtype=np.int32)
    entry_position = np.empty(per_token[slots], dtype=np.int32)
    head = per_token[:-1].copy()  # first entry still long enough
    fill = per_token[:-1]  # one past the last entry added
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
            w = ranked[offsets[x] + i] - shared
            if w < 0:
                continue
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
            w = ranked[offsets[x] + i] - shared
            if w >= 0:
                entry_set[fill[w]] = x
                entry_position[fill[w]] = i
                fill[w] += 1
        for c in range(n_touched):
            y = touched[c]
            if overlap[y] <= 0:
                continue
            common = intersection_size(
                ranked, offsets[x], offsets[x + 1], offsets[y], offsets[y + 1]
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
