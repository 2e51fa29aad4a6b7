"""The ``simindex`` command: a thin Typer layer over :class:`simindex.Index`.

Each command opens the index, makes one library call and renders the result: data on
stdout, progress and summaries on stderr. A SimindexError becomes ``Error: ...`` and exit
code 1; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import errno
import functools
import gc
import io
import itertools
import json
import logging
import math
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from simindex.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_MAX_BUCKET_SIZE,
    DEFAULT_RECALL,
    DEFAULT_SAMPLE,
    DEFAULT_SCHEME,
    DEFAULT_THRESHOLD,
    SCHEMES,
    application_name,
)
from simindex.errors import InputError, LowRecallWarning, ParameterError, SimindexError
from simindex.io.outputs import atomic_output, check_outputs, scratch_directory
from simindex.io.readers import (
    DEFAULT_MAX_CHARS,
    detect_format,
    expand_inputs,
    read_checked,
    read_documents,
    record_id,
    spool_stdin,
)
from simindex.io.writers import output_format, write_records

# numba, NumPy, SQLAlchemy and psycopg load inside the commands that need them, so --help
# and --version start fast (see benchmarks/bench_startup.py).
if TYPE_CHECKING:
    from simindex.index import Index, Match, Removal
    from simindex.pipeline.evaluate import CandidateEstimate, Evaluation

app = typer.Typer(
    help="A persistent near-duplicate index: MinHash LSH in SQLite or PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
    # Plain help: Typer's rich help labels every flag (--json, --help) "<bool>" as if it took
    # a value.
    rich_markup_mode=None,
)
db_app = typer.Typer(
    help="The database schema: upgrade it, show its revision.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(db_app, name="db")
spark_app = typer.Typer(
    help="The same pipeline on Apache Spark, for corpora past one machine (needs the spark "
    "extra and Java 17).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(spark_app, name="spark")

# Markup off: ids, paths and texts are the user's data, never rich markup (an id "[/]" or
# "[link=...]" prints as itself); styles are given explicitly where wanted.
out = Console(soft_wrap=True, markup=False)
err = Console(stderr=True, soft_wrap=True, markup=False)


def shown(text: object) -> str:
    """User data (an id, a path, a text) as it may reach a terminal: control characters
    (escape sequences, newlines, zero-width marks) written as Python escapes."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text)
    )


def _inherit(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """A global option given before the command (``simindex --db X stats``, like ``git -C``)
    is the default of the same option after it; the one after the command wins."""
    return ctx.find_root().params.get(param.name) if value is None else value


DB_HELP = (
    "Database: a SQLite file path, sqlite:///path or postgresql://user@host/db. "
    "Default: $SIMINDEX_DATABASE_URL, else ./simindex.db"
)


class _ToStderr(logging.Handler):
    """The library's notices (e.g. a writer waiting for another) on stderr, like progress."""

    def emit(self, record: logging.LogRecord) -> None:
        err.print(shown(record.getMessage()))


logging.getLogger("simindex").addHandler(_ToStderr())

Db = Annotated[
    str | None,
    typer.Option("--db", help=DB_HELP, callback=_inherit, show_default=False),
]
SCHEMA_HELP = (
    "PostgreSQL schema holding the index (created with it), so several indexes share a "
    "database. Default: $SIMINDEX_SCHEMA, else the database's search_path (usually public)."
)
Schema = Annotated[
    str | None,
    typer.Option("--schema", help=SCHEMA_HELP, callback=_inherit, show_default=False),
]
LockTimeout = Annotated[
    float,
    typer.Option(
        "--lock-timeout",
        envvar="SIMINDEX_LOCK_TIMEOUT",
        help="Seconds to wait for another writer of the index before giving up.",
    ),
]
Threshold = Annotated[
    float | None,
    typer.Option(
        help="Similarity threshold in [0, 1]; default: the index's (set at init).",
        show_default=False,
    ),
]
Sample = Annotated[
    int,
    typer.Option(
        help="Documents sampled (all when the index holds fewer); the exact join's cost grows "
        "with the square of it."
    ),
]
Floor = Annotated[
    float,
    typer.Option(help="Lowest exact similarity computed (at most the index threshold)."),
]
Seed = Annotated[int, typer.Option(help="Seed of the random sample.")]


class InputFormat(StrEnum):
    auto = "auto"
    jsonl = "jsonl"
    csv = "csv"
    tsv = "tsv"
    parquet = "parquet"


InputFormatOption = Annotated[
    InputFormat, typer.Option("--format", help="Input format; auto: by file name.")
]
IdField = Annotated[str, typer.Option(help="Field (JSON, Parquet) or column (CSV) holding the id.")]
TextField = Annotated[str, typer.Option(help="Field or column holding the text.")]
Encoding = Annotated[str, typer.Option(help="Text encoding of the input files.")]
MaxChars = Annotated[
    int,
    typer.Option(help="Longest document accepted, in characters (~20 bytes of memory each)."),
]
SparkMaster = Annotated[
    str | None,
    typer.Option(
        help="Spark master URL (local[4], spark://host:7077, yarn ...). Default: the "
        "active session's, else local[*].",
        show_default=False,
    ),
]
ErrorLog = Annotated[
    Path,
    typer.Option(help="With --on-error skip: where skipped records are listed (JSON lines)."),
]


class Policy(StrEnum):
    fail = "fail"
    skip = "skip"


class DuplicatePolicy(StrEnum):
    fail = "fail"
    skip = "skip"
    replace = "replace"


class ExportFormat(StrEnum):
    csv = "csv"
    jsonl = "jsonl"
    parquet = "parquet"


class Exported(StrEnum):
    pairs = "pairs"
    clusters = "clusters"


class Rule(StrEnum):
    earliest = "earliest"
    longest = "longest"


DuplicateThreshold = Annotated[float, typer.Option(help="Similarity that makes a duplicate.")]
Keep = Annotated[Rule, typer.Option(help="Which document of a cluster to keep.")]


Scheme = StrEnum("Scheme", {name: name for name in SCHEMES})  # type: ignore[misc]
NEW_INDEX_SCHEME = Scheme(DEFAULT_SCHEME)
SCHEME_HELP = (
    "Signature scheme (docs/spec.md): simindex-v2 hashes each shingle once into num_perm "
    "bins; simindex-v1 hashes it num_perm times."
)


class Shingle(StrEnum):
    char = "char"
    word = "word"


F = TypeVar("F", bound=Callable[..., Any])


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"simindex {version('simindex')}")
        raise typer.Exit()


