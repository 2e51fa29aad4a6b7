"""Input files as a Spark DataFrame of documents, read and validated by simindex.io.readers.

Files are read in Python, with the readers ``ingest`` and ``dedup`` use: the same formats
(JSON lines, CSV, id<TAB>text, Parquet; gzip and zstd), the same checks
(readers.read_checked) and the same messages. Spark's own JSON reader is not used: it
silently turns a lone surrogate escape (``"\\ud800"``) into ``?``, where simindex refuses
the record.

A task reads a part of SPLIT_BYTES of an uncompressed JSON-lines or id<TAB>text file in
UTF-8 (readers.span_size), or a whole file of another kind: a compressed file can't be
entered in the middle, a CSV field may hold a line break, and a Parquet file is read by
its own reader, whole (its row groups could be shared out; they are not). The line
numbers of a file's parts come from one pass that counts each part's lines, so a message
names the file and line as for a file read whole. The records of a whole file that may
hold more than SPLIT_BYTES of text are spread over partitions right after reading
(:func:`read_files`), so no partition has to hold a large file's records.

Every document gets a number, ``doc``: its file's position among the inputs times 2^40 plus
its line (or row) number, so ``doc`` order is input order (what ``--keep earliest``
means) and a recomputed partition numbers its documents alike. A record read with U+FFFD
for bytes that are not in the encoding (``encoding_errors="replace"``) is flagged
``replaced``, so a job counts them as ``ingest`` does (:func:`replaced_records`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from simindex.errors import InputError
from simindex.io.lines import ReplacedRecords

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from simindex.io.delimited import CsvLayout
    from simindex.policies import EncodingErrors

# A file's records are numbered below 2^40; 2^23 files fit beside that in a long.
LINE_BITS = 40
LINE_MASK = (1 << LINE_BITS) - 1
MAX_FILES = 1 << (63 - LINE_BITS)
# Documents per Arrow batch handed to Spark.
BATCH_ROWS = 5_000
# Bytes of a file a task reads (a part's persisted records must fit a share of the JVM's
# heap: a 108 MB file, 125,000 documents, in one partition did not fit 2 GB).
SPLIT_BYTES = 32 << 20
# The text a compressed (or Parquet, CSV ...) file may hold: up to this many times its size.
EXPANSION = 4
# A part of the inputs: file (its position), path, readers.Span (start, stop, line) or
# None (the whole file), and the bytes of text it may hold.
Part = tuple[int, str, tuple[int, int, int] | None, int]

SCHEMA = (
    "doc long, id string, text string, record string, problem string, fatal boolean, "
    "replaced boolean"
)


def read_files(
    spark: SparkSession,
    paths: list[str],
    *,
    fmt: str = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    max_chars: int | None = None,
    split_bytes: int = SPLIT_BYTES,
    csv_layout: CsvLayout | None = None,
    encoding_errors: EncodingErrors = "strict",
) -> DataFrame:
    """The documents of ``paths`` (files, as readers.expand_inputs lists them), in
    partitions of about ``split_bytes`` of input (see the module docstring).

    Columns: ``doc`` (long, input order, see the module docstring), ``id``, ``text``,
    ``record`` (the record as read, as a JSON object whose text field is null: with
    ``text`` in it, what an output writes back; the text is not kept twice),
    ``problem`` (why a record is no document, as ``ingest`` says it: a row with a problem
    has only ``doc``, ``problem`` and ``fatal``), ``fatal`` (the file could not be read at all:
    never skipped, as in ``ingest``), ``replaced`` (the record was read with U+FFFD).
    ``csv_layout`` and ``encoding_errors``: as simindex.io.readers.read_records takes them.
    """
    found = parts(spark, paths, fmt=fmt, encoding=encoding, split_bytes=split_bytes)
    records = files(spark, found).mapInArrow(
        reader(
            fmt=fmt, id_field=id_field, text_field=text_field, encoding=encoding,
            max_chars=max_chars, csv_layout=csv_layout, encoding_errors=encoding_errors,
        ),
        SCHEMA,
    )  # fmt: skip
    if any(span is None and size > split_bytes for _, _, span, size in found):
        # A large file read whole: its records to partitions of about split_bytes before
        # anything persists them (by doc: the same partitions if recomputed).
        total = sum(size for *_, size in found)
        records = records.repartition(-(-total // split_bytes), "doc")
    return records


def parts(
    spark: SparkSession,
    paths: list[str],
    *,
    fmt: str = "auto",
    encoding: str = "utf-8",
    split_bytes: int = SPLIT_BYTES,
) -> list[Part]:
    """The parts the files are read in (see the module docstring), in input order; a Spark
    job counts the lines of the parts of split files."""
    from simindex.io.readers import span_size

    if len(paths) > MAX_FILES:
        raise InputError(f"{len(paths):,} input files are more than the {MAX_FILES:,} supported")
    found: list[Part] = []
    for file, path in enumerate(paths):
        size = span_size(path, fmt, encoding)
        if size is None or size <= split_bytes:
            whole = _size(path) * (1 if size is not None else EXPANSION)
            found.append((file, path, None, whole))
            continue
        for start in range(0, size, split_bytes):
            stop = min(start + split_bytes, size)
            found.append((file, path, (start, stop, 0), stop - start))
    # Line numbers: a file's first part starts at line 1, the next after its lines.
    counted = [(path, span) for _, path, span, _ in found if span is not None]
    counts = iter(
        spark.sparkContext.parallelize(counted, max(len(counted), 1)).map(_count_lines).collect()
        if counted
        else []
    )
    numbered: list[Part] = []
    line = 1
    for file, path, span, size in found:
        if span is not None:
            line = 1 if span[0] == 0 else line
            numbered.append((file, path, (span[0], span[1], line), size))
            line += next(counts)
        else:
            numbered.append((file, path, span, size))
    return numbered


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # reading it says why


def _count_lines(part: tuple[str, tuple[int, int, int]]) -> int:
    from simindex.io.readers import span_lines

    path, (start, stop, _) = part
    with open(path, "rb") as raw:
        return sum(1 for _ in span_lines(raw, start, stop))


def files(spark: SparkSession, found: list[Part]) -> DataFrame:
    """``file``, ``path``, and ``start``, ``stop`` and ``line`` of the span (null: the whole
    file) of each of :func:`parts`, one partition a part."""
    rows = [(file, path, *(span or (None, None, None))) for file, path, span, _ in found]
    listed = spark.sparkContext.parallelize(rows, max(len(rows), 1))
    return spark.createDataFrame(listed, "file long, path string, start long, stop long, line long")


def reader(
    *,
    fmt: str = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    max_chars: int | None = None,
    csv_layout: CsvLayout | None = None,
    encoding_errors: EncodingErrors = "strict",
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A task's function from batches of :func:`files` to batches of documents (SCHEMA, as
    :func:`read_files` describes them): to read in the same Python task that goes on with
    the documents, without handing them to Spark in between."""
    from simindex.pipeline.documents import DEFAULT_MAX_CHARS

    options = {
        "fmt": fmt,
        "id_field": id_field,
        "text_field": text_field,
        "encoding": encoding,
        "max_chars": DEFAULT_MAX_CHARS if max_chars is None else max_chars,
        "csv_layout": csv_layout,
        "encoding_errors": encoding_errors,
    }

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns = [
                batch.column(c).to_pylist() for c in ("file", "path", "start", "stop", "line")
            ]
            for file, path, *span in zip(*columns, strict=True):
                yield from _read_file(
                    file, path, None if span[0] is None else tuple(span), **options
                )

    return read


