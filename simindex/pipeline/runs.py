"""Sorted runs on disk, merged in bounded memory: how rows of int64 columns that outgrow
memory come out in order (lexicographic, first column first). Band keys (key, document id)
of a bulk load and candidate pairs (doc_a, doc_b) of a large corpus, then the same pairs by
component (component, doc_a, doc_b), are sorted this way; and the sorting helpers they and
the pipeline share (pairs packed into one value, distinct ids)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import IO

import numpy as np


class RunSpool:
    """A temporary file of runs of rows with the same columns: each run is its first column's
    values, then its second's, and so on (int64), its rows in order. :meth:`add` appends a
    run; :meth:`merged` reads runs back as one sorted stream."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile()
        self._width = 0

    def add(self, *columns: np.ndarray) -> tuple[int, int]:
        """Append a run (rows already in order); returns (offset, rows), which
        :meth:`merged` takes."""
        if self._width and len(columns) != self._width:
            raise ValueError(f"a run of {len(columns)} columns in a spool of {self._width}")
        self._width = len(columns)
        offset = self._file.tell()
        for column in columns:
            np.ascontiguousarray(column, dtype=np.int64).tofile(self._file)
        return offset, columns[0].shape[0]

    def merged(
        self, runs: list[tuple[int, int]], memory: int, key: int | None = None
    ) -> Iterator[tuple[np.ndarray, ...]]:
        """The rows of ``runs`` ((offset, rows) each) in order of their first ``key`` columns
        (all of them by default), block by block, as a tuple of columns, holding about
        ``memory`` bytes of them (a k-way merge of blocks). Rows equal in those columns come
        in the order of ``runs`` within a block, and in their run's order."""
        self._file.flush()
        key = key or self._width
        readers = [_Run(self._file.fileno(), offset, rows, self._width) for offset, rows in runs]
        block = max(1, memory // (32 * self._width * max(len(readers), 1)))
        while True:
            for run in readers:
                run.fill(block)
            open_runs = [run for run in readers if run.unread]
            # Rows up to the least last-read key of the runs not read to their end are final:
            # every row still unread in any run sorts after it, or with it.
            last = min(run.last[:key] for run in open_runs) if open_runs else None
            taken = [run.take(last) for run in readers]
            columns = tuple(np.concatenate([t[c] for t in taken]) for c in range(self._width))
            if not columns[0].size:
                return
            order = _stable_order(columns[:key])  # ties keep the order taken
            yield tuple(column[order] for column in columns)

    def close(self) -> None:
        self._file.close()


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted: ``values`` sorted in place, then the first of each run,
    positions found later by binary search. np.unique would hash (several times slower on
    the ids of millions of pairs) or, asked for positions, add argsort and inverse arrays."""
    values.sort()
    first = np.ones(values.shape[0], dtype=bool)
    first[1:] = values[1:] != values[:-1]
    return values[first]


def pair_documents(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted distinct document ids of the pairs (a[i], b[i])."""
    return distinct(np.concatenate((a, b)))


def packed(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """Rows (a[i], b[i]) of int64 as one uint64 each that sorts like them: (a - low_a) in
    the high 32 bits, (b - low_b) in the low ones, with (low_a, low_b); None when a column
    spans 2**32 or more (the ids of a corpus span less, wherever their sequence starts)."""
    if not a.size:
        return np.empty(0, np.uint64), 0, 0
    low_a, low_b = int(a.min()), int(b.min())
    if max(int(a.max()) - low_a, int(b.max()) - low_b) >= 2**32:
        return None
    high = (a - low_a).astype(np.uint64) << np.uint64(32)
    return high | (b - low_b).astype(np.uint64), low_a, low_b


def _stable_order(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """The stable sorting order of rows by the key columns. Two columns are sorted as one
    packed value when they fit: a block of merged runs is a few sorted runs, which a stable
    sort of values merges about twice as fast as NumPy's lexsort sorts indices by each
    column in turn. Band keys are hashes spread over 63 bits, so their merges (the store's
    bulk load) practically never pack."""
    if len(keys) == 2 and (pairs := packed(*keys)) is not None:
        return np.argsort(pairs[0], kind="stable")
    return np.lexsort(keys[::-1])


class _Run:
    """One run of a RunSpool, read block by block."""

    def __init__(self, fd: int, offset: int, rows: int, width: int):
        self._fd, self._offset, self._rows = fd, offset, rows
        self._read = 0
        self._columns = [np.empty(0, np.int64) for _ in range(width)]

    @property
    def unread(self) -> int:
        return self._rows - self._read

    @property
    def last(self) -> tuple[int, ...]:
        """The last row read."""
        return tuple(int(column[-1]) for column in self._columns)

    def fill(self, block: int) -> None:
        """Read another block of rows if fewer than ``block`` are waiting."""
        if self._columns[0].size >= block or not self.unread:
            return
        count = min(block, self.unread)
        width = len(self._columns)
        starts = [self._offset + 8 * (c * self._rows + self._read) for c in range(width)]
        read = [np.frombuffer(os.pread(self._fd, 8 * count, at), np.int64) for at in starts]
        self._columns = [np.concatenate(pair) for pair in zip(self._columns, read, strict=True)]
        self._read += count

    def take(self, last: tuple[int, ...] | None = None) -> list[np.ndarray]:
        """The waiting rows up to ``last`` inclusive (all of them if None), compared on as
        many columns as ``last`` has, removed from the run."""
        count = self._columns[0].size
        if last is not None:
            low, high = 0, count  # narrowed, column by column, to the rows equal to last
            for column, value in zip(self._columns[: len(last)], last, strict=True):
                part = column[low:high]
                low, high = (
                    low + int(np.searchsorted(part, value, "left")),
                    low + int(np.searchsorted(part, value, "right")),
                )
            count = high
        taken = [column[:count] for column in self._columns]
        self._columns = [column[count:] for column in self._columns]
        return taken
