"""Near-duplicate removal on Spark: ``simindex dedup``'s pipeline, stage for stage, with
simindex.pipeline.stages doing the work inside the tasks.

    documents --sign (mapInArrow: stages.sign)--> signatures and band keys
    band keys --explode, shuffle by (band, key)--> buckets
    buckets --pairs per bucket (mapInArrow: stages.bucket_pairs, the hot-bucket rule)--> candidates
    candidates --distinct, join both documents (text, signature)--> stages.verify --> pairs
    pairs --connected components (simindex.spark.components)--> components
    pairs by component --stars or components under the keep policy
        (applyInArrow: simindex.pipeline.cluster.clusters_of)--> clusters --> kept, dropped

The same stages make the same pairs and clusters as :class:`simindex.Index` on the same
input (``find_pairs``, then ``cluster``), by construction. A document's number ``doc`` orders
the input (``--keep earliest`` keeps the first in that order, as ``simindex dedup`` keeps the
first ingested); pairs and clusters are made of document numbers and name documents by id
only at the end. The keep policy ranks by (doc, id, shingle count, metadata value) only, so
the kept set does not depend on partitions or workers.

:func:`dedup` is the notebook's entry (a DataFrame in, DataFrames out); :func:`dedup_files`
is ``simindex spark dedup``'s (files in, a directory of Parquet or JSON lines out).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from simindex.defaults import DEFAULT_MAX_BUCKET_SIZE, DEFAULT_THRESHOLD
from simindex.errors import DuplicateIdError, EmptyDocumentError, InputError, ParameterError
from simindex.io.lines import ReplacedRecords
from simindex.policies import ClusterMode, ClusterPolicy, EncodingErrors, KeepOrder, KeepRule
from simindex.results import LargestCluster
from simindex.spark.components import DEFAULT_MAX_DRIVER_EDGES, components
from simindex.spark.keep import field_values, largest_clusters, representatives
from simindex.spec import SignatureSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from simindex.io.delimited import CsvLayout

Policy = Literal["fail", "skip"]
OUTPUT_FORMATS = ("parquet", "jsonl")
# The banding id the band keys are signed under (a job has one banding).
_BANDING = 0
SIGNED_SCHEMA = (
    "doc long, id string, problem string, fatal boolean, content_hash long, "
    "shingle_count long, signature binary, band_keys array<long>"
)
_VERIFIED = "doc_a long, doc_b long, estimated double, exact double"
# CORPUS_SIZED: a table with a row per input record (the records, their signatures) or per
# candidate's document (with its text) persists on disk, not in the JVM's heap: in memory
# (MEMORY_AND_DISK), a 1M-document run filled a 2 GB heap with the first two and a 1 GB
# heap with the third (java.lang.OutOfMemoryError), the cache's spilling notwithstanding.


@dataclass(frozen=True)
class Summary:
    """What a run found: the counts ``simindex dedup`` reports."""

    documents: int  # signed and deduplicated (empty ones not counted)
    empty: int  # no text after normalization: kept, not compared
    skipped: int  # bad records left out (on_error="skip")
    repeated: int  # later copies of a repeated id left out (on_duplicate="skip")
    candidates: int
    hot_buckets: int
    largest_bucket: int
    pairs: int
    clusters: int
    dropped: int
    # The largest clusters, each with its weakest member's similarity to the representative.
    largest_clusters: tuple[LargestCluster, ...] = ()
    # Records read with U+FFFD for bytes not in the encoding (encoding_errors="replace").
    replaced: ReplacedRecords = field(default_factory=ReplacedRecords)

    @property
    def kept(self) -> int:
        """Records in the output: the documents but the dropped, and the empty ones."""
        return self.documents + self.empty - self.dropped


@dataclass(frozen=True)
class Deduplicated:
    """The result of :func:`dedup` (lazy DataFrames but for ``summary``).

    ``kept``: the input's rows that stay, with its columns. ``dropped``: the rows that go,
    with ``representative`` (the id of the kept row of their cluster) and ``similarity``
    (to it: exact Jaccard, or the signatures' estimate with ``exact=False``). ``pairs``:
    ``id_a``, ``id_b``, ``estimated``, ``exact`` (null with ``exact=False``), one row per
    similar pair. ``clusters``: ``id``, ``representative``, ``similarity`` for every
    document of a cluster (a representative's similarity is 1). ``problems``: ``problem``
    messages of the records left out (bad records, empty texts, repeated ids).
    """

    kept: DataFrame
    dropped: DataFrame
    pairs: DataFrame
    clusters: DataFrame
    problems: DataFrame
    summary: Summary


def dedup(
    frame: DataFrame,
    *,
    id_field: str = "id",
    text_field: str = "text",
    threshold: float = DEFAULT_THRESHOLD,
    keep: KeepRule = "earliest",
    keep_by: str | None = None,
    keep_order: KeepOrder = "max",
    mode: ClusterMode = "star",
    spec: SignatureSpec | None = None,
    exact: bool = True,
    on_error: Policy = "fail",
    on_empty: Policy = "skip",
    on_duplicate: Policy = "fail",
    max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
    max_driver_edges: int = DEFAULT_MAX_DRIVER_EDGES,
) -> Deduplicated:
    """Deduplicate a DataFrame with an id and a text column, as ``simindex dedup`` does a
    file: keep one row per cluster of near-duplicates (similarity >= ``threshold``).

    ``keep``, ``keep_by``, ``keep_order`` and ``mode``: as :func:`simindex.dedup.dedup_files`
    (:class:`~simindex.policies.ClusterPolicy`); "earliest" is the DataFrame's order
    (partition by partition; the numbering is persisted for the run), ``keep_by`` a column
    of the DataFrame. ``exact``: verify candidates by
    exact Jaccard of the texts, or by the signatures' estimate. Bad rows (a null or empty
    id, a NUL character ...: simindex.pipeline.documents.document_problem), empty texts and repeated ids
    are errors or left out as ``on_error``, ``on_empty`` (left out = kept unindexed) and
    ``on_duplicate`` say. Raises InputError (or a subclass) and ParameterError.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    policy = ClusterPolicy(keep=keep, keep_by=keep_by, keep_order=keep_order, mode=mode)
    wanted = (id_field, text_field) + ((keep_by,) if keep_by else ())
    missing = [name for name in wanted if name not in frame.columns]
    if missing:
        raise InputError(
            f"the DataFrame has no {' or '.join(map(repr, missing))} column "
            f"(columns: {', '.join(frame.columns)})"
        )
    _check_names(frame.columns, ("doc", "representative", "similarity"))
    # An order key, persisted: monotonically_increasing_id() is the DataFrame's order (its
    # partition, then its row), but it is not stable if the frame were computed again.
    numbered = frame.withColumn("doc", F.monotonically_increasing_id()).persist(
        StorageLevel.DISK_ONLY  # CORPUS_SIZED
    )
    documents = numbered.select(
        "doc",
        F.col(id_field).cast("string").alias("id"),
        F.col(text_field).alias("text"),
    )
    values = F.to_json(F.struct(F.col(keep_by).alias("v"))) if keep_by else None
    run = _Run(documents, threshold, policy, spec, exact, max_bucket_size, max_driver_edges)
    run.keep_values = None if values is None else numbered.select("doc", values.alias("keep_value"))
    run.check(on_error, on_empty, on_duplicate)
    dropped = run.dropped()
    kept = numbered.join(run.not_kept(), "doc", "left_anti")
    summary = run.summary()
    _step(frame, None)  # the caller's own jobs are no step of this one
    return Deduplicated(
        kept=kept.join(dropped.select("doc"), "doc", "left_anti").drop("doc"),
        dropped=numbered.join(dropped, "doc").drop("doc"),
        pairs=run.named_pairs(),
        clusters=run.named_clusters(),
        problems=run.problems(),
        summary=summary,
    )


def dedup_files(
    paths: list[str],
    out: str,
    *,
    fmt: str = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    encoding_errors: EncodingErrors = "strict",
    csv_layout: CsvLayout | None = None,
    output_format: str = "parquet",
    master: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    keep: KeepRule = "earliest",
    keep_by: str | None = None,
    keep_order: KeepOrder = "max",
    mode: ClusterMode = "star",
    spec: SignatureSpec | None = None,
    on_error: Policy = "fail",
    on_empty: Policy = "skip",
    on_duplicate: Policy = "fail",
    max_bucket_size: int = DEFAULT_MAX_BUCKET_SIZE,
    max_driver_edges: int = DEFAULT_MAX_DRIVER_EDGES,
) -> Summary:
    """``simindex spark dedup``: deduplicate the input files (readers.expand_inputs' list)
    into the directory ``out``, which must not exist or be empty.

    Writes ``out/kept/`` (the records that stay, as read), ``out/dropped/`` (the records that
    go, with ``representative`` and ``similarity``), ``out/pairs/`` and ``out/clusters/``
    (as :class:`Deduplicated` describes them) and, when records were left out,
    ``out/problems/``: Parquet, or JSON lines with ``output_format="jsonl"``. On an error
    nothing is left in ``out``. ``keep_by`` names a field of the records; ``encoding_errors``
    and ``csv_layout``: as simindex.io.readers.read_records takes them.
    """
    from simindex.io.outputs import check_outputs
    from simindex.spark.read import read_files, replaced_in
    from simindex.spark.session import session

    policy = ClusterPolicy(keep=keep, keep_by=keep_by, keep_order=keep_order, mode=mode)
    if "-" in paths:
        raise InputError("standard input can't be read by Spark's workers; save it to a file")
    if output_format not in OUTPUT_FORMATS:
        raise ParameterError(
            f"unknown output format {output_format!r}; choose {' or '.join(OUTPUT_FORMATS)}"
        )
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError(f"{out}: exists and is not an empty directory; name a new one for --out")
    check_outputs([out], paths)
    for path in paths:
        if Path(path).resolve().is_relative_to(target.resolve()):
            raise InputError(f"{path}: is inside --out {out}; write the output elsewhere")
    spark = session(master)  # first: it says how to install pyspark if it is missing
    from pyspark import StorageLevel

    # Read (parsed and checked in Python) once: signing, verification and the outputs all
    # take their records from here, not from the files again. On disk (CORPUS_SIZED).
    records = read_files(
        spark, paths, fmt=fmt, id_field=id_field, text_field=text_field, encoding=encoding,
        csv_layout=csv_layout, encoding_errors=encoding_errors,
    ).persist(StorageLevel.DISK_ONLY)  # fmt: skip
    documents = records.select("doc", "id", "text", "problem", "fatal")
    created = not target.exists()
    try:
        run = _Run(documents, threshold, policy, spec, True, max_bucket_size, max_driver_edges)
        run.keep_values = field_values(records, keep_by) if keep_by else None
        run.check(on_error, on_empty, on_duplicate)
        fields = _fields(records, id_field, text_field)
        _check_names(fields, ("representative", "similarity"))
        dropped = run.dropped()
        _step(records, "write")
        valid = records.filter("problem is null").join(run.not_kept(), "doc", "left_anti")
        kept = valid.join(dropped.select("doc"), "doc", "left_anti")
        _write_records(kept, fields, output_format, target / "kept", id_field, text_field)
        dropped_records = valid.join(dropped.drop("id"), "doc")
        _write_records(
            dropped_records,
            [*fields, "representative", "similarity"],
            output_format,
            target / "dropped",
            id_field,
            text_field,
        )
        _write(run.named_pairs(), output_format, target / "pairs")
        _write(run.named_clusters(), output_format, target / "clusters")
        summary = run.summary()
        if encoding_errors == "replace":
            summary = replace(summary, replaced=replaced_in(records, paths))
        if summary.skipped or summary.empty or summary.repeated:
            _write(run.problems(), output_format, target / "problems")
    except BaseException:
        if created:
            shutil.rmtree(target, ignore_errors=True)
        else:
            for child in target.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise
    finally:
        _step(records, None)
    return summary


def _step(frame: DataFrame, name: str | None) -> None:
    """Name the Spark jobs that follow after a step of the pipeline (Spark's UI and event
    log show it), or no longer (None)."""
    frame.sparkSession.sparkContext.setJobDescription(name and f"simindex {name}")


class _Run:
    """One deduplication: the stages over a DataFrame of documents (``doc`` long, ``id``
    and ``text`` strings, and optionally ``problem``: why a record is no document)."""

    def __init__(
        self,
        documents: DataFrame,
        threshold: float,
        policy: ClusterPolicy,
        spec: SignatureSpec | None,
        exact: bool,
        max_bucket_size: int,
        max_driver_edges: int,
    ):
        from pyspark import StorageLevel

        from simindex.pipeline.banding import banding_for

        if not 0 < threshold <= 1:
            raise ParameterError(f"threshold must be within (0, 1], got {threshold}")
        if max_bucket_size < 2:
            raise ParameterError(f"max_bucket_size must be at least 2, got {max_bucket_size}")
        self.spec = spec or SignatureSpec()
        self.bands, self.rows = banding_for(self.spec.num_perm, threshold)
        self.threshold, self.policy, self.exact = threshold, policy, exact
        self.max_bucket_size, self.max_driver_edges = max_bucket_size, max_driver_edges
        self.documents = documents
        self.signed = sign(documents, self.spec, self.bands, self.rows).persist(
            StorageLevel.DISK_ONLY  # CORPUS_SIZED
        )
        # ``doc``, ``keep_value`` (simindex.spark.keep.field_values) when the policy has keep_by.
        self.keep_values: DataFrame | None = None
        self._left_out = None
        self._side = None
        self._pairs = None
        self._clusters = None
        self._counts: dict[str, int] = {}

    # -- input checks, as ``simindex dedup`` makes them -------------------------------------

    def check(self, on_error: Policy, on_empty: Policy, on_duplicate: Policy) -> None:
        """Raise for the first bad record, repeated id or empty text, in that order (or
        count them and leave them out, as the policies say). One pass over the signatures."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        policies = {"skipped": on_error, "repeated": on_duplicate, "empty": on_empty}
        for name, policy in zip(
            ("on_error", "on_duplicate", "on_empty"), policies.values(), strict=True
        ):
            if policy not in ("fail", "skip"):
                raise ParameterError(f"{name} must be 'fail' or 'skip', got {policy!r}")
        policies = {"fatal": "fail", **policies}  # a file that can't be read at all
        _step(self.documents, "read + sign + check")
        first_copy = F.min("doc").over(Window.partitionBy("id"))
        kind = (
            F.when(F.col("fatal"), "fatal")
            .when(F.col("problem").isNotNull(), "skipped")
            .when(F.col("doc") != first_copy, "repeated")
            .when(F.col("shingle_count") == 0, "empty")
        )
        problem = F.coalesce(
            "problem",
            F.when(kind == "repeated", "a later copy of a repeated id (left out)"),
            F.when(kind == "empty", "no text after normalization (kept, not compared)"),
        )
        annotated = self.signed.select(
            "doc", "id", problem.alias("problem"), kind.alias("kind")
        ).persist()
        stats = annotated.groupBy("kind").agg(F.count("*").alias("n"), F.min("doc").alias("first"))
        found = {row["kind"]: row for row in stats.collect()}
        self._counts = {
            kind: found[kind]["n"] if kind in found else 0
            for kind in ("skipped", "repeated", "empty")
        }
        self._counts["documents"] = found[None]["n"] if None in found else 0
        for kind, policy in policies.items():
            if policy == "fail" and kind in found:
                first = annotated.filter(
                    (F.col("kind") == kind) & F.col("doc").eqNullSafe(found[kind]["first"])
                ).first()
                raise _FAILURES[kind](first["problem"], first["id"])
        self._left_out = annotated.filter("kind is not null")

    def left_out(self) -> DataFrame:
        """``doc``, ``id``, ``problem``, ``kind`` of the records not compared: "skipped"
        (bad), "repeated" (a later copy of an id) and "empty" (kept, unindexed)."""
        assert self._left_out is not None, "check() first"
        return self._left_out

    def not_kept(self) -> DataFrame:
        """``doc`` of the records left out of the output (bad, or a later copy of an id)."""
        return self.left_out().filter("kind != 'empty'").select("doc")

    def problems(self) -> DataFrame:
        return self.left_out().orderBy("doc").select("id", "problem")

    # -- the pipeline ------------------------------------------------------------------------

    def pairs(self) -> DataFrame:
        """``doc_a`` < ``doc_b``, ``estimated``, ``exact``: the verified pairs (persisted)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        if self._pairs is not None:
            return self._pairs
        _step(self.documents, "band keys + candidates")
        compared = self.signed.join(self.left_out().select("doc"), "doc", "left_anti")
        keys = compared.select("doc", F.posexplode("band_keys").alias("band", "key"))
        buckets = (
            keys.groupBy("band", "key")
            .agg(F.collect_list("doc").alias("members"))
            .filter(F.size("members") > 1)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        sizes = buckets.agg(
            F.coalesce(F.sum((F.size("members") > self.max_bucket_size).cast("long")), F.lit(0)),
            F.coalesce(F.max(F.size("members")), F.lit(0)),
        ).first()
        self._counts["hot_buckets"], self._counts["largest_bucket"] = int(sizes[0]), int(sizes[1])
        max_bucket_size = self.max_bucket_size

        def pairs_of(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from simindex.pipeline import stages

            for batch in batches:
                yield stages.bucket_pairs(batch, max_bucket_size)

        candidates = (
            buckets.select("members")
            .mapInArrow(pairs_of, "doc_a long, doc_b long")
            .distinct()
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        self._counts["candidates"] = candidates.count()
        buckets.unpersist()
        # What verification reads of a document (its signature, and text), for the documents
        # of a candidate pair alone (every document of a cluster is one): made once, for the
        # pairs and again for the similarities to the representatives.
        ends = (
            candidates.select(F.col("doc_a").alias("doc"))
            .union(candidates.select(F.col("doc_b").alias("doc")))
            .distinct()
        )
        side = self.signed.select("doc", "signature").join(ends, "doc", "left_semi")
        if self.exact:  # the other texts are not shuffled
            texts = self.documents.select("doc", "text").join(ends, "doc", "left_semi")
            side = side.join(texts, "doc")
        self._side = side.persist(StorageLevel.DISK_ONLY)  # CORPUS_SIZED
        _step(self.documents, "verification")
        self._pairs = self._compare(candidates, self.threshold).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        self._counts["pairs"] = self._pairs.count()
        candidates.unpersist()
        return self._pairs

    def _compare(self, pairs: DataFrame, threshold: float) -> DataFrame:
        """stages.verify of (``doc_a``, ``doc_b``) pairs of candidates' documents: those
        with similarity >= ``threshold``, with ``estimated`` and ``exact`` (null unless
        ``exact``)."""
        from pyspark.sql import functions as F

        side = self._side
        joined = pairs
        for end in ("a", "b"):
            renamed = side.select([F.col(c).alias(f"{c}_{end}") for c in side.columns])
            joined = joined.join(renamed, f"doc_{end}")
        columns = ["doc_a", "doc_b", "signature_a", "signature_b"]
        if self.exact:
            columns += ["text_a", "text_b"]
        spec, num_perm = self.spec, self.spec.num_perm

        def verify(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                yield _verify_batch(batch, spec, num_perm, threshold)

        return joined.select(columns).mapInArrow(verify, _VERIFIED)

    def clusters(self) -> DataFrame:
        """``doc``, ``representative`` (a doc), ``similarity`` (to it) of every document of
        a cluster (persisted)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        if self._clusters is not None:
            return self._clusters
        pairs = self.pairs()
        _step(self.documents, "components + representatives")
        labelled = components(pairs, max_driver_edges=self.max_driver_edges)
        if self.policy == ClusterPolicy():  # components, earliest: how components labels
            chosen = labelled.withColumnRenamed("component", "representative")
        else:
            fields = self.signed.select("doc", "id", "shingle_count", "content_hash").join(
                labelled.select("doc"), "doc", "left_semi"
            )
            if self.keep_values is not None:
                fields = fields.join(self.keep_values, "doc", "left")
            chosen = representatives(pairs, labelled, fields, self.policy)
        chosen = chosen.persist(StorageLevel.MEMORY_AND_DISK)
        members = chosen.filter("doc != representative").select(
            F.col("doc").alias("doc_a"), F.col("representative").alias("doc_b")
        )
        similarity = self._compare(members, 0.0).select(
            F.col("doc_a").alias("doc"),
            F.coalesce("exact", "estimated").alias("similarity"),
        )
        self._clusters = (
            chosen.join(similarity, "doc", "left")
            .select(
                "doc", "representative", F.coalesce("similarity", F.lit(1.0)).alias("similarity")
            )
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        self._counts["clusters"] = chosen.select("representative").distinct().count()
        return self._clusters

    def dropped(self) -> DataFrame:
        """``doc``, ``id``, ``representative`` (its id), ``similarity`` of the documents
        that go (persisted, counted)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        ids = self.signed.select("doc", "id")
        dropped = (
            self.clusters()
            .filter("doc != representative")
            .join(ids, "doc")
            .join(
                ids.select(F.col("doc").alias("representative"), F.col("id").alias("rep_id")),
                "representative",
            )
            .select("doc", "id", F.col("rep_id").alias("representative"), "similarity")
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        self._counts["dropped"] = dropped.count()
        return dropped

    def named_pairs(self) -> DataFrame:
        """The pairs by id: ``id_a``, ``id_b``, ``estimated``, ``exact``; best first."""
        from pyspark.sql import functions as F

        ids = self.signed.select("doc", "id")
        return (
            self.pairs()
            .join(ids.select(F.col("doc").alias("doc_a"), F.col("id").alias("id_a")), "doc_a")
            .join(ids.select(F.col("doc").alias("doc_b"), F.col("id").alias("id_b")), "doc_b")
            .orderBy(F.desc(F.coalesce("exact", "estimated")), "doc_a", "doc_b")
            .select("id_a", "id_b", "estimated", "exact")
        )

    def named_clusters(self) -> DataFrame:
        """The clusters by id: ``id``, ``representative``, ``similarity``; a cluster's
        documents together, representative first."""
        from pyspark.sql import functions as F

        ids = self.signed.select("doc", "id")
        return (
            self.clusters()
            .join(ids, "doc")
            .join(
                ids.select(F.col("doc").alias("representative"), F.col("id").alias("rep_id")),
                "representative",
            )
            .orderBy("representative", (F.col("doc") != F.col("representative")), "doc")
            .select("id", F.col("rep_id").alias("representative"), "similarity")
        )

    def summary(self) -> Summary:
        named = largest_clusters(self.clusters(), self.signed.select("doc", "id"))
        return Summary(**self._counts, largest_clusters=named)


_FAILURES = {
    "fatal": lambda problem, _: InputError(problem),
    "skipped": lambda problem, _: InputError(problem),
    "repeated": lambda _, external_id: DuplicateIdError(
        f"document id {external_id!r} appears twice in the input; pass --on-duplicate skip / "
        "on_duplicate='skip' to keep the first copy"
    ),
    "empty": lambda _, external_id: EmptyDocumentError(
        f"document {external_id!r} has no text after normalization; remove it, or pass "
        "--on-empty skip / on_empty='skip'"
    ),
}


def sign(documents: DataFrame, spec: SignatureSpec, bands: int, rows: int) -> DataFrame:
    """stages.sign in mapInArrow, of a DataFrame with ``doc`` (long), ``id`` and ``text``
    (strings; an integer id is its decimal text) and optionally ``problem`` (a reader's
    verdict, string): its rows' ``doc``, ``id``, ``problem`` (the reader's, else the
    stage's), ``content_hash``, ``shingle_count``, ``signature`` (num_perm little-endian
    uint32, as an index stores it) and ``band_keys`` (bands longs)."""
    columns = ["doc", "id", "text", *(c for c in ("problem", "fatal") if c in documents.columns)]

    def signed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield sign_batch(batch, spec, bands, rows)

    return documents.select(columns).mapInArrow(signed, SIGNED_SCHEMA)


def sign_batch(batch: pa.RecordBatch, spec: SignatureSpec, bands: int, rows: int) -> pa.RecordBatch:
    """:func:`sign` of one Arrow batch (what each task runs)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from simindex.pipeline import stages

    signed = stages.sign(
        pa.RecordBatch.from_arrays([batch.column("id"), batch.column("text")], ["id", "text"]),
        spec,
        {_BANDING: (bands, rows)},
    )
    problem = signed.column("problem")
    if "problem" in batch.schema.names:
        problem = pc.coalesce(batch.column("problem"), problem)
    names = batch.schema.names
    fatal = batch.column("fatal") if "fatal" in names else pa.nulls(len(batch), pa.bool_())
    signature = signed.column("signature")
    keys = signed.column(stages.band_keys_column(_BANDING))
    return pa.RecordBatch.from_arrays(
        [
            batch.column("doc"),
            batch.column("id").cast(pa.string()),
            problem,
            fatal,
            signed.column("content_hash"),
            signed.column("shingle_count"),
            _stored_signatures(signature),
            keys.cast(pa.list_(pa.int64())),
        ],
        [
            "doc",
            "id",
            "problem",
            "fatal",
            "content_hash",
            "shingle_count",
            "signature",
            "band_keys",
        ],
    )


def _stored_signatures(signatures: pa.Array) -> pa.Array:
    """A fixed_size_list<uint32> column as binary: each row's values as stored
    (simindex.pipeline.minhash.pack: little-endian uint32), null where the row is null."""
    import numpy as np
    import pyarrow as pa

    from simindex.pipeline.minhash import SIGNATURE_DTYPE

    width = signatures.type.list_size * 4
    values = signatures.values.to_numpy()
    start = signatures.offset * signatures.type.list_size
    stop = start + len(signatures) * signatures.type.list_size
    data = np.ascontiguousarray(values[start:stop], dtype=SIGNATURE_DTYPE).tobytes()
    offsets = np.arange(len(signatures) + 1, dtype=np.int32) * width
    validity = signatures.buffers()[0] if signatures.null_count else None
    if validity is not None and signatures.offset:
        validity = pa.array(signatures.is_valid()).buffers()[1]
    return pa.Array.from_buffers(
        pa.binary(),
        len(signatures),
        [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)],
        null_count=signatures.null_count,
    )


def _verify_batch(
    batch: pa.RecordBatch, spec: SignatureSpec, num_perm: int, threshold: float
) -> pa.RecordBatch:
    """stages.verify of a batch of pairs joined with both documents' signature (and text)."""
    import numpy as np
    import pyarrow as pa

    from simindex.pipeline import stages
    from simindex.pipeline.minhash import unpack

    ids = np.concatenate((batch.column("doc_a").to_numpy(), batch.column("doc_b").to_numpy()))
    unique, first = np.unique(ids, return_index=True)
    signatures = batch.column("signature_a").to_pylist() + batch.column("signature_b").to_pylist()
    texts = None
    if "text_a" in batch.schema.names:
        both = batch.column("text_a").to_pylist() + batch.column("text_b").to_pylist()
        texts = [both[i] for i in first]
    documents = stages.documents_batch(
        unique, unpack((signatures[i] for i in first), num_perm), texts
    )
    pairs = pa.RecordBatch.from_arrays(
        [batch.column("doc_a"), batch.column("doc_b")], ["doc_a", "doc_b"]
    )
    return stages.verify(pairs, documents, spec, threshold)


def _check_names(columns: list[str], reserved: tuple[str, ...]) -> None:
    taken = [name for name in reserved if name in columns]
    if taken:
        raise InputError(
            f"the input has a field named {taken[0]!r}, which the output adds; rename it"
        )


def _fields(records: DataFrame, id_field: str, text_field: str) -> list[str]:
    """The input's field names in their order: the keys of its first thousand records (the
    CSV header for CSV), as ``simindex dedup`` finds them."""
    seen: dict[str, None] = {}
    first = records.filter("problem is null").orderBy("doc").select("record").limit(1000)
    for row in first.collect():
        seen.update(dict.fromkeys(json.loads(row["record"])))
    return list(seen) or [id_field, text_field]


def _write_records(
    records: DataFrame,
    fields: list[str],
    output_format: str,
    directory: Path,
    id_field: str,
    text_field: str,
) -> int:
    """Write the records (their ``record`` JSON with ``text``, plus ``representative`` and
    ``similarity`` when the frame has them) with simindex.io.writers, one file per partition,
    in input order within each; return how many."""
    directory.mkdir(parents=True, exist_ok=True)
    extra = [c for c in ("representative", "similarity") if c in records.columns]
    folder = str(directory)
    suffix = "parquet" if output_format == "parquet" else "jsonl"

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        from simindex.io.writers import write_records

        def rows() -> Iterator[dict]:
            for batch in batches:
                columns = [batch.column(c).to_pylist() for c in ("record", "text", *extra)]
                for values in zip(*columns, strict=True):
                    record = json.loads(values[0])
                    record[text_field] = values[1]
                    record.update(zip(extra, values[2:], strict=True))
                    yield record

        path = os.path.join(folder, f"part-{TaskContext.get().partitionId():05d}.{suffix}")
        count = write_records(rows(), fields, output_format, path, id_field, text_field)
        if count == 0:
            Path(path).unlink(missing_ok=True)
        yield pa.RecordBatch.from_pydict({"count": [count]})

    ordered = records.sortWithinPartitions("doc").select("record", "text", *extra)
    written = ordered.mapInArrow(write, "count long").agg({"count": "sum"}).first()[0]
    return int(written or 0)


def _write(frame: DataFrame, output_format: str, directory: Path) -> None:
    """A result table with Spark's writer: Parquet, or JSON lines."""
    writer = frame.write.mode("errorifexists")
    if output_format == "parquet":
        writer.parquet(str(directory))
    else:
        writer.option("ignoreNullFields", "false").json(str(directory))
