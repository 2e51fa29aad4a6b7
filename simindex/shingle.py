"""Stage 1: normalize text, cut it into shingles, hash each shingle to 64 bits.

Work is done for a whole batch at once: the batch's normalized texts become one array of
Unicode code points, and one compiled kernel (numba, parallel over documents) writes each
document's sorted, distinct shingle hashes. Memory is O(total characters in the batch).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xxhash
from numba import njit, prange

from simindex.hashing import (
    MASK63,
    TAG_CHAR_SHINGLE,
    TAG_WORD,
    TAG_WORD_SHINGLE,
    mix64,
    sequence_start,
)
from simindex.spec import SignatureSpec

_SPACE = 32


def normalize(text: str) -> str:
    """Scheme v1 normalization: Unicode NFKC, then ``str.lower()``, then every run of
    whitespace (``str.split()``) becomes one space, with none at either end."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def content_hash(normalized: str) -> int:
    """xxh3_64 of the normalized text's UTF-8 bytes, masked to 63 bits (fits a BIGINT).

    Equal normalized texts have equal content hashes: exact duplicates are a GROUP BY on it.
    """
    return xxhash.xxh3_64_intdigest(normalized.encode("utf-8")) & MASK63


@dataclass(frozen=True)
class ShingleSets:
    """Shingle hash sets of a batch of documents.

    hashes: uint64, every document's distinct shingle hashes, sorted ascending, concatenated.
    offsets: int64 of shape (n + 1,); document i owns ``hashes[offsets[i]:offsets[i + 1]]``.
    A document whose normalized text is empty owns no hashes (count 0).
    """

    hashes: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.hashes[self.offsets[i] : self.offsets[i + 1]]

    @property
    def counts(self) -> np.ndarray:
        """Number of distinct shingles per document (int64, shape (n,))."""
        return np.diff(self.offsets)

    def take(self, rows: np.ndarray) -> ShingleSets:
        """The sets of the given rows (int64 indices), in that order."""
        counts = self.offsets[rows + 1] - self.offsets[rows]
        offsets = np.zeros(rows.size + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        starts = np.repeat(self.offsets[rows] - offsets[:-1], counts)
        return ShingleSets(self.hashes[starts + np.arange(offsets[-1])], offsets)


def shingle_sets(normalized_texts: Sequence[str], spec: SignatureSpec) -> ShingleSets:
    """Shingle hash sets of already-normalized texts (see :func:`normalize`)."""
    lengths = np.fromiter(
        (len(t) for t in normalized_texts), dtype=np.int64, count=len(normalized_texts)
    )
    offsets = np.zeros(len(normalized_texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    code_points = np.frombuffer("".join(normalized_texts).encode("utf-32-le"), dtype=np.uint32)
    # A document of L > 0 code points has at most L shingles, so its code-point span of
    # `scratch` is room enough; empty documents get none.
    scratch = np.empty(max(int(offsets[-1]), 1), dtype=np.uint64)
    spare = np.empty_like(scratch)  # room for the sort
    counts = np.empty(len(normalized_texts), dtype=np.int64)
    _shingle_kernel(code_points, offsets, spec.shingle == "word", spec.k, scratch, spare, counts)
    out_offsets = np.zeros_like(offsets)
    np.cumsum(counts, out=out_offsets[1:])
    hashes = np.empty(int(out_offsets[-1]), dtype=np.uint64)
    _compact(scratch, offsets, out_offsets, hashes)
    return ShingleSets(hashes, out_offsets)


@njit(parallel=True, cache=True, nogil=True)
def _shingle_kernel(code_points, offsets, word_mode, k, out, spare, counts):
    for i in prange(offsets.shape[0] - 1):
        start = offsets[i]
        length = offsets[i + 1] - start
        if length == 0:
            counts[i] = 0
            continue
        if word_mode:
            # Hash each word in place, then each run of k word hashes (forward, in place:
            # shingle p only needs words p.. which are not yet overwritten).
            words = 0
            word_start = start
            for j in range(start, start + length + 1):
                if j == start + length or code_points[j] == _SPACE:
                    h = sequence_start(TAG_WORD, j - word_start)
                    for q in range(word_start, j):
                        h = mix64(h ^ np.uint64(code_points[q]))
                    out[start + words] = h
                    words += 1
                    word_start = j + 1
            width = min(k, words)
            count = words - width + 1
            for p in range(count):
                h = sequence_start(TAG_WORD_SHINGLE, width)
                for q in range(width):
                    h = mix64(h ^ out[start + p + q])
                out[start + p] = h
        else:
            # Position-major: the inner loop runs over independent windows, so the CPU
            # overlaps their mixing chains (same values as hashing one window at a time).
            width = min(k, length)
            count = length - width + 1
            seed = sequence_start(TAG_CHAR_SHINGLE, width)
            for p in range(count):
                out[start + p] = seed
            for q in range(width):
                for p in range(count):
                    out[start + p] = mix64(out[start + p] ^ np.uint64(code_points[start + p + q]))
        segment = out[start : start + count]
        _sort_hashes(segment, spare[start : start + count])
        distinct = 1
        for j in range(1, count):
            if segment[j] != segment[distinct - 1]:
                segment[distinct] = segment[j]
                distinct += 1
        counts[i] = distinct


_MAX_BUCKET_BITS = 16


@njit(inline="always", cache=True)
def _sort_hashes(values, spare):
    """Sort uint64 hashes ascending (in place; ``spare`` is scratch of the same size).

    Shingle hashes are uniformly spread, so one counting pass on their top bits puts every
    value next to its place and an insertion sort finishes in about linear time: several
    times faster than quicksort on sets of a few hundred. Huge sets use quicksort.
    """
    n = values.shape[0]
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    if bits > _MAX_BUCKET_BITS:
        values.sort()
        return
    shift = np.uint64(64 - bits)
    starts = np.zeros((1 << bits) + 1, dtype=np.int64)
    for j in range(n):
        starts[(values[j] >> shift) + np.uint64(1)] += 1
    for d in range(1 << bits):
        starts[d + 1] += starts[d]
    for j in range(n):
        d = values[j] >> shift
        spare[starts[d]] = values[j]
        starts[d] += 1
    for j in range(1, n):
        value = spare[j]
        m = j - 1
        while m >= 0 and spare[m] > value:
            spare[m + 1] = spare[m]
            m -= 1
        spare[m + 1] = value
    values[:] = spare


@njit(parallel=True, cache=True, nogil=True)
def _compact(scratch, scratch_offsets, out_offsets, out):
    for i in prange(out_offsets.shape[0] - 1):
        src = scratch_offsets[i]
        dst = out_offsets[i]
        for j in range(out_offsets[i + 1] - dst):
            out[dst + j] = scratch[src + j]
