"""Adding documents: batches read, signed (in a worker thread) and written in one
transaction, with duplicate ids handled and, if asked, each new document queried first
(query-then-insert)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from sqlalchemy import Connection

from simindex.defaults import DEFAULT_BATCH_SIZE, DEFAULT_MAX_BUCKET_SIZE
from simindex.errors import DuplicateIdError, EmptyDocumentError, InputError, ParameterError
from simindex.local import runs
from simindex.local.common import check_threshold, expected_recall, matches_of, profiles
from simindex.local.context import Context
from simindex.local.removal import delete_documents
from simindex.pipeline.chunking import ahead
from simindex.pipeline.documents import DEFAULT_MAX_CHARS, document_problem
from simindex.results import AddResult, Match
from simindex.store import BandKeyWriter

if TYPE_CHECKING:
    from simindex.pipeline.shingle import ShingleSets
    from simindex.pipeline.verify import Profiles

# Characters of text at which add() ends a batch: its transient arrays grow with its text
# (the next batch is read and signed while one is written).
BATCH_TEXT_CHARS = 2**21

OnDuplicate = Literal["fail", "skip", "replace"]
OnEmpty = Literal["fail", "skip"]
Document = tuple[str, str] | tuple[str, str, dict[str, Any] | None]


@dataclass(frozen=True)
class _Batch:
    """Documents of one add() batch with their distinct shingle counts, signatures and band
    keys (per banding id), row-aligned, and their shingle sets when new documents are verified
    against each other and the index (find_duplicates with kept text). A document that
    normalizes to nothing has no shingles."""

    external_ids: list[str]
    texts: list[str]
    metadata: list[dict[str, Any] | None]
    content_hashes: list[int]
    counts: np.ndarray
    sets: ShingleSets | None
    signatures: np.ndarray
    keys: dict[int, np.ndarray]
    # Given as signatures (add_signatures): no text, so none is empty.
    signed_outside: bool = False

    def __len__(self) -> int:
        return len(self.external_ids)

    def take(self, rows: list[int]) -> _Batch:
        index = np.asarray(rows, dtype=np.int64)
        return _Batch(
            external_ids=[self.external_ids[i] for i in rows],
            texts=[self.texts[i] for i in rows],
            metadata=[self.metadata[i] for i in rows],
            content_hashes=[self.content_hashes[i] for i in rows],
            counts=self.counts[index],
            sets=None if self.sets is None else self.sets.take(index),
            signatures=self.signatures[index],
            keys={banding: keys[index] for banding, keys in self.keys.items()},
            signed_outside=self.signed_outside,
        )


@dataclass
class _AddCall:
    """The options and running result of one Index.add call."""

    active: dict[str, Any] | None
    on_duplicate: OnDuplicate
    on_empty: OnEmpty
    find_duplicates: float | None
    ingested_at: datetime
    writers: dict[int, BandKeyWriter]
    # Ids need no look-up: the index held no documents when the call began, and the
    # database's unique index on external_id names a repeat across batches
    # (Store.unique_index_checks).
    unique_index_checks: bool = False
    # Rows written frozen (Store.insert_documents): the call's transaction creates the index.
    frozen: bool = False
    result: AddResult = field(default_factory=AddResult)


def add(
    ctx: Context,
    documents: Iterable[Document],
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_duplicate: OnDuplicate = "fail",
    on_empty: OnEmpty = "skip",
    find_duplicates: float | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    progress: Callable[[int], None] | None = None,
) -> AddResult:
    """Add (external_id, text[, metadata]) documents, streaming, in one transaction.

    Memory is bounded by the batch: ``batch_size`` documents, or fewer that hold
    BATCH_TEXT_CHARS characters of text. An external id that is already indexed or
    repeats within the call is an error (DuplicateIdError) unless ``on_duplicate`` is
    "skip" (the first copy wins) or "replace" (the last copy wins: the indexed document
    is deleted as by :meth:`delete` and the new one added under a new internal id, so the
    next incremental :meth:`find_pairs` pairs it). A text that normalizes to nothing has
    no signature: it is not stored and its id is listed in ``skipped_empty`` ("skip", the
    default), or it is an error (EmptyDocumentError) with ``on_empty="fail"``. An int id
    is stored as its decimal text. With ``find_duplicates=t``, each
    new document is first queried against the index and the earlier documents of the
    call (query-then-insert), and its matches with similarity >= t are returned.
    """
    if batch_size < 1:
        raise ParameterError(f"batch_size must be positive, got {batch_size}")
    if on_duplicate not in ("fail", "skip", "replace"):
        raise ParameterError("on_duplicate must be 'fail', 'skip' or 'replace'")
    if on_empty not in ("fail", "skip"):
        raise ParameterError("on_empty must be 'fail' or 'skip'")
    if find_duplicates is not None:
        check_threshold(find_duplicates)
    ctx.spec.require_text_scheme()
    iterator = iter(documents)
    parameters = {"on_duplicate": on_duplicate, "on_empty": on_empty, "max_chars": max_chars}
    parameters["find_duplicates"] = find_duplicates
    with _writing(ctx, parameters) as (connection, call, complete):
        # Three threads: one reads batches (parsing is mostly Python, holding the GIL),
        # one signs the batch before (the kernels release it), this one writes.
        batches = ahead(_batches(iterator, batch_size, BATCH_TEXT_CHARS))
        verify = find_duplicates is not None and ctx.keep_text
        for batch in ahead(batches, lambda b: sign(ctx, b, max_chars, complete, verify)):
            add_batch(ctx, connection, batch, call)
            if progress:
                progress(len(batch))
    if find_duplicates is not None and call.active is not None:
        call.result.expected_recall = expected_recall(
            call.active, find_duplicates, ctx.spec.num_perm
        )
    return call.result


@contextmanager
def _writing(
    ctx: Context, parameters: dict[str, Any]
) -> Iterator[tuple[Connection, _AddCall, list[dict[str, Any]]]]:
    """The write transaction of one add call (recorded as an ``ingest`` run of
    ``parameters``: on_duplicate, on_empty, find_duplicates, ...): its connection, its
    _AddCall (writers of every complete banding) and those bandings; on the way out the band
    keys are finished and the result's total counted."""
    creating = ctx.creates_tables  # the transaction below creates the index's tables
    on_duplicate = parameters["on_duplicate"]
    find_duplicates = parameters.get("find_duplicates")
    with (
        ctx.transaction(write=True, load=True) as connection,
        runs.recorded(ctx, connection, "ingest", parameters) as run,
    ):
        complete = [b for b in ctx.store.bandings(connection) if b["state"] == "complete"]
        # A bulk load hides the call's own keys until the end: not when each batch is
        # queried against the earlier ones, nor when a later batch may replace (delete
        # the keys of) a document of an earlier one.
        bulk = find_duplicates is None and on_duplicate != "replace"
        empty = ctx.store.max_document_id(connection) == 0
        # Into an empty index, a bulk load builds the content-hash index once, at the end.
        deferred = bulk and empty and ctx.store.defer_content_hash_index(connection, creating)
        call = _AddCall(
            active=next((b for b in complete if b["is_active"]), None),
            on_duplicate=on_duplicate,
            on_empty=parameters.get("on_empty", "skip"),
            find_duplicates=find_duplicates,
            ingested_at=datetime.now(UTC),
            writers={
                b["id"]: ctx.store.band_key_writer(connection, b["id"], bulk=bulk) for b in complete
            },
            unique_index_checks=on_duplicate == "fail" and ctx.store.unique_index_checks and empty,
            frozen=bulk and creating,
        )
        yield connection, call, complete
        for writer in call.writers.values():
            writer.finish()
        if deferred:
            ctx.store.build_content_hash_index(connection)
        call.result.total = ctx.store.document_count(connection)
        result = call.result
        run.count(
            added=result.added,
            replaced=len(result.replaced),
            skipped_existing=len(result.skipped_existing),
            skipped_empty=len(result.skipped_empty),
        )


