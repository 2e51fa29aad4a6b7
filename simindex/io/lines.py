"""The bytes of a text file as lines of text, each decoded on its own.

A byte that is not in the file's encoding spoils only the record it is in: that record is an
InputError like any other bad record (skippable), or, with ``encoding_errors="replace"``,
is read with U+FFFD in place of the bad bytes and counted (:class:`ReplacedRecords`). The
lines of an ASCII-compatible encoding (UTF-8, Latin-1, cp1252, Shift JIS ...) are found in
the bytes; another encoding (UTF-16, UTF-32) is decoded as one stream, so a bad byte there
ends the file, and in the lenient mode every record holding U+FFFD counts as replaced.

Lines end as io.TextIOWrapper(newline="") ends them: at \\n, \\r\\n or a lone \\r.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from simindex.errors import InputError, shorten
from simindex.policies import ENCODING_ERRORS as ENCODING_ERRORS_CHOICE
from simindex.policies import EncodingErrors

ENCODING_ERRORS = ENCODING_ERRORS_CHOICE.values
_ASCII = bytes(range(128))
# Bytes read at a time; bytes.splitlines ends lines as io.TextIOWrapper(newline="") does.
_BLOCK = 1 << 16
# How long a value (an id, a list of fields) may get in a message before it is cut.


class Flawed(NamedTuple):
    """A line whose bytes are not all in the encoding. ``undecodable``: why (strict mode;
    ``text`` then holds them as surrogate escapes, so a CSV reader keeps its structure);
    ``replaced``: the bad bytes were replaced by U+FFFD (lenient mode)."""

    text: str
    undecodable: str | None = None
    replaced: bool = False


# A line of text: a str, or (rarely) a Flawed one; a str costs no wrapper per line.
Line = str | Flawed


@dataclass
class ReplacedRecords:
    """A tally of the records read with U+FFFD in place of bytes that are not in the
    encoding: pass it as ``on_replaced`` to the readers, then report :meth:`summary`."""

    count: int = 0
    first: str | None = None  # "path:line" of the first such record

    def __call__(self, path: str, line: int) -> None:
        self.count += 1
        self.first = self.first or f"{path}:{line}"

    def summary(self, encoding: str = "utf-8") -> str:
        """One line for the user, e.g. ``3 records held bytes that are not utf-8 ...``."""
        return (
            f"{self.count:,} record(s) held bytes that are not {encoding}, read with U+FFFD "
            f"in their place (the first at {self.first})"
        )


def text_encoding(encoding: str) -> str:
    """The codec's canonical name (utf-8, iso8859-1, utf-16 ...; utf-8-sig is utf-8, whose
    readers drop a byte-order mark anyway); InputError if it is no text encoding."""
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        info = None
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise InputError(
            f"unknown text encoding {shorten(repr(encoding))}; pass --encoding with e.g. utf-8, "
            "latin-1, cp1252 or utf-16"
        )
    return "utf-8" if info.name == "utf-8-sig" else info.name


@lru_cache
def ascii_compatible(codec: str) -> bool:
    """Whether every ASCII character is its own byte in ``codec`` (so lines, quotes and
    delimiters can be found in the bytes)."""
    try:
        return _ASCII.decode(codec) == _ASCII.decode("ascii") and "\r\n".encode(codec) == b"\r\n"
    except UnicodeError:
        return False


# Byte-order marks of the encodings no ASCII-compatible codec reads; UTF-32's first, as
# UTF-32-LE's starts with UTF-16-LE's.
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def byte_lines(path: str, raw: io.BufferedIOBase, drop_bom: bool) -> Iterator[bytes]:
    """The lines of a binary stream, read a block at a time; with ``drop_bom``, without a
    UTF-8 byte-order mark that starts the stream (spreadsheets write one). A stream that
    starts with a UTF-16 or UTF-32 byte-order mark is an InputError naming that encoding:
    read as an ASCII-compatible one, every record of it would be undecodable."""
    head = raw.read(4)
    wide = next((name for bom, name in _WIDE_BOMS if head.startswith(bom)), None)
    if wide:
        raise InputError(f"{path}: starts with a {wide} byte-order mark; pass --encoding {wide}")
    parts = (
        [head[len(codecs.BOM_UTF8) :]] if drop_bom and head.startswith(codecs.BOM_UTF8) else [head]
    )
    while chunk := raw.read1(_BLOCK):
        parts.append(chunk)
        if b"\n" in chunk or b"\r" in chunk:
            lines = b"".join(parts).splitlines(keepends=True)
            # The last line may go on in the next block (a \r there may be half of \r\n).
            parts = [lines.pop()]
            yield from lines
    yield from b"".join(parts).splitlines(keepends=True)


def decoded_lines(lines: Iterable[bytes], codec: str, errors: EncodingErrors) -> Iterator[Line]:
    """Each line decoded on its own (``codec`` must be ASCII-compatible)."""
    fallback = "replace" if errors == "replace" else "surrogateescape"
    for line in lines:
        try:
            yield line.decode(codec)
        except UnicodeDecodeError as exc:
            text = line.decode(codec, fallback)
            if errors == "replace":
                yield Flawed(text, replaced=True)
            else:
                why = f"{exc.reason} at byte {exc.start + 1} of the line"
                yield Flawed(text, undecodable=why)


def stream_lines(
    path: str, raw: io.BufferedIOBase, codec: str, encoding: str, errors: EncodingErrors
) -> Iterator[Line]:
    """The lines of a file in an encoding that is not ASCII-compatible, decoded as one
    stream: a bad byte raises InputError (strict), or is replaced and its line flagged."""
    number, replacing = 0, errors == "replace"
    try:
        for number, text in enumerate(io.TextIOWrapper(raw, codec, errors, newline=""), 1):  # noqa: B007
            yield Flawed(text, replaced=True) if replacing and "\ufffd" in text else text
    except UnicodeDecodeError as exc:
        # The stream is decoded a block at a time: the bad byte is past this line, not in it.
        raise InputError(
            f"{path}: is not valid {encoding} past line {number} ({exc.reason}); a {encoding} "
            "file is decoded as one stream, so it can't be read past a bad byte: pass "
            "--encoding-errors replace to read it with U+FFFD for the bad bytes"
        ) from None


def undecodable(path: str, number: int, reason: str, *, encoding: str) -> InputError:
    """The error of a record whose bytes are not in the encoding."""
    return InputError(
        f"{path}:{number}: is not valid {encoding} ({reason}); pass --on-error skip to leave "
        "such records out, or --encoding-errors replace to read them with U+FFFD for the bad bytes"
    )


def numbered_lines(
    path: str,
    lines: Iterable[Line],
    encoding: str,
    report: Callable[[InputError], None],
    on_replaced: Callable[[str, int], None] | None,
    first: int = 1,
) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line that is one record (JSON lines, id<TAB>text): an
    undecodable line is reported (and left out), a replaced one counted."""
    for number, line in enumerate(lines, start=first):
        if isinstance(line, str):
            yield number, line
        elif line.undecodable is not None:
            report(undecodable(path, number, line.undecodable, encoding=encoding))
        else:
            if on_replaced is not None:
                on_replaced(path, number)
            yield number, line.text
