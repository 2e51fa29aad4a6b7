"""The store of a URL: the backend class is picked from the database the URL names."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Engine

from simindex.defaults import DEFAULT_LOCK_TIMEOUT
from simindex.store.base import Store
from simindex.store.postgres import PostgresStore
from simindex.store.sqlite import SQLiteStore
from simindex.store.staging import StagedPart
from simindex.store.urls import create_engine, database_url

_BACKENDS: dict[str, type[Store]] = {"sqlite": SQLiteStore, "postgresql": PostgresStore}


def connect(
    url: str | os.PathLike[str] | None,
    schema: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    *,
    must_exist: bool = False,
) -> Store:
    """The store of the database at ``url`` (see database_url; ``schema`` and
    ``must_exist``: see create_engine). Raises DatabaseError for a URL simindex can't use."""
    engine = create_engine(database_url(url), schema, must_exist=must_exist)
    return store_of(engine, schema, lock_timeout)


def store_of(
    engine: Engine, schema: str | None = None, lock_timeout: float = DEFAULT_LOCK_TIMEOUT
) -> Store:
    """The store of an engine made by create_engine."""
    return _BACKENDS[engine.dialect.name](engine, schema, lock_timeout)


@contextmanager
def staged_part(
    url: str, schema: str | None, name: str, bandings: Sequence[int], part: int
) -> Iterator[StagedPart]:
    """The part ``part`` of the staged load ``name`` (see StagedLoad) of the index at ``url``
    (in ``schema``), for a task in a process of its own: committed when the block ends."""
    store = connect(url, schema)
    try:
        staged = store.staged_load(name, bandings)
        with staged.task() as connection:
            yield StagedPart(staged, connection, part)
    finally:
        store.close()