def add_signatures(
    ctx: Context,
    external_ids: Sequence[str],
    signatures: np.ndarray,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_duplicate: OnDuplicate = "fail",
) -> AddResult:
    """Add documents given by their signatures (made outside simindex, under the index's
    scheme: datasketch's MinHash), without text, in one transaction; ``on_duplicate`` as
    for add. ``signatures``: integers of shape (len(external_ids), num_perm), each in
    [0, 2**32). Raises SpecMismatchError for an index whose signatures simindex makes from
    text, ParameterError (a ValueError) for a wrong shape or a value out of range,
    InputError for an id that is not a non-empty string."""
    ctx.spec.require_signature_scheme()
    if batch_size < 1:
        raise ParameterError(f"batch_size must be positive, got {batch_size}")
    if on_duplicate not in ("fail", "skip", "replace"):
        raise ParameterError("on_duplicate must be 'fail', 'skip' or 'replace'")
    external_ids = list(external_ids)
    signatures = as_signatures(signatures, ctx.spec.num_perm, len(external_ids))
    for external_id in external_ids:
        if not isinstance(external_id, str) or not external_id:
            raise InputError(f"a document id must be a non-empty string, got {external_id!r:.80}")
    parameters = {"on_duplicate": on_duplicate, "signatures": True}
    with _writing(ctx, parameters) as (connection, call, complete):
        for start in range(0, len(external_ids), batch_size):
            ids = external_ids[start : start + batch_size]
            sigs = signatures[start : start + batch_size]
            add_batch(ctx, connection, _signature_batch(ids, sigs, complete), call)
    return call.result


