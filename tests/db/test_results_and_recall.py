"""The library's results are typed (Pair, ClusterMember, Match), and a threshold the active
banding can't serve warns (LowRecallWarning) with the expected recall, which the reports
carry too."""

from __future__ import annotations

import warnings

import pytest

from simindex import ClusterMember, Index, LowRecallWarning, Pair
from simindex.pipeline.banding import candidate_probability


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
