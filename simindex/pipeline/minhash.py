"""Stage 2: MinHash signatures from shingle hash sets, and the Jaccard estimate. Ingest
signs normalized texts directly (:func:`sign`), without building the sorted sets.

Two schemes (docs/spec.md). simindex-v2, one-permutation hashing with optimal densification
(Shrivastava 2017): one keyed mix64 per shingle picks a bin (high 32 bits, scaled to
num_perm) and a value (low 32 bits); a bin keeps its smallest value, and an empty bin copies
the bin that a per-bin sequence of hashes first lands on among the filled ones. Its estimator
has the same mean and no more variance than num_perm independent hash functions, at
1/num_perm of their work.

simindex-v1: hash function i maps a 64-bit shingle hash x to the high 32 bits of (a_i * x + b_i) mod 2**64
(a_i odd, so the affine map is a permutation of the 64-bit integers; arithmetic wraps, so
nothing overflows). Signature value i is the minimum over the document's shingles.
Signatures are uint32 arrays of shape (n, num_perm); stored as num_perm little-endian uint32.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numba import njit, prange

from simindex.pipeline.hashing import mix64
from simindex.pipeline.kernels import threads_for
from simindex.pipeline.shingle import (
    FIRST_TABLE_BITS,
    NormalizedBatch,
    ShingleSets,
    chunk_buffers,
    chunk_count,
    decode,
    distinct_windows,
    documents_of,
    fill_table,
    most_slots,
    normalized_batch,
    sort_distinct,
    table_of,
    window_hashes,
)
from simindex.spec import SCHEME_V1, SIGNATURE_DTYPE, SignatureSpec

EMPTY_VALUE = np.uint32(0xFFFFFFFF)

_S32 = np.uint64(32)


def signatures(sets: ShingleSets, spec: SignatureSpec) -> np.ndarray:
    """MinHash signatures, uint32 of shape (len(sets), num_perm).

    A document with no shingles has no signature: its row is all 0xFFFFFFFF and callers must
    refuse it (check ``sets.counts == 0``) rather than store or compare it.
    """
    out = np.empty((len(sets), spec.num_perm), dtype=np.uint32)
    with threads_for(len(sets)):
        _signatures_kernel(sets.hashes, sets.offsets, _scheme(spec), out)
    return out


def sign(
    normalized_texts: Sequence[str] | NormalizedBatch, spec: SignatureSpec
) -> tuple[np.ndarray, np.ndarray]:
    """Signatures and distinct shingle counts of already-normalized texts: the same as
    ``signatures(sets, spec)`` and ``sets.counts`` of ``sets = shingle_sets(...)``.

    Signing needs no sorted sets (a minimum ignores repeats), so each document's window
    hashes go through a small hash set instead of a sort (which cost more than hashing),
    a long document's a buffer at a time (shingle.distinct_windows): only the distinct ones
    are signed and counted. Verification still needs :func:`shingle_sets`.
    """
    batch = normalized_batch(normalized_texts)
    out = np.empty((len(batch), spec.num_perm), dtype=np.uint32)
    counts = np.empty(len(batch), dtype=np.int64)
    shingles = (spec.shingle == "word", spec.k)
    with threads_for(len(batch)):
        _sign_kernel(
            batch.utf8, batch.utf8_offsets, batch.offsets, shingles, _scheme(spec), out, counts
        )
    return out, counts


_NO_COEFFICIENTS = np.empty(0, dtype=np.uint64)


def _scheme(spec: SignatureSpec) -> tuple:
    """(v1, a, b, bin_key, densify_key) for the kernels: the other scheme's values are unused."""
    spec.require_text_scheme()
    if spec.scheme == SCHEME_V1:
        a, b = spec.coefficients
        return True, a, b, np.uint64(0), np.uint64(0)
    bin_key, densify_key = spec.bin_keys
    return False, _NO_COEFFICIENTS, _NO_COEFFICIENTS, bin_key, densify_key


@njit(parallel=True, cache=True, nogil=True)
def _signatures_kernel(hashes, offsets, scheme, out):
    for chunk in prange(chunk_count(offsets)):
        _signatures_of(chunk, hashes, offsets, scheme, out)


@njit(cache=True, nogil=True)
def _signatures_of(chunk, hashes, offsets, scheme, out):
    """One chunk of :func:`_signatures_kernel` (see shingle.CHUNK)."""
    for i in documents_of(chunk, offsets):
        _sign_row(hashes, offsets[i], offsets[i + 1], scheme, out[i])


@njit(parallel=True, cache=True, nogil=True)
def _sign_kernel(utf8, utf8_offsets, offsets, shingles, scheme, out, counts):
    for chunk in prange(chunk_count(offsets)):
        _sign_documents(chunk, utf8, utf8_offsets, offsets, shingles, scheme, out, counts)


@njit(cache=True, nogil=True)
def _sign_documents(chunk, utf8, utf8_offsets, offsets, shingles, scheme, out, counts):
    """One chunk of :func:`_sign_kernel` (see shingle.CHUNK and shingle.chunk_buffers)."""
    word_mode, k = shingles
    code_points, windows = chunk_buffers(chunk, offsets, word_mode)
    for i in documents_of(chunk, offsets):
        text = utf8[utf8_offsets[i] : utf8_offsets[i + 1]]
        length = offsets[i + 1] - offsets[i]
        if length > windows.shape[0]:
            hashes = distinct_windows(text, length, k, code_points, windows)
        else:
            decode(text, 0, code_points[:length], 0)
            count = window_hashes(code_points[:length], word_mode, k, windows)
            hashes = windows[: _keep_first_seen(windows[:count])]
        counts[i] = hashes.shape[0]
        _sign_row(hashes, 0, hashes.shape[0], scheme, out[i])


