"""simindex.datasketch.MinHashLSH against datasketch's own MinHashLSH, on every backend: the
same answers to random sequences of writes and reads, the behaviours datasketch documents,
persistence across processes, and the rest of simindex on such an index."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

datasketch = pytest.importorskip("datasketch")

from simindex import Index  # noqa: E402
from simindex.datasketch import MinHashLSH  # noqa: E402
from simindex.errors import SpecMismatchError  # noqa: E402
from simindex.spec import SignatureSpec, datasketch_spec  # noqa: E402

NUM_PERM = 32
PARAMS = (8, 4)
# Keys of several types; none equal to another (datasketch's dict would merge 1 and 1.0).
KEYS = [0, 1, 2, "a", "b", "0", ("t", 1), b"x", frozenset({3})]
READER = Path(__file__).with_name("datasketch_reader.py")


def minhash(tokens, num_perm: int = NUM_PERM, **options) -> datasketch.MinHash:
    m = datasketch.MinHash(num_perm=num_perm, **options)
    m.update_batch([str(t).encode() for t in tokens])
    return m


def fresh(db_url: str) -> dict[str, str | None]:
    """url and schema of an index no other example used, in the test's database."""
    name = f"ds_{uuid.uuid4().hex[:10]}"
    if db_url.startswith("sqlite"):
        return {"url": db_url.replace("index.db", f"{name}.db"), "schema": None}
    return {"url": db_url, "schema": name}


def outcome(call, *args):
    """What a call answers (a list as a set), or the type of what it raises."""
    try:
        result = call(*args)
    except ValueError:
        return ValueError
    return set(result) if isinstance(result, list) else result


def apply(lsh, step, pool):
    kind = step[0]
    if kind == "insert":
        return outcome(lsh.insert, step[1], pool[step[2]])
    if kind == "remove":
        return outcome(lsh.remove, step[1])
    if kind == "query":
        return outcome(lsh.query, pool[step[1]])
    if kind == "contains":
        return step[1] in lsh
    if kind == "counts":
        return lsh.is_empty(), [sorted(c.values()) for c in lsh.get_counts()]
    if kind == "insert_session":
        with lsh.insertion_session(buffer_size=step[2]) as session:
            return [outcome(session.insert, key, pool[m]) for key, m in step[1]]
    with lsh.deletion_session(buffer_size=step[2]) as session:
        return [outcome(session.remove, key) for key in step[1]]


key = st.sampled_from(KEYS)
sets = st.sets(st.integers(0, 12), min_size=1, max_size=8)


@st.composite
def scenarios(draw):
    pool = draw(st.lists(sets, min_size=2, max_size=6))
    m = st.integers(0, len(pool) - 1)
    buffer = st.integers(1, 4)
    step = st.one_of(
        st.tuples(st.just("insert"), key, m),
        st.tuples(st.just("remove"), key),
        st.tuples(st.just("query"), m),
        st.tuples(st.just("contains"), key),
        st.tuples(st.just("counts")),
        st.tuples(st.just("insert_session"), st.lists(st.tuples(key, m), max_size=5), buffer),
        st.tuples(st.just("delete_session"), st.lists(key, max_size=4), buffer),
    )
    return pool, draw(st.lists(step, max_size=14))


def sessions_as_datasketch_sees_them(step, reference):
    """A session's step with the keys that datasketch refuses at once but simindex only when
    the buffer is flushed (an insert of an indexed key, a removal of a key not indexed, a
    key repeated after the buffer was flushed) left out, each key once: those cases are
    tested on their own below."""
    if step[0] == "insert_session":
        fresh = {k: m for k, m in reversed(step[1]) if k not in reference}
        return (step[0], list(reversed(fresh.items())), step[2])
    if step[0] == "delete_session":
        return (step[0], list(dict.fromkeys(k for k in step[1] if k in reference)), step[2])
    return step


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_answers_as_datasketch_does(db_url, scenario):
    sets_, steps = scenario
    pool = [minhash(s) for s in sets_]
    reference = datasketch.MinHashLSH(num_perm=NUM_PERM, params=PARAMS)
    with MinHashLSH(num_perm=NUM_PERM, params=PARAMS, **fresh(db_url)) as lsh:
        for step in steps:
            step = sessions_as_datasketch_sees_them(step, reference)
            assert apply(lsh, step, pool) == apply(reference, step, pool), step
        for m in pool:
            assert set(lsh.query(m)) == set(reference.query(m))


