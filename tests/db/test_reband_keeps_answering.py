"""After a re-band the index answers as before: the new active banding comes with its pairs
(and clusters), so the analysts' views keep their rows; a re-band for a threshold makes it
the index's. A failed first load into a new SQLite file leaves no file; Index is made by
its class methods only."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

from simindex import Index
from simindex.errors import EmptyDocumentError, NoIndexError
from simindex.store import database_url


def _view_rows(url: str) -> dict[str, int]:
    engine = sa.create_engine(database_url(url))
    try:
        with engine.connect() as connection:
            return {
                view: connection.exec_driver_sql(f"SELECT count(*) FROM {view}").scalar_one()
                for view in ("similar_pairs", "neighbors", "cluster_sizes")
            }
    finally:
        engine.dispose()


def test_a_reband_finds_the_new_bandings_pairs_and_clusters(db_url, news):
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        index.find_pairs()
        index.cluster()
        before = _view_rows(db_url)
        pairs = {(p.id_a, p.id_b) for p in index.pairs()}
        members = {(m.external_id, m.cluster) for m in index.clusters()}
        assert all(before.values())
        index.reband(42, 3)  # as likely to find a pair at 0.5 as the first banding
        assert _view_rows(db_url) == before
        assert {(p.id_a, p.id_b) for p in index.pairs()} == pairs
        assert {(m.external_id, m.cluster) for m in index.clusters()} == members
        assert index.check() == []


def test_a_reband_for_a_threshold_makes_it_the_indexs(db_url, news):
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        index.find_pairs()
        index.reband(threshold=0.8)
        assert index.threshold == 0.8
        stored = {(p.id_a, p.id_b): p.similarity for p in index.pairs()}
        assert stored and min(stored.values()) >= 0.8
        report = index.find_pairs()  # a plain run: at the new threshold, nothing new
        assert report.threshold == 0.8 and report.incremental and report.pairs == 0
    with Index.open(db_url) as index:
        assert index.threshold == 0.8 and _view_rows(db_url)["similar_pairs"] == len(stored)


def test_a_reband_without_pairs_before_finds_none(db_url, news):
    with Index.create(db_url, threshold=0.5) as index:
        index.add(news)
        index.reband(20, 5)
        assert index.bandings()[-1]["pairs_threshold"] is None


def test_a_failed_first_load_into_a_new_sqlite_file_leaves_no_file(tmp_path, news):
    path = tmp_path / "new.db"
    index, created = Index.open_or_create(str(path))
    with index, pytest.raises(EmptyDocumentError):
        index.add([*news[:3], ("blank", "  ")], on_empty="fail")
    assert created and not any(p.name.startswith("new.db") for p in tmp_path.iterdir())
    with pytest.raises(NoIndexError, match="there is no database file"):
        Index.open(str(path))
    with pytest.raises(EmptyDocumentError):  # not deferred: the creating transaction fails
        with Index.create(str(path)) as index:
            index.add([("blank", "  ")], on_empty="fail")
    assert os.path.exists(path)  # that one created the index before the load


def test_index_is_made_by_its_class_methods(tmp_path):
    with pytest.raises(TypeError, match=r"use Index\.open\(url\).*Index\.create\(url\)"):
        Index(str(tmp_path / "x.db"))
