"""Records out: CSV, JSON lines, id<TAB>text or Parquet, to a file or standard output.

Parquet needs pyarrow (``pip install simindex[parquet]``); it is written in row groups, so
memory stays bounded by the group size.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import IO, Any

from simindex.errors import InputError, SimindexError

FORMATS = ("csv", "jsonl", "tsv", "parquet")
_PARQUET_ROWS = 50_000


def write_records(
    records: Iterable[dict[str, Any]],
    fields: list[str],
    fmt: str,
    path: str | None = None,
    id_field: str = "id",
    text_field: str = "text",
) -> int:
    """Write records (dicts; ``fields`` gives the CSV/Parquet columns) and return how many.
    No path: standard output (not for Parquet). A path ending in .gz is gzipped (text
    formats). tsv writes ``record[id_field]<TAB>record[text_field]``."""
    if fmt not in FORMATS:
        raise InputError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        if path is None:
            raise InputError("Parquet needs an output file: pass -o FILE.parquet")
        return _write_parquet(iter(records), fields, path)
    count = 0
    with _text_output(path) as stream:
        writer = csv.DictWriter(stream, fields, extrasaction="ignore") if fmt == "csv" else None
        if writer:
            writer.writeheader()
        for record in records:
            if writer:
                writer.writerow(record)
            elif fmt == "jsonl":
                stream.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            else:
                stream.write(f"{record[id_field]}\t{record[text_field]}\n")
            count += 1
    return count


@contextmanager
def _text_output(path: str | None) -> Iterator[IO[str]]:
    if path is None:
        yield sys.stdout
        return
    try:
        opener = gzip.open if path.endswith(".gz") else open
        stream = opener(path, "wt", newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: can't write: {exc.strerror}") from None
    with stream:
        yield stream


def _write_parquet(records: Iterator[dict[str, Any]], fields: list[str], path: str) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise SimindexError(
            "Parquet output needs pyarrow: pip install 'simindex[parquet]'"
        ) from None
    count, writer = 0, None
    try:
        while chunk := list(islice(records, _PARQUET_ROWS)):
            columns = {f: [_plain(r.get(f)) for r in chunk] for f in fields}
            table = pa.table(columns)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table.cast(writer.schema))
            count += len(chunk)
        if writer is None:  # no records: still a valid, empty file
            pq.write_table(pa.table({f: pa.array([], pa.string()) for f in fields}), path)
    finally:
        if writer is not None:
            writer.close()
    return count


def _plain(value: Any) -> Any:
    """Nested values (metadata) as JSON text, so every row of a column has one type."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value
