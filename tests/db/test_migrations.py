"""Migrations: they build what schema.py describes, and they ship inside the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from simindex import Index, migrate
from simindex.schema import metadata
from simindex.store import create_engine, database_url
from tests.conftest import REPO


def test_the_migrated_schema_is_the_one_the_code_describes(db_url):
    Index.create(db_url).close()
    engine = create_engine(database_url(db_url))
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), metadata)
    engine.dispose()
    assert differences == []


def test_db_upgrade_is_idempotent_and_reports_the_head(db_url):
    engine = create_engine(database_url(db_url))
    assert migrate.upgrade(engine) == (None, migrate.head_revision())
    assert migrate.upgrade(engine) == (migrate.head_revision(), migrate.head_revision())
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
        "import simindex, sys; from simindex.store import create_engine; from simindex import migrate;"
        "assert 'site' in simindex.__file__, simindex.__file__;"
        f"print(migrate.upgrade(create_engine('sqlite:///{tmp_path}/w.db')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert migrate.head_revision() in result.stdout
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
    assert migrate.upgrade(engine) == ("0002", migrate.head_revision())
    with engine.connect() as connection:
        assert len(connection.exec_driver_sql(neighbors).all()) == 2
    engine.dispose()
