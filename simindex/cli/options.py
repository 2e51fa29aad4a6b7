"""The options that several commands share, as Typer ``Annotated`` types: one declaration
each, with its help, its range and its envvar."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from simindex.defaults import DEFAULT_SCHEME, SCHEMES
from simindex.policies import ClusterMode, InputFormat, KeepOrder, KeepRule
from simindex.policies import EncodingErrors as EncodingErrorsMode

DB_HELP = (
    "Database: a SQLite file path, sqlite:///path or postgresql://user@host/db. "
    "Default: $SIMINDEX_DATABASE_URL, else ./simindex.db"
)
SCHEMA_HELP = (
    "PostgreSQL schema holding the index (created with it), so several indexes share a "
    "database. Default: $SIMINDEX_SCHEMA, else the database's search_path (usually public)."
)
SCHEME_HELP = (
    "Signature scheme (docs/spec.md): simindex-v2 hashes each shingle once into num_perm "
    "bins; simindex-v1 hashes it num_perm times."
)
Scheme = Literal[SCHEMES]  # type: ignore[valid-type]
# The ranges Typer checks: a similarity or a probability, and a count of at least one.
UNIT = {"min": 0.0, "max": 1.0}
POSITIVE = {"min": 1}


def _inherit(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """A global option given before the command (``simindex --db X stats``, like ``git -C``)
    is the default of the same option after it; the one after the command wins."""
    return ctx.find_root().params.get(param.name) if value is None else value


Db = Annotated[
    str | None,
    typer.Option("--db", help=DB_HELP, callback=_inherit, show_default=False),
]
Schema = Annotated[
    str | None,
    typer.Option("--schema", help=SCHEMA_HELP, callback=_inherit, show_default=False),
]
LockTimeout = Annotated[
    float,
    typer.Option(
        "--lock-timeout",
        envvar="SIMINDEX_LOCK_TIMEOUT",
        min=0.0,
        help="Seconds to wait for another writer of the index before giving up.",
    ),
]
Threshold = Annotated[
    float | None,
    typer.Option(
        help="Similarity threshold in [0, 1]; default: the index's (set at init).",
        show_default=False,
        **UNIT,
    ),
]
DuplicateThreshold = Annotated[
    float, typer.Option(help="Similarity that makes a duplicate.", **UNIT)
]
Sample = Annotated[
    int,
    typer.Option(
        help="Documents sampled (all when the index holds fewer); the exact join's cost grows "
        "with the square of it.",
        min=2,
    ),
]
Floor = Annotated[
    float,
    typer.Option(help="Lowest exact similarity computed (at most the index threshold).", **UNIT),
]
Seed = Annotated[int, typer.Option(help="Seed of the random sample.", min=0)]

InputFormatOption = Annotated[
    InputFormat, typer.Option("--format", help="Input format; auto: by file name.")
]
IdField = Annotated[str, typer.Option(help="Field (JSON, Parquet) or column (CSV) holding the id.")]
TextField = Annotated[str, typer.Option(help="Field or column holding the text.")]
Encoding = Annotated[str, typer.Option(help="Text encoding of the input files.")]
EncodingErrors = Annotated[
    EncodingErrorsMode,
    typer.Option(
        help="A record with bytes that are not in --encoding: strict (a bad record, see "
        "--on-error), or replace them with U+FFFD (the records touched are counted)."
    ),
]
Delimiter = Annotated[
    str | None,
    typer.Option(
        help="CSV delimiter (e.g. ';' or tab). Default: a comma if the header has one, else "
        "the first of ; tab | in it.",
        show_default=False,
    ),
]
NoHeader = Annotated[
    bool,
    typer.Option(
        "--no-header", help="CSV files have no header: take --id-column and --text-column."
    ),
]
IdColumn = Annotated[
    int, typer.Option(help="With --no-header: the id's column, counted from 0.", min=0)
]
TextColumn = Annotated[
    int, typer.Option(help="With --no-header: the text's column, counted from 0.", min=0)
]
MaxChars = Annotated[
    int,
    typer.Option(
        help=(
            "Longest document accepted, in characters: ingesting one takes memory in "
            "proportion, up to about 13 bytes a character at 10 million."
        ),
        **POSITIVE,
    ),
]
ErrorLogPath = Annotated[
    Path | None,
    typer.Option(
        help="Where to list skipped records and empty documents (JSON lines); none is "
        "written unless given.",
        show_default=False,
    ),
]
Keep = Annotated[
    KeepRule,
    typer.Option(
        "--keep",
        "--rule",
        help="Which document of a cluster to keep (represent it): first or last ingested (in "
        "input order), most or fewest distinct shingles (ties to the smaller id).",
    ),
]
KeepBy = Annotated[
    str | None,
    typer.Option(
        help="Keep instead the document with the best value of this metadata field (a score, "
        "a rank, a date); documents lacking it come last, ties to the smaller id.",
        show_default=False,
    ),
]
KeepOrderOption = Annotated[
    KeepOrder, typer.Option(help="With --keep-by: keep the largest value, or the smallest.")
]
Mode = Annotated[
    ClusterMode,
    typer.Option(
        help="star: every document is within the threshold of the one kept in its place; "
        "components: connected components (chains of pairs, members can be far apart)."
    ),
]
NewScheme = Annotated[
    Scheme | None,  # type: ignore[valid-type]
    typer.Option(
        help=f"{SCHEME_HELP} Default: --db's, or {DEFAULT_SCHEME} for a new index.",
        show_default=False,
    ),
]
SparkMaster = Annotated[
    str | None,
    typer.Option(
        help="Spark master URL (local[4], spark://host:7077, yarn ...). Default: the "
        "active session's, else local[*].",
        show_default=False,
    ),
]
Show = Annotated[
    bool,
    typer.Option(
        "--show", help="Add each document's title (metadata 'title', else the start of its text)."
    ),
]
Json = Annotated[bool, typer.Option("--json", help="JSON instead of tables.")]
Yes = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (for scripts).")
]
BandingId = Annotated[
    int, typer.Argument(help="The banding's id (`simindex stats` lists them).", min=1)
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
]