@app.callback()
def main(
    db: Annotated[
        str | None,
        typer.Option("--db", envvar="SIMINDEX_DATABASE_URL", help=DB_HELP, show_default=False),
    ] = None,
    schema: Annotated[
        str | None,
        typer.Option("--schema", envvar="SIMINDEX_SCHEMA", help=SCHEMA_HELP, show_default=False),
    ] = None,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """A persistent near-duplicate index: MinHash LSH in SQLite or PostgreSQL.

    Global options go before the command and apply to it: `simindex --db news.db stats`."""


def _open(db: str | None, **options: Any) -> Index:
    """Index.open(db, **options); the library (numba, SQLAlchemy) loads here, on first use."""
    from simindex.index import Index

    _compile_once()
    return Index.open(db, **options)


def _compile_once() -> None:
    """On the first run after install or upgrade, compile the kernels, and say so."""
    from simindex.pipeline.kernels import compile_kernels, kernels_cached

    if kernels_cached():
        return
    err.print(
        "Compiling simindex's numba kernels, once after install or upgrade (about 30 s on "
        "2 cores; later runs load them from numba's cache) ..."
    )
    started = time.perf_counter()
    compile_kernels()
    err.print(f"Compiled in {time.perf_counter() - started:.0f} s")


def user_errors(function: F, *, spark: bool = False) -> F:
    """Print a SimindexError as one line and exit 1, without a traceback.

    Commands run without modules that libraries import only if they can and no command uses:
    pyarrow imports pandas, where it is installed, on its first ``pa.array()``, which only the
    Spark commands need (``spark=True`` keeps it); Alembic's templates (mako) import pygments
    to highlight their errors. Start-up times: benchmarks/bench_startup.py. LLVM's code is
    unmapped after numba has loaded the kernels (see simindex.pipeline.kernels.llvm_code_released)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from simindex.pipeline.kernels import llvm_code_released, without_blas, without_modules

        application_name.set(f"simindex {function.__name__}")  # seen in pg_stat_activity
        unused = ("pygments",) if spark else ("pygments", "pandas")
        try:
            with (
                warnings.catch_warnings(),
                without_blas(),
                without_modules(*unused),
                llvm_code_released(),
            ):
                warnings.simplefilter("always", LowRecallWarning)  # every time, one line each
                warnings.showwarning = _show_warning
                return function(*args, **kwargs)
        except SimindexError as exc:
            err.print(Text.assemble(("Error:", "bold red"), " ", shown(exc)))
            raise typer.Exit(1) from None
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            err.print(Text.assemble(("Error:", "bold red"), " ", shown(_no_space(exc))))
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def _no_space(exc: OSError) -> str:
    """A full disk, as a user can act on it: the file named if the error names one, else the
    temporary directory, where the command's scratch files live (nothing was committed: a
    command's work is one transaction, and its outputs are written aside and renamed)."""
    import tempfile

    where = exc.filename or f"the temporary directory ({tempfile.gettempdir()}) or an output"
    return (
        f"no space left on the device of {where}; free some, or set TMPDIR to a directory "
        "with room for the command's temporary files (docs/reliability.md says how much)"
    )


_default_showwarning = warnings.showwarning


def _show_warning(
    message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any
) -> None:
    """A library warning about the user's data or parameters is one ``Warning:`` line."""
    if issubclass(category, LowRecallWarning):
        err.print(Text.assemble(("Warning:", "bold yellow"), " ", shown(message)))
    else:
        _default_showwarning(message, category, *args, **kwargs)


@app.command()
@user_errors
def init(
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    threshold: Annotated[
        float,
        typer.Option(help="Similarity that counts as a duplicate; the banding is tuned for it."),
    ] = DEFAULT_THRESHOLD,
    bands: Annotated[
        int | None, typer.Option(help="LSH bands (with --rows), instead of tuning.")
    ] = None,
    rows: Annotated[int | None, typer.Option(help="Rows per band (with --bands).")] = None,
    num_perm: Annotated[int, typer.Option(help="MinHash functions (signature length).")] = 128,
    shingle: Annotated[
        Shingle, typer.Option(help="Shingle unit: characters or words.")
    ] = Shingle.char,
    k: Annotated[int, typer.Option("-k", "--k", help="Shingle length in characters or words.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the MinHash functions.")] = 1,
    scheme: Annotated[Scheme, typer.Option(help=SCHEME_HELP)] = NEW_INDEX_SCHEME,
    keep_text: Annotated[
        bool, typer.Option(help="Store document text (enables exact verification).")
    ] = True,
) -> None:
    """Create an index in an empty database (or complete a half-created one)."""
    from simindex.index import Index
    from simindex.spec import SignatureSpec

    spec = SignatureSpec(
        shingle=shingle.value, k=k, num_perm=num_perm, seed=seed, scheme=scheme.value
    )
    with Index.create(
        db,
        spec,
        threshold=threshold,
        bands=bands,
        rows=rows,
        keep_text=keep_text,
        schema=schema,
        lock_timeout=lock_timeout,
    ) as index:
        _describe_index(index)


@app.command()
@user_errors
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
    fmt: InputFormatOption = InputFormat.auto,
    id_field: IdField = "id",
    text_field: TextField = "text",
    encoding: Encoding = "utf-8",
    batch_size: Annotated[
        int,
        typer.Option(
            help="Most documents per batch (a batch also ends at 2 million characters of "
            "text): bounds memory."
        ),
    ] = DEFAULT_BATCH_SIZE,
    on_duplicate: Annotated[
        DuplicatePolicy,
        typer.Option(
            help="An id that is already indexed or repeats: fail, skip it (the first copy "
            "stays), or replace (the last copy wins; run pairs again to re-pair it)."
        ),
    ] = DuplicatePolicy.fail,
    on_empty: Annotated[
        Policy,
        typer.Option(help="A document with no text: skip it (not stored; listed), or fail."),
    ] = Policy.skip,
    on_error: Annotated[
        Policy,
        typer.Option(
            help="A malformed record (bad line, missing field, bad id or text): fail, or skip and log it."
        ),
    ] = Policy.fail,
    error_log: ErrorLog = Path("simindex-errors.jsonl"),
    max_chars: MaxChars = DEFAULT_MAX_CHARS,
) -> None:
    """Add documents to the index (creating it with default settings if the database has none).

    All files go in one transaction: on an error nothing is added. A directory or a glob
    stands for its files, in sorted order."""
    from simindex.index import Index

    paths = expand_inputs(files)
    check_outputs([error_log], paths, db)
    _compile_once()
    index, created = Index.open_or_create(db, schema=schema, lock_timeout=lock_timeout)
    with index, _ErrorLog(error_log) as errors:
        started = time.perf_counter()
        report = errors.add if on_error is Policy.skip else None
        with _progress("Ingesting") as advance:
            documents = itertools.chain.from_iterable(
                read_documents(path, fmt.value, id_field, text_field, encoding, report, max_chars)
                for path in paths
            )
            result = index.add(
                errors.saved_after(documents),
                batch_size=batch_size,
                on_duplicate=on_duplicate.value,
                on_empty=on_empty.value,
                max_chars=max_chars,
                progress=advance,
            )
        errors.add_empty(result.skipped_empty)
        seconds = time.perf_counter() - started
        err.print(
            f"Added {result.added:,} new documents in {seconds:.1f} s ({result.added / max(seconds, 1e-9):,.0f} docs/s); "
            f"the index holds {result.total:,}"
            + (f"; {len(result.replaced):,} replaced an earlier copy" if result.replaced else "")
            + (
                f"; skipped {len(result.skipped_existing):,} already indexed or repeated"
                if result.skipped_existing
                else ""
            )
            + _empty_summary(result.skipped_empty),
        )
        if created:  # it was created with the documents (a failure leaves none): only now
            if not index.completed_half_created:
                err.print(f"Created a new index in {shown(index.url)}")
            _describe_index(index)


def _empty_summary(ids: list[str], shown: int = 5) -> str:
    """'; skipped 2 empty (ids 'a', 'b')': the documents with no text after normalization."""
    if not ids:
        return ""
    names = ", ".join(repr(i) for i in ids[:shown]) + (", ..." if len(ids) > shown else "")
    return f"; skipped {len(ids):,} empty (no text after normalization: {names})"


Show = Annotated[
    bool,
    typer.Option(
        "--show", help="Add each document's title (metadata 'title', else the start of its text)."
    ),
]
Yes = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (for scripts).")
]
BandingId = Annotated[int, typer.Argument(help="The banding's id (`simindex stats` lists them).")]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
]


@app.command()
@user_errors
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
    limit: Annotated[int, typer.Option(help="At most this many matches.")] = 20,
    max_bucket_size: Annotated[
        int,
        typer.Option(
            help="Of a larger bucket only this many members (the earliest) are compared, as "
            "`pairs` does: bounds the time on skewed data."
        ),
    ] = DEFAULT_MAX_BUCKET_SIZE,
    show: Show = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table.")] = False,
) -> None:
    """Find indexed documents similar to a text, a file, or an indexed document."""
    given = [x for x in (text, file, doc_id) if x is not None]
    if len(given) != 1:
        raise ParameterError("give exactly one of: a TEXT argument, --file, or --id")
    with _open(db, schema=schema) as index:
        if doc_id is not None:
            matches = index.query_id(
                doc_id, threshold=threshold, limit=limit, max_bucket_size=max_bucket_size
            )
        else:
            if file is not None:
                try:
                    text = file.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise InputError(f"{file}: can't read as UTF-8 text: {exc}") from None
            matches = index.query(
                text or "", threshold=threshold, limit=limit, max_bucket_size=max_bucket_size
            )
        titles = _titles(index, [m.external_id for m in matches]) if show else None
        _print_matches(matches, as_json, titles)
        err.print(f"{len(matches)} match(es)")


