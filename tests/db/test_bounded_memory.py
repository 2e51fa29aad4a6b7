"""Work in bounded chunks gives the same results as in one piece, on every backend."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import sqlalchemy as sa

import simindex.local.pairs
import simindex.pipeline.candidates
import simindex.pipeline.cluster
import simindex.pipeline.runs
import simindex.pipeline.verify
import simindex.store
from simindex import Index
from simindex.errors import DatabaseError
from simindex.pipeline.chunking import spans


def _stored(index: Index) -> dict[tuple[str, str], float]:
    return {(p.id_a, p.id_b): p.similarity for p in index.pairs(0.5)}


def test_spans_cover_every_item_once_within_the_budget():
    cost = np.array([3, 1, 1, 5, 2, 2, 9, 1])
    ranges = list(spans(np.cumsum(cost), 4))
    assert ranges == [(0, 2), (2, 3), (3, 4), (4, 6), (6, 7), (7, 8)]  # an item over: alone
    assert list(spans(np.cumsum(cost), 100)) == [(0, 8)]
    assert list(spans(np.empty(0, np.int64), 4)) == []


def _signed(url: str) -> list[tuple]:
    """Every stored document's content hash, shingle count, signature and band keys."""
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        rows = connection.exec_driver_sql(
            "SELECT d.external_id, d.content_hash, d.shingle_count, s.minhashes, k.band, k.key "
            "FROM documents d JOIN signatures s ON s.document_id = d.id "
            "JOIN band_keys k ON k.document_id = d.id ORDER BY d.id, k.band"
        ).all()
    engine.dispose()
    return [(*row[:3], bytes(row[3]), *row[4:]) for row in rows]


def test_batches_cut_by_text_store_the_same_signatures(db_url, news, tmp_path, monkeypatch):
    whole = f"sqlite:///{tmp_path / 'whole.db'}"
    with Index.create(whole) as index:
        index.add(news)
    monkeypatch.setattr("simindex.local.ingest.BATCH_TEXT_CHARS", 700)  # ~1-3 stories a batch
    with Index.create(db_url) as index:
        batches = []
        index.add(news, batch_size=40, progress=batches.append)
    expected = _signed(whole)
    assert _signed(db_url) == expected and len(expected) == 20 * len(news)
    assert len(batches) > len(news) // 3 and max(batches) < 40


def test_evaluate_shingling_in_text_chunks_measures_the_same(db_url, news, monkeypatch):
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        whole = index.evaluate(floor=0.3).to_dict()
        monkeypatch.setattr("simindex.pipeline.evaluate.TEXT_CHARS", 1)  # one story a chunk
        assert index.evaluate(floor=0.3).to_dict() == whole
    assert whole["exact_pairs"] >= 30


def test_chunked_verification_stores_the_same_pairs(db_url, news, tmp_path):
    other = f"sqlite:///{tmp_path / 'whole.db'}"
    with Index.create(other, threshold=0.5) as index:
        index.add(news)
        whole = index.find_pairs()
        expected = _stored(index)
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        chunked = index.find_pairs(text_bytes=1)  # one pair per chunk
        assert _stored(index) == pytest.approx(expected, abs=1e-12)
    assert chunked.candidates == whole.candidates and chunked.pairs == whole.pairs == 30


