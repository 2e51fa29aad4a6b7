"""A Spark ingest into PostgreSQL makes the index a local ingest makes: same documents under
the same ids, same signatures, same query answers, pairs and clusters; and it refuses what
``ingest`` refuses, leaving the index as it was."""

from __future__ import annotations

import gzip
import json

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app
from simindex.errors import (
    DuplicateIdError,
    EmptyDocumentError,
    InputError,
    ParameterError,
    SpecMismatchError,
)
from simindex.spark.ingest import ingest
from simindex.store import connect, create_engine, database_url

pytestmark = pytest.mark.postgres

SCHEMA = "id STRING, text STRING, metadata STRING"


@pytest.fixture(scope="module")
def corpus(news) -> list[tuple[str, str, dict]]:
    """210 documents: 70 news stories and two edited copies of each (near-duplicates)."""
    documents = list(news[:70])
    for external_id, text, metadata in news[:70]:
        words = text.split()
        documents.append(
            (f"{external_id}-cut", " ".join(words[: -max(1, len(words) // 12)]), metadata)
        )
        documents.append((f"{external_id}-more", text + " Reporting by the desk.", None))
    return documents


def frame(spark, documents, partitions: int = 3):
    rows = [(i, t, None if m is None else json.dumps(m)) for i, t, m in documents]
    return spark.sparkContext.parallelize(rows, partitions).toDF(SCHEMA)


def table_rows(url: str, schema: str, query: str) -> list[tuple]:
    engine = create_engine(database_url(url), schema)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.exec_driver_sql(query)]
    finally:
        engine.dispose()


def staging_tables(url: str) -> list[tuple]:
    return table_rows(
        url, None, "SELECT table_name FROM information_schema.tables "
        "WHERE starts_with(table_name, 'simindex_load_')",
    )  # fmt: skip


def snapshot(url: str, schema: str) -> dict[str, list[tuple]]:
    """Everything two loads of the same documents must agree on."""
    return {
        "documents": table_rows(
            url, schema, "SELECT d.id, external_id, content_hash, shingle_count, text, "
            "metadata::text, s.minhashes FROM documents d JOIN signatures s "
            "ON s.document_id = d.id ORDER BY d.id",
        ),
        "band_keys": table_rows(
            url, schema, "SELECT band, key, document_id FROM band_keys ORDER BY 1, 2, 3"
        ),
        "sequence": table_rows(url, schema, "SELECT last_value FROM documents_id_seq"),
    }  # fmt: skip


def results(index: Index, texts: list[str]) -> dict[str, object]:
    index.find_pairs()
    index.cluster()
    return {
        "pairs": list(index.pairs()),
        "clusters": list(index.clusters()),
        "queries": [index.query(text) for text in texts],
    }


def test_spark_ingest_builds_and_extends_the_index_a_local_ingest_builds(spark, pg_url, corpus):
    first, later = corpus[:160], corpus[160:]
    with Index.create(pg_url, schema="local") as local:
        local.add(first)
    report = ingest(frame(spark, first), pg_url, schema="spark")
    assert (report.added, report.total, report.created, report.partitions) == (160, 160, True, 3)
    assert snapshot(pg_url, "spark") == snapshot(pg_url, "local")
    texts = [text for _, text, _ in corpus[::40]]
    with Index.open(pg_url, schema="spark") as built, Index.open(pg_url, schema="local") as local:
        assert built.check() == []
        assert results(built, texts) == results(local, texts)
        assert len(list(built.pairs())) > 50  # the edited copies pair up

    # Extending: a second Spark load into the existing banding partitions, then incremental
    # pairs, as a local ingest of the same documents into the local index.
    report = ingest(frame(spark, later, partitions=2), pg_url, schema="spark")
    assert (report.added, report.total, report.created) == (50, 210, False)
    with Index.open(pg_url, schema="local") as local:
        local.add(later)
    assert snapshot(pg_url, "spark") == snapshot(pg_url, "local")
    with Index.open(pg_url, schema="spark") as built, Index.open(pg_url, schema="local") as local:
        assert built.find_pairs().incremental
        assert results(built, texts) == results(local, texts)
        # And a local ingest into the Spark-built index continues it as any index.
        extra = [(f"{i}-again", f"{t} Updated.") for i, t, _ in corpus[:4]]
        for index in (built, local):
            index.add(extra)
            assert index.find_pairs().incremental
        assert list(built.pairs()) == list(local.pairs())
        # Each load is a run of the audit trail, with the documents it indexed.
        loads = [r for r in reversed(built.runs()) if r.parameters.get("executor") == "spark"]
        assert [(r.command, r.counts["added"]) for r in loads] == [("ingest", 160), ("ingest", 50)]
        assert [(r.first_document, r.last_document) for r in loads] == [(1, 160), (161, 210)]
    assert snapshot(pg_url, "spark") == snapshot(pg_url, "local")
    assert staging_tables(pg_url) == []


def test_a_mismatched_scheme_is_refused_before_any_work(spark, pg_url, corpus):
    ingest(frame(spark, corpus[:20]), pg_url)
    before = snapshot(pg_url, None)
    with pytest.raises(
        SpecMismatchError, match="uses signature scheme simindex-v2, not simindex-v1"
    ):
        ingest(frame(spark, corpus[20:40]), pg_url, scheme="simindex-v1")
    assert snapshot(pg_url, None) == before
    assert staging_tables(pg_url) == []


def test_a_v1_index_is_built_with_v1_signatures(spark, pg_url, corpus):
    documents = corpus[:12]
    ingest(frame(spark, documents), pg_url, schema="spark", scheme="simindex-v1")
    with Index.create(
        pg_url, schema="local", spec=Index.open(pg_url, schema="spark").spec
    ) as local:
        local.add(documents)
    assert snapshot(pg_url, "spark") == snapshot(pg_url, "local")


def test_duplicates_fail_the_load_or_are_skipped_keeping_the_first_copy(spark, pg_url, corpus):
    ingest(frame(spark, corpus[:10]), pg_url)
    before = snapshot(pg_url, None)
    again = corpus[5:15] + [(corpus[12][0], "a later copy of an id", None)]
    with pytest.raises(DuplicateIdError, match=r"5 already indexed, 1 repeated in the input"):
        ingest(frame(spark, again), pg_url)
    assert snapshot(pg_url, None) == before
    report = ingest(frame(spark, again), pg_url, on_duplicate="skip")
    assert (report.added, report.skipped_existing, report.total) == (5, 6, 15)
    with Index.open(pg_url) as index:
        assert index.texts([corpus[12][0]]) == {corpus[12][0]: corpus[12][1]}  # the first
        assert index.check() == []
    assert staging_tables(pg_url) == []


def test_malformed_and_empty_documents(spark, pg_url, corpus):
    documents = [*corpus[:8], ("no-text", None, None), ("blank", " \t ", None)]
    with pytest.raises(InputError, match="1 record.*can't be indexed.*no-text"):
        ingest(frame(spark, documents), pg_url)
    assert staging_tables(pg_url) == []
    with pytest.raises(EmptyDocumentError, match="'blank' has no text"):
        ingest(frame(spark, documents), pg_url, on_error="skip", on_empty="fail")
    with sa.create_engine(database_url(pg_url)).connect() as connection:  # no index was left
        assert not sa.inspect(connection).has_table("documents")
    report = ingest(frame(spark, documents), pg_url, on_error="skip")
    assert (report.added, report.skipped_malformed, report.skipped_empty) == (8, 1, 1)
    assert report.examples[-1] == ("blank", None)


def test_sqlite_and_replace_are_refused(spark, tmp_path, corpus):
    with pytest.raises(ParameterError, match="loads into PostgreSQL"):
        ingest(frame(spark, corpus[:3]), str(tmp_path / "index.db"))
    with pytest.raises(ParameterError, match="'fail' or 'skip'"):
        ingest(frame(spark, corpus[:3]), "postgresql://nowhere/db", on_duplicate="replace")


def test_a_partition_is_staged_once_however_many_attempts(pg_url):
    """A retried (or speculative) task finds its partition staged and writes nothing."""
    store = connect(pg_url)
    staged = store.staged_load("simindex_load_test", [1])
    try:
        with store.engine.connect() as connection, connection.begin():
            staged.create(connection)
        with store.engine.connect() as connection, connection.begin():
            assert staged.claim(connection, 7)
            staged.finish_part(connection, 7, 3)
        with store.engine.connect() as connection:
            with connection.begin():  # an attempt that failed: rolled back, claims nothing
                assert staged.claim(connection, 8)
                staged.finish_part(connection, 8, 5)
                connection.rollback()
            with connection.begin():
                assert not staged.claim(connection, 7)
                assert staged.claim(connection, 8)
                assert staged.parts(connection) == {7: 3}
    finally:
        staged.drop()
        store.engine.dispose()


def test_the_command_ingests_shards_as_ingest_does(spark, pg_url, corpus, tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for number in range(3):
        lines = [
            json.dumps({"id": i, "text": t, **(m or {})}) for i, t, m in corpus[number::3][:20]
        ]
        (shards / f"part-{number}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(
        app, ["spark", "ingest", str(shards), "--db", pg_url, "--schema", "spark"]
    )
    assert result.exit_code == 0, result.output
    assert "Added 60 new documents from 3 Spark tasks" in result.output
    assert "Created a new index" in result.output
    result = runner.invoke(app, ["ingest", str(shards), "--db", pg_url, "--schema", "local"])
    assert result.exit_code == 0, result.output
    assert snapshot(pg_url, "spark") == snapshot(pg_url, "local")

    (shards / "part-3.jsonl").write_text('{"id": "x", "text": "fine"}\n{"id": "y"\n')
    result = runner.invoke(
        app, ["spark", "ingest", str(shards), "--db", pg_url, "--schema", "spark"]
    )
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and "part-3.jsonl:2" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert table_rows(pg_url, "spark", "SELECT count(*) FROM documents") == [(60,)]

    (shards / "part-3.jsonl").unlink()  # a file that can't be read fails the job
    # A truncated gzip file (bytes not in UTF-8 spoil only their record: readers.py).
    (shards / "part-4.jsonl").write_bytes(gzip.compress(b'{"id": "z", "text": "t"}\n' * 99)[:-9])
    result = runner.invoke(
        app, ["spark", "ingest", str(shards), "--db", pg_url, "--schema", "spark"]
    )
    assert result.exit_code == 1
    assert (
        result.output.startswith("Error: a Spark task failed: ") and "part-4.jsonl" in result.output
    )
    assert "the index is unchanged" in result.output
    assert table_rows(pg_url, "spark", "SELECT count(*) FROM documents") == [(60,)]
    assert staging_tables(pg_url) == []