@app.command()
@user_errors
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
        int, typer.Option(help="Buckets larger than this are linked to one member, not paired out.")
    ] = DEFAULT_MAX_BUCKET_SIZE,
    top: Annotated[
        int, typer.Option(help="Print this many of the most similar pairs (0: none).")
    ] = 20,
    show: Show = False,
) -> None:
    """Find candidate pairs in the database, verify them, and store the similar ones."""
    with _open(db, schema=schema, lock_timeout=lock_timeout) as index:
        report = index.find_pairs(threshold, full=full, max_bucket_size=max_bucket_size)
        verdict = "exact Jaccard" if report.exact else "estimated Jaccard (text not kept)"
        how = (
            f"incremental: {report.new_documents:,} new documents"
            if report.incremental
            else "full rebuild"
        )
        err.print(
            f"{report.candidates:,} candidate pairs -> {report.pairs:,} new pairs ({how}); "
            f"{report.stored:,} pairs stored at {verdict} >= {report.threshold:g}, banding "
            f"{report.banding_id} ({report.bands} x {report.rows}, expected recall "
            f"{report.expected_recall:.2%}); {report.seconds:.2f} s"
        )
        if report.hot_buckets:
            err.print(
                f"{report.hot_buckets} bucket(s) had more than {max_bucket_size} members (largest "
                f"{report.largest_bucket}); their members were linked to one representative"
            )
        if top:
            found = list(index.pairs(report.threshold, limit=top))
            titles = _titles(index, [i for p in found for i in (p.id_a, p.id_b)]) if show else None
            columns = ["id_a", "id_b", "similarity", "estimate"]
            table = Table(*columns, *(["title_a", "title_b"] if titles is not None else []))
            for pair in found:
                table.add_row(
                    shown(pair.id_a),
                    shown(pair.id_b),
                    f"{pair.similarity:.3f}",
                    f"{pair.estimated_jaccard:.3f}",
                    *([titles[pair.id_a], titles[pair.id_b]] if titles is not None else []),
                )
            out.print(table)


PAIR_FIELDS = ["id_a", "id_b", "similarity", "exact_jaccard", "estimated_jaccard"]
CLUSTER_FIELDS = ["external_id", "cluster", "is_representative", "similarity"]


@app.command()
@user_errors
def export(
    db: Db = None,
    schema: Schema = None,
    what: Annotated[
        Exported, typer.Option(help="Pairs (from `pairs`) or clusters (from `clusters`).")
    ] = Exported.pairs,
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
    path = str(output) if output else None
    output_fmt = output_format(path, fmt.value if fmt else None, default="csv")
    check_outputs([path], db=db)
    with _open(db, schema=schema) as index:
        if what is Exported.pairs:
            rows, fields = index.pairs(threshold), PAIR_FIELDS
        else:
            if threshold is not None:
                raise ParameterError("clusters are exported as built; --threshold is for pairs")
            rows, fields = index.clusters(), CLUSTER_FIELDS
        first = next(rows, None)  # a missing step raises here, before any file is created
        records = _records(itertools.chain([first] if first else [], rows), fields)
        clusters = Counter()
        count = write_records(_counting_clusters(records, clusters), fields, output_fmt, path)
        exported = (
            f"{count:,} pairs"
            if what is Exported.pairs
            else f"{count:,} member rows of {clusters['clusters']:,} clusters"
        )
        err.print(
            f"Exported {exported} ({output_fmt})" + (f" to {shown(output)}" if output else "")
        )


def _records(results: Iterator[Any], fields: list[str]) -> Iterator[dict[str, Any]]:
    """Typed results (Pair, ClusterMember) as the dicts the writers take."""
    return ({name: getattr(result, name) for name in fields} for result in results)


def _counting_clusters(rows: Iterable[dict[str, Any]], tally: Counter) -> Iterator[dict[str, Any]]:
    """The rows, counting in ``tally["clusters"]`` the representatives (one per cluster)."""
    for row in rows:
        tally["clusters"] += bool(row.get("is_representative"))
        yield row


@app.command()
@user_errors
def clusters(
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    threshold: Threshold = None,
    rule: Annotated[
        Rule, typer.Option(help="Which document represents (names) a cluster.")
    ] = Rule.earliest,
    top: Annotated[
        int, typer.Option(help="Print this many of the largest clusters (0: none).")
    ] = 10,
    show: Show = False,
) -> None:
    """Group the verified pairs into clusters of duplicates (connected components)."""
    with _open(db, schema=schema, lock_timeout=lock_timeout) as index:
        report = index.cluster(threshold, rule=rule.value)
        err.print(
            f"{report.clusters:,} clusters hold {report.documents:,} documents (largest "
            f"{report.largest:,}) at similarity >= {report.threshold:g}, representative: "
            f"{report.rule}; {report.seconds:.2f} s"
        )
        if top:
            sizes = collections.Counter(member.cluster for member in index.clusters())
            largest = sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:top]
            titles = _titles(index, [name for name, _ in largest]) if show else None
            table = Table(
                "cluster (representative)", "documents", *(["title"] if titles is not None else [])
            )
            for name, size in largest:
                table.add_row(
                    shown(name), f"{size:,}", *([titles[name]] if titles is not None else [])
                )
            out.print(table)


@app.command()
@user_errors
def show(
    doc_id: Annotated[str, typer.Argument(metavar="ID", help="The document's external id.")],
    db: Db = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of text.")] = False,
) -> None:
    """Print one indexed document: its text and metadata."""
    with _open(db) as index:
        found = index.documents([doc_id])
    if doc_id not in found:
        raise InputError(f"no document with id {doc_id!r} is indexed")
    document = found[doc_id]
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(document), default=str, ensure_ascii=False))
        return
    out.print(f"id           {shown(document.external_id)}")
    out.print(f"ingested at  {document.ingested_at}")
    for key, value in (document.metadata or {}).items():
        out.print(f"{shown(key):12} {shown(json.dumps(value, ensure_ascii=False))}")
    text = document.text if document.text is not None else "(text not kept by this index)"
    # Newlines and tabs are the text's own layout; every other control character is escaped.
    out.print("\n" + "\n".join(shown(line).replace("\\t", "\t") for line in text.splitlines()))


def _titles(index: Index, external_ids: list[str]) -> dict[str, str]:
    """external id -> a one-line title of the document, escaped for the terminal."""
    found = index.documents(external_ids)
    return {i: shown(found[i].title()) if i in found else "" for i in external_ids}


