"""Input files as a Spark DataFrame of documents, read and validated by simindex.readers.

Each file is read by one task, in Python, with the readers ``ingest`` and ``dedup`` use:
the same formats (JSON lines, CSV, id<TAB>text, Parquet; gzip and zstd), the same checks
(readers.read_checked) and the same messages. Spark's own JSON reader is not used: it
silently turns a lone surrogate escape (``"\\ud800"``) into ``?``, where simindex refuses
the record. A corpus of many shards reads in parallel; one large file reads in one task.

Every document gets a number, ``doc``: its file's position among the inputs times 2^40 plus
its line (or row) number, so ``doc`` order is input order (what ``--keep earliest``
means) and a recomputed partition numbers its documents alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from simindex.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

# A file's records are numbered below 2^40; 2^23 files fit beside that in a long.
LINE_BITS = 40
MAX_FILES = 1 << (63 - LINE_BITS)
# Documents per Arrow batch handed to Spark.
BATCH_ROWS = 5_000

SCHEMA = "doc long, id string, text string, record string, problem string, fatal boolean"


def read_files(
    spark: SparkSession,
    paths: list[str],
    *,
    fmt: str = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    max_chars: int | None = None,
) -> DataFrame:
    """The documents of ``paths`` (files, as readers.expand_inputs lists them), one
    partition a file.

    Columns: ``doc`` (long, input order, see the module docstring), ``id``, ``text``,
    ``record`` (the record as read, as a JSON object: what an output writes back),
    ``problem`` (why a record is no document, as ``ingest`` says it: a row with a problem
    has only ``doc``, ``problem`` and ``fatal``), ``fatal`` (the file could not be read at all:
    never skipped, as in ``ingest``).
    """
    return files(spark, paths).mapInArrow(
        reader(
            fmt=fmt, id_field=id_field, text_field=text_field, encoding=encoding,
            max_chars=max_chars,
        ),
        SCHEMA,
    )  # fmt: skip


def files(spark: SparkSession, paths: list[str]) -> DataFrame:
    """``file`` (its position) and ``path`` of each input, one partition a file."""
    if len(paths) > MAX_FILES:
        raise InputError(f"{len(paths):,} input files are more than the {MAX_FILES:,} supported")
    listed = spark.sparkContext.parallelize(list(enumerate(paths)), max(len(paths), 1))
    return spark.createDataFrame(listed, "file long, path string")


def reader(
    *,
    fmt: str = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    max_chars: int | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A task's function from batches of :func:`files` to batches of documents (SCHEMA, as
    :func:`read_files` describes them): to read in the same Python task that goes on with
    the documents, without handing them to Spark in between."""
    from simindex.readers import DEFAULT_MAX_CHARS

    options = {
        "fmt": fmt,
        "id_field": id_field,
        "text_field": text_field,
        "encoding": encoding,
        "max_chars": DEFAULT_MAX_CHARS if max_chars is None else max_chars,
    }

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for file, path in zip(
                batch.column("file").to_pylist(), batch.column("path").to_pylist(), strict=True
            ):
                yield from _read_file(file, path, **options)

    return read


def _read_file(file: int, path: str, **options) -> Iterator[pa.RecordBatch]:
    from simindex.readers import read_checked

    rows: list[tuple] = []

    def bad(error: InputError, fatal: bool = False) -> None:
        # A bad record is numbered by the line its message names ("path:line: ..."), so
        # the first in input order is the one reported.
        line = str(error)[len(path) + 1 :].partition(":")[0]
        doc = (file << LINE_BITS) | int(line) if line.isdigit() and not fatal else None
        rows.append((doc, None, None, None, str(error), fatal))

    try:
        for number, record, (external_id, text, _) in read_checked(path, on_error=bad, **options):
            if number >= 1 << LINE_BITS:
                raise InputError(f"{path}: holds more than 2^{LINE_BITS} records; split it")
            doc = (file << LINE_BITS) | number
            rows.append(
                (doc, external_id, text, json.dumps(record, ensure_ascii=False), None, False)
            )
            if len(rows) >= BATCH_ROWS:
                yield _batch(rows)
                rows.clear()
    except InputError as error:  # the file itself can't be read: never skipped
        bad(error, fatal=True)
    if rows:
        yield _batch(rows)


def _batch(rows: list[tuple]) -> pa.RecordBatch:
    import pyarrow as pa

    names = ("doc", "id", "text", "record", "problem", "fatal")
    types = (pa.int64(), pa.string(), pa.string(), pa.string(), pa.string(), pa.bool_())
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=list(names)
    )
