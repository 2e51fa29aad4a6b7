"""Shared fixtures: a fresh database on every backend, and the test corpora.

PostgreSQL comes from SIMINDEX_TEST_POSTGRES_URL when set (CI points it at a local server),
else from testcontainers when a Docker engine answers, else its tests skip with the reason.
SIMINDEX_TEST_REQUIRE_POSTGRES=1 (set by .ci/run) turns that skip into a failure.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

REPO = Path(__file__).resolve().parent.parent
NEWS = REPO / "examples" / "news.jsonl"
REUTERS = REPO.parent / "shared" / "data" / "reuters21578.jsonl.gz"
BACKENDS = ["sqlite", "postgresql"]

_postgres: dict[str, object] = {}


def _postgres_admin_url() -> str:
    """A URL of a PostgreSQL server where test databases may be created, or skip/fail."""
    if "url" in _postgres:
        return _postgres["url"]  # type: ignore[return-value]
    url = os.environ.get("SIMINDEX_TEST_POSTGRES_URL")
    reason = "SIMINDEX_TEST_POSTGRES_URL is not set"
    if not url:
        try:
            from testcontainers.postgres import PostgresContainer

            container = PostgresContainer("postgres:15", driver="psycopg")
            container.start()
            _postgres["container"] = container
            url = container.get_connection_url()
        except Exception as exc:  # no Docker engine, no image, ...
            reason += f" and testcontainers could not start PostgreSQL ({type(exc).__name__})"
            url = None
    if not url:
        if os.environ.get("SIMINDEX_TEST_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here but unavailable: {reason}")
        pytest.skip(f"no PostgreSQL: {reason}")
    _postgres["url"] = url
    return url


def pytest_report_header(config) -> str:
    url = os.environ.get("SIMINDEX_TEST_POSTGRES_URL")
    source = url if url else "testcontainers (if Docker answers), else skipped"
    return f"simindex backends: sqlite, postgresql via {source}"


def pytest_sessionfinish(session, exitstatus) -> None:
    container = _postgres.get("container")
    if container is not None:
        container.stop()  # type: ignore[attr-defined]


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path) -> Iterator[str]:
    """The URL of a fresh, empty database, once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'index.db'}"
        return
    yield from _fresh_postgres_database()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database (for PostgreSQL-only tests)."""
    yield from _fresh_postgres_database()


def _fresh_postgres_database() -> Iterator[str]:
    admin_url = sa.make_url(_postgres_admin_url()).set(drivername="postgresql+psycopg")
    name = f"simindex_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(scope="session")
def news() -> list[tuple[str, str, dict]]:
    """The shipped sample corpus: 100 news stories with planted near-duplicates."""
    rows = [json.loads(line) for line in NEWS.read_text(encoding="utf-8").splitlines()]
    return [(r["id"], r["text"], {"source": r["source"], "title": r["title"]}) for r in rows]


@pytest.fixture(scope="session")
def reuters() -> list[tuple[str, str]]:
    """The 21,578 Reuters-21578 stories (read from ../shared; skipped when absent)."""
    if not REUTERS.exists():
        pytest.skip(f"{REUTERS} is not here (it is not shipped with simindex)")
    with gzip.open(REUTERS, "rt", encoding="utf-8") as lines:
        return [(str(r["id"]), r["text"]) for r in map(json.loads, lines)]


# Compiles every kernel in a fresh interpreter, from an empty cache as after install; prints
# whether the cache then holds them all, and how many there are.
COMPILE_FROM_EMPTY = """
from simindex.cli.kernels import compile_kernels
from simindex.pipeline import kernels
assert not kernels.kernels_cached()
compile_kernels()
print(kernels.kernels_cached(), len(list(kernels._kernels())))
"""
# The suite's own first compile (see first_compile), when it made one.
FIRST_COMPILE: dict[str, subprocess.CompletedProcess] = {}


def compile_from_empty(environment: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", COMPILE_FROM_EMPTY], capture_output=True, text=True, env=environment
    )


@pytest.fixture(scope="session", autouse=True)
def first_compile() -> None:
    """When the session starts with numba's cache empty (a fresh clone, CI), the kernels are
    compiled as after install, in a fresh interpreter, before any test: the suite then uses
    that cache, and tests/cli/test_cli_startup.py checks that compile instead of making
    another (a minute and more on 2 cores)."""
    from simindex.pipeline import kernels

    if not kernels.kernels_cached():
        FIRST_COMPILE["result"] = compile_from_empty(dict(os.environ))
