"""Documents in and out of the index: ingest, query, show, delete, evict."""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from simindex.cli.app import app
from simindex.cli.errorlog import ErrorLog
from simindex.cli.errors import NOTHING_CHANGED, command
from simindex.cli.options import (
    POSITIVE,
    Db,
    Delimiter,
    DryRun,
    Encoding,
    EncodingErrors,
    ErrorLogPath,
    IdColumn,
    IdField,
    InputFormatOption,
    LockTimeout,
    MaxChars,
    NoHeader,
    Schema,
    Show,
    TextColumn,
    TextField,
    Threshold,
    Yes,
)
from simindex.cli.prompt import confirm
from simindex.cli.render import added, describe_index, document, err, matches, out, shown, titles
from simindex.cli.render import progress as progress_display
from simindex.defaults import DEFAULT_BATCH_SIZE, DEFAULT_LOCK_TIMEOUT, DEFAULT_MAX_BUCKET_SIZE
from simindex.errors import InputError, ParameterError
from simindex.io.delimited import CsvLayout
from simindex.io.lines import ReplacedRecords
from simindex.io.outputs import check_outputs
from simindex.io.readers import DEFAULT_MAX_CHARS, read_documents, scan_inputs
from simindex.policies import OnDuplicate, OnEmpty, OnError

if TYPE_CHECKING:
    from simindex.index import Index, Removal

# A thousand years: any window longer than that is a typo (and timedelta overflows soon after).
MAX_DAYS = 365_000


@command(app, kernels=True)
def ingest(
    files: Annotated[
        list[str],
        typer.Argument(
            help="Input files, directories or globs (JSON lines, CSV, id<TAB>text, Parquet; "
            ".gz and .zst are fine; - is stdin)."
        ),
    ],
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    fmt: InputFormatOption = "auto",
    id_field: IdField = "id",
    text_field: TextField = "text",
    encoding: Encoding = "utf-8",
    encoding_errors: EncodingErrors = "strict",
    delimiter: Delimiter = None,
    no_header: NoHeader = False,
    id_column: IdColumn = 0,
    text_column: TextColumn = 1,
    batch_size: Annotated[
        int,
        typer.Option(
            help="Most documents per batch (a batch also ends at 2 million characters of "
            "text): bounds memory.",
            **POSITIVE,
        ),
    ] = DEFAULT_BATCH_SIZE,
    on_duplicate: Annotated[
        OnDuplicate,
        typer.Option(
            help="An id that is already indexed or repeats: fail, skip it (the first copy "
            "stays), or replace (the last copy wins; run pairs again to re-pair it)."
        ),
    ] = "fail",
    on_empty: Annotated[
        OnEmpty,
        typer.Option(help="A document with no text: skip it (not stored; named), or fail."),
    ] = "skip",
    on_error: Annotated[
        OnError,
        typer.Option(
            help="A malformed record (bad line, missing field, bad id or text): fail, or skip "
            "it (counted; listed in --error-log if given)."
        ),
    ] = "fail",
    error_log: ErrorLogPath = None,
    max_chars: MaxChars = DEFAULT_MAX_CHARS,
) -> None:
    """Add documents to the index (creating it with default settings if the database has none).

    All files go in one transaction: on an error or Ctrl-C nothing is added. A directory or a
    glob stands for its files, in sorted order."""
    from simindex.index import Index
    from simindex.store import database_files

    inputs, layout = scan_inputs(files), CsvLayout(delimiter, not no_header, id_column, text_column)
    paths, replaced = inputs.files, ReplacedRecords()
    check_outputs([error_log], paths, database_files(db))
    index, created = Index.open_or_create(db, schema=schema, lock_timeout=lock_timeout)
    asked = {"inputs": paths, "on_duplicate": on_duplicate, "on_error": on_error}
    with index, ErrorLog(error_log) as errors, index.run("ingest", asked):
        started = time.perf_counter()
        read = functools.partial(
            read_documents, fmt=fmt, id_field=id_field, text_field=text_field, encoding=encoding,
            on_error=errors.add if on_error == "skip" else None, max_chars=max_chars,
            csv_layout=layout, encoding_errors=encoding_errors, on_replaced=replaced,
        )  # fmt: skip
        with progress_display("Ingesting") as advance:
            result = index.add(
                errors.saved_after(itertools.chain.from_iterable(map(read, paths))),
                batch_size=batch_size,
                on_duplicate=on_duplicate,
                on_empty=on_empty,
                max_chars=max_chars,
                progress=advance,
            )
        errors.add_empty(result.skipped_empty)
        err.print(added(result, time.perf_counter() - started))
        for note in (inputs.note(), replaced.summary(encoding) if replaced.count else None):
            if note:
                err.print(note)
        if created:  # it was created with the documents (a failure leaves none): only now
            if not index.completed_half_created:
                err.print(f"Created a new index in {shown(index.url)}")
            describe_index(index)


