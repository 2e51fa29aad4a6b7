"""CSV and id<TAB>text, read and written by one convention each.

id<TAB>text: a line is an id, a tab and the text (which may hold more tabs). Both are
escaped as PostgreSQL's COPY text format and ``jq @tsv`` escape them: ``\\\\`` for a
backslash, ``\\t``, ``\\n`` and ``\\r`` for a tab, a line feed and a carriage return; any
other backslash is read as itself. :func:`tsv_escape` and :func:`tsv_unescape` are inverses.

CSV: the first row is the header (``header=False``: no header, the id and the text are
columns ``id_column`` and ``text_column``, counted from 0, and the other columns are
metadata named by their position). The delimiter is ``delimiter``, or else found among
``, ; TAB |`` outside quotes: a comma when the header holds one (as before delimiters were
found), else the one that comes first in the header, or, without a header, the one that
comes first in most of the first lines (the id column usually leads); a comma when none
does. csv.Sniffer is not used: it prefers a comma whenever commas are as regular, so it
splits ``1;Hello, world`` at the comma.
"""

from __future__ import annotations

import csv
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any

from simindex.errors import InputError
from simindex.io.lines import Flawed, Line, shorten, undecodable

_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_TSV_ESCAPED = re.compile(r"\\([\\tnr])")
_TSV_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
_DELIMITERS = ",;\t|"
_DELIMITER_NAMES = {"\\t": "\t", "tab": "\t"}
# Lines a headerless file's delimiter is found from.
_SNIFF_LINES = 20
# A quoted part of a line (to its end when the quote closes on a later line).
_QUOTED = re.compile(r'"[^"]*"?')


def tsv_escape(value: str) -> str:
    """``value`` for an id<TAB>text line: backslash, tab, line feed, carriage return escaped."""
    return value.translate(_TSV_ESCAPES)


def tsv_unescape(value: str) -> str:
    """The value an id<TAB>text field stands for (the inverse of :func:`tsv_escape`)."""
    return _TSV_ESCAPED.sub(lambda m: _TSV_UNESCAPES[m.group(1)], value) if "\\" in value else value


def tsv_records(
    path: str,
    lines: Iterable[tuple[int, str]],
    id_field: str,
    text_field: str,
    report: Callable[[InputError], None],
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, {id_field: id, text_field: text}) of numbered id<TAB>text lines."""
    for number, line in lines:
        line = line.rstrip("\r\n")
        if not line:
            continue
        external_id, tab, text = line.partition("\t")
        if not tab or not external_id:
            report(InputError(f"{path}:{number}: expected id<TAB>text with a non-empty id"))
            continue
        yield number, {id_field: tsv_unescape(external_id), text_field: tsv_unescape(text)}


@dataclass(frozen=True)
class CsvLayout:
    """How a CSV file is laid out (see the module docstring)."""

    delimiter: str | None = None
    header: bool = True
    id_column: int = 0
    text_column: int = 1

    def __post_init__(self) -> None:
        delimiter = _DELIMITER_NAMES.get(self.delimiter or "", self.delimiter)
        if delimiter is not None and (len(delimiter) != 1 or delimiter in "\r\n\"'"):
            raise InputError(
                f"the CSV delimiter must be one character (not a quote or a line end), got "
                f"{shorten(repr(self.delimiter))}; pass e.g. --delimiter ';'"
            )
        object.__setattr__(self, "delimiter", delimiter)
        for name in ("id_column", "text_column"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(
                    f"--{name.replace('_', '-')} must be a column number from 0, got {value!r}"
                )
        if not self.header and self.id_column == self.text_column:
            raise InputError(
                f"the id and the text can't both be column {self.id_column}; pass "
                "--id-column and --text-column"
            )


def csv_records(
    path: str,
    lines: Iterable[Line],
    layout: CsvLayout,
    id_field: str,
    text_field: str,
    encoding: str,
    report: Callable[[InputError], None],
    on_replaced: Callable[[str, int], None] | None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number of the record's last line, record) of a CSV file's lines. A row whose
    lines are not all in the encoding is reported (strict) or counted (replaced)."""
    csv.field_size_limit(sys.maxsize)
    flaws: list[tuple[int, Flawed]] = []  # lines read but not yet part of a row

    def texts() -> Iterator[str]:
        for number, line in enumerate(lines, start=1):
            if isinstance(line, Flawed):
                flaws.append((number, line))
                line = line.text
            yield line

    stream = texts()
    head = list(islice(stream, _SNIFF_LINES))
    delimiter = layout.delimiter or _sniff(head, layout.header)
    reader = csv.reader(chain(head, stream), delimiter=delimiter, strict=True)
    try:
        header = _header(path, reader, layout, flaws)
        for row in reader:
            number = reader.line_num
            bad, replaced = _flaws_up_to(flaws, number)
            if bad:
                report(undecodable(path, *bad, encoding=encoding))
                continue
            if replaced and on_replaced is not None:
                on_replaced(path, number)
            if not row:
                continue
            record = _record(path, number, row, header, layout, id_field, text_field, report)
            if record is not None:
                yield number, record
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None


