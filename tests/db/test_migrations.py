"""Migrations: they build what schema.py describes, and they ship inside the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from simindex import Index
from simindex.store import create_engine, database_url, migrate
from simindex.store.schema import metadata
from tests.conftest import REPO


def test_the_migrated_schema_is_the_one_the_code_describes(db_url):
    Index.create(db_url).close()
    engine = create_engine(database_url(db_url))
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), metadata)
    engine.dispose()
    assert differences == []


def test_the_head_revision_constant_is_the_migrations_head():
    """Opening an index compares the stored revision with HEAD_REVISION, without Alembic: a new
    migration must move the constant too."""
    script = ScriptDirectory.from_config(migrate._config())
    assert migrate.HEAD_REVISION == script.get_current_head()


def test_the_stored_revision_reads_as_alembic_reads_it(db_url):
    engine = create_engine(database_url(db_url))
    with engine.connect() as connection:
        assert migrate.current_revision(connection) is None
        assert MigrationContext.configure(connection).get_current_revision() is None
    engine.dispose()
    Index.create(db_url).close()
    engine = create_engine(database_url(db_url))
    with engine.begin() as connection:
        revision = migrate.current_revision(connection)
        assert revision == MigrationContext.configure(connection).get_current_revision()
        assert revision == migrate.HEAD_REVISION
        command.downgrade(migrate._config(connection), "0002")
        assert migrate.current_revision(connection) == "0002"
    engine.dispose()


def test_db_upgrade_is_idempotent_and_reports_the_head(db_url):
    engine = create_engine(database_url(db_url))
    with engine.begin() as connection:
        assert migrate.upgrade(connection) == (None, migrate.HEAD_REVISION)
    with engine.begin() as connection:
        assert migrate.upgrade(connection) == (migrate.HEAD_REVISION, migrate.HEAD_REVISION)
    engine.dispose()


def test_the_wheel_carries_the_migrations_and_upgrades_from_outside_the_checkout(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
    )
    (wheel,) = tmp_path.glob("simindex-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "site")
    assert {
        "simindex/migrations/env.py",
        "simindex/migrations/versions/0001_initial.py",
        "simindex/migrations/script.py.mako",
    } <= names
    script = (
        "import simindex, sys; from simindex.store import create_engine; from simindex.store import migrate;"
        "assert 'site' in simindex.__file__, simindex.__file__;"
        f"engine = create_engine('sqlite:///{tmp_path}/w.db');"
        "connection = engine.connect(); connection.begin();"
        "print(migrate.upgrade(connection)); connection.commit()"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert migrate.HEAD_REVISION in result.stdout
    engine = sa.create_engine(f"sqlite:///{tmp_path}/w.db")
    assert "band_keys" in sa.inspect(engine).get_table_names()


def test_0003_adds_the_neighbors_view_and_its_downgrade_removes_it(db_url, news):
    with Index.create(db_url) as index:
        index.add([news[1], ("n002-copy", news[1][1])])
        index.find_pairs()
    engine = create_engine(database_url(db_url))
    neighbors = "SELECT id, other_id FROM neighbors ORDER BY id"
    with engine.begin() as connection:
        assert connection.exec_driver_sql(neighbors).all() == [
            ("n002", "n002-copy"),
            ("n002-copy", "n002"),
        ]
        command.downgrade(migrate._config(connection), "0002")
        assert "neighbors" not in sa.inspect(connection).get_view_names()
        assert "similar_pairs" in sa.inspect(connection).get_view_names()
    with engine.begin() as connection:
        assert migrate.upgrade(connection) == ("0002", migrate.HEAD_REVISION)
    with engine.connect() as connection:
        assert len(connection.exec_driver_sql(neighbors).all()) == 2
    engine.dispose()


def test_0004_drops_the_foreign_keys_to_documents_and_its_downgrade_restores_them(db_url, news):
    with Index.create(db_url) as index:
        index.add([news[1], ("n002-copy", news[1][1]), news[2]])
        index.find_pairs()
        index.cluster()
    engine = create_engine(database_url(db_url))

    def document_keys(connection: sa.Connection) -> set[tuple[str, str]]:
        inspector = sa.inspect(connection)
        return {
            (table, key["name"])
            for table in ("pairs", "clusters")
            for key in inspector.get_foreign_keys(table)
            if key["referred_table"] == "documents"
        }

    kept = "SELECT (SELECT count(*) FROM neighbors), (SELECT count(*) FROM clusters)"
    with engine.begin() as connection:
        assert document_keys(connection) == set()
        command.downgrade(migrate._config(connection), "0003")
        assert document_keys(connection) == {
            ("pairs", "fk_pairs_doc_a_documents"),
            ("pairs", "fk_pairs_doc_b_documents"),
            ("clusters", "fk_clusters_document_id_documents"),
        }
        assert connection.exec_driver_sql(kept).one() == (2, 2)
    with engine.begin() as connection:
        assert migrate.upgrade(connection) == ("0003", migrate.HEAD_REVISION)
        assert document_keys(connection) == set()
        assert connection.exec_driver_sql(kept).one() == (2, 2)
    engine.dispose()
    with Index.open(db_url) as index:
        assert index.check() == []
        index.delete(["n002"])
        assert list(index.pairs()) == []
        assert index.check() == []
