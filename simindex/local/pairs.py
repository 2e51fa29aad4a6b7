"""Finding pairs: candidates grouped by the database (GROUP BY band, key), verified in
chunks of bounded memory by a pipeline of threads, and stored; and reading them back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Connection

from simindex.defaults import DEFAULT_MAX_BUCKET_SIZE
from simindex.errors import ParameterError
from simindex.local import runs
from simindex.local.clusters import update_clusters
from simindex.local.common import (
    VERIFY_TEXT_BYTES,
    check_pairs_cover,
    check_threshold,
    document_bytes,
    expected_recall,
    pair_spans,
    to_pair,
)
from simindex.local.context import Context
from simindex.pipeline import banding as lsh
from simindex.pipeline.chunking import ahead
from simindex.pipeline.runs import pair_documents
from simindex.results import Pair, PairsReport

if TYPE_CHECKING:
    from simindex.signature_file import SignatureFile

# Candidate pairs whose documents' signatures are read at once to rule some out (~1 KB of
# transient memory per pair).
ESTIMATED_PAIRS = 8_192
# Signatures a signature pass reads at a time; its buffer is held while the candidates are
# collected.
SIGNATURE_PASS_ROWS = 5_000


@dataclass
class _Verified:
    """What pairs_of_banding verified: counts, and the pairs kept for an incremental
    update of the clusters."""

    candidates: int
    hot_buckets: int
    largest_bucket: int
    pairs: int
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]
    new_documents: int = 0

    def kept_pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The kept chunks as one (doc_a, doc_b, estimated, exact), exact None without text."""
        if not self.kept:
            empty = np.empty(0, np.int64)
            return empty, empty, np.empty(0), None
        exact = None if self.kept[0][3] is None else np.concatenate([c[3] for c in self.kept])
        return (*(np.concatenate([c[i] for c in self.kept]) for i in range(3)), exact)


def find_pairs(
    ctx: Context,
    threshold: float | None = None,
    *,
    full: bool = False,
    max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
    text_bytes: int = VERIFY_TEXT_BYTES,
) -> PairsReport:
    """Find candidate pairs of the active banding in the database (GROUP BY band, key),
    verify them, and store those with similarity >= threshold, in one transaction.

    Incremental when pairs were found before at the same threshold (and not ``full``):
    only buckets holding a document added since are grouped, only pairs with such a
    document are verified, and existing clusters absorb the new pairs. Otherwise the
    banding's pairs (and clusters) are rebuilt.

    Candidates are verified in chunks whose documents hold about ``text_bytes`` of text
    (the memory of a chunk follows its text, not its number of pairs), and each chunk's
    pairs are stored before the next is read.
    """
    threshold = ctx.threshold if threshold is None else check_threshold(threshold)
    if max_bucket_size < 2:
        raise ParameterError(f"max_bucket_size must be at least 2, got {max_bucket_size}")
    started = time.perf_counter()
    parameters = {"threshold": threshold, "full": full, "max_bucket_size": max_bucket_size}
    with (
        ctx.transaction(write=True) as connection,
        runs.recorded(ctx, connection, "pairs", parameters, threshold=threshold) as run,
    ):
        active = ctx.active_banding(connection)
        recall = expected_recall(active, threshold, ctx.spec.num_perm)
        since = None
        if not full and active["pairs_threshold"] == threshold:
            since = active["pairs_through"]
        found = pairs_of_banding(
            ctx, connection, active, threshold, since, max_bucket_size, text_bytes
        )
        update_clusters(ctx, connection, active, threshold, since, found.kept_pairs())
        stored = ctx.store.pair_count(connection, active["id"], threshold)
        run.count(candidates=found.candidates, pairs=found.pairs)
    return PairsReport(
        banding_id=active["id"],
        bands=active["bands"],
        rows=active["rows"],
        threshold=threshold,
        candidates=found.candidates,
        pairs=found.pairs,
        stored=stored,
        hot_buckets=found.hot_buckets,
        largest_bucket=found.largest_bucket,
        exact=ctx.keep_text,
        incremental=since is not None,
        new_documents=found.new_documents,
        expected_recall=recall,
        seconds=time.perf_counter() - started,
    )