def test_threshold_picks_datasketchs_bands_and_rows(db_url):
    for threshold in (0.5, 0.8, 0.9):
        ours = MinHashLSH(threshold=threshold, num_perm=64, **fresh(db_url))
        theirs = datasketch.MinHashLSH(threshold=threshold, num_perm=64)
        assert (ours.b, ours.r) == (theirs.b, theirs.r)
        ours.close()


def test_documented_behaviours(db_url):
    where = fresh(db_url)
    lsh = MinHashLSH(num_perm=NUM_PERM, params=PARAMS, **where)
    m = minhash(range(5))
    # An empty index (before any insert no index exists yet).
    assert lsh.is_empty() and lsh.query(m) == [] and "k" not in lsh
    assert lsh.get_counts() == [{}] * PARAMS[0]
    with pytest.raises(ValueError, match="does not exist"):
        lsh.remove("k")
    # A wrong num_perm, for an insert and a query.
    with pytest.raises(ValueError, match="Expecting minhash with length 32, got 64"):
        lsh.insert("k", minhash(range(5), num_perm=64))
    with pytest.raises(ValueError, match="length"):
        lsh.query(np.zeros(16, dtype=np.uint32))
    # A key inserted twice; in a session, found within the buffer at once.
    lsh.insert("k", m)
    with pytest.raises(ValueError, match="already exists"):
        lsh.insert("k", m)
    with pytest.raises(ValueError, match="already exists"), lsh.insertion_session() as s:
        s.insert("j", m)
        s.insert("j", m)
    # ... and against the index when the buffer is flushed: nothing of that flush written.
    with pytest.raises(ValueError, match="already exists"), lsh.insertion_session() as s:
        s.insert("new", m)
        s.insert("k", m)
    assert "new" not in lsh and "j" in lsh
    with pytest.raises(ValueError, match="does not exist"), lsh.deletion_session() as s:
        s.remove("j")
        s.remove("missing")
    assert "j" in lsh
    # check_duplication=False replaces the key's MinHash.
    other = minhash(range(100, 110))
    lsh.insert("k", other, check_duplication=False)
    assert "k" in lsh.query(other) and "k" not in lsh.query(m)
    assert not lsh.is_empty()
    lsh.close()


def test_hash_values_of_another_family_or_seed_are_refused(db_url):
    where = fresh(db_url)
    with MinHashLSH(num_perm=NUM_PERM, params=PARAMS, **where) as lsh:
        lsh.insert("a", minhash(range(3)))
        with pytest.raises(ValueError, match="seed 1 and scheme 'affine32'"):
            lsh.insert("b", minhash(range(3), seed=7))
        with pytest.raises(ValueError, match="scheme"):
            lsh.query(minhash(range(3), scheme="legacy"))
        lsh.insert("c", minhash(range(3)).hashvalues)  # a bare array is taken as is
    legacy = fresh(db_url)
    with MinHashLSH(num_perm=NUM_PERM, params=PARAMS, **legacy) as lsh:
        m = minhash(range(3), scheme="legacy", seed=3)
        lsh.insert("a", datasketch.LeanMinHash(m))
        assert lsh.query(m) == ["a"]
    with Index.open(legacy["url"], schema=legacy["schema"]) as index:
        assert index.spec == datasketch_spec(NUM_PERM, seed=3, family="legacy")
    with MinHashLSH(num_perm=NUM_PERM, params=PARAMS, **fresh(db_url)) as lsh:
        with pytest.raises(ValueError, match="affine64"):
            lsh.insert("a", minhash(range(3), scheme="affine64"))


