"""What makes a record a document simindex can index: the same answer on every backend and
executor (ingest, dedup, Spark)."""

from __future__ import annotations

import json
import math

from simindex.errors import shorten

# PostgreSQL's B-tree entries hold at most ~2,700 bytes; external_id is indexed on both backends.
MAX_ID_BYTES = 2_000
# Ingesting one document holds copies of its text (its string, its UTF-8, the stored row) and
# its distinct shingles at once: up to about 13 bytes a character at this limit
# (benchmarks/bench_bigdoc.py), so a limit keeps one huge document from exhausting memory.
DEFAULT_MAX_CHARS = 10_000_000


def document_problem(
    external_id: object, text: object, max_chars: int = DEFAULT_MAX_CHARS, metadata: object = None
) -> str | None:
    """Why (external_id, text, metadata) can't be indexed, or None if it can: the same
    answer on SQLite and PostgreSQL (ids are strings; an int id is passed as its text)."""
    if not isinstance(external_id, str) or not external_id:
        return f"a document id must be a non-empty string or an integer, got {_shown(external_id)}"
    if len(external_id.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        return (
            f"document id {_shown(external_id)} is longer than {MAX_ID_BYTES:,} bytes (UTF-8), "
            "the longest id simindex stores; shorten it (e.g. a hash of it)"
        )
    if not isinstance(text, str):
        return (
            f"the text of document {_shown(external_id)} must be a string, got "
            f"{type(text).__name__}"
        )
    if len(text) > max_chars:
        return (
            f"document {_shown(external_id)} has {len(text):,} characters, more than the "
            f"limit of {max_chars:,} (signing it takes memory in proportion); raise it with "
            "--max-chars / max_chars, or split the document"
        )
    if "\x00" in text or "\x00" in external_id:
        return (
            f"document {_shown(external_id)} holds a NUL character (U+0000), which PostgreSQL "
            "can't store in text; remove it from the input"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return (
            f"the text of document {_shown(external_id)} holds a lone surrogate (e.g. a bad "
            "\\ud800 escape in JSON), which is not Unicode text"
        )
    problem = _metadata_problem(metadata)
    if problem:
        return (
            f"the metadata of document {_shown(external_id)} holds {problem}; remove it from "
            "the input"
        )
    return None


def _shown(value: object) -> str:
    """``value`` as a message shows it: its repr, cut short (computed for errors only)."""
    return shorten(repr(value))


def _metadata_problem(metadata: object) -> str | None:
    """What in the metadata JSON (and PostgreSQL's JSONB) can't hold, or None. The common
    case costs one json.dumps in C; only a suspect value is searched for the culprit."""
    if metadata is None:
        return None
    try:
        encoded = json.dumps(metadata, allow_nan=False, ensure_ascii=False)
        encoded.encode("utf-8")
    except TypeError as exc:
        return f"a value JSON can't hold ({exc})"
    except (ValueError, RecursionError):  # NaN or Infinity; a lone surrogate; too deep
        return _value_problem(metadata) or "a value nested too deeply"
    return _value_problem(metadata) if "\\u0000" in encoded else None


def _value_problem(value: object) -> str | None:
    """What in a metadata value JSON (PostgreSQL's JSONB) can't hold, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} (not a JSON number)"
    if isinstance(value, str):
        if "\x00" in value:
            return "a NUL character (U+0000)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate (not Unicode text)"
        return None
    if isinstance(value, dict):
        return next(filter(None, (_value_problem(v) for item in value.items() for v in item)), None)
    if isinstance(value, list | tuple):
        return next(filter(None, map(_value_problem, value)), None)
    return None
