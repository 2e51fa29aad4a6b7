"""Stage 1: normalize text, cut it into shingles, hash each shingle to 64 bits.

Work is done for a whole batch at once: the batch's normalized texts become one array of
Unicode code points, and one compiled kernel (numba, parallel over documents) writes each
document's sorted, distinct shingle hashes. Memory is O(total characters in the batch).
:func:`normalize_batch` does the whitespace step of normalization in a kernel too (Python's
split and join were the largest single cost of signing under simindex-v2) and hands the
code points straight to shingling. Ingest signs without the sorted sets
(:func:`simindex.pipeline.minhash.sign` reuses :func:`window_hashes`, not the sort).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xxhash
from numba import njit, prange

from simindex.pipeline.hashing import (
    MASK63,
    TAG_CHAR_SHINGLE,
    TAG_WORD,
    TAG_WORD_SHINGLE,
    mix64,
    sequence_start,
)
from simindex.pipeline.kernels import SMALL_WORK, threads_for
from simindex.spec import SignatureSpec

_SPACE = 32

# Parallel kernels hand documents to a serial function CHUNK at a time: numba compiles the
# body of a parallel loop less well (no SIMD, a third slower measured), not a called function.
CHUNK = SMALL_WORK


@njit(inline="always", cache=True)
def chunk_count(offsets):
    """How many chunks the documents of ``offsets`` (n + 1 of them) make."""
    return (offsets.shape[0] - 1 + CHUNK - 1) // CHUNK


@njit(inline="always", cache=True)
def documents_of(chunk, offsets):
    """The documents of one chunk, as a range."""
    return range(chunk * CHUNK, min(offsets.shape[0] - 1, (chunk + 1) * CHUNK))


# Bit c set for each ASCII code point c < 64 that str.isspace() accepts (see _is_space).
_ASCII_SPACES = sum(1 << c for c in (*range(0x09, 0x0E), *range(0x1C, 0x21)))


def normalize(text: str) -> str:
    """Scheme v1 normalization: Unicode NFKC, then ``str.lower()``, then every run of
    whitespace (``str.split()``) becomes one space, with none at either end."""
    return " ".join(fold(text).split())


def fold(text: str) -> str:
    """The steps of :func:`normalize` before whitespace: Unicode NFKC, then ``str.lower()``.
    Both leave ASCII text but for its upper-case letters as it is (what lets
    :func:`normalize_utf8` fold ASCII texts without making Python strings of them)."""
    return unicodedata.normalize("NFKC", text).lower()


@dataclass(frozen=True)
class NormalizedBatch:
    """The normalized texts of a batch (see :func:`normalize`), laid out for the kernels.

    utf8, utf8_offsets: the texts' UTF-8 bytes (uint8), concatenated; text i is
    ``utf8[utf8_offsets[i]:utf8_offsets[i + 1]]``.
    code_points, offsets: their Unicode code points (uint32), concatenated, likewise.
    """

    utf8: np.ndarray
    utf8_offsets: np.ndarray
    code_points: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def content_hashes(self) -> list[int]:
        """:func:`content_hash` of each text."""
        view, bounds = memoryview(self.utf8), self.utf8_offsets.tolist()
        return [
            xxhash.xxh3_64_intdigest(view[bounds[i] : bounds[i + 1]]) & MASK63
            for i in range(len(self))
        ]


def normalize_batch(texts: Sequence[str]) -> NormalizedBatch:
    """:func:`normalize` of every text, as one :class:`NormalizedBatch` (equal results: the
    NFKC and lowercase steps are the same calls; the whitespace step is a kernel), by way of
    their UTF-8 (see :func:`normalize_utf8`)."""
    raw = [t.encode("utf-8") for t in texts]
    raw_offsets = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, raw), dtype=np.int64, count=len(raw)), out=raw_offsets[1:])
    return normalize_utf8(np.frombuffer(b"".join(raw), dtype=np.uint8), raw_offsets)


def normalize_utf8(data: np.ndarray, offsets: np.ndarray) -> NormalizedBatch:
    """:func:`normalize_batch` of texts given as valid UTF-8 (text i is
    ``data[offsets[i]:offsets[i + 1]]``, uint8 and int64 arrays; offsets need not start at
    0), without making Python strings of the ASCII ones: their NFKC form is themselves and
    their ``str.lower()`` changes A-Z alone (see :func:`fold`). Other texts are folded by
    :func:`fold`, one Python string each."""
    start, end = int(offsets[0]), int(offsets[-1])
    body, offsets = data[start:end], offsets - start
    lengths = np.diff(offsets)
    others = np.zeros(lengths.shape[0], dtype=bool)
    if body.size:  # each text's largest byte (segments between the starts of non-empty texts)
        starts = offsets[:-1][lengths > 0]
        others[lengths > 0] = np.maximum.reduceat(body, starts) >= 0x80
    others = np.flatnonzero(others)
    # A-Z to a-z: 32 added where byte - "A" (wrapping below it) is under 26.
    upper = (body - np.uint8(ord("A"))) < 26
    lowered = body + (upper.view(np.uint8) << 5)
    if not others.size:
        return normalize_folded(lowered, offsets)
    # Rebuild the bytes: runs of ASCII texts as they are, each other text folded.
    pieces, done = [], 0
    for row in others.tolist():
        lo, hi = int(offsets[row]), int(offsets[row + 1])
        folded = fold(body[lo:hi].tobytes().decode("utf-8")).encode("utf-8")
        pieces += [lowered[done:lo].tobytes(), folded]
        lengths[row], done = len(folded), hi
    pieces.append(lowered[done:].tobytes())
    return normalize_folded(np.frombuffer(b"".join(pieces), np.uint8), _offsets(lengths))


def normalize_folded(data: np.ndarray, raw_offsets: np.ndarray) -> NormalizedBatch:
    """The last step of :func:`normalize_batch`, the whitespace, for texts already folded
    (:func:`fold`) and given as valid UTF-8: text i is ``data[raw_offsets[i]:raw_offsets[i +
    1]]`` (uint8 and int64 arrays; offsets need not start at 0, so an Arrow buffer will do)."""
    n = raw_offsets.shape[0] - 1
    # A read-only view, whatever the caller holds (fresh arrays, bytes, Arrow buffers): the
    # whitespace kernel then takes one type, and a process loads it once from numba's cache
    # (each load maps LLVM's code for the moment).
    data = data.view()
    data.flags.writeable = False
    # Collapsing whitespace only shortens a text, and it has no more code points than bytes:
    # each text's span of raw_offsets is room enough for both outputs.
    utf8 = np.empty(max(data.shape[0], 1), dtype=np.uint8)
    code_points = np.empty(max(data.shape[0], 1), dtype=np.uint32)
    utf8_lengths = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    with threads_for(n):
        _collapse_whitespace(data, raw_offsets, utf8, utf8_lengths, code_points, lengths)
        utf8_offsets, offsets = _offsets(utf8_lengths), _offsets(lengths)
        packed_utf8 = np.empty(int(utf8_offsets[-1]), dtype=np.uint8)
        packed_code_points = np.empty(int(offsets[-1]), dtype=np.uint32)
        _compact(utf8, raw_offsets, utf8_offsets, packed_utf8)
        _compact(code_points, raw_offsets, offsets, packed_code_points)
    return NormalizedBatch(packed_utf8, utf8_offsets, packed_code_points, offsets)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


@njit(inline="always", cache=True)
def _is_space(c):
    """str.isspace() (what str.split() splits on): the 29 code points of docs/spec.md."""
    if c <= 0x20:
        return c == 0x20 or 0x09 <= c <= 0x0D or 0x1C <= c <= 0x1F
    if c < 0x85:
        return False
    return (
        c == 0x85
        or c == 0xA0
        or c == 0x1680
        or 0x2000 <= c <= 0x200A
        or c == 0x2028
        or c == 0x2029
        or c == 0x202F
        or c == 0x205F
        or c == 0x3000
    )


@njit(parallel=True, cache=True, nogil=True)
def _collapse_whitespace(data, offsets, utf8, utf8_lengths, code_points, lengths):
    """Decode each text's UTF-8 and drop its whitespace runs, writing one space between
    non-space runs: the text's bytes to ``utf8`` and code points to ``code_points``, both at
    the text's own start offset (valid UTF-8 in: it comes from str.encode)."""
    for chunk in prange(chunk_count(offsets)):
        _collapse_texts(chunk, data, offsets, utf8, utf8_lengths, code_points, lengths)


