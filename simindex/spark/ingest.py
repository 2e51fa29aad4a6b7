"""Build or extend a PostgreSQL index from a Spark DataFrame: ``simindex spark ingest``.

Each task signs its partition with :func:`simindex.pipeline.stages.sign` (what ``Index.add`` runs)
and loads the documents, signatures and band keys of every complete banding by binary COPY
from the task, through psycopg, into staging tables (store.StagedLoad, store.staged_part): one transaction per
partition, which a retried or speculative attempt of the partition finds done and skips, so
every document is staged once, under the same staging id. Then the driver, in one write
transaction of the index (the first, for a new index, so that it is created with its
documents), refuses or skips duplicate ids as ``ingest`` does, gives the documents
consecutive ids from the index's own sequence in input order, moves them into the index,
and ends each banding's band keys as a local load does (store.BandKeyWriter: a new
partition is loaded in bulk, gets its primary key, is attached and analyzed).

A failed job changes nothing: the staging tables are dropped and the index is as it was
(a killed driver leaves them, unused, named ``simindex_load_*``: drop them). The input must
be the same on a recompute (files are; a DataFrame with a random column is not).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simindex.defaults import DEFAULT_LOCK_TIMEOUT
from simindex.errors import (
    DuplicateIdError,
    EmptyDocumentError,
    InputError,
    ParameterError,
    SimindexError,
)
from simindex.io.lines import ReplacedRecords
from simindex.io.readers import record_metadata
from simindex.local import lifecycle
from simindex.pipeline import stages
from simindex.pipeline.documents import DEFAULT_MAX_CHARS
from simindex.spec import SignatureSpec
from simindex.store import StagedMove, StagedPart, database_url, staged_part

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from simindex.io.delimited import CsvLayout
    from simindex.policies import EncodingErrors

# Examples of rejected or duplicate documents named in a message or a report.
EXAMPLES = 5
# Staging ids are part << 32 | row: a partition holds fewer rows than this.
MAX_PART_ROWS = 2**32


@dataclass(frozen=True)
class IngestReport:
    """What :func:`ingest` did: ``added`` documents (the index holds ``total``), the index
    ``created`` with them or not; documents left out: ids already indexed or repeated
    (``skipped_existing``), texts empty after normalization (``skipped_empty``), malformed
    records (``skipped_malformed``), with ``examples`` of the latter two as (id, problem;
    None for an empty text). ``partitions``: the tasks that loaded them. ``seconds`` in all,
    of which ``staging_seconds`` in the Spark job and ``moving_seconds`` in the transaction
    that moved the documents into the index. ``replaced``: the records read with U+FFFD
    for bytes not in the encoding (:func:`ingest_files`, with encoding_errors="replace")."""

    added: int
    total: int
    created: bool
    skipped_existing: int
    skipped_empty: int
    skipped_malformed: int
    examples: list[tuple[str | None, str | None]]
    partitions: int
    seconds: float
    staging_seconds: float
    moving_seconds: float
    replaced: ReplacedRecords = field(default_factory=ReplacedRecords)


def ingest(
    dataframe: DataFrame,
    url: str,
    *,
    schema: str | None = None,
    scheme: str | None = None,
    on_duplicate: str = "fail",
    on_empty: str = "skip",
    on_error: str = "fail",
    max_chars: int = DEFAULT_MAX_CHARS,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    prepare: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None = None,
    **create_options: Any,
) -> IngestReport:
    """Add the documents of ``dataframe`` (columns ``id``, ``text``, optionally
    ``metadata`` as JSON text and ``problem``: why a row is no document, a reader's message,
    null if it is one) to the PostgreSQL index at ``url`` (in ``schema``), creating
    it with ``create_options`` (see Index.create: threshold, bands, rows, keep_text) if the
    database holds none. All of it in one transaction of the index: on an error nothing is
    added (see the module docstring).

    ``scheme``: the signature scheme the caller expects; an index of another is refused
    (SpecMismatchError) before any work. ``on_duplicate``: an id already indexed or repeated
    fails the load ("fail") or is skipped, the first copy in input order staying ("skip").
    ``on_empty`` and ``on_error`` ("fail" or "skip"): a text empty after normalization, and a
    malformed record (see documents.document_problem). A SQLite URL is refused
    (ParameterError). ``prepare``: run by each task on its partition's Arrow batches before
    signing, to make the documents there (:func:`ingest_files` reads its files in it).
    """
    started = time.perf_counter()
    if on_duplicate not in ("fail", "skip"):
        raise ParameterError(
            f"on_duplicate must be 'fail' or 'skip' for a Spark ingest, got {on_duplicate!r} "
            "(replace them with `simindex ingest --on-duplicate replace`)"
        )
    for name, value in (("on_empty", on_empty), ("on_error", on_error)):
        if value not in ("fail", "skip"):
            raise ParameterError(f"{name} must be 'fail' or 'skip', got {value!r}")
    if database_url(url).get_backend_name() != "postgresql":
        raise ParameterError(
            "a Spark ingest loads into PostgreSQL (--db postgresql://...): a SQLite file "
            "takes one writer at a time; use `simindex ingest` for SQLite"
        )
    spec = None if scheme is None else SignatureSpec(scheme=scheme)
    context, created = lifecycle.open_or_create(
        url, schema=schema, lock_timeout=lock_timeout, spec=spec, **create_options
    )
    try:
        bandings = context.load_bandings()
        staged = lifecycle.staged_load(context, f"simindex_load_{uuid.uuid4().hex[:12]}")
        try:
            stage = _stage_partition(
                url, schema, staged.name, context.spec, bandings, context.keep_text, max_chars,
                prepare,
            )  # fmt: skip
            job_started = time.perf_counter()
            parts = _run(dataframe.mapInArrow(stage, "part INT, rows BIGINT"))
            move_started = time.perf_counter()
            with lifecycle.load_transaction(context, staged) as mover:
                report = _move(
                    mover, bandings, created, len(parts), on_duplicate, on_empty, on_error
                )
            moved = time.perf_counter()
        finally:
            staged.drop()
    finally:
        context.store.close()
    return IngestReport(
        **report,
        created=created,
        partitions=len(parts),
        seconds=time.perf_counter() - started,
        staging_seconds=move_started - job_started,
        moving_seconds=moved - move_started,
    )


def ingest_files(
    paths: list[str],
    url: str,
    *,
    fmt: str = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    encoding_errors: EncodingErrors = "strict",
    csv_layout: CsvLayout | None = None,
    master: str | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    **options: Any,
) -> IngestReport:
    """``simindex spark ingest``: the documents of the input files (readers.expand_inputs'
    list; one task a file or a part of one, as simindex.spark.read.parts makes them), read
    and checked as ``ingest`` reads them (``encoding_errors``, ``csv_layout``: see
    simindex.io.readers.read_records), with the same metadata (a record's other fields),
    into the index at ``url`` by :func:`ingest` (``options``: its keyword arguments)."""
    from simindex.spark.read import (
        FirstReplaced,
        batch_replaced,
        files,
        parts,
        reader,
        replaced_records,
    )
    from simindex.spark.session import session

    spark = session(master)
    read = reader(
        fmt=fmt, id_field=id_field, text_field=text_field, encoding=encoding,
        max_chars=max_chars, csv_layout=csv_layout, encoding_errors=encoding_errors,
    )  # fmt: skip
    # Counted by the task that stages a part (a retry finds it staged and reads nothing).
    replaced = spark.sparkContext.accumulator((0, None), FirstReplaced())

    def documents(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in read(batches):
            fatal = batch["problem"].filter(batch["fatal"]).to_pylist()
            if fatal:  # a file that can't be read fails the job (and is never skipped)
                raise InputError(fatal[0])
            replaced.add(batch_replaced(batch))
            metadata = [
                None if r is None else record_metadata(json.loads(r), id_field, text_field)
                for r in batch["record"].to_pylist()
            ]
            yield pa.RecordBatch.from_pydict(
                {
                    "id": batch["id"],
                    "text": batch["text"],
                    "metadata": pa.array(
                        [None if m is None else json.dumps(m) for m in metadata], pa.string()
                    ),
                    "problem": batch["problem"],
                }
            )

    # Each part is read, signed and staged in one task: its texts never pass through Spark.
    found = files(spark, parts(spark, paths, fmt=fmt, encoding=encoding))
    report = ingest(found, url, max_chars=max_chars, prepare=documents, **options)
    return replace(report, replaced=replaced_records(paths, *replaced.value))


def _run(job: DataFrame) -> list[Any]:
    """Collect a job's rows; a simindex error raised in a task becomes that error here (one
    line for the user), any other failure stays Spark's."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        return job.collect()
    except (PySparkException, Py4JJavaError) as exc:
        found = re.search(r"simindex\.errors\.(\w+): (.+)", str(exc))
        if found is None:
            raise
        raise SimindexError(f"a Spark task failed: {found[2]}; the index is unchanged") from None