def as_signatures(values: object, num_perm: int, rows: int | None = None) -> np.ndarray:
    """``values`` as uint32 signatures of shape (n, num_perm) (one 1-d signature becomes one
    row), or ParameterError naming what is wrong: the shape, ``rows`` when given, or a value
    outside [0, 2**32)."""
    array = np.asarray(values)
    if array.ndim == 1:
        array = array[np.newaxis, :]
    if array.ndim != 2 or array.shape[1] != num_perm:
        raise ParameterError(
            f"expecting signatures of {num_perm} hash values (the index's num_perm), got an "
            f"array of shape {array.shape}"
        )
    if rows is not None and array.shape[0] != rows:
        raise ParameterError(f"{rows} ids but {array.shape[0]} signatures")
    if array.size and (
        array.dtype.kind not in "iu" or array.min() < 0 or int(array.max()) >= 2**32
    ):
        raise ParameterError(
            "signature values must be integers in [0, 2**32) (datasketch's affine32 or legacy "
            f"MinHash), got {array.dtype} values from {array.min()} to {array.max()}"
        )
    return np.ascontiguousarray(array, dtype=np.uint32)


def _signature_batch(
    external_ids: list[str], signatures: np.ndarray, bandings: list[dict[str, Any]]
) -> _Batch:
    """A batch of documents given by signatures: no text, a content hash of the signature
    (equal signatures group as exact duplicates do) and no shingle count (0 stored)."""
    import xxhash

    from simindex.pipeline.banding import band_keys
    from simindex.pipeline.hashing import MASK63

    n = len(external_ids)
    return _Batch(
        external_ids=external_ids,
        texts=[None] * n,  # type: ignore[list-item]
        metadata=[None] * n,
        content_hashes=[xxhash.xxh3_64_intdigest(row.tobytes()) & MASK63 for row in signatures],
        counts=np.zeros(n, dtype=np.int64),
        sets=None,
        signatures=signatures,
        keys={b["id"]: band_keys(signatures, b["bands"], b["rows"]) for b in bandings},
        signed_outside=True,
    )


