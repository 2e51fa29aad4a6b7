"""PostgreSQL specifics: connection errors are one clear line, and the password never shows;
band keys live in one partition per banding; a point query's lookup past its text limit never
reads documents."""

import pytest
import sqlalchemy as sa
from alembic import command

from simindex import Index
from simindex.errors import DatabaseError, DuplicateIdError, InputError
from simindex.index import upgrade_schema
from simindex.local.query import text_profile
from simindex.pipeline.banding import band_keys
from simindex.store import create_engine, database_url, migrate


def test_a_closed_port_is_a_clear_error_without_the_password():
    with pytest.raises(DatabaseError) as info:
        Index.open("postgresql://someone:s3cret@127.0.0.1:1/nowhere")
    message = str(info.value)
    assert "127.0.0.1:1" in message and "failed" in message
    assert "s3cret" not in message


def _sql(url: str, statement: str) -> list[tuple]:
    engine = sa.create_engine(url)
    with engine.connect() as connection:
        result = connection.exec_driver_sql(statement)
        rows = [tuple(r) for r in result] if result.returns_rows else []
    engine.dispose()
    return rows


def _band_key_rows(url: str) -> list[tuple]:
    return _sql(url, "SELECT * FROM band_keys ORDER BY banding_id, band, key, document_id")


def test_each_banding_is_an_indexed_partition_that_point_lookups_use(pg_url, news):
    with Index.create(pg_url) as index:
        index.add(news[:60])  # bulk: a new table, indexed and attached at the end
        index.add(news[60:])  # the attached partition takes the rest through its index
        index.reband(42, 3)
        index.find_pairs()
        assert index.check() == []
        assert len(_band_key_rows(pg_url)) == len(news) * (20 + 42)
    partitions = _sql(
        pg_url,
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'band_keys'::regclass "
        "AND c.relkind = 'r' ORDER BY 1",
    )
    assert partitions == [
        ("band_keys_1", "FOR VALUES IN (1)"),
        ("band_keys_2", "FOR VALUES IN (2)"),
    ]
    _sql(pg_url, "ANALYZE band_keys")
    plan = _sql(
        pg_url,
        "EXPLAIN SELECT document_id FROM band_keys WHERE banding_id = 2 AND band = 3 AND key = 42",
    )
    assert "Index Only Scan using band_keys_2_pkey on band_keys_2" in plan[0][0]


def test_a_load_that_creates_the_index_writes_its_rows_frozen(pg_url, news):
    """Rows that a first load writes (COPY ... FREEZE) need no commit hint bits from their
    first reader, who would otherwise dirty every page it reads (Store.insert_documents);
    rows added to an existing index get theirs from the first read, as usual."""

    def pages_dirtied_by_reading(table: str) -> int:
        _sql(pg_url, "CHECKPOINT")  # a page dirty already would not count again
        plan = _sql(pg_url, f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT count(*) FROM {table}")
        return plan[0][0][0]["Plan"]["Shared Dirtied Blocks"]

    with Index.create(pg_url, deferred=True) as index:
        index.add(news[:60])
        assert {t: pages_dirtied_by_reading(t) for t in _LOADED} == dict.fromkeys(_LOADED, 0)
        index.add(news[60:])
        assert pages_dirtied_by_reading("documents") > 0
        assert pages_dirtied_by_reading("signatures") > 0
        assert pages_dirtied_by_reading("documents") == 0  # the first reader set them


_LOADED = ("documents", "signatures", "band_keys_1")


def test_rebuilt_pairs_and_clusters_have_planner_statistics(pg_url, news):
    """A full pairs run and clustering analyze what they rewrote (autovacuum may never):
    the planner then knows the tables' row counts."""

    def planned_rows() -> dict[str, float]:
        rows = _sql(pg_url, "SELECT relname, reltuples FROM pg_class WHERE relname IN "
                            "('pairs', 'clusters')")  # fmt: skip
        return dict(rows)

    with Index.create(pg_url, threshold=0.5) as index:
        index.add(news)
        assert planned_rows() == {"pairs": -1, "clusters": -1}  # never analyzed
        pairs = index.find_pairs().stored
        clusters = index.cluster().documents
    assert pairs > 0 and clusters > 0
    assert planned_rows() == {"pairs": pairs, "clusters": clusters}


def test_long_texts_are_compressed_with_lz4(pg_url):
    Index.create(pg_url).close()
    assert _sql(
        pg_url,
        "SELECT attcompression FROM pg_attribute "
        "WHERE attrelid = 'documents'::regclass AND attname = 'text'",
    ) == [("l",)]


def test_a_bulk_load_that_fails_leaves_no_table_behind(pg_url, news):
    with Index.create(pg_url) as index:
        with pytest.raises(DuplicateIdError):
            index.add([*news, news[0]])
        # A bad document in a later batch: the batches before it were written, then the
        # error comes from the signing thread and the whole call rolls back.
        with pytest.raises(InputError, match="bad"):
            index.add([*news[:50], ("bad", None), *news[50:]], batch_size=10)
        assert index.stats().documents == 0
    assert _sql(pg_url, "SELECT to_regclass('band_keys_1') IS NULL") == [(True,)]


def test_band_keys_survive_a_downgrade_to_0001_and_the_upgrade_back(pg_url, news):
    """0001 kept every banding in one table; 0002 moves each into its own partition."""
    with Index.create(pg_url) as index:
        index.add(news)
        index.reband(42, 3, activate=False)
        before = _band_key_rows(pg_url)
    engine = create_engine(database_url(pg_url))
    with engine.begin() as connection:
        command.downgrade(migrate._config(connection), "0001")
    assert _sql(pg_url, "SELECT relkind FROM pg_class WHERE relname = 'band_keys'") == [("r",)]
    assert _band_key_rows(pg_url) == before
    engine.dispose()
    assert upgrade_schema(pg_url) == ("0001", migrate.HEAD_REVISION)
    assert _band_key_rows(pg_url) == before
    assert _sql(
        pg_url, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'band_keys'::regclass"
    ) == [(2,)]
    with Index.open(pg_url) as index:
        assert index.check() == []
        assert index.find_pairs().pairs > 0


def test_a_lookup_past_its_text_limit_never_reads_documents(pg_url, news):
    """Past ``with_text`` candidates the lookup's documents scan sits under a one-time filter
    that is false, so it never runs (as a join condition it ran for each candidate)."""
    text = dict((d[0], d[1]) for d in news)["n001"]
    with Index.create(pg_url) as index:
        index.add(news)
        keys = band_keys(text_profile(index._context, text).signatures, 20, 5)
        statements = []

        class Recorded:  # the connection, recording the lookup's statement
            def __init__(self, connection):
                self.connection = connection

            def execute(self, statement, parameters):
                statements.append((statement, parameters))
                return self.connection.execute(statement, parameters)

        with index._context.statement() as connection:
            found = index._store.documents_in_buckets(Recorded(connection), 1, keys, 500, 0)
            ((statement, parameters),) = statements
            explain = sa.text(f"EXPLAIN (ANALYZE, COSTS OFF) {statement.text}")
            plan = connection.execute(explain, parameters).scalars().all()
    assert found and all(row[0] is None for row in found.values())
    on_documents = [line for line in plan if " on documents" in line]
    assert on_documents and all("(never executed)" in line for line in on_documents)
    assert not any("Seq Scan on signatures" in line for line in plan)
