"""The audit trail: a row per run that changed the index, a row per clustering decision.

runs: what each command (or library call, or group of calls named as one run) did: its
parameters, the scheme, banding and threshold it worked under, its keep policy, simindex's
version, when it started and last committed, its counts, and the range of document ids it
indexed (ids only grow, and writers take turns, so a run's documents are one range).
decisions: for each run that built clusters, every clustered document held under another,
with that representative and their exact similarity. Neither has foreign keys: the trail
outlives the documents it names (a deleted or evicted document keeps its decisions).

Views: run_log (runs, newest first in the recipes) and decision_log (decisions by external
id, each side with the run that indexed it), so an analyst asks "which records of this
run were held under documents of that one, and how similar" in one query (docs/sql.md).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

DocumentId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

VIEWS = {
    "run_log": """
CREATE VIEW run_log AS
SELECT r.id AS run, r.command, r.started_at, r.finished_at, r.threshold, r.keep,
       r.banding_id, r.bands, r.rows, r.scheme, r.version,
       r.first_document, r.last_document,
       (SELECT count(*) FROM decisions d WHERE d.run_id = r.id) AS decisions,
       r.counts, r.parameters
FROM runs r
""",
    "decision_log": """
CREATE VIEW decision_log AS
SELECT c.run_id AS run, r.command, r.finished_at AS decided_at, r.keep, r.threshold,
       d.external_id AS id, dr.id AS indexed_by_run, d.ingested_at,
       k.external_id AS representative, kr.id AS representative_indexed_by_run,
       k.ingested_at AS representative_ingested_at,
       c.similarity, c.document_id, c.representative_id
FROM decisions c
JOIN runs r ON r.id = c.run_id
LEFT JOIN documents d ON d.id = c.document_id
LEFT JOIN documents k ON k.id = c.representative_id
LEFT JOIN runs dr ON c.document_id BETWEEN dr.first_document AND dr.last_document
LEFT JOIN runs kr ON c.representative_id BETWEEN kr.first_document AND kr.last_document
""",
}


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, autoincrement=True),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("parameters", Json, nullable=False),
        sa.Column("scheme", sa.Text, nullable=False),
        sa.Column("banding_id", sa.Integer),
        sa.Column("bands", sa.Integer),
        sa.Column("rows", sa.Integer),
        sa.Column("threshold", sa.Float, nullable=False),
        sa.Column("keep", sa.Text),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_document", DocumentId),
        sa.Column("last_document", DocumentId),
        sa.Column("counts", Json, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "decisions",
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("document_id", DocumentId, nullable=False),
        sa.Column("representative_id", DocumentId, nullable=False),
        sa.Column("similarity", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "document_id", name="pk_decisions"),
    )
    for definition in VIEWS.values():
        op.execute(definition)


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW {name}")
    op.drop_table("decisions")
    op.drop_table("runs")
