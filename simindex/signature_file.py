"""The signatures of a range of document ids in a temporary file, read back by id.

When the candidate pairs of `pairs --full` name a large share of the index, looking their
documents' signatures up a block at a time costs a random page read in the database per
document and block; reading the signatures table once, in id order, into this file and
taking them from the file costs one sequential pass (see local.pairs.signature_pass).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from simindex.errors import DatabaseError
from simindex.spec import SIGNATURE_DTYPE


class SignatureFile:
    """Row i of the file holds the signature of document id ``first + i``, for the ids
    ``first``..``last``: :meth:`write` the signatures of any of them, in any order, then
    :meth:`read` those written. Ids
    never written (deleted documents) take no disk: the file is sparse. Which ids were
    written is kept in memory, a byte an id of the range."""

    def __init__(self, first: int, last: int, num_perm: int):
        self.first, self.last = first, last
        self._num_perm = num_perm
        self.row_bytes = SIGNATURE_DTYPE.itemsize * num_perm
        self._written = np.zeros(max(0, last - first + 1), dtype=np.bool_)
        self._file = tempfile.TemporaryFile()
        self._file.truncate(max(1, self._written.size * self.row_bytes))

    def write(self, ids: np.ndarray, signatures: np.ndarray) -> None:
        """Keep the signatures (uint32 (n, num_perm)) of the ids in the file's range; others
        are passed over."""
        inside = (ids >= self.first) & (ids <= self.last)
        at = ids[inside] - self.first
        rows = np.ascontiguousarray(signatures[inside], SIGNATURE_DTYPE)
        # Runs of consecutive rows go in one write (a chunk of an id-ordered scan is one run).
        breaks = np.flatnonzero(np.diff(at) != 1) + 1
        fd = self._file.fileno()
        for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, at.shape[0]], strict=True):
            if hi > lo:
                os.pwrite(fd, rows[lo:hi].data, int(at[lo]) * self.row_bytes)
        self._written[at] = True

    def read(self, ids: np.ndarray) -> np.ndarray:
        """The signatures of ids in their order, uint32 (n, num_perm): a read of the file per
        row, from the OS's page cache. A memory map of the file would keep the pages a read
        touches, and those the kernel maps around them, in the process's memory
        (tests/unit/test_signature_file.py fails with one)."""
        at = ids - self.first
        inside = (at >= 0) & (at < self._written.size)
        written = np.zeros(ids.shape, np.bool_)
        written[inside] = self._written[at[inside]]
        if not written.all():
            missing = ids[~written]
            raise DatabaseError(
                f"{missing.size} of {ids.size} documents have no stored signature (the first: "
                f"id {missing[0]}): run `simindex check`"
            )
        fd = self._file.fileno()
        data = b"".join(
            [os.pread(fd, self.row_bytes, offset) for offset in (at * self.row_bytes).tolist()]
        )
        return np.frombuffer(data, SIGNATURE_DTYPE).reshape(-1, self._num_perm).astype(np.uint32)

    def close(self) -> None:
        self._file.close()


@contextmanager
def signature_file(first: int, last: int, num_perm: int) -> Iterator[SignatureFile]:
    """A SignatureFile for the ids ``first``..``last``, gone on exit."""
    file = SignatureFile(first, last, num_perm)
    try:
        yield file
    finally:
        file.close()
