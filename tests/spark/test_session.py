"""The session's Python workers run this interpreter with single-threaded numba."""

from __future__ import annotations

import sys


def test_workers_run_this_interpreter_with_one_numba_thread(spark) -> None:
    def probe(_):
        import os
        import sys

        import numba

        yield (sys.executable, numba.config.NUMBA_NUM_THREADS, os.environ.get("PYSPARK_PYTHON"))

    seen = set(spark.sparkContext.parallelize(range(4), 2).mapPartitions(probe).collect())
    assert seen == {(sys.executable, 1, sys.executable)}


def test_worker_environment_shares_the_drivers_numba_cache(monkeypatch) -> None:
    from simindex.spark.session import worker_environment

    monkeypatch.setenv("NUMBA_CACHE_DIR", "/somewhere/numba")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    env = worker_environment()
    assert env["NUMBA_CACHE_DIR"] == "/somewhere/numba"
    assert env["NUMBA_NUM_THREADS"] == "1"
    assert env["PYSPARK_PYTHON"] == sys.executable


def test_a_dead_jvm_is_one_error_naming_it() -> None:
    import pytest
    from py4j.protocol import Py4JNetworkError

    from simindex.errors import SimindexError
    from simindex.spark.session import job_errors

    class Unreadable(Py4JNetworkError):
        def __str__(self) -> str:  # as when the JVM that holds the message is gone
            raise ConnectionRefusedError

    with pytest.raises(SimindexError, match="the Java side stopped answering.*OutOfMemoryError"):
        with job_errors():
            raise Unreadable("gone")
