"""Schema versions: upgrade a database, report its revision, refuse a stale one.

The migrations ship inside the package (``simindex.migrations``, mapped from the top-level
migrations/ folder) and run in-process on simindex's own connection.
"""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from simindex.errors import SchemaVersionError


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("simindex.migrations")))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The revision this simindex's code expects."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The database's revision, or None if it has never been migrated."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(connection: Connection) -> tuple[str | None, str]:
    """Bring the database to the head revision inside the caller's transaction (DDL is
    transactional on SQLite and PostgreSQL, so a failure leaves the schema as it was);
    returns (revision before, revision after)."""
    before = current_revision(connection)
    _check_known(before)
    command.upgrade(_config(connection), "head")
    return before, head_revision()


def _check_known(revision: str | None) -> None:
    if revision is None:
        return
    known = {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}
    if revision not in known:
        raise SchemaVersionError(
            f"the database schema is at revision {revision!r}, which this simindex does not "
            f"know (it knows up to {head_revision()!r}): it was made by a newer simindex; "
            "upgrade simindex (pip install -U simindex)"
        )


def check_current(connection: Connection) -> None:
    """Raise SchemaVersionError unless the database is at the head revision."""
    check_revision(current_revision(connection))


def check_revision(revision: str | None) -> None:
    """Raise SchemaVersionError, naming what to upgrade, unless ``revision`` is the head."""
    _check_known(revision)
    if revision != head_revision():
        raise SchemaVersionError(
            f"the database schema is at revision {revision!r} but this simindex needs "
            f"{head_revision()!r}; run `simindex db upgrade` (with the same --db) first"
        )
