"""An open index as the executor sees it: its store, spec and options, and its transactions,
the first of which creates the index when its creation was deferred."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from simindex.errors import SimindexError
from simindex.spec import SignatureSpec
from simindex.store import Store, migrate

if TYPE_CHECKING:
    from simindex.local.runs import Run


class Context:
    """The store and settings of one index. ``first_banding`` (bands, rows): the index is
    not created yet; the first transaction creates it (schema, settings and that banding),
    so that if the transaction fails no index is left (see Index.create)."""

    def __init__(
        self,
        store: Store,
        settings: dict[str, Any],
        first_banding: tuple[int, int] | None = None,
        half_created: bool = False,
    ):
        self.store = store
        self._first_banding = first_banding
        self.half_created = half_created
        # The active banding as a point query last found it; each lookup checks it still is.
        self.active: dict[str, Any] | None = None
        # The run that the index's changes are recorded as, while calls are grouped as one.
        self.run: Run | None = None
        self.use_settings(settings)

    def use_settings(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.spec = SignatureSpec(
            shingle=settings["shingle"],
            k=settings["k"],
            num_perm=settings["num_perm"],
            seed=settings["seed"],
            normalization=settings["normalization"],
            scheme=settings["scheme"],
        )
        self.keep_text = bool(settings["keep_text"])
        self.threshold = float(settings["threshold"])

    @property
    def creating(self) -> bool:
        """Whether the next transaction creates the index."""
        return self._first_banding is not None

    @property
    def creates_tables(self) -> bool:
        """Whether the next transaction creates the index's tables (not when it completes a
        half-created index, whose tables an earlier one made)."""
        return self.creating and not self.half_created

    def load_bandings(self) -> dict[int, tuple[int, int]]:
        """(bands, rows) of the bandings a load fills, by banding id: the complete ones, or
        the first banding of an index not created yet under 0."""
        if self._first_banding is not None:
            return {0: self._first_banding}
        with self.transaction() as connection:
            bandings = self.store.bandings(connection)
        return {b["id"]: (b["bands"], b["rows"]) for b in bandings if b["state"] == "complete"}

    @contextmanager
    def transaction(self, write: bool = False, load: bool = False) -> Iterator[Connection]:
        """One transaction (``load``: see Store.write); an index not created yet is created
        in it first, and a database that the transaction made is removed if it fails."""
        creating = self._first_banding is not None
        with (
            self.store.creating() if creating else nullcontext(),
            self.store.transaction(write or creating, load) as connection,
        ):
            if creating:
                self._create(connection)
            yield connection
        self._first_banding = None

    @contextmanager
    def statement(self) -> Iterator[Connection]:
        """A connection for statements that are each consistent on their own
        (Store.statement); an index not created yet is created in a transaction instead."""
        if self.creating:
            with self.transaction() as connection:
                yield connection
            return
        with self.store.errors(), self.store.statement() as connection:
            yield connection

    @contextmanager
    def reader(self, connection: Connection) -> Iterator[Connection]:
        """A second connection, to read on while ``connection`` (a writer's) works: it sees
        what the writer does as long as the writer changes no document and no signature
        (writers take turns). An index created in ``connection``'s transaction exists for
        it alone: then it is the reader too."""
        if self.creating:
            yield connection
            return
        with self.store.read() as reader:
            yield reader

    def active_banding(self, connection: Connection) -> dict[str, Any]:
        for banding in self.store.bandings(connection):
            if banding["is_active"]:
                return banding
        raise SimindexError("the index has no active banding; run `simindex reband` to build one")

    def _create(self, connection: Connection) -> None:
        """The schema, settings and first banding, in the caller's transaction (which holds
        the writer lock)."""
        assert self._first_banding is not None
        store = self.store
        if store.index_state(connection) == "index":  # made meanwhile by another
            raise store.already_an_index()
        migrate.upgrade(connection)
        store.write_settings(connection, self.settings)
        banding_id = store.create_banding(connection, *self._first_banding)
        store.complete_banding(connection, banding_id)
        store.activate_banding(connection, banding_id)
        self.use_settings(store.read_settings(connection))
