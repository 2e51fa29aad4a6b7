"""All SQL: a dialect-neutral Store (base.py) and one subclass per backend (sqlite.py,
postgres.py), picked from the URL by connect(); the band-key writer (bandkeys.py), staging
for loads by many writers (staging.py), URLs and engines (urls.py), the tables (schema.py)
and their migrations (migrate.py)."""

from simindex.defaults import DEFAULT_LOCK_TIMEOUT
from simindex.store import migrate
from simindex.store.bandkeys import BandKeyWriter
from simindex.store.base import Store
from simindex.store.connect import connect, staged_part, store_of
from simindex.store.postgres import DROP_LOCK_TIMEOUT_MS, PostgresStore
from simindex.store.sqlite import SQLiteStore
from simindex.store.staging import StagedLoad, StagedMove, StagedPart
from simindex.store.urls import (
    DEFAULT_PATH,
    create_engine,
    database_files,
    database_url,
    display_url,
)

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_PATH",
    "DROP_LOCK_TIMEOUT_MS",
    "BandKeyWriter",
    "PostgresStore",
    "SQLiteStore",
    "StagedLoad",
    "StagedMove",
    "StagedPart",
    "Store",
    "connect",
    "create_engine",
    "database_files",
    "database_url",
    "display_url",
    "migrate",
    "staged_part",
    "store_of",
]
