"""A Spark session (local[2]) shared by the Spark tests; they skip without pyspark or Java,
except where SIMINDEX_TEST_REQUIRE_SPARK=1 (set by .ci/run) makes that a failure."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest


def _unavailable() -> str | None:
    try:
        import pandas  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as error:
        return f"{error.name} is not installed (pip install 'simindex[spark]')"
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        return "no Java on the PATH (Spark needs Java 17 or later)"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    reason = _unavailable()
    if reason:
        if os.environ.get("SIMINDEX_TEST_REQUIRE_SPARK") == "1":
            pytest.fail(f"Spark is required here (SIMINDEX_TEST_REQUIRE_SPARK=1): {reason}")
        pytest.skip(reason)
    from simindex.spark.session import session

    spark = session("local[2]", app_name="simindex-tests")
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    yield spark
    spark.stop()
