"""Initial schema: settings, documents, signatures, bandings, band keys, pairs, clusters, views.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

DocumentId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# Views for analysts: external ids, plain names, the active banding only.
VIEWS = {
    "similar_pairs": """
CREATE VIEW similar_pairs AS
SELECT da.external_id AS id_a,
       db.external_id AS id_b,
       COALESCE(p.exact_jaccard, p.estimated_jaccard) AS similarity,
       p.exact_jaccard,
       p.estimated_jaccard,
       p.doc_a,
       p.doc_b,
       p.banding_id,
       p.found_at
FROM pairs p
JOIN bandings b ON b.id = p.banding_id AND b.is_active
JOIN documents da ON da.id = p.doc_a
JOIN documents db ON db.id = p.doc_b
""",
    "document_clusters": """
CREATE VIEW document_clusters AS
SELECT d.external_id,
       r.external_id AS cluster,
       CASE WHEN c.document_id = c.cluster_id THEN 1 ELSE 0 END AS is_representative,
       c.document_id,
       c.cluster_id,
       c.banding_id
FROM clusters c
JOIN bandings b ON b.id = c.banding_id AND b.is_active
JOIN documents d ON d.id = c.document_id
JOIN documents r ON r.id = c.cluster_id
""",
    "cluster_sizes": """
CREATE VIEW cluster_sizes AS
SELECT r.external_id AS cluster, c.cluster_id, count(*) AS size
FROM clusters c
JOIN bandings b ON b.id = c.banding_id AND b.is_active
JOIN documents r ON r.id = c.cluster_id
GROUP BY r.external_id, c.cluster_id
""",
    "bucket_sizes": """
CREATE VIEW bucket_sizes AS
SELECT size, count(*) AS buckets
FROM (SELECT count(*) AS size
      FROM band_keys k
      JOIN bandings b ON b.id = k.banding_id AND b.is_active
      GROUP BY k.band, k.key) AS s
GROUP BY size
""",
}


def upgrade() -> None:
    op.create_table(
        "index_settings",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("scheme", sa.Text(), nullable=False),
        sa.Column("normalization", sa.Text(), nullable=False),
        sa.Column("shingle", sa.Text(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("num_perm", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("keep_text", sa.Boolean(), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_index_settings_single_row"),
        sa.PrimaryKeyConstraint("id", name="pk_index_settings"),
    )
    op.create_table(
        "documents",
        sa.Column("id", DocumentId, primary_key=True, autoincrement=True),
        sa.Column("external_id", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.BigInteger(), nullable=False),
        sa.Column("shingle_count", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text()),
        sa.Column("metadata", sa.JSON().with_variant(postgresql.JSONB(), "postgresql")),
        sa.Column(
            "ingested_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_documents"),
        sa.UniqueConstraint("external_id", name="uq_documents_external_id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_documents_content_hash", "documents", ["content_hash"])
    op.create_index("ix_documents_ingested_at", "documents", ["ingested_at"])
    op.create_table(
        "signatures",
        sa.Column("document_id", DocumentId, autoincrement=False),
        sa.Column("minhashes", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            ondelete="CASCADE",
            name="fk_signatures_document_id_documents",
        ),
        sa.PrimaryKeyConstraint("document_id", name="pk_signatures"),
    )
    op.create_table(
        "bandings",
        sa.Column("id", sa.Integer(), autoincrement=True),
        sa.Column("bands", sa.Integer(), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("pairs_threshold", sa.Float()),
        sa.Column("pairs_through", sa.BigInteger()),
        sa.Column("clusters_threshold", sa.Float()),
        sa.Column("clusters_rule", sa.Text()),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("state IN ('building', 'complete')", name="ck_bandings_state"),
        sa.PrimaryKeyConstraint("id", name="pk_bandings"),
    )
    op.create_index(
        "uq_bandings_one_active",
        "bandings",
        ["is_active"],
        unique=True,
        sqlite_where=sa.text("is_active"),
        postgresql_where=sa.text("is_active"),
    )
    op.create_table(
        "band_keys",
        sa.Column("banding_id", sa.Integer(), nullable=False),
        sa.Column("band", sa.SmallInteger(), nullable=False),
        sa.Column("key", sa.BigInteger(), nullable=False),
        sa.Column("document_id", DocumentId, nullable=False),
        sa.PrimaryKeyConstraint("banding_id", "band", "key", "document_id", name="pk_band_keys"),
        sqlite_with_rowid=False,
    )
    op.create_index(
        "ix_band_keys_banding_id_document_id", "band_keys", ["banding_id", "document_id"]
    )
    op.create_table(
        "pairs",
        sa.Column("banding_id", sa.Integer(), nullable=False),
        sa.Column("doc_a", DocumentId, nullable=False),
        sa.Column("doc_b", DocumentId, nullable=False),
        sa.Column("estimated_jaccard", sa.Float(), nullable=False),
        sa.Column("exact_jaccard", sa.Float()),
        sa.Column(
            "found_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("doc_a < doc_b", name="ck_pairs_ordered"),
        sa.ForeignKeyConstraint(
            ["banding_id"], ["bandings.id"], ondelete="CASCADE", name="fk_pairs_banding_id_bandings"
        ),
        sa.ForeignKeyConstraint(
            ["doc_a"], ["documents.id"], ondelete="CASCADE", name="fk_pairs_doc_a_documents"
        ),
        sa.ForeignKeyConstraint(
            ["doc_b"], ["documents.id"], ondelete="CASCADE", name="fk_pairs_doc_b_documents"
        ),
        sa.PrimaryKeyConstraint("banding_id", "doc_a", "doc_b", name="pk_pairs"),
    )
    op.create_index("ix_pairs_banding_id_doc_b", "pairs", ["banding_id", "doc_b"])
    op.create_table(
        "clusters",
        sa.Column("banding_id", sa.Integer(), nullable=False),
        sa.Column("document_id", DocumentId, nullable=False),
        sa.Column("cluster_id", DocumentId, nullable=False),
        sa.ForeignKeyConstraint(
            ["banding_id"],
            ["bandings.id"],
            ondelete="CASCADE",
            name="fk_clusters_banding_id_bandings",
        ),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["documents.id"],
            ondelete="CASCADE",
            name="fk_clusters_document_id_documents",
        ),
        sa.PrimaryKeyConstraint("banding_id", "document_id", name="pk_clusters"),
    )
    op.create_index("ix_clusters_banding_id_cluster_id", "clusters", ["banding_id", "cluster_id"])
    for view in VIEWS.values():
        op.execute(view)


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW {name}")
    for table in (
        "clusters",
        "pairs",
        "band_keys",
        "bandings",
        "signatures",
        "documents",
        "index_settings",
    ):
        op.drop_table(table)
