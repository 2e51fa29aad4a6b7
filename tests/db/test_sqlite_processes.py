"""A full `pairs` on SQLite groups the buckets in two processes (Store._split_buckets) and
reads every signature into a file in another (Store.copy_signatures): the same buckets,
signatures and pairs as one connection's reads, and a clear error when a process fails."""

from __future__ import annotations

import sqlite3
import subprocess
import threading
import time
from contextlib import nullcontext

import numpy as np
import pytest

import simindex.index
import simindex.store
from simindex import Index
from simindex.errors import DatabaseError
from simindex.signature_file import signature_file


@pytest.fixture
def index_path(tmp_path):
    """A SQLite index of 1,500 generated documents, a third of them edited copies of
    another, its pairs found once."""
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(3_000)]
    texts = [" ".join(rng.choice(words, 60)) for _ in range(1_000)]
    for source in range(500):
        copy = texts[source].split()
        copy[rng.integers(0, len(copy))] = "edited"
        texts.append(" ".join(copy))
    path = tmp_path / "split.db"
    with Index.create(path) as index:
        index.add([(f"d{i}", text) for i, text in enumerate(texts)])
        index.find_pairs()
    return path


def _buckets(path, split: int | None) -> set[tuple[int, ...]]:
    with Index.open(path) as index, index._transaction() as connection:
        chunks = index._store.iter_buckets(connection, 1, split=split)
        return {
            tuple(members[lo:hi].tolist())
            for members, offsets in chunks
            for lo, hi in zip(offsets[:-1], offsets[1:], strict=True)
        }


def _stored_pairs(path) -> list[tuple[str, str, float]]:
    with Index.open(path) as index:
        return sorted((p.id_a, p.id_b, p.similarity) for p in index.pairs())


def test_two_processes_group_the_buckets_and_find_the_pairs_of_one_connection(
    index_path, monkeypatch
):
    started = []
    popen = subprocess.Popen

    def counted(*args, **kwargs):
        if args[0][3] == simindex.store._GROUPING_PROCESS:
            started.append([args[0][4], *args[0][6:8]])  # the file, the banding, the bands
        return popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", counted)
    whole = _buckets(index_path, split=None)
    assert not started
    assert _buckets(index_path, split=20) == whole
    assert started == [[str(index_path), "1", "1,3,5,7,9,11,13,15,17,19"]]
    assert len(whole) > 500  # the copies' buckets, at least

    pairs = _stored_pairs(index_path)  # found by one connection (1,500 x 20 rows)
    monkeypatch.setattr(simindex.index, "SPLIT_GROUPING_ROWS", 0)
    with Index.open(index_path) as index:
        report = index.find_pairs(full=True)
    assert len(started) == 2 and report.pairs == len(pairs) >= 500
    assert _stored_pairs(index_path) == pairs


def test_a_failing_grouping_process_is_one_clear_error_and_the_pairs_stay(index_path, monkeypatch):
    pairs = _stored_pairs(index_path)
    monkeypatch.setattr(simindex.index, "SPLIT_GROUPING_ROWS", 0)
    monkeypatch.setattr(simindex.store, "_GROUPING_PROCESS", "import sys; sys.exit('no luck')")
    with Index.open(index_path) as index, pytest.raises(DatabaseError) as raised:
        index.find_pairs(full=True)
    assert str(raised.value) == (
        f"the process that grouped the odd bands of {index_path} failed: no luck"
    )
    assert _stored_pairs(index_path) == pairs  # the rebuild's transaction rolled back


def test_where_no_second_process_starts_one_connection_groups_every_band(index_path, monkeypatch):
    whole = _buckets(index_path, split=None)

    def refused(*args, **kwargs):
        raise OSError("no processes here")

    monkeypatch.setattr(subprocess, "Popen", refused)
    assert _buckets(index_path, split=20) == whole


