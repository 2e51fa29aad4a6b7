"""Document ids past 2**31: the id sequence never goes back after deletes and evictions, so a
long-lived index reaches them; every step must treat ids as 64-bit."""

from __future__ import annotations

import sqlalchemy as sa

from simindex import Index
from simindex.store import create_engine, database_url

START = 2**40


def _start_ids_at(url: str, first: int) -> None:
    """Move the index's id sequence so that the next document gets id ``first``."""
    engine = create_engine(database_url(url))
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.exec_driver_sql(
                f"SELECT setval(pg_get_serial_sequence('documents', 'id'), {first - 1})"
            )
        else:
            connection.exec_driver_sql("DELETE FROM sqlite_sequence WHERE name = 'documents'")
            connection.execute(
                sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES ('documents', :seq)"),
                {"seq": first - 1},
            )
    engine.dispose()


def _lowest_id(url: str) -> int:
    engine = create_engine(database_url(url))
    with engine.connect() as connection:
        lowest = connection.exec_driver_sql("SELECT min(id) FROM documents").scalar_one()
    engine.dispose()
    return lowest


def _everything(index: Index) -> tuple[list, list, list]:
    pairs = sorted((p.id_a, p.id_b, round(p.similarity, 12)) for p in index.pairs())
    clusters = sorted((c.external_id, c.cluster) for c in index.clusters())
    return pairs, clusters, index.query_id("n003")


def test_ids_from_2_to_the_40_give_the_same_pairs_clusters_and_queries(db_url, tmp_path, news):
    with Index.create(f"sqlite:///{tmp_path / 'reference.db'}") as reference:
        reference.add(news)
        reference.find_pairs()
        reference.cluster()
        expected = _everything(reference)
    with Index.create(db_url) as index:
        _start_ids_at(db_url, START)
        index.add(news[:60])
        index.find_pairs()
        index.cluster()
        index.add(news[60:])  # incremental pairs and clusters over ids past 2**40
        index.find_pairs()
        assert _lowest_id(db_url) == START
        assert _everything(index) == expected
        index.delete(["n019"])  # deletes rebuild clusters from 64-bit ids too
        assert index.check() == []
