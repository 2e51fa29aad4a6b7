"""Clusters, incremental pairs and clusters, deletes, hot buckets: on every backend."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import numpy as np
import pytest

from simindex import Index, SignatureSpec, normalize, shingle_sets
from simindex.pipeline.cluster import components
from simindex.pipeline.exact import similar_pairs


def _clusters(index: Index) -> dict[str, set[str]]:
    """cluster name -> member external ids."""
    found: dict[str, set[str]] = {}
    for row in index.clusters():
        found.setdefault(row.cluster, set()).add(row.external_id)
    return found


def _exact_components(docs, threshold):
    """Connected components of the exact pairs, named by their earliest document."""
    sets = shingle_sets([normalize(d[1]) for d in docs], SignatureSpec())
    a, b, _ = similar_pairs(sets, threshold)
    rows, component = components(a, b)
    found: dict[str, set[str]] = {}
    for row, root in zip(rows.tolist(), component.tolist()):
        found.setdefault(docs[root][0], set()).add(docs[row][0])
    return found


def test_clusters_are_the_components_of_the_exact_pairs(db_url, news):
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        index.find_pairs()
        report = index.cluster()
        clusters = _clusters(index)
        rows = list(index.clusters())
    assert clusters == _exact_components(news, 0.5)
    assert report.clusters == len(clusters) and report.documents == len(rows)
    sets = dict(zip([d[0] for d in news], _sets([d[1] for d in news]), strict=True))
    for row in rows:  # representatives come first and are similar to themselves
        if row.is_representative:
            assert row.cluster == row.external_id and row.similarity == 1.0
        else:
            assert row.similarity == _jaccard(sets[row.external_id], sets[row.cluster])


def _sets(texts: list[str]) -> list[set[int]]:
    """Each text's shingle hashes, as simindex's default spec makes them."""
    found = shingle_sets([normalize(t) for t in texts], SignatureSpec())
    runs = np.split(found.hashes, found.offsets[1:-1])
    return [set(run.tolist()) for run in runs]


def _jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b)


def test_a_member_paired_only_through_another_gets_its_own_similarity(db_url):
    """A chain a ~ b ~ c with a and c below the threshold: c's similarity to a is computed,
    b's is the stored pair's; both equal the exact Jaccard."""
    words = [f"word{i:03d}" for i in range(60)]
    docs = [
        ("a", " ".join(words[:40])),
        ("b", " ".join(words[6:46])),
        ("c", " ".join(words[12:52])),
    ]
    sets = dict(zip("abc", _sets([t for _, t in docs]), strict=True))
    threshold = 0.6
    assert _jaccard(sets["a"], sets["b"]) >= threshold > _jaccard(sets["a"], sets["c"])
    with Index.create(db_url, threshold=threshold) as index:
        index.add(docs)
        index.find_pairs()
        assert {(p.id_a, p.id_b) for p in index.pairs()} == {("a", "b"), ("b", "c")}
        index.cluster()
        rows = {row.external_id: row for row in index.clusters()}
    assert {row.cluster for row in rows.values()} == {"a"}
    assert rows["a"].similarity == 1.0
    for member in "bc":
        assert rows[member].similarity == _jaccard(sets["a"], sets[member])


def test_longest_representative(db_url):
    base = "the council approved the new budget for the harbour district on monday"
    docs = [
        ("short", base),
        ("long", base + " after a long debate"),
        ("other", "unrelated text " * 5),
    ]
    with Index.create(db_url, threshold=0.5) as index:
        index.add(docs)
        index.find_pairs()
        index.cluster(keep="longest")
        assert _clusters(index) == {"long": {"short", "long"}}
        index.cluster(keep="earliest")
        assert _clusters(index) == {"short": {"short", "long"}}


def test_incremental_pairs_and_clusters_equal_a_full_run(db_url, news):
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news[:60])
        index.find_pairs()
        index.cluster()
        index.add(news[60:])
        report = index.find_pairs()
        assert report.incremental
        incremental_pairs = {(p.id_a, p.id_b) for p in index.pairs()}
        incremental_clusters = _clusters(index)
        full = index.find_pairs(full=True)
        assert not full.incremental
        assert {(p.id_a, p.id_b) for p in index.pairs()} == incremental_pairs
        assert _clusters(index) == incremental_clusters == _exact_components(news, 0.5)
        # Nothing new: the incremental run verifies nothing.
        assert index.find_pairs().candidates == 0


def _chain():
    """a ~ b and b ~ c (Jaccard 0.6), but a !~ c: b holds the cluster together."""
    words = [f"w{i}" for i in range(60)]
    a = " ".join(words[0:40])
    b = " ".join(words[10:50])
    c = " ".join(words[20:60])
    return [("a", a), ("b", b), ("c", c), ("d", "something else entirely, not similar")]


def test_deleting_the_link_splits_the_cluster(db_url):
    spec = SignatureSpec(shingle="word", k=1)
    with Index.create(db_url, spec, threshold=0.5, bands=60, rows=2) as index:
        index.add(_chain())
        index.find_pairs()
        index.cluster()
        assert _clusters(index) == {"a": {"a", "b", "c"}}
        removal = index.delete(["b", "nonexistent"])
        assert (removal.removed, removal.not_found) == (["b"], ["nonexistent"])
        assert _clusters(index) == {}
        assert {(p.id_a, p.id_b) for p in index.pairs()} == set()
        assert index.stats().documents == 3
        assert index.query("w25 w26 w27 w28 w29 w30 w31 w32 w33 w34", threshold=0.01)


def test_evict_removes_what_was_ingested_before(db_url):
    with Index.create(db_url) as index:
        index.add([("old-1", "an old story about rain"), ("old-2", "another old story")])
        time.sleep(1.1)  # timestamps have one-second resolution on SQLite
        cutoff = datetime.now(UTC)
        index.add([("new-1", "a fresh story about sun")])
        assert len(index.evict(cutoff).removed) == 2
        assert index.stats().documents == 1


def test_a_hot_bucket_of_20000_identical_documents_clusters_in_linear_time(db_url):
    text = "This message has been automatically generated. Please do not reply."
    docs = [(f"bp-{i}", text) for i in range(20_000)] + [("real", "an actual news story here")]
    with Index.create(db_url) as index:
        index.add(docs)
        started = time.perf_counter()
        report = index.find_pairs()
        cluster = index.cluster()
        elapsed = time.perf_counter() - started
    assert report.hot_buckets == 20 and report.largest_bucket == 20_000
    assert report.pairs == 19_999  # each member linked to the representative, not all pairs
    assert cluster.clusters == 1 and cluster.largest == 20_000
    assert elapsed < 60, f"{elapsed:.1f} s"  # quadratic would be 200 million pairs per band


@pytest.mark.parametrize("rule", ["earliest", "longest"])
def test_cluster_ids_are_deterministic(tmp_path, news, rule):
    names = []
    for run in range(2):
        with Index.create(f"sqlite:///{tmp_path / f'{run}.db'}", threshold=0.5) as index:
            index.add(news)
            index.find_pairs()
            index.cluster(keep=rule)
            names.append(sorted((r.external_id, r.cluster) for r in index.clusters()))
    assert names[0] == names[1]
    assert np.all([n[1] for n in names[0]])