@njit(inline="always", cache=True)
def _keep_first_seen(values):
    """Move the distinct values of ``values`` to its front, in order of first appearance;
    return how many. An open-addressing table (linear probing, at most a
    quarter full: fewer collisions, a quarter faster than half full) indexed by the low bits
    of the value: shingle hashes are uniformly spread. Zero marks a free slot, so a zero
    value is tracked apart. The table grows as distinct values come (see FIRST_TABLE_BITS);
    past its bound, the values are sorted in place instead, and their distinct ones are left
    in ascending order."""
    n = values.shape[0]
    bits = 1
    while (1 << bits) < 4 * n and bits < FIRST_TABLE_BITS:
        bits += 1
    table = np.zeros(1 << bits, dtype=np.uint64)
    done, distinct, seen_zero = 0, 0, False
    while done < n:
        taken, distinct, seen_zero = fill_table(values[done:], values, distinct, seen_zero, table)
        done += taken
        if 4 * distinct > table.shape[0] and done < n:
            if 4 * table.shape[0] > most_slots(n):
                # Every value before values[done] is now one of values[:distinct]: sorting
                # all of them finds the same distinct values.
                return sort_distinct(values)
            table = table_of(values[:distinct], 4 * table.shape[0])
    return distinct


@njit(inline="always", cache=True)
def _sign_row(hashes, begin, end, scheme, row):
    """The signature of the shingle hashes ``hashes[begin:end]``, into ``row``."""
    v1, a, b, bin_key, densify_key = scheme
    row[:] = np.uint32(0xFFFFFFFF)
    if v1:
        _minhash_row(hashes, begin, end, a, b, row)
    elif end > begin:  # no shingles: no signature (all 0xFFFFFFFF), nothing to borrow from
        _oph_row(hashes, begin, end, bin_key, densify_key, row)


@njit(inline="always", cache=True)
def _bin_of(hashed, num_bins):
    """Bin of a 64-bit hash: its high 32 bits scaled to 0..num_bins-1 (multiply-shift)."""
    return ((hashed >> _S32) * np.uint64(num_bins)) >> _S32


# Shingle hashes keyed at a time by _oph_row: a huge document's would be 8 bytes a shingle.
KEYED_AT_ONCE = 4096


@njit(inline="always", cache=True)
def _key_into(hashes, key, out):
    """mix64(h ^ key) of each hash, in a loop of its own: it compiles to SIMD instructions."""
    for j in range(hashes.shape[0]):
        out[j] = mix64(hashes[j] ^ key)


@njit(inline="always", cache=True)
def _oph_row(hashes, begin, end, bin_key, densify_key, row):
    num_bins = row.shape[0]
    filled = np.zeros(num_bins, dtype=np.bool_)
    keyed = np.empty(min(end - begin, KEYED_AT_ONCE), dtype=np.uint64)
    for start in range(begin, end, KEYED_AT_ONCE):
        stop = min(start + KEYED_AT_ONCE, end)
        _key_into(hashes[start:stop], bin_key, keyed)
        for j in range(stop - start):
            hashed = keyed[j]
            target = _bin_of(hashed, num_bins)
            value = np.uint32(hashed & np.uint64(0xFFFFFFFF))
            filled[target] = True
            row[target] = min(row[target], value)
    for empty in range(num_bins):
        if filled[empty]:
            continue
        attempt = np.uint64(1)
        while True:
            source = _bin_of(mix64(densify_key ^ ((np.uint64(empty) << _S32) | attempt)), num_bins)
            if filled[source]:
                row[empty] = row[source]
                break
            attempt += np.uint64(1)


@njit(inline="always", cache=True)
def _minhash_row(hashes, begin, end, a, b, row):
    num_perm = a.shape[0]
    for j in range(begin, end):
        x = hashes[j]
        for p in range(num_perm):
            row[p] = min(row[p], np.uint32((a[p] * x + b[p]) >> _S32))


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Estimated Jaccard = fraction of equal values, along the last axis (float64)."""
    return np.mean(sig_a == sig_b, axis=-1)


def estimate_rows(signatures: np.ndarray, rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """estimate_jaccard(signatures[rows_a], signatures[rows_b]) without gathering the two
    matrices, which verification would otherwise copy for every block of candidates
    (float64)."""
    out = np.empty(rows_a.shape[0], dtype=np.float64)
    _estimate_rows_kernel(
        np.ascontiguousarray(signatures),
        rows_a.astype(np.int64, copy=False),
        rows_b.astype(np.int64, copy=False),
        out,
    )
    return out


@njit(cache=True, nogil=True)
def _estimate_rows_kernel(signatures, rows_a, rows_b, out):
    num_perm = signatures.shape[1]
    for p in range(rows_a.shape[0]):
        a, b = signatures[rows_a[p]], signatures[rows_b[p]]
        equal = 0
        for j in range(num_perm):
            equal += a[j] == b[j]
        out[p] = equal / num_perm


def pack(signature: np.ndarray) -> bytes:
    """One signature as stored: num_perm little-endian uint32."""
    return np.ascontiguousarray(signature, dtype=SIGNATURE_DTYPE).tobytes()


def unpack(blobs: Iterable[bytes], num_perm: int) -> np.ndarray:
    """Stored signatures back to a uint32 array of shape (n, num_perm)."""
    blobs = list(blobs)
    if any(len(blob) != 4 * num_perm for blob in blobs):
        raise ValueError(f"a stored signature is not 4*{num_perm} bytes long: not this index's")
    data = b"".join(blobs)
    return np.frombuffer(data, dtype=SIGNATURE_DTYPE).reshape(-1, num_perm).astype(np.uint32)