def test_a_full_disk_under_the_grouping_process_names_the_temporary_directory(
    index_path, monkeypatch
):
    """The second process's output, a temporary file, on a full disk: one line naming the
    temporary directory and TMPDIR, exit 1, as for the command's own temporary files."""
    pairs = _stored_pairs(index_path)
    full_disk = (
        "import errno\n"
        "class Full:\n"
        "    def write(self, data):\n"
        "        raise OSError(errno.ENOSPC, 'No space left on device')\n"
        "    def flush(self):\n"
        "        pass\n"
    )
    program = simindex.store._GROUPING_PROCESS
    assert "out = sys.stdout.buffer" in program
    monkeypatch.setattr(simindex.index, "SPLIT_GROUPING_ROWS", 0)
    monkeypatch.setattr(
        simindex.store,
        "_GROUPING_PROCESS",
        full_disk + program.replace("out = sys.stdout.buffer", "out = Full()"),
    )
    _pairs_fail_on_a_full_disk(index_path, monkeypatch, pairs)


def _pairs_fail_on_a_full_disk(index_path, monkeypatch, pairs) -> None:
    """`pairs --full` through the CLI, a process's output (as patched) on a full disk: one
    line naming the temporary directory and TMPDIR, exit 1, and the pairs stored before
    stay."""
    from typer.testing import CliRunner

    from simindex.cli import app

    result = CliRunner().invoke(app, ["pairs", "--full", "--db", str(index_path)])
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: no space left on the device of the temporary directory")
    assert "TMPDIR" in last and "Traceback" not in result.output
    monkeypatch.undo()
    assert _stored_pairs(index_path) == pairs


def _no_signature_pass(monkeypatch):
    """find_pairs looks each candidate's signature up in the database, as without a pass."""
    monkeypatch.setattr(Index, "_signature_pass", lambda *args, **kwargs: nullcontext(None))


def test_a_second_process_writes_every_signature_and_the_pairs_are_those_of_look_ups(
    index_path, monkeypatch
):
    with Index.open(index_path) as index, index._store.read() as connection:
        first, last = index._store.document_id_range(connection)
        ids = np.arange(first, last + 1)
        stored = index._store.signatures_of(connection, ids, index.spec.num_perm)
        with signature_file(first, last, index.spec.num_perm) as file:
            assert index._store.copy_signatures(file, threading.Event()) is file
            assert np.array_equal(file.read(ids), stored)

    _no_signature_pass(monkeypatch)
    with Index.open(index_path) as index:
        index.find_pairs(full=True)
    looked_up = _stored_pairs(index_path)
    monkeypatch.undo()
    started = []
    popen = subprocess.Popen

    def counted(*args, **kwargs):
        started.append(args[0][3])
        return popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", counted)
    with Index.open(index_path) as index:
        report = index.find_pairs(full=True)
    assert started == [simindex.store._SIGNATURE_PROCESS]  # 30,000 band keys: one grouping
    assert report.pairs == len(looked_up) >= 500
    assert _stored_pairs(index_path) == looked_up


def test_the_signature_file_skips_deleted_ids_across_the_process_chunks(index_path, monkeypatch):
    """Ids from the first left to the last, with runs deleted (the first id among them), read
    seven at a time: every chunk with a gap written row by row, and the others at once."""
    monkeypatch.setattr(simindex.store, "SIGNATURE_ROWS", 7)
    with Index.open(index_path) as index:
        index.delete(["d0", "d1", *[f"d{i}" for i in range(20, 40)], "d700", "d1499"])
        with index._store.read() as connection:
            first, last = index._store.document_id_range(connection)
            kept = np.array(sorted(index._store.document_ids(connection, [
                f"d{i}" for i in range(1_500)
            ]).values()))  # fmt: skip
            stored = index._store.signatures_of(connection, kept, index.spec.num_perm)
        assert (first, last, kept.size) == (3, 1_499, 1_476)
        with signature_file(first, last, index.spec.num_perm) as file:
            assert index._store.copy_signatures(file, threading.Event()) is file
            assert np.array_equal(file.read(kept), stored)
            with pytest.raises(DatabaseError, match=r"\(the first: id 21\)"):
                file.read(np.array([4, 21, 22]))


