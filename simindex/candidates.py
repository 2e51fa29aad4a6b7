"""Stage 4: candidate pairs from LSH buckets.

Buckets (documents sharing one band key) come grouped from the database (store.iter_buckets)
or, for a batch not yet stored, from :func:`group_keys`. Every pair inside a bucket is a
candidate, except in a hot bucket (more than ``max_bucket_size`` members, e.g. boilerplate):
there each member is paired with the bucket's smallest id only, so the cost is O(n), not
O(n**2), and clustering still links them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numba import njit

from simindex.defaults import DEFAULT_MAX_BUCKET_SIZE


@dataclass(frozen=True)
class Candidates:
    """Distinct candidate pairs (doc_a < doc_b, int64 arrays sorted by (doc_a, doc_b)),
    with how many hot buckets were linked to a representative instead of paired out."""

    doc_a: np.ndarray
    doc_b: np.ndarray
    hot_buckets: int
    largest_bucket: int

    def __len__(self) -> int:
        return self.doc_a.shape[0]


def collect(
    buckets: Iterable[tuple[np.ndarray, np.ndarray]], max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE
) -> Candidates:
    """Candidate pairs of (members, offsets) bucket chunks, deduplicated across buckets."""
    chunks_a, chunks_b, hot, largest = [np.empty(0, np.int64)], [np.empty(0, np.int64)], 0, 0
    for members, offsets in buckets:
        a, b, chunk_hot = distinct_bucket_pairs(members, offsets, max_bucket_size)
        hot += chunk_hot
        if offsets.shape[0] > 1:
            largest = max(largest, int(np.diff(offsets).max()))
        chunks_a.append(a)
        chunks_b.append(b)
    doc_a, doc_b = unique_pairs(np.concatenate(chunks_a), np.concatenate(chunks_b))
    return Candidates(doc_a, doc_b, hot, largest)


def distinct_bucket_pairs(
    members: np.ndarray, offsets: np.ndarray, max_bucket_size: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`bucket_pairs` with each pair once, sorted: the candidates of one chunk of
    buckets, whichever executor groups them (simindex.stages.bucket_pairs)."""
    a, b, hot = bucket_pairs(members, offsets, max_bucket_size)
    return *unique_pairs(a, b), hot


def unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs (a[i], b[i]), sorted by (a, b). Any int64 ids: pairs are compared
    as two columns, not packed into one integer (which would cap ids at 2**31)."""
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    first = np.ones(a.shape[0], dtype=bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return a[first], b[first]


def group_keys(keys: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Buckets with 2+ members among rows of ``keys`` (int64, (n, bands)); members are
    ``ids[row]``. Returns (members, offsets) like store.iter_buckets."""
    n, bands = keys.shape
    band = np.tile(np.arange(bands), n)
    key = keys.reshape(-1)
    member = np.repeat(ids, bands)
    order = np.lexsort((member, key, band))
    band, key, member = band[order], key[order], member[order]
    starts = np.flatnonzero(np.r_[True, (band[1:] != band[:-1]) | (key[1:] != key[:-1])])
    sizes = np.diff(np.r_[starts, band.shape[0]])
    multi = sizes > 1
    keep = np.repeat(multi, sizes)
    offsets = np.zeros(int(multi.sum()) + 1, dtype=np.int64)
    np.cumsum(sizes[multi], out=offsets[1:])
    return member[keep].astype(np.int64), offsets


def bucket_pairs(
    members: np.ndarray, offsets: np.ndarray, max_bucket_size: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Pairs (a < b) inside each bucket; hot buckets are linked to their smallest member.

    Returns (doc_a, doc_b, number of hot buckets). Pairs may repeat across buckets.
    """
    sizes = np.diff(offsets)
    hot = sizes > max_bucket_size
    counts = np.where(hot, sizes - 1, sizes * (sizes - 1) // 2)
    starts = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    doc_a = np.empty(int(starts[-1]), dtype=np.int64)
    doc_b = np.empty_like(doc_a)
    _bucket_pairs_kernel(members.astype(np.int64), offsets, hot, starts, doc_a, doc_b)
    return doc_a, doc_b, int(hot.sum())


@njit(cache=True)
def _bucket_pairs_kernel(members, offsets, hot, starts, doc_a, doc_b):
    for i in range(offsets.shape[0] - 1):
        bucket = np.sort(members[offsets[i] : offsets[i + 1]])
        out = starts[i]
        if hot[i]:
            for j in range(1, bucket.shape[0]):
                doc_a[out] = bucket[0]
                doc_b[out] = bucket[j]
                out += 1
        else:
            for j in range(bucket.shape[0]):
                for q in range(j + 1, bucket.shape[0]):
                    doc_a[out] = bucket[j]
                    doc_b[out] = bucket[q]
                    out += 1