@app.command()
@user_errors
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
            help="Where the kept records go; format from the name (.parquet for Parquet), else as INPUT.",
        ),
    ],
    dropped: Annotated[
        str | None,
        typer.Option(
            help="Where the dropped records' report goes (default: OUTPUT's name + .dropped.csv)."
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            callback=_inherit,
            help="Keep the index in this database (and drop duplicates of what it already holds); default: a temporary SQLite file.",
            show_default=False,
        ),
    ] = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    threshold: DuplicateThreshold = DEFAULT_THRESHOLD,
    keep: Keep = Rule.earliest,
    fmt: InputFormatOption = InputFormat.auto,
    id_field: IdField = "id",
    text_field: TextField = "text",
    encoding: Encoding = "utf-8",
    on_empty: Annotated[
        Policy,
        typer.Option(help="A record with no text: keep it in OUTPUT unindexed, or fail."),
    ] = Policy.skip,
    on_duplicate: Annotated[
        Policy,
        typer.Option(
            help="An id already in --db with another text, or repeated in INPUT: fail, or keep "
            "the indexed (first) copy and write the id once. The same text is no conflict."
        ),
    ] = Policy.fail,
    on_error: Annotated[
        Policy,
        typer.Option(help="A malformed record: fail, or leave it out and log it."),
    ] = Policy.fail,
    error_log: ErrorLog = Path("simindex-errors.jsonl"),
    scheme: Annotated[
        Scheme | None,
        typer.Option(help=f"{SCHEME_HELP} Default: --db's, or {DEFAULT_SCHEME} for a new index."),
    ] = None,
) -> None:
    """Write INPUT without its near-duplicates: one record kept per cluster."""
    paths = expand_inputs([input_file])
    dropped = dropped or f"{output.removesuffix('.gz')}.dropped.csv"
    from simindex.index import Index
    from simindex.pipeline.kernels import release_code
    from simindex.spec import SignatureSpec

    logged = [error_log] if on_error is Policy.skip else []
    check_outputs([output, dropped, *logged], paths, db if db else False)
    with scratch_directory() as scratch, _ErrorLog(error_log) as errors:
        paths = [spool_stdin(scratch) if path == "-" else path for path in paths]
        input_fmt = detect_format(paths[0]) if fmt is InputFormat.auto else fmt.value
        output_fmt = output_format(output, None, default=input_fmt)
        report_error = errors.add if on_error is Policy.skip else None
        _compile_once()
        index, created = Index.open_or_create(  # the schema is --db's: a scratch file has none
            db or str(Path(scratch) / "dedup.db"),
            threshold=threshold,
            spec=SignatureSpec(scheme=scheme.value) if scheme else None,
            schema=schema if db else None,
            lock_timeout=lock_timeout,
        )
        with index:
            read = functools.partial(
                read_documents,
                fmt=fmt.value,
                id_field=id_field,
                text_field=text_field,
                encoding=encoding,
            )
            indexed = set() if created else _indexed_alike(index, paths, read)
            with _progress("Indexing") as advance:
                documents = (
                    document
                    for path in paths
                    for document in read(path, on_error=report_error)
                    if document[0] not in indexed
                )
                added = index.add(
                    errors.saved_after(documents),
                    on_empty=on_empty.value,
                    on_duplicate=on_duplicate.value,
                    progress=advance,
                )
            # Signing loaded pyarrow (stages.sign); finding pairs runs without it, and its
            # libraries' pages would stay in this process through it
            # (tests/cli/test_cli_startup.py reads what stays).
            release_code("/pyarrow/")
            _return_free_memory()
            pairs = index.find_pairs(threshold)
            report = index.cluster(threshold, rule=keep.value)
            records = _records_of(paths, fmt.value, id_field, text_field, encoding)
            kept_records = _kept(records, id_field, index, once=on_duplicate is Policy.skip)
            fields = _fields(paths, fmt.value, id_field, text_field, encoding)
            kept = write_records(kept_records, fields, output_fmt, output, id_field, text_field)
            report_rows = (
                {"id": r.external_id, "representative": r.cluster, "similarity": r.similarity}
                for r in index.clusters()
                if not r.is_representative
            )
            drop = write_records(
                report_rows,
                ["id", "representative", "similarity"],
                output_format(dropped, None, default="csv"),
                dropped,
            )
    unsigned = (
        f" ({len(added.skipped_empty):,} of them empty, kept unindexed)"
        if added.skipped_empty
        else ""
    )
    rerun = (
        f"; {len(indexed):,} records were indexed before with the same text (an earlier run)"
        if indexed
        else ""
    )
    err.print(
        f"{pairs.pairs:,} similar pairs -> {report.clusters:,} clusters; kept {kept:,} records"
        f"{unsigned} in {shown(output)}, dropped {drop:,} (listed in {shown(dropped)}){rerun}"
    )


class SparkOutputFormat(StrEnum):
    parquet = "parquet"
    jsonl = "jsonl"


@spark_app.command("dedup")
@functools.partial(user_errors, spark=True)
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
    keep: Keep = Rule.earliest,
    fmt: InputFormatOption = InputFormat.auto,
    id_field: IdField = "id",
    text_field: TextField = "text",
    encoding: Encoding = "utf-8",
    output_format: Annotated[
        SparkOutputFormat, typer.Option(help="Format of the files under --out.")
    ] = SparkOutputFormat.parquet,
    on_empty: Annotated[
        Policy,
        typer.Option(help="A record with no text: keep it in kept/ unindexed, or fail."),
    ] = Policy.skip,
    on_duplicate: Annotated[
        Policy,
        typer.Option(help="An id repeated in INPUT: fail, or keep the first copy only."),
    ] = Policy.fail,
    on_error: Annotated[
        Policy,
        typer.Option(help="A malformed record: fail, or leave it out and list it in problems/."),
    ] = Policy.fail,
    scheme: Annotated[Scheme, typer.Option(help=SCHEME_HELP)] = NEW_INDEX_SCHEME,
) -> None:
    """Write INPUT without its near-duplicates, on Spark: what `simindex dedup` keeps and
    drops, for corpora past one machine."""
    from simindex.spark.pipeline import dedup_files
    from simindex.spark.session import job_errors
    from simindex.spec import SignatureSpec

    with job_errors():
        summary = dedup_files(
            expand_inputs(files),
            str(out),
            fmt=fmt.value,
            id_field=id_field,
            text_field=text_field,
            encoding=encoding,
            output_format=output_format.value,
            master=master,
            threshold=threshold,
            keep=keep.value,
            spec=SignatureSpec(scheme=scheme.value),
            on_error=on_error.value,
            on_empty=on_empty.value,
            on_duplicate=on_duplicate.value,
        )
    left_out = [
        f"{count:,} {what}"
        for count, what in (
            (summary.skipped, "bad record(s) left out"),
            (summary.repeated, "repeated id(s) left out"),
            (summary.empty, "empty document(s) kept unindexed"),
        )
        if count
    ]
    listed = f"; {', '.join(left_out)} (listed in problems/)" if left_out else ""
    err.print(
        f"{summary.pairs:,} similar pairs -> {summary.clusters:,} clusters; kept "
        f"{summary.kept:,} records, dropped {summary.dropped:,}, in {shown(out)}{listed}"
    )


def _indexed_alike(
    index: Index, paths: list[str], read: Callable[..., Iterator[Any]], batch: int = 10_000
) -> set[str]:
    """Ids of the input that the index already holds with the same normalized text: a
    re-run of a dedup --db interrupted between its transactions, not a conflict."""
    from simindex.pipeline.shingle import content_hash, normalize

    documents = (d for path in paths for d in read(path, on_error=_ignore))
    alike: set[str] = set()
    while chunk := list(itertools.islice(documents, batch)):
        stored = index.content_hashes(d[0] for d in chunk)
        alike.update(
            external_id
            for external_id, text, *_ in chunk
            if external_id in stored and stored[external_id] == content_hash(normalize(text))
        )
    return alike


def _records_of(
    paths: list[str], fmt: str, id_field: str, text_field: str, encoding: str
) -> Iterator[dict[str, Any]]:
    """The records of every input in order, bad ones left out (reported when indexing)."""
    for path in paths:
        for _, record, _ in read_checked(path, fmt, id_field, text_field, encoding, _ignore):
            yield record


def _ignore(error: InputError) -> None:
    """An error already reported (or logged) by an earlier pass over the same input."""


def _kept(
    records: Iterable[dict[str, Any]], id_field: str, index: Index, once: bool, batch: int = 10_000
) -> Iterator[dict[str, Any]]:
    """The records that the index does not cluster under another document (asked batch by
    batch); with ``once``, only the first of an id."""
    written: set[str] = set()
    records = iter(records)
    while chunk := list(itertools.islice(records, batch)):
        drop = index.clustered_duplicates(record_id(r, id_field) for r in chunk)
        for record in chunk:
            external_id = record_id(record, id_field)
            if external_id in drop or (once and external_id in written):
                continue
            if once:
                written.add(external_id)
            yield record


def _fields(paths: list[str], fmt: str, id_field: str, text_field: str, encoding: str) -> list[str]:
    """Column names of the input's records, in their order: the CSV header, or the keys seen
    in the first thousand records."""
    seen: dict[str, None] = {}
    records = _records_of(paths, fmt, id_field, text_field, encoding)
    for record in itertools.islice(records, 1000):
        seen.update(dict.fromkeys(record))
    return list(seen)