def sign(
    ctx: Context,
    documents: list[Document],
    max_chars: int,
    bandings: list[dict[str, Any]],
    verify: bool,
) -> _Batch:
    """Validate, normalize, shingle, MinHash and band a batch: no database work, so it
    runs ahead in a worker thread (see chunking.ahead). Only ``verify`` needs the sorted
    shingle sets; signing without them is faster (see minhash.sign)."""
    from simindex.pipeline.signing import sign_texts

    external_ids, texts, metadata = _unpack_documents(documents, max_chars)
    shapes = {b["id"]: (b["bands"], b["rows"]) for b in bandings}
    signed = sign_texts(texts, ctx.spec, shapes, shingles=verify)
    return _Batch(
        external_ids=external_ids,
        texts=texts,
        metadata=metadata,
        content_hashes=signed.content_hashes,
        counts=signed.counts,
        sets=signed.sets,
        signatures=signed.signatures,
        keys=signed.keys,
    )


def add_batch(ctx: Context, connection: Connection, batch: _Batch, call: _AddCall) -> None:
    result, active, find_duplicates = call.result, call.active, call.find_duplicates
    external_ids = batch.external_ids
    keep, indexed = drop_duplicate_ids(
        ctx, connection, external_ids, call.on_duplicate, result, not call.unique_index_checks
    )
    counts = batch.counts
    empty = [] if batch.signed_outside else [i for i in keep if counts[i] == 0]
    if empty:
        if call.on_empty == "fail":
            raise EmptyDocumentError(
                f"document {external_ids[empty[0]]!r} has no text after normalization "
                f"({len(empty)} such document(s) in this batch); remove it, or pass "
                "--on-empty skip / on_empty='skip'"
            )
        result.skipped_empty.extend(external_ids[i] for i in empty)
        dropped = set(empty)
        keep = [i for i in keep if i not in dropped]
    if not keep:
        return
    if len(keep) < len(batch):
        batch = batch.take(keep)
    replaced = [x for x in batch.external_ids if x in indexed]  # on_duplicate="replace"
    if replaced:
        delete_documents(ctx, connection, np.array(sorted(indexed[x] for x in replaced), np.int64))
        result.replaced.extend(replaced)

    if find_duplicates is not None and active is not None:
        from simindex.pipeline.verify import Profiles

        profiles = Profiles(batch.signatures, batch.sets)
        found = duplicates_of_new(
            ctx,
            connection,
            active["id"],
            batch.keys[active["id"]],
            profiles,
            batch.external_ids,
            find_duplicates,
        )
        result.duplicates.update(found)

    ids = ctx.store.allocate_document_ids(connection, len(batch))
    try:
        ctx.store.insert_documents(
            connection,
            ids,
            batch.external_ids,
            batch.content_hashes,
            batch.counts,
            batch.texts if ctx.keep_text else [None] * len(batch),
            batch.metadata,
            call.ingested_at,
            frozen=call.frozen,
        )
    except Exception as exc:
        repeated = ctx.store.repeated_external_id(exc) if call.unique_index_checks else None
        if repeated is None:
            raise
        raise _duplicate_id_error(repeated, "appears twice in the input") from None
    ctx.store.insert_signatures(connection, ids, batch.signatures, frozen=call.frozen)
    for banding_id, banding_keys in batch.keys.items():
        call.writers[banding_id].write(ids, banding_keys)
    result.added += len(batch)


def content_hashes(ctx: Context, external_ids: Iterable[str]) -> dict[str, int]:
    """The content hash (of the normalized text) of each of ``external_ids`` that is
    indexed: how a re-run (same text) is told from a conflicting id."""
    with ctx.transaction() as connection:
        return ctx.store.content_hashes(connection, list(external_ids))