def pairs_of_banding(
    ctx: Context,
    connection: Connection,
    banding: dict[str, Any],
    threshold: float,
    since: int | None,
    max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
    text_bytes: int = VERIFY_TEXT_BYTES,
) -> _Verified:
    """Find, verify and store the pairs of ``banding`` in the caller's write transaction:
    all of them (its stored pairs replaced), or with ``since`` only those with a document
    added after that id; the banding then records ``threshold`` and the newest id."""
    banding_id = banding["id"]
    newest = ctx.store.max_document_id(connection)
    touching, new_documents = None, 0
    if since is not None:  # only the buckets of documents added since
        added, touching = stored_keys(
            ctx, connection, banding["bands"], banding["rows"], after=since
        )
        new_documents = int(added.size)
    else:
        ctx.store.delete_pairs(connection, banding_id)
    # The next buckets are read (the database grouping them) while these are paired.
    buckets = ahead(ctx.store.iter_buckets(connection, banding_id, touching))
    found = store_verified_pairs(
        ctx, connection, banding_id, buckets, since, threshold, max_bucket_size, text_bytes
    )
    found.new_documents = new_documents
    if since is None:
        ctx.store.analyze(connection, "pairs")
    ctx.store.update_banding(
        connection, banding_id, pairs_threshold=threshold, pairs_through=newest
    )
    return found