@app.command()
@user_errors
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
    wanted = list(ids or [])
    if ids_file is not None:
        try:
            wanted += [
                line.strip()
                for line in ids_file.read_text(encoding="utf-8").splitlines()
                if line.strip()
            ]
        except OSError as exc:
            raise InputError(f"{ids_file}: can't read: {exc.strerror}") from None
    if not wanted:
        raise ParameterError("give the ids to delete, or --ids-file")
    with _open(db, schema=schema, lock_timeout=lock_timeout) as index:
        wanted = list(dict.fromkeys(wanted))
        removal = functools.partial(index.delete, wanted)
        _remove(index, removal, f"of {len(wanted):,} documents", yes, dry_run)


@app.command()
@user_errors
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
    if (older_than is None) == (days is None):
        raise ParameterError("give --older-than or --days (one of them)")
    if days is not None and not (math.isfinite(days) and 0 <= days <= MAX_DAYS):
        raise ParameterError(f"--days must be a number of days from 0 to {MAX_DAYS:,}, got {days}")
    cutoff = older_than if older_than is not None else datetime.now(UTC) - timedelta(days=days or 0)
    with _open(db, schema=schema, lock_timeout=lock_timeout) as index:
        removal = functools.partial(index.evict, cutoff)
        _remove(index, removal, f"documents ingested before {cutoff.isoformat()}", yes, dry_run)


# A thousand years: any window longer than that is a typo (and timedelta overflows soon after).
MAX_DAYS = 365_000


def _remove(
    index: Index, removal: Callable[..., Removal], described: str, yes: bool, dry_run: bool
) -> None:
    """Run a removal (delete, evict): with --dry-run list what would go; else confirm first
    (see _confirm), and name the ids that were not found."""

    def question() -> str | None:
        planned = removal(dry_run=True)
        count = len(planned.removed)
        return f"Remove {count:,} documents from {shown(index.url)}?" if count else None

    if not dry_run:
        hint = "this removes documents for good (--dry-run shows which)"
        _confirm(yes, hint, question)
    result = removal(dry_run=dry_run)
    if dry_run:
        for external_id in result.removed:
            out.print(shown(external_id))
    verb = "Would remove" if dry_run else "Removed"
    err.print(
        f"{verb} {len(result.removed):,} {described}"
        + (
            f"; not found: {', '.join(shown(i) for i in result.not_found)}"
            if result.not_found
            else ""
        )
    )


def _confirm(yes: bool, what: str, question: Callable[[], str | None]) -> None:
    """Go on only if the user agrees: --yes, or "y" to ``question()`` (None: nothing to ask)
    on a terminal. With no terminal to ask on and no --yes, refuse, saying ``what`` happens."""
    if yes:
        return
    if not _interactive():
        raise ParameterError(f"{what}; with no terminal to ask on, pass --yes to confirm")
    text = question()
    if text is not None and not typer.confirm(text, err=True):
        err.print("Nothing changed.")
        raise typer.Exit(1)


def _interactive() -> bool:
    """Whether a person can answer a question (stdin is a terminal)."""
    return sys.stdin.isatty()


@app.command()
@user_errors
def reband(
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    bands: Annotated[
        int | None, typer.Option(help="Bands of the new banding (with --rows).")
    ] = None,
    rows: Annotated[int | None, typer.Option(help="Rows per band (with --bands).")] = None,
    threshold: Annotated[
        float | None, typer.Option(help="Tune the new banding for this threshold instead.")
    ] = None,
    activate: Annotated[
        bool,
        typer.Option(
            help="Make the new banding the active one (else later: `simindex activate ID`)."
        ),
    ] = True,
    drop_old: Annotated[
        bool, typer.Option(help="Delete the other bandings (and their band keys and pairs).")
    ] = False,
    yes: Yes = False,
) -> None:
    """Build a new banding from the stored signatures (no text is re-read)."""
    from simindex.pipeline import banding as lsh

    with _open(db, schema=schema, lock_timeout=lock_timeout) as index:
        if drop_old:
            question = (
                f"Drop the other bandings, their band keys and pairs, from {shown(index.url)}?"
            )
            _confirm(yes, "--drop-old deletes the other bandings for good", lambda: question)
        if threshold is not None:
            if bands is not None or rows is not None:
                raise ParameterError("give --threshold or --bands and --rows, not both")
            chosen = lsh.tune_threshold(index.spec.num_perm, threshold).chosen
            bands, rows = chosen.bands, chosen.rows
        if bands is None or rows is None:
            raise ParameterError("give --bands and --rows, or --threshold")
        started = time.perf_counter()
        banding_id = index.reband(bands, rows, activate=activate, drop_old=drop_old)
        err.print(
            f"Built banding {banding_id} ({bands} bands x {rows} rows) in {time.perf_counter() - started:.1f} s"
            + (
                "; it is now active"
                if activate
                else f"; `simindex activate {banding_id}` activates it"
            )
        )


@app.command()
@user_errors
def activate(
    banding_id: BandingId,
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
) -> None:
    """Make a complete banding (from `reband --no-activate`) the active one."""
    with _open(db, schema=schema, lock_timeout=lock_timeout) as index:
        index.activate(banding_id)
    err.print(f"Banding {banding_id} is now active")


@app.command("drop-banding")
@user_errors
def drop_banding(
    banding_id: BandingId,
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    yes: Yes = False,
) -> None:
    """Delete one banding that is not active (its band keys, pairs and clusters): one built
    with `reband --no-activate`, one a stopped `reband` left building, or the band keys a
    stopped drop left (`stats` lists them as retired)."""
    with _open(db, schema=schema, lock_timeout=lock_timeout) as index:
        question = f"Drop banding {banding_id}, its band keys and pairs, from {shown(index.url)}?"
        _confirm(yes, "drop-banding deletes a banding for good", lambda: question)
        index.drop_banding(banding_id)
    err.print(f"Dropped banding {banding_id}")


@app.command()
@user_errors
def stats(
    db: Db = None,
    schema: Schema = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables.")] = False,
) -> None:
    """Documents, bandings, bucket sizes and the largest buckets of the index."""
    with _open(db, schema=schema) as index:
        result = index.stats()
    if as_json:
        typer.echo(json.dumps(result, default=str, indent=2))
        return
    out.print(f"index      {shown(result['url'])}\nscheme     {index.spec.describe()}")
    out.print(
        f"documents  {result['documents']:,} ({result['exact_duplicate_groups']:,} groups of exact duplicates)\n"
        f"text kept  {'yes' if result['keep_text'] else 'no'}; default threshold {result['threshold']}"
    )
    table = Table("banding", "bands x rows", "state", "active", "pairs found at", title="Bandings")
    for b in result["bandings"]:
        table.add_row(
            str(b["id"]),
            f"{b['bands']} x {b['rows']}",
            b["state"],
            "yes" if b["is_active"] else "",
            "-" if b["pairs_threshold"] is None else str(b["pairs_threshold"]),
        )
    out.print(table)
    building = [str(b["id"]) for b in result["bandings"] if b["state"] == "building"]
    if building:
        out.print(
            f"building bandings {', '.join(building)}: a `simindex reband` is building them, or "
            "stopped before it finished (they are used by nothing; `simindex drop-banding "
            "ID` removes one)",
        )
    if result["retired_bandings"]:
        when = (
            "deleted by `simindex drop-banding ID` (a drop stopped before it deleted them)"
            if result["url"].startswith("sqlite")
            else "dropped at the next write (readers held them)"
        )
        out.print(
            f"retired bandings {', '.join(map(str, result['retired_bandings']))}: their band "
            f"keys are {when}; docs/reliability.md",
        )
    sizes = Table(
        "bucket size", "buckets", title=f"Bucket sizes (banding {result['active_banding']})"
    )
    for size, count in result["bucket_sizes"]:
        sizes.add_row(f"{size:,}", f"{count:,}")
    out.print(sizes)
    largest = Table("band", "key", "documents", title="Largest buckets")
    for band, key, size in result["largest_buckets"]:
        largest.add_row(str(band), str(key), f"{size:,}")
    out.print(largest)


