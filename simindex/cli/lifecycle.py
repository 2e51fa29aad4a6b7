"""The index's life: init, reband, activate, drop-banding, and the schema (db upgrade, db
current)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from simindex.cli.app import app, db_app
from simindex.cli.errors import NOTHING_CHANGED, command
from simindex.cli.options import (
    POSITIVE,
    SCHEME_HELP,
    UNIT,
    BandingId,
    Db,
    LockTimeout,
    Schema,
    Scheme,
    Yes,
)
from simindex.cli.prompt import confirm
from simindex.cli.render import describe_index, err, out, shown
from simindex.defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_SCHEME, DEFAULT_THRESHOLD
from simindex.errors import ParameterError
from simindex.policies import Shingle

# What Ctrl-C leaves of a command that deletes band keys after its commit.
DROPS_AFTER_COMMIT = (
    "nothing of this command was committed, unless it was deleting the old band keys after "
    "its commit: `simindex stats` then lists them as retired, `simindex drop-banding ID` "
    "deletes them"
)


@command(app)
def init(
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    threshold: Annotated[
        float,
        typer.Option(
            help="Similarity that counts as a duplicate; the banding is tuned for it.", **UNIT
        ),
    ] = DEFAULT_THRESHOLD,
    bands: Annotated[
        int | None, typer.Option(help="LSH bands (with --rows), instead of tuning.", **POSITIVE)
    ] = None,
    rows: Annotated[
        int | None, typer.Option(help="Rows per band (with --bands).", **POSITIVE)
    ] = None,
    num_perm: Annotated[
        int, typer.Option(help="MinHash functions (signature length).", **POSITIVE)
    ] = 128,
    shingle: Annotated[Shingle, typer.Option(help="Shingle unit: characters or words.")] = "char",
    k: Annotated[
        int, typer.Option("-k", "--k", help="Shingle length in characters or words.", **POSITIVE)
    ] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the MinHash functions.", min=0)] = 1,
    scheme: Annotated[Scheme, typer.Option(help=SCHEME_HELP)] = DEFAULT_SCHEME,  # type: ignore[valid-type]
    keep_text: Annotated[
        bool, typer.Option(help="Store document text (enables exact verification).")
    ] = True,
) -> None:
    """Create an index in an empty database (or complete a half-created one)."""
    from simindex.index import Index
    from simindex.spec import SignatureSpec

    spec = SignatureSpec(shingle=shingle, k=k, num_perm=num_perm, seed=seed, scheme=scheme)
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
        describe_index(index)


@command(app, kernels=True, interrupted=DROPS_AFTER_COMMIT)
def reband(
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
    bands: Annotated[
        int | None, typer.Option(help="Bands of the new banding (with --rows).", **POSITIVE)
    ] = None,
    rows: Annotated[
        int | None, typer.Option(help="Rows per band (with --bands).", **POSITIVE)
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(help="Tune the new banding for this threshold instead.", **UNIT),
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
    from simindex.index import Index

    if threshold is not None and (bands is not None or rows is not None):
        raise ParameterError("give --threshold or --bands and --rows, not both")
    if threshold is None and (bands is None or rows is None):
        raise ParameterError("give --bands and --rows, or --threshold")
    with Index.open(db, schema=schema, lock_timeout=lock_timeout) as index:
        if drop_old:
            question = (
                f"Drop the other bandings, their band keys and pairs, from {shown(index.url)}?"
            )
            confirm(yes, "--drop-old deletes the other bandings for good", lambda: question)
        started = time.perf_counter()
        # The threshold goes to the library, which tunes for it and makes it the index's.
        banding_id = index.reband(
            bands, rows, threshold=threshold, activate=activate, drop_old=drop_old
        )
        built = next(b for b in index.bandings() if b["id"] == banding_id)
        bands, rows = built["bands"], built["rows"]
    then = "it is now active" if activate else f"`simindex activate {banding_id}` activates it"
    err.print(
        f"Built banding {banding_id} ({bands} bands x {rows} rows) in "
        f"{time.perf_counter() - started:.1f} s; {then}"
    )


@command(app)
def activate(
    banding_id: BandingId,
    db: Db = None,
    schema: Schema = None,
    lock_timeout: LockTimeout = DEFAULT_LOCK_TIMEOUT,
) -> None:
    """Make a complete banding (from `reband --no-activate`) the active one, with the pairs
    and clusters of the banding it replaces found anew for it, in one transaction."""
    from simindex.index import Index

    with Index.open(db, schema=schema, lock_timeout=lock_timeout) as index:
        index.activate(banding_id)
        paired = next(b for b in index.bandings() if b["id"] == banding_id)["pairs_threshold"]
    # Pairs come along only where the banding replaced had them: else the views
    # (similar_pairs, neighbors, cluster_sizes) and export answer with nothing.
    unpaired = "; it has no pairs yet: run `simindex pairs` (and `simindex clusters`)"
    err.print(f"Banding {banding_id} is now active" + (unpaired if paired is None else ""))


@command(app, "drop-banding", interrupted=DROPS_AFTER_COMMIT)
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
    from simindex.index import Index

    with Index.open(db, schema=schema, lock_timeout=lock_timeout) as index:
        question = f"Drop banding {banding_id}, its band keys and pairs, from {shown(index.url)}?"
        confirm(yes, "drop-banding deletes a banding for good", lambda: question)
        index.drop_banding(banding_id)
    err.print(f"Dropped banding {banding_id}")


@command(db_app)
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


@command(db_app, interrupted=NOTHING_CHANGED)
def current(db: Db = None, schema: Schema = None) -> None:
    """Show the database's schema revision, the one this simindex needs, and what to do."""
    from simindex.index import schema_revision

    revision, needed, advice = schema_revision(db, schema)
    out.print(f"database revision: {revision or 'none'}\nsimindex needs:    {needed} ({advice})")
