"""Records out: CSV, JSON lines, id<TAB>text or Parquet, to a file or standard output.

The format follows the file name (:func:`output_format`). Every format reads back through
simindex.io.readers as written: CSV is quoted where needed, id<TAB>text escaped as
simindex.io.delimited says. Files are written atomically (simindex.io.outputs): a failed or
killed write leaves no partial file. Parquet is written in row groups, so memory stays
bounded by the group size.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import IO, Any, BinaryIO

from simindex.errors import InputError
from simindex.io.delimited import tsv_escape
from simindex.io.lines import shorten
from simindex.io.outputs import atomic_output
from simindex.io.readers import format_of_name, name_suffix

FORMATS = ("csv", "jsonl", "tsv", "parquet")
_PARQUET_ROWS = 50_000


def output_format(path: str | None, fmt: str | None, default: str) -> str:
    """The format to write: the file name's (.csv, .jsonl, .tsv, .parquet ...; .gz and .zst
    looked through), unless ``fmt`` is given; ``default`` when neither says (standard
    output, or a name without a suffix). InputError for a name that says another format
    than ``fmt``, or, without ``fmt``, a suffix that is no format (``pairs.xlsx``)."""
    named = format_of_name(path) if path else None
    if fmt and named and fmt != named:
        raise InputError(
            f"{path}: the name says {named} but --format says {fmt}; rename the file or drop "
            "--format"
        )
    if not fmt and not named and path and name_suffix(path):
        raise InputError(
            f"{path}: can't write a {shorten(name_suffix(path), 20)} file: name the output "
            ".csv, .jsonl, .tsv or .parquet (.gz or .zst compresses the text formats)"
        )
    return fmt or named or default


def write_records(
    records: Iterable[dict[str, Any]],
    fields: list[str],
    fmt: str,
    path: str | None = None,
    id_field: str = "id",
    text_field: str = "text",
) -> int:
    """Write records (dicts; ``fields`` gives the CSV/Parquet columns) and return how many.
    No path: standard output (not for Parquet). A path ending in .gz or .zst is
    compressed (text formats). tsv writes ``record[id_field]<TAB>record[text_field]``,
    escaped (InputError when ``fields`` lack them)."""
    if fmt not in FORMATS:
        raise InputError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "tsv" and not {id_field, text_field} <= set(fields):
        raise InputError(
            f"id<TAB>text (tsv) holds {id_field!r} and {text_field!r}, these records have "
            f"{shorten(', '.join(fields))}; write csv, jsonl or parquet"
        )
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
                stream.write(
                    f"{tsv_escape(str(record[id_field]))}\t{tsv_escape(record[text_field])}\n"
                )
            count += 1
    return count


@contextmanager
def _text_output(path: str | None) -> Iterator[IO[str]]:
    if path is None:
        yield sys.stdout
        return
    with atomic_output(path) as raw:
        binary = _compressed(raw, path)
        stream = io.TextIOWrapper(binary, encoding="utf-8", newline="")
        yield stream
        stream.detach()  # flushes; the file itself is closed by atomic_output
        if binary is not raw:
            binary.close()  # ends the compressed stream (raw stays open)


def _compressed(raw: BinaryIO, path: str) -> BinaryIO:
    """``raw`` behind gzip or zstd compression when the name ends in .gz or .zst."""
    if path.endswith(".gz"):
        from isal import igzip  # ISA-L's deflate: standard gzip, several times zlib's speed

        return igzip.IGzipFile(fileobj=raw, mode="wb")  # type: ignore[return-value]
    if path.endswith(".zst"):
        import zstandard

        return zstandard.ZstdCompressor().stream_writer(raw, closefd=False)
    return raw


def _write_parquet(records: Iterator[dict[str, Any]], fields: list[str], path: str) -> int:
    import pyarrow as pa  # here, not at the top: the CLI starts without it
    import pyarrow.parquet as pq

    count, writer = 0, None
    with atomic_output(path) as stream:
        try:
            while chunk := list(islice(records, _PARQUET_ROWS)):
                columns = {f: [_plain(r.get(f)) for r in chunk] for f in fields}
                table = pa.table(columns)
                if writer is None:
                    writer = pq.ParquetWriter(stream, table.schema)
                writer.write_table(table.cast(writer.schema))
                count += len(chunk)
            if writer is None:  # no records: still a valid, empty file
                pq.write_table(pa.table({f: pa.array([], pa.string()) for f in fields}), stream)
        finally:
            if writer is not None:
                writer.close()
    return count


def _plain(value: Any) -> Any:
    """Nested values (metadata) as JSON text, so every row of a column has one type."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value
