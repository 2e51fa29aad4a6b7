"""Schema versions: upgrade a database, report its revision, refuse a stale one.

The migrations ship inside the package (``simindex.migrations``, mapped from the top-level
migrations/ folder) and run in-process on simindex's own connection. Opening an index only
compares the stored revision with :data:`HEAD_REVISION`, so Alembic (a tenth of a second to
import) loads only to create or upgrade a schema, or to explain a revision that is not the head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy import Connection

from simindex.errors import SchemaVersionError

if TYPE_CHECKING:
    from alembic.config import Config

# The revision this simindex's code expects: the head of migrations/versions (a test checks
# that Alembic's script directory agrees). A new migration changes it.
HEAD_REVISION = "0005"


def _config(connection: Connection | None = None) -> Config:
    from importlib.resources import files

    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(files("simindex.migrations")))
    config.attributes["connection"] = connection
    return config


def current_revision(connection: Connection) -> str | None:
    """The database's revision (the row of Alembic's version table, read as Alembic reads
    it: in the connection's schema), or None if it has never been migrated."""
    if not sa.inspect(connection).has_table("alembic_version"):
        return None
    return connection.exec_driver_sql(
        "SELECT version_num FROM alembic_version"
    ).scalar_one_or_none()


def upgrade(connection: Connection) -> tuple[str | None, str]:
    """Bring the database to the head revision inside the caller's transaction (DDL is
    transactional on SQLite and PostgreSQL, so a failure leaves the schema as it was);
    returns (revision before, revision after)."""
    from alembic import command

    before = current_revision(connection)
    _check_known(before)
    command.upgrade(_config(connection), "head")
    return before, HEAD_REVISION


def _check_known(revision: str | None) -> None:
    if revision is None or revision == HEAD_REVISION:
        return
    from alembic.script import ScriptDirectory

    known = {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}
    if revision not in known:
        raise SchemaVersionError(
            f"the database schema is at revision {revision!r}, which this simindex does not "
            f"know (it knows up to {HEAD_REVISION!r}): it was made by a newer simindex; "
            "upgrade simindex (pip install -U simindex)"
        )


def check_current(connection: Connection) -> None:
    """Raise SchemaVersionError unless the database is at the head revision."""
    check_revision(current_revision(connection))


def check_revision(revision: str | None) -> None:
    """Raise SchemaVersionError, naming what to upgrade, unless ``revision`` is the head."""
    _check_known(revision)
    if revision != HEAD_REVISION:
        raise SchemaVersionError(
            f"the database schema is at revision {revision!r} but this simindex needs "
            f"{HEAD_REVISION!r}; run `simindex db upgrade` (with the same --db) first"
        )
