"""The Spark session simindex's jobs run in, and the environment its Python workers need.

Spark starts Python workers from the JVM, which inherits this process's environment (local
mode) or takes ``spark.executorEnv.*`` (a cluster). The workers must run the interpreter that
has simindex installed (PYSPARK_PYTHON), and numba must use one thread in each of them: Spark
already runs one task per core, and a numba thread pool per task would oversubscribe the cores.
They share numba's kernel cache: the package's own __pycache__ by default (every process on a
machine sees it), or NUMBA_CACHE_DIR when the driver sets it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from simindex.errors import SimindexError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Set for the workers; the driver's own numba keeps its threads.
WORKER_ENV = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def import_pyspark() -> None:
    """Import pyspark, or say how to install it (one line, no traceback)."""
    try:
        import pandas  # noqa: F401  (pyspark's Arrow functions need it)
        import pyspark  # noqa: F401
    except ImportError as error:
        raise SimindexError(
            f"Spark support needs {error.name}: pip install 'simindex[spark]' "
            "(and Java 17 or later on the PATH)"
        ) from None


def worker_environment() -> dict[str, str]:
    """Environment variables the Python workers need (see the module docstring)."""
    env = dict(WORKER_ENV)
    env["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    if "NUMBA_CACHE_DIR" in os.environ:
        env["NUMBA_CACHE_DIR"] = os.environ["NUMBA_CACHE_DIR"]
    return env


def session(master: str | None = None, app_name: str = "simindex") -> SparkSession:
    """The active Spark session (a notebook's, left as it is), or a new one on ``master``
    (default ``local[*]``) set up for simindex: workers on this interpreter with single-threaded
    numba, loopback networking unless SPARK_LOCAL_IP says otherwise, Arrow batches, adaptive
    partitions after a persist, no web UI, no console progress bar (it would interleave with
    simindex's own), and warnings-only logs.
    """
    import_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    if "JAVA_HOME" not in os.environ and shutil.which("java") is None:
        raise SimindexError(
            "Spark needs Java 17 or later: install it (e.g. apt-get install openjdk-17-jre) "
            "or set JAVA_HOME"
        )
    workers = worker_environment()
    os.environ["PYSPARK_PYTHON"] = workers["PYSPARK_PYTHON"]
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master or "local[*]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        # Let adaptive execution coalesce a persisted shuffle's partitions too, or each of
        # spark.sql.shuffle.partitions (200) small partitions costs a Python task.
        .config("spark.sql.optimizer.canChangeCachedPlanOutputPartitioning", "true")
    )
    for name, value in workers.items():
        builder = builder.config(f"spark.executorEnv.{name}", value)
    # In local mode the workers are forked from this process's environment.
    saved = {name: os.environ.get(name) for name in WORKER_ENV}
    os.environ.update(WORKER_ENV)
    try:
        spark = builder.getOrCreate()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    spark.sparkContext.setLogLevel("WARN")
    return spark


@contextmanager
def job_errors() -> Iterator[None]:
    """A Spark job that failed in the JVM (py4j's errors: an uncaught Java exception, a
    JVM that died, e.g. of a java.lang.OutOfMemoryError, whose message can then no longer be
    fetched) as one SimindexError, not py4j's chain of tracebacks. A task's Python error
    keeps its traceback: that is simindex's to fix."""
    try:
        from py4j.protocol import Py4JError
    except ImportError:  # no pyspark: session() says how to install it
        yield
        return
    try:
        yield
    except Py4JError as error:
        try:
            detail = str(error).strip().splitlines()[0]
        except Exception:  # the text lives in the JVM, which may be gone
            detail = "the Java side stopped answering"
        raise SimindexError(
            f"the Spark job failed: {detail}. Spark's log above says why; a "
            "java.lang.OutOfMemoryError there needs more memory (spark.driver.memory, e.g. "
            "PYSPARK_SUBMIT_ARGS='--driver-memory 4g pyspark-shell')"
        ) from None
