"""The library facade: create or open an index, add documents, query, find pairs, re-band.

    from simindex import Index
    with Index.open("postgresql://postgres@127.0.0.1:5432/test") as index:
        result = index.add(batch, on_duplicate="skip", find_duplicates=0.8)
        for external_id, matches in result.duplicates.items(): ...

Each call is one database transaction: it happens completely or not at all, and what it
reads is one snapshot of the index (docs/reliability.md).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import sqlalchemy as sa
from sqlalchemy import Connection

from simindex.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_BUCKET_SIZE,
    DEFAULT_RECALL,
    DEFAULT_SAMPLE,
    DEFAULT_THRESHOLD,
)
from simindex.errors import (
    DatabaseError,
    DuplicateIdError,
    EmptyDocumentError,
    InputError,
    LowRecallWarning,
    ParameterError,
    SchemaVersionError,
    SimindexError,
    SpecMismatchError,
)
from simindex.io.readers import DEFAULT_MAX_CHARS, document_problem
from simindex.pipeline import banding as lsh
from simindex.pipeline.chunking import ahead, spans
from simindex.pipeline.runs import pair_documents
from simindex.spec import SignatureSpec
from simindex.store import (
    DEFAULT_LOCK_TIMEOUT,
    BandKeyWriter,
    StagedLoad,
    Store,
    create_engine,
    database_url,
    display_url,
    migrate,
)

# The pipeline's modules compile numba kernels: they load inside the methods that run them,
# so commands that only read the database (stats, show, export) start without numba.
if TYPE_CHECKING:
    from simindex.pipeline.candidates import Candidates
    from simindex.pipeline.cluster import Rule
    from simindex.pipeline.evaluate import CandidateEstimate, Evaluation
    from simindex.pipeline.shingle import ShingleSets
    from simindex.pipeline.verify import Profiles
    from simindex.signature_file import SignatureFile

log = logging.getLogger("simindex")
# Signatures per chunk of reband()'s one pass over them, times its bands: band key rows per
# write to its bulk writer (which holds and sorts them in bounded memory: BandKeyWriter).
REBAND_STREAM_ROWS = 200_000
# Text (and signature) bytes of the documents of one verification chunk: its memory is a
# small multiple of this (normalized code points, shingle hashes), whatever the pair count.
VERIFY_TEXT_BYTES = 2**20
# Characters of text at which add() ends a batch (~14 bytes of transient arrays a character
# while it is signed; the next batch is read and signed while one is written).
BATCH_TEXT_CHARS = 2**21
# Candidate pairs whose documents' signatures are read at once to rule some out (~1 KB of
# transient memory per pair).
ESTIMATED_PAIRS = 8_192
# Candidate documents of an incremental `pairs`, as a share of the ids from their first to
# their last, past which verification on PostgreSQL reads every signature of that range in
# one pass instead of looking them up (Index._candidate_signatures; a full rebuild always
# makes the pass, while the buckets are grouped: Index._signature_pass); and the signatures
# read at a time in a pass, whose buffer is held while the candidates are collected (when a
# COPY's rows were still joined after it, 20,000 took `dedup` at 4M to 286-288 MiB and 5,000
# to 259 MiB: RESULTS.md, 2026-11-26 16:15 and 16:32 UTC).
SCAN_SHARE = 0.4
SCAN_ROWS = 5_000
# Band-key rows from which a full `pairs` groups a SQLite banding's buckets in two processes
# (Store._split_buckets), so that small indexes (tests, samples) start no second process; the
# point where the second process starts to pay was not measured.
SPLIT_GROUPING_ROWS = 1_000_000
# Candidates of a point query up to which its one statement reads their texts too (see
# Store.documents_in_buckets); past it, a second statement reads the documents of those
# whose estimate passes. Most queries have one to three.
QUERY_TEXT_CANDIDATES = 8

OnDuplicate = Literal["fail", "skip", "replace"]
OnEmpty = Literal["fail", "skip"]


@dataclass(frozen=True)
class Match:
    """An indexed document similar to a query; ``similarity`` is the exact Jaccard when the
    index keeps text, else the estimate."""

    external_id: str
    estimated_jaccard: float
    exact_jaccard: float | None

    @property
    def similarity(self) -> float:
        return self.estimated_jaccard if self.exact_jaccard is None else self.exact_jaccard


@dataclass
class AddResult:
    """What :meth:`Index.add` did. ``added`` counts the documents written, replacements
    included; ``replaced`` lists an external id for each copy a later one replaced (indexed,
    or earlier in the call). ``duplicates`` maps a new document's external id to the
    documents it duplicates (indexed before, or earlier in the same call), when asked;
    ``total`` is the number of documents in the index afterwards."""

    added: int = 0
    total: int = 0
    replaced: list[str] = field(default_factory=list)
    skipped_existing: list[str] = field(default_factory=list)
    skipped_empty: list[str] = field(default_factory=list)
    duplicates: dict[str, list[Match]] = field(default_factory=dict)
    # With find_duplicates=t: the chance that the active banding finds a match at t.
    expected_recall: float | None = None


@dataclass(frozen=True)
class Pair:
    """A stored pair of similar documents; ``similarity`` is the exact Jaccard when the index
    keeps text, else the estimate."""

    id_a: str
    id_b: str
    exact_jaccard: float | None
    estimated_jaccard: float

    @property
    def similarity(self) -> float:
        return self.estimated_jaccard if self.exact_jaccard is None else self.exact_jaccard


@dataclass(frozen=True)
class ClusterMember:
    """A clustered document: its cluster is named by the representative's external id, and
    ``similarity`` is to the representative (exact when text is kept; the stored pair's when
    the two were paired, 1.0 for the representative itself)."""

    external_id: str
    cluster: str
    is_representative: bool
    similarity: float


@dataclass(frozen=True)
class StoredDocument:
    """An indexed document as stored (``text`` is None when the index does not keep it)."""

    external_id: str
    text: str | None
    metadata: dict[str, Any] | None
    ingested_at: datetime

    def title(self, width: int = 60) -> str:
        """The metadata 'title' if there is one, else the start of the text."""
        title = (self.metadata or {}).get("title")
        text = " ".join(str(title if title else self.text or "").split())
        return text if len(text) <= width else text[: width - 3] + "..."


@dataclass(frozen=True)
class Removal:
    """What :meth:`Index.delete` or :meth:`Index.evict` removed (or, with ``dry_run``, would
    remove), and the asked-for ids that are not indexed."""

    removed: list[str]
    not_found: list[str]
    dry_run: bool


@dataclass(frozen=True)
class PairsReport:
    """What :meth:`Index.find_pairs` did: ``pairs`` new pairs from ``candidates`` candidate
    pairs; ``stored`` pairs at >= threshold in all. ``expected_recall`` is the chance that
    the banding makes a pair at the threshold a candidate (the S-curve P(t)); incremental
    runs look at the ``new_documents`` added since the last run only."""

    banding_id: int
    bands: int
    rows: int
    threshold: float
    candidates: int
    pairs: int
    stored: int
    hot_buckets: int
    largest_bucket: int
    exact: bool
    incremental: bool
    new_documents: int
    expected_recall: float
    seconds: float


@dataclass(frozen=True)
class ClusterReport:
    """What :meth:`Index.cluster` did: clusters of two or more documents."""

    threshold: float
    rule: str
    clusters: int
    documents: int
    largest: int
    seconds: float


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
        )


@dataclass
class _Verified:
    """What :meth:`Index.find_pairs` verified: counts, and the pairs kept for an
    incremental update of the clusters."""

    candidates: int
    hot_buckets: int
    largest_bucket: int
    pairs: int
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]


@dataclass
class _AddCall:
    """The options and running result of one :meth:`Index.add` call."""

    active: dict[str, Any] | None
    on_duplicate: OnDuplicate
    on_empty: OnEmpty
    find_duplicates: float | None
    ingested_at: datetime
    writers: dict[int, BandKeyWriter]
    # Ids need no look-up: the index held no documents when the call began, and the
    # database's unique index on external_id names a repeat across batches (PostgreSQL).
    unique_index_checks: bool = False
    # Rows written frozen (Store.insert_documents): the call's transaction creates the index.
    frozen: bool = False
    result: AddResult = field(default_factory=AddResult)


class Index:
    """A near-duplicate index stored in a SQLite or PostgreSQL database."""

    def __init__(self, store: Store, settings: dict[str, Any]):
        self._store = store
        self.url = display_url(store.engine.url)
        self.spec = SignatureSpec(
            shingle=settings["shingle"],
            k=settings["k"],
            num_perm=settings["num_perm"],
            seed=settings["seed"],
            normalization=settings["normalization"],
            scheme=settings["scheme"],
        )
        self.keep_text = bool(settings["keep_text"])
        self.threshold = float(settings["threshold"])
        self.settings = settings
        # (bands, rows) of the first banding while creation waits for the first transaction.
        self._pending: tuple[int, int] | None = None
        # The active banding as a point query last found it; each lookup checks it still is.
        self._active: dict[str, Any] | None = None
        self.completed_half_created = False

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        url: str | os.PathLike[str] | None = None,
        spec: SignatureSpec | None = None,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        bands: int | None = None,
        rows: int | None = None,
        keep_text: bool = True,
        schema: str | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        deferred: bool = False,
    ) -> Index:
        """Create an index in an empty database (no URL: ./simindex.db), or on PostgreSQL in
        ``schema`` (created if missing), so that several indexes share one database: the
        schema, the settings row and the first banding in one transaction, so a failure or
        a kill leaves the database as it was. ``deferred``: in the first transaction that
        uses the index instead (its first add(), say), so that if that fails no index is left.

        The first banding is (bands, rows) when given, else the tuner's choice for
        ``threshold`` (banding.banding_for). Raises DatabaseError if the database
        already holds an index, or tables of the same names. A half-created index (a
        schema with no settings and no documents, which older versions could leave) is
        completed, and ``completed_half_created`` is True. Writers wait for each other up
        to ``lock_timeout`` seconds.
        """
        spec = spec or SignatureSpec()
        if not 0 < threshold <= 1:
            raise ParameterError(f"threshold must be within (0, 1], got {threshold}")
        if (bands is None) != (rows is None):
            raise ParameterError("give both bands and rows, or neither (to tune for the threshold)")
        if bands is None:
            bands, rows = lsh.banding_for(spec.num_perm, threshold)
        lsh.check_banding(bands, rows, spec.num_perm)
        store = _connect(url, schema, lock_timeout)
        with _database_errors(store), store.read() as connection:
            state = _index_state(store, connection)
        if state == "index":
            raise _already_an_index(store)
        from importlib.metadata import version

        settings = {
            **spec.to_dict(),
            "keep_text": keep_text,
            "threshold": threshold,
            "created_by": f"simindex {version('simindex')}",
        }
        index = cls(store, settings)
        index._pending = (bands, rows)
        index.completed_half_created = state == "half-created"
        if not deferred:
            try:
                with index._transaction(write=True):
                    pass
            except BaseException:
                index.close()
                raise
        return index

    def _create(self, connection: Connection) -> None:
        """The deferred creation: schema, settings and first banding, in the caller's
        transaction (which holds the writer lock)."""
        assert self._pending is not None
        if _index_state(self._store, connection) == "index":  # made meanwhile by another
            raise _already_an_index(self._store)
        migrate.upgrade(connection)
        self._store.write_settings(connection, self.settings)
        banding_id = self._store.create_banding(connection, *self._pending)
        self._store.complete_banding(connection, banding_id)
        self._store.activate_banding(connection, banding_id)
        self.settings = self._store.read_settings(connection)

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        schema: str | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    ) -> Index:
        """Open an existing index (on PostgreSQL, the one in ``schema`` if given); refuses a
        missing SQLite file (it is not created), a database with no index or half an index,
        and one whose schema is not this version's. See create for ``lock_timeout``."""
        store = _connect(url, schema, lock_timeout, must_exist=True)
        with _database_errors(store), store.read() as connection:
            state = _index_state(store, connection)
            if state == "none":
                raise DatabaseError(
                    f"{store.describe()} holds no simindex index; "
                    "create one with `simindex init` (or `simindex ingest`, which creates it)"
                )
            if state == "half-created":
                raise DatabaseError(
                    f"{store.describe()} holds a half-created simindex index (a "
                    "schema but no settings and no documents, left by an older simindex); "
                    "`simindex init` (or `simindex ingest`) completes it"
                )
            migrate.check_current(connection)
            settings = store.read_settings(connection)
        return cls(store, settings)

    @classmethod
    def open_or_create(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        schema: str | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        **create_options: Any,
    ) -> tuple[Index, bool]:
        """Open the index at ``url``, or prepare one (with ``create_options``, see create)
        that is created in the same transaction as its first add(): if that fails, no index
        is left behind. Returns (index, created). An existing index of another scheme than
        ``create_options["spec"]``'s is refused (SpecMismatchError): schemes never mix."""
        store = _connect(url, schema, lock_timeout)
        with _database_errors(store), store.read() as connection:
            exists = _index_state(store, connection) == "index"
        store.engine.dispose()
        where = {"schema": schema, "lock_timeout": lock_timeout}
        if not exists:
            return cls.create(url, **where, **create_options, deferred=True), True
        index = cls.open(url, **where)
        if spec := create_options.get("spec"):
            try:
                index.spec.require_scheme(spec.scheme)
            except SpecMismatchError:
                index.close()
                raise
        return index, False

    def close(self) -> None:
        self._store.engine.dispose()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- adding ----------------------------------------------------------------------------

    def add(
        self,
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
            _check_threshold(find_duplicates)
        iterator = iter(documents)
        # The transaction below creates the index's tables (not when it completes a
        # half-created index, whose tables an earlier one made).
        creating = self._pending is not None and not self.completed_half_created
        with self._transaction(write=True, load=True) as connection:
            complete = [b for b in self._store.bandings(connection) if b["state"] == "complete"]
            # A bulk load hides the call's own keys until the end: not when each batch is
            # queried against the earlier ones, nor when a later batch may replace (delete
            # the keys of) a document of an earlier one.
            bulk = find_duplicates is None and on_duplicate != "replace"
            empty = self._store.max_document_id(connection) == 0
            # Into an empty index, a bulk load builds the content-hash index once, at the end.
            deferred = bulk and empty and self._store.defer_content_hash_index(connection, creating)
            call = _AddCall(
                active=next((b for b in complete if b["is_active"]), None),
                on_duplicate=on_duplicate,
                on_empty=on_empty,
                find_duplicates=find_duplicates,
                ingested_at=datetime.now(UTC),
                writers={
                    b["id"]: self._store.band_key_writer(connection, b["id"], bulk=bulk)
                    for b in complete
                },
                unique_index_checks=on_duplicate == "fail"
                and self._store.dialect == "postgresql"
                and empty,
                frozen=bulk and creating,
            )
            # Three threads: one reads batches (parsing is mostly Python, holding the GIL),
            # one signs the batch before (the kernels release it), this one writes.
            batches = ahead(_batches(iterator, batch_size, BATCH_TEXT_CHARS))
            verify = find_duplicates is not None and self.keep_text
            for batch in ahead(batches, lambda b: self._sign(b, max_chars, complete, verify)):
                self._add_batch(connection, batch, call)
                if progress:
                    progress(len(batch))
            for writer in call.writers.values():
                writer.finish()
            if deferred:
                self._store.build_content_hash_index(connection)
            call.result.total = self._store.document_count(connection)
        if find_duplicates is not None and call.active is not None:
            call.result.expected_recall = _expected_recall(
                call.active, find_duplicates, self.spec.num_perm
            )
        return call.result

    def _sign(
        self,
        documents: list[Document],
        max_chars: int,
        bandings: list[dict[str, Any]],
        verify: bool,
    ) -> _Batch:
        """Validate, normalize, shingle, MinHash and band a batch: no database work, so it
        runs ahead in a worker thread (see chunking.ahead). Only ``verify`` needs the sorted
        shingle sets; signing without them is faster (see minhash.sign)."""
        import pyarrow as pa

        from simindex.pipeline import stages

        external_ids, texts, metadata = _unpack_documents(documents, max_chars)
        arrow = pa.RecordBatch.from_pydict(
            {
                "id": pa.array(external_ids, pa.large_string()),
                "text": pa.array(texts, pa.large_string()),
            }
        )
        signed = stages.sign(
            arrow,
            self.spec,
            {b["id"]: (b["bands"], b["rows"]) for b in bandings},
            max_chars=max_chars,
            shingles=verify,
        )
        sigs, counts = stages.signed_arrays(signed)
        return _Batch(
            external_ids=external_ids,
            texts=texts,
            metadata=metadata,
            content_hashes=signed.column("content_hash").to_pylist(),
            counts=counts,
            sets=stages.shingle_sets_of(signed) if verify else None,
            signatures=sigs,
            keys={b["id"]: stages.band_keys_array(signed, b["id"]) for b in bandings},
        )

    def _add_batch(self, connection: Connection, batch: _Batch, call: _AddCall) -> None:
        result, active, find_duplicates = call.result, call.active, call.find_duplicates
        external_ids = batch.external_ids
        keep, indexed = self._drop_duplicate_ids(
            connection, external_ids, call.on_duplicate, result, not call.unique_index_checks
        )
        counts = batch.counts
        empty = [i for i in keep if counts[i] == 0]
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
            self._delete(connection, np.array(sorted(indexed[x] for x in replaced), np.int64))
            result.replaced.extend(replaced)

        if find_duplicates is not None and active is not None:
            from simindex.pipeline.verify import Profiles

            profiles = Profiles(batch.signatures, batch.sets)
            found = self._duplicates_of_new(
                connection,
                active["id"],
                batch.keys[active["id"]],
                profiles,
                batch.external_ids,
                find_duplicates,
            )
            result.duplicates.update(found)

        ids = self._store.allocate_document_ids(connection, len(batch))
        try:
            self._store.insert_documents(
                connection,
                ids,
                batch.external_ids,
                batch.content_hashes,
                batch.counts,
                batch.texts if self.keep_text else [None] * len(batch),
                batch.metadata,
                call.ingested_at,
                frozen=call.frozen,
            )
        except Exception as exc:
            repeated = self._store.repeated_external_id(exc) if call.unique_index_checks else None
            if repeated is None:
                raise
            raise _duplicate_id_error(repeated, "appears twice in the input") from None
        self._store.insert_signatures(connection, ids, batch.signatures, frozen=call.frozen)
        for banding_id, banding_keys in batch.keys.items():
            call.writers[banding_id].write(ids, banding_keys)
        result.added += len(batch)

    def content_hashes(self, external_ids: Iterable[str]) -> dict[str, int]:
        """The content hash (of the normalized text) of each of ``external_ids`` that is
        indexed: how a re-run (same text) is told from a conflicting id."""
        with self._transaction() as connection:
            return self._store.content_hashes(connection, list(external_ids))

    def _drop_duplicate_ids(
        self,
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
        existing = self._store.document_ids(connection, list(first)) if look_up else {}
        repeated = [i for i, external_id in enumerate(external_ids) if first[external_id] != i]
        if on_duplicate == "fail" and (existing or repeated):
            example = sorted(existing)[0] if existing else external_ids[repeated[0]]
            where = "is already indexed" if existing else "appears twice in the input"
            raise _duplicate_id_error(
                example,
                f"{where} ({len(existing)} already indexed, {len(repeated)} repeated in this "
                "batch)",
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

    def _duplicates_of_new(
        self,
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

        query_rows, doc_ids = self._store.lookup(connection, banding_id, keys)
        stored_ids = np.unique(doc_ids)
        stored, stored_names = self._profiles(connection, stored_ids)
        pool = new.concat(stored)
        # Profile rows: new documents first (0..n-1), then stored ones (n..).
        n = len(new)
        rows_b = n + np.searchsorted(stored_ids, doc_ids)
        within_a, within_b, _ = bucket_pairs(
            *group_keys(keys, np.arange(n)), DEFAULT_MAX_BUCKET_SIZE
        )
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
            matches = _matches(new_ids + stored_names, other[mine], estimated[mine],
                               None if exact is None else exact[mine], threshold)  # fmt: skip
            if matches:
                found[new_ids[row]] = matches
        return found

    # -- querying --------------------------------------------------------------------------

    def query(
        self,
        text: str,
        *,
        threshold: float | None = None,
        limit: int | None = None,
        max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
    ) -> list[Match]:
        """Indexed documents similar to ``text`` (>= threshold; default the index's), best
        first. Of a bucket with more than ``max_bucket_size`` members only that many (the
        earliest documents) are compared, as find_pairs links a hot bucket's members to
        one: a match found only through such buckets, and not among their earliest
        members, is missed. That bounds a query's time and memory on skewed data."""
        profile = self._text_profile(text)
        return self._query_profile(profile, threshold, limit, max_bucket_size, exclude=None)

    def _text_profile(self, text: str) -> Profiles:
        """The signature (and shingle set, when text is kept) of a query text."""
        from simindex.pipeline.minhash import signatures
        from simindex.pipeline.shingle import normalize, shingle_sets
        from simindex.pipeline.verify import Profiles

        normalized = normalize(text)
        if not normalized:
            raise EmptyDocumentError(
                "the query text is empty after normalization: nothing to compare"
            )
        sets = shingle_sets([normalized], self.spec)
        return Profiles(signatures(sets, self.spec), sets if self.keep_text else None)

    def query_id(
        self,
        external_id: str,
        *,
        threshold: float | None = None,
        limit: int | None = None,
        max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
    ) -> list[Match]:
        """Indexed documents similar to the indexed document ``external_id`` (itself
        excluded, though it counts among a bucket's members); hot buckets are bounded as in
        :meth:`query`."""
        with self._transaction() as connection:
            found = self._store.document_ids(connection, [external_id])
            if not found:
                raise InputError(f"no document with id {external_id!r} is indexed")
            document_id = found[external_id]
            profile, _ = self._profiles(connection, np.array([document_id], dtype=np.int64))
        return self._query_profile(profile, threshold, limit, max_bucket_size, exclude=document_id)

    def _query_profile(
        self,
        profile: Profiles,
        threshold: float | None,
        limit: int | None,
        max_bucket_size: int,
        exclude: int | None,
    ) -> list[Match]:
        from simindex.pipeline.verify import compare, estimate_floor

        threshold = self.threshold if threshold is None else _check_threshold(threshold)
        if max_bucket_size < 1:
            raise ParameterError(f"max_bucket_size must be at least 1, got {max_bucket_size}")
        floor = estimate_floor(threshold, self.spec.num_perm) if self.keep_text else threshold
        # Without a floor every candidate's document is needed: read in the lookup itself.
        with_text = QUERY_TEXT_CANDIDATES if floor > 0 else sys.maxsize
        for _ in range(2):  # again, once, if a candidate went between the two statements
            active, found = self._bucket_members(profile.signatures, max_bucket_size, with_text)
            found.pop(exclude, None)
            doc_ids, complete = self._plausible_candidates(profile.signatures, found, floor)
            if complete:
                break
        _expected_recall(active, threshold, self.spec.num_perm)
        if not doc_ids.size:
            return []
        stored, names = self._as_profiles(doc_ids, found)
        rows = np.arange(1, doc_ids.size + 1)  # the query is row 0 of the pool
        estimated, exact = compare(profile.concat(stored), np.zeros_like(rows), rows)
        matches = _matches([None, *names], rows, estimated, exact, threshold)
        return matches[:limit] if limit is not None else matches

    def _plausible_candidates(
        self,
        signature: np.ndarray,
        found: dict[int, tuple[str | None, str | None, bytes]],
        floor: float,
    ) -> tuple[np.ndarray, bool]:
        """The sorted ids of a query's candidates (``found``, see _bucket_members) whose
        estimate against the query's ``signature`` is at least ``floor`` (verify.estimate_floor,
        as `pairs` rules pairs out; without kept text the threshold: the estimate is the
        verdict), and whether all of them are still there. Those ``found`` holds without their
        external id and text are read, in one statement, into ``found``; one deleted (or
        replaced, which gives it a new id) since the lookup is left out, and the answer is then
        not complete."""
        from simindex.pipeline.minhash import estimate_rows, unpack

        ids = np.array(sorted(found), dtype=np.int64)
        if not ids.size:
            return ids, True
        stored = unpack([found[int(i)][2] for i in ids], self.spec.num_perm)
        sigs = np.concatenate([signature, stored])  # the query is row 0
        estimated = estimate_rows(sigs, np.zeros_like(ids), np.arange(1, ids.size + 1))
        ids = ids[estimated >= floor]
        unread = ids[[found[int(i)][0] is None for i in ids.tolist()]]
        if not unread.size:
            return ids, True
        with self._statement() as connection:
            read = self._store.documents_of(connection, unread)
        found.update(read)
        return ids[[found[int(i)][0] is not None for i in ids.tolist()]], len(read) == unread.size

    def _bucket_members(
        self, signatures: np.ndarray, max_bucket_size: int, with_text: int
    ) -> tuple[dict[str, Any], dict[int, tuple[str | None, str | None, bytes]]]:
        """The active banding and the stored rows of the documents sharing one of its buckets
        with ``signatures`` (see Store.documents_in_buckets: past ``with_text`` of them, their
        signatures only). One statement, with no
        transaction around it, in the common case (a point query's time is mostly round
        trips): the banding a query last used is assumed still active, and the lookup itself
        checks that it is. An empty answer may mean a re-band replaced it, so the active
        banding is read again and, if it changed, the lookup repeated with the new one."""
        with self._statement() as connection:
            active = self._active or self._active_banding(connection)
            while True:
                keys = lsh.band_keys(signatures, active["bands"], active["rows"])
                found = self._store.documents_in_buckets(
                    connection, active["id"], keys, max_bucket_size, with_text
                )
                latest = active if found else self._active_banding(connection)
                if latest["id"] == active["id"]:
                    break
                active = latest
        self._active = active
        return active, found

    def _signatures(self, connection: Connection, ids: np.ndarray) -> np.ndarray:
        """The stored signatures of document ids, in their order (uint32, (n, num_perm))."""
        return self._store.signatures_of(connection, ids, self.spec.num_perm)

    def _profiles(self, connection: Connection, ids: np.ndarray) -> tuple[Profiles, list[str]]:
        """Stored signatures (and shingle sets from stored text) of document ids, and their
        external ids, in the order of ``ids``."""
        return self._as_profiles(ids, self._store.documents_of(connection, ids))

    def _sample(
        self, connection: Connection, ids: np.ndarray
    ) -> tuple[np.ndarray, list[str] | None, list[str]]:
        """The stored signatures, texts (None when not kept) and external ids of document
        ids, in their order, fetched in chunks of about VERIFY_TEXT_BYTES of text."""
        from simindex.pipeline.minhash import unpack

        signatures, texts, names = [np.empty((0, self.spec.num_perm), np.uint32)], [], []
        sizes = self._document_bytes(connection, ids)
        for lo, hi in spans(np.cumsum(sizes), VERIFY_TEXT_BYTES):
            rows = self._store.documents_of(connection, ids[lo:hi])
            chunk = [rows[int(i)] for i in ids[lo:hi]]
            signatures.append(unpack([row[2] for row in chunk], self.spec.num_perm))
            texts.extend(row[1] or "" for row in chunk)
            names.extend(row[0] for row in chunk)
        return np.concatenate(signatures), texts if self.keep_text else None, names

    def _as_profiles(
        self, ids: np.ndarray, rows: Mapping[int, tuple[str | None, str | None, bytes]]
    ) -> tuple[Profiles, list[str]]:
        """Profiles of documents from their stored rows (see Store.documents_of)."""
        from simindex.pipeline.minhash import unpack
        from simindex.pipeline.shingle import normalize_batch, shingle_sets
        from simindex.pipeline.verify import Profiles

        sigs = unpack([rows[int(i)][2] for i in ids], self.spec.num_perm)
        names = [rows[int(i)][0] for i in ids]
        if not self.keep_text:
            return Profiles(sigs, None), names
        sets = shingle_sets(normalize_batch([rows[int(i)][1] or "" for i in ids]), self.spec)
        return Profiles(sigs, sets), names

    # -- pairs -----------------------------------------------------------------------------

    def find_pairs(
        self,
        threshold: float | None = None,
        *,
        full: bool = False,
        max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
        text_bytes: int = VERIFY_TEXT_BYTES,
    ) -> PairsReport:
        """Find candidate pairs of the active banding in the database (GROUP BY band, key),
        verify them, and store those with similarity >= threshold.

        Incremental when pairs were found before at the same threshold (and not ``full``):
        only buckets holding a document added since are grouped, only pairs with such a
        document are verified, and existing clusters absorb the new pairs. Otherwise the
        banding's pairs (and clusters) are rebuilt.

        Candidates are verified in chunks whose documents hold about ``text_bytes`` of text
        (the memory of a chunk follows its text, not its number of pairs), and each chunk's
        pairs are stored before the next is read.
        """
        threshold = self.threshold if threshold is None else _check_threshold(threshold)
        if max_bucket_size < 2:
            raise ParameterError(f"max_bucket_size must be at least 2, got {max_bucket_size}")
        started = time.perf_counter()
        with self._transaction(write=True) as connection:
            active = self._active_banding(connection)
            banding_id = active["id"]
            recall = _expected_recall(active, threshold, self.spec.num_perm)
            newest = self._store.max_document_id(connection)
            since = None
            if not full and active["pairs_threshold"] == threshold:
                since = active["pairs_through"]
            touching, new_documents = None, 0
            if since is not None:  # only the buckets of documents added since
                added, touching = self._stored_keys(
                    connection, active["bands"], active["rows"], after=since
                )
                new_documents = int(added.size)
            if since is None:
                self._store.delete_pairs(connection, banding_id)
            # The next buckets are read (the database grouping them) while these are paired.
            # A large banding's buckets are grouped by two processes on SQLite (iter_buckets).
            large = newest * active["bands"] >= SPLIT_GROUPING_ROWS
            split = active["bands"] if since is None and self._pending is None and large else None
            buckets = ahead(self._store.iter_buckets(connection, banding_id, touching, split=split))
            found = self._store_verified_pairs(
                connection, banding_id, buckets, since, threshold, max_bucket_size, text_bytes
            )
            if since is None:
                self._store.analyze(connection, "pairs")
            self._store.update_banding(
                connection, banding_id, pairs_threshold=threshold, pairs_through=newest
            )
            self._update_clusters(
                connection, active, threshold, since, _concatenate_found(found.kept)
            )
            stored = self._store.pair_count(connection, banding_id, threshold)
        return PairsReport(
            banding_id=banding_id,
            bands=active["bands"],
            rows=active["rows"],
            threshold=threshold,
            candidates=found.candidates,
            pairs=found.pairs,
            stored=stored,
            hot_buckets=found.hot_buckets,
            largest_bucket=found.largest_bucket,
            exact=self.keep_text,
            incremental=since is not None,
            new_documents=new_documents,
            expected_recall=recall,
            seconds=time.perf_counter() - started,
        )

    def _store_verified_pairs(
        self,
        connection: Connection,
        banding_id: int,
        buckets: Iterable[tuple[np.ndarray, np.ndarray]],
        since: int | None,
        threshold: float,
        max_bucket_size: int,
        text_bytes: int,
    ) -> _Verified:
        """Collect the candidate pairs of ``buckets`` (only those with a document above id
        ``since``, if given), verify and store them; the candidates are freed on return,
        before the clusters are rebuilt."""
        from simindex.pipeline.candidates import collect

        with (
            self._signature_reader(connection) as reader,
            self._signature_pass(connection, reader, full=since is None) as passed,
        ):
            candidates = collect(buckets, max_bucket_size)
            found = _Verified(0, candidates.hot_buckets, candidates.largest_bucket, 0, [])

            def to_verify() -> Iterator[tuple[np.ndarray, np.ndarray]]:
                for doc_a, doc_b in candidates.by_component():  # see its docstring
                    if since is not None:  # pairs of two older documents are stored already
                        new = doc_b > since
                        doc_a, doc_b = doc_a[new], doc_b[new]
                    found.candidates += int(doc_a.size)
                    yield doc_a, doc_b

            with (
                self._candidate_signatures(reader, candidates, passed) as signatures,
                self._store.pair_inserts(connection),
            ):
                pairs = to_verify()
                verified = self._verify(
                    connection, reader, signatures, pairs, threshold, text_bytes
                )
                for chunk in verified:
                    self._store.insert_pairs(connection, banding_id, *chunk)
                    found.pairs += chunk[0].size
                    if since is not None:  # incremental clusters absorb these pairs
                        found.kept.append(chunk)
        return found

    @contextmanager
    def _signature_reader(self, connection: Connection) -> Iterator[Connection]:
        """A second connection, for verification to read the next pairs' signatures on while
        ``connection`` (a writer's) reads texts and stores pairs: the database looks both up
        at once. It sees what the writer does, as writers take turns (Store.write) and a
        writer that verifies changes no signature. An index created in ``connection``'s
        transaction (see create) exists for it alone: then it is the reader too."""
        if self._pending is not None:
            yield connection
            return
        with self._store.read() as reader:
            yield reader

    @contextmanager
    def _signature_pass(
        self, connection: Connection, reader: Connection, full: bool
    ) -> Iterator[Future[SignatureFile] | None]:
        """For a full rebuild: a thread that reads every stored signature, in id order, into
        a SignatureFile, while ``connection`` groups the buckets (a future of the file; None
        for an incremental run, an index in memory, or where ``reader`` is ``connection``).
        On PostgreSQL the thread reads them on ``reader``; on SQLite a second process does
        (Store.copy_signatures), and the thread waits for it, or reads them on ``reader``
        where no process starts.

        The candidates of a full rebuild name a large share of the index (half the ids at 4M
        documents, a third at 400k), whose look-ups cost PostgreSQL a random heap page read
        per document and block once the table outgrows its shared buffers. A pass made after
        the grouping held verification up for its whole length (11 s at 4M); made during it,
        the pass takes what the grouping leaves idle, the second core and the reader's
        connection (`pairs --full` at 4M 88-103 s before, 80-82 s after, with glibc's trim
        threshold raised: benchmarks/RESULTS.md, 2026-11-26 15:00-16:35 UTC). A look-up in
        SQLite copies a 16 KiB page out of the OS's page cache (the kernel's copying grew 25x
        from 400k to 4M documents: RESULTS.md, 2026-11-28 19:46 UTC), a read of the file 512
        bytes (SQLite's `pairs --full` at 4M, paired: median 3.39 s faster, in 3 of 3 pairs:
        2026-11-29 18:53 UTC). The file holds a signature per id (512 bytes at 128 values:
        2 GB at 4M documents, in the temporary directory)."""
        no_file = self._store.dialect == "sqlite" and not self._store.sqlite_file
        if not full or reader is connection or no_file:
            yield None
            return
        from simindex.signature_file import signature_file

        first, last = self._store.document_id_range(reader)
        stop = threading.Event()
        with (
            signature_file(first, last, self.spec.num_perm) as file,
            ThreadPoolExecutor(max_workers=1) as worker,
        ):
            fill = self._fill_signature_file
            if self._store.dialect == "sqlite":
                fill = self._copy_signatures
            try:
                yield worker.submit(fill, reader, file, stop)
            finally:
                stop.set()  # the pass ends soon if it is still running

    def _copy_signatures(
        self, reader: Connection, file: SignatureFile, stop: threading.Event
    ) -> SignatureFile:
        """SQLite's signature pass: by a second process (Store.copy_signatures), or, where
        none starts, on ``reader``."""
        copied = self._store.copy_signatures(file, stop)
        return copied if copied is not None else self._fill_signature_file(reader, file, stop)

    def _fill_signature_file(
        self, reader: Connection, file: SignatureFile, stop: threading.Event | None = None
    ) -> SignatureFile:
        """Write the stored signatures of the file's ids into it, reading them on ``reader``
        in id order, SCAN_ROWS at a time (until ``stop`` is set, if given)."""
        after = file.first - 1
        for ids, sigs in self._store.signature_chunks(reader, self.spec.num_perm, SCAN_ROWS, after):
            if stop is not None and stop.is_set():
                break
            file.write(ids, sigs)
            if ids[-1] >= file.last:
                break
        return file

    @contextmanager
    def _candidate_signatures(
        self,
        reader: Connection,
        candidates: Candidates,
        passed: Future[SignatureFile] | None = None,
    ) -> Iterator[Callable[[np.ndarray], np.ndarray]]:
        """How verification reads the signatures of candidate documents (a function of
        sorted ids, called from its reading thread): from the file of a signature pass made
        while the buckets were grouped (``passed``, see _signature_pass), if one was; else
        looked up a block at a time, or, on PostgreSQL when the candidates name more than
        SCAN_SHARE of the ids between their first and last, from a SignatureFile that one
        pass over the signatures of those ids, in id order, fills first. An incremental run
        on SQLite looks them up: its pass is a second process's, made during a full
        rebuild's grouping."""
        if passed is not None:
            yield passed.result().read
            return
        from simindex.signature_file import signature_file

        documents = candidates.documents()
        span = documents[-1] - documents[0] + 1 if documents.size else 0
        if self._store.dialect != "postgresql" or documents.size <= SCAN_SHARE * span:
            yield lambda ids: self._signatures(reader, ids)
            return
        with signature_file(int(documents[0]), int(documents[-1]), self.spec.num_perm) as file:
            yield self._fill_signature_file(reader, file).read

    def _verify(
        self,
        connection: Connection,
        reader: Connection,
        signatures: Callable[[np.ndarray], np.ndarray],
        blocks: Iterable[tuple[np.ndarray, np.ndarray]],
        threshold: float,
        text_bytes: int,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]:
        """The candidate pairs of ``blocks`` (doc_a, doc_b) with similarity >= threshold, in
        chunks of (doc_a, doc_b, estimated, exact) whose documents hold about ``text_bytes``
        of text.

        A worker thread compares a chunk while this one reads the next chunk's documents and
        the caller stores the pairs before (the database works while the kernels do, and
        ``connection`` is used from this thread only); two chunks' documents exist at a time.
        Signatures are read by ``signatures`` and text sizes on ``reader`` (see _plausible).
        One pipeline runs through all the blocks: a block's first reads overlap the previous
        block's last compare."""
        with ThreadPoolExecutor(max_workers=1) as worker:
            comparing = None
            plausible = self._plausible(reader, signatures, blocks, threshold)
            for block_a, block_b, signed, sizes in plausible:
                for lo, hi in _pair_spans(block_a, block_b, signed[0], sizes, text_bytes):
                    a, b = block_a[lo:hi], block_b[lo:hi]
                    documents = self._chunk_documents(connection, a, b, signed)
                    done = comparing.result() if comparing else None
                    comparing = worker.submit(self._compare_chunk, a, b, documents, threshold)
                    if done is not None:
                        yield done
            if comparing is not None:
                yield comparing.result()

    def _plausible(
        self,
        reader: Connection,
        signatures: Callable[[np.ndarray], np.ndarray],
        blocks: Iterable[tuple[np.ndarray, np.ndarray]],
        threshold: float,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray]]:
        """The pairs of ``blocks``, ESTIMATED_PAIRS at a time, with the (sorted ids,
        signatures) of their documents and the documents' bytes (see _document_bytes), less
        the pairs whose signature estimate rules out an exact similarity >= threshold (see
        verify.estimate_floor): their texts are never read. Without kept text the estimate is
        the verdict, so all pass.

        A worker thread takes the next pairs (from the blocks, across their bounds), reads
        their signatures (by ``signatures``) and text sizes (on ``reader``) and rules pairs
        out, while the caller reads texts and stores pairs on its connection: the database
        looks both up at once.
        `pairs --full` at 4M documents 242.5 s before the signatures were read ahead, 156.4 s
        after (benchmarks/RESULTS.md, 2026-11-24 16:47 UTC)."""
        from simindex.pipeline.minhash import estimate_rows
        from simindex.pipeline.verify import estimate_floor

        floor = estimate_floor(threshold, self.spec.num_perm)

        def plausible(pairs: tuple[np.ndarray, np.ndarray]) -> tuple[Any, ...]:
            a, b = pairs
            ids = pair_documents(a, b)
            signed = signatures(ids)
            if self.keep_text and floor > 0:
                rows_a, rows_b = np.searchsorted(ids, a), np.searchsorted(ids, b)
                keep = estimate_rows(signed, rows_a, rows_b) >= floor
                a, b = a[keep], b[keep]
            # Only the plausible pairs' documents are sized (their texts read); others count 0.
            sized = pair_documents(a, b)
            sizes = np.zeros(ids.shape, np.int64)
            sizes[np.searchsorted(ids, sized)] = self._document_bytes(reader, sized)
            return a, b, (ids, signed), sizes

        slices = (
            (doc_a[start : start + ESTIMATED_PAIRS], doc_b[start : start + ESTIMATED_PAIRS])
            for doc_a, doc_b in blocks
            for start in range(0, doc_a.size, ESTIMATED_PAIRS)
        )
        yield from ahead(slices, plausible)

    def _chunk_documents(
        self,
        connection: Connection,
        a: np.ndarray,
        b: np.ndarray,
        signed: tuple[np.ndarray, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """The documents of the pairs (a[i], b[i]): (sorted ids, their signatures from
        ``signed`` (sorted ids and their signatures, read already), their texts as UTF-8
        (see Store.utf8_texts), read here, or None without kept text)."""
        ids = pair_documents(a, b)
        signed_ids, signatures = signed
        texts = self._store.utf8_texts(connection, ids) if self.keep_text else None
        return ids, signatures[np.searchsorted(signed_ids, ids)], texts

    def _compare_chunk(
        self,
        a: np.ndarray,
        b: np.ndarray,
        documents: tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None],
        threshold: float,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The pairs (a[i], b[i]) with similarity >= threshold: (doc_a, doc_b, estimated,
        exact), by verify.verified: what stages.verify computes, without Arrow, whose
        libraries stay resident once loaded (tests/cli/test_cli_startup.py,
        test_dedup_unmaps_pyarrow_before_it_finds_pairs); no database work."""
        from simindex.pipeline.shingle import normalize_utf8
        from simindex.pipeline.verify import verified

        ids, signatures, texts = documents
        normalized = None if texts is None else normalize_utf8(*texts)
        return verified(a, b, ids, signatures, normalized, self.spec, threshold)

    def _similarities(
        self, connection: Connection, a: np.ndarray, b: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(estimated, exact or None) Jaccard of the stored documents a[i] and b[i]."""
        from simindex.pipeline.verify import compare

        ids = pair_documents(a, b)
        profiles, _ = self._profiles(connection, ids)
        return compare(profiles, np.searchsorted(ids, a), np.searchsorted(ids, b))

    def _text_spans(
        self, connection: Connection, a: np.ndarray, b: np.ndarray, text_bytes: int
    ) -> Iterator[tuple[int, int]]:
        """[lo, hi) ranges of the pairs (a[i], b[i]) whose documents hold about
        ``text_bytes`` (see _pair_spans), their sizes read on ``connection``."""
        ids = pair_documents(a, b)
        return _pair_spans(a, b, ids, self._document_bytes(connection, ids), text_bytes)

    def _document_bytes(self, connection: Connection, ids: np.ndarray) -> np.ndarray:
        """What each of the sorted document ids weighs in a verification chunk: its
        signature's bytes and its stored text's."""
        sizes = np.full(ids.shape, 4 * self.spec.num_perm, dtype=np.int64)
        if self.keep_text:
            sizes += self._store.text_sizes(connection, ids)
        return sizes

    def pairs(self, threshold: float | None = None, *, limit: int | None = None) -> Iterator[Pair]:
        """Stored pairs of the active banding with similarity >= threshold, best first (the
        first ``limit`` of them, if given: cheaper than stopping early on a large index).

        Raises SimindexError if pairs were not found (or are stale, or were found at a
        higher threshold): run :meth:`find_pairs` first.
        """
        threshold = self.threshold if threshold is None else _check_threshold(threshold)
        if limit is not None and limit < 0:
            raise ParameterError(f"limit must not be negative, got {limit}")
        with self._transaction() as connection:
            active = self._active_banding(connection)
            self._check_pairs_cover(connection, active, threshold)
            for row in self._store.iter_pairs(connection, active["id"], threshold, limit):
                yield _pair(row)

    def _check_pairs_cover(self, connection: Connection, active: dict, threshold: float) -> None:
        found_at = active["pairs_threshold"]
        if found_at is None:
            raise SimindexError(
                "pairs have not been found with the active banding; "
                f"run `simindex pairs --threshold {threshold}` first"
            )
        if threshold < found_at - 1e-12:
            raise SimindexError(
                f"pairs were found at threshold {found_at}, so those between {threshold} and "
                f"{found_at} are unknown; run `simindex pairs --threshold {threshold}` first"
            )
        if self._store.max_document_id(connection) > active["pairs_through"]:
            raise SimindexError(
                "documents were added since pairs were found; run `simindex pairs "
                f"--threshold {found_at}` first (it looks at the new documents only)"
            )

    # -- clusters --------------------------------------------------------------------------

    def cluster(self, threshold: float | None = None, *, rule: Rule = "earliest") -> ClusterReport:
        """Group the stored pairs with similarity >= threshold into connected components,
        stored as clusters named by their representative (``rule``: earliest or longest).
        Later :meth:`find_pairs` and :meth:`delete` calls keep them up to date."""
        from simindex.pipeline.cluster import RULES

        threshold = self.threshold if threshold is None else _check_threshold(threshold)
        if rule not in RULES:
            raise ParameterError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
        started = time.perf_counter()
        with self._transaction(write=True) as connection:
            active = self._active_banding(connection)
            self._check_pairs_cover(connection, active, threshold)
            banding_id = active["id"]
            documents, cluster_ids = self._rebuild_clusters(connection, banding_id, threshold, rule)
            self._store.update_banding(
                connection, banding_id, clusters_threshold=threshold, clusters_rule=rule
            )
        sizes = np.unique(cluster_ids, return_counts=True)[1]
        return ClusterReport(
            threshold=threshold,
            rule=rule,
            clusters=int(sizes.size),
            documents=int(documents.size),
            largest=int(sizes.max()) if sizes.size else 0,
            seconds=time.perf_counter() - started,
        )

    def _rebuild_clusters(
        self, connection: Connection, banding_id: int, threshold: float, rule: Rule
    ) -> tuple[np.ndarray, np.ndarray]:
        """Replace the banding's clusters with the components of its stored pairs at
        ``threshold`` (analyzed after: see Store.analyze); their (documents, cluster ids)."""
        doc_a, doc_b = self._store.pairs_at_least(connection, banding_id, threshold)
        self._store.delete_clusters(connection, banding_id)
        documents, cluster_ids = self._recluster(connection, doc_a, doc_b, rule)
        self._store.insert_clusters(connection, banding_id, documents, cluster_ids)
        self._store.analyze(connection, "clusters")
        return documents, cluster_ids

    def _recluster(
        self, connection: Connection, doc_a: np.ndarray, doc_b: np.ndarray, rule: Rule
    ) -> tuple[np.ndarray, np.ndarray]:
        """(documents, their cluster ids) of the components of the edges (doc_a, doc_b)."""
        from simindex.pipeline.cluster import components, representatives

        documents, component = components(doc_a, doc_b)
        counts = self._store.shingle_counts_of(connection, documents) if rule == "longest" else None
        return documents, representatives(documents, component, counts, rule)

    def _update_clusters(
        self,
        connection: Connection,
        active: dict,
        threshold: float,
        since: int | None,
        found: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None],
    ) -> None:
        """Keep the banding's clusters in step with pairs just found (doc_a, doc_b,
        estimated, exact; only read when ``since`` is given: a full run's are re-read from
        the pairs table)."""
        cluster_threshold, rule = active["clusters_threshold"], active["clusters_rule"]
        if cluster_threshold is None:
            return
        doc_a, doc_b, estimated, exact = found
        strong = _similarity(estimated, exact) >= cluster_threshold
        doc_a, doc_b = doc_a[strong], doc_b[strong]
        banding_id = active["id"]
        if cluster_threshold < threshold:  # the pairs no longer reach that low
            self._store.delete_clusters(connection, banding_id)
            self._store.update_banding(connection, banding_id, clusters_threshold=None)
            return
        if since is None:  # rebuilt pairs: rebuild clusters
            self._rebuild_clusters(connection, banding_id, cluster_threshold, rule)
            return
        # Incremental: merge the clusters the new pairs touch. Each old cluster enters as a
        # star (member - representative), which keeps it connected.
        touched = pair_documents(doc_a, doc_b)
        old = np.unique(
            np.array(
                list(self._store.clusters_of(connection, banding_id, touched).values()),
                dtype=np.int64,
            )
        )
        members = self._store.cluster_members(connection, banding_id, old)
        member_cluster = self._store.clusters_of(connection, banding_id, members)
        star_a = np.array([member_cluster[int(m)] for m in members], dtype=np.int64)
        documents, cluster_ids = self._recluster(
            connection, np.concatenate((doc_a, star_a)), np.concatenate((doc_b, members)), rule
        )
        self._store.delete_clusters(connection, banding_id, documents)
        self._store.insert_clusters(connection, banding_id, documents, cluster_ids)

    def clusters(self) -> Iterator[ClusterMember]:
        """Clustered documents of the active banding, representative first in each cluster."""
        with self._transaction() as connection:
            active = self._active_banding(connection)
            if active["clusters_threshold"] is None:
                raise SimindexError("clusters have not been built; run `simindex clusters` first")
            self._check_pairs_cover(connection, active, active["clusters_threshold"])
            rows = self._store.iter_clusters(connection, active["id"])
            while chunk := list(islice(rows, 10_000)):
                members = np.array([r["document_id"] for r in chunk], dtype=np.int64)
                clusters = np.array([r["cluster_id"] for r in chunk], dtype=np.int64)
                stored = [r["similarity"] for r in chunk]
                similarity = np.array(stored, dtype=np.float64)  # None: NaN
                similarity[members == clusters] = 1.0
                # Members reached through another member are compared here.
                todo = np.flatnonzero(np.isnan(similarity))
                for lo, hi in self._text_spans(
                    connection, clusters[todo], members[todo], VERIFY_TEXT_BYTES
                ):
                    span = todo[lo:hi]
                    similarity[span] = _similarity(
                        *self._similarities(connection, clusters[span], members[span])
                    )
                for row, value in zip(chunk, similarity.tolist(), strict=True):
                    yield ClusterMember(
                        row["external_id"],
                        row["cluster"],
                        row["document_id"] == row["cluster_id"],
                        value,
                    )

    def clustered_duplicates(self, external_ids: Iterable[str]) -> set[str]:
        """Those of ``external_ids`` that the active banding's clusters hold under another
        document (not their cluster's representative)."""
        with self._transaction() as connection:
            banding_id = self._active_banding(connection)["id"]
            return self._store.clustered_duplicates(connection, banding_id, list(external_ids))

    # -- deleting --------------------------------------------------------------------------

    def delete(self, external_ids: Iterable[str | int], *, dry_run: bool = False) -> Removal:
        """Remove documents by external id, with their signatures, band keys, pairs and
        cluster rows, in one transaction; the clusters they were in are recomputed from the
        remaining pairs. Ids that are not indexed are named in the result; ``dry_run``
        removes nothing and says what would go."""
        wanted = list(dict.fromkeys(str(i) for i in external_ids))
        with self._transaction(write=not dry_run) as connection:
            found = self._store.document_ids(connection, wanted)
            if not dry_run:
                self._delete(connection, np.array(sorted(found.values()), dtype=np.int64))
        return Removal(
            removed=[i for i in wanted if i in found],
            not_found=[i for i in wanted if i not in found],
            dry_run=dry_run,
        )

    def evict(self, older_than: datetime, *, dry_run: bool = False) -> Removal:
        """Remove the documents ingested before ``older_than`` (like :meth:`delete`); a naive
        datetime is taken as UTC. A cut-off in the future is refused: it would remove
        documents ingested from now on too."""
        if older_than.tzinfo is None:
            older_than = older_than.replace(tzinfo=UTC)
        if older_than > datetime.now(UTC):
            raise ParameterError(
                f"the cut-off {older_than.isoformat()} is in the future, which would remove "
                "every document; give a time in the past (or a positive --days)"
            )
        with self._transaction(write=not dry_run) as connection:
            ids = self._store.ingested_before(connection, older_than)
            removed = self._store.external_ids_of(connection, ids)
            if not dry_run:
                self._delete(connection, ids)
        return Removal(removed=removed, not_found=[], dry_run=dry_run)

    def documents(self, external_ids: Iterable[str | int]) -> dict[str, StoredDocument]:
        """The stored documents of those of ``external_ids`` that are indexed, by id."""
        wanted = [str(i) for i in external_ids]
        with self._transaction() as connection:
            found = self._store.document_records(connection, wanted)
        return {i: StoredDocument(**found[i]) for i in wanted if i in found}

    def _delete(self, connection: Connection, ids: np.ndarray) -> None:
        if not ids.size:
            return
        affected = {}
        for banding in self._store.bandings(connection):
            if banding["clusters_threshold"] is not None:
                held = self._store.clusters_of(connection, banding["id"], ids).values()
                old = np.unique(np.array(list(held), dtype=np.int64))
                members = self._store.cluster_members(connection, banding["id"], old)
                affected[banding["id"]] = (banding, np.setdiff1d(members, ids))
        sigs = self._signatures(connection, ids)
        for banding in self._store.bandings(connection):
            keys = lsh.band_keys(sigs, banding["bands"], banding["rows"])
            self._store.delete_band_keys(connection, banding["id"], ids, keys)
        self._store.delete_documents(connection, ids)
        for banding_id, (banding, members) in affected.items():
            doc_a, doc_b = self._store.pairs_at_least(
                connection, banding_id, banding["clusters_threshold"], among=members
            )
            inside = np.isin(doc_b, members)
            self._store.delete_clusters(connection, banding_id, members)
            documents, cluster_ids = self._recluster(
                connection, doc_a[inside], doc_b[inside], banding["clusters_rule"]
            )
            self._store.insert_clusters(connection, banding_id, documents, cluster_ids)

    # -- bandings --------------------------------------------------------------------------

    def reband(
        self,
        bands: int,
        rows: int,
        *,
        activate: bool = True,
        drop_old: bool = False,
    ) -> int:
        """Build a banding (bands x rows) from the stored signatures; readers keep using the
        active banding until the build commits. Returns its id.

        On PostgreSQL the build is one transaction. On SQLite its band keys are committed in
        parts (see store.BandKeyWriter), the banding ``building`` (used by nothing) until the
        last part, whose transaction adds the keys of documents indexed meanwhile, removes
        those of documents deleted meanwhile, and completes it; a build that fails removes
        its banding.

        ``drop_old`` removes the other bandings when the build completes; on PostgreSQL their
        band keys (partitions) are dropped right after it, each attempt bounded so that
        readers wait at most store.DROP_LOCK_TIMEOUT_MS; when readers hold them through
        every attempt, they stay retired (unused, listed by stats) until a later write. On
        SQLite their band keys are deleted right after it, a band at a time (see
        Store.drop_banding)."""
        lsh.check_banding(bands, rows, self.spec.num_perm)
        writer = None
        try:
            with self._transaction(write=True) as connection:
                banding_id = self._store.create_banding(connection, bands, rows)
                through = self._store.max_document_id(connection)
                writer = self._store.band_key_writer(connection, banding_id, bulk=True, parts=True)
                per_chunk = max(1, REBAND_STREAM_ROWS // bands)
                scanned = self._write_keys(connection, writer, bands, rows, per_chunk)
                writer.finish()
                if writer.committed:
                    self._catch_up(connection, banding_id, bands, rows, through, scanned)
                self._store.complete_banding(connection, banding_id)
                if activate:
                    self._store.activate_banding(connection, banding_id)
                if drop_old:  # those of now: others may have come between the parts
                    for banding in self._store.bandings(connection):
                        if banding["id"] != banding_id and (activate or not banding["is_active"]):
                            self._store.drop_banding(connection, banding["id"])
        except BaseException:
            if writer is not None and writer.committed:
                self._discard_banding(banding_id, writer.created_at)
            raise
        if drop_old:
            with _database_errors(self._store):
                self._store.drop_retired_bandings()
        return banding_id

    def _catch_up(
        self,
        connection: Connection,
        banding_id: int,
        bands: int,
        rows: int,
        through: int,
        scanned: int,
    ) -> None:
        """Bring a banding built in parts up to date with the documents indexed and deleted
        between the parts: its keys were computed from the ``scanned`` signatures of the
        documents up to id ``through``. The new documents' keys are added; if some of those
        documents are gone, the keys of documents not indexed are removed."""
        writer = self._store.band_key_writer(connection, banding_id, bulk=False)
        self._write_keys(connection, writer, bands, rows, SCAN_ROWS, after=through)
        if self._store.signature_count(connection, through) < scanned:
            self._store.delete_unindexed_band_keys(connection, banding_id)

    def _write_keys(
        self,
        connection: Connection,
        writer: BandKeyWriter,
        bands: int,
        rows: int,
        per_chunk: int,
        after: int = 0,
    ) -> int:
        """Write the band keys of the stored signatures of ids above ``after``, read
        ``per_chunk`` at a time; returns how many documents were keyed."""
        keyed = 0
        chunks = self._store.signature_chunks(connection, self.spec.num_perm, per_chunk, after)
        for ids, sigs in chunks:
            writer.write(ids, lsh.band_keys(sigs, bands, rows))
            keyed += ids.size
        return keyed

    def _discard_banding(self, banding_id: int, created_at: datetime | None) -> None:
        """Remove a banding whose build failed after committing parts of it, if it is still
        that one and still building: a failure after the last part's commit (an interrupt
        while SQLite copies the WAL) leaves the complete banding. If the removal fails too
        (the database is gone, the disk full), it stays ``building``: used by nothing, listed
        by `simindex stats`, removed by `simindex drop-banding`; if only the deletion of its
        band keys after it fails, they stay retired, which `drop-banding` deletes too."""
        try:
            with self._transaction(write=True) as connection:
                if self._store.building_banding(connection, banding_id) == created_at:
                    self._store.drop_banding(connection, banding_id)
        except Exception as exc:  # the build's own error is the one to report
            log.warning("Could not remove banding %s, left building: %s", banding_id, exc)
            return
        try:
            self._store.drop_retired_bandings()
        except Exception as exc:
            log.warning("Banding %s removed; its band keys stay retired: %s", banding_id, exc)

    def activate(self, banding_id: int) -> None:
        """Make a complete banding (built by ``reband(..., activate=False)``) the active
        one: queries, pairs and the SQL views use it from the commit on."""
        with self._transaction(write=True) as connection:
            if (state := self._banding(connection, banding_id)["state"]) != "complete":
                raise ParameterError(
                    f"banding {banding_id} is {state}, not complete: it can't "
                    "be activated; build a new one with `simindex reband`"
                )
            self._store.activate_banding(connection, banding_id)

    def drop_banding(self, banding_id: int) -> None:
        """Remove one banding that is not the active one, with its band keys, pairs and
        clusters: one kept with ``activate=False`` and no longer wanted, or one a killed
        re-band left ``building``, or one retired whose band keys a stopped drop left (see
        Store.retired_bandings). A re-band still building it stops at its next part with a
        clear error. On PostgreSQL its partition is dropped after the commit, as
        :meth:`reband` drops old ones; on SQLite its keys are deleted after the commit, a band
        at a time, as for ``drop_old`` (see Store.drop_banding)."""
        with self._transaction(write=True) as connection:
            if banding_id not in self._store.retired_bandings(connection):  # else: finish it
                if self._banding(connection, banding_id)["is_active"]:
                    raise ParameterError(
                        f"banding {banding_id} is the active one: queries and pairs use it; "
                        "activate another first (`simindex activate ID`)"
                    )
                self._store.drop_banding(connection, banding_id)
        with _database_errors(self._store):
            self._store.drop_retired_bandings()

    def _banding(self, connection: Connection, banding_id: int) -> dict[str, Any]:
        """The row of banding ``banding_id``; a clear error if there is none."""
        for banding in self._store.bandings(connection):
            if banding["id"] == banding_id:
                return banding
        raise ParameterError(
            f"there is no banding {banding_id}; `simindex stats` lists the bandings"
        )

    def _stored_keys(
        self,
        connection: Connection,
        bands: int,
        rows: int,
        *,
        after: int = 0,
        chunk_size: int = 20_000,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids (ascending) of the documents above id ``after`` and their band keys for a
        (bands x rows) banding, from their stored signatures."""
        ids = [np.empty(0, np.int64)]
        keys = [np.empty((0, bands), np.int64)]
        chunks = self._store.signature_chunks(connection, self.spec.num_perm, chunk_size, after)
        for chunk_ids, sigs in chunks:
            ids.append(chunk_ids)
            keys.append(lsh.band_keys(sigs, bands, rows))
        return np.concatenate(ids), np.concatenate(keys)

    def check(self) -> list[str]:
        """Integrity problems of the index (an empty list when it is consistent): documents
        without a signature or a complete set of band keys for every complete banding,
        band keys of no document, not exactly one active and complete banding."""
        with self._transaction() as connection:
            damage = self._store.storage_problems(connection)
            return damage or self._store.integrity_problems(connection)

    def bandings(self) -> list[dict[str, Any]]:
        with self._transaction() as connection:
            return self._store.bandings(connection)

    def stats(self, largest: int = 10) -> dict[str, Any]:
        """Documents, bandings, and the active banding's bucket sizes and largest buckets."""
        with self._transaction() as connection:
            active = self._active_banding(connection)
            return {
                "url": self.url,
                "spec": self.spec.to_dict(),
                "keep_text": self.keep_text,
                "threshold": self.threshold,
                "documents": self._store.document_count(connection),
                "exact_duplicate_groups": self._store.exact_duplicate_groups(connection),
                "bandings": self._store.bandings(connection),
                "retired_bandings": self._store.retired_bandings(connection),
                "active_banding": active["id"],
                "pairs": self._store.pair_count(connection, active["id"]),
                "bucket_sizes": self._store.bucket_sizes(connection, active["id"]),
                "largest_buckets": self._store.largest_buckets(connection, active["id"], largest),
                "cluster_sizes": None
                if active["clusters_threshold"] is None
                else self._store.cluster_sizes(connection, active["id"]),
            }

    def weakest_pairs(self, limit: int = 5) -> list[Pair]:
        """The active banding's ``limit`` stored pairs of lowest similarity, least similar
        first: the pairs nearest the line between a duplicate and not, which is where a
        reader judges the threshold."""
        with self._transaction() as connection:
            active = self._active_banding(connection)
            rows = self._store.weakest_pairs(connection, active["id"], limit)
        return [_pair(row) for row in rows]

    def texts(self, external_ids: Iterable[str]) -> dict[str, str | None]:
        """The stored text of each given document that exists (None when text is not kept)."""
        return {i: document.text for i, document in self.documents(external_ids).items()}

    # -- evaluation ------------------------------------------------------------------------

    def evaluate(
        self,
        *,
        sample: int = DEFAULT_SAMPLE,
        floor: float = 0.5,
        seed: int = 0,
        threshold: float | None = None,
    ) -> Evaluation:
        """How good the results are: recall of the active banding, recall and precision of
        verification at ``threshold`` (default: the index's), and the estimate's error, against the exact
        Jaccard of all pairs >= ``floor`` among ``sample`` random documents (all of them
        when the index holds fewer). Needs stored text. See docs/evaluation.md."""
        from simindex.pipeline.evaluate import evaluate as evaluate_sample

        if sample < 2:
            raise ParameterError(f"sample must be at least 2 documents, got {sample}")
        _check_seed(seed)
        threshold = self.threshold if threshold is None else _check_threshold(threshold)
        with self._transaction() as connection:
            active = self._active_banding(connection)
            documents = self._store.document_count(connection)
            ids = self._store.sample_document_ids(connection, sample, seed)
            signatures, texts, names = self._sample(connection, ids)
        return evaluate_sample(
            signatures,
            texts,
            self.spec,
            names,
            documents=documents,
            bands=active["bands"],
            rows=active["rows"],
            threshold=threshold,
            floor=floor,
            seed=seed,
        )

    def estimate_candidates(
        self, bandings: list[tuple[int, int]], *, sample: int = 5000, seed: int = 0
    ) -> list[CandidateEstimate]:
        """How many candidate pairs each (bands, rows) would make on this index's documents,
        from the stored signatures of ``sample`` random documents (see
        simindex.pipeline.evaluate.estimate_candidates): the cost of recall, before re-banding."""
        from simindex.pipeline.evaluate import estimate_candidates

        if sample < 2:
            raise ParameterError(f"sample must be at least 2 documents, got {sample}")
        _check_seed(seed)
        for bands, rows in bandings:
            lsh.check_banding(bands, rows, self.spec.num_perm)
        with self._transaction() as connection:
            documents = self._store.document_count(connection)
            ids = self._store.sample_document_ids(connection, sample, seed)
            sigs = self._signatures(connection, ids)
        if ids.size < 2:
            raise SimindexError(
                f"the index holds {documents} document(s): too few to estimate candidates"
            )
        return estimate_candidates(sigs, documents, bandings)

    # -- bulk loads by many writers (simindex.spark.ingest) ---------------------------------

    def load_bandings(self) -> dict[int, tuple[int, int]]:
        """(bands, rows) of the bandings a load fills, by banding id: the complete ones, or
        a deferred index's first banding under 0 until its creation gives it an id."""
        if self._pending is not None:
            return {0: self._pending}
        return {
            b["id"]: (b["bands"], b["rows"]) for b in self.bandings() if b["state"] == "complete"
        }

    def staged_load(self, name: str) -> StagedLoad:
        """New staging tables ``name``_* for load_bandings() (store.StagedLoad), which
        writers outside this process fill; StagedLoad.drop removes them."""
        staged = self._store.staged_load(name, self.load_bandings())
        with _database_errors(self._store), self._store.engine.begin() as connection:
            staged.create(connection)
        return staged

    @contextmanager
    def load_transaction(self) -> Iterator[tuple[Store, Connection]]:
        """A write transaction of the index with its store, in which a staged load is moved
        in (a deferred index is created in it first)."""
        with self._transaction(write=True) as connection:
            yield self._store, connection

    # -- helpers ---------------------------------------------------------------------------

    def _active_banding(self, connection: Connection) -> dict[str, Any]:
        for banding in self._store.bandings(connection):
            if banding["is_active"]:
                return banding
        raise SimindexError("the index has no active banding; run `simindex reband` to build one")

    @contextmanager
    def _statement(self) -> Iterator[Connection]:
        """A connection for statements that are each consistent on their own (Store.statement);
        a deferred index's first use creates it in a transaction instead."""
        if self._pending is not None:
            with self._transaction() as connection:
                yield connection
            return
        with _database_errors(self._store), self._store.statement() as connection:
            yield connection

    @contextmanager
    def _transaction(self, write: bool = False, load: bool = False) -> Iterator[Connection]:
        """One transaction (``load``: see Store.write); a deferred index's first one creates
        it (see create)."""
        creating = self._pending is not None
        with _transaction(self._store, write or creating, load) as connection:
            if creating:
                self._create(connection)
            yield connection
        self._pending = None


_OPERATIONAL_ERRORS = (sa.exc.OperationalError, sa.exc.InterfaceError)
_INTEGRITY_ERRORS = (sa.exc.IntegrityError, sqlite3.IntegrityError)


def _psycopg(*names: str) -> tuple[type[Exception], ...]:
    """psycopg's exception classes ``names``, if psycopg is loaded: only a PostgreSQL index
    loads it (SQLite never pays for its import), and nothing else raises them."""
    module = sys.modules.get("psycopg")
    return tuple(getattr(module, name) for name in names) if module else ()


# SQLite errors that come from the environment (file, disk, locks), not from simindex.
_SQLITE_USER_ERRORS = (
    "unable to open database",
    "disk I/O error",
    "database or disk is full",
    "attempt to write a readonly database",
)
# SQLite errors of a file that is damaged or not a database at all.
_SQLITE_DAMAGE = ("file is not a database", "database disk image is malformed")


@contextmanager
def _transaction(store: Store, write: bool, load: bool = False) -> Iterator[Connection]:
    with _database_errors(store), store.write(load) if write else store.read() as connection:
        yield connection


@contextmanager
def _database_errors(store: Store) -> Iterator[None]:
    """Turn driver errors (server down, wrong password, disk full, a damaged file, ...)
    into DatabaseError; other database errors are bugs and keep their traceback.

    Bulk loads use the driver's cursor directly, so its own exception classes come too."""
    try:
        yield
    except (sa.exc.DBAPIError, sqlite3.Error, *_psycopg("Error")) as exc:
        orig = getattr(exc, "orig", None) or exc
        reason = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
        url = display_url(store.engine.url)
        if isinstance(exc, (*_INTEGRITY_ERRORS, *_psycopg("IntegrityError"))):
            raise DatabaseError(f"database {url} refused the change: {reason}") from None
        if store.dialect == "sqlite":
            if reason == "database is locked":
                raise DatabaseError(
                    f"database {url} is locked by another process (a first load into an "
                    "empty SQLite index holds the whole file until it commits): try again "
                    "when it is done"
                ) from None
            if reason.startswith(_SQLITE_DAMAGE):
                raise DatabaseError(
                    f"{url} is not a usable SQLite database ({reason}): give the right --db, "
                    "or restore the file from a backup"
                ) from None
            if reason.startswith(_SQLITE_USER_ERRORS):
                raise DatabaseError(
                    f"database {url} failed: {reason}. Check the file's path and "
                    "permissions, and the free disk space"
                ) from None
        elif isinstance(
            exc, (*_OPERATIONAL_ERRORS, *_psycopg("OperationalError", "InterfaceError"))
        ):
            raise DatabaseError(
                f"database {url} failed: {reason}. Is the server running, the URL right and "
                "the disk not full? (a local PostgreSQL: `docker compose up -d`)"
            ) from None
        raise  # e.g. a syntax error: a bug, keep the traceback


def _index_state(store: Store, connection: Connection) -> Literal["none", "half-created", "index"]:
    """What the database holds: no index; half an index (a schema with no settings row and
    no documents, as older versions could leave it); or an index. Raises DatabaseError for
    tables that would collide with an index's, or a schema with documents but no settings."""
    url = store.describe()
    colliding = store.colliding_tables(connection)
    if colliding:
        elsewhere = (
            "another file with --db"
            if store.dialect == "sqlite"
            else "another database with --db, or --schema NAME"
        )
        raise DatabaseError(
            f"{url} already holds tables that are not a simindex index "
            f"({', '.join(colliding)}); keep the index elsewhere: {elsewhere}"
        )
    if not store.has_tables(connection):
        return "none"
    if store.read_settings(connection) is not None:
        return "index"
    if store.document_count(connection):
        raise DatabaseError(
            f"{url} holds documents but no index settings: it was not written by simindex; "
            "give another --db"
        )
    return "half-created"


def _already_an_index(store: Store) -> DatabaseError:
    return DatabaseError(
        f"{store.describe()} already holds a simindex index; open it, or choose another database"
    )


def upgrade_schema(
    url: str | os.PathLike[str] | None, schema: str | None = None
) -> tuple[str | None, str]:
    """Migrate the index at ``url`` (in ``schema``) to this simindex's schema in one
    transaction; returns (revision before, revision after). A database with no index is
    refused and left untouched: `simindex init` creates the schema and the settings together."""
    store = _connect(url, schema, must_exist=True)
    try:
        with _transaction(store, write=True) as connection:
            if _index_state(store, connection) == "none":
                raise DatabaseError(
                    f"{store.describe()} holds no simindex index to upgrade; "
                    "create one with `simindex init` (it creates the schema too)"
                )
            return migrate.upgrade(connection)
    finally:
        store.engine.dispose()


def schema_revision(
    url: str | os.PathLike[str] | None, schema: str | None = None
) -> tuple[str | None, str, str]:
    """(the schema revision of the database (of ``schema`` in it) or None, the one this
    simindex needs, what to do: "up to date" or the step to take)."""
    store = _connect(url, schema, must_exist=True)
    try:
        with _transaction(store, write=False) as connection:
            revision = migrate.current_revision(connection)
    finally:
        store.engine.dispose()
    if revision is None:
        return None, migrate.HEAD_REVISION, "no simindex index here: `simindex init` creates one"
    try:
        migrate.check_revision(revision)
    except SchemaVersionError as exc:
        return revision, migrate.HEAD_REVISION, str(exc)
    return revision, migrate.HEAD_REVISION, "up to date"


def _pair_spans(
    a: np.ndarray, b: np.ndarray, ids: np.ndarray, sizes: np.ndarray, text_bytes: int
) -> Iterator[tuple[int, int]]:
    """[lo, hi) ranges of the pairs (a[i], b[i]) whose documents hold about ``text_bytes``
    (one pair at least), ``sizes`` being the bytes of the sorted document ``ids``. A run of
    equal a[i] counts a's size once, so pairs sorted by a make fewer ranges."""
    first_of_a = np.r_[True, a[1:] != a[:-1]]
    cost = sizes[np.searchsorted(ids, b)]
    cost += sizes[np.searchsorted(ids, a)] * first_of_a
    return spans(np.cumsum(cost), text_bytes)


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


def _matches(
    names: list[str | None],
    rows: np.ndarray,
    estimated: np.ndarray,
    exact: np.ndarray | None,
    threshold: float,
) -> list[Match]:
    """Matches for profile rows with similarity >= threshold, best first."""
    similarity = _similarity(estimated, exact)
    matches = [
        Match(names[row], float(estimated[p]), None if exact is None else float(exact[p]))
        for p, row in enumerate(rows.tolist())
        if similarity[p] >= threshold
    ]
    return sorted(matches, key=lambda m: (-m.similarity, m.external_id))


def _connect(
    url: str | os.PathLike[str] | None,
    schema: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    must_exist: bool = False,
) -> Store:
    engine = create_engine(database_url(url), schema, must_exist=must_exist)
    return Store(engine, schema, lock_timeout)


def _check_threshold(threshold: float) -> float:
    if not 0 <= threshold <= 1:
        raise ParameterError(f"threshold must be within [0, 1], got {threshold}")
    return threshold


def _check_seed(seed: int) -> None:
    if seed < 0:
        raise ParameterError(f"seed must be a non-negative integer, got {seed}")


def _pair(row: dict[str, Any]) -> Pair:
    return Pair(row["id_a"], row["id_b"], row["exact_jaccard"], row["estimated_jaccard"])


def _expected_recall(banding: dict[str, Any], threshold: float, num_perm: int) -> float:
    """P(threshold) of the banding: the share of pairs at the threshold it makes candidates.
    Warns (LowRecallWarning) when that is below the recall the tuner aims for, with the fix."""
    bands, rows = banding["bands"], banding["rows"]
    recall = lsh.candidate_probability(threshold, bands, rows)
    if recall >= DEFAULT_RECALL - 1e-9:
        return recall
    if threshold > 0 and lsh.tune_threshold(num_perm, threshold).feasible:
        fix = (
            f"run `simindex reband --threshold {threshold:g}` (the banding `simindex tune "
            f"--threshold {threshold:g}` picks; `tune --db` shows its cost on this index first)"
        )
    else:
        fix = f"no banding of {num_perm} hashes reaches it at that similarity"
    warnings.warn(
        f"the active banding ({bands} bands x {rows} rows) finds a pair at similarity "
        f"{threshold:g} with probability {recall:.1%} (expected recall; the target is "
        f"{DEFAULT_RECALL:g}); {fix}",
        LowRecallWarning,
        stacklevel=3,
    )
    return recall


def _similarity(estimated: np.ndarray, exact: np.ndarray | None) -> np.ndarray:
    """The similarity reported: exact Jaccard when known, else the estimate."""
    return estimated if exact is None else exact


def _concatenate_found(
    chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """One (doc_a, doc_b, estimated, exact) of verified chunks (exact None without text)."""
    if not chunks:
        empty = np.empty(0, np.int64)
        return empty, empty, np.empty(0), None
    exact = None if chunks[0][3] is None else np.concatenate([c[3] for c in chunks])
    return (*(np.concatenate([c[i] for c in chunks]) for i in range(3)), exact)


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