def _stage_partition(
    url: str,
    schema: str | None,
    name: str,
    spec: SignatureSpec,
    bandings: dict[int, tuple[int, int]],
    keep_text: bool,
    max_chars: int,
    prepare: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task of one partition (for mapInArrow): sign its documents (made by ``prepare``
    from its batches, if given) and stage them."""
    spec_values = spec.to_dict()
    ingested_at = datetime.now(UTC)

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        task_spec = SignatureSpec.from_dict(spec_values)
        rows = 0
        with staged_part(url, schema, name, bandings, part) as staging:
            if staging.claim():
                for batch in prepare(batches) if prepare else batches:
                    rows += _stage_batch(
                        staging, batch, (part << 32) + rows, task_spec, bandings, keep_text,
                        max_chars, ingested_at,
                    )  # fmt: skip
                    if rows >= MAX_PART_ROWS:
                        raise InputError(
                            f"a partition holds {rows:,} documents or more: repartition "
                            f"the input into partitions of fewer than {MAX_PART_ROWS:,}"
                        )
                staging.finish(rows)
        yield pa.RecordBatch.from_pydict(
            {"part": pa.array([part], pa.int32()), "rows": pa.array([rows], pa.int64())}
        )

    return stage


def _stage_batch(
    staging: StagedPart,
    batch: pa.RecordBatch,
    first_id: int,
    spec: SignatureSpec,
    bandings: dict[int, tuple[int, int]],
    keep_text: bool,
    max_chars: int,
    ingested_at: datetime,
) -> int:
    """Sign a batch and stage its valid, non-empty documents under consecutive staging ids
    from ``first_id``; the others are recorded as rejected. Returns how many were staged."""
    signed = stages.sign(batch, spec, bandings, max_chars=max_chars)
    problems = signed.column("problem")
    if "problem" in batch.schema.names:  # the reader's word on a record comes first
        problems = pc.coalesce(batch["problem"], problems)
    good = pc.and_(
        pc.is_null(problems), pc.fill_null(pc.greater(signed["shingle_count"], 0), False)
    )
    if not pc.all(good).as_py():
        bad = pc.invert(good)
        staging.reject(signed["id"].filter(bad).to_pylist(), problems.filter(bad).to_pylist())
        signed, batch = signed.filter(good), batch.filter(good)
    n = signed.num_rows
    if not n:
        return 0
    sigs, counts = stages.signed_arrays(signed)
    metadata = [None] * n
    if "metadata" in batch.schema.names:
        metadata = [None if m is None else json.loads(m) for m in batch["metadata"].to_pylist()]
    columns = {
        "external_ids": signed["id"].to_pylist(),
        "content_hashes": signed["content_hash"].to_pylist(),
        "shingle_counts": counts,
        "texts": batch["text"].to_pylist() if keep_text else [None] * n,
        "metadata": metadata,
        "ingested_at": ingested_at,
    }
    keys = {b: stages.band_keys_array(signed, b) for b in bandings}
    staging.write(np.arange(first_id, first_id + n, dtype=np.int64), columns, sigs, keys)
    return n


def _move(
    mover: StagedMove,
    bandings: dict[int, tuple[int, int]],
    created: bool,
    partitions: int,
    on_duplicate: str,
    on_empty: str,
    on_error: str,
) -> dict[str, Any]:
    """The driver's transaction: check what was staged, move it into the index."""
    complete = mover.complete_bandings()
    if created:  # the banding just created with the index takes the staged keys of 0
        targets = {0: next(iter(complete))}
    else:
        if complete != bandings:
            raise SimindexError(
                "the index's bandings changed while the Spark job ran (a re-band?): run the "
                "ingest again; the index is unchanged"
            )
        targets = {b: b for b in bandings}
    loaded = len(mover.parts())
    if loaded != partitions:  # a Spark task reported success without loading: a bug
        raise RuntimeError(f"{loaded} of {partitions} partitions were staged")
    malformed, empty, rejected = mover.rejected(EXAMPLES)
    if malformed and on_error == "fail":
        external_id, problem = rejected[0]
        raise InputError(
            f"{malformed:,} record(s) can't be indexed, the first: {problem}; fix them, or "
            "pass --on-error skip / on_error='skip' to leave them out"
        )
    if empty and on_empty == "fail":
        first = next(i for i, problem in rejected if problem is None)
        raise EmptyDocumentError(
            f"document {first!r} has no text after normalization ({empty:,} such "
            "document(s)); remove it, or pass --on-empty skip / on_empty='skip'"
        )
    repeated, indexed, examples = mover.duplicates(EXAMPLES)
    skipped = 0
    if repeated or indexed:
        if on_duplicate == "fail":
            raise DuplicateIdError(
                f"document id {examples[0]!r} is already indexed or repeats ({indexed:,} "
                f"already indexed, {repeated:,} repeated in the input); pass --on-duplicate "
                "skip / on_duplicate='skip' to keep the first copy"
            )
        skipped = mover.skip_duplicates()
    added = mover.move(targets)
    return {
        "added": added,
        "total": mover.document_count(),
        "skipped_existing": skipped,
        "skipped_empty": empty,
        "skipped_malformed": malformed,
        "examples": rejected,
    }
