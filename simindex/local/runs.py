"""The audit trail: every call that changes the index records a run, in the same write
transaction as its change (a run that commits nothing leaves no row); calls grouped under one
name (``Index.run``, as ``dedup --db`` does) record one run between them. A clustering run
also records its decisions: each clustered document held under another, with that
representative and their similarity."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection

from simindex.errors import ParameterError
from simindex.local.context import Context
from simindex.results import Decision, RunRecord


@dataclass
class Run:
    """A run being recorded: its row's id once its first transaction wrote it, and what its
    transactions did so far."""

    command: str
    parameters: dict[str, Any]
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    id: int | None = None
    first_document: int | None = None
    last_document: int | None = None
    keep: str | None = None
    threshold: float | None = None  # None: the index's
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, **counts: int) -> None:
        """Add to the run's counts (the calls of a grouped run add up)."""
        for name, value in counts.items():
            self.counts[name] = self.counts.get(name, 0) + value


@contextmanager
def grouped(ctx: Context, command: str, parameters: dict[str, Any] | None) -> Iterator[None]:
    """Record the changes of the calls made inside as one run named ``command``."""
    if not command.strip():
        raise ParameterError("a run needs a name (the command it stands for), got ''")
    if ctx.run is not None:
        raise ParameterError(f"run {command!r} started inside run {ctx.run.command!r}")
    ctx.run = Run(command, _plain(parameters or {}))
    try:
        yield
    finally:
        ctx.run = None


@contextmanager
def recorded(
    ctx: Context,
    connection: Connection,
    command: str,
    parameters: dict[str, Any],
    *,
    threshold: float | None = None,
) -> Iterator[Run]:
    """Record the caller's write transaction as a run (or as part of the grouped run): on
    the way out, its row is written with the documents the transaction added and the counts
    the caller put in the run (a store that commits in parts writes it in the last part)."""
    run = ctx.run or Run(command, _plain(parameters))
    if threshold is not None:
        run.threshold = threshold
    before = ctx.store.max_document_id(connection)
    had_row = run.id is not None
    try:
        yield run
    except BaseException:
        if not had_row:  # a row written inside goes with the transaction
            run.id = None
        raise
    after = ctx.store.max_document_id(connection)
    if after > before:
        run.first_document = run.first_document or before + 1
        run.last_document = after
    _write(ctx, connection, run)


def record_decisions(
    ctx: Context,
    connection: Connection,
    run: Run,
    documents: np.ndarray,
    representatives: np.ndarray,
    similarity: np.ndarray,
) -> None:
    """The run's decisions: ``documents[i]`` held under ``representatives[i]``."""
    if run.id is None:
        _write(ctx, connection, run)  # the decisions name it
    assert run.id is not None
    ctx.store.insert_decisions(connection, run.id, documents, representatives, similarity)
    run.count(decisions=int(documents.size))


def runs(ctx: Context, limit: int | None) -> list[RunRecord]:
    if limit is not None and limit < 1:
        raise ParameterError(f"limit must be positive, got {limit}")
    with ctx.transaction() as connection:
        return [RunRecord(**row) for row in ctx.store.runs(connection, limit)]


def decisions(ctx: Context, run_id: int) -> Iterator[Decision]:
    with ctx.transaction() as connection:
        for row in ctx.store.decisions(connection, run_id):
            yield Decision(row["external_id"], row["representative"], row["similarity"])


def _write(ctx: Context, connection: Connection, run: Run) -> None:
    banding = next((b for b in ctx.store.bandings(connection) if b["is_active"]), None)
    values = {
        "command": run.command,
        "parameters": run.parameters,
        "scheme": ctx.spec.scheme,
        "banding_id": banding and banding["id"],
        "bands": banding and banding["bands"],
        "rows": banding and banding["rows"],
        "threshold": ctx.threshold if run.threshold is None else run.threshold,
        "keep": run.keep,
        "version": _version(),
        "started_at": run.started_at,
        "finished_at": datetime.now(UTC),
        "first_document": run.first_document,
        "last_document": run.last_document,
        "counts": run.counts,
    }
    if run.id is None:
        run.id = ctx.store.insert_run(connection, values)
    else:
        ctx.store.update_run(connection, run.id, values)


@functools.cache
def _version() -> str:
    from importlib.metadata import version

    return version("simindex")


def _plain(parameters: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` as JSON holds them (paths and times as text)."""
    return json.loads(json.dumps(parameters, default=str))
