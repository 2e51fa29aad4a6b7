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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from simindex.errors import InputError

Format = Literal["auto", "jsonl", "csv", "tsv"]
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
                   ".tsv": "tsv", ".txt": "tsv"}  # fmt: skip

Document = tuple[str, str, dict[str, Any] | None]

# Shingling one document takes about 20 bytes per character at its peak (code points,
# scratch hashes, copies of the text): 10 million characters is about 200 MB.
DEFAULT_MAX_CHARS = 10_000_000


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
    on_error: Callable[[InputError], None] | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Iterator[Document]:
    """Documents of a file ("-" is standard input, read as JSON lines unless fmt says):
    (external_id, text, the record's other fields or None).

    A bad record (malformed line, missing field, unusable id or text) raises InputError
    naming file and line, or, with ``on_error``, is handed to it and skipped. A file that
    can't be opened or decoded always raises.
    """
    for number, record in read_records(path, fmt, id_field, text_field, encoding, on_error):
        try:
            yield _document(path, number, record, id_field, text_field, max_chars)
        except InputError as error:
            if on_error is None:
                raise
            on_error(error)


def document_problem(
    external_id: object, text: object, max_chars: int = DEFAULT_MAX_CHARS
) -> str | None:
    """Why (external_id, text) can't be indexed, or None if it can."""
    if not isinstance(external_id, str) or not external_id:
        return f"a document id must be a non-empty string, got {external_id!r:.80}"
    if not isinstance(text, str):
        return f"the text of document {external_id!r} must be a string, got {type(text).__name__}"
    if len(text) > max_chars:
        return (
            f"document {external_id!r} has {len(text):,} characters, more than the limit of "
            f"{max_chars:,} (memory grows ~20 bytes per character); raise it with --max-chars "
            "/ max_chars, or split the document"
        )
    if "\x00" in text or "\x00" in external_id:
        return (
            f"document {external_id!r} holds a NUL character (U+0000), which PostgreSQL can't "
            "store in text; remove it from the input"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return (
            f"the text of document {external_id!r} holds a lone surrogate (e.g. a bad \\ud800 "
            "escape in JSON), which is not Unicode text"
        )
    return None


def read_records(
    path: str,
    fmt: Format = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    on_error: Callable[[InputError], None] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a file; an id<TAB>text line is {id_field: .., text_field: ..}.
    A malformed line raises InputError, or with ``on_error`` is handed to it and skipped."""
    report = on_error or _raise
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
                yield from _jsonl(path, lines, report)
            elif fmt == "csv":
                yield from _csv(path, lines, report)
            else:
                yield from _tsv(path, lines, id_field, text_field, report)
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


def _raise(error: InputError) -> None:
    raise error


def _jsonl(path: str, lines, report) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            report(InputError(f"{path}:{number}: not valid JSON ({exc.msg})"))
            continue
        if not isinstance(record, dict):
            report(
                InputError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            )
            continue
        yield number, record


def _csv(path: str, lines, report) -> Iterator[tuple[int, dict[str, Any]]]:
    csv.field_size_limit(sys.maxsize)
    reader = csv.DictReader(lines, strict=True)
    try:
        for record in reader:
            if None in record:
                report(InputError(f"{path}:{reader.line_num}: more fields than the header has"))
                continue
            yield reader.line_num, record
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None


def _tsv(
    path: str, lines, id_field: str, text_field: str, report
) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if not line:
            continue
        external_id, tab, text = line.partition("\t")
        if not tab or not external_id:
            report(InputError(f"{path}:{number}: expected id<TAB>text with a non-empty id"))
            continue
        yield number, {id_field: external_id, text_field: text}


def record_id(record: dict[str, Any], id_field: str) -> str:
    """The external id of a record as indexed (numbers become their decimal text)."""
    value = record.get(id_field)
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _document(
    path: str, number: int, record: dict, id_field: str, text_field: str, max_chars: int
) -> Document:
    for field in (id_field, text_field):
        if field not in record:
            raise InputError(
                f"{path}:{number}: no {field!r} field (fields: {', '.join(map(str, record))}); "
                "choose the fields with --id-field / --text-field"
            )
    external_id, text = record_id(record, id_field), record[text_field]
    problem = document_problem(external_id, text, max_chars)
    if problem:
        raise InputError(f"{path}:{number}: {problem}")
    metadata = {k: v for k, v in record.items() if k not in (id_field, text_field)}
    return external_id, text, metadata or None
