"""Input files to (external_id, text, metadata) documents: JSON lines, CSV, id<TAB>text,
Parquet.

The name says the format: .jsonl, .ndjson and .json are JSON lines, .csv CSV (see
simindex.io.delimited for its delimiter and header), .tsv and .txt id<TAB>text (escaped as
simindex.io.delimited says), .parquet Parquet; .gz and .zst are looked through. gzip and zstd
are detected by their magic bytes, Parquet on standard input too. A directory stands for its
files in the formats it can only be (.jsonl, .ndjson, .csv, .tsv, .parquet, compressed or
not; a .txt or .json file may be anything, so it is read only when named), a glob for its
matches, both in sorted order (:func:`scan_inputs` also lists what a directory's listing
left out). Text is decoded a record at a time (simindex.io.lines), so a byte that is not in
the encoding spoils only its record. Every problem is an InputError that names the file and
line (or Parquet row), so the CLI can say exactly where an input went wrong.
:func:`document_problem` is the one validation of a document, run before any database sees
it, so both backends accept and refuse the same records.
"""

from __future__ import annotations

import codecs
import glob
import gzip
import io
import json
import math
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

from isal import igzip
from isal.igzip_lib import IsalError

from simindex.errors import InputError, shorten
from simindex.io.delimited import CsvLayout, csv_records, tsv_records
from simindex.io.lines import (
    ENCODING_ERRORS,
    EncodingErrors,
    Line,
    ascii_compatible,
    byte_lines,
    decoded_lines,
    numbered_lines,
    stream_lines,
    text_encoding,
)
from simindex.pipeline.documents import DEFAULT_MAX_CHARS, document_problem

Format = Literal["auto", "jsonl", "csv", "tsv", "parquet"]
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv",
                   ".tsv": "tsv", ".txt": "tsv", ".parquet": "parquet"}  # fmt: skip
# The formats a directory's file is read in: the names that can't mean anything else.
_SHARD_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".tsv", ".parquet")
_SHARD_NAMES = f"{', '.join(_SHARD_SUFFIXES[:-1])} or {_SHARD_SUFFIXES[-1]} (compressed or not)"
_COMPRESSED = (".gz", ".zst")
_GZIP_MAGIC, _ZSTD_MAGIC, _PARQUET_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"PAR1"
# Rows of a Parquet file read at a time (a row group may be larger).
_PARQUET_BATCH = 10_000

Document = tuple[str, str, dict[str, Any] | None]
# Part of an uncompressed UTF-8 file of lines: (start, stop, line): the lines that start
# within bytes [start, stop), the first of them numbered ``line`` (see span_lines).
Span = tuple[int, int, int]
SPLITTABLE_FORMATS = ("jsonl", "tsv")
# A lone \r ends a line too, as it does for io.TextIOWrapper(newline="").
_LONE_CR = re.compile(rb"(?<=\r)(?!\n)")


def detect_format(path: str, default: str | None = None) -> str:
    """The format a file name says (.jsonl, .csv, .tsv, .parquet ...; .gz and .zst are
    looked through)."""
    fmt = format_of_name(path) or default
    if fmt is None:
        raise InputError(
            f"{path}: can't tell the format from the name; pass --format jsonl|csv|tsv|parquet"
        )
    return fmt


def spool_stdin(directory: str) -> str:
    """Save standard input to a file in ``directory`` (for a command that reads its input
    twice), named for its format: .parquet when it starts like Parquet, else .jsonl."""
    path = Path(directory) / "stdin"
    with open(path, "wb") as spool:
        shutil.copyfileobj(sys.stdin.buffer, spool)
    with open(path, "rb") as spooled:
        suffix = ".parquet" if spooled.read(4) == _PARQUET_MAGIC else ".jsonl"
    return str(path.rename(path.with_suffix(suffix)))


def format_of_name(path: str) -> str | None:
    """The format a file name says, or None."""
    suffix = name_suffix(path)
    return _SUFFIX_FORMATS.get(suffix) if suffix else None