@app.command()
@user_errors
def check(db: Db = None, schema: Schema = None) -> None:
    """Check the index's integrity; exit 1 and list the problems if there are any."""
    with _open(db, schema=schema) as index:
        problems = index.check()
    for problem in problems:
        err.print(Text.assemble(("Problem:", "bold red"), " ", shown(problem)))
    if problems:
        raise typer.Exit(1)
    err.print(f"{shown(index.url)}: consistent")


@app.command()
@user_errors
def evaluate(
    db: Db = None,
    schema: Schema = None,
    sample: Sample = DEFAULT_SAMPLE,
    floor: Floor = 0.5,
    seed: Seed = 0,
    threshold: Threshold = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables.")] = False,
) -> None:
    """Measure recall and precision against exact Jaccard on a sample of the documents."""
    with _open(db, schema=schema) as index:
        result = index.evaluate(sample=sample, floor=floor, seed=seed, threshold=threshold)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    _print_evaluation(result)


@app.command()
@user_errors
def report(
    db: Db = None,
    schema: Schema = None,
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", help="The HTML page; its figures go to NAME_files/ beside it."
        ),
    ] = Path("report.html"),
    sample: Sample = DEFAULT_SAMPLE,
    floor: Floor = 0.5,
    seed: Seed = 0,
) -> None:
    """Draw the evaluation and the index's statistics: one HTML page with figures (PNG, SVG)."""
    from simindex.report import example_pairs, require_matplotlib, write_report

    require_matplotlib()  # before the evaluation, which may take a while
    check_outputs([output], db=db)
    with _open(db, schema=schema) as index:
        result = index.evaluate(sample=sample, floor=floor, seed=seed)
        statistics = index.stats()
        examples = example_pairs(index, result)
    files = write_report(result, statistics, output, examples)
    err.print(
        f"Wrote {shown(output)}, with its {len(files) - 1} figure files in {shown(files[1].parent)}"
    )


@app.command()
@user_errors
def tune(
    num_perm: Annotated[
        int | None,
        typer.Option(
            help="Signature length to tune for. Default: the index's with --db, else 128.",
            show_default=False,
        ),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(help="One threshold t: P(t) >= --recall, fewest candidates at t/2."),
    ] = None,
    recall: Annotated[
        float, typer.Option(help="With --threshold: candidate probability at t.")
    ] = DEFAULT_RECALL,
    low: Annotated[
        float | None,
        typer.Option(help="Low similarity: pairs below it should rarely be candidates."),
    ] = None,
    p_low: Annotated[
        float | None, typer.Option(help="At most this candidate probability at --low.")
    ] = None,
    high: Annotated[
        float | None, typer.Option(help="High similarity: pairs above it should be candidates.")
    ] = None,
    p_high: Annotated[
        float | None, typer.Option(help="At least this candidate probability at --high.")
    ] = None,
    show: Annotated[
        int, typer.Option(help="List this many of the bandings that meet the targets.")
    ] = 10,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Also estimate the candidate pairs each listed banding would make on this "
            "index's documents, from a sample of stored signatures (SIMINDEX_DATABASE_URL is "
            "not read here: tune stays offline unless asked).",
            show_default=False,
        ),
    ] = None,
    sample: Annotated[
        int, typer.Option(help="With --db: documents sampled for the estimate.")
    ] = 5000,
    seed: Annotated[int, typer.Option(help="With --db: seed of the sample.")] = 0,
    schema: Schema = None,
) -> None:
    """Choose bands x rows for a threshold, or for targets at a low and a high similarity."""
    from simindex.pipeline import banding as lsh

    num_perm = _tune_num_perm(db, schema, num_perm)
    targets = (low, p_low, high, p_high)
    if threshold is not None and any(t is not None for t in targets):
        raise ParameterError("give --threshold, or --low --p-low --high --p-high, not both")
    if threshold is not None:
        result = lsh.tune_threshold(num_perm, threshold, recall)
    elif all(t is not None for t in targets):
        result = lsh.tune(num_perm, low, p_low, high, p_high)  # type: ignore[arg-type]
    else:
        raise ParameterError("give --threshold, or all four of --low --p-low --high --p-high")
    chosen = result.chosen
    listed = [(b.bands, b.rows) for b in result.feasible[:show]]
    estimates, active = (
        _candidate_estimates(db, schema, [*listed, (chosen.bands, chosen.rows)], sample, seed)
        if db is not None
        else ({}, None)
    )
    goal_low = "(ranking only)" if threshold is not None else f"<= {result.p_low:g}"
    out.print(
        f"targets: P({result.s_low:g}) {goal_low}, P({result.s_high:g}) >= {result.p_high:g}, num_perm {num_perm}"
    )
    table = Table(
        "bands",
        "rows",
        "hashes",
        f"P({result.s_low:g})",
        f"P({result.s_high:g})",
        "approx threshold",
        title=f"{len(result.feasible)} banding(s) meet the targets"
        + (f"; the best {show}" if len(result.feasible) > show else ""),
    )
    if estimates:
        table.add_column("candidate pairs on the index")
    for b in result.feasible[:show]:
        table.add_row(
            str(b.bands),
            str(b.rows),
            str(b.hashes_used),
            f"{b.p_at_low:.4g}",
            f"{b.p_at_high:.6g}",
            f"{lsh.approx_threshold(b.bands, b.rows):.3f}",
            *([_estimate_text(estimates[(b.bands, b.rows)])] if estimates else []),
        )
    if result.feasible:
        out.print(table)
        out.print(f"chosen: {chosen.bands} bands x {chosen.rows} rows")
    else:
        out.print(f"No banding within {num_perm} hashes meets the targets.")
        out.print(f"best compromise: {chosen.bands} bands x {chosen.rows} rows")
        needed = result.num_perm_needed
        out.print(
            f"num_perm needed to meet them: {needed}"
            if needed
            else "no num_perm up to 65536 meets them"
        )
    out.print(
        f"  P({result.s_low:g}) = {chosen.p_at_low:.6g}, P({result.s_high:g}) = {chosen.p_at_high:.6g}, "
        f"approx threshold (1/b)^(1/r) = {lsh.approx_threshold(chosen.bands, chosen.rows):.3f}\n"
        + (
            f"  the curve crosses {result.p_high:g} at similarity {result.high_crossing:.4f}"
            if threshold is not None
            else f"  the curve crosses {result.p_low:g} at similarity {result.low_crossing:.4f} "
            f"and {result.p_high:g} at similarity {result.high_crossing:.4f}"
        )
    )
    if active is not None:
        now = estimates[active]
        out.print(
            f"candidate pairs (pairs sharing a band key) on the {now.documents:,} documents of "
            f"the index, estimated from {now.sample:,} sampled (seed {seed}):\n"
            f"  chosen {chosen.bands} x {chosen.rows}: "
            f"{_estimate_text(estimates[(chosen.bands, chosen.rows)])}\n"
            f"  active {active[0]} x {active[1]}: {_estimate_text(now)}"
        )


def _tune_num_perm(db: str | None, schema: str | None, num_perm: int | None) -> int:
    """The signature length to tune for: the index's with --db, else --num-perm or 128."""
    if db is None:
        return 128 if num_perm is None else num_perm
    with _open(db, schema=schema) as index:
        own = index.spec.num_perm
    if num_perm is not None and num_perm != own:
        raise ParameterError(
            f"--num-perm {num_perm} differs from the index's {own}; drop --num-perm to tune "
            "for the index (re-banding can't change the signature length)"
        )
    return own


def _candidate_estimates(
    db: str, schema: str | None, bandings: list[tuple[int, int]], sample: int, seed: int
) -> tuple[dict[tuple[int, int], CandidateEstimate], tuple[int, int]]:
    """Candidate-pair estimates for the bandings and the index's active one (also returned)."""
    with _open(db, schema=schema) as index:
        banding = next(b for b in index.bandings() if b["is_active"])
        active = (banding["bands"], banding["rows"])
        wanted = list(dict.fromkeys([*bandings, active]))
        found = index.estimate_candidates(wanted, sample=sample, seed=seed)
    return {(e.bands, e.rows): e for e in found}, active