@njit(cache=True, nogil=True)
def _collapse_texts(chunk, data, offsets, utf8, utf8_lengths, code_points, lengths):
    """One chunk of :func:`_collapse_whitespace` (see CHUNK)."""
    for i in documents_of(chunk, offsets):
        start, end = offsets[i], offsets[i + 1]
        byte_out = cp_out = start
        pending_space = 0
        j = start
        while j < end:
            lead = np.int64(data[j])
            if lead < 0x80:
                # ASCII without branches (spaces are too frequent to predict): write the
                # pending space and the byte where they go, and advance over what counts.
                space = (lead < 64) & ((_ASCII_SPACES >> (lead & 63)) & 1)
                emit_space = pending_space & (1 - space)
                utf8[byte_out] = _SPACE
                code_points[cp_out] = _SPACE
                byte_out += emit_space
                cp_out += emit_space
                utf8[byte_out] = lead
                code_points[cp_out] = lead
                byte_out += 1 - space
                cp_out += 1 - space
                pending_space = space & (cp_out > start)
                j += 1
                continue
            if lead < 0xE0:
                c, width = ((lead & 0x1F) << 6) | (np.int64(data[j + 1]) & 0x3F), 2
            elif lead < 0xF0:
                c = ((lead & 0x0F) << 12) | ((np.int64(data[j + 1]) & 0x3F) << 6)
                c, width = c | (np.int64(data[j + 2]) & 0x3F), 3
            else:
                c = ((lead & 0x07) << 18) | ((np.int64(data[j + 1]) & 0x3F) << 12)
                c = c | ((np.int64(data[j + 2]) & 0x3F) << 6)
                c, width = c | (np.int64(data[j + 3]) & 0x3F), 4
            if _is_space(c):
                pending_space = np.int64(cp_out > start)
            else:
                if pending_space:
                    utf8[byte_out] = _SPACE
                    code_points[cp_out] = _SPACE
                    byte_out += 1
                    cp_out += 1
                    pending_space = 0
                for q in range(width):
                    utf8[byte_out + q] = data[j + q]
                byte_out += width
                code_points[cp_out] = c
                cp_out += 1
            j += width
        utf8_lengths[i] = byte_out - start
        lengths[i] = cp_out - start


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


