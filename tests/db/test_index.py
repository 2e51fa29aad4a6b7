"""The persistent index on every backend: create, add, query, pairs, re-band, versions."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import sqlalchemy as sa

from simindex import (
    Index,
    LowRecallWarning,
    SignatureSpec,
    candidate_probability,
    normalize,
    shingle_sets,
)
from simindex.errors import (
    DatabaseError,
    DuplicateIdError,
    EmptyDocumentError,
    NoIndexError,
    ParameterError,
    SchemaVersionError,
    SimindexError,
)
from simindex.pipeline.exact import similar_pairs
from simindex.pipeline.verify import exact_jaccard
from simindex.store import database_url


def _pairs(index: Index, threshold: float) -> dict[tuple[str, str], float]:
    return {(p.id_a, p.id_b): p.similarity for p in index.pairs(threshold)}


def _truth(docs, threshold: float) -> dict[tuple[str, str], float]:
    """Exact all-pairs Jaccard >= threshold of the same shingles (no LSH)."""
    sets = shingle_sets([normalize(d[1]) for d in docs], SignatureSpec())
    a, b, j = similar_pairs(sets, threshold)
    return {tuple(sorted((docs[x][0], docs[y][0]))): s for x, y, s in zip(a, b, j, strict=True)}


def test_create_then_open_keeps_the_settings(db_url):
    spec = SignatureSpec(k=4, num_perm=64, seed=9)
    with Index.create(db_url, spec, threshold=0.7, keep_text=False) as index:
        assert index.bandings()[0]["is_active"]
    with Index.open(db_url) as index:
        assert index.spec == spec
        assert index.threshold == 0.7 and not index.keep_text
    with pytest.raises(DatabaseError, match="already holds a simindex index"):
        Index.create(db_url)


def test_sample_corpus_pairs_are_the_exact_pairs(db_url, news):
    with Index.create(db_url, threshold=0.5) as index:  # banding tuned for 0.5
        result = index.add(news)
        assert result.added == 100
        report = index.find_pairs()
        found = _pairs(index, 0.5)
        index.reband(20, 5)  # the banding tuned for 0.8
        index.find_pairs(0.8)
        found_at_08 = _pairs(index, 0.8)
    truth = _truth(news, 0.5)
    assert report.exact and report.pairs == len(found) == 30
    assert found.keys() == truth.keys()
    assert found_at_08.keys() == {p for p, j in truth.items() if j >= 0.8}
    for pair, similarity in found.items():
        assert similarity == pytest.approx(truth[pair], abs=1e-12)
    assert ("n003", "n019") in found  # a planted exact duplicate


def test_the_best_pairs_up_to_a_limit_are_the_first_of_all(db_url, news):
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        index.find_pairs()
        every = list(index.pairs())
        similarities = [p.similarity for p in every]
        assert len(every) == 30 and len(set(similarities)) < 30  # ties, at 1.0 at least
        weakest_first = sorted(every, key=lambda p: (p.similarity, p.id_a, p.id_b))
        for limit in range(len(every) + 2):  # a cut inside a tie too, at either end
            assert list(index.pairs(limit=limit)) == every[:limit]
            assert index.weakest_pairs(limit) == weakest_first[:limit]
        assert list(index.pairs(0.9, limit=3)) == [p for p in every if p.similarity >= 0.9][:3]
        with pytest.raises(ParameterError, match="limit must not be negative"):
            list(index.pairs(limit=-1))


def test_query_text_and_query_id(db_url, news):
    with Index.create(db_url) as index:
        index.add(news)
        text = dict((d[0], d[1]) for d in news)["n001"]
        matches = index.query(text, threshold=0.5)
        assert [m.external_id for m in matches][:2] == ["n001", "n005"]
        assert matches[0].similarity == 1.0
        by_id = index.query_id("n001", threshold=0.5)
        assert [m.external_id for m in by_id] == ["n005"]
        assert by_id[0].exact_jaccard == pytest.approx(_truth(news, 0.5)[("n001", "n005")])
        assert (
            index.query("nothing like anything in the corpus at all, surely", threshold=0.5) == []
        )
        with pytest.raises(SimindexError, match="no document with id 'nope'"):
            index.query_id("nope")
        with pytest.raises(EmptyDocumentError):
            index.query("  \n ")


def _threads_seen(monkeypatch, *kernels: tuple[object, str]) -> list[tuple[str, int]]:
    """(kernel, numba's thread count of the thread running it) for each call of the given
    module-level kernels from now on."""
    import numba

    seen: list[tuple[str, int]] = []
    for module, name in kernels:
        kernel = getattr(module, name)

        def run(*args, _kernel=kernel, _name=name):
            seen.append((_name, numba.get_num_threads()))
            return _kernel(*args)

        monkeypatch.setattr(module, name, run)
    return seen


@pytest.fixture
def numba_threads() -> int:
    """numba's default thread count, when there are threads to tell apart."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here: nothing to tell apart")
    return numba.config.NUMBA_NUM_THREADS


def test_a_query_runs_its_kernels_on_the_calling_thread_alone(
    db_url, news, monkeypatch, numba_threads
):
    """Waking numba's threads for each kernel of a one-document query cost more than the
    work (kernels.threads_for), and so for a few candidates; the caller's thread count is
    back after each query, a failed one too."""
    import numba

    from simindex.pipeline import hashing, minhash, shingle, verify

    with Index.create(db_url) as index:
        index.add(news)
        seen = _threads_seen(
            monkeypatch,
            (shingle, "_shingle_kernel"),
            (minhash, "_signatures_kernel"),
            (hashing, "band_key_kernel"),
            (verify, "_jaccard_kernel"),
        )
        assert numba.get_num_threads() == numba_threads
        text = dict((d[0], d[1]) for d in news)["n001"]
        with warnings.catch_warnings():  # 0.5: below the banding's design threshold
            warnings.simplefilter("ignore", LowRecallWarning)
            assert index.query(text) and index.query_id("n001", threshold=0.5)
        assert numba.get_num_threads() == numba_threads
        with pytest.raises(EmptyDocumentError):
            index.query("  \n ")
        assert numba.get_num_threads() == numba_threads
    called = {name for name, _ in seen}
    assert called == {"_shingle_kernel", "_signatures_kernel", "band_key_kernel", "_jaccard_kernel"}
    assert {threads for _, threads in seen} == {1}


def test_a_small_batch_is_signed_and_compared_on_one_thread(
    db_url, news, monkeypatch, numba_threads
):
    """A batch that fills no more than one chunk of the kernels' parallel loops (the
    query-then-insert of a few records) is signed, and its few candidates compared, with
    one thread; a larger batch is signed with all; the count is back after a failure."""
    import numba

    from simindex.pipeline import hashing, verify
    from simindex.pipeline.kernels import SMALL_WORK, threads_for

    docs = [(f"{d[0]}-{i}", f"{d[1]} {i}") for i in range(2) for d in news]
    larger = docs[12 : 13 + SMALL_WORK]
    assert len(larger) == SMALL_WORK + 1
    with Index.create(db_url) as index:
        index.add(docs[:10])
        seen = _threads_seen(monkeypatch, (hashing, "band_key_kernel"), (verify, "_jaccard_kernel"))
        index.add(docs[10:12], find_duplicates=0.8)
        small = list(seen)
        seen.clear()
        index.add(larger, find_duplicates=0.8)
    assert small == [("band_key_kernel", 1), ("_jaccard_kernel", 1)]
    assert seen[0] == ("band_key_kernel", numba_threads)
    for items, threads in ((SMALL_WORK, 1), (SMALL_WORK + 1, numba_threads)):
        with threads_for(items):
            assert numba.get_num_threads() == threads
    with pytest.raises(RuntimeError, match="inside"), threads_for(1):
        raise RuntimeError("inside")
    assert numba.get_num_threads() == numba_threads


def _variants(text: str, count: int, seed: int) -> list[str]:
    """``count`` copies of ``text``, each with a growing share of its words replaced: their
    similarities to it spread from near 1 down to well below 0.5."""
    rng = np.random.default_rng(seed)
    words = text.split()
    out = []
    for i in range(count):
        changed = list(words)
        for at in rng.choice(len(words), size=len(words) * i // (2 * count), replace=False):
            changed[at] = f"w{rng.integers(10**6)}"
        out.append(" ".join(changed))
    return out


def _spied(index: Index, monkeypatch) -> dict[str, list]:
    """What a query's statements return: each lookup's rows as read (the query fills some in
    later) and the ids each second statement reads."""
    calls: dict[str, list] = {"buckets": [], "read": []}
    in_buckets, documents_of = index._store.documents_in_buckets, index._store.documents_of

    def spy_buckets(*args):
        found = in_buckets(*args)
        calls["buckets"].append(dict(found))
        return found

    def spy_documents(connection, ids):
        calls["read"].append(ids.tolist())
        return documents_of(connection, ids)

    monkeypatch.setattr(index._store, "documents_in_buckets", spy_buckets)
    monkeypatch.setattr(index._store, "documents_of", spy_documents)
    return calls


@pytest.mark.parametrize("keep_text", [True, False], ids=["text", "no-text"])
def test_a_query_with_many_candidates_reads_the_texts_of_the_plausible_ones_only(
    db_url, news, monkeypatch, keep_text
):
    """Past QUERY_TEXT_CANDIDATES candidates, the statement reads signatures only and a
    second one the documents of the candidates whose estimate passes: the same matches, with
    the same similarities, as when the statement reads every candidate's document, and with
    kept text exactly the copies of exact Jaccard >= 0.8. At threshold 0 every candidate
    matches: the lookup reads them all itself."""
    import simindex.local.query

    text = dict((d[0], d[1]) for d in news)["n001"]
    docs = [(f"v{i:02d}", v) for i, v in enumerate(_variants(text, 40, seed=3))]
    with Index.create(db_url, keep_text=keep_text) as index:
        index.add(docs)
        calls = _spied(index, monkeypatch)
        split = index.query(text)
        with pytest.warns(LowRecallWarning):
            everything = index.query(text, threshold=0.0)
        monkeypatch.setattr(simindex.local.query, "QUERY_TEXT_CANDIDATES", 10**6)
        whole = index.query(text)
    first, at_zero, second = calls["buckets"]
    assert len(first) == len(second) > 20  # candidates, past QUERY_TEXT_CANDIDATES
    assert all(row[0] is None and row[1] is None for row in first.values())
    assert all(row[0] is not None for row in [*at_zero.values(), *second.values()])
    assert len(everything) == len(first)
    (read,) = calls["read"]  # one more statement, in the first query only
    assert len(read) < len(first)
    # Plausible: with kept text more than match (the exact similarity decides), without it
    # those the estimate passes at the threshold, which match.
    assert len(read) > len(whole) if keep_text else len(read) == len(whole)
    assert split == whole and len(whole) >= 5
    if not keep_text:
        return
    sets = shingle_sets([normalize(t) for t in [text, *(v for _, v in docs)]], SignatureSpec())
    jaccard = exact_jaccard(sets, np.zeros(40, np.int64), np.arange(1, 41))
    exact = dict(zip((d[0] for d in docs), jaccard.tolist(), strict=True))
    assert {m.external_id for m in whole} == {name for name, j in exact.items() if j >= 0.8}
    for match in whole:
        assert match.exact_jaccard == pytest.approx(exact[match.external_id], abs=1e-12)


@pytest.mark.parametrize("change", ["delete", "replace"])
def test_a_candidate_changed_between_a_querys_two_statements(db_url, news, change):
    """Another writer deletes (or replaces, which gives it a new id) the best match after the
    bucket lookup and before its document is read: the query looks up once more, so the
    answer leaves a deleted document out and finds a replaced one again."""
    text = dict((d[0], d[1]) for d in news)["n001"]
    docs = [(f"v{i:02d}", v) for i, v in enumerate(_variants(text, 40, seed=3))]
    with Index.create(db_url) as index, Index.open(db_url) as writer:
        index.add(docs)
        before = [m.external_id for m in index.query(text)]
        documents_of, reads = index._store.documents_of, []

        def change_first(connection, ids):
            if not reads:
                if change == "delete":
                    writer.delete([before[0]])
                else:
                    writer.add([(before[0], text)], on_duplicate="replace")
            reads.append(ids.tolist())
            return documents_of(connection, ids)

        index._store.documents_of = change_first
        after = [m.external_id for m in index.query(text)]
    assert len(before) >= 5 and len(reads) == 2  # a second lookup, and its read
    assert after == (before[1:] if change == "delete" else before)


def test_a_query_follows_a_reband_made_by_another_index_object(db_url, news):
    """A point query reuses the banding it last used, checked in its lookup: after another
    writer re-bands, the next query reads the new banding, whether the old one was dropped
    or kept."""
    text = dict((d[0], d[1]) for d in news)["n001"]
    with Index.create(db_url) as writer, Index.open(db_url) as reader:
        writer.add(news)
        with warnings.catch_warnings():
            warnings.simplefilter("error", LowRecallWarning)
            before = [m.external_id for m in reader.query(text)]
            writer.reband(40, 3, drop_old=True)
            assert [m.external_id for m in reader.query(text)] == before
        writer.reband(4, 32)  # the old banding keeps its band keys: the lookup must refuse it
        with pytest.warns(LowRecallWarning, match=r"\(4 bands x 32 rows\)"):
            reader.query(text)
    assert before[0] == "n001"


def test_query_then_insert_finds_the_batch_pairs(db_url, news):
    """Streaming dedup over the corpus, in small batches, finds exactly the batch pairs."""
    with Index.create(db_url, threshold=0.5) as index:
        result = index.add(news, batch_size=7, find_duplicates=0.5)
        index.find_pairs(0.5)
        batch_pairs = set(_pairs(index, 0.5))
    order = {d[0]: i for i, d in enumerate(news)}
    streamed = set()
    for new_id, matches in result.duplicates.items():
        for m in matches:
            assert order[m.external_id] < order[new_id]  # only earlier documents
            streamed.add(tuple(sorted((new_id, m.external_id))))
    assert streamed == batch_pairs and len(streamed) > 20


def test_duplicate_ids_fail_or_skip_and_leave_nothing_half_written(db_url, news):
    with Index.create(db_url) as index:
        index.add(news[:10])
        with pytest.raises(DuplicateIdError, match="'n001' is already indexed"):
            index.add(news[10:20] + news[:1])
        assert index.stats().documents == 10  # the failed call added nothing
        with pytest.raises(DuplicateIdError, match="appears twice"):
            index.add([("x", "some text here"), ("x", "other text")])
        result = index.add(news[5:20] + [news[12]], on_duplicate="skip")
        assert result.added == 10 and len(result.skipped_existing) == 6
        assert index.stats().documents == 20


def test_an_id_repeated_in_a_later_batch_of_a_first_load_fails_and_adds_nothing(db_url, news):
    """A first load (an empty index) leaves the repeat across batches to the database's
    unique index on PostgreSQL: the error still names the id, and nothing is left. (SQLite
    looks the ids up, and finds the earlier batch's copy indexed.)"""
    with Index.create(db_url) as index:
        with pytest.raises(DuplicateIdError, match="'n003' (appears twice|is already indexed)"):
            index.add(news[:6] + [("n003", "another text altogether")], batch_size=3)
        assert index.stats().documents == 0
        assert index.add(news[:6], batch_size=3).added == 6


@pytest.mark.parametrize("deferred", [False, True])
def test_a_first_load_leaves_the_content_hash_index_in_place(db_url, news, deferred):
    """A bulk load into an empty index builds the content-hash index at its end (on SQLite,
    and on PostgreSQL when the load's transaction creates the index: deferred, as the CLI
    does; Store.defer_content_hash_index); one that fails rolls the drop back with the rest."""

    def content_hash_indexed() -> bool | None:
        engine = sa.create_engine(db_url)
        try:
            inspector = sa.inspect(engine)
            if not inspector.has_table("documents"):
                return None  # a deferred index whose creating load failed: no index at all
            names = [i["name"] for i in inspector.get_indexes("documents")]
        finally:
            engine.dispose()
        return "ix_documents_content_hash" in names

    with Index.create(db_url, deferred=deferred) as index:
        with pytest.raises(DuplicateIdError):
            index.add(news[:6] + [("n003", "another text altogether")], batch_size=3)
        assert content_hash_indexed() is (None if deferred else True)
    with Index.create(db_url, deferred=True) if deferred else Index.open(db_url) as index:
        index.add(news[:6] + [("copy", news[0][1])], batch_size=3)
        assert content_hash_indexed()
        assert index.stats().exact_duplicate_groups == 1


def test_empty_documents_are_skipped_and_listed_or_fail(db_url):
    with Index.create(db_url) as index:
        with pytest.raises(EmptyDocumentError, match="'blank' has no text"):
            index.add([("ok", "a fine text"), ("blank", " \t\n")], on_empty="fail")
        result = index.add([("ok", "a fine text"), ("blank", " \t\n")])
        assert result.added == 1 and result.skipped_empty == ["blank"] and result.total == 1


def test_pairs_are_refused_when_stale_or_found_at_a_higher_threshold(db_url, news):
    with Index.create(db_url) as index:
        index.add(news[:50])
        with pytest.raises(SimindexError, match="have not been found with the active banding"):
            list(index.pairs())
        index.find_pairs(0.8)
        with pytest.raises(SimindexError, match="found at threshold 0.8"):
            list(index.pairs(0.5))
        assert all(p.similarity >= 0.9 for p in index.pairs(0.9))
        index.add(news[50:])
        with pytest.raises(SimindexError, match="documents were added since pairs were found"):
            list(index.pairs(0.8))


def _synthetic_pairs(levels, per_level, size=100, seed=5):
    """Documents in pairs of exactly known Jaccard (word shingles, k = 1, distinct words)."""
    rng = np.random.default_rng(seed)
    docs, truth, word = [], {}, iter(range(10**9))
    for level in levels:
        common = round(2 * size * level / (1 + level))
        for i in range(per_level):
            shared = [f"w{next(word)}" for _ in range(common)]
            a = shared + [f"w{next(word)}" for _ in range(size - common)]
            b = shared + [f"w{next(word)}" for _ in range(size - common)]
            rng.shuffle(a)
            rng.shuffle(b)
            ids = (f"{level}-{i}-a", f"{level}-{i}-b")
            docs += [(ids[0], " ".join(a)), (ids[1], " ".join(b))]
            truth[ids] = common / (2 * size - common)
    return docs, truth


def test_reband_changes_candidates_as_the_s_curves_predict_without_text(db_url):
    levels = [0.2, 0.35, 0.5, 0.65, 0.8]
    docs, truth = _synthetic_pairs(levels, per_level=120)
    spec = SignatureSpec(shingle="word", k=1)
    with Index.create(db_url, spec, bands=42, rows=3, keep_text=False) as index:
        index.add(docs)
        index.find_pairs(0.0)  # every candidate, verified by the estimate only
        first = _pairs(index, 0.0)
        index.reband(20, 5, drop_old=True)
        assert [(b["bands"], b["rows"]) for b in index.bandings()] == [(20, 5)]
        index.find_pairs(0.0)
        second = _pairs(index, 0.0)
    for found, (bands, rows) in ((first, (42, 3)), (second, (20, 5))):
        for level in levels:
            pairs_at = [p for p, j in truth.items() if p[0].startswith(f"{level}-")]
            rate = np.mean([p in found for p in pairs_at])
            p = candidate_probability(truth[pairs_at[0]], bands, rows)
            assert abs(rate - p) <= 4 * np.sqrt(p * (1 - p) / len(pairs_at)) + 0.01, (
                bands,
                rows,
                level,
            )


def test_a_newer_or_older_schema_is_refused_with_the_fix(db_url):
    Index.create(db_url).close()
    engine = sa.create_engine(database_url(db_url))
    with engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(SchemaVersionError, match="made by a newer simindex"):
        Index.open(db_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("DELETE FROM alembic_version")
    with pytest.raises(SchemaVersionError, match="run `simindex db upgrade`"):
        Index.open(db_url)
    engine.dispose()


def test_an_empty_database_is_not_an_index(db_url):
    Index.open_or_create(db_url)[0].close()  # creates nothing (no SQLite file either)
    missing = "there is no database file" if db_url.startswith("sqlite") else "holds no simindex"
    with pytest.raises(NoIndexError, match=f"{missing}.*Index.create"):
        Index.open(db_url)


def test_documents_and_metadata_are_stored_for_sql_users(db_url, news):
    with Index.create(db_url) as index:
        index.add(news[:3])
        index.find_pairs()
    engine = sa.create_engine(database_url(db_url))
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT external_id, text, metadata FROM documents ORDER BY id")
        ).all()
        keys = connection.execute(sa.text("SELECT count(*) FROM band_keys")).scalar()
        list(connection.execute(sa.text("SELECT * FROM similar_pairs")))
    engine.dispose()
    assert [r[0] for r in rows] == ["n001", "n002", "n003"]
    assert rows[0][1] == news[0][1]
    metadata = rows[0][2] if isinstance(rows[0][2], dict) else __import__("json").loads(rows[0][2])
    assert metadata["source"] == news[0][2]["source"]
    assert keys == 3 * 20