def _estimate_text(estimate: CandidateEstimate) -> str:
    """~estimate (rough 95% range), or the exact count when every document was sampled."""
    if estimate.sample == estimate.documents:
        return f"{estimate.estimate:,.0f} (exact)"
    return f"~{estimate.estimate:,.0f} ({estimate.low:,.0f}-{estimate.high:,.0f})"


@db_app.command()
@user_errors
def upgrade(db: Db = None, schema: Schema = None) -> None:
    """Migrate an index's schema to this simindex's revision (`init` creates new ones)."""
    from simindex.index import upgrade_schema
    from simindex.store import database_url, display_url

    before, after = upgrade_schema(db, schema)
    where = display_url(database_url(db)) + (f" (schema {schema})" if schema else "")
    if before == after:
        err.print(f"{shown(where)} is already at revision {after}")
    else:
        err.print(f"Upgraded {shown(where)} from {before} to {after}")


@db_app.command()
@user_errors
def current(db: Db = None, schema: Schema = None) -> None:
    """Show the database's schema revision, the one this simindex needs, and what to do."""
    from simindex.index import schema_revision

    revision, needed, advice = schema_revision(db, schema)
    out.print(f"database revision: {revision or 'none'}\nsimindex needs:    {needed} ({advice})")


@spark_app.command("ingest")
@functools.partial(user_errors, spark=True)
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
    fmt: InputFormatOption = InputFormat.auto,
    id_field: IdField = "id",
    text_field: TextField = "text",
    encoding: Encoding = "utf-8",
    on_duplicate: Annotated[
        Policy,
        typer.Option(
            help="An id that is already indexed or repeats: fail, or skip it (the first copy stays)."
        ),
    ] = Policy.fail,
    on_empty: Annotated[
        Policy,
        typer.Option(help="A document with no text: skip it (not stored; counted), or fail."),
    ] = Policy.skip,
    on_error: Annotated[
        Policy,
        typer.Option(help="A malformed record: fail, or skip it (counted, the first named)."),
    ] = Policy.fail,
    max_chars: MaxChars = DEFAULT_MAX_CHARS,
    scheme: Annotated[
        Scheme | None,
        typer.Option(help=f"{SCHEME_HELP} Default: --db's, or {DEFAULT_SCHEME} for a new index."),
    ] = None,
) -> None:
    """Add documents to a PostgreSQL index with Spark (creating the index if the database has
    none): signed in the Spark tasks, loaded by COPY from each, moved into the index in one
    transaction. On an error nothing is added."""
    from simindex.spark.ingest import ingest_files
    from simindex.spark.session import job_errors

    if db is None:
        raise ParameterError("give the PostgreSQL index with --db postgresql://user@host/database")
    paths = expand_inputs(files)
    _compile_once()
    with job_errors():
        report = ingest_files(
            paths, db, fmt=fmt.value, id_field=id_field, text_field=text_field, encoding=encoding,
            master=master, max_chars=max_chars, schema=schema, lock_timeout=lock_timeout,
            scheme=scheme.value if scheme else None, on_duplicate=on_duplicate.value,
            on_empty=on_empty.value, on_error=on_error.value,
        )  # fmt: skip
    skipped = [
        f"{count:,} {what}"
        for count, what in (
            (report.skipped_existing, "already indexed or repeated"),
            (report.skipped_empty, "empty (no text after normalization)"),
            (report.skipped_malformed, "malformed"),
        )
        if count
    ]
    err.print(
        f"Added {report.added:,} new documents from {report.partitions:,} Spark tasks in "
        f"{report.seconds:.1f} s ({report.added / max(report.seconds, 1e-9):,.0f} docs/s: "
        f"signed and staged in {report.staging_seconds:.1f} s, moved into the index in "
        f"{report.moving_seconds:.1f} s); the index holds {report.total:,}"
        + (f"; skipped {', '.join(skipped)}" if skipped else "")
    )
    for external_id, problem in report.examples:
        err.print(f"  skipped {shown(problem or f'{external_id!r}: empty')}")
    if report.created:
        with _open(db, schema=schema) as index:
            err.print(f"Created a new index in {shown(index.url)}")
            _describe_index(index)


def _describe_index(index: Index) -> None:
    """What a new index is: how it signs, its banding (and if it completed a half-created one)."""
    from simindex.pipeline import banding as lsh

    if index.completed_half_created:
        err.print(
            f"Completed the half-created index in {shown(index.url)} (it had a schema but no "
            "settings)"
        )
    active = next(b for b in index.bandings() if b["is_active"])
    p = lsh.candidate_probability(index.threshold, active["bands"], active["rows"])
    err.print(
        f"{index.spec.describe()}; text {'kept' if index.keep_text else 'not kept'}\n"
        f"banding {active['bands']} bands x {active['rows']} rows: a pair at similarity "
        f"{index.threshold} becomes a candidate with probability {p:.4f}"
    )


def _print_evaluation(result: Evaluation) -> None:
    """Summary on stderr, the table of similarity bins on stdout."""
    exact, estimate = result.verification("exact"), result.verification("estimate")
    error = result.estimate_error()
    t = f"{result.threshold:g}"
    err.print(
        f"Evaluated {result.sampled:,} of {result.documents:,} documents (seed {result.seed}): "
        f"banding {result.bands} x {result.rows}, threshold {t}\n"
        f"exact pairs >= {result.floor:g}: {result.pair_similarity.size:,} (>= {t}: "
        f"{result.exact_pairs_at_threshold:,}); candidate pairs: {result.candidate_similarity.size:,}\n"
        f"candidate recall at {t}: {_share(result.candidate_recall)} (the S-curve predicts "
        f"{_share(result.predicted_recall)})\n"
        f"verified by exact Jaccard: recall {_share(exact['recall'])}, precision "
        f"{_share(exact['precision'])} ({exact['pairs']:,} pairs)\n"
        f"verified by the estimate alone: recall {_share(estimate['recall'])}, precision "
        f"{_share(estimate['precision'])} ({estimate['pairs']:,} pairs)\n"
        f"estimate - exact over {error['pairs']:,} pairs >= {result.floor:g}: mean "
        f"{_share(error['mean'], '+.4f')}, std {_share(error['std'])} (theory "
        f"{_share(error['theoretical_std'])})"
    )
    table = Table(
        "exact similarity", "pairs", "candidates", "candidate rate", "predicted", "95% interval"
    )
    for b in result.bins:
        interval = "-" if b.interval is None else f"{b.interval[0]:.3f}-{b.interval[1]:.3f}"
        table.add_row(
            f"{b.low:.2f}-{b.high:.2f}",
            f"{b.pairs:,}",
            f"{b.candidates:,}",
            _share(b.rate),
            _share(b.predicted),
            interval,
        )
    out.print(table)


