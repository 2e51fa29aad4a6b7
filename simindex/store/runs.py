"""The SQL of the audit trail: the runs that changed an index and their clustering decisions."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection, select

from simindex.store.schema import decisions, documents, runs

_DECISION_ROWS = 100_000  # rows sent to the database at once


class RunsSQL:
    """Runs and decisions (a part of Store)."""

    def insert_run(self, connection: Connection, values: dict[str, Any]) -> int:
        return int(
            connection.execute(runs.insert().values(**self._times(values))).inserted_primary_key[0]
        )

    def update_run(self, connection: Connection, run_id: int, values: dict[str, Any]) -> None:
        connection.execute(runs.update().where(runs.c.id == run_id).values(**self._times(values)))

    def runs(self, connection: Connection, limit: int | None) -> list[dict[str, Any]]:
        """The latest ``limit`` runs (all with None), newest first, with how many decisions each."""
        rows = connection.execute(select(runs).order_by(runs.c.id.desc()).limit(limit)).mappings()
        found = [dict(row) for row in rows]
        for run in found:
            for moment in ("started_at", "finished_at"):
                run[moment] = _aware(run[moment])
        return found

    def insert_decisions(
        self,
        connection: Connection,
        run_id: int,
        document_ids: np.ndarray,
        representative_ids: np.ndarray,
        similarities: np.ndarray,
    ) -> None:
        for start in range(0, document_ids.size, _DECISION_ROWS):
            window = slice(start, start + _DECISION_ROWS)
            rows = zip(
                [run_id] * document_ids[window].size,
                document_ids[window].tolist(),
                representative_ids[window].tolist(),
                similarities[window].tolist(),
                strict=True,
            )
            self.bulk_insert(  # type: ignore[attr-defined]
                connection,
                "decisions",
                ["run_id", "document_id", "representative_id", "similarity"],
                list(rows),
            )

    def decisions(self, connection: Connection, run_id: int) -> Iterator[dict[str, Any]]:
        """The run's decisions by external id (None for a document since removed), in
        document order."""
        member = documents.alias("member")
        representative = documents.alias("representative")
        query = (
            select(
                member.c.external_id,
                representative.c.external_id.label("representative"),
                decisions.c.similarity,
            )
            .select_from(decisions)
            .outerjoin(member, member.c.id == decisions.c.document_id)
            .outerjoin(representative, representative.c.id == decisions.c.representative_id)
            .where(decisions.c.run_id == run_id)
            .order_by(decisions.c.document_id)
        )
        streamed = {"stream_results": True, "yield_per": 10_000}
        for row in connection.execute(query, execution_options=streamed).mappings():
            yield dict(row)

    def _times(self, values: dict[str, Any]) -> dict[str, Any]:
        return {
            name: self.stored_time(value) if isinstance(value, datetime) else value  # type: ignore[attr-defined]
            for name, value in values.items()
        }


def _aware(moment: datetime) -> datetime:
    """A stored time as an aware UTC datetime (SQLite stores naive UTC text)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