@pytest.mark.parametrize("run", ["full", "incremental"])
def test_verification_reads_signatures_ahead_on_a_second_connection(
    db_url, news, tmp_path, monkeypatch, run
):
    """Verification reads the next pairs' signatures in a worker thread, on a connection of
    its own, while the writer's reads texts and stores pairs: in blocks of two pairs, the
    pairs stored are those of an index that read them in one block. On PostgreSQL, a full
    rebuild's signatures come instead from one pass over them in id order, 7 at a time, on
    that connection in a thread of its own (made while the buckets are grouped), into a file;
    elsewhere, and for an incremental run, they are looked up."""
    other = f"sqlite:///{tmp_path / 'whole.db'}"
    with Index.create(other, threshold=0.5) as index:
        index.add(news)
        index.find_pairs()
        expected = _stored(index)
    readers, writers, scans = [], [], []
    signatures_of = simindex.store.Store.signatures_of
    signature_chunks = simindex.store.Store.signature_chunks

    def reading(self, connection, ids, num_perm):
        readers.append((connection.connection.dbapi_connection, threading.get_ident()))
        return signatures_of(self, connection, ids, num_perm)

    def scanning(self, connection, num_perm, rows, *args, **kwargs):
        for ids, sigs in signature_chunks(self, connection, num_perm, rows, *args, **kwargs):
            if rows == 7:  # verification's pass (the new documents' band keys are read too)
                scans.append(
                    (connection.connection.dbapi_connection, threading.get_ident(), ids.size)
                )
            yield ids, sigs

    def storing(insert_pairs):
        def store(self, connection, *args):
            writers.append(connection.connection.dbapi_connection)
            return insert_pairs(self, connection, *args)

        return store

    monkeypatch.setattr(simindex.store.Store, "signatures_of", reading)
    monkeypatch.setattr(simindex.store.Store, "signature_chunks", scanning)
    for backend in (simindex.store.SQLiteStore, simindex.store.PostgresStore):
        monkeypatch.setattr(backend, "insert_pairs", storing(backend.insert_pairs))
    monkeypatch.setattr("simindex.local.pairs.ESTIMATED_PAIRS", 2)
    monkeypatch.setattr("simindex.local.pairs.SIGNATURE_PASS_ROWS", 7)
    with Index.create(db_url, threshold=0.5) as index:
        if run != "full":  # the first half's pairs, then the run measured: the second's
            index.add(news[: len(news) // 2])
            index.find_pairs()
            readers.clear(), writers.clear(), scans.clear()
        index.add(news[len(news) // 2 :] if run != "full" else news)
        report = index.find_pairs()
        assert report.incremental == (run != "full")
        assert _stored(index) == pytest.approx(expected, abs=1e-12)
    assert len(expected) == 30 and report.pairs > 0 and writers
    if run == "full" and db_url.startswith("postgresql"):
        assert not readers and max(n for _, _, n in scans) == 7
        assert len(news) >= sum(n for _, _, n in scans) > len(scans) * 6  # all but the last full
        assert {c for c, _, _ in scans}.isdisjoint(writers)
        assert threading.get_ident() not in {thread for _, thread, _ in scans}
    else:
        assert not scans and len(readers) >= report.candidates // 2
        assert {c for c, _ in readers}.isdisjoint(writers)
        assert threading.get_ident() not in {thread for _, thread in readers}


def test_a_candidate_without_a_signature_stops_the_pass_over_signatures(db_url, news):
    """A full rebuild's pass over the signatures (a look-up on SQLite) names a candidate
    document whose signature it did not find, and stores no pair."""
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        with index._store.write() as connection:
            connection.exec_driver_sql(
                "DELETE FROM signatures WHERE document_id = "
                "(SELECT id FROM documents WHERE external_id = 'n003')"
            )
        with pytest.raises(DatabaseError, match="1 of .* documents have no stored signature"):
            index.find_pairs()
        with index._store.read() as connection:
            assert connection.exec_driver_sql("SELECT count(*) FROM pairs").scalar() == 0


@pytest.mark.parametrize("spooled", [False, True])
def test_collect_merging_as_it_goes_finds_the_distinct_pairs(monkeypatch, spooled):
    rng = np.random.default_rng(3)
    chunks = []
    for _ in range(20):
        sizes = rng.integers(2, 6, size=30)
        offsets = np.r_[0, np.cumsum(sizes)]
        members = np.concatenate([rng.choice(60, size, replace=False) for size in sizes])
        chunks.append((members, offsets))  # a bucket holds a document once
    once = simindex.pipeline.candidates.collect(chunks)
    assert once.spool is None
    monkeypatch.setattr(simindex.pipeline.candidates, "MERGE_PAIRS", 7)
    if spooled:  # sorted runs of at most ~11 pairs on disk, merged back 2 rows per run
        monkeypatch.setattr(simindex.pipeline.candidates, "HELD_PAIRS", 11)
        monkeypatch.setattr(simindex.pipeline.candidates, "MERGE_MEMORY", 64 * 2 * 80)
    merged = simindex.pipeline.candidates.collect(chunks)
    assert (merged.spool is not None) == spooled and (len(merged.runs) > 20) == spooled
    blocks = list(merged.blocks())
    assert (len(blocks) > 20) == spooled
    merged_a, merged_b = (
        np.concatenate([a for a, _ in blocks]),
        np.concatenate([b for _, b in blocks]),
    )
    once_a, once_b = once.arrays()
    assert np.array_equal(once_a, merged_a) and np.array_equal(once_b, merged_b)
    expected = set()
    for members, offsets in chunks:
        for i in range(offsets.size - 1):
            bucket = sorted(members[offsets[i] : offsets[i + 1]].tolist())
            expected |= {(x, y) for j, x in enumerate(bucket) for y in bucket[j + 1 :]}
    assert set(zip(merged_a.tolist(), merged_b.tolist(), strict=True)) == expected
    assert len(expected) == merged_a.size  # each pair once, across blocks too


@pytest.mark.parametrize("spooled", [False, True])
def test_candidates_by_component_come_grouped_by_component(monkeypatch, spooled):
    # Eight groups of documents whose ids interleave (group g: 2**40 + g, + 8, + 16 ...),
    # buckets drawn within a group: each group is a component, and in (doc_a, doc_b) order
    # the groups' pairs alternate.
    rng = np.random.default_rng(5)
    groups = [2**40 + g + 8 * np.arange(12) for g in range(8)]
    chunks = []
    for _ in range(6):
        buckets = [rng.choice(groups[rng.integers(8)], rng.integers(2, 5), replace=False)
                   for _ in range(25)]  # fmt: skip
        offsets = np.r_[0, np.cumsum([len(b) for b in buckets])]
        chunks.append((np.concatenate(buckets), offsets))
    if spooled:  # runs of ~11 pairs, and the grouped runs, merged back 2 rows per run;
        # their documents found a few blocks at a time
        monkeypatch.setattr(simindex.pipeline.candidates, "MERGE_PAIRS", 7)
        monkeypatch.setattr(simindex.pipeline.candidates, "HELD_PAIRS", 11)
        monkeypatch.setattr(simindex.pipeline.candidates, "DISTINCT_BATCH", 5)
        monkeypatch.setattr(simindex.pipeline.candidates, "MERGE_MEMORY", 32 * 3 * 2 * 40)
        monkeypatch.setattr(simindex.pipeline.candidates, "PASS_MEMORY", 32 * 2 * 3 * 40)
    a, b = simindex.pipeline.candidates.collect(chunks).arrays()
    candidates = simindex.pipeline.candidates.collect(chunks)
    blocks = list(candidates.by_component())
    assert (len(blocks) > 8) == spooled and candidates.spool is None
    pairs = [p for x, y in blocks for p in zip(x.tolist(), y.tolist(), strict=True)]
    documents, component = simindex.pipeline.cluster.components(a, b)
    named = dict(zip(documents.tolist(), component.tolist(), strict=True))
    components = [named[x] for x, _ in pairs]
    assert components == sorted(components)  # each component's pairs together, in order
    assert sorted(pairs) == list(zip(a.tolist(), b.tolist(), strict=True))  # each pair once
    if not spooled:  # one block: each component's pairs in (doc_a, doc_b) order
        assert pairs == sorted(pairs, key=lambda p: (named[p[0]], *p))
    assert len(set(components)) > 1 and pairs != sorted(pairs)


def test_run_spool_merges_runs_of_three_columns_in_order():
    rng = np.random.default_rng(7)
    spool, runs, rows = simindex.pipeline.runs.RunSpool(), [], []
    for _ in range(5):  # few distinct values: equal rows within and across runs
        run = rng.integers(0, 4, size=(3, 40)) + 2**40
        run = run[:, np.lexsort(run[::-1])]
        runs.append(spool.add(*run))
        rows.extend(zip(*run.tolist(), strict=True))
    merged = list(spool.merged(runs, memory=32 * 3 * 5 * 3))  # 3 rows a run at a time
    assert len(merged) > 5
    assert [r for block in merged for r in zip(*[c.tolist() for c in block])] == sorted(rows)
    by_first = [r for block in spool.merged(runs, 32 * 3 * 5 * 3, key=1) for r in zip(*block)]
    assert [r[0] for r in by_first] == sorted(r[0] for r in rows)
    for value in {r[0] for r in rows}:
        tied = [r for r in by_first if r[0] == value]
        assert sorted(tied) == sorted(r for r in rows if r[0] == value)
    with pytest.raises(ValueError, match="2 columns in a spool of 3"):
        spool.add(run[0], run[1])
    spool.close()


@pytest.mark.parametrize("spread", [4, 2**33], ids=["packed", "too-wide-to-pack"])
def test_run_spool_merges_runs_of_two_columns_in_order(spread):
    """Pairs merge as one packed value when both columns span less than 2**32, else by
    lexsort: the same rows in the same order either way."""
    rng = np.random.default_rng(11)
    spool, runs, rows = simindex.pipeline.runs.RunSpool(), [], []
    for _ in range(4):
        run = rng.integers(0, 4, size=(2, 30)) * (spread // 4) + 2**40
        run = run[:, np.lexsort(run[::-1])]
        runs.append(spool.add(*run))
        rows.extend(zip(*run.tolist(), strict=True))
    assert (simindex.pipeline.runs.packed(*np.array(rows).T) is None) == (spread > 2**32)
    merged = list(spool.merged(runs, memory=32 * 2 * 4 * 3))  # 3 rows a run at a time
    assert len(merged) > 4
    assert [r for block in merged for r in zip(*[c.tolist() for c in block])] == sorted(rows)
    spool.close()


def test_candidates_spooled_to_disk_give_the_same_pairs(db_url, news, tmp_path, monkeypatch):
    other = f"sqlite:///{tmp_path / 'whole.db'}"
    with Index.create(other, threshold=0.5) as index:
        index.add(news)
        whole = index.find_pairs()
        expected = _stored(index)
    monkeypatch.setattr(simindex.pipeline.candidates, "HELD_PAIRS", 5)
    monkeypatch.setattr(simindex.pipeline.candidates, "DISTINCT_BATCH", 3)
    monkeypatch.setattr(simindex.pipeline.candidates, "MERGE_MEMORY", 64 * 3)
    monkeypatch.setattr(simindex.pipeline.candidates, "PASS_MEMORY", 64 * 2)
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        spooled = index.find_pairs()
        assert _stored(index) == pytest.approx(expected, abs=1e-12)
    assert spooled.candidates == whole.candidates and spooled.pairs == whole.pairs == 30


def test_clusters_in_text_chunks_and_the_duplicates_dedup_drops(db_url, news, monkeypatch):
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        index.find_pairs()
        index.cluster()
        whole = list(index.clusters())
        monkeypatch.setattr("simindex.local.clusters.VERIFY_TEXT_BYTES", 1)  # one member per chunk
        assert list(index.clusters()) == whole
        members = [m.external_id for m in whole if not m.is_representative]
        representatives = [m.external_id for m in whole if m.is_representative]
        asked = [*members, *representatives, "n001-not-indexed"]
        assert index.clustered_duplicates(asked) == set(members)
    assert members and representatives


def _rows(url: str, query: str) -> list[tuple]:
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        rows = connection.exec_driver_sql(query).all()
    engine.dispose()
    return [tuple(row) for row in rows]


BAND_KEYS = "SELECT banding_id, band, key, document_id FROM band_keys ORDER BY 1, 2, 3, 4"
DOCUMENTS = "SELECT id, external_id, content_hash, shingle_count, text FROM documents ORDER BY 1"


def test_documents_and_band_keys_in_tiny_parts_go_in_sorted_and_whole(
    db_url, news, tmp_path, monkeypatch
):
    other = f"sqlite:///{tmp_path / 'whole.db'}"
    with Index.create(other, threshold=0.5) as index:
        index.add(news, batch_size=7)
        index.find_pairs()
        expected_pairs = _stored(index)
        index.reband(10, 3)
    expected, documents = _rows(other, BAND_KEYS), _rows(other, DOCUMENTS)
    written: list[np.ndarray] = []
    write_rows = simindex.store.BandKeyWriter.write_rows

    def spy(writer, band, key, document_id):
        written.append(np.column_stack((band, key, document_id)))
        write_rows(writer, band, key, document_id)

    monkeypatch.setattr(simindex.store.BandKeyWriter, "write_rows", spy)
    # Every batch is a run of its own, and the merge reads one row of each run at a time.
    monkeypatch.setattr(simindex.store.bandkeys, "BULK_SORT_MEMORY", 1)
    monkeypatch.setattr(simindex.store.bandkeys, "WRITE_ROWS", 5)
    monkeypatch.setattr(simindex.store.postgres, "COPY_TEXT_CHARS", 1)  # a COPY part per document
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news, batch_size=7)
        index.find_pairs()
        assert _stored(index) == pytest.approx(expected_pairs, abs=1e-12)
        ingested = np.concatenate(written)
        written.clear()
        index.reband(10, 3)
    rebanded = np.concatenate(written)
    assert _rows(db_url, BAND_KEYS) == expected and _rows(db_url, DOCUMENTS) == documents
    assert len(ingested) + len(rebanded) == len(expected) and len(rebanded) == 100 * 10
    for rows in (ingested, rebanded):  # each banding went in in primary-key order
        assert np.array_equal(np.lexsort(rows.T[::-1]), np.arange(len(rows)))


def test_pairs_the_estimate_rules_out_are_not_read_and_nothing_is_lost(db_url, news, monkeypatch):
    """With a banding that makes many low-similarity candidates, the signatures' estimate
    rules most out before their texts are read (simindex.pipeline.verify.estimate_floor), and the
    stored pairs are those of verifying every candidate exactly."""
    read = []
    chunk_documents = simindex.local.pairs.chunk_documents

    def counting(ctx, connection, a, b, signed):
        read.append(a.size)
        return chunk_documents(ctx, connection, a, b, signed)

    monkeypatch.setattr(simindex.local.pairs, "chunk_documents", counting)
    found = []
    with Index.create(db_url, threshold=0.8) as index:
        index.add(news)
        index.reband(60, 2)
        for margin in (simindex.pipeline.verify.ESTIMATE_MARGIN, 1e9):  # 1e9: no floor, all read
            monkeypatch.setattr(simindex.pipeline.verify, "ESTIMATE_MARGIN", margin)
            read.clear()
            report = index.find_pairs(full=True)
            stored = {(p.id_a, p.id_b): p.similarity for p in index.pairs()}
            found.append((stored, report.candidates, report.pairs, sum(read)))
    (pruned, candidates, pairs, read_pruned), (whole, all_candidates, all_pairs, read_all) = found
    assert pruned == whole and pairs == all_pairs > 0 and candidates == all_candidates
    assert read_all == candidates and read_pruned < candidates / 4, (read_pruned, candidates)


def test_asking_which_ids_dedup_drops_reads_no_cluster_row_it_was_not_asked_about(tmp_path, news):
    """SQLite's plan for clustered_duplicates starts from the asked ids and finds each
    through an index: scanning the banding's clusters once per batch of records made `dedup`
    quadratic in the corpus."""
    url = f"sqlite:///{tmp_path / 'i.db'}"
    with Index.create(url, threshold=0.5) as index:
        index.add(news)
        index.find_pairs()
        index.cluster()
        statements = []

        def record(conn, cursor, statement, parameters, context, executemany):
            if "clusters c" in statement:
                statements.append((statement, parameters))

        sa.event.listen(index._store.engine, "before_cursor_execute", record)
        assert index.clustered_duplicates(["n001", "n002"]) <= {"n001", "n002"}
        sa.event.remove(index._store.engine, "before_cursor_execute", record)
        with index._store.engine.connect() as connection:
            statement, parameters = statements[-1]
            plan = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            steps = [row[-1] for row in plan]
    assert steps[0].startswith("SCAN json_each"), steps  # the asked ids (`wanted`, flattened)
    assert all(step.startswith("SEARCH") for step in steps[1:]), steps


def test_a_large_write_to_sqlite_leaves_no_wal_and_no_pooled_connection(
    tmp_path, news, monkeypatch
):
    """After a write (here add()) leaves a SQLite WAL of WAL_RELEASE_BYTES or more, the
    pool's connections (each mapping the WAL's index) are closed, and the last one copies the
    WAL into the database and removes it; a smaller one is left to SQLite's own checkpoints."""
    path = tmp_path / "index.db"
    wal = tmp_path / "index.db-wal"
    with Index.create(path) as index:
        index.add(news[:5])  # into an empty index: without the WAL (SQLiteStore.load_mode)
        index.add(news[5:10])
        assert wal.stat().st_size > 0 and index._store.engine.pool.checkedin() > 0
        monkeypatch.setattr(simindex.store.sqlite, "WAL_RELEASE_BYTES", 1)
        index.add(news[10:])
        assert not wal.exists()  # the last connection closed: SQLite removed it
        assert index._store.engine.pool.checkedin() == 0
        index.find_pairs(0.5)
        assert _stored(index) == _stored_in_one(news, tmp_path / "whole.db")


def _stored_in_one(news, path) -> dict[tuple[str, str], float]:
    with Index.create(path) as index:
        index.add(news)
        index.find_pairs(0.5)
        return _stored(index)