def _sniff(head: list[str], header: bool) -> str:
    """The delimiter of a CSV file that starts with the lines ``head`` (see the module
    docstring)."""
    lines = [_QUOTED.sub("", line) for line in (head[:1] if header else head)]
    if header and lines and "," in lines[0]:
        return ","
    votes = Counter(
        min(found, key=line.index)
        for line in lines
        if (found := [c for c in _DELIMITERS if c in line])
    )
    return max(_DELIMITERS, key=lambda c: votes[c]) if votes else ","


def _header(
    path: str,
    reader: Any,
    layout: CsvLayout,
    flaws: list[tuple[int, Flawed]],
) -> list[str] | None:
    """The header row (None without one); InputError if it is not in the encoding."""
    if not layout.header:
        return None
    header = next(reader, [])
    bad, _ = _flaws_up_to(flaws, reader.line_num)
    if bad:
        raise InputError(
            f"{path}:{bad[0]}: the CSV header is not valid in the encoding ({bad[1]}); pass "
            "--encoding with the file's encoding"
        )
    return header


def _flaws_up_to(
    flaws: list[tuple[int, Flawed]], number: int
) -> tuple[tuple[int, str] | None, bool]:
    """Take from ``flaws`` those of lines up to ``number`` (one row's): the first
    undecodable line (number, why) or None, and whether any line had bytes replaced."""
    taken = [flaw for flaw in flaws if flaw[0] <= number]
    del flaws[: len(taken)]
    bad = next(((n, line.undecodable) for n, line in taken if line.undecodable), None)
    return bad, any(line.replaced for _, line in taken)


def _record(
    path: str,
    number: int,
    row: list[str],
    header: list[str] | None,
    layout: CsvLayout,
    id_field: str,
    text_field: str,
    report: Callable[[InputError], None],
) -> dict[str, Any] | None:
    """A row as a record, or None when it is reported as bad."""
    if header is None:
        if max(layout.id_column, layout.text_column) >= len(row):
            report(
                InputError(
                    f"{path}:{number}: has {len(row)} column(s), no column "
                    f"{max(layout.id_column, layout.text_column)} (counted from 0); choose the "
                    "columns with --id-column / --text-column, or the delimiter with --delimiter"
                )
            )
            return None
        named = {layout.id_column: id_field, layout.text_column: text_field}
        return {named.get(i, str(i)): value for i, value in enumerate(row)}
    missing = [field for field in (id_field, text_field) if field not in header]
    if missing:
        report(
            InputError(
                f"{path}:{number}: no {missing[0]!r} field (fields: "
                f"{shorten(', '.join(header))}); choose the fields with --id-field / "
                "--text-field, the delimiter with --delimiter, or --no-header"
            )
        )
        return None
    if len(row) > len(header):
        report(InputError(f"{path}:{number}: more fields than the header has"))
        return None
    return dict(zip(header, chain(row, [None] * (len(header) - len(row))), strict=True))
