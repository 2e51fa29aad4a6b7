"""Result rows as NumPy arrays: integer lists and aggregates a statement returns in one row,
grouped buckets, key matrices as rows."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import sqlalchemy as sa

# Bound parameters per statement: below SQLite's 32,766 and PostgreSQL's 65,535.
MAX_PARAMS = 30_000
# An integer array's text ({1,2}) to the numbers alone, split by spaces.
_ARRAY_TEXT_SEPARATORS = bytes.maketrans(b"{},\n", b"    ")


def parse_id_arrays(text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Lines of integer arrays in PostgreSQL's text format (b"{3,5}\\n{1,2,9}\\n"), or of
    SQLite's group_concat (b"3,5\\n1,2,9\\n"), as (members, offsets): array i holds
    ``members[offsets[i]:offsets[i + 1]]``."""
    chars = np.frombuffer(text, dtype=np.uint8)
    line_ends = np.flatnonzero(chars == ord("\n"))
    commas = np.flatnonzero(chars == ord(","))
    offsets = np.zeros(line_ends.shape[0] + 1, dtype=np.int64)
    offsets[1:] = np.searchsorted(commas, line_ends) + np.arange(1, line_ends.shape[0] + 1)
    members = np.fromstring(text.translate(_ARRAY_TEXT_SEPARATORS), dtype=np.int64, sep=" ")
    return members, offsets


def grouped_chunks(
    result: sa.CursorResult, chunk_size: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The buckets of a grouping's rows (each bucket's ids as one text: group_concat's, or
    an array's), ``chunk_size`` rows at a time, as (members, offsets) (see parse_id_arrays)."""
    for partition in result.partitions(chunk_size):
        yield parse_id_arrays(("\n".join(g for (g,) in partition) + "\n").encode())


def listed_integers(text: str | None) -> np.ndarray:
    """The integers of a comma-separated text (Store.listed; None: no rows), as int64."""
    return np.fromstring(text or "", dtype=np.int64, sep=",")


def int_rows(rows: Sequence[Sequence[int]], columns: int) -> np.ndarray:
    """Result rows of integers as an int64 array of shape (len(rows), columns); read value
    by value (np.array() of Row objects probes each row for array attributes, slowly)."""
    values = itertools.chain.from_iterable(rows)
    return np.fromiter(values, dtype=np.int64, count=len(rows) * columns).reshape(-1, columns)


def in_chunks(items: list | np.ndarray, size: int) -> Iterator[list]:
    """``items`` as lists of ``size``; an array's chunks are converted one at a time (a list
    of a whole array of ids would hold a Python int for every id at once)."""
    for start in range(0, len(items), size):
        chunk = items[start : start + size]
        yield chunk.tolist() if isinstance(chunk, np.ndarray) else chunk


def take_texts(
    data: np.ndarray, lengths: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated texts (``data``, text i of ``lengths[i]`` bytes) in the given order:
    (data, offsets (int64, n + 1)), gathered in one indexing (an int64 index per byte)."""
    starts = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    taken = lengths[order]
    offsets = np.zeros(order.shape[0] + 1, dtype=np.int64)
    np.cumsum(taken, out=offsets[1:])
    # Byte j of taken text i sits at starts[order[i]] + (j - offsets[i]).
    shift = np.repeat(starts[order] - offsets[:-1], taken)
    return data[shift + np.arange(offsets[-1], dtype=np.int64)], offsets


def by_id(rows: Iterable[Any]) -> dict[int, tuple[str | None, str | None, bytes]]:
    """Rows of (id, external id, text, signature blob) as id -> (external id, text, blob)."""
    return {int(i): (e, t, bytes(blob)) for i, e, t, blob in rows}


def key_rows(
    keys: np.ndarray, owners: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A key matrix (int64, (n, bands)) as rows: (band, key, owner of the row) arrays of
    n * bands, row by row; owner is None when ``owners`` (one per matrix row) is not given."""
    n, bands = keys.shape
    owner = None if owners is None else np.repeat(owners, bands)
    return np.tile(np.arange(bands, dtype=np.int64), n), keys.reshape(-1), owner


def duration_text(value: float | timedelta) -> str:
    """A duration (seconds or a timedelta) for messages: '2.5 s', '12 min', '1 h'."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds:.3g} s"
