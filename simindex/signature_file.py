"""The signatures of a large set of documents in a temporary file, read back by id.

When the candidate pairs of `pairs --full` name a large share of the index, looking their
documents' signatures up a block at a time costs a random page read in the database per
document and block; reading the signatures table once, in id order, into this file and
taking them from the file costs one sequential pass (see Index._candidate_signatures).
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
    """Row i of the file holds the signature of ``documents[i]`` (sorted distinct ids):
    :meth:`write` the signatures of every one of them, then :meth:`read` any of them."""

    def __init__(self, documents: np.ndarray, num_perm: int):
        self._documents, self._num_perm = documents, num_perm
        self._row = SIGNATURE_DTYPE.itemsize * num_perm
        self._file = tempfile.TemporaryFile()
        self._file.truncate(max(1, documents.shape[0] * self._row))
        self._written = 0

    def write(self, ids: np.ndarray, signatures: np.ndarray) -> None:
        """Keep the signatures (uint32 (n, num_perm)) of the ids that are documents of the
        file; others are passed over. Each document is written once."""
        at = np.searchsorted(self._documents, ids).clip(max=self._documents.shape[0] - 1)
        kept = self._documents[at] == ids
        at, rows = at[kept], np.ascontiguousarray(signatures[kept], SIGNATURE_DTYPE)
        # Runs of consecutive rows go in one write (a chunk of an id-ordered scan is one run).
        breaks = np.flatnonzero(np.diff(at) != 1) + 1
        for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, at.shape[0]], strict=True):
            if hi > lo:
                self._file.seek(int(at[lo]) * self._row)
                self._file.write(rows[lo:hi].data)
        self._written += int(at.shape[0])

    def complete(self) -> None:
        """Check that every document was written."""
        missing = self._documents.shape[0] - self._written
        if missing:
            raise DatabaseError(
                f"{missing} of {self._documents.shape[0]} documents have no stored signature: "
                "run `simindex check`"
            )
        self._file.flush()

    def read(self, ids: np.ndarray) -> np.ndarray:
        """The signatures of ids (documents of the file) in their order, uint32
        (n, num_perm): a read of the file per row, from the OS's page cache. A memory map of
        the file would keep the pages a read touches, and those the kernel maps around them,
        in the process's memory (tests/unit/test_signature_file.py fails with one)."""
        at = np.searchsorted(self._documents, ids).clip(max=self._documents.shape[0] - 1)
        if (self._documents[at] != ids).any():
            raise ValueError("an id that is not a document of the signature file")
        fd = self._file.fileno()
        data = b"".join([os.pread(fd, self._row, offset) for offset in (at * self._row).tolist()])
        return np.frombuffer(data, SIGNATURE_DTYPE).reshape(-1, self._num_perm).astype(np.uint32)

    def close(self) -> None:
        self._file.close()


@contextmanager
def signature_file(documents: np.ndarray, num_perm: int) -> Iterator[SignatureFile]:
    """A SignatureFile for ``documents``, gone on exit."""
    file = SignatureFile(documents, num_perm)
    try:
        yield file
    finally:
        file.close()
