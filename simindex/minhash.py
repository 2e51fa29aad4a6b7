"""Stage 2: MinHash signatures from shingle hash sets, and the Jaccard estimate.

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

from collections.abc import Iterable

import numpy as np
from numba import njit, prange

from simindex.hashing import mix64
from simindex.shingle import ShingleSets
from simindex.spec import SCHEME_V1, SignatureSpec

SIGNATURE_DTYPE = np.dtype("<u4")
EMPTY_VALUE = np.uint32(0xFFFFFFFF)

_S32 = np.uint64(32)


def signatures(sets: ShingleSets, spec: SignatureSpec) -> np.ndarray:
    """MinHash signatures, uint32 of shape (len(sets), num_perm).

    A document with no shingles has no signature: its row is all 0xFFFFFFFF and callers must
    refuse it (check ``sets.counts == 0``) rather than store or compare it.
    """
    out = np.empty((len(sets), spec.num_perm), dtype=np.uint32)
    if spec.scheme == SCHEME_V1:
        a, b = spec.coefficients
        _minhash_kernel(sets.hashes, sets.offsets, a, b, out)
    else:
        bin_key, densify_key = spec.bin_keys
        _oph_kernel(sets.hashes, sets.offsets, bin_key, densify_key, out)
    return out


@njit(inline="always", cache=True)
def _bin_of(hashed, num_bins):
    """Bin of a 64-bit hash: its high 32 bits scaled to 0..num_bins-1 (multiply-shift)."""
    return ((hashed >> _S32) * np.uint64(num_bins)) >> _S32


@njit(parallel=True, cache=True, nogil=True)
def _oph_kernel(hashes, offsets, bin_key, densify_key, out):
    num_bins = out.shape[1]
    for i in prange(offsets.shape[0] - 1):
        row = out[i]
        row[:] = np.uint32(0xFFFFFFFF)
        filled = np.zeros(num_bins, dtype=np.bool_)
        for j in range(offsets[i], offsets[i + 1]):
            hashed = mix64(hashes[j] ^ bin_key)
            target = _bin_of(hashed, num_bins)
            value = np.uint32(hashed & np.uint64(0xFFFFFFFF))
            filled[target] = True
            if value < row[target]:
                row[target] = value
        if offsets[i + 1] == offsets[i]:
            continue  # no shingles: no signature (all 0xFFFFFFFF), nothing to borrow from
        for empty in range(num_bins):
            if filled[empty]:
                continue
            attempt = np.uint64(1)
            while True:
                source = _bin_of(
                    mix64(densify_key ^ ((np.uint64(empty) << _S32) | attempt)), num_bins
                )
                if filled[source]:
                    row[empty] = row[source]
                    break
                attempt += np.uint64(1)


@njit(parallel=True, cache=True, nogil=True)
def _minhash_kernel(hashes, offsets, a, b, out):
    num_perm = a.shape[0]
    for i in prange(offsets.shape[0] - 1):
        row = out[i]
        row[:] = np.uint32(0xFFFFFFFF)
        for j in range(offsets[i], offsets[i + 1]):
            x = hashes[j]
            for p in range(num_perm):
                v = np.uint32((a[p] * x + b[p]) >> _S32)
                if v < row[p]:
                    row[p] = v


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Estimated Jaccard = fraction of equal values, along the last axis (float64)."""
    return np.mean(sig_a == sig_b, axis=-1)


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
