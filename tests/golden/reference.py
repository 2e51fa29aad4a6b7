"""An independent, slow, pure-Python implementation of signature schemes "simindex-v1" and
"simindex-v2" (they differ only in section 5, the signature).

Written from docs/spec.md, not from the simindex sources: plain Python integers with explicit
masking, no numpy and no numba. Its only job is to be obviously correct, so that the golden
tests can check simindex (and any other implementation) against the spec's text.
"""

from __future__ import annotations

import unicodedata

import xxhash

SCHEME_V1 = "simindex-v1"
SCHEME_V2 = "simindex-v2"
NORMALIZATION = "nfkc-lower-space"

MASK32 = 0xFFFF_FFFF
MASK63 = 0x7FFF_FFFF_FFFF_FFFF
MASK64 = 0xFFFF_FFFF_FFFF_FFFF

GOLDEN_GAMMA = 0x9E37_79B9_7F4A_7C15
MIX_M1 = 0xBF58_476D_1CE4_E5B9
MIX_M2 = 0x94D0_49BB_1331_11EB

TAG_CHAR_SHINGLE = 1
TAG_WORD = 2
TAG_WORD_SHINGLE = 3
TAG_BAND_KEY = 4

# Python's str.split() with no argument splits on exactly these code points (spec, section 3).
WHITESPACE = frozenset(
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680]
    + list(range(0x2000, 0x200B))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)


# -- section 3: normalization ---------------------------------------------------------------


def normalize(text: str) -> str:
    """NFKC, then full lowercase, then whitespace runs -> one space, trimmed.

    The whitespace step is written out by hand (not with str.split) so that the list of
    whitespace code points in the spec is what gets tested.
    """
    lowered = unicodedata.normalize("NFKC", text).lower()
    words: list[str] = []
    current: list[str] = []
    for ch in lowered:
        if ord(ch) in WHITESPACE:
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return " ".join(words)


def content_hash(normalized: str) -> int:
    """xxh3_64 (seed 0) of the UTF-8 bytes, low 63 bits."""
    return xxhash.xxh3_64_intdigest(normalized.encode("utf-8")) & MASK63


# -- section 4: mixing and sequence hashing -------------------------------------------------


def mix64(x: int) -> int:
    x &= MASK64
    x = ((x ^ (x >> 30)) * MIX_M1) & MASK64
    x = ((x ^ (x >> 27)) * MIX_M2) & MASK64
    return x ^ (x >> 31)


def hash_sequence(tag: int, values: list[int]) -> int:
    """H(tag; v_1..v_n) = fold of mix64(h ^ v) starting from mix64((tag << 32) | n)."""
    n = len(values)
    assert 0 <= n < 2**32
    h = mix64((tag << 32) | n)
    for v in values:
        h = mix64(h ^ (v & MASK64))
    return h


# -- section 5: shingles ---------------------------------------------------------------------


def shingle_hashes(text: str, shingle: str = "char", k: int = 5) -> list[int]:
    """Distinct 64-bit shingle hashes of an already-normalized text, ascending."""
    if shingle not in ("char", "word"):
        raise ValueError(shingle)
    if not 1 <= k <= 64:
        raise ValueError(k)
    if text == "":
        return []
    if shingle == "char":
        units = [ord(c) for c in text]  # Unicode code points, not UTF-16 units or bytes
        tag = TAG_CHAR_SHINGLE
    else:
        units = [hash_sequence(TAG_WORD, [ord(c) for c in word]) for word in text.split(" ")]
        tag = TAG_WORD_SHINGLE
    width = min(k, len(units))
    hashes = {hash_sequence(tag, units[p : p + width]) for p in range(len(units) - width + 1)}
    return sorted(hashes)


# -- section 6: MinHash ----------------------------------------------------------------------


def splitmix64(seed: int, count: int) -> list[int]:
    """Outputs 1..count of splitmix64 from state ``seed``: mix64(seed + i * GAMMA)."""
    return [mix64((seed + i * GOLDEN_GAMMA) & MASK64) for i in range(1, count + 1)]


def coefficients(num_perm: int, seed: int) -> list[tuple[int, int]]:
    stream = splitmix64(seed, 2 * num_perm)
    return [(stream[2 * i] | 1, stream[2 * i + 1]) for i in range(num_perm)]


def signature(
    hashes: list[int], num_perm: int = 128, seed: int = 1, scheme: str = SCHEME_V1
) -> list[int]:
    """Signature of a non-empty set of shingle hashes under ``scheme``: num_perm uint32 values."""
    if not hashes:
        raise ValueError("an empty shingle set has no signature")
    if not 1 <= num_perm <= 4096 or not 0 <= seed < 2**63:
        raise ValueError((num_perm, seed))
    distinct = set(hashes)
    if scheme == SCHEME_V2:
        return one_permutation_signature(distinct, num_perm, seed)
    if scheme != SCHEME_V1:
        raise ValueError(scheme)
    sig = []
    for a, b in coefficients(num_perm, seed):
        sig.append(min(((a * x + b) & MASK64) >> 32 for x in distinct))
    return sig


def bin_of(x: int, num_bins: int) -> int:
    """The high 32 bits of a u64 scaled to 0..num_bins-1."""
    return ((x >> 32) * num_bins) >> 32


def one_permutation_signature(distinct: set[int], num_bins: int, seed: int) -> list[int]:
    """v2: each shingle goes to one bin, a bin keeps its smallest value, and each empty bin
    copies the first filled bin that its own sequence of densification hashes lands on."""
    bin_key, densify_key = splitmix64(seed, 2)
    filled: dict[int, int] = {}
    for x in distinct:
        hashed = mix64(x ^ bin_key)
        target, value = bin_of(hashed, num_bins), hashed & MASK32
        filled[target] = min(value, filled.get(target, value))
    sig = []
    for i in range(num_bins):
        attempt = 0
        source = i
        while source not in filled:
            attempt += 1
            assert attempt < 2**32
            source = bin_of(mix64(densify_key ^ ((i << 32) | attempt)), num_bins)
        sig.append(filled[source])
    return sig


def estimate_jaccard(sig_a: list[int], sig_b: list[int]) -> float:
    return sum(x == y for x, y in zip(sig_a, sig_b, strict=True)) / len(sig_a)


def pack(sig: list[int]) -> bytes:
    return b"".join((v & MASK32).to_bytes(4, "little") for v in sig)


# -- section 7: band keys --------------------------------------------------------------------


def band_keys(sig: list[int], bands: int, rows: int) -> list[int]:
    if bands < 1 or rows < 1 or bands * rows > len(sig):
        raise ValueError((bands, rows, len(sig)))
    return [
        hash_sequence(TAG_BAND_KEY, [j] + list(sig[j * rows : (j + 1) * rows])) & MASK63
        for j in range(bands)
    ]
