"""Several indexes in one PostgreSQL database, each in a schema of its own (docs/sql.md,
"Several indexes in one database")."""

from __future__ import annotations

import json
import threading

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app
from simindex.errors import ParameterError
from simindex.store import migrate
from tests.conftest import NEWS

runner = CliRunner()


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))


def test_two_indexes_share_a_database_next_to_a_warehouse_documents_table(pg_url, news):
    warehouse = _engine(pg_url)
    with warehouse.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE documents (id TEXT PRIMARY KEY, body TEXT)")
        connection.exec_driver_sql("INSERT INTO documents VALUES ('w1', 'the warehouse''s own')")
    jobs_documents = [(f"job-{i}", text) for i, text, _ in news[:40]]
    with Index.create(pg_url, schema="news", threshold=0.8) as index:
        index.add(news)
        index.find_pairs()
        index.reband(32, 4, drop_old=True)  # a partition made and one dropped, in the schema
        index.find_pairs()
        news_pairs = list(index.pairs())
    with Index.create(pg_url, schema="jobs", threshold=0.8) as index:
        index.add(jobs_documents)
        index.find_pairs()
        jobs_pairs = list(index.pairs())
    assert news_pairs and jobs_pairs
    assert not any(p.id_a.startswith("job-") for p in news_pairs)
    assert all(p.id_a.startswith("job-") and p.id_b.startswith("job-") for p in jobs_pairs)

    with warehouse.connect() as connection:
        sql = connection.exec_driver_sql
        # Everything simindex made is in its schema: the warehouse's schema is as it was.
        public = sql(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' ORDER BY 1"
        ).scalars()
        assert list(public) == ["documents", "documents_pkey"]
        assert sql("SELECT id FROM public.documents").scalars().all() == ["w1"]
        for schema, count, partition in [
            ("news", len(news), "band_keys_2"),
            ("jobs", len(jobs_documents), "band_keys_1"),
        ]:
            kinds = dict(
                sql(
                    "SELECT c.relname, c.relkind FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s",
                    (schema,),
                ).all()
            )
            assert {"alembic_version", "index_settings", "documents", "band_keys"} <= set(kinds)
            assert kinds["similar_pairs"] == "v" and kinds["bucket_sizes"] == "v"
            assert kinds["documents_id_seq"] == "S"
            tables = {name for name, kind in kinds.items() if kind == "r"}
            assert {t for t in tables if t.startswith("band_keys_")} == {partition}
            assert sql(
                f"SELECT pg_get_serial_sequence('{schema}.documents', 'id')"
            ).scalar_one() == (f"{schema}.documents_id_seq")
            assert sql(f"SELECT count(*) FROM {schema}.documents").scalar_one() == count
        assert sql("SELECT count(*) FROM news.band_keys_2").scalar_one() > 0  # the re-band's
        # An analyst joins the two by schema-qualified names.
        shared = sql(
            "SELECT count(*) FROM news.documents n "
            "JOIN jobs.documents j ON j.external_id = 'job-' || n.external_id"
        ).scalar_one()
        assert shared == len(jobs_documents)
        news_similar = sql("SELECT count(*) FROM news.similar_pairs").scalar_one()
        assert news_similar == len(news_pairs)
    warehouse.dispose()


def test_the_indexes_of_one_database_have_their_own_writer_lock(pg_url):
    with Index.create(pg_url, schema="news") as news, Index.create(pg_url, schema="jobs") as jobs:
        entered, release = threading.Event(), threading.Event()

        def documents():
            yield ("a", "the quick brown fox jumps over the lazy dog")
            entered.set()
            release.wait(30)

        thread = threading.Thread(target=lambda: news.add(documents(), batch_size=1))
        thread.start()
        try:
            assert entered.wait(30)
            with Index.open(pg_url, schema="jobs", lock_timeout=0) as other:
                other.add([("a", "the quick brown fox jumps over the lazy dog")])
        finally:
            release.set()
            thread.join()
        assert news.stats().documents == jobs.stats().documents == 1


def run(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


def test_cli_schema_option_and_environment_variable(pg_url):
    ingested = run("ingest", str(NEWS), "--db", pg_url, "--schema", "news")
    assert ingested.exit_code == 0, ingested.output
    assert run("pairs", "--db", pg_url, "--schema", "news").exit_code == 0
    jobs = {"SIMINDEX_SCHEMA": "jobs"}
    assert run("init", "--db", pg_url, env=jobs).exit_code == 0
    assert run("db", "current", "--db", pg_url, env=jobs).stdout.startswith(
        f"database revision: {migrate.HEAD_REVISION}"
    )
    stats = run("stats", "--db", pg_url, "--json", "--schema", "news")
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.stdout)["documents"] == 100
    tuned = run("tune", "--threshold", "0.8", "--db", pg_url, "--schema", "news")
    assert tuned.exit_code == 0 and "active " in tuned.output, tuned.output
    stats = run("stats", "--db", pg_url, "--json", env=jobs)
    assert json.loads(stats.stdout)["documents"] == 0
    missing = run("stats", "--db", pg_url)  # the default schema holds no index
    assert missing.exit_code == 1 and "holds no simindex index" in missing.stderr
    typo = run("stats", "--db", pg_url, "--schema", "newz")
    assert "(schema newz) holds no simindex index" in typo.stderr


@pytest.mark.parametrize(
    "schema, message",
    [
        ("News", "must be lower-case letters"),
        ('x"; DROP TABLE documents; --', "must be lower-case letters"),
    ],
)
def test_a_schema_name_that_is_not_a_plain_name_is_refused(schema, message):
    url = "postgresql://postgres@127.0.0.1:1/never_reached"  # refused before connecting
    with pytest.raises(ParameterError, match=message):
        Index.create(url, schema=schema)
    result = run("init", "--db", url, "--schema", schema)
    assert result.exit_code == 1 and result.stderr.startswith("Error: schema name ")


def test_on_sqlite_an_index_is_a_file_and_schema_is_an_error(tmp_path):
    result = run("ingest", str(NEWS), "--db", str(tmp_path / "x.db"), "--schema", "news")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: --schema news is for PostgreSQL")
    assert "--db" in result.stderr
    assert not (tmp_path / "x.db").exists()


def test_dedup_without_db_ignores_the_schema_variable(tmp_path):
    kept = tmp_path / "kept.jsonl"
    result = run("dedup", str(NEWS), "-o", str(kept), env={"SIMINDEX_SCHEMA": "news"})
    assert result.exit_code == 0, result.output
    assert 0 < len(kept.read_text().splitlines()) < 100
