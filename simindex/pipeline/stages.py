"""The pipeline's pure stages as functions over Arrow record batches, for an executor that
passes record batches about (a distributed job on its workers). :class:`simindex.Index` calls
the NumPy functions they wrap (signing, candidates, verify) on the arrays it holds, without
loading pyarrow: one implementation, so their outputs are equal by construction.

* :func:`sign` validates, normalizes, shingles, signs and bands a batch of documents;
* :func:`bucket_pairs` makes the candidate pairs of a batch of LSH buckets;
* :func:`verify` compares a chunk of candidate pairs, exactly when the texts are given.

Each wraps the modules that implement its steps (readers, signing, candidates,
verify) and adds no arithmetic of its own. No stage reads or writes a database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simindex.errors import InputError
from simindex.pipeline import candidates
from simindex.pipeline.chunking import spans
from simindex.pipeline.documents import DEFAULT_MAX_CHARS, MAX_ID_BYTES, document_problem
from simindex.pipeline.shingle import NormalizedBatch, ShingleSets, normalize_utf8
from simindex.pipeline.signing import SIGN_TEXT_BYTES, sign_normalized
from simindex.pipeline.verify import verified
from simindex.spec import SignatureSpec

# What :func:`verify` returns.
VERIFIED = pa.schema(
    [
        ("doc_a", pa.int64()),
        ("doc_b", pa.int64()),
        ("estimated", pa.float64()),
        ("exact", pa.float64()),
    ]
)


def band_keys_column(banding_id: int) -> str:
    """The name of the column of :func:`sign`'s output holding one banding's keys."""
    return f"band_keys_{banding_id}"


def sign(
    documents: pa.RecordBatch,
    spec: SignatureSpec,
    bandings: Mapping[int, tuple[int, int]],
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    shingles: bool = False,
) -> pa.RecordBatch:
    """Validate, normalize, shingle, sign and band a batch of documents.

    In: columns ``id`` (string, or an integer: stored as its decimal text), ``text``
    (string) and optionally ``metadata`` (JSON text, or null). ``bandings``: banding id ->
    (bands, rows).

    Out, row-aligned with the input:
      ``id`` (large_string); ``problem`` (string): why the document can't be indexed (the
      message ``ingest`` gives, simindex.pipeline.documents.document_problem), null if it can;
      ``content_hash`` (int64); ``shingle_count`` (int64), 0 for a text that normalizes to
      nothing; ``signature`` (fixed_size_list<uint32>[num_perm]); per banding,
      ``band_keys_<id>`` (fixed_size_list<int64>[bands]); with ``shingles``, ``shingles``
      (large_list<uint64>): the distinct shingle hashes, sorted (exact verification needs
      them; signing is faster without). A row with a problem has nulls in every column but
      ``id`` and ``problem``; an empty document (shingle count 0) has a null signature and
      null band keys.
    Raises InputError if a column is missing, of a type it can't be, or not valid UTF-8.
    Signs SIGN_TEXT_BYTES of text at a time.
    """
    ids, texts = _documents(documents)
    text_bytes = np.diff(_offsets(texts))
    return pa.concat_batches(
        [
            _sign_part(
                documents.slice(lo, hi - lo),
                ids.slice(lo, hi - lo),
                texts.slice(lo, hi - lo),
                spec,
                bandings,
                max_chars,
                shingles,
            )
            for lo, hi in spans(np.cumsum(text_bytes), SIGN_TEXT_BYTES)
        ]
        or [_sign_part(documents, ids, texts, spec, bandings, max_chars, shingles)]
    )


def _sign_part(
    documents: pa.RecordBatch,
    ids: pa.Array,
    texts: pa.Array,
    spec: SignatureSpec,
    bandings: Mapping[int, tuple[int, int]],
    max_chars: int,
    shingles: bool,
) -> pa.RecordBatch:
    """:func:`sign` of a batch whose id and text columns :func:`_documents` has read."""
    problems = _problems(ids, texts, documents, max_chars)
    valid = pc.is_null(problems)
    all_valid = problems.null_count == len(problems)
    if not all_valid:
        texts = texts.filter(valid)
    signed = sign_normalized(_normalize(texts), spec, bandings, shingles)
    present = signed.counts > 0
    columns = {
        "content_hash": pa.array(signed.content_hashes, pa.int64()),
        "shingle_count": pa.array(signed.counts, pa.int64()),
        "signature": _fixed_size_list(signed.signatures, present),
    }
    for banding_id, keys in signed.keys.items():
        columns[band_keys_column(banding_id)] = _fixed_size_list(keys, present)
    if signed.sets is not None:
        columns["shingles"] = pa.LargeListArray.from_arrays(signed.sets.offsets, signed.sets.hashes)
    if not all_valid:  # back to the input's rows, nulls where a document was invalid
        positions = np.full(len(ids), -1, np.int64)
        positions[valid.to_numpy(zero_copy_only=False)] = np.arange(len(texts))
        rows = pa.array(positions, mask=positions < 0)
        columns = {name: column.take(rows) for name, column in columns.items()}
    return pa.RecordBatch.from_pydict({"id": ids, "problem": problems, **columns})


def signed_arrays(signed: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """(signatures uint32 (n, num_perm), shingle counts int64 (n,)) of :func:`sign`'s output
    whose rows are all valid; an empty document's signature row is all 0xFFFFFFFF."""
    signatures = _matrix(signed.column("signature"), np.uint32)
    return signatures, signed.column("shingle_count").to_numpy()


