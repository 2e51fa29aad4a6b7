"""Opening and creating an index: its Context, for the facade (Index) and the Spark loader."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from simindex.defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_THRESHOLD
from simindex.errors import NoIndexError, ParameterError, SpecMismatchError
from simindex.local import runs
from simindex.local.context import Context
from simindex.pipeline import banding as lsh
from simindex.spec import SignatureSpec
from simindex.store import StagedLoad, StagedMove, connect, migrate


def create(
    url: str | os.PathLike[str] | None = None,
    spec: SignatureSpec | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    bands: int | None = None,
    rows: int | None = None,
    keep_text: bool = True,
    schema: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    deferred: bool = False,
) -> Context:
    """The Context of a new index (see Index.create)."""
    spec = spec or SignatureSpec()
    if not 0 < threshold <= 1:
        raise ParameterError(f"threshold must be within (0, 1], got {threshold}")
    if (bands is None) != (rows is None):
        raise ParameterError("give both bands and rows, or neither (to tune for the threshold)")
    if bands is None:
        bands, rows = lsh.banding_for(spec.num_perm, threshold)
    lsh.check_banding(bands, rows, spec.num_perm)
    store = connect(url, schema, lock_timeout)
    try:
        state = store.current_state()
        if state == "index":
            raise store.already_an_index()
        from importlib.metadata import version

        settings = {
            **spec.to_dict(),
            # An index of signatures made outside simindex has no text to keep.
            "keep_text": keep_text and spec.signs_text,
            "threshold": threshold,
            "created_by": f"simindex {version('simindex')}",
        }
        context = Context(store, settings, (bands, rows), state == "half-created")
        if not deferred:
            with context.transaction(write=True):
                pass
    except BaseException:
        store.close()
        raise
    return context


def open_index(
    url: str | os.PathLike[str] | None = None,
    *,
    schema: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> Context:
    """The Context of an existing index (see Index.open)."""
    store = connect(url, schema, lock_timeout, must_exist=True)
    try:
        with store.transaction() as connection:
            state = store.index_state(connection)
            if state == "none":
                raise NoIndexError(f"{store.describe()} holds no simindex index")
            if state == "half-created":
                raise NoIndexError(
                    f"{store.describe()} holds a half-created simindex index (a schema "
                    "but no settings and no documents, left by an older simindex)",
                    half_created=True,
                )
            migrate.check_current(connection)
            settings = store.read_settings(connection)
    except BaseException:
        store.close()
        raise
    return Context(store, settings)


def open_or_create(
    url: str | os.PathLike[str] | None = None,
    *,
    schema: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    **create_options: Any,
) -> tuple[Context, bool]:
    """(the Context of the index at ``url``, or of one created with its first
    transaction; whether it is new) (see Index.open_or_create)."""
    store = connect(url, schema, lock_timeout)
    try:
        exists = store.current_state() == "index"
    finally:
        store.close()
    where = {"schema": schema, "lock_timeout": lock_timeout}
    if not exists:
        return create(url, **where, **create_options, deferred=True), True
    context = open_index(url, **where)
    if spec := create_options.get("spec"):
        try:
            context.spec.require_scheme(spec.scheme)
        except SpecMismatchError:
            context.store.close()
            raise
    return context, False


def staged_load(context: Context, name: str) -> StagedLoad:
    """New staging tables ``name``_* for the context's load_bandings() (see
    Index.staged_load)."""
    store = context.store
    staged = store.staged_load(name, context.load_bandings())
    with store.errors(), store.engine.begin() as connection:
        staged.create(connection)
    return staged


@contextmanager
def load_transaction(context: Context, staged: StagedLoad) -> Iterator[StagedMove]:
    """A write transaction of the index in which ``staged`` is moved in (an index not
    created yet is created in it first), recorded as an ``ingest`` run."""
    with (
        context.transaction(write=True) as connection,
        runs.recorded(context, connection, "ingest", {"executor": "spark"}) as run,
    ):
        mover = StagedMove(context.store, connection, staged)
        yield mover
        run.count(added=mover.moved)
