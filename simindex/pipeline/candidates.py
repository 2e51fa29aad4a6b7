"""Stage 4: candidate pairs from LSH buckets.

Buckets (documents sharing one band key) come grouped from the database (store.iter_buckets)
or, for a batch not yet stored, from :func:`group_keys`. Every pair inside a bucket is a
candidate, except in a hot bucket (more than ``max_bucket_size`` members, e.g. boilerplate):
there each member is paired with the bucket's smallest id only, so the cost is O(n), not
O(n**2), and clustering still links them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from simindex.defaults import DEFAULT_MAX_BUCKET_SIZE
from simindex.pipeline.chunking import spans
from simindex.pipeline.cluster import flatten, unite
from simindex.pipeline.runs import RunSpool, distinct, packed, pair_documents

# Candidate pairs (with repeats) that collect() gathers before merging them into the distinct
# ones: ~70 bytes each while they are sorted.
MERGE_PAIRS = 1 << 16
# Distinct pairs held before they go to disk as a sorted run (16 bytes each, twice while a
# merge writes them); past it, pairs' memory no longer follows the candidates.
HELD_PAIRS = 1 << 18
# Distinct document ids of blocks of pairs gathered before they join the ones found so far.
DISTINCT_BATCH = 1 << 18
# Bytes of the runs read at a time when they are merged back: for the pairs handed on, and
# for each of by_component's passes over them, which hold the documents' arrays besides.
MERGE_MEMORY = 16 * 2**20
PASS_MEMORY = 4 * 2**20
# The widest span of ids, per document, that positions() answers from a table.
TABLE_SPAN = 4


@dataclass
class Candidates:
    """Distinct candidate pairs (doc_a < doc_b), read block by block in (doc_a, doc_b) order
    from :meth:`blocks` or by component from :meth:`by_component`: held in memory, or, past
    HELD_PAIRS, merged from sorted runs on disk. With how many hot buckets were linked to a
    representative instead of paired out, and the largest bucket."""

    hot_buckets: int
    largest_bucket: int
    held: tuple[np.ndarray, np.ndarray]
    spool: RunSpool | None = None
    runs: list[tuple[int, int]] = field(default_factory=list)
    _documents: np.ndarray | None = None

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The distinct pairs as (doc_a, doc_b) int64 arrays, in order, a block at a time;
        once read, the runs on disk are gone."""
        try:
            yield from self._merged(MERGE_MEMORY)
        finally:
            self._close()

    def by_component(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The distinct pairs as (doc_a, doc_b) blocks grouped by connected component of the
        candidate graph, components in the order of their smallest ids, a component's pairs
        in (doc_a, doc_b) order when it fits in a block. Once read, the runs on disk are
        gone.

        Verification reads the documents of a block of pairs at once. In (doc_a, doc_b)
        order a document's pairs as doc_b are strewn over the whole stream, and it is read
        again in each block it appears in; grouped, the pairs of a cluster of near-duplicates
        share a block, which halves the documents read. Three passes over the pairs, holding
        12 bytes a document, and up to 16 more for the table of :func:`positions`: their
        documents; a union-find over the documents' positions, block by block; each block
        sorted by component, a run on disk when there are several, the runs merged back. The
        passes read the runs PASS_MEMORY at a time, which bounds their memory."""
        spool, runs, block = None, [], None
        try:
            documents = self.documents()
            # Each document's root, once flattened: the position of its component's smallest
            # id, which names the component (positions sort like ids).
            count = documents.shape[0]
            root = np.arange(count, dtype=np.int32 if count < 2**31 else np.int64)
            position = positions(documents)
            for a, b in self._merged(PASS_MEMORY):
                unite(root, position(a), position(b))
            flatten(root)
            for a, b in self._merged(PASS_MEMORY):  # stably: by (component, doc_a, doc_b)
                component = root[position(a)]
                order = np.argsort(component, kind="stable")
                if block is not None:
                    spool = spool or RunSpool()
                    runs.append(spool.add(*block))
                block = component[order], a[order], b[order]
            del documents, root, position
            self._documents = None
            self._close()
            if spool is None:  # one block: no runs to merge
                if block is not None:
                    yield block[1], block[2]
                return
            runs.append(spool.add(*block))
            block = None
            # By component alone: a component's pairs of every run at once, each run's in
            # order (a giant component's pairs, in (doc_a, doc_b) order, would otherwise
            # come a run's few at a time).
            for _, a, b in spool.merged(runs, MERGE_MEMORY, key=1):
                yield a, b
        finally:
            self._close()
            if spool is not None:
                spool.close()

    def documents(self) -> np.ndarray:
        """The distinct documents of the pairs (sorted int64 ids): found in one pass over
        them, then kept until the pairs are read by component."""
        if self._documents is None:
            self._documents = _distinct_documents(self._merged(PASS_MEMORY))
        return self._documents

    def _merged(self, memory: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The distinct pairs in (doc_a, doc_b) order, a block at a time (the runs read
        ``memory`` bytes at a time), as often as asked until :meth:`_close`."""
        if self.spool is None:
            if self.held[0].size:
                yield self.held
            return
        last: tuple[int, ...] | None = None
        for a, b in self.spool.merged(self.runs, memory):
            first = np.ones(a.shape[0], dtype=bool)  # a pair can be in several runs
            first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
            first[0] = last != (int(a[0]), int(b[0]))
            last = int(a[-1]), int(b[-1])
            yield a[first], b[first]

    def _close(self) -> None:
        """Forget the pairs: the runs on disk go, held pairs too."""
        if self.spool is not None:
            self.spool.close()
        self.spool, self.runs = None, []
        self.held = self.held[0][:0], self.held[1][:0]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All the distinct pairs at once (for a sample: they are all in memory)."""
        blocks = list(self.blocks())
        return (
            np.concatenate([a for a, _ in blocks] or [np.empty(0, np.int64)]),
            np.concatenate([b for _, b in blocks] or [np.empty(0, np.int64)]),
        )


def collect(
    buckets: Iterable[tuple[np.ndarray, np.ndarray]], max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE
) -> Candidates:
    """Candidate pairs of (members, offsets) bucket chunks, deduplicated across buckets.

    A pair recurs in every band its documents share; every MERGE_PAIRS pairs of chunks are
    sorted and merged into the distinct pairs found so far, and when those reach HELD_PAIRS
    they go to disk as a sorted run, so memory is bounded however many the candidates."""
    doc_a, doc_b = np.empty(0, np.int64), np.empty(0, np.int64)
    chunks_a: list[np.ndarray] = []
    chunks_b: list[np.ndarray] = []
    pending, hot, largest = 0, 0, 0
    spool, runs = None, []
    for members, offsets in buckets:
        sizes = np.diff(offsets)
        if sizes.shape[0]:
            largest = max(largest, int(sizes.max()))
        # A chunk's buckets a few at a time, MERGE_PAIRS pairs at most (one bucket at least).
        for lo, hi in spans(np.cumsum(_pair_counts(sizes, max_bucket_size)), MERGE_PAIRS):
            a, b, some_hot = bucket_pairs(
                members[offsets[lo] : offsets[hi]],
                offsets[lo : hi + 1] - offsets[lo],
                max_bucket_size,
            )
            hot += some_hot
            chunks_a.append(a)
            chunks_b.append(b)
            pending += a.shape[0]
            if pending >= MERGE_PAIRS:
                doc_a, doc_b = _merge_chunks(doc_a, doc_b, chunks_a, chunks_b)
                pending = 0
            if doc_a.shape[0] >= HELD_PAIRS:
                spool = spool or RunSpool()
                runs.append(spool.add(doc_a, doc_b))
                doc_a, doc_b = doc_a[:0], doc_b[:0]
    doc_a, doc_b = _merge_chunks(doc_a, doc_b, chunks_a, chunks_b)
    if spool is not None and doc_a.shape[0]:
        runs.append(spool.add(doc_a, doc_b))
        doc_a, doc_b = doc_a[:0], doc_b[:0]
    return Candidates(hot, largest, (doc_a, doc_b), spool, runs)


def positions(documents: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The function from ids among the sorted distinct ``documents`` to their positions in
    it. A corpus's ids come from a sequence, so they are mostly dense: then a table indexed
    by id answers (4 bytes an id of the span, at most TABLE_SPAN ids a document), a memory
    read per look-up instead of a binary search over the documents, since by_component makes
    three look-ups a pair. Sparse ids are searched."""
    count = documents.shape[0]
    first = int(documents[0]) if count else 0
    span = int(documents[-1]) - first + 1 if count else 0
    if span > TABLE_SPAN * count or count >= 2**31:
        return lambda ids: np.searchsorted(documents, ids)
    table = np.zeros(span, dtype=np.int32)
    table[documents - first] = np.arange(count, dtype=np.int32)
    return lambda ids: table[ids - first].astype(np.intp)


def _distinct_documents(blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The sorted distinct document ids of blocks of pairs. The ids of a few blocks at a
    time (DISTINCT_BATCH) are sorted and inserted into those found so far, so about twice
    the found ones are held at the end; concatenating them all and sorting again (what an
    earlier version did every HELD_PAIRS ids) held four times as much (see by_component for
    what it did to dedup's peak)."""
    found, pending, count = np.empty(0, np.int64), [], 0
    for a, b in blocks:
        pending.append(pair_documents(a, b))
        count += pending[-1].shape[0]
        if count >= DISTINCT_BATCH:
            found = _insert_distinct(found, distinct(np.concatenate(pending)))
            pending, count = [], 0
    return _insert_distinct(found, distinct(np.concatenate([found[:0], *pending])))


def _insert_distinct(found: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Sorted distinct ``found`` with the sorted distinct ``new`` that it lacks inserted."""
    if not found.size:
        return new
    at = np.searchsorted(found, new)
    missing = found[np.minimum(at, found.shape[0] - 1)] != new
    return np.insert(found, at[missing], new[missing])


def _merge_chunks(
    doc_a: np.ndarray, doc_b: np.ndarray, chunks_a: list[np.ndarray], chunks_b: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs (doc_a, doc_b) and the chunks' pairs, sorted; the chunk lists are
    emptied."""
    a, b = unique_pairs(
        np.concatenate(chunks_a or [doc_a[:0]]), np.concatenate(chunks_b or [doc_b[:0]])
    )
    chunks_a.clear()
    chunks_b.clear()
    merged_a = np.empty(doc_a.shape[0] + a.shape[0], np.int64)
    merged_b = np.empty_like(merged_a)
    n = _merge_distinct(doc_a, doc_b, a, b, merged_a, merged_b)
    return merged_a[:n], merged_b[:n]


@njit(cache=True, nogil=True)
def _merge_distinct(a1, b1, a2, b2, out_a, out_b):
    """Merge two runs of distinct pairs sorted by (a, b) into out_a, out_b, each pair once;
    returns how many were written."""
    i = j = n = 0
    while i < a1.shape[0] or j < a2.shape[0]:
        if j == a2.shape[0]:
            first = True
        elif i == a1.shape[0]:
            first = False
        else:
            first = a1[i] < a2[j] or (a1[i] == a2[j] and b1[i] <= b2[j])
        if first:
            out_a[n], out_b[n] = a1[i], b1[i]
            if j < a2.shape[0] and a2[j] == a1[i] and b2[j] == b1[i]:
                j += 1  # the same pair in both
            i += 1
        else:
            out_a[n], out_b[n] = a2[j], b2[j]
            j += 1
        n += 1
    return n


def distinct_bucket_pairs(
    members: np.ndarray, offsets: np.ndarray, max_bucket_size: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`bucket_pairs` with each pair once, sorted: the candidates of one chunk of
    buckets, whichever executor groups them (simindex.pipeline.stages.bucket_pairs)."""
    a, b, hot = bucket_pairs(members, offsets, max_bucket_size)
    return *unique_pairs(a, b), hot


def unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs (a[i], b[i]), sorted by (a, b). Any int64 ids: when each column
    spans less than 2**32 (the ids of a corpus, wherever its sequence starts), a pair is
    packed into one integer, its offsets from the columns' least values, and sorted as one
    (one sort of values, not two of indices); otherwise the two columns are sorted together."""
    if (pairs := packed(a, b)) is not None:
        values, low_a, low_b = pairs
        values = distinct(values)
        high, low = (values >> 32).astype(np.int64), (values & 0xFFFF_FFFF).astype(np.int64)
        return high + low_a, low + low_b
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
    counts = _pair_counts(sizes, max_bucket_size)
    starts = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    doc_a = np.empty(int(starts[-1]), dtype=np.int64)
    doc_b = np.empty_like(doc_a)
    _bucket_pairs_kernel(members.astype(np.int64), offsets, hot, starts, doc_a, doc_b)
    return doc_a, doc_b, int(hot.sum())


def _pair_counts(sizes: np.ndarray, max_bucket_size: int) -> np.ndarray:
    """How many pairs :func:`bucket_pairs` makes of buckets of these sizes."""
    return np.where(sizes > max_bucket_size, sizes - 1, sizes * (sizes - 1) // 2)


@njit(cache=True, nogil=True)
def _bucket_pairs_kernel(members, offsets, hot, starts, doc_a, doc_b):
    for i in range(offsets.shape[0] - 1):
        bucket = members[offsets[i] : offsets[i + 1]]
        # The databases group a bucket's members along the primary key, so they come in
        # ascending order, and a sorted copy of each would be an allocation per bucket, most
        # buckets holding two documents.
        if not _ascending(bucket):
            bucket = np.sort(bucket)
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


@njit(inline="always", cache=True)
def _ascending(values):
    for j in range(1, values.shape[0]):
        if values[j] < values[j - 1]:
            return False
    return True
