"""Input files to (external_id, text, metadata) documents: JSON lines, CSV, id<TAB>text.

gzip is detected by its magic bytes. Every problem is an InputError that names the file
and line, so the CLI can say exactly where an input went wrong.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from simindex.errors import InputError

Format = Literal["auto", "jsonl", "csv", "tsv"]
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
                   ".tsv": "tsv", ".txt": "tsv"}  # fmt: skip

Document = tuple[str, str, dict[str, Any] | None]


def detect_format(path: str, default: str | None = None) -> str:
    """The format a file name says (.jsonl, .csv, .tsv ...; .gz is looked through)."""
    suffixes = [s for s in Path(path).suffixes if s != ".gz"]
    fmt = _SUFFIX_FORMATS.get(suffixes[-1].lower()) if suffixes else None
    fmt = fmt or default
    if fmt is None:
        raise InputError(
            f"{path}: can't tell the format from the name; pass --format jsonl|csv|tsv"
        )
    return fmt


def read_documents(
    path: str,
    fmt: Format = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
) -> Iterator[Document]:
    """Documents of a file ("-" is standard input, read as JSON lines unless fmt says):
    (external_id, text, the record's other fields or None)."""
    for number, record in read_records(path, fmt, id_field, text_field, encoding):
        yield _document(path, number, record, id_field, text_field)


def read_records(
    path: str,
    fmt: Format = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a file; an id<TAB>text line is {id_field: .., text_field: ..}."""
    if fmt == "auto":
        fmt = "jsonl" if path == "-" else detect_format(path)  # type: ignore[assignment]
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise InputError(f"unknown encoding {encoding!r}") from None
    with _open(path) as raw:
        lines = io.TextIOWrapper(raw, encoding=encoding, newline="")
        try:
            if fmt == "jsonl":
                yield from _jsonl(path, lines)
            elif fmt == "csv":
                yield from _csv(path, lines)
            else:
                yield from _tsv(path, lines, id_field, text_field)
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{path}: is not valid {encoding} ({exc.reason} at byte {exc.start} of a block); "
                "pass --encoding (e.g. --encoding latin-1) to read it"
            ) from None


def _open(path: str):
    if path == "-":
        stream = sys.stdin.buffer
    else:
        try:
            stream = open(path, "rb")  # noqa: SIM115 (closed by the caller's with)
        except OSError as exc:
            raise InputError(f"{path}: can't open: {exc.strerror}") from None
    peek = stream.peek(2)[:2] if hasattr(stream, "peek") else b""
    return gzip.GzipFile(fileobj=stream) if peek == b"\x1f\x8b" else stream


def _jsonl(path: str, lines) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InputError(
                f"{path}:{number}: expected a JSON object, got {type(record).__name__}"
            )
        yield number, record


def _csv(path: str, lines) -> Iterator[tuple[int, dict[str, Any]]]:
    csv.field_size_limit(sys.maxsize)
    reader = csv.DictReader(lines, strict=True)
    try:
        for record in reader:
            if None in record:
                raise InputError(f"{path}:{reader.line_num}: more fields than the header has")
            yield reader.line_num, record
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None


def _tsv(path: str, lines, id_field: str, text_field: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if not line:
            continue
        external_id, tab, text = line.partition("\t")
        if not tab:
            raise InputError(f"{path}:{number}: expected id<TAB>text, found no tab")
        if not external_id:
            raise InputError(f"{path}:{number}: the id (before the tab) is empty")
        yield number, {id_field: external_id, text_field: text}


def record_id(record: dict[str, Any], id_field: str) -> str:
    """The external id of a record as indexed (numbers become their decimal text)."""
    value = record.get(id_field)
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _document(path: str, number: int, record: dict, id_field: str, text_field: str) -> Document:
    for field in (id_field, text_field):
        if field not in record:
            raise InputError(
                f"{path}:{number}: no {field!r} field (fields: {', '.join(map(str, record))}); "
                "choose the fields with --id-field / --text-field"
            )
    external_id, text = record_id(record, id_field), record[text_field]
    if not isinstance(external_id, str) or not external_id:
        raise InputError(f"{path}:{number}: the id must be a non-empty string or number")
    if not isinstance(text, str):
        raise InputError(f"{path}:{number}: the text of {external_id!r} is not a string")
    metadata = {k: v for k, v in record.items() if k not in (id_field, text_field)}
    return external_id, text, metadata or None
