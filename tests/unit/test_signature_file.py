"""SignatureFile: the signatures of a range of document ids, written from a pass over them
in id order, read back by id in any order and amount, without holding the file in memory."""

from __future__ import annotations

import os
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
    first, last = int(ids[700]), int(ids[4_000])  # a range of the scan's ids
    documents = np.sort(rng.choice(ids[700:4_001], 1_500, replace=False))
    with signature_file(first, last, NUM_PERM) as file:
        for lo in range(0, ids.size, 333):  # a scan's chunks, some ids outside the range
            file.write(ids[lo : lo + 333], sigs[lo : lo + 333])
        for size in (1, 40, 1_500):
            wanted = np.sort(rng.choice(documents, size, replace=False))
            expected = sigs[np.searchsorted(ids, wanted)]
            assert (file.read(wanted) == expected).all()
        assert (file.read(documents[::-1]) == sigs[np.searchsorted(ids, documents)][::-1]).all()


def test_rows_written_out_of_id_order_land_at_their_documents():
    ids, sigs = _scan(500)
    order = np.random.default_rng(7).permutation(ids.size)  # a scan in no order at all
    with signature_file(int(ids[0]), int(ids[-1]), NUM_PERM) as file:
        for lo in range(0, ids.size, 50):
            part = order[lo : lo + 50]
            file.write(ids[part], sigs[part])
        assert (file.read(ids[::3]) == sigs[::3]).all()


@pytest.mark.parametrize("where", ["a gap", "past the range"])
def test_a_document_without_a_signature_is_named_as_missing(where):
    ids, sigs = _scan(300)
    gaps = np.setdiff1d(np.arange(ids[0], ids[-1]), ids)  # deleted documents' ids
    absent = gaps[0] if where == "a gap" else ids[-1] + 10
    with signature_file(int(ids[0]), int(ids[-1]), NUM_PERM) as file:
        file.write(ids, sigs)
        with pytest.raises(DatabaseError, match="1 of 101 documents have no stored signature"):
            file.read(np.sort(np.r_[ids[:100], absent]))


def test_ids_never_written_take_no_disk(tmp_path, monkeypatch):
    """A range of a million ids, two of them written: the file holds their rows, not the
    512 MB of the range."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with signature_file(1, 1_000_000, 128) as file:
        file.write(np.array([3, 999_999]), np.ones((2, 128), np.uint32))
        allocated = os.fstat(file._file.fileno()).st_blocks * 512
        assert (file.read(np.array([999_999, 3])) == 1).all()
    assert allocated <= 1 << 20, f"{allocated} bytes allocated"


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
    with signature_file(1, count, num_perm) as file:
        for lo in range(1, count + 1, 8_192):
            chunk = np.arange(lo, lo + 8_192, dtype=np.int64)
            file.write(chunk, np.broadcast_to(chunk[:, None], (8_192, num_perm)).astype(np.uint32))
        before = file_backed_kib()
        signatures = file.read(documents)
        grown = file_backed_kib() - before
    assert (signatures[:, 0] == documents).all() and (signatures[:, -1] == documents).all()
    assert grown < 16 * 1024, f"{grown} KiB of the file stayed mapped"
