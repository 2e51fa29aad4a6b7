"""The neighbors view: every stored pair of the active banding once in each direction.

similar_pairs holds a pair once (id_a < id_b by internal id), so "everything similar to X"
needs ``CASE`` and ``OR``. neighbors lists (X, Y) and (Y, X), so ``WHERE id = 'X'`` is
enough, and each direction is found through an index (pairs' primary key for doc_a,
ix_pairs_banding_id_doc_b for doc_b).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

NEIGHBORS = """
CREATE VIEW neighbors AS
SELECT id_a AS id, id_b AS other_id, similarity, exact_jaccard, estimated_jaccard,
       doc_a AS document_id, doc_b AS other_document_id, banding_id, found_at
FROM similar_pairs
UNION ALL
SELECT id_b, id_a, similarity, exact_jaccard, estimated_jaccard,
       doc_b, doc_a, banding_id, found_at
FROM similar_pairs
"""


def upgrade() -> None:
    op.execute(NEIGHBORS)


def downgrade() -> None:
    op.execute("DROP VIEW neighbors")
