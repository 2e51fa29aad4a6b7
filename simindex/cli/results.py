"""What the index finds: pairs, clusters, export, and dedup (from file to file)."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from simindex.cli.app import app
from simindex.cli.errorlog import ErrorLog
from simindex.cli.errors import NOTHING_CHANGED, command, noting
from simindex.cli.options import (
    Db,
    Delimiter,
    DuplicateThreshold,
    Encoding,
    EncodingErrors,
    ErrorLogPath,
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
    Show,
    TextColumn,
    TextField,
    Threshold,
    _inherit,
)
from simindex.cli.render import (
    clusters_table,
    err,
    largest_clusters,
    pairs_found,
    pairs_table,
    progress,
    shown,
)
from simindex.cli.render import titles as titles_of
from simindex.defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_MAX_BUCKET_SIZE, DEFAULT_THRESHOLD
from simindex.errors import ParameterError
from simindex.io.delimited import CsvLayout
from simindex.io.lines import ReplacedRecords
from simindex.io.outputs import check_outputs
from simindex.io.readers import DEFAULT_MAX_CHARS, scan_inputs
from simindex.io.writers import output_format, write_records
from simindex.policies import ExportFormat, OnEmpty, OnError

PAIR_FIELDS = ["id_a", "id_b", "similarity", "exact_jaccard", "estimated_jaccard"]
CLUSTER_FIELDS = ["external_id", "cluster", "is_representative", "similarity"]


@command(app, kernels=True)
def pairs(
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    threshold: Threshold = None,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Rebuild all pairs, not only those of documents added since the last run.",
        ),
    ] = False,
    max_bucket_size: Annotated[
        int,
        typer.Option(
            help="Buckets larger than this are linked to one member, not paired out.", min=2
        ),
    ] = DEFAULT_MAX_BUCKET_SIZE,
    top: Annotated[
        int, typer.Option(help="Print this many of the most similar pairs (0: none).", min=0)
    ] = 20,
    show: Show = False,
) -> None:
    """Find candidate pairs in the database, verify them, and store the similar ones."""
    from simindex.index import Index

    with Index.open(db, schema=schema, lock_timeout=lock_timeout) as index:
        report = index.find_pairs(threshold, full=full, max_bucket_size=max_bucket_size)
        pairs_found(report, max_bucket_size)
        if top:
            found = list(index.pairs(report.threshold, limit=top))
            ids = [i for p in found for i in (p.id_a, p.id_b)]
            pairs_table(found, titles_of(index, ids) if show else None)


# The largest clusters that a summary line names.
SUMMARY_NAMES = 3


@command(app, kernels=True)
def clusters(
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    threshold: Threshold = None,
    keep: Keep = "earliest",
    keep_by: KeepBy = None,
    keep_order: KeepOrderOption = "max",
    mode: Mode = "components",
    top: Annotated[
        int, typer.Option(help="Print this many of the largest clusters (0: none).", min=0)
    ] = 10,
    show: Show = False,
) -> None:
    """Group the verified pairs into clusters of duplicates (stars or connected components),
    each named by the document kept (its representative)."""
    from simindex.index import Index

    with Index.open(db, schema=schema, lock_timeout=lock_timeout) as index:
        report = index.cluster(threshold, keep=keep, keep_by=keep_by, keep_order=keep_order,
                               mode=mode, largest=max(top, SUMMARY_NAMES))  # fmt: skip
        err.print(
            f"{report.clusters:,} clusters hold {report.documents:,} documents (largest "
            f"{report.largest:,}) at similarity >= {report.threshold:g}, {report.mode}, "
            f"representative: {report.rule}; {report.seconds:.2f} s"
            + largest_clusters(report.largest_clusters[:SUMMARY_NAMES])
        )
        if top:
            largest = report.largest_clusters[:top]
            names = [c.representative for c in largest]
            clusters_table(largest, titles_of(index, names) if show else None)


@command(app, interrupted=NOTHING_CHANGED + "; no output was written")
def export(
    db: Db = None,
    schema: Schema = None,
    what: Annotated[
        Literal["pairs", "clusters"],
        typer.Option(help="Pairs (from `pairs`) or clusters (from `clusters`)."),
    ] = "pairs",
    threshold: Threshold = None,
    fmt: Annotated[
        ExportFormat | None,
        typer.Option(
            "--format",
            help="Output format; default: the -o file's extension, else csv (parquet needs -o "
            "and pyarrow).",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Output file (default: stdout).")
    ] = None,
) -> None:
    """Write the verified pairs, or the clusters, with external ids and similarities."""
    from simindex.index import Index
    from simindex.store import database_files

    path = str(output) if output else None
    written_as = output_format(path, fmt, default="csv")
    check_outputs([path], database_files=database_files(db))
    if what == "clusters" and threshold is not None:
        raise ParameterError("clusters are exported as built; --threshold is for pairs")
    with Index.open(db, schema=schema) as index:
        rows = index.pairs(threshold) if what == "pairs" else index.clusters()
        fields = PAIR_FIELDS if what == "pairs" else CLUSTER_FIELDS
        first = next(rows, None)  # a missing step raises here, before any file is created
        records = _records(itertools.chain([first] if first else [], rows), fields)
        tally: collections.Counter[str] = collections.Counter()
        count = write_records(_counting_clusters(records, tally), fields, written_as, path)
    exported = (
        f"{count:,} pairs"
        if what == "pairs"
        else f"{count:,} member rows of {tally['clusters']:,} clusters"
    )
    where = f" to {shown(output)}" if output else ""
    err.print(f"Exported {exported} ({written_as}){where}")


def _records(results: Iterator[Any], fields: list[str]) -> Iterator[dict[str, Any]]:
    """Typed results (Pair, ClusterMember) as the dicts the writers take."""
    return ({name: getattr(result, name) for name in fields} for result in results)


def _counting_clusters(
    rows: Iterable[dict[str, Any]], tally: collections.Counter[str]
) -> Iterator[dict[str, Any]]:
    """The rows, counting in ``tally["clusters"]`` the representatives (one per cluster)."""
    for row in rows:
        tally["clusters"] += bool(row.get("is_representative"))
        yield row


@command(app, kernels=True)
def dedup(
    input_file: Annotated[
        str,
        typer.Argument(
            metavar="INPUT",
            help="The file, directory or glob of shards to deduplicate (JSON lines, CSV, "
            "id<TAB>text, Parquet; .gz and .zst ok; - is stdin).",
        ),
    ],
    output: Annotated[
        str,
        typer.Option(
            "-o",
            "--output",
            help="Where the kept records go; format from the name (.parquet for Parquet), "
            "else as INPUT.",
        ),
    ],
    dropped: Annotated[
        str | None,
        typer.Option(
            help="Where the report of the input records dropped goes (default: OUTPUT's name "
            "+ .dropped.csv)."
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            callback=_inherit,
            help="Keep the index in this database (and drop duplicates of what it already "
            "holds); default: a temporary SQLite file.",
            show_default=False,
        ),
    ] = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
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
    on_empty: Annotated[
        OnEmpty,
        typer.Option(help="A record with no text: keep it in OUTPUT unindexed, or fail."),
    ] = "skip",
    on_duplicate: Annotated[
        Literal["fail", "skip"],
        typer.Option(
            help="An id already in --db with another text, or repeated in INPUT: fail, or keep "
            "the indexed (first) copy and write the id once. The same text is no conflict."
        ),
    ] = "fail",
    on_error: Annotated[
        OnError,
        typer.Option(
            help="A malformed record: fail, or leave it out (counted; listed in --error-log "
            "if given)."
        ),
    ] = "fail",
    error_log: ErrorLogPath = None,
    max_chars: MaxChars = DEFAULT_MAX_CHARS,
    scheme: NewScheme = None,
) -> None:
    """Write INPUT without its near-duplicates: one record kept per cluster. The report of
    the dropped records names, for each, the input record or indexed document it duplicates."""
    from simindex import dedup as local
    from simindex.spec import SignatureSpec

    inputs, reached, replaced = scan_inputs([input_file]), ["checking"], ReplacedRecords()
    with ErrorLog(error_log) as errors, progress("Checking") as advance:
        with noting(lambda: local.committed_before(reached[-1], db)):
            result = local.dedup_files(
                inputs.files, output, dropped=dropped, db=db, schema=schema,
                lock_timeout=lock_timeout, threshold=threshold, keep=keep, keep_by=keep_by,
                keep_order=keep_order, mode=mode, fmt=fmt, id_field=id_field,
                text_field=text_field, encoding=encoding, encoding_errors=encoding_errors,
                csv_layout=CsvLayout(delimiter, not no_header, id_column, text_column),
                on_replaced=replaced, max_chars=max_chars, on_empty=on_empty,
                on_duplicate=on_duplicate, on_error=on_error, problems=errors,
                spec=SignatureSpec(scheme=scheme) if scheme else None,
                progress=lambda step, n: advance(n, step, reached),
            )  # fmt: skip
    err.print(_deduplicated(result))
    for note in (inputs.note(), replaced.summary(encoding) if replaced.count else None):
        if note:
            err.print(note)


def _deduplicated(result: Any) -> str:
    """dedup's summary line, in the input's records."""
    summary = result.summary
    unsigned = f" ({summary.empty:,} of them empty, kept unindexed)" if summary.empty else ""
    before = (
        f" ({summary.duplicates_of_indexed:,} of them duplicate documents indexed before)"
        if summary.duplicates_of_indexed
        else ""
    )
    rerun = (
        f"; {summary.indexed_before:,} records were indexed before with the same text (an "
        "earlier run)"
        if summary.indexed_before
        else ""
    )
    return (
        f"{summary.pairs:,} similar pairs -> {summary.clusters:,} clusters; kept "
        f"{summary.kept:,} records{unsigned} in {shown(result.output)}, dropped "
        f"{summary.dropped:,}{before} (listed in {shown(result.dropped)}){rerun}"
        + largest_clusters(summary.largest_clusters)
    )