def name_suffix(path: str) -> str | None:
    """The last suffix of a file name but .gz and .zst, lower-case (``.jsonl``), or None."""
    suffixes = [s for s in Path(path).suffixes if s not in _COMPRESSED]
    return suffixes[-1].lower() if suffixes else None


class InputFiles(NamedTuple):
    """What :func:`scan_inputs` found: the ``files`` to read, in order, and the entries of
    the named directories that were ``skipped``: files not named as a shard and
    subdirectories (ending in /; hidden entries aside)."""

    files: list[str]
    skipped: list[str]

    def note(self) -> str | None:
        """One line for the user about the skipped files, or None when none was."""
        if not self.skipped:
            return None
        names = shorten(", ".join(map(_entry_name, self.skipped)))
        return (
            f"skipped {len(self.skipped):,} file(s) of the directories not named {_SHARD_NAMES}: "
            f"{names}; name a file to read it"
        )


def _entry_name(path: str) -> str:
    """A skipped entry of a directory as a listing shows it: a subdirectory ends in /."""
    return Path(path).name + ("/" if path.endswith("/") else "")


def expand_inputs(paths: Iterable[str]) -> list[str]:
    """The files to read, as :func:`scan_inputs` lists them."""
    return scan_inputs(paths).files


def scan_inputs(paths: Iterable[str]) -> InputFiles:
    """The files the user named: a directory stands for its files named .jsonl, .ndjson,
    .csv, .tsv or .parquet (compressed or not; sorted), its other files and its
    subdirectories (hidden ones aside) are listed as skipped; a glob (``crawl/*.parquet``) stands for its matches (sorted); "-"
    is stdin. InputError for a directory with no such file or a glob with no match."""
    files: list[str] = []
    skipped: list[str] = []
    for path in paths:
        if path == "-" or Path(path).is_file():
            files.append(path)
        elif Path(path).is_dir():
            listed = sorted(p for p in Path(path).iterdir() if not p.name.startswith("."))
            shards = [
                str(p) for p in listed if p.is_file() and name_suffix(str(p)) in _SHARD_SUFFIXES
            ]
            # A directory stands for its own files: its subdirectories are named, not read.
            others = [str(p) + ("/" if p.is_dir() else "") for p in listed if str(p) not in shards]
            if not shards:
                held = shorten(", ".join(map(_entry_name, others)))
                raise InputError(
                    f"{path}: the directory holds no file named {_SHARD_NAMES}"
                    + (f", only {held}; name the files to read them" if others else "")
                )
            files.extend(shards)
            skipped.extend(others)
        elif any(c in path for c in "*?["):
            matches = sorted(p for p in glob.glob(path) if Path(p).is_file())
            if not matches:
                raise InputError(f"{path}: matches no file")
            files.extend(matches)
        else:
            files.append(path)  # opening it says what is wrong
    return InputFiles(files, skipped)


def read_documents(
    path: str,
    fmt: Format = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    on_error: Callable[[InputError], None] | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    *,
    csv_layout: CsvLayout | None = None,
    encoding_errors: EncodingErrors = "strict",
    on_replaced: Callable[[str, int], None] | None = None,
) -> Iterator[Document]:
    """Documents of a file ("-" is standard input, read as JSON lines unless fmt says or it
    is Parquet): (external_id, text, the record's other fields or None).

    A bad record (malformed line, bytes not in ``encoding``, missing field, unusable id,
    text or metadata) raises InputError naming file and line, or, with ``on_error``, is
    handed to it and skipped. A file that can't be opened, decompressed or (a UTF-16 or
    UTF-32 one) decoded always raises. ``csv_layout``, ``encoding_errors`` and
    ``on_replaced``: as :func:`read_records` takes them.
    """
    for _, _, document in read_checked(
        path, fmt, id_field, text_field, encoding, on_error, max_chars,
        csv_layout=csv_layout, encoding_errors=encoding_errors, on_replaced=on_replaced,
    ):  # fmt: skip
        yield document


