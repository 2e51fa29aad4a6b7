"""Pairs and cluster rows lose their foreign keys to documents.

Each was a per-row trigger on every pair and cluster row written: on PostgreSQL a look-up of
the document that also locks its row (FOR KEY SHARE), which dirties and WAL-logs a
documents page per check. At 400k documents on PostgreSQL, bench_scale's `clusters` step
(which writes cluster rows and nothing else changed) took 2.9 s and 2.6 s with them,
1.5-1.8 s without (benchmarks/RESULTS.md, 2026-11-24 11:00-12:35). Pairs and clusters are
written only from band keys of stored documents, in the transaction that reads them;
simindex deletes a document's pairs and cluster rows itself (Store.delete_documents), as it
does its signature (0002), and `simindex check` counts any strays. The foreign keys to
bandings stay: a banding's rows go with it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from collections.abc import Iterator
from contextlib import contextmanager

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Per table, (constraint, column) of each foreign key to documents.id.
DOCUMENT_KEYS = {
    "pairs": [("fk_pairs_doc_a_documents", "doc_a"), ("fk_pairs_doc_b_documents", "doc_b")],
    "clusters": [("fk_clusters_document_id_documents", "document_id")],
}


def upgrade() -> None:
    with _views_left_alone():
        for table_name, keys in DOCUMENT_KEYS.items():
            with op.batch_alter_table(table_name) as table:  # SQLite rebuilds the table
                for constraint, _ in keys:
                    table.drop_constraint(constraint, type_="foreignkey")


def downgrade() -> None:
    with _views_left_alone():
        for table_name, keys in DOCUMENT_KEYS.items():
            with op.batch_alter_table(table_name) as table:
                for constraint, column in keys:
                    table.create_foreign_key(
                        constraint, "documents", [column], ["id"], ondelete="CASCADE"
                    )


@contextmanager
def _views_left_alone() -> Iterator[None]:
    """SQLite rebuilds a table as a new one renamed to the old name, and a rename checks every
    view, which names the old table, gone by then; the legacy rename checks none (the views
    read the new table by its name afterwards)."""
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute("PRAGMA legacy_alter_table = ON")
    try:
        yield
    finally:
        if sqlite:
            op.execute("PRAGMA legacy_alter_table = OFF")