def drop_duplicate_ids(
    ctx: Context,
    connection: Connection,
    external_ids: list[str],
    on_duplicate: OnDuplicate,
    result: AddResult,
    look_up: bool = True,
) -> tuple[list[int], dict[str, int]]:
    """Positions of the batch to insert (first copies of ids not yet indexed; under
    "replace", the last copy of every id), and the document ids of those indexed.
    ``look_up=False``: none is indexed (see _AddCall.unique_index_checks)."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, external_id in enumerate(external_ids):
        first.setdefault(external_id, i)
        last[external_id] = i
    existing = ctx.store.document_ids(connection, list(first)) if look_up else {}
    repeated = [i for i, external_id in enumerate(external_ids) if first[external_id] != i]
    if on_duplicate == "fail" and (existing or repeated):
        example = sorted(existing)[0] if existing else external_ids[repeated[0]]
        where = "is already indexed" if existing else "appears twice in the input"
        raise _duplicate_id_error(
            example,
            f"{where} ({len(existing)} already indexed, {len(repeated)} repeated in this batch)",
        )
    keep = []
    for i, external_id in enumerate(external_ids):
        if on_duplicate == "replace":
            if i == last[external_id]:
                keep.append(i)
            else:
                result.replaced.append(external_id)
        elif external_id in existing or i != first[external_id]:
            result.skipped_existing.append(external_id)
        else:
            keep.append(i)
    return keep, existing if on_duplicate == "replace" else {}


def duplicates_of_new(
    ctx: Context,
    connection: Connection,
    banding_id: int,
    keys: np.ndarray,
    new: Profiles,
    new_ids: list[str],
    threshold: float,
) -> dict[str, list[Match]]:
    """Matches of each new document among indexed documents and earlier new ones."""
    from simindex.pipeline.candidates import bucket_pairs, group_keys
    from simindex.pipeline.verify import compare

    query_rows, doc_ids = ctx.store.lookup(connection, banding_id, keys)
    stored_ids = np.unique(doc_ids)
    stored, stored_names = profiles(ctx, connection, stored_ids)
    pool = new.concat(stored)
    # Profile rows: new documents first (0..n-1), then stored ones (n..).
    n = len(new)
    rows_b = n + np.searchsorted(stored_ids, doc_ids)
    within_a, within_b, _ = bucket_pairs(*group_keys(keys, np.arange(n)), DEFAULT_MAX_BUCKET_SIZE)
    within = (
        np.unique(np.column_stack((within_a, within_b)), axis=0)
        if within_a.size
        else np.empty((0, 2), np.int64)
    )
    # Within the batch, the later document (b) duplicates the earlier one (a).
    query = np.concatenate((query_rows, within[:, 1]))
    other = np.concatenate((rows_b, within[:, 0]))
    estimated, exact = compare(pool, query, other)
    found: dict[str, list[Match]] = {}
    for row in np.unique(query):
        mine = query == row
        matches = matches_of(new_ids + stored_names, other[mine], estimated[mine],
                           None if exact is None else exact[mine], threshold)  # fmt: skip
        if matches:
            found[new_ids[row]] = matches
    return found


def _batches(documents: Iterator[Document], size: int, text_chars: int) -> Iterator[list[Document]]:
    """Lists of ``size`` documents, or fewer when their texts reach ``text_chars``
    characters (one document at least)."""
    batch: list[Document] = []
    chars = 0
    for document in documents:
        batch.append(document)
        text = document[1] if isinstance(document, tuple | list) and len(document) > 1 else None
        chars += len(text) if isinstance(text, str) else 0
        if len(batch) == size or chars >= text_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _duplicate_id_error(external_id: str, where: str) -> DuplicateIdError:
    return DuplicateIdError(
        f"document id {external_id!r} {where}; pass --on-duplicate skip / "
        "on_duplicate='skip' to keep the first copy, or replace to keep the last"
    )


def _unpack_documents(
    batch: Sequence[Document], max_chars: int
) -> tuple[list[str], list[str], list[dict | None]]:
    """Validated ids (an int id becomes its decimal text), texts and metadata of a batch."""
    external_ids, texts, metadata = [], [], []
    for document in batch:
        if not isinstance(document, tuple | list) or len(document) not in (2, 3):
            raise InputError(
                f"a document must be (external_id, text[, metadata]), got {document!r:.80}"
            )
        external_id, text = document[0], document[1]
        if isinstance(external_id, int) and not isinstance(external_id, bool):
            external_id = str(external_id)
        extra = document[2] if len(document) == 3 else None
        problem = document_problem(external_id, text, max_chars, extra)
        if problem:
            raise InputError(problem)
        external_ids.append(external_id)
        texts.append(text)
        metadata.append(extra)
    return external_ids, texts, metadata