def read_checked(
    path: str,
    fmt: Format = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    on_error: Callable[[InputError], None] | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    span: Span | None = None,
    *,
    csv_layout: CsvLayout | None = None,
    encoding_errors: EncodingErrors = "strict",
    on_replaced: Callable[[str, int], None] | None = None,
) -> Iterator[tuple[int, dict[str, Any], Document]]:
    """(line or row number, record as read, document) of each record of a file (or of a
    ``span`` of it) that makes a document; bad records as in read_documents, the other
    arguments as read_records takes them."""
    records = read_records(
        path, fmt, id_field, text_field, encoding, on_error, span,
        csv_layout=csv_layout, encoding_errors=encoding_errors, on_replaced=on_replaced,
    )  # fmt: skip
    for number, record in records:
        try:
            document = _document(path, number, record, id_field, text_field, max_chars)
        except InputError as error:
            if on_error is None:
                raise
            on_error(error)
            continue
        yield number, record, document


def read_records(
    path: str,
    fmt: Format = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    on_error: Callable[[InputError], None] | None = None,
    span: Span | None = None,
    *,
    csv_layout: CsvLayout | None = None,
    encoding_errors: EncodingErrors = "strict",
    on_replaced: Callable[[str, int], None] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line or row number, record) of a file; an id<TAB>text line is {id_field: ..,
    text_field: ..}. A malformed line or CSV row raises InputError, or with ``on_error`` is
    handed to it and skipped. A damaged file always raises InputError.

    Each record is decoded on its own (simindex.io.lines): one whose bytes are not in
    ``encoding`` is a bad record (naming its line), or with ``encoding_errors="replace"``
    is read with U+FFFD in their place and handed to ``on_replaced(path, line)`` (e.g. a
    simindex.io.lines.ReplacedRecords, which counts them). ``csv_layout``: a CSV file's
    delimiter and header (simindex.io.delimited.CsvLayout; default: found, with a header).

    ``span``: read only the lines of that part of the file (see :func:`span_lines`: an
    uncompressed UTF-8 file of JSON lines or id<TAB>text), numbered as in the whole file,
    so that several processes can share a large file."""
    report = on_error or _raise
    codec = text_encoding(encoding)
    if encoding_errors not in ENCODING_ERRORS:
        raise InputError(
            f"unknown encoding errors mode {shorten(repr(encoding_errors))}; choose "
            f"{' or '.join(ENCODING_ERRORS)}"
        )
    if span is not None:
        fmt = detect_format(path) if fmt == "auto" else fmt
        if fmt not in SPLITTABLE_FORMATS or codec != "utf-8":
            raise ValueError(f"a {fmt} file in {encoding} can't be read in parts")
    with _open(path) if span is None else _open_plain(path) as raw:
        if fmt == "auto":
            fmt = "parquet" if path == "-" and raw.peek(4)[:4] == _PARQUET_MAGIC else None
            fmt = fmt or ("jsonl" if path == "-" else detect_format(path))  # type: ignore[assignment]
        try:
            if fmt == "parquet":
                yield from _parquet(path, raw)
                return
            lines = _lines(path, raw, codec, encoding, encoding_errors, span)
            if fmt == "csv":
                yield from csv_records(
                    path, lines, csv_layout or CsvLayout(), id_field, text_field, encoding,
                    report, on_replaced,
                )  # fmt: skip
                return
            numbered = numbered_lines(
                path, lines, encoding, report, on_replaced, 1 if span is None else span[2]
            )
            if fmt == "jsonl":
                yield from _jsonl(path, numbered, report)
            else:
                yield from tsv_records(path, numbered, id_field, text_field, report)
        except UnicodeError as exc:  # e.g. utf-16 without a byte-order mark
            raise InputError(
                f"{path}: can't be read as {encoding} ({exc}); pass --encoding with the file's "
                "encoding (e.g. utf-16-le or utf-16-be when it has no byte-order mark)"
            ) from None
        except (EOFError, gzip.BadGzipFile, IsalError) as exc:
            raise InputError(
                f"{path}: is a damaged or truncated gzip file ({exc}); re-create or re-download it"
            ) from None
        except _ZstdError as exc:
            raise InputError(
                f"{path}: is a damaged or truncated zstd file ({exc}); re-create or re-download it"
            ) from None


def _lines(
    path: str,
    raw: io.BufferedIOBase,
    codec: str,
    encoding: str,
    errors: EncodingErrors,
    span: Span | None,
) -> Iterator[Line]:
    """The lines of a text file (or of its ``span``), each decoded on its own when the
    encoding allows it (see simindex.io.lines)."""
    if span is not None:
        # span_lines leaves out the file's byte-order mark alone, not one that starts a
        # later line.
        return decoded_lines(span_lines(raw, span[0], span[1]), codec, errors)
    if ascii_compatible(codec):
        return decoded_lines(byte_lines(path, raw, drop_bom=codec == "utf-8"), codec, errors)
    return stream_lines(path, raw, codec, encoding, errors)


def span_lines(raw: io.BufferedIOBase, start: int, stop: int) -> Iterator[bytes]:
    """The lines of a seekable file of lines that start within bytes [start, stop): from the
    first line start at or after ``start`` to the end of the line holding byte ``stop - 1``.
    Adjacent spans share no line and miss none. Lines end as io.TextIOWrapper(newline="")
    ends them (\\n, \\r\\n or a lone \\r), so a span's line numbers match the whole file's;
    the bytes must be UTF-8 (or another encoding in which these bytes are only line ends).
    A byte-order mark at the start of the file is left out."""
    position = max(start - 1, 0)
    raw.seek(position)
    if start:  # the rest of the line before the span: the previous span's
        position += len(raw.readline())
    while position < stop:
        line = raw.readline()
        if not line:
            return
        if position == 0 and line.startswith(codecs.BOM_UTF8):
            position, line = len(line), line[len(codecs.BOM_UTF8) :]
        else:
            position += len(line)
        if b"\r" in line:
            yield from (part for part in _LONE_CR.split(line) if part)
        else:
            yield line


def span_size(path: str, fmt: str, encoding: str) -> int | None:
    """The size in bytes of a file read_records can read in spans (uncompressed JSON lines or
    id<TAB>text in UTF-8, a regular file), else None (or when it can't be opened: reading it
    says why)."""
    try:
        fmt = detect_format(path) if fmt == "auto" else fmt
        if fmt not in SPLITTABLE_FORMATS or text_encoding(encoding) != "utf-8":
            return None
        with open(path, "rb") as raw:
            magic = raw.read(4)
            size = os.fstat(raw.fileno())
    except (InputError, OSError):
        return None
    if magic[:2] == _GZIP_MAGIC or magic == _ZSTD_MAGIC or not stat.S_ISREG(size.st_mode):
        return None
    return size.st_size


def _open_plain(path: str) -> io.BufferedIOBase:
    """An uncompressed file's bytes (for a span of it)."""
    raw = _open(path)
    if not isinstance(raw, io.BufferedReader) or not raw.seekable():
        raw.close()
        raise InputError(f"{path}: is compressed or not a regular file; it can't be read in parts")
    return raw