@command(app, kernels=True, interrupted=NOTHING_CHANGED)
def query(
    text: Annotated[
        str | None, typer.Argument(help="The text to look up.", show_default=False)
    ] = None,
    db: Db = None,
    schema: Schema = None,
    file: Annotated[Path | None, typer.Option(help="Read the text from this file.")] = None,
    doc_id: Annotated[
        str | None, typer.Option("--id", help="Look up an indexed document by its id.")
    ] = None,
    threshold: Threshold = None,
    limit: Annotated[int, typer.Option(help="At most this many matches.", **POSITIVE)] = 20,
    max_bucket_size: Annotated[
        int,
        typer.Option(
            help="Of a larger bucket only this many members (the earliest) are compared, as "
            "`pairs` does: bounds the time on skewed data.",
            min=2,
        ),
    ] = DEFAULT_MAX_BUCKET_SIZE,
    show: Show = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table.")] = False,
) -> None:
    """Find indexed documents similar to a text, a file, or an indexed document."""
    from simindex.index import Index

    if len([x for x in (text, file, doc_id) if x is not None]) != 1:
        raise ParameterError("give exactly one of: a TEXT argument, --file, or --id")
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{file}: can't read as UTF-8 text: {exc}") from None
    options = {"threshold": threshold, "limit": limit, "max_bucket_size": max_bucket_size}
    with Index.open(db, schema=schema) as index:
        if doc_id is not None:
            found = index.query_id(doc_id, **options)
        else:
            found = index.query(text or "", **options)
        titled = titles(index, [m.external_id for m in found]) if show else None
    matches(found, as_json, titled)
    err.print(f"{len(found)} match(es)")


@command(app, interrupted=NOTHING_CHANGED)
def show(
    doc_id: Annotated[str, typer.Argument(metavar="ID", help="The document's external id.")],
    db: Db = None,
    schema: Schema = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of text.")] = False,
) -> None:
    """Print one indexed document: its text and metadata."""
    from simindex.index import Index

    with Index.open(db, schema=schema) as index:
        found = index.documents([doc_id])
    if doc_id not in found:
        raise InputError(f"no document with id {doc_id!r} is indexed")
    document(found[doc_id], as_json)


@command(app, kernels=True)
def delete(
    ids: Annotated[
        list[str] | None,
        typer.Argument(help="External ids of the documents to remove.", show_default=False),
    ] = None,
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    ids_file: Annotated[
        Path | None, typer.Option(help="Also remove the ids listed in this file, one per line.")
    ] = None,
    yes: Yes = False,
    dry_run: DryRun = False,
) -> None:
    """Remove documents, their signatures, band keys, pairs and cluster membership."""
    from simindex.index import Index

    wanted = list(ids or [])
    if ids_file is not None:
        try:
            lines = ids_file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise InputError(f"{ids_file}: can't read: {exc.strerror}") from None
        wanted += [line.strip() for line in lines if line.strip()]
    if not wanted:
        raise ParameterError("give the ids to delete, or --ids-file")
    wanted = list(dict.fromkeys(wanted))
    with Index.open(db, schema=schema, lock_timeout=lock_timeout) as index:
        removal = functools.partial(index.delete, wanted)
        _remove(index, removal, f"of {len(wanted):,} documents", yes, dry_run)


@command(app, kernels=True)
def evict(
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    older_than: Annotated[
        datetime | None,
        typer.Option(
            help="Remove documents ingested before this time (UTC unless it says otherwise)."
        ),
    ] = None,
    days: Annotated[
        float | None, typer.Option(help="Remove documents ingested more than this many days ago.")
    ] = None,
    yes: Yes = False,
    dry_run: DryRun = False,
) -> None:
    """Remove the documents ingested before a time (a sliding window over a feed)."""
    from simindex.index import Index

    if (older_than is None) == (days is None):
        raise ParameterError("give --older-than or --days (one of them)")
    if days is not None and not (math.isfinite(days) and 0 <= days <= MAX_DAYS):
        raise ParameterError(f"--days must be a number of days from 0 to {MAX_DAYS:,}, got {days}")
    cutoff = older_than if older_than is not None else datetime.now(UTC) - timedelta(days=days or 0)
    with Index.open(db, schema=schema, lock_timeout=lock_timeout) as index:
        removal = functools.partial(index.evict, cutoff)
        _remove(index, removal, f"documents ingested before {cutoff.isoformat()}", yes, dry_run)


def _remove(
    index: Index, removal: Callable[..., Removal], described: str, yes: bool, dry_run: bool
) -> None:
    """Run a removal (delete, evict): with --dry-run list what would go; else confirm first
    (see prompt.confirm), and name the ids that were not found."""

    def question() -> str | None:
        count = len(removal(dry_run=True).removed)
        return f"Remove {count:,} documents from {shown(index.url)}?" if count else None

    if not dry_run:
        confirm(yes, "this removes documents for good (--dry-run shows which)", question)
    result = removal(dry_run=dry_run)
    if dry_run:
        for external_id in result.removed:
            out.print(shown(external_id))
    not_found = ", ".join(shown(i) for i in result.not_found)
    err.print(
        f"{'Would remove' if dry_run else 'Removed'} {len(result.removed):,} {described}"
        + (f"; not found: {not_found}" if not_found else "")
    )
