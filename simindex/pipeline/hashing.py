"""The 64-bit mixing primitive every hash in signature scheme v1 is built from.

``mix64`` is the splitmix64 finalizer (a bijection on 64-bit integers). A sequence of
64-bit values v_1..v_n is hashed under a tag (which says what is being hashed) as::

    h = mix64((tag << 32) | n)
    for v in values: h = mix64(h ^ v)

All arithmetic is on unsigned 64-bit integers modulo 2**64. docs/spec.md is the
normative text; the golden vectors in tests/golden pin the outputs.
"""

import numpy as np
from numba import njit, prange

TAG_CHAR_SHINGLE = 1
TAG_WORD = 2
TAG_WORD_SHINGLE = 3
TAG_BAND_KEY = 4

GOLDEN_GAMMA = 0x9E3779B97F4A7C15
MASK63 = (1 << 63) - 1

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)


@njit(inline="always", cache=True)
def mix64(x):
    """splitmix64's finalizer; ``x`` must be np.uint64."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


@njit(inline="always", cache=True)
def sequence_start(tag, length):
    """Initial state for hashing ``length`` values under ``tag``."""
    return mix64((np.uint64(tag) << _S32) | np.uint64(length))


def splitmix64_stream(seed: int, count: int) -> np.ndarray:
    """``count`` outputs of the splitmix64 generator started at ``seed`` (uint64 array).

    state_i = seed + i * GOLDEN_GAMMA (mod 2**64), output_i = mix64(state_i), i = 1..count.
    """
    states = np.uint64(seed % 2**64) + np.arange(1, count + 1, dtype=np.uint64) * np.uint64(
        GOLDEN_GAMMA
    )
    return _mix64_array(states)


@njit(cache=True, nogil=True)
def _mix64_array(values):
    out = np.empty_like(values)
    for i in range(values.shape[0]):
        out[i] = mix64(values[i])
    return out


_MASK63 = np.uint64(MASK63)


@njit(parallel=True, cache=True, nogil=True)
def band_key_kernel(signatures, bands, rows, out):
    """simindex.pipeline.banding.band_keys' kernel: out[i, j] is band j's key of signature i."""
    for i in prange(signatures.shape[0]):
        for j in range(bands):
            h = sequence_start(TAG_BAND_KEY, rows + 1)
            h = mix64(h ^ np.uint64(j))
            for q in range(j * rows, (j + 1) * rows):
                h = mix64(h ^ np.uint64(signatures[i, q]))
            out[i, j] = np.int64(h & _MASK63)
