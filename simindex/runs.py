"""Sorted runs on disk, merged in bounded memory: how rows of two int64 columns (x, y) that
outgrow memory come out in (x, y) order. Band keys (key, document id) of a bulk load and
candidate pairs (doc_a, doc_b) of a large corpus are sorted this way."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import IO

import numpy as np


class RunSpool:
    """A temporary file of runs: each run is its x values, then its y values (int64), with
    its rows in (x, y) order. :meth:`add` appends a run; :meth:`merged` reads runs back as
    one sorted stream."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile()

    def add(self, x: np.ndarray, y: np.ndarray) -> tuple[int, int]:
        """Append a run (rows already in (x, y) order); returns (offset, rows), which
        :meth:`merged` takes."""
        offset = self._file.tell()
        np.ascontiguousarray(x, dtype=np.int64).tofile(self._file)
        np.ascontiguousarray(y, dtype=np.int64).tofile(self._file)
        return offset, x.shape[0]

    def merged(
        self, runs: list[tuple[int, int]], memory: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The rows of ``runs`` ((offset, rows) each) in (x, y) order, block by block, holding
        about ``memory`` bytes of them (a k-way merge of blocks). Equal rows of different runs
        come in the order of ``runs``."""
        self._file.flush()
        readers = [_Run(self._file.fileno(), offset, rows) for offset, rows in runs]
        block = max(1, memory // (64 * max(len(readers), 1)))
        while True:
            for run in readers:
                run.fill(block)
            open_runs = [run for run in readers if run.unread]
            if open_runs:
                # Rows up to the least last-read row of the runs not read to their end are
                # final: every row still unread in any run sorts after it.
                last = min(run.last for run in open_runs)
                taken = [run.take(*last) for run in readers]
            else:
                taken = [run.take() for run in readers]
            x = np.concatenate([t[0] for t in taken])
            if not x.size:
                return
            y = np.concatenate([t[1] for t in taken])
            order = np.lexsort((y, x))  # stable: equal rows keep the order of the runs
            yield x[order], y[order]

    def close(self) -> None:
        self._file.close()


class _Run:
    """One run of a RunSpool, read block by block."""

    def __init__(self, fd: int, offset: int, rows: int):
        self._fd, self._offset, self._rows = fd, offset, rows
        self._read = 0
        self._x = self._y = np.empty(0, np.int64)

    @property
    def unread(self) -> int:
        return self._rows - self._read

    @property
    def last(self) -> tuple[int, int]:
        """The (x, y) of the last row read."""
        return int(self._x[-1]), int(self._y[-1])

    def fill(self, block: int) -> None:
        """Read another block of rows if fewer than ``block`` are waiting."""
        if self._x.size >= block or not self.unread:
            return
        count = min(block, self.unread)
        x, y = (
            np.frombuffer(os.pread(self._fd, 8 * count, start + 8 * self._read), np.int64)
            for start in (self._offset, self._offset + 8 * self._rows)
        )
        self._x = np.concatenate((self._x, x))
        self._y = np.concatenate((self._y, y))
        self._read += count

    def take(self, x: int | None = None, y: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The waiting rows up to (x, y) inclusive (all of them if x is None), removed from
        the run."""
        count = self._x.size
        if x is not None:
            low = int(np.searchsorted(self._x, x, "left"))
            high = int(np.searchsorted(self._x, x, "right"))
            count = low + int(np.searchsorted(self._y[low:high], y, "right"))
        taken = self._x[:count], self._y[:count]
        self._x, self._y = self._x[count:], self._y[count:]
        return taken