def _share(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _print_matches(matches: list[Match], as_json: bool, titles: dict[str, str] | None) -> None:
    if as_json:
        for m in matches:
            record = {
                "id": m.external_id,
                "similarity": m.similarity,
                "exact_jaccard": m.exact_jaccard,
                "estimated_jaccard": m.estimated_jaccard,
            }
            if titles is not None:
                record["title"] = titles[m.external_id]
            typer.echo(json.dumps(record))
        return
    table = Table("id", "similarity", "exact", "estimate", *(["title"] if titles else []))
    for m in matches:
        exact = "-" if m.exact_jaccard is None else f"{m.exact_jaccard:.3f}"
        table.add_row(
            shown(m.external_id),
            f"{m.similarity:.3f}",
            exact,
            f"{m.estimated_jaccard:.3f}",
            *([titles[m.external_id]] if titles else []),
        )
    out.print(table)


class _ErrorLog:
    """Skipped records and empty documents, one JSON line each. The file is written
    atomically (created only if there is something to list, only if the command succeeds),
    and the bad records are on disk before the documents commit (see saved_after)."""

    def __init__(self, path: Path):
        self.path, self.count, self.empty = path, 0, 0
        self._file = ExitStack()
        self._stream: io.TextIOWrapper | None = None

    def add(self, error: InputError) -> None:
        self._write({"error": str(error)})
        self.count += 1

    def add_empty(self, ids: list[str]) -> None:
        for external_id in ids:
            self._write({"id": external_id, "error": "no text after normalization (not stored)"})
        self.empty += len(ids)

    def _write(self, entry: dict[str, str]) -> None:
        if self._stream is None:
            raw = self._file.enter_context(atomic_output(self.path))
            self._stream = io.TextIOWrapper(raw, encoding="utf-8")
        with self._failing():
            self._stream.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def saved_after(self, documents: Iterable[Any]) -> Iterator[Any]:
        """The documents, then the log flushed to disk: a full disk fails the command
        before the database commits, never after."""
        yield from documents
        if self._stream is not None:
            with self._failing():
                self._stream.flush()
                os.fsync(self._stream.fileno())

    @contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise InputError(f"{self.path}: can't write the error log: {exc.strerror}") from None

    def __enter__(self) -> _ErrorLog:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._stream is not None:
            if exc_info[0] is None:
                self._stream.detach()  # flushes; atomic_output names the file
        self._file.__exit__(*exc_info)
        if exc_info[0] is None and self.count + self.empty:
            listed = [f"{self.count:,} bad record(s)"] if self.count else []
            listed += [f"{self.empty:,} empty document(s)"] if self.empty else []
            err.print(f"Listed {' and '.join(listed)} in {shown(self.path)}")


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int], None]]:
    """A rich progress display on stderr counting documents; yields ``advance(n)``."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (
        SpinnerColumn(),
        TextColumn(f"{label} {{task.completed:,}} documents"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(label, total=None)
        yield lambda n: progress.advance(task, n)


def run() -> None:
    """The ``simindex`` command. Typer builds the options of every subcommand from its
    signature on each run (about 0.1 s for all of them); only the one asked for is needed,
    so the others are left out (a name that is no command keeps them all, for the usage
    error and its suggestions)."""
    process_settings()
    wanted = _command_name(sys.argv[1:])
    named = {_registered_name(c): c for c in app.registered_commands}
    groups = {g.name: g for g in app.registered_groups}
    if wanted in named:
        app.registered_commands, app.registered_groups = [named[wanted]], []
    elif wanted in groups:
        app.registered_commands, app.registered_groups = [], [groups[wanted]]
    app(prog_name="simindex")


def _command_name(arguments: list[str]) -> str | None:
    """The subcommand in a command line: the first word that is not a global option or its
    value."""
    words = iter(arguments)
    for word in words:
        if word in ("--db", "--schema"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _registered_name(command: Any) -> str:
    return command.name or typer.main.get_command_name(command.callback.__name__)


def process_settings() -> None:
    """What the ``simindex`` process sets before any library loads: glibc's malloc, Python's
    collector, and one OpenBLAS thread (benchmarks/bench_startup.py applies them too)."""
    _malloc_settings()
    _collector_settings()
    _sqlite_settings()
    # NumPy's OpenBLAS starts a thread per core as it loads, at up to 0.16 CPU seconds per
    # command (0.09-0.16 for stats, show and export: benchmarks/RESULTS.md, 2026-11-24
    # 13:40-13:50 and 15:10-15:24 UTC); no command calls a BLAS routine.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _malloc_settings() -> None:
    """glibc's malloc for a process that allocates batch after batch. At most two heap arenas
    (the reading and signing thread's, the database writer's): glibc gives each thread that
    allocates an arena of its own (up to eight per core), and freed batches stay resident in
    whichever one held them. And every block of 4 MiB or more mapped on its own: glibc maps
    blocks from 128 KiB, but raises that threshold to the size of each such block freed, so
    later blocks up to 32 MiB come from the heap and stay resident once freed (a fixed
    128 KiB saved a little more memory but tripled the page faults' system time). Both made
    `dedup` (ingest and pairs in one process) grow past `ingest` and `pairs` alone (peak RSS
    per command: benchmarks/bench_scale.py; the threshold: benchmarks/RESULTS.md, 2026-11-24
    08:00-10:05). A threshold set so also fixes the trim threshold at its 128 KiB default:
    each batch's arrays freed at the top of a heap went back to the system, and the next
    batch's faulted their pages in again; up to 16 MiB free at the top now stays for it
    (tests/cli/test_cli_startup.py counts the faults; times: benchmarks/RESULTS.md,
    2026-11-26 15:00-16:35 UTC). A user's MALLOC_ARENA_MAX,
    MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ wins; other C libraries are left
    alone."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return
    if "MALLOC_ARENA_MAX" not in os.environ:
        mallopt(_M_ARENA_MAX, 2)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        mallopt(_M_MMAP_THRESHOLD, 4 * 2**20)
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        mallopt(_M_TRIM_THRESHOLD, 16 * 2**20)


def _collector_settings() -> None:
    """Python's cyclic garbage collector, set for a process that loads a large library once
    and exits. The library's modules (NumPy, SQLAlchemy, numba) create objects that live until
    exit; the collector went through them again and again while they loaded (at the default
    threshold, a collection every 700 new objects), and again at exit: 0.10-0.20 s of a
    command that only reads, 0.26-0.55 s of one that runs kernels (benchmarks/RESULTS.md,
    2026-11-24 13:40-13:50 and 15:10-15:24 UTC). So a collection every 20,000 new objects,
    and the objects still alive at exit frozen (left out of those last collections: the index
    and the output files are closed by then, and the process's memory goes back to the system
    as it ends)."""
    gc.set_threshold(20_000)
    atexit.register(gc.freeze)


def _sqlite_settings() -> None:
    """SQLite's memory statistics off (``sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0)``, set
    between ``sqlite3_shutdown`` and ``sqlite3_initialize``, before the process opens a
    connection). With them on, as SQLite is built by default, every allocation of every
    connection in a process takes one mutex, and `pairs` reads signatures on one connection
    while its writer reads texts on another (benchmarks/bench_sqlite_threads.py: two threads
    grouping on two connections took 1.5 times one connection's time with the statistics on,
    half of it with them off: RESULTS.md, 2026-11-29 15:49 UTC; SQLite's `pairs --full` at 4M,
    paired: median 1.99 s and mean 0.86 s faster, in 2 of 3 pairs, 18:35 UTC). Called first
    in the process: shutting SQLite down under an open connection is undefined. Nothing in simindex reads the
    statistics or sets the soft heap limit that needs them. Linux only, where ctypes passes the variadic argument as C does;
    where SQLite's library cannot be reached or refuses, nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    import _sqlite3
    import ctypes

    try:
        library = ctypes.CDLL(_sqlite3.__file__)
        if library.sqlite3_shutdown() == 0:
            library.sqlite3_config(_SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0))
            library.sqlite3_initialize()
    except (OSError, AttributeError):
        return


def _return_free_memory() -> None:
    """Give the free pages inside glibc's heaps back to the system (``malloc_trim``): a
    finished stage leaves free blocks between live ones, out of reach of the trim at the top
    of a heap, and the next stage of the same process would carry them (`dedup` at 400k on
    SQLite, with it: peak RSS 226/229 -> 216/214 MiB, benchmarks/RESULTS.md, 2026-11-27
    00:20-00:40 UTC). Other C libraries: nothing happens."""
    malloc_trim = _glibc("malloc_trim")
    if malloc_trim is not None:
        malloc_trim(0)


def _glibc(function: str) -> Any:
    """One of glibc's functions, by ctypes (None off Linux or with another C library)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return getattr(ctypes.CDLL("libc.so.6"), function)
    except (OSError, AttributeError):
        return None


_M_ARENA_MAX = -8  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_M_TRIM_THRESHOLD = -1
_SQLITE_CONFIG_MEMSTATUS = 9  # sqlite3.h