def test_reopening_with_other_parameters_is_refused(db_url):
    where = fresh(db_url)
    with MinHashLSH(num_perm=NUM_PERM, params=PARAMS, **where) as lsh:
        lsh.insert("a", minhash(range(3)))
    with pytest.raises(ValueError, match="num_perm 32, not 64"):
        MinHashLSH(num_perm=64, params=PARAMS, **where)
    with pytest.raises(ValueError, match=r"8 bands of 4 rows, not 4 x 4: pass params=\(8, 4\)"):
        MinHashLSH(num_perm=NUM_PERM, params=(4, 4), **where)
    text = fresh(db_url)
    Index.create(text["url"], schema=text["schema"]).close()
    with pytest.raises(ValueError, match="simindex text signatures"):
        MinHashLSH(num_perm=128, **text)


def test_another_process_gets_the_same_answers(db_url):
    where = fresh(db_url)
    pool = [minhash(range(i, i + 8)) for i in range(0, 40, 2)]
    with MinHashLSH(num_perm=NUM_PERM, params=PARAMS, **where) as lsh:
        with lsh.insertion_session(buffer_size=7) as session:
            for i, m in enumerate(pool):
                session.insert(("doc", i), m)
        lsh.remove(("doc", 3))
        expected = [sorted(map(repr, lsh.query(m))) for m in pool]
    values = np.stack([m.hashvalues for m in pool])
    path = Path(str(uuid.uuid4()) + ".npy")
    np.save(path, values)
    try:
        command = [sys.executable, str(READER), where["url"], where["schema"] or "", str(path)]
        answer = subprocess.run(command, capture_output=True, text=True, check=True)
    finally:
        path.unlink()
    assert answer.stdout.splitlines() == [" ".join(keys) for keys in expected]


def test_schemes_do_not_mix(db_url):
    where = fresh(db_url)
    spec = datasketch_spec(NUM_PERM)
    with Index.create(where["url"], spec, bands=8, rows=4, schema=where["schema"]) as index:
        assert not index.keep_text  # it has no text to keep
        with pytest.raises(SpecMismatchError, match=r"no texts.*simindex.datasketch.MinHashLSH"):
            index.add([("a", "some text")])
        with pytest.raises(SpecMismatchError, match="no texts"):
            index.query("some text")
    text = fresh(db_url)
    with Index.create(text["url"], SignatureSpec(num_perm=NUM_PERM), bands=8, rows=4,
                      schema=text["schema"]) as index:  # fmt: skip
        with pytest.raises(SpecMismatchError, match="no precomputed signatures"):
            index.add_signatures(["a"], np.zeros((1, NUM_PERM), dtype=np.uint32))
        with pytest.raises(SpecMismatchError, match="no precomputed signatures"):
            index.query_signature(np.zeros(NUM_PERM, dtype=np.uint32))


def test_pairs_clusters_stats_and_reband_work_without_text(db_url):
    where = fresh(db_url)
    base = list(range(40))
    pool = {
        "a": minhash(base, 128),
        "a2": minhash(base[:-1] + [99], 128),  # Jaccard 39/41
        "b": minhash(range(500, 540), 128),
    }
    with MinHashLSH(num_perm=128, params=(32, 4), **where) as lsh:
        for name, m in pool.items():
            lsh.insert(name, m)
    expected = pool["a"].jaccard(pool["a2"])
    with Index.open(where["url"], schema=where["schema"]) as index:
        report = index.find_pairs(0.8)
        assert report.pairs == 1
        (pair,) = index.pairs(0.8)
        assert {pair.id_a, pair.id_b} == {"s:a", "s:a2"}
        assert pair.exact_jaccard is None and pair.estimated_jaccard == pytest.approx(expected)
        index.cluster(0.8)
        assert {m.external_id for m in index.clusters()} == {"s:a", "s:a2"}
        assert index.stats().documents == 3 and index.check() == []
        index.reband(16, 8)
    with MinHashLSH(num_perm=128, params=(16, 8), **where) as lsh:
        assert set(lsh.query(pool["a"])) == {"a", "a2"}