def shingle_sets(
    normalized_texts: Sequence[str] | NormalizedBatch, spec: SignatureSpec
) -> ShingleSets:
    """Shingle hash sets of already-normalized texts (see :func:`normalize` and
    :func:`normalize_batch`)."""
    code_points, offsets = code_points_of(normalized_texts)
    # A document of L > 0 code points has at most L shingles, so its code-point span of
    # `scratch` is room enough; empty documents get none.
    scratch = np.empty(max(int(offsets[-1]), 1), dtype=np.uint64)
    spare = np.empty_like(scratch)  # room for the sort
    counts = np.empty(offsets.shape[0] - 1, dtype=np.int64)
    with threads_for(counts.shape[0]):
        _shingle_kernel(
            code_points, offsets, spec.shingle == "word", spec.k, scratch, spare, counts
        )
        out_offsets = _offsets(counts)
        hashes = np.empty(int(out_offsets[-1]), dtype=np.uint64)
        _compact(scratch, offsets, out_offsets, hashes)
    return ShingleSets(hashes, out_offsets)


def code_points_of(
    normalized_texts: Sequence[str] | NormalizedBatch,
) -> tuple[np.ndarray, np.ndarray]:
    """The texts' code points (uint32, concatenated) and their offsets (int64, n + 1)."""
    if isinstance(normalized_texts, NormalizedBatch):
        return normalized_texts.code_points, normalized_texts.offsets
    offsets = _offsets(
        np.fromiter((len(t) for t in normalized_texts), dtype=np.int64, count=len(normalized_texts))
    )
    code_points = np.frombuffer("".join(normalized_texts).encode("utf-32-le"), dtype=np.uint32)
    return code_points, offsets


@njit(parallel=True, cache=True, nogil=True)
def _shingle_kernel(code_points, offsets, word_mode, k, out, spare, counts):
    for chunk in prange(chunk_count(offsets)):
        _shingle_documents(chunk, code_points, offsets, word_mode, k, out, spare, counts)


@njit(cache=True, nogil=True)
def _shingle_documents(chunk, code_points, offsets, word_mode, k, out, spare, counts):
    """One chunk of :func:`_shingle_kernel` (see CHUNK)."""
    for i in documents_of(chunk, offsets):
        start = offsets[i]
        end = offsets[i + 1]
        count = window_hashes(code_points[start:end], word_mode, k, out[start:end])
        if count == 0:
            counts[i] = 0
            continue
        segment = out[start : start + count]
        _sort_hashes(segment, spare[start : start + count])
        distinct = 1
        for j in range(1, count):
            if segment[j] != segment[distinct - 1]:
                segment[distinct] = segment[j]
                distinct += 1
        counts[i] = distinct


@njit(inline="always", cache=True)
def window_hashes(text, word_mode, k, out):
    """Hash every shingle window of one document's code points ``text``, repeats included,
    into ``out[:count]`` (room for len(text) values); return count (0 if text is empty)."""
    length = text.shape[0]
    if length == 0:
        return 0
    if word_mode:
        # Hash each word in place, then each run of k word hashes (forward, in place:
        # shingle p only needs words p.. which are not yet overwritten).
        words = 0
        word_start = 0
        for j in range(length + 1):
            if j == length or text[j] == _SPACE:
                h = sequence_start(TAG_WORD, j - word_start)
                for q in range(word_start, j):
                    h = mix64(h ^ np.uint64(text[q]))
                out[words] = h
                words += 1
                word_start = j + 1
        width = min(k, words)
        count = words - width + 1
        for p in range(count):
            h = sequence_start(TAG_WORD_SHINGLE, width)
            for q in range(width):
                h = mix64(h ^ out[p + q])
            out[p] = h
        return count
    # Position-major: the inner loop runs over independent windows, so it compiles to SIMD
    # instructions (same values as hashing one window at a time). It does only over slices:
    # indexing the whole arrays at an offset keeps it scalar, 2.5 times slower.
    width = min(k, length)
    count = length - width + 1
    windows = out[:count]
    windows[:] = sequence_start(TAG_CHAR_SHINGLE, width)
    for q in range(width):
        _mix_in(windows, text[q : q + count])
    return count


@njit(inline="always", cache=True)
def _mix_in(states, values):
    for p in range(states.shape[0]):
        states[p] = mix64(states[p] ^ np.uint64(values[p]))


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
    for chunk in prange(chunk_count(out_offsets)):
        for i in documents_of(chunk, out_offsets):
            src, dst, end = scratch_offsets[i], out_offsets[i], out_offsets[i + 1]
            out[dst:end] = scratch[src : src + end - dst]
