"""The library facade: create or open an index, add documents, query, find pairs, re-band.

    from simindex import Index
    with Index.open("postgresql://postgres@127.0.0.1:5432/test") as index:
        result = index.add(batch, on_duplicate="skip", find_duplicates=0.8)
        for external_id, matches in result.duplicates.items(): ...

Each call is one database transaction: it happens completely or not at all, and what it
reads is one snapshot of the index (docs/reliability.md). Index holds the lifecycle; each
verb is done by the in-process executor (simindex.local) on the index's store.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from simindex.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_BUCKET_SIZE,
    DEFAULT_SAMPLE,
    DEFAULT_THRESHOLD,
)
from simindex.local import (
    bandings,
    clusters,
    evaluation,
    ingest,
    lifecycle,
    pairs,
    query,
    removal,
    runs,
    stats,
)
from simindex.local.common import VERIFY_TEXT_BYTES
from simindex.local.context import Context
from simindex.local.ingest import BATCH_TEXT_CHARS, Document, OnDuplicate, OnEmpty
from simindex.local.pairs import ESTIMATED_PAIRS
from simindex.local.query import QUERY_TEXT_CANDIDATES
from simindex.local.schema import schema_revision, upgrade_schema
from simindex.pipeline.documents import DEFAULT_MAX_CHARS
from simindex.results import (
    AddResult,
    ClusterMember,
    ClusterReport,
    Match,
    Pair,
    PairsReport,
    Removal,
    StoredDocument,
)
from simindex.spec import SignatureSpec
from simindex.store import DEFAULT_LOCK_TIMEOUT, StagedLoad, StagedMove, Store, display_url

if TYPE_CHECKING:
    import numpy as np

    from simindex.pipeline.evaluate import CandidateEstimate, Evaluation
    from simindex.policies import ClusterMode, KeepOrder, KeepRule
    from simindex.results import Decision, Explanation, RunRecord

__all__ = [
    "BATCH_TEXT_CHARS",
    "ESTIMATED_PAIRS",
    "QUERY_TEXT_CANDIDATES",
    "VERIFY_TEXT_BYTES",
    "AddResult",
    "ClusterMember",
    "ClusterReport",
    "Document",
    "Index",
    "Match",
    "OnDuplicate",
    "OnEmpty",
    "Pair",
    "PairsReport",
    "Removal",
    "StoredDocument",
    "schema_revision",
    "upgrade_schema",
]


class Index:
    """A near-duplicate index stored in a SQLite or PostgreSQL database.

    Made by :meth:`create`, :meth:`open` or :meth:`open_or_create`, not by calling the class;
    use it as a context manager (or call :meth:`close`)::

        with Index.create("sqlite:///news.db", threshold=0.8) as index:
            index.add([("a", "Stocks rose on Monday."), ("b", "Stocks rose on Monday!")])
            index.find_pairs()                      # candidates -> verified pairs, stored
            for pair in index.pairs():              # best first
                print(pair.id_a, pair.id_b, pair.similarity)
            index.query("Stocks rose on Monday")    # what in the index duplicates a text

    Every method is one transaction of its own. Errors are :class:`simindex.SimindexError`
    subclasses whose message names the problem and the fix."""

    def __init__(self, url: object = None, *, _context: Context | None = None):
        if _context is None:
            raise TypeError(
                f"Index({url!r}) does not open an index: use Index.open(url) for an existing "
                "one, or Index.create(url) for a new one"
            )
        self._context = _context
        self.url = display_url(_context.store.engine.url)
        # Whether create() completed a half-created index (a schema with no settings and no
        # documents, which older versions could leave).
        self.completed_half_created = _context.half_created

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
        a kill leaves the database as it was (a SQLite file that transaction made is
        removed). ``deferred``: in the first transaction that uses the index instead (its
        first add(), say), so that if that fails no index is left.

        The first banding is (bands, rows) when given, else the tuner's choice for
        ``threshold`` (banding.banding_for). Raises DatabaseError if the database
        already holds an index, or tables of the same names. A half-created index (a
        schema with no settings and no documents, which older versions could leave) is
        completed, and ``completed_half_created`` is True. Writers wait for each other up
        to ``lock_timeout`` seconds.
        """
        context = lifecycle.create(
            url, spec, threshold=threshold, bands=bands, rows=rows, keep_text=keep_text,
            schema=schema, lock_timeout=lock_timeout, deferred=deferred,
        )  # fmt: skip
        return cls(_context=context)

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        schema: str | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    ) -> Index:
        """Open an existing index (on PostgreSQL, the one in ``schema`` if given); refuses a
        missing SQLite file (it is not created) or a database with no index or half an index
        (NoIndexError: Index.create makes or completes one), and one whose schema is not
        this version's (SchemaVersionError). See create for ``lock_timeout``."""
        return cls(_context=lifecycle.open_index(url, schema=schema, lock_timeout=lock_timeout))

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
        context, created = lifecycle.open_or_create(
            url, schema=schema, lock_timeout=lock_timeout, **create_options
        )
        return cls(_context=context), created

    def close(self) -> None:
        self._context.store.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def spec(self) -> SignatureSpec:
        return self._context.spec

    @property
    def keep_text(self) -> bool:
        return self._context.keep_text

    @property
    def threshold(self) -> float:
        """The index's threshold: what find_pairs, query and clusters use by default."""
        return self._context.threshold

    @property
    def settings(self) -> dict[str, Any]:
        return self._context.settings

    @property
    def _store(self) -> Store:
        return self._context.store

    # -- adding and querying ---------------------------------------------------------------

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
        is stored as its decimal text. With ``find_duplicates=t``, each new document is
        first queried against the index and the earlier documents of the call
        (query-then-insert), and its matches with similarity >= t are returned.
        """
        return ingest.add(
            self._context, documents, batch_size=batch_size, on_duplicate=on_duplicate,
            on_empty=on_empty, find_duplicates=find_duplicates, max_chars=max_chars,
            progress=progress,
        )  # fmt: skip

    def add_signatures(
        self,
        external_ids: Iterable[str],
        signatures: np.ndarray,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_duplicate: OnDuplicate = "fail",
    ) -> AddResult:
        """Add documents given by precomputed signatures, without text, in one transaction:
        ``signatures`` holds integers in [0, 2**32) of shape (n, num_perm), row i that of
        ``external_ids[i]`` (strings), made under the index's scheme (an index created with
        spec.datasketch_spec: datasketch's MinHash hash values). ``on_duplicate`` as for
        :meth:`add`. An index whose signatures simindex makes from text refuses them
        (SpecMismatchError); a wrong shape or value is a ParameterError."""
        return ingest.add_signatures(
            self._context, list(external_ids), signatures, batch_size=batch_size,
            on_duplicate=on_duplicate,
        )  # fmt: skip

    def query_signature(self, signature: np.ndarray) -> list[str]:
        """The external ids of all indexed documents sharing a bucket of the active banding
        with ``signature`` (num_perm integers in [0, 2**32), under the index's scheme):
        candidates, unverified, as datasketch's MinHashLSH.query answers (in no order)."""
        return query.query_signature(self._context, signature)

    def bucket_counts(self) -> list[dict[int, int]]:
        """Per band of the active banding, bucket key (int64) -> how many documents it holds."""
        return query.bucket_counts(self._context)

    def __len__(self) -> int:
        """The number of indexed documents."""
        with self._context.transaction() as connection:
            return self._context.store.document_count(connection)

    def content_hashes(self, external_ids: Iterable[str]) -> dict[str, int]:
        """The content hash (of the normalized text) of each of ``external_ids`` that is
        indexed: how a re-run (same text) is told from a conflicting id."""
        return ingest.content_hashes(self._context, external_ids)

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
        return query.query(
            self._context, text, threshold=threshold, limit=limit, max_bucket_size=max_bucket_size
        )

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
        return query.query_id(
            self._context, external_id, threshold=threshold, limit=limit,
            max_bucket_size=max_bucket_size,
        )  # fmt: skip

    # -- pairs and clusters ----------------------------------------------------------------

    def find_pairs(
        self,
        threshold: float | None = None,
        *,
        full: bool = False,
        max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
        text_bytes: int = VERIFY_TEXT_BYTES,
    ) -> PairsReport:
        """Find candidate pairs of the active banding in the database (GROUP BY band, key),
        verify them, and store those with similarity >= threshold (default: the index's).

        Incremental when pairs were found before at the same threshold (and not ``full``):
        only buckets holding a document added since are grouped, only pairs with such a
        document are verified, and existing clusters absorb the new pairs. Otherwise the
        banding's pairs (and clusters) are rebuilt. Candidates are verified in chunks whose
        documents hold about ``text_bytes`` of text, each chunk's pairs stored before the
        next is read.
        """
        return pairs.find_pairs(
            self._context, threshold, full=full, max_bucket_size=max_bucket_size,
            text_bytes=text_bytes,
        )  # fmt: skip

    def pairs(self, threshold: float | None = None, *, limit: int | None = None) -> Iterator[Pair]:
        """Stored pairs of the active banding with similarity >= threshold, best first (the
        first ``limit`` of them, if given: cheaper than stopping early on a large index).

        Raises SimindexError if pairs were not found (or are stale, or were found at a
        higher threshold): run :meth:`find_pairs` first.
        """
        return pairs.pairs(self._context, threshold, limit=limit)

    def weakest_pairs(self, limit: int = 5) -> list[Pair]:
        """The active banding's ``limit`` stored pairs of lowest similarity, least similar
        first: the pairs nearest the line between a duplicate and not, which is where a
        reader judges the threshold."""
        return pairs.weakest_pairs(self._context, limit)

    def cluster(
        self,
        threshold: float | None = None,
        *,
        keep: KeepRule = "earliest",
        keep_by: str | None = None,
        keep_order: KeepOrder = "max",
        mode: ClusterMode = "components",
        largest: int = clusters.LARGEST_NAMED,
    ) -> ClusterReport:
        """Group the stored pairs with similarity >= threshold into clusters, stored and
        named by their representative: ``mode`` "star" (every member paired with its
        representative at >= threshold) or "components" (connected components, which
        chain); the representative by ``keep``, or by the metadata field ``keep_by``
        (see :class:`simindex.policies.ClusterPolicy`; earliest/latest is ingestion order).
        The report names the ``largest`` largest clusters, with their weakest member.
        Later :meth:`find_pairs` and :meth:`delete` calls keep them up to date. Raises
        ParameterError for an unknown choice."""
        from simindex.policies import ClusterPolicy

        policy = ClusterPolicy(keep=keep, keep_by=keep_by, keep_order=keep_order, mode=mode)
        return clusters.cluster(self._context, threshold, policy, largest)

    def explain(self, a: str, b: str) -> Explanation:
        """Why the documents with external ids ``a`` and ``b`` are (or are not) a pair:
        their exact and estimated Jaccard, the bands they collide in under the active banding
        and the chance of that at their similarity, and the passages their normalized texts
        share (see :class:`~simindex.results.Explanation`). Raises SimindexError for an id
        that is not indexed."""
        from simindex.local.explain import explain

        return explain(self._context, a, b)

    def clusters(self) -> Iterator[ClusterMember]:
        """Clustered documents of the active banding, representative first in each cluster."""
        return clusters.list_clusters(self._context)

    def clustered_duplicates(self, external_ids: Iterable[str]) -> set[str]:
        """Those of ``external_ids`` that the active banding's clusters hold under another
        document (not their cluster's representative)."""
        return clusters.clustered_duplicates(self._context, external_ids)

    # -- documents -------------------------------------------------------------------------

    def delete(
        self, external_ids: Iterable[str | int], *, dry_run: bool = False, must_exist: bool = False
    ) -> Removal:
        """Remove documents by external id, with their signatures, band keys, pairs and
        cluster rows, in one transaction; the clusters they were in are recomputed from the
        remaining pairs. Ids that are not indexed are named in the result, or with
        ``must_exist`` raise InputError and nothing is removed; ``dry_run`` removes nothing
        and says what would go."""
        return removal.delete(self._context, external_ids, dry_run=dry_run, must_exist=must_exist)

    def evict(self, older_than: datetime, *, dry_run: bool = False) -> Removal:
        """Remove the documents ingested before ``older_than`` (like :meth:`delete`); a naive
        datetime is taken as UTC. A cut-off in the future is refused: it would remove
        documents ingested from now on too."""
        return removal.evict(self._context, older_than, dry_run=dry_run)

    def documents(self, external_ids: Iterable[str | int]) -> dict[str, StoredDocument]:
        """The stored documents of those of ``external_ids`` that are indexed, by id."""
        return removal.documents(self._context, external_ids)

    def texts(self, external_ids: Iterable[str]) -> dict[str, str | None]:
        """The stored text of each given document that exists (None when text is not kept)."""
        return {i: document.text for i, document in self.documents(external_ids).items()}

    # -- bandings --------------------------------------------------------------------------

    def reband(
        self,
        bands: int | None = None,
        rows: int | None = None,
        *,
        threshold: float | None = None,
        activate: bool = True,
        drop_old: bool = False,
    ) -> int:
        """Build a banding (``bands`` x ``rows``, or tuned for ``threshold``) from the stored
        signatures and return its id; readers keep using the active banding until the build
        commits. With ``activate``, it takes the active banding's place with its pairs and
        clusters found anew (at ``threshold`` if given, which becomes the index's), so the
        index answers as before; ``drop_old`` removes the other bandings. See
        simindex.local.bandings.reband."""
        return bandings.reband(
            self._context, bands, rows, threshold=threshold, activate=activate,
            drop_old=drop_old,
        )  # fmt: skip

    def activate(self, banding_id: int) -> None:
        """Make a complete banding (built by ``reband(..., activate=False)``) the active
        one, with the pairs and clusters the banding it replaces had found anew for it (as
        :meth:`reband` does), so queries and the SQL views answer as before from the commit on."""
        bandings.activate(self._context, banding_id)

    def drop_banding(self, banding_id: int) -> None:
        """Remove one banding that is not the active one, with its band keys, pairs and
        clusters: one kept with ``activate=False`` and no longer wanted, or one a killed
        re-band left ``building``, or one retired whose band keys a stopped drop left. A
        re-band still building it stops at its next part with a clear error."""
        bandings.drop_banding(self._context, banding_id)

    def bandings(self) -> list[dict[str, Any]]:
        with self._context.transaction() as connection:
            return self._context.store.bandings(connection)

    # -- the audit trail -------------------------------------------------------------------

    @contextmanager
    def run(self, command: str, parameters: dict[str, Any] | None = None) -> Iterator[None]:
        """Record the changes made by the calls inside as one run of the audit trail, named
        ``command`` with ``parameters`` (JSON-able; paths and times are kept as text)::

            with index.run("nightly crawl", {"source": "s3://crawl/2026-12-01"}):
                index.add(documents)
                index.find_pairs()
                index.cluster(mode="star", keep="longest")

        Outside such a block each call that changes the index records a run of its own
        (named after the CLI command: ingest, pairs, clusters, reband, delete, evict, ...),
        in the transaction of its change. Runs do not nest."""
        with runs.grouped(self._context, command, parameters):
            yield

    def runs(self, limit: int | None = None) -> list[RunRecord]:
        """The runs that changed the index, newest first (the latest ``limit`` of them)."""
        return runs.runs(self._context, limit)

    def decisions(self, run_id: int) -> Iterator[Decision]:
        """The decisions of a run that built clusters (``clusters``, ``dedup --db``): each
        clustered document held under another, with that representative and their
        similarity, in ingestion order."""
        return runs.decisions(self._context, run_id)

    # -- the index as a whole --------------------------------------------------------------

    def check(self) -> list[str]:
        """Integrity problems of the index (an empty list when it is consistent): documents
        without a signature or a complete set of band keys for every complete banding,
        band keys of no document, not exactly one active and complete banding."""
        return stats.check(self._context)

    def stats(self, largest: int = 10) -> stats.IndexStats:
        """The index as a whole (:class:`~simindex.IndexStats`): documents, bandings, and the
        active banding's pairs, bucket sizes, ``largest`` buckets and largest clusters."""
        return stats.stats(self._context, largest)

    def evaluate(
        self,
        *,
        sample: int = DEFAULT_SAMPLE,
        floor: float = 0.5,
        seed: int = 0,
        threshold: float | None = None,
    ) -> Evaluation:
        """How good the results are: recall of the active banding, recall and precision of
        verification at ``threshold`` (default: the index's), and the estimate's error,
        against the exact Jaccard of all pairs >= ``floor`` among ``sample`` random documents
        (all of them when the index holds fewer). Needs stored text. See
        docs/evaluation.md."""
        return evaluation.evaluate(
            self._context, sample=sample, floor=floor, seed=seed, threshold=threshold
        )

    def estimate_candidates(
        self, bandings: list[tuple[int, int]], *, sample: int = 5000, seed: int = 0
    ) -> list[CandidateEstimate]:
        """How many candidate pairs each (bands, rows) would make on this index's documents,
        from the stored signatures of ``sample`` random documents (see
        simindex.pipeline.evaluate.estimate_candidates): the cost of recall, before re-banding."""
        return evaluation.estimate_candidates(self._context, bandings, sample=sample, seed=seed)

    # -- bulk loads by many writers (simindex.spark.ingest) ---------------------------------

    def load_bandings(self) -> dict[int, tuple[int, int]]:
        """(bands, rows) of the bandings a load fills, by banding id: the complete ones, or
        a deferred index's first banding under 0 until its creation gives it an id."""
        return self._context.load_bandings()

    def staged_load(self, name: str) -> StagedLoad:
        """New staging tables ``name``_* for load_bandings() (store.StagedLoad), which
        writers outside this process fill (store.staged_part); StagedLoad.drop removes them.
        PostgreSQL only."""
        return lifecycle.staged_load(self._context, name)

    @contextmanager
    def load_transaction(self, staged: StagedLoad) -> Iterator[StagedMove]:
        """A write transaction of the index in which ``staged`` is moved in (a deferred
        index is created in it first)."""
        with lifecycle.load_transaction(self._context, staged) as mover:
            yield mover