def _open(path: str) -> io.BufferedIOBase:
    """The file's bytes, decompressed when they start with gzip's or zstd's magic bytes."""
    if path == "-":
        stream = sys.stdin.buffer
    else:
        try:
            stream = open(path, "rb")  # noqa: SIM115 (closed by the caller's with)
        except OSError as exc:
            raise InputError(f"{path}: can't open: {exc.strerror}") from None
    if not hasattr(stream, "peek"):
        stream = io.BufferedReader(stream)
    magic = stream.peek(4)[:4]
    if magic[:2] == _GZIP_MAGIC:
        # ISA-L's inflate: the same gzip format at 2.7x zlib's speed (benchmarks/bench_read.py:
        # 0.35 s against 0.94 s of CPU for the 100k corpus's 100,000 lines).
        return igzip.IGzipFile(fileobj=stream)  # type: ignore[return-value]
    if magic == _ZSTD_MAGIC:
        return io.BufferedReader(_Zstd(stream))
    return stream


class _ZstdError(Exception):
    """A damaged or truncated zstd stream."""


class _Zstd(io.RawIOBase):
    """The decompressed bytes of zstd frames one after another (as ``zstd`` writes them);
    unlike zstandard's stream_reader, a stream that ends inside a frame is an error."""

    def __init__(self, stream: io.BufferedIOBase):
        import zstandard

        self._stream, self._new = stream, zstandard.ZstdDecompressor().decompressobj
        self._errors = zstandard.ZstdError
        self._frame, self._pending = self._new(), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = self._stream.read(1 << 16)
            if not chunk:
                if not self._frame.eof:  # the stream began with a frame (the magic bytes)
                    raise _ZstdError("the stream ends inside a frame")
                return 0
            try:
                self._pending = self._decompress(chunk)
            except self._errors as exc:
                raise _ZstdError(str(exc)) from None
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _decompress(self, chunk: bytes) -> bytes:
        out = []
        while chunk:
            if self._frame.eof:
                self._frame = self._new()
            out.append(self._frame.decompress(chunk))
            chunk = self._frame.unused_data if self._frame.eof else b""
        return b"".join(out)