def store_verified_pairs(
    ctx: Context,
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
        ctx.reader(connection) as reader,
        signature_pass(ctx, connection, reader, full=since is None) as passed,
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

        signatures = candidate_signatures(ctx, reader, passed)
        with ctx.store.pair_inserts(connection):
            pairs = to_verify()
            verified = verify(ctx, connection, reader, signatures, pairs, threshold, text_bytes)
            for chunk in verified:
                ctx.store.insert_pairs(connection, banding_id, *chunk)
                found.pairs += chunk[0].size
                if since is not None:  # incremental clusters absorb these pairs
                    found.kept.append(chunk)
    return found


@contextmanager
def signature_pass(
    ctx: Context, connection: Connection, reader: Connection, full: bool
) -> Iterator[Future[SignatureFile] | None]:
    """For a full rebuild on a store that makes one (Store.signature_pass_while_grouping):
    a thread that reads every stored signature, in id order, on ``reader``, into a
    SignatureFile, while ``connection`` groups the buckets; a future of the file. None for
    an incremental run, another store, or where ``reader`` is ``connection``.

    The candidates of a full rebuild name a large share of the index, whose look-ups cost
    a random page read per document and block once the table outgrows the database's
    cache; made during the grouping, the pass takes what the grouping leaves idle (a core
    and the reader's connection). The file holds a signature per id, in the temporary
    directory."""
    if not full or reader is connection or not ctx.store.signature_pass_while_grouping:
        yield None
        return
    from simindex.signature_file import signature_file

    first, last = ctx.store.document_id_range(reader)
    stop = threading.Event()
    with (
        signature_file(first, last, ctx.spec.num_perm) as file,
        ThreadPoolExecutor(max_workers=1) as worker,
    ):
        try:
            yield worker.submit(fill_signature_file, ctx, reader, file, stop)
        finally:
            stop.set()  # the pass ends soon if it is still running


def fill_signature_file(
    ctx: Context, reader: Connection, file: SignatureFile, stop: threading.Event
) -> SignatureFile:
    """Write the stored signatures of the file's ids into it, reading them on ``reader``
    in id order, SIGNATURE_PASS_ROWS at a time, until ``stop`` is set."""
    after = file.first - 1
    rows = SIGNATURE_PASS_ROWS
    for ids, sigs in ctx.store.signature_chunks(reader, ctx.spec.num_perm, rows, after):
        if stop.is_set():
            break
        file.write(ids, sigs)
        if ids[-1] >= file.last:
            break
    return file


def candidate_signatures(
    ctx: Context, reader: Connection, passed: Future[SignatureFile] | None
) -> Callable[[np.ndarray], np.ndarray]:
    """How verification reads the signatures of candidate documents (a function of sorted
    ids, called from its reading thread): from the file of a signature pass made while the
    buckets were grouped (``passed``, see signature_pass), if one was; else looked up on
    ``reader``, a block at a time."""
    if passed is not None:
        return passed.result().read
    return lambda ids: ctx.store.signatures_of(reader, ids, ctx.spec.num_perm)


def verify(
    ctx: Context,
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
    Signatures are read by ``signatures`` and text sizes on ``reader`` (see plausible_pairs).
    One pipeline runs through all the blocks: a block's first reads overlap the previous
    block's last compare."""
    with ThreadPoolExecutor(max_workers=1) as worker:
        comparing = None
        ruled = plausible_pairs(ctx, reader, signatures, blocks, threshold)
        for block_a, block_b, signed, sizes in ruled:
            for lo, hi in pair_spans(block_a, block_b, signed[0], sizes, text_bytes):
                a, b = block_a[lo:hi], block_b[lo:hi]
                documents = chunk_documents(ctx, connection, a, b, signed)
                done = comparing.result() if comparing else None
                comparing = worker.submit(compare_chunk, ctx, a, b, documents, threshold)
                if done is not None:
                    yield done
        if comparing is not None:
            yield comparing.result()


def plausible_pairs(
    ctx: Context,
    reader: Connection,
    signatures: Callable[[np.ndarray], np.ndarray],
    blocks: Iterable[tuple[np.ndarray, np.ndarray]],
    threshold: float,
) -> Iterator[tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray]]:
    """The pairs of ``blocks``, ESTIMATED_PAIRS at a time, with the (sorted ids,
    signatures) of their documents and the documents' bytes (see document_bytes), less
    the pairs whose signature estimate rules out an exact similarity >= threshold (see
    verify.estimate_floor): their texts are never read. Without kept text the estimate is
    the verdict, so all pass.

    A worker thread takes the next pairs (from the blocks, across their bounds), reads
    their signatures (by ``signatures``) and text sizes (on ``reader``) and rules pairs
    out, while the caller reads texts and stores pairs on its connection: the database
    looks both up at once."""
    from simindex.pipeline.minhash import estimate_rows
    from simindex.pipeline.verify import estimate_floor

    floor = estimate_floor(threshold, ctx.spec.num_perm)

    def plausible(pairs: tuple[np.ndarray, np.ndarray]) -> tuple[Any, ...]:
        a, b = pairs
        ids = pair_documents(a, b)
        signed = signatures(ids)
        if ctx.keep_text and floor > 0:
            rows_a, rows_b = np.searchsorted(ids, a), np.searchsorted(ids, b)
            keep = estimate_rows(signed, rows_a, rows_b) >= floor
            a, b = a[keep], b[keep]
        # Only the plausible pairs' documents are sized (their texts read); others count 0.
        sized = pair_documents(a, b)
        sizes = np.zeros(ids.shape, np.int64)
        sizes[np.searchsorted(ids, sized)] = document_bytes(ctx, reader, sized)
        return a, b, (ids, signed), sizes

    slices = (
        (doc_a[start : start + ESTIMATED_PAIRS], doc_b[start : start + ESTIMATED_PAIRS])
        for doc_a, doc_b in blocks
        for start in range(0, doc_a.size, ESTIMATED_PAIRS)
    )
    yield from ahead(slices, plausible)


def chunk_documents(
    ctx: Context,
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
    texts = ctx.store.utf8_texts(connection, ids) if ctx.keep_text else None
    return ids, signatures[np.searchsorted(signed_ids, ids)], texts


def compare_chunk(
    ctx: Context,
    a: np.ndarray,
    b: np.ndarray,
    documents: tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None],
    threshold: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The pairs (a[i], b[i]) with similarity >= threshold: (doc_a, doc_b, estimated,
    exact), by verify.verified: what stages.verify computes, without Arrow, whose
    libraries would stay loaded for the rest of the command; no database work."""
    from simindex.pipeline.shingle import normalize_utf8
    from simindex.pipeline.verify import verified

    ids, signatures, texts = documents
    normalized = None if texts is None else normalize_utf8(*texts)
    return verified(a, b, ids, signatures, normalized, ctx.spec, threshold)


def pairs(
    ctx: Context, threshold: float | None = None, *, limit: int | None = None
) -> Iterator[Pair]:
    """Stored pairs of the active banding with similarity >= threshold, best first (the
    first ``limit`` of them, if given: cheaper than stopping early on a large index).

    Raises SimindexError if pairs were not found (or are stale, or were found at a
    higher threshold): run :meth:`find_pairs` first.
    """
    threshold = ctx.threshold if threshold is None else check_threshold(threshold)
    if limit is not None and limit < 0:
        raise ParameterError(f"limit must not be negative, got {limit}")
    with ctx.transaction() as connection:
        active = ctx.active_banding(connection)
        check_pairs_cover(ctx, connection, active, threshold)
        for row in ctx.store.iter_pairs(connection, active["id"], threshold, limit):
            yield to_pair(row)


def weakest_pairs(ctx: Context, limit: int = 5) -> list[Pair]:
    """The active banding's ``limit`` stored pairs of lowest similarity, least similar
    first: the pairs nearest the line between a duplicate and not, which is where a
    reader judges the threshold."""
    with ctx.transaction() as connection:
        active = ctx.active_banding(connection)
        rows = ctx.store.weakest_pairs(connection, active["id"], limit)
    return [to_pair(row) for row in rows]


def stored_keys(
    ctx: Context,
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
    chunks = ctx.store.signature_chunks(connection, ctx.spec.num_perm, chunk_size, after)
    for chunk_ids, sigs in chunks:
        ids.append(chunk_ids)
        keys.append(lsh.band_keys(sigs, bands, rows))
    return np.concatenate(ids), np.concatenate(keys)
