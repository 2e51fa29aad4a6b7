"""Stage 1: normalize text, cut it into shingles, hash each shingle to 64 bits.

Work is done for a whole batch at once: the batch's texts are one array of UTF-8 bytes,
normalized in place by a compiled kernel (numba, parallel over documents; Python's split and
join were the largest single cost of signing under simindex-v2), and one kernel writes each
document's sorted, distinct shingle hashes, decoding its code points as it goes. Ingest
signs without the sorted sets (:func:`simindex.pipeline.minhash.sign` reuses
:func:`window_hashes` and :func:`distinct_windows`, not the sort).

Memory follows a document's distinct shingles, not its length: a document's code points and
window hashes are made a buffer (LONG_DOCUMENT) at a time into a growing table of the
distinct ones, and only a document of few repeated shingles has all its window hashes
sorted at once (8 bytes a character).
"""

from __future__ import annotations

import re
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
    offsets: where each text's code points start and end (int64, n + 1): text i has
    ``offsets[i + 1] - offsets[i]`` of them, ``code_points[offsets[i]:offsets[i + 1]]``.
    """

    utf8: np.ndarray
    utf8_offsets: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    @property
    def code_points(self) -> np.ndarray:
        """The texts' Unicode code points (uint32), concatenated. The kernels decode the UTF-8
        a document at a time and never need them all: four bytes a character."""
        return np.frombuffer(self.utf8.tobytes().decode("utf-8").encode("utf-32-le"), np.uint32)

    def content_hashes(self) -> list[int]:
        """:func:`content_hash` of each text."""
        view, bounds = memoryview(self.utf8), self.utf8_offsets.tolist()
        return [
            xxhash.xxh3_64_intdigest(view[bounds[i] : bounds[i + 1]]) & MASK63
            for i in range(len(self))
        ]


def normalized_batch(normalized_texts: Sequence[str] | NormalizedBatch) -> NormalizedBatch:
    """Already-normalized texts as a :class:`NormalizedBatch` (a batch is itself)."""
    if isinstance(normalized_texts, NormalizedBatch):
        return normalized_texts
    encoded = [t.encode("utf-8") for t in normalized_texts]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    code_point_lengths = np.fromiter(map(len, normalized_texts), np.int64, len(encoded))
    utf8 = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return NormalizedBatch(utf8, _offsets(lengths), _offsets(code_point_lengths))


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
    their ``str.lower()`` changes A-Z alone, which the whitespace kernel does (see
    :func:`fold`). Other texts are folded by :func:`fold`, one Python string each."""
    start, end = int(offsets[0]), int(offsets[-1])
    body, offsets = data[start:end], offsets - start
    lengths = np.diff(offsets)
    others = np.zeros(lengths.shape[0], dtype=bool)
    if body.size:  # each text's largest byte (segments between the starts of non-empty texts)
        starts = offsets[:-1][lengths > 0]
        others[lengths > 0] = np.maximum.reduceat(body, starts) >= 0x80
    others = np.flatnonzero(others)
    if others.size:
        return normalize_folded(*_fold_others(body, offsets, others))
    return normalize_folded(body.copy(), offsets)


# A long text is folded a piece of about FOLD_PIECE_BYTES at a time, cut before an ASCII
# whitespace character: NFKC composes nothing across one and str.lower() looks at no letter
# past one, so each piece folds as it does within the text. Folding whole, str.lower() alone
# takes room for four bytes a character.
FOLD_PIECE_BYTES = 1 << 20
_ASCII_WHITESPACE = re.compile(rb"\s")


