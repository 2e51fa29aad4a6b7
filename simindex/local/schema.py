"""The schema of an index database: its revision, and its upgrade (`simindex db`)."""

from __future__ import annotations

import os

from simindex.errors import DatabaseError, SchemaVersionError
from simindex.store import connect, migrate


def upgrade_schema(
    url: str | os.PathLike[str] | None, schema: str | None = None
) -> tuple[str | None, str]:
    """Migrate the index at ``url`` (in ``schema``) to this simindex's schema in one
    transaction; returns (revision before, revision after). A database with no index is
    refused and left untouched: `simindex init` creates the schema and the settings together."""
    store = connect(url, schema, must_exist=True)
    try:
        with store.transaction(write=True) as connection:
            if store.index_state(connection) == "none":
                raise DatabaseError(
                    f"{store.describe()} holds no simindex index to upgrade; "
                    "create one with `simindex init` (it creates the schema too)"
                )
            return migrate.upgrade(connection)
    finally:
        store.close()


def schema_revision(
    url: str | os.PathLike[str] | None, schema: str | None = None
) -> tuple[str | None, str, str]:
    """(the schema revision of the database (of ``schema`` in it) or None, the one this
    simindex needs, what to do: "up to date" or the step to take)."""
    store = connect(url, schema, must_exist=True)
    try:
        with store.transaction() as connection:
            revision = migrate.current_revision(connection)
    finally:
        store.close()
    if revision is None:
        return None, migrate.HEAD_REVISION, "no simindex index here: `simindex init` creates one"
    try:
        migrate.check_revision(revision)
    except SchemaVersionError as exc:
        return revision, migrate.HEAD_REVISION, str(exc)
    return revision, migrate.HEAD_REVISION, "up to date"
