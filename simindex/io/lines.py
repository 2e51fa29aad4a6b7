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
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

from simindex.errors import InputError

EncodingErrors = Literal["strict", "replace"]
ENCODING_ERRORS = ("strict", "replace")
# A lone \r ends a line too, as it does for io.TextIOWrapper(newline="").
_LONE_CR = re.compile(rb"(?<=\r)(?!\n)")
_ASCII = bytes(range(128))
# How long a value (an id, a list of fields) may get in a message before it is cut.
SHOWN_CHARS = 80


class Line(NamedTuple):
    """A line of text. ``undecodable``: why its bytes are not in the encoding (strict mode;
    ``text`` then holds them as surrogate escapes, so a CSV reader keeps its structure);
    ``replaced``: bad bytes were replaced by U+FFFD (lenient mode)."""

    text: str
    undecodable: str | None = None
    replaced: bool = False


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


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis, for a one-line message."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def text_encoding(encoding: str) -> str:
    """The codec's canonical name (utf-8, iso8859-1, utf-16 ...); InputError if it is no
    text encoding."""
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        info = None
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise InputError(
            f"unknown text encoding {shorten(repr(encoding))}; pass --encoding with e.g. utf-8, "
            "latin-1, cp1252 or utf-16"
        )
    return info.name


@lru_cache
def ascii_compatible(codec: str) -> bool:
    """Whether every ASCII character is its own byte in ``codec`` (so lines, quotes and
    delimiters can be found in the bytes)."""
    try:
        return _ASCII.decode(codec) == _ASCII.decode("ascii") and "\r\n".encode(codec) == b"\r\n"
    except UnicodeError:
        return False


def split_lone_cr(line: bytes) -> Iterator[bytes]:
    """A line read up to \\n, split after each lone \\r in it."""
    if b"\r" in line:
        yield from (part for part in _LONE_CR.split(line) if part)
    else:
        yield line


def byte_lines(raw: Iterable[bytes], drop_bom: bool) -> Iterator[bytes]:
    """The lines of a binary stream; with ``drop_bom``, without a UTF-8 byte-order mark
    that starts the stream (spreadsheets write one)."""
    lines = iter(raw)
    first = next(lines, b"")
    if drop_bom and first.startswith(codecs.BOM_UTF8):
        first = first[len(codecs.BOM_UTF8) :]
    if first:
        yield from split_lone_cr(first)
    for line in lines:
        yield from split_lone_cr(line)


def decoded_lines(lines: Iterable[bytes], codec: str, errors: EncodingErrors) -> Iterator[Line]:
    """Each line decoded on its own (``codec`` must be ASCII-compatible)."""
    fallback = "replace" if errors == "replace" else "surrogateescape"
    for line in lines:
        try:
            yield Line(line.decode(codec))
        except UnicodeDecodeError as exc:
            text = line.decode(codec, fallback)
            if errors == "replace":
                yield Line(text, replaced=True)
            else:
                yield Line(text, undecodable=f"{exc.reason} at byte {exc.start + 1} of the line")


def stream_lines(
    path: str, raw: io.BufferedIOBase, codec: str, encoding: str, errors: EncodingErrors
) -> Iterator[Line]:
    """The lines of a file in an encoding that is not ASCII-compatible, decoded as one
    stream: a bad byte raises InputError (strict), or is replaced and its line flagged."""
    number = 0
    try:
        for number, text in enumerate(io.TextIOWrapper(raw, codec, errors, newline=""), 1):  # noqa: B007
            yield Line(text, replaced=errors == "replace" and "\ufffd" in text)
    except UnicodeDecodeError as exc:
        # The stream is decoded a block at a time: the bad byte is past this line, not in it.
        raise InputError(
            f"{path}: is not valid {encoding} past line {number} ({exc.reason}); a {encoding} "
            "file is decoded as one stream, so it can't be read past a bad byte: pass "
            "--encoding-errors replace to read it with U+FFFD for the bad bytes"
        ) from None


def undecodable(path: str, number: int, encoding: str, reason: str) -> InputError:
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
    for number, (text, problem, replaced) in enumerate(lines, start=first):
        if problem is not None:
            report(undecodable(path, number, encoding, problem))
            continue
        if replaced and on_replaced is not None:
            on_replaced(path, number)
        yield number, text