def band_keys_array(signed: pa.RecordBatch, banding_id: int) -> np.ndarray:
    """One banding's keys (int64, (n, bands)) of :func:`sign`'s output whose rows are all
    valid (an empty document's row is the keys of an all-0xFFFFFFFF signature)."""
    return _matrix(signed.column(band_keys_column(banding_id)), np.int64)


def shingle_sets_of(signed: pa.RecordBatch) -> ShingleSets:
    """The ``shingles`` column of :func:`sign`'s output (all rows valid) as ShingleSets."""
    column = signed.column("shingles")
    offsets = column.offsets.to_numpy()
    return ShingleSets(column.values.to_numpy()[offsets[0] : offsets[-1]], offsets - offsets[0])


def bucket_pairs(buckets: pa.RecordBatch, max_bucket_size: int) -> pa.RecordBatch:
    """The candidate pairs of a batch of LSH buckets (documents sharing one band key).

    In: column ``members`` (list of int64 document ids, one bucket per row). Out: columns
    ``doc_a`` < ``doc_b`` (int64), the batch's distinct pairs, sorted; a bucket of more than
    ``max_bucket_size`` members is linked to its smallest member instead of paired out
    (simindex.pipeline.candidates.bucket_pairs). Pairs may repeat across batches.
    """
    members = buckets.column("members")
    doc_a, doc_b, _ = candidates.distinct_bucket_pairs(
        members.values.to_numpy().astype(np.int64, copy=False),
        members.offsets.to_numpy().astype(np.int64),
        max_bucket_size,
    )
    return pa.RecordBatch.from_pydict({"doc_a": doc_a, "doc_b": doc_b})


def buckets_batch(members: np.ndarray, offsets: np.ndarray) -> pa.RecordBatch:
    """Buckets as (members, offsets) arrays (see simindex.pipeline.candidates) as the input of
    :func:`bucket_pairs`, without copying them."""
    return pa.RecordBatch.from_pydict(
        {"members": pa.LargeListArray.from_arrays(offsets, members.astype(np.int64, copy=False))}
    )


def verify(
    pairs: pa.RecordBatch, documents: pa.RecordBatch, spec: SignatureSpec, threshold: float
) -> pa.RecordBatch:
    """The candidate pairs with similarity >= threshold.

    In: ``pairs``: columns ``doc_a``, ``doc_b`` (int64 document ids); ``documents``: every
    document of the pairs once, columns ``id`` (int64), ``signature``
    (fixed_size_list<uint32>[num_perm]) and, for exact verification, ``text`` (the original
    text: it is normalized and shingled here, as :func:`sign` does).
    Out: columns ``doc_a``, ``doc_b``, ``estimated`` (the signatures' estimate, float64) and
    ``exact`` (Jaccard of the shingle sets, float64; null without texts), for the pairs whose
    exact similarity (or, without texts, estimated) is >= threshold, in input order.
    """
    ids = documents.column("id").to_numpy()
    order = np.argsort(ids, kind="stable")
    texts = None
    if "text" in documents.schema.names:
        taken = documents.column("text").cast(pa.large_string()).take(pa.array(order))
        texts = _normalize(pc.fill_null(taken, ""))
    doc_a, doc_b, estimated, exact = verified(
        pairs.column("doc_a").to_numpy(),
        pairs.column("doc_b").to_numpy(),
        ids[order],
        _matrix(documents.column("signature"), np.uint32)[order],
        texts,
        spec,
        threshold,
    )
    return pa.RecordBatch.from_pydict(
        {
            "doc_a": doc_a,
            "doc_b": doc_b,
            "estimated": estimated,
            "exact": pa.nulls(doc_a.shape[0], pa.float64()) if exact is None else exact,
        },
        schema=VERIFIED,
    )


