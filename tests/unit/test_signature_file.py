"""SignatureFile: the signatures of a set of documents, written from a pass over all of them
in id order, read back by id in any order and amount, without holding the file in memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simindex.errors import DatabaseError
from simindex.signature_file import signature_file

NUM_PERM = 16


def _scan(count: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Ids 1..count with gaps (deleted documents) and random signatures, in id order."""
    rng = np.random.default_rng(seed)
    ids = np.flatnonzero(rng.random(count) < 0.8).astype(np.int64) + 1
    return ids, rng.integers(0, 2**32, size=(ids.size, NUM_PERM), dtype=np.uint32)


def test_signatures_come_back_by_id_whatever_the_chunks_and_the_order():
    ids, sigs = _scan(5_000)
    rng = np.random.default_rng(6)
    documents = np.sort(rng.choice(ids, 1_500, replace=False))
    with signature_file(documents, NUM_PERM) as file:
        for lo in range(0, ids.size, 333):  # a scan's chunks, most ids not documents
            file.write(ids[lo : lo + 333], sigs[lo : lo + 333])
        file.complete()
        for size in (1, 40, 1_500):
            wanted = np.sort(rng.choice(documents, size, replace=False))
            expected = sigs[np.searchsorted(ids, wanted)]
            assert (file.read(wanted) == expected).all()
        with pytest.raises(ValueError, match="not a document"):
            file.read(np.array([documents[0], ids.max() + 1]))


def test_rows_written_out_of_id_order_land_at_their_documents():
    ids, sigs = _scan(500)
    documents = ids[::3]
    order = np.random.default_rng(7).permutation(ids.size)  # a scan in no order at all
    with signature_file(documents, NUM_PERM) as file:
        for lo in range(0, ids.size, 50):
            part = order[lo : lo + 50]
            file.write(ids[part], sigs[part])
        file.complete()
        assert (file.read(documents) == sigs[::3]).all()


def test_a_document_without_a_signature_is_named_as_missing():
    ids, sigs = _scan(300)
    documents = np.union1d(ids[:100], [ids.max() + 10])  # one id has no stored signature
    with signature_file(documents, NUM_PERM) as file:
        file.write(ids, sigs)
        with pytest.raises(DatabaseError, match="1 of 101 documents have no stored signature"):
            file.complete()


def test_reading_every_row_does_not_keep_the_file_in_memory():
    """Reading all of 64 MiB of signatures leaves the process's file-backed memory about
    where it was (a memory map of the file would keep the pages it touched)."""
    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("needs Linux's /proc to read the process's file-backed memory")

    def file_backed_kib() -> int:
        line = next(x for x in status.read_text().splitlines() if x.startswith("RssFile:"))
        return int(line.split()[1])

    count, num_perm = 131_072, 128  # 64 MiB
    documents = np.arange(1, count + 1, dtype=np.int64)
    with signature_file(documents, num_perm) as file:
        for lo in range(1, count + 1, 8_192):
            chunk = np.arange(lo, lo + 8_192, dtype=np.int64)
            file.write(chunk, np.broadcast_to(chunk[:, None], (8_192, num_perm)).astype(np.uint32))
        file.complete()
        before = file_backed_kib()
        signatures = file.read(documents)
        grown = file_backed_kib() - before
    assert (signatures[:, 0] == documents).all() and (signatures[:, -1] == documents).all()
    assert grown < 16 * 1024, f"{grown} KiB of the file stayed mapped"
