"""The library's results are typed (Pair, ClusterMember, Match, IndexStats), and a threshold
the active banding can't serve warns (LowRecallWarning) with the expected recall, which the reports
carry too."""

from __future__ import annotations

import collections
import dataclasses
import warnings

import pytest

from simindex import ClusterMember, Index, IndexStats, LargestCluster, LowRecallWarning, Pair
from simindex.pipeline.banding import candidate_probability
from simindex.pipeline.shingle import normalize


def test_pairs_and_clusters_are_typed(db_url, news):
    with Index.create(db_url) as index:
        index.add(news)
        index.find_pairs()
        index.cluster()
        pairs = list(index.pairs())
        members = list(index.clusters())
    assert pairs and all(isinstance(p, Pair) for p in pairs)
    assert all(p.similarity == p.exact_jaccard >= 0.8 for p in pairs)
    assert members and all(isinstance(m, ClusterMember) for m in members)
    assert {m.cluster for m in members if m.is_representative} == {m.cluster for m in members}


def test_stats_are_typed_and_agree_with_what_the_index_lists(db_url, news):
    with Index.create(db_url) as index:
        index.add(news)
        before = index.stats()
        index.find_pairs()
        index.cluster()
        stats = index.stats(largest=5)
        bandings, pairs = index.bandings(), list(index.pairs())
        members = list(index.clusters())
        spec, url = index.spec, index.url
    assert isinstance(stats, IndexStats) and dataclasses.is_dataclass(stats)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.documents = 0  # type: ignore[misc]
    assert before.cluster_sizes is None and before.largest_clusters == () and before.pairs == 0

    copies = collections.Counter(normalize(text) for _, text, _ in news)
    assert (stats.url, stats.spec, stats.keep_text, stats.threshold) == (
        url, spec.to_dict(), True, 0.8,
    )  # fmt: skip
    assert stats.documents == len(news)
    assert stats.exact_duplicate_groups == sum(n > 1 for n in copies.values())
    assert stats.bandings == tuple(bandings) and stats.retired_bandings == ()
    (active,) = [b for b in bandings if b["is_active"]]
    assert stats.active_banding == active["id"] and stats.pairs == len(pairs)
    # Every document is in one bucket of each band.
    assert sum(size * n for size, n in stats.bucket_sizes) == len(news) * active["bands"]
    assert len(stats.largest_buckets) == 5
    assert [size for *_, size in stats.largest_buckets] == sorted(
        (size for *_, size in stats.largest_buckets), reverse=True
    )
    assert stats.largest_buckets[0][2] == max(size for size, _ in stats.bucket_sizes)

    sizes = collections.Counter(m.cluster for m in members)
    assert stats.cluster_sizes == tuple(sorted(collections.Counter(sizes.values()).items()))
    assert stats.largest_clusters and all(
        isinstance(c, LargestCluster) for c in stats.largest_clusters
    )
    for cluster in stats.largest_clusters:
        similarities = [m.similarity for m in members if m.cluster == cluster.representative]
        assert cluster.size == sizes[cluster.representative] == len(similarities)
        assert cluster.weakest == pytest.approx(min(similarities))


def test_a_threshold_below_the_banding_warns_with_the_expected_recall(db_url, news):
    expected = candidate_probability(0.5, 20, 5)  # the default banding for 0.8
    with Index.create(db_url) as index:
        with warnings.catch_warnings():
            warnings.simplefilter("error", LowRecallWarning)  # none at the index threshold
            index.add(news[:50])
            report = index.find_pairs()
            index.query(news[0][1])
        assert (report.bands, report.rows) == (20, 5) and report.expected_recall > 0.9995
        with pytest.warns(LowRecallWarning, match=r"probability 47\.0%.*reband --threshold 0\.5"):
            result = index.add(news[50:], find_duplicates=0.5)
        assert result.expected_recall == pytest.approx(expected)
        with pytest.warns(LowRecallWarning, match=r"reband --threshold 0\.5"):
            low = index.find_pairs(0.5)
        assert low.expected_recall == pytest.approx(expected) and low.incremental is False
        with pytest.warns(LowRecallWarning, match=r"similarity 0\.3"):
            index.query(news[0][1], threshold=0.3)
        with pytest.warns(LowRecallWarning, match="no banding of 128 hashes reaches it"):
            index.query(news[0][1], threshold=0.0)
        index.reband(27, 2)  # what tune_threshold(128, 0.5) picks
        with warnings.catch_warnings():
            warnings.simplefilter("error", LowRecallWarning)
            assert index.find_pairs(0.5).expected_recall >= 0.9995
