"""PostgreSQL's binary COPY format, laid out by numpy: documents, signatures, band keys and
pairs go in as structured arrays of field lengths and big-endian values, so no Python runs
per row."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy import Connection

from simindex.spec import SIGNATURE_DTYPE

PG_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, extension length

PG_BINARY_TRAILER = b"\xff\xff"

_BAND_KEY_TUPLE = np.dtype(
    [
        ("fields", ">i2"),
        ("band_len", ">i4"), ("band", ">i2"),
        ("key_len", ">i4"), ("key", ">i8"),
        ("doc_len", ">i4"), ("document_id", ">i8"),
    ]
)  # fmt: skip

# A documents row in COPY's binary format, around its variable-width fields: the head
# (field count, id, external_id's length), external_id, the middle (content_hash,
# shingle_count, text's length), text, metadata's length, metadata, the tail (ingested_at,
# in microseconds since 2000-01-01 UTC). A length of -1 is NULL.
_DOCUMENT_HEAD = np.dtype(
    [("fields", ">i2"), ("id_len", ">i4"), ("id", ">i8"), ("external_id_len", ">i4")]
)

_DOCUMENT_MIDDLE = np.dtype(
    [
        ("hash_len", ">i4"), ("hash", ">i8"),
        ("count_len", ">i4"), ("count", ">i4"),
        ("text_len", ">i4"),
    ]
)  # fmt: skip

_DOCUMENT_TAIL = np.dtype([("time_len", ">i4"), ("time", ">i8")])


def copy_band_keys(
    connection: Connection,
    table: str,
    band: np.ndarray,
    key: np.ndarray,
    document_id: np.ndarray,
    options: str = "",
) -> None:
    """COPY rows (band, key, document_id) into ``table`` in binary format."""
    tuples = np.empty(band.shape[0], dtype=_BAND_KEY_TUPLE)
    tuples["fields"] = 3
    tuples["band_len"], tuples["key_len"], tuples["doc_len"] = 2, 8, 8
    tuples["band"], tuples["key"], tuples["document_id"] = band, key, document_id
    copy_binary(connection, f"{table} (band, key, document_id)", [tuples], options)


def pair_tuple(exact: bool) -> np.dtype:
    """A pairs row in COPY's binary format; without ``exact``, exact_jaccard is NULL."""
    fields = [
        ("fields", ">i2"),
        ("banding_len", ">i4"), ("banding", ">i4"),
        ("a_len", ">i4"), ("doc_a", ">i8"),
        ("b_len", ">i4"), ("doc_b", ">i8"),
        ("estimated_len", ">i4"), ("estimated", ">f8"),
        ("exact_len", ">i4"),
    ]  # fmt: skip
    return np.dtype(fields + [("exact", ">f8")] if exact else fields)


def signature_tuple(num_perm: int) -> np.dtype:
    return np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"), ("document_id", ">i8"),
            ("sig_len", ">i4"), ("minhashes", SIGNATURE_DTYPE, (num_perm,)),
        ]
    )  # fmt: skip


def freeze(frozen: bool) -> str:
    """The option of a binary COPY that writes its rows frozen (see insert_documents)."""
    return ", FREEZE" if frozen else ""


def copy_binary(
    connection: Connection,
    target: str,
    parts: Iterable[np.ndarray | bytes],
    options: str = "",
) -> None:
    """COPY target FROM STDIN (FORMAT BINARY) of tuples, part after part (each made as it is
    sent when ``parts`` is a generator): laid out by numpy (a structured array of field
    lengths and big-endian values) or already as bytes, so no Python runs per row here."""
    cursor = connection.connection.dbapi_connection.cursor()
    with cursor.copy(f"COPY {target} FROM STDIN (FORMAT BINARY{options})") as copy:
        copy.write(PG_BINARY_HEADER)
        for part in parts:
            copy.write(part if isinstance(part, bytes) else part.tobytes())
        copy.write(PG_BINARY_TRAILER)


def document_tuples(
    ids: np.ndarray,
    external_ids: Sequence[str],
    content_hashes: Sequence[int],
    shingle_counts: np.ndarray,
    texts: Sequence[str | None],
    metadata_json: Sequence[str | None],
    ingested_at: datetime,
) -> bytes:
    """Documents as COPY ... (FORMAT BINARY) tuples: the fixed-width fields of every row laid
    out by numpy, the variable ones (UTF-8 text; jsonb is a version byte and the JSON text)
    joined between them by bytes.join, so no Python formats, escapes or parses a value."""
    n = len(external_ids)
    ext = [x.encode("utf-8") for x in external_ids]
    text = [b"" if t is None else t.encode("utf-8") for t in texts]
    meta = [b"" if m is None else b"\x01" + m.encode("utf-8") for m in metadata_json]
    head = np.empty(n, dtype=_DOCUMENT_HEAD)
    head["fields"], head["id_len"], head["id"] = 7, 8, ids
    head["external_id_len"] = [len(x) for x in ext]
    middle = np.empty(n, dtype=_DOCUMENT_MIDDLE)
    middle["hash_len"], middle["hash"] = 8, np.asarray(content_hashes, dtype=np.int64)
    middle["count_len"], middle["count"] = 4, shingle_counts
    middle["text_len"] = [-1 if t is None else len(b) for t, b in zip(texts, text, strict=True)]
    meta_len = np.array(
        [-1 if m is None else len(b) for m, b in zip(metadata_json, meta, strict=True)],
        dtype=">i4",
    )
    since_2000 = ingested_at - datetime(2000, 1, 1, tzinfo=UTC)
    tail = np.array([(8, since_2000 // timedelta(microseconds=1))], dtype=_DOCUMENT_TAIL)
    fields = zip(
        head.view(f"V{_DOCUMENT_HEAD.itemsize}").tolist(),
        ext,
        middle.view(f"V{_DOCUMENT_MIDDLE.itemsize}").tolist(),
        text,
        meta_len.view("V4").tolist(),
        meta,
        itertools.repeat(tail.tobytes(), n),
        strict=True,
    )
    return b"".join(itertools.chain.from_iterable(fields))
