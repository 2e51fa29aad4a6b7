"""The same pipeline on Apache Spark: spark dedup, spark ingest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from simindex.cli.app import spark_app
from simindex.cli.errors import command
from simindex.cli.options import (
    SCHEME_HELP,
    Db,
    Delimiter,
    DuplicateThreshold,
    Encoding,
    EncodingErrors,
    IdColumn,
    IdField,
    InputFormatOption,
    Keep,
    KeepBy,
    KeepOrderOption,
    LockTimeout,
    MaxChars,
    Mode,
    NewScheme,
    NoHeader,
    Schema,
    Scheme,
    SparkMaster,
    TextColumn,
    TextField,
)
from simindex.cli.render import counts, describe_index, err, largest_clusters, shown
from simindex.defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_SCHEME, DEFAULT_THRESHOLD
from simindex.errors import ParameterError
from simindex.io.delimited import CsvLayout
from simindex.io.readers import DEFAULT_MAX_CHARS, expand_inputs
from simindex.policies import OnEmpty, OnError, SparkOutputFormat


@command(
    spark_app, "dedup", spark=True, interrupted="nothing was written (--out is left as it was)"
)
def spark_dedup(
    files: Annotated[
        list[str],
        typer.Argument(
            metavar="INPUT",
            help="Input files, directories or globs (JSON lines, CSV, id<TAB>text, Parquet; "
            ".gz and .zst are fine), read by the workers: on a cluster, a path every "
            "worker sees.",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="A new (or empty) directory for kept/, dropped/, pairs/, clusters/ and, when "
            "records are left out, problems/."
        ),
    ],
    master: SparkMaster = None,
    threshold: DuplicateThreshold = DEFAULT_THRESHOLD,
    keep: Keep = "earliest",
    keep_by: KeepBy = None,
    keep_order: KeepOrderOption = "max",
    mode: Mode = "star",
    fmt: InputFormatOption = "auto",
    id_field: IdField = "id",
    text_field: TextField = "text",
    encoding: Encoding = "utf-8",
    encoding_errors: EncodingErrors = "strict",
    delimiter: Delimiter = None,
    no_header: NoHeader = False,
    id_column: IdColumn = 0,
    text_column: TextColumn = 1,
    output_format: Annotated[
        SparkOutputFormat, typer.Option(help="Format of the files under --out.")
    ] = "parquet",
    on_empty: Annotated[
        OnEmpty,
        typer.Option(help="A record with no text: keep it in kept/ unindexed, or fail."),
    ] = "skip",
    on_duplicate: Annotated[
        Literal["fail", "skip"],
        typer.Option(help="An id repeated in INPUT: fail, or keep the first copy only."),
    ] = "fail",
    on_error: Annotated[
        OnError,
        typer.Option(help="A malformed record: fail, or leave it out and list it in problems/."),
    ] = "fail",
    scheme: Annotated[Scheme, typer.Option(help=SCHEME_HELP)] = DEFAULT_SCHEME,  # type: ignore[valid-type]
) -> None:
    """Write INPUT without its near-duplicates, on Spark: what `simindex dedup` keeps and
    drops, for corpora past one machine."""
    from simindex.spark.pipeline import dedup_files
    from simindex.spark.session import job_errors
    from simindex.spec import SignatureSpec

    with job_errors():
        summary = dedup_files(
            expand_inputs(files), str(out), fmt=fmt, id_field=id_field, text_field=text_field,
            encoding=encoding, encoding_errors=encoding_errors,
            csv_layout=CsvLayout(delimiter, not no_header, id_column, text_column),
            output_format=output_format, master=master, threshold=threshold,
            keep=keep, keep_by=keep_by, keep_order=keep_order, mode=mode,
            spec=SignatureSpec(scheme=scheme), on_error=on_error,
            on_empty=on_empty, on_duplicate=on_duplicate,
        )  # fmt: skip
    left_out = counts(
        [
            (summary.skipped, "bad record(s) left out"),
            (summary.repeated, "repeated id(s) left out"),
            (summary.empty, "empty document(s) kept unindexed"),
        ]
    )
    listed = f"; {left_out} (listed in problems/)" if left_out else ""
    err.print(
        f"{summary.pairs:,} similar pairs -> {summary.clusters:,} clusters; kept "
        f"{summary.kept:,} records, dropped {summary.dropped:,}, in {shown(out)}{listed}"
        + largest_clusters(summary.largest_clusters)
    )
    if summary.replaced.count:
        err.print(summary.replaced.summary(encoding))


@command(spark_app, "ingest", kernels=True, spark=True)
def spark_ingest(
    files: Annotated[
        list[str],
        typer.Argument(
            help="Input files, directories or globs, as for ingest (one Spark task a file: "
            "shard a large corpus)."
        ),
    ],
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    master: SparkMaster = None,
    fmt: InputFormatOption = "auto",
    id_field: IdField = "id",
    text_field: TextField = "text",
    encoding: Encoding = "utf-8",
    encoding_errors: EncodingErrors = "strict",
    delimiter: Delimiter = None,
    no_header: NoHeader = False,
    id_column: IdColumn = 0,
    text_column: TextColumn = 1,
    on_duplicate: Annotated[
        Literal["fail", "skip"],
        typer.Option(
            help="An id that is already indexed or repeats: fail, or skip it (the first copy "
            "stays)."
        ),
    ] = "fail",
    on_empty: Annotated[
        OnEmpty,
        typer.Option(help="A document with no text: skip it (not stored; counted), or fail."),
    ] = "skip",
    on_error: Annotated[
        OnError,
        typer.Option(help="A malformed record: fail, or skip it (counted, the first named)."),
    ] = "fail",
    max_chars: MaxChars = DEFAULT_MAX_CHARS,
    scheme: NewScheme = None,
) -> None:
    """Add documents to a PostgreSQL index with Spark (creating the index if the database has
    none): signed in the Spark tasks, loaded by COPY from each, moved into the index in one
    transaction. On an error nothing is added."""
    from simindex.index import Index
    from simindex.spark.ingest import ingest_files
    from simindex.spark.session import job_errors

    if db is None:
        raise ParameterError("give the PostgreSQL index with --db postgresql://user@host/database")
    with job_errors():
        report = ingest_files(
            expand_inputs(files), db, fmt=fmt, id_field=id_field, text_field=text_field,
            encoding=encoding, encoding_errors=encoding_errors,
            csv_layout=CsvLayout(delimiter, not no_header, id_column, text_column),
            master=master, max_chars=max_chars, schema=schema,
            lock_timeout=lock_timeout, scheme=scheme, on_duplicate=on_duplicate,
            on_empty=on_empty, on_error=on_error,
        )  # fmt: skip
    skipped = counts(
        [
            (report.skipped_existing, "already indexed or repeated"),
            (report.skipped_empty, "empty (no text after normalization)"),
            (report.skipped_malformed, "malformed"),
        ]
    )
    err.print(
        f"Added {report.added:,} new documents from {report.partitions:,} Spark tasks in "
        f"{report.seconds:.1f} s ({report.added / max(report.seconds, 1e-9):,.0f} docs/s: "
        f"signed and staged in {report.staging_seconds:.1f} s, moved into the index in "
        f"{report.moving_seconds:.1f} s); the index holds {report.total:,}"
        + (f"; skipped {skipped}" if skipped else "")
    )
    for external_id, problem in report.examples:
        err.print(f"  skipped {shown(problem or f'{external_id!r}: empty')}")
    if report.replaced.count:
        err.print(report.replaced.summary(encoding))
    if report.created:
        with Index.open(db, schema=schema) as index:
            err.print(f"Created a new index in {shown(index.url)}")
            describe_index(index)