def _read_file(
    file: int, path: str, span: tuple[int, int, int] | None, **options
) -> Iterator[pa.RecordBatch]:
    from simindex.io.readers import read_checked

    rows: list[tuple] = []
    text_free = {options["text_field"]: None}
    # Lines read with U+FFFD whose row is not made yet: the readers tell of a line before
    # they yield or report its record.
    replaced: set[int] = set()

    def add(doc: int | None, *values: object) -> None:
        line = -1 if doc is None else doc & LINE_MASK
        rows.append((doc, *values, line in replaced))
        replaced.discard(line)

    def bad(error: InputError, fatal: bool = False) -> None:
        # A bad record is numbered by the line its message names ("path:line: ..."), so
        # the first in input order is the one reported.
        line = str(error)[len(path) + 1 :].partition(":")[0]
        doc = (file << LINE_BITS) | int(line) if line.isdigit() and not fatal else None
        add(doc, None, None, None, str(error), fatal)

    try:
        for number, record, (external_id, text, _) in read_checked(
            path, on_error=bad, span=span, on_replaced=lambda _, line: replaced.add(line),
            **options,
        ):  # fmt: skip
            if number >= 1 << LINE_BITS:
                raise InputError(f"{path}: holds more than 2^{LINE_BITS} records; split it")
            record_text = json.dumps(record | text_free, ensure_ascii=False)
            add((file << LINE_BITS) | number, external_id, text, record_text, None, False)
            if len(rows) >= BATCH_ROWS:
                yield _batch(rows)
                rows.clear()
    except InputError as error:  # the file itself can't be read: never skipped
        bad(error, fatal=True)
    if rows:
        yield _batch(rows)


def _batch(rows: list[tuple]) -> pa.RecordBatch:
    import pyarrow as pa

    names = ("doc", "id", "text", "record", "problem", "fatal", "replaced")
    types = (
        pa.int64(), pa.string(), pa.string(), pa.string(), pa.string(), pa.bool_(), pa.bool_(),
    )  # fmt: skip
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=list(names)
    )


def replaced_records(paths: list[str], count: int, first: int | None) -> ReplacedRecords:
    """The tally ``ingest`` reports of ``count`` records read with U+FFFD, the first of them
    document ``first`` (a ``doc``) of the input files ``paths``."""
    where = None if first is None else f"{paths[first >> LINE_BITS]}:{first & LINE_MASK}"
    return ReplacedRecords(count, where)


def replaced_in(records: DataFrame, paths: list[str]) -> ReplacedRecords:
    """The records of :func:`read_files` (of ``paths``) read with U+FFFD, counted."""
    from pyspark.sql import functions as F

    count, first = records.filter("replaced").agg(F.count("*"), F.min("doc")).first()
    return replaced_records(paths, count, first)


def batch_replaced(batch: pa.RecordBatch) -> tuple[int, int | None]:
    """(records read with U+FFFD, the first one's ``doc`` or None) of a batch of
    :func:`reader`'s, for a :class:`FirstReplaced` accumulator."""
    import pyarrow.compute as pc

    flagged = batch["doc"].filter(batch["replaced"])
    return len(flagged), pc.min(flagged).as_py() if len(flagged) else None


class FirstReplaced:
    """A Spark accumulator's arithmetic (pyspark's AccumulatorParam) over (records read
    with U+FFFD, the smallest ``doc`` among them or None): for a job whose records never
    come back to the driver, like a Spark ingest's."""

    def zero(self, _value: tuple[int, int | None]) -> tuple[int, int | None]:
        return 0, None

    def addInPlace(
        self, a: tuple[int, int | None], b: tuple[int, int | None]
    ) -> tuple[int, int | None]:
        firsts = [doc for doc in (a[1], b[1]) if doc is not None]
        return a[0] + b[0], min(firsts, default=None)