def test_a_stopped_signature_process_is_killed_at_once(index_path, monkeypatch):
    """Verification failed or ended first: the process is killed, not waited for."""
    started = []
    popen = subprocess.Popen

    def kept(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", kept)
    monkeypatch.setattr(simindex.store, "_SIGNATURE_PROCESS", "import time; time.sleep(60)")
    stop = threading.Event()
    stop.set()
    with Index.open(index_path) as index, signature_file(1, 1_500, index.spec.num_perm) as file:
        began = time.perf_counter()
        assert index._store.copy_signatures(file, stop) is file
        assert time.perf_counter() - began < 10
    assert started[0].returncode == -9  # SIGKILL


def test_a_failing_signature_process_is_one_clear_error_and_the_pairs_stay(index_path, monkeypatch):
    pairs = _stored_pairs(index_path)
    monkeypatch.setattr(simindex.store, "_SIGNATURE_PROCESS", "import sys; sys.exit('no luck')")
    with Index.open(index_path) as index, pytest.raises(DatabaseError) as raised:
        index.find_pairs(full=True)
    assert str(raised.value) == (
        f"the process that read the signatures of {index_path} failed: no luck"
    )
    assert _stored_pairs(index_path) == pairs


def _damage(path, statement: str) -> None:
    """Change the index's file behind simindex's back, as a damaged file would be."""
    with sqlite3.connect(path) as connection:
        connection.execute(statement)
    connection.close()


def test_a_candidate_without_a_stored_signature_names_the_check(index_path):
    first = _stored_pairs(index_path)[0][0]
    with Index.open(index_path) as index, index._store.read() as connection:
        document_id = index._store.document_ids(connection, [first])[first]
    _damage(index_path, f"DELETE FROM signatures WHERE document_id = {document_id}")
    with Index.open(index_path) as index, pytest.raises(DatabaseError) as raised:
        index.find_pairs(full=True)
    message = str(raised.value)
    assert message.endswith(
        f"have no stored signature (the first: id {document_id}): run `simindex check`"
    )


def test_a_signature_of_another_length_is_named_by_the_process(index_path):
    _damage(index_path, "UPDATE signatures SET minhashes = x'00' WHERE document_id = 700")
    with Index.open(index_path) as index, pytest.raises(DatabaseError) as raised:
        index.find_pairs(full=True)
    assert str(raised.value) == (
        f"the process that read the signatures of {index_path} failed: stored signatures "
        "differ in length from the index's: run `simindex check`"
    )


def test_where_no_process_starts_the_command_reads_buckets_and_signatures_itself(
    index_path, monkeypatch
):
    pairs = _stored_pairs(index_path)

    def refused(*args, **kwargs):
        raise OSError("no processes here")

    monkeypatch.setattr(subprocess, "Popen", refused)
    monkeypatch.setattr(simindex.index, "SPLIT_GROUPING_ROWS", 0)
    with Index.open(index_path) as index:
        report = index.find_pairs(full=True)
    assert report.pairs == len(pairs)
    assert _stored_pairs(index_path) == pairs


def test_a_full_disk_under_the_signature_file_names_the_temporary_directory(
    index_path, monkeypatch
):
    pairs = _stored_pairs(index_path)
    full_disk = "def full(*args):\n    raise OSError(errno.ENOSPC, 'No space left on device')\n"
    program = simindex.store._SIGNATURE_PROCESS
    assert program.count("os.pwrite(") == 1
    after_imports = program.index("\n", program.index("import errno")) + 1
    patched = program[:after_imports] + full_disk + program[after_imports:]
    monkeypatch.setattr(
        simindex.store, "_SIGNATURE_PROCESS", patched.replace("os.pwrite(", "full(")
    )
    _pairs_fail_on_a_full_disk(index_path, monkeypatch, pairs)
