"""The audit trail: the runs that changed an index, and a run's clustering decisions."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer

from simindex.cli.app import app
from simindex.cli.errors import NOTHING_CHANGED, command
from simindex.cli.options import POSITIVE, Db, Json, Schema
from simindex.cli.render import decisions_table, runs_table


@command(app, interrupted=NOTHING_CHANGED)
def runs(
    db: Db = None,
    schema: Schema = None,
    limit: Annotated[
        int, typer.Option(help="At most this many runs (or decisions), newest first.", **POSITIVE)
    ] = 20,
    decisions: Annotated[
        int | None,
        typer.Option(
            "--decisions",
            metavar="RUN",
            help="List the decisions of run RUN (a clusters or dedup run): each document held "
            "under another, with that representative and their similarity.",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """The runs that changed the index (command, parameters, when, counts), newest first; or
    with --decisions, what one run decided. SQL readers have the same in the views run_log and
    decision_log (docs/sql.md)."""
    from itertools import islice

    from simindex.index import Index

    with Index.open(db, schema=schema) as index:
        if decisions is None:
            found = index.runs(limit)
        else:
            found = list(islice(index.decisions(decisions), limit))
    if as_json:
        for item in found:
            typer.echo(json.dumps(dataclasses.asdict(item), default=str))
    elif decisions is None:
        runs_table(found)
    else:
        decisions_table(decisions, found, limit)