def _fold_others(
    body: np.ndarray, offsets: np.ndarray, others: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The texts of ``body`` (UTF-8, ``offsets`` from 0) with the ``others`` (row numbers)
    folded by :func:`fold`, and their offsets: ASCII texts are copied as they are."""
    view, lengths = memoryview(body), np.diff(offsets)
    folded, done = bytearray(), 0
    for row in others.tolist():
        lo, hi = int(offsets[row]), int(offsets[row + 1])
        folded += view[done:lo]
        before = len(folded)
        while lo < hi:
            space = _ASCII_WHITESPACE.search(view, min(lo + FOLD_PIECE_BYTES, hi), hi)
            cut = space.start() if space else hi
            folded += fold(str(view[lo:cut], "utf-8")).encode("utf-8")
            lo = cut
        lengths[row], done = len(folded) - before, hi
    folded += view[done:]
    return np.frombuffer(folded, np.uint8), _offsets(lengths)


def normalize_folded(data: np.ndarray, raw_offsets: np.ndarray) -> NormalizedBatch:
    """The last steps of :func:`normalize_batch`, the whitespace and the ASCII letters'
    case, for texts given as valid UTF-8 that are folded (:func:`fold`) but for A-Z, which
    folding leaves in no text: text i is ``data[raw_offsets[i]:raw_offsets[i + 1]]`` (uint8
    and int64 arrays; offsets need not start at 0). ``data`` is overwritten: the caller
    gives a fresh writable array, and takes a copy of anyone else's."""
    n = raw_offsets.shape[0] - 1
    utf8_lengths = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    with threads_for(n):
        _collapse_whitespace(data, raw_offsets, utf8_lengths, lengths)
    utf8_offsets = _offsets(utf8_lengths)
    # Collapsing whitespace only shortens a text: the texts are moved together in place.
    _compact_in_place(data, raw_offsets, utf8_offsets)
    return NormalizedBatch(data[: utf8_offsets[-1]], utf8_offsets, _offsets(lengths))


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


@njit(cache=True, nogil=True)
def _compact_in_place(values, raw_offsets, offsets):
    """Move text i from ``values[raw_offsets[i]:]`` to ``values[offsets[i]:offsets[i + 1]]``,
    in order: each moves towards the start (offsets[i] <= raw_offsets[i]), onto room its own
    and earlier texts' leave."""
    for i in range(offsets.shape[0] - 1):
        source, target = raw_offsets[i], offsets[i]
        if source != target:
            for j in range(offsets[i + 1] - target):
                values[target + j] = values[source + j]


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
def _collapse_whitespace(data, offsets, utf8_lengths, lengths):
    """Drop each text's whitespace runs, writing one space between non-space runs, and
    lower its ASCII letters, in place (a text only shortens: each byte is written at or
    before where it was read): its bytes from its start offset on, their count to
    ``utf8_lengths`` and their code points' to ``lengths`` (valid UTF-8 in: it comes from
    str.encode)."""
    for chunk in prange(chunk_count(offsets)):
        _collapse_texts(chunk, data, offsets, utf8_lengths, lengths)


@njit(cache=True, nogil=True)
def _collapse_texts(chunk, data, offsets, utf8_lengths, lengths):
    """One chunk of :func:`_collapse_whitespace` (see CHUNK)."""
    for i in documents_of(chunk, offsets):
        start, end = offsets[i], offsets[i + 1]
        byte_out = start
        code_points = 0
        pending_space = 0
        j = start
        while j < end:
            lead = np.int64(data[j])
            if lead < 0x80:
                # ASCII without branches (spaces are too frequent to predict): write the
                # pending space and the byte where they go, and advance over what counts.
                space = (lead < 64) & ((_ASCII_SPACES >> (lead & 63)) & 1)
                emit_space = pending_space & (1 - space)
                data[byte_out] = _SPACE
                byte_out += emit_space
                upper = np.int64((lead >= 65) & (lead <= 90))
                data[byte_out] = lead | (upper << 5)  # A-Z to a-z
                code_points += emit_space + 1 - space
                byte_out += 1 - space
                pending_space = space & (byte_out > start)
                j += 1
                continue
            c, width = code_point_at(data, j)
            if _is_space(c):
                pending_space = np.int64(byte_out > start)
            else:
                if pending_space:
                    data[byte_out] = _SPACE
                    byte_out += 1
                    code_points += 1
                    pending_space = 0
                for q in range(width):
                    data[byte_out + q] = data[j + q]
                byte_out += width
                code_points += 1
            j += width
        utf8_lengths[i] = byte_out - start
        lengths[i] = code_points


@njit(inline="always", cache=True)
def code_point_at(data, j):
    """The code point whose UTF-8 starts at ``data[j]`` (valid UTF-8), and its bytes."""
    lead = np.int64(data[j])
    if lead < 0x80:
        return lead, 1
    if lead < 0xE0:
        return ((lead & 0x1F) << 6) | (np.int64(data[j + 1]) & 0x3F), 2
    if lead < 0xF0:
        c = ((lead & 0x0F) << 12) | ((np.int64(data[j + 1]) & 0x3F) << 6)
        return c | (np.int64(data[j + 2]) & 0x3F), 3
    c = ((lead & 0x07) << 18) | ((np.int64(data[j + 1]) & 0x3F) << 12)
    c = c | ((np.int64(data[j + 2]) & 0x3F) << 6)
    return c | (np.int64(data[j + 3]) & 0x3F), 4


@njit(inline="always", cache=True)
def decode(data, position, out, start):
    """Decode the UTF-8 ``data`` (valid) from byte ``position`` into ``out[start:]`` until
    either ends; return (the byte after the last decoded, code points in ``out`` now)."""
    filled = start
    while filled < out.shape[0] and position < data.shape[0]:
        c, width = code_point_at(data, position)
        out[filled] = c
        filled += 1
        position += width
    return position, filled


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
    batch = normalized_batch(normalized_texts)
    # A document of L > 0 code points has at most L shingles, so its code-point span of
    # `scratch` is room enough (only what is written of it takes memory); empty documents
    # get none.
    scratch = np.empty(max(int(batch.offsets[-1]), 1), dtype=np.uint64)
    counts = np.empty(len(batch), dtype=np.int64)
    with threads_for(len(batch)):
        _shingle_kernel(
            batch.utf8, batch.utf8_offsets, batch.offsets, spec.shingle == "word", spec.k,
            scratch, counts,
        )  # fmt: skip
        out_offsets = _offsets(counts)
        hashes = np.empty(int(out_offsets[-1]), dtype=np.uint64)
        _compact(scratch, batch.offsets, out_offsets, hashes)
    return ShingleSets(hashes, out_offsets)


@njit(parallel=True, cache=True, nogil=True)
def _shingle_kernel(utf8, utf8_offsets, offsets, word_mode, k, out, counts):
    for chunk in prange(chunk_count(offsets)):
        _shingle_documents(chunk, utf8, utf8_offsets, offsets, word_mode, k, out, counts)


@njit(cache=True, nogil=True)
def _shingle_documents(chunk, utf8, utf8_offsets, offsets, word_mode, k, out, counts):
    """One chunk of :func:`_shingle_kernel` (see CHUNK): each document's distinct shingle
    hashes, sorted, to ``out`` from its first code point's offset on."""
    code_points, windows = chunk_buffers(chunk, offsets, word_mode)
    spare = np.empty(min(windows.shape[0], _MOST_BUCKETED), dtype=np.uint64)
    for i in documents_of(chunk, offsets):
        text = utf8[utf8_offsets[i] : utf8_offsets[i + 1]]
        length = offsets[i + 1] - offsets[i]
        if length > windows.shape[0]:
            hashes = distinct_windows(text, length, k, code_points, windows)
            _sort_hashes(hashes, spare)
            count = hashes.shape[0]
        else:
            decode(text, 0, code_points[:length], 0)
            hashes = windows[: window_hashes(code_points[:length], word_mode, k, windows)]
            _sort_hashes(hashes, spare)
            count = distinct_sorted(hashes)
        out[offsets[i] : offsets[i] + count] = hashes[:count]
        counts[i] = count


# Char-shingled documents longer than this many code points are hashed a buffer of this many
# at a time, their window hashes going straight into a table of the distinct ones: shingling
# and signing then hold memory in proportion to a document's distinct shingles, not to its
# length.
LONG_DOCUMENT = 1 << 16


@njit(inline="always", cache=True)
def chunk_buffers(chunk, offsets, word_mode):
    """(code points uint32, window hashes uint64) buffers that a chunk's documents share,
    sized for its longest document (for char shingles, at most LONG_DOCUMENT): buffers for
    the whole batch came fresh from the operating system each time (page faults measured at
    a quarter of the signing time), and a huge document's would be its length."""
    longest = 1
    for i in documents_of(chunk, offsets):
        longest = max(longest, offsets[i + 1] - offsets[i])
    if not word_mode:
        longest = min(longest, LONG_DOCUMENT)
    return np.empty(longest, dtype=np.uint32), np.empty(longest, dtype=np.uint64)


@njit(cache=True, nogil=True)
def distinct_windows(text, length, k, code_points, windows):
    """The distinct char-shingle hashes, in no set order, of a document longer than the
    buffers ``code_points`` and ``windows`` (its UTF-8 ``text``, of ``length`` code points):
    its windows are hashed a buffer at a time into a table of the distinct ones (see
    FIRST_TABLE_BITS); past the table's bound, they are all hashed and sorted instead."""
    bound = most_slots(length)
    table = np.zeros(1 << FIRST_TABLE_BITS, dtype=np.uint64)
    kept = np.empty(table.shape[0] // 4 + 1, dtype=np.uint64)
    distinct, seen_zero = 0, False
    position, count, carried = 0, 1, 0
    while count:
        position, count, carried = _next_windows(text, position, carried, k, code_points, windows)
        done = 0
        while done < count:
            taken, distinct, seen_zero = fill_table(
                windows[done:count], kept, distinct, seen_zero, table
            )
            done += taken
            if 4 * distinct > table.shape[0]:
                if 4 * table.shape[0] > bound:
                    return _all_distinct_windows(text, length, k, code_points)
                table = table_of(kept[:distinct], 4 * table.shape[0])
                more = np.empty(table.shape[0] // 4 + 1, dtype=np.uint64)
                more[:distinct] = kept[:distinct]
                kept = more
    return kept[:distinct]


@njit(cache=True, nogil=True)
def _all_distinct_windows(text, length, k, code_points):
    """:func:`distinct_windows` by hashing every window into one array, then sorting it."""
    hashes = np.empty(length - min(k, length) + 1, dtype=np.uint64)
    position, count, carried, done = 0, 1, 0, 0
    while count:
        position, count, carried = _next_windows(
            text, position, carried, k, code_points, hashes[done:]
        )
        done += count
    return hashes[: sort_distinct(hashes)]


@njit(inline="always", cache=True)
def _next_windows(text, position, carried, k, code_points, out):
    """Decode the UTF-8 ``text`` from byte ``position`` into ``code_points`` after the
    ``carried`` code points at its front (those of the windows not yet hashed), and hash the
    k-character windows it then holds into ``out``; return (the byte decoding goes on from,
    the windows hashed (0 at the end), the code points carried: the last k - 1, now at the
    front). The text must have k code points or more."""
    position, ready = decode(text, position, code_points, carried)
    if ready < k:
        return position, 0, ready
    count = window_hashes(code_points[:ready], False, k, out)
    for j in range(k - 1):
        code_points[j] = code_points[count + j]
    return position, count, k - 1


# A table of distinct window hashes starts with at most 2**FIRST_TABLE_BITS slots and grows
# four-fold when a quarter full, up to the larger of 2**MOST_TABLE_BITS slots and
# TABLE_SLOTS_PER_VALUE slots per window: a huge document's table grows with its distinct
# shingles, and a document of few repeats is sorted instead.
FIRST_TABLE_BITS = 16
MOST_TABLE_BITS = 22
TABLE_SLOTS_PER_VALUE = 0.5


@njit(inline="always", cache=True)
def most_slots(windows):
    """The most slots a table for ``windows`` window hashes may have."""
    return max(np.int64(windows * TABLE_SLOTS_PER_VALUE), np.int64(1) << MOST_TABLE_BITS)


@njit(inline="always", cache=True)
def fill_table(values, kept, distinct, seen_zero, table):
    """Put ``values`` in ``table`` and append the new ones to ``kept[:distinct]`` (which may
    be ``values`` itself: it is written behind the reading), until all are in or until the
    table is over a quarter full; return (values taken, distinct, whether zero was seen).
    ``kept`` has room for a quarter of the table's slots, and one more."""
    mask = np.uint64(table.shape[0] - 1)
    room = table.shape[0] // 4
    for j in range(values.shape[0]):
        value = values[j]
        if value == 0:
            new = not seen_zero
            seen_zero = True
        else:
            slot = value & mask
            while table[slot] != 0 and table[slot] != value:
                slot = (slot + np.uint64(1)) & mask
            new = table[slot] == 0
            table[slot] = value
        # Written either way, kept only if new: a branch here would be mispredicted often.
        kept[distinct] = value
        distinct += new
        if distinct > room:
            return j + 1, distinct, seen_zero
    return values.shape[0], distinct, seen_zero


@njit(inline="always", cache=True)
def table_of(values, slots):
    """A table of ``slots`` slots holding the non-zero ``values`` (distinct: keeping them
    in place leaves them as they are)."""
    table = np.zeros(slots, dtype=np.uint64)
    fill_table(values, values, 0, False, table)
    return table


@njit(inline="always", cache=True)
def sort_distinct(values):
    """Sort ``values`` in place and move its distinct values to its front; return how many."""
    values.sort()
    return distinct_sorted(values)


@njit(inline="always", cache=True)
def distinct_sorted(values):
    """Move the distinct values of the sorted ``values`` to its front; return how many."""
    distinct = min(values.shape[0], 1)
    for j in range(1, values.shape[0]):
        if values[j] != values[distinct - 1]:
            values[distinct] = values[j]
            distinct += 1
    return distinct


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


# Sets of at most this many hashes are bucket-sorted (see _sort_hashes), larger ones quicksorted.
_MOST_BUCKETED = 1 << 15


@njit(inline="always", cache=True)
def _sort_hashes(values, spare):
    """Sort uint64 hashes ascending, in place (``spare``: scratch room for _MOST_BUCKETED
    values, or as many as ``values`` if fewer).

    Shingle hashes are uniformly spread, so one counting pass on their top bits puts every
    value next to its place and an insertion sort finishes in about linear time: several
    times faster than quicksort on sets of a few hundred. Huge sets use quicksort.
    """
    n = values.shape[0]
    if n > _MOST_BUCKETED:
        values.sort()
        return
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
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
    values[:] = spare[:n]


@njit(parallel=True, cache=True, nogil=True)
def _compact(scratch, scratch_offsets, out_offsets, out):
    for chunk in prange(chunk_count(out_offsets)):
        for i in documents_of(chunk, out_offsets):
            src, dst, end = scratch_offsets[i], out_offsets[i], out_offsets[i + 1]
            out[dst:end] = scratch[src : src + end - dst]