def documents_batch(
    ids: np.ndarray, signatures: np.ndarray, texts: list[str | None] | None
) -> pa.RecordBatch:
    """The ``documents`` input of :func:`verify` from arrays (``texts`` None: no exact
    verification)."""
    columns = {"id": pa.array(ids, pa.int64()), "signature": _fixed_size_list(signatures)}
    if texts is not None:
        columns["text"] = pa.array(texts, pa.large_string())
    return pa.RecordBatch.from_pydict(columns)


# -- helpers ---------------------------------------------------------------------------------


def _documents(documents: pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
    """The id and text columns as large_string arrays (an integer id as its decimal text)."""
    names = documents.schema.names
    missing = [name for name in ("id", "text") if name not in names]
    if missing:
        raise InputError(f"the documents have no {' or '.join(missing)} column (got {names})")
    ids, texts = documents.column("id"), documents.column("text")
    if pa.types.is_integer(ids.type):
        ids = pc.cast(ids, pa.string())
    for name, column in (("id", ids), ("text", texts)):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise InputError(f"the {name} column must be text, got {column.type}")
        try:
            column.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise InputError(f"the {name} column is not valid UTF-8 text: {exc}") from None
    return ids.cast(pa.large_string()), texts.cast(pa.large_string())


def _problems(
    ids: pa.Array, texts: pa.Array, documents: pa.RecordBatch, max_chars: int
) -> pa.Array:
    """Per document, why it can't be indexed, or null: documents.document_problem's answer.

    Cheap array tests pick out the documents that may have a problem (a null; an empty or
    long id; a text of more bytes than max_chars characters; a NUL character; metadata); only
    those become Python values and are judged by document_problem, so the rules stay there.
    """
    id_bytes, text_bytes = np.diff(_offsets(ids)), np.diff(_offsets(texts))
    suspect = (id_bytes == 0) | (id_bytes > MAX_ID_BYTES) | (text_bytes > max_chars)
    for column in (ids, texts):
        suspect |= column.is_null().to_numpy(zero_copy_only=False)
        suspect[_rows_with_nul(column)] = True
    metadata = None
    if "metadata" in documents.schema.names:
        metadata = documents.column("metadata")
        suspect |= metadata.is_valid().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(suspect)
    problems: list[str | None] = [None] * len(ids)
    if rows.size:
        take = pa.array(rows)
        values = zip(
            ids.take(take).to_pylist(),
            texts.take(take).to_pylist(),
            [None] * rows.size if metadata is None else metadata.take(take).to_pylist(),
            strict=True,
        )
        for row, (external_id, text, extra) in zip(rows.tolist(), values, strict=True):
            try:
                parsed = None if extra is None else json.loads(extra)
            except ValueError as exc:
                problems[row] = f"the metadata of document {external_id!r} is not JSON ({exc})"
                continue
            problems[row] = document_problem(external_id, text, max_chars, parsed)
    return pa.array(problems, pa.string())


def _normalize(texts: pa.Array) -> NormalizedBatch:
    """shingle.normalize_batch of the texts (large_string, no nulls), from their buffers (see
    shingle.normalize_utf8)."""
    data = texts.buffers()[2]
    return normalize_utf8(
        np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8),
        _offsets(texts),
    )


def _rows_with_nul(texts: pa.Array) -> np.ndarray:
    """The rows of a large_string array that hold a NUL character (int64 positions)."""
    offsets, data = _offsets(texts), texts.buffers()[2]
    if data is None or offsets[0] == offsets[-1]:
        return np.empty(0, np.int64)
    values = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]]
    if values.min():  # the usual case, and a fast one: no NUL byte at all
        return np.empty(0, np.int64)
    return np.searchsorted(offsets, np.flatnonzero(values == 0) + offsets[0], side="right") - 1


def _offsets(texts: pa.Array) -> np.ndarray:
    """The int64 offsets into its data buffer of a large_string array, n + 1 of them."""
    offsets = np.frombuffer(texts.buffers()[1], np.int64)
    return offsets[texts.offset : texts.offset + len(texts) + 1]


def _fixed_size_list(matrix: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A (n, m) array as a fixed_size_list<m> array, null where ``valid`` is False."""
    n, m = matrix.shape
    values = pa.array(np.ascontiguousarray(matrix).reshape(-1))
    mask = None if valid is None or valid.all() else pa.array(~valid)
    return pa.FixedSizeListArray.from_arrays(values, m, mask=mask)


def _matrix(column: pa.Array, dtype: type) -> np.ndarray:
    """A fixed_size_list column as an (n, list_size) array (a null row's values included)."""
    size = column.type.list_size
    values = column.values.to_numpy()
    start = column.offset * size
    return values[start : start + len(column) * size].reshape(-1, size).astype(dtype, copy=False)