def _parquet(path: str, raw: io.BufferedIOBase) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of a Parquet file, a batch at a time (standard input is read whole: Parquet
    keeps its index at the end)."""
    import pyarrow as pa  # here, not at the top: the CLI starts without it
    import pyarrow.parquet as pq

    source = io.BytesIO(raw.read()) if path == "-" else raw
    try:
        batches = pq.ParquetFile(source).iter_batches(batch_size=_PARQUET_BATCH)
        number = 0
        for batch in batches:
            for record in batch.to_pylist():
                number += 1
                yield number, {k: _jsonable(v) for k, v in record.items()}
    except (OSError, pa.ArrowException) as exc:  # a damaged file: ArrowInvalid, ArrowIOError
        raise InputError(f"{path}: is not a readable Parquet file ({exc})") from None


def _jsonable(value: Any) -> Any:
    """A Parquet value as metadata can store it: dates, times, decimals and bytes as text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _raise(error: InputError) -> None:
    raise error


def _jsonl(
    path: str, lines: Iterable[tuple[int, str]], report: Callable[[InputError], None]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of numbered JSON lines; blank lines are left out."""
    for number, line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            report(InputError(f"{path}:{number}: not valid JSON ({exc.msg})"))
            continue
        except RecursionError:
            report(InputError(f"{path}:{number}: JSON nested too deeply to read"))
            continue
        if not isinstance(record, dict):
            report(
                InputError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            )
            continue
        yield number, record


def record_id(record: dict[str, Any], id_field: str) -> str:
    """The external id of a record as indexed (numbers become their decimal text). NaN and
    the infinities (JSON lines may hold them) stay numbers, refused as ids: as text they
    would name no record, and 1e400 and Infinity would both be 'inf'."""
    value = record.get(id_field)
    if isinstance(value, float) and not math.isfinite(value):
        return value  # type: ignore[return-value]
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _document(
    path: str, number: int, record: dict, id_field: str, text_field: str, max_chars: int
) -> Document:
    for field in (id_field, text_field):
        if field not in record:
            raise InputError(
                f"{path}:{number}: no {field!r} field (fields: "
                f"{shorten(', '.join(map(str, record)))}); "
                "choose the fields with --id-field / --text-field"
            )
    external_id, text = record_id(record, id_field), record[text_field]
    metadata = record_metadata(record, id_field, text_field)
    problem = document_problem(external_id, text, max_chars, metadata)
    if problem:
        raise InputError(f"{path}:{number}: {problem}")
    return external_id, text, metadata


def record_metadata(record: dict, id_field: str, text_field: str) -> dict | None:
    """What ingest stores as a record's metadata: its fields but the id and the text (None
    if it has no others)."""
    return {k: v for k, v in record.items() if k not in (id_field, text_field)} or None
