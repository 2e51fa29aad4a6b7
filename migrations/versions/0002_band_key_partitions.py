"""Band keys: one PostgreSQL partition per banding; no per-document index; faster loads.

A banding's keys are written once in bulk (its first ingest, or a re-band) and then read by
(band, key). On PostgreSQL each banding gets its own partition of band_keys, so a bulk load
fills a new, unindexed table and builds its primary key afterwards (a sort), instead of
inserting millions of random keys into a live B-tree; dropping a banding drops its table.
A partition's banding_id defaults to its banding, so COPY need not send it.

Also for bulk loads: signatures lose their foreign key (a per-row trigger that tripled the
cost of loading them; simindex deletes a document's signature itself, and `simindex check`
finds strays), and PostgreSQL compresses long texts with lz4 where the server has it.
The (banding_id, document_id) index goes on both backends: a document's keys are computed
from its stored signature and found through the primary key.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# The view as 0001 made it (it reads band_keys, so it is dropped and made again around the
# change; migrations are frozen history and don't import each other).
BUCKET_SIZES = """
CREATE VIEW bucket_sizes AS
SELECT size, count(*) AS buckets
FROM (SELECT count(*) AS size
      FROM band_keys k
      JOIN bandings b ON b.id = k.banding_id AND b.is_active
      GROUP BY k.band, k.key) AS s
GROUP BY size
"""

COLUMNS = """
    banding_id INTEGER NOT NULL,
    band SMALLINT NOT NULL,
    key BIGINT NOT NULL,
    document_id BIGINT NOT NULL"""


def upgrade() -> None:
    op.execute("DROP VIEW bucket_sizes")
    op.drop_index("ix_band_keys_banding_id_document_id", table_name="band_keys")
    with op.batch_alter_table("signatures") as table:  # SQLite rebuilds the table
        table.drop_constraint("fk_signatures_document_id_documents", type_="foreignkey")
    if op.get_bind().dialect.name == "postgresql":
        lz4 = op.get_bind().exec_driver_sql(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        if lz4.scalar():
            op.execute("ALTER TABLE documents ALTER COLUMN text SET COMPRESSION lz4")
        op.execute("ALTER TABLE band_keys RENAME TO band_keys_0001")
        op.execute("ALTER TABLE band_keys_0001 RENAME CONSTRAINT pk_band_keys TO pk_band_keys_0001")
        op.execute(
            f"CREATE TABLE band_keys ({COLUMNS},\n"
            "    CONSTRAINT pk_band_keys PRIMARY KEY (banding_id, band, key, document_id)\n"
            ") PARTITION BY LIST (banding_id)"
        )
        banding_ids = op.get_bind().exec_driver_sql("SELECT id FROM bandings ORDER BY id")
        for (banding_id,) in banding_ids.all():
            op.execute(
                f"CREATE TABLE band_keys_{banding_id} PARTITION OF band_keys "
                f"(banding_id DEFAULT {banding_id}) FOR VALUES IN ({banding_id})"
            )
            op.execute(
                f"INSERT INTO band_keys_{banding_id} SELECT * FROM band_keys_0001 "
                f"WHERE banding_id = {banding_id} ORDER BY band, key, document_id"
            )
        op.execute("DROP TABLE band_keys_0001")
    op.execute(BUCKET_SIZES)


def downgrade() -> None:
    op.execute("DROP VIEW bucket_sizes")
    with op.batch_alter_table("signatures") as table:
        table.create_foreign_key(
            "fk_signatures_document_id_documents",
            "documents",
            ["document_id"],
            ["id"],
            ondelete="CASCADE",
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE documents ALTER COLUMN text SET COMPRESSION DEFAULT")
        op.execute("ALTER TABLE band_keys RENAME TO band_keys_0002")
        op.execute("ALTER TABLE band_keys_0002 RENAME CONSTRAINT pk_band_keys TO pk_band_keys_0002")
        op.execute(
            f"CREATE TABLE band_keys ({COLUMNS},\n"
            "    CONSTRAINT pk_band_keys PRIMARY KEY (banding_id, band, key, document_id)\n"
            ")"
        )
        op.execute("INSERT INTO band_keys SELECT * FROM band_keys_0002")
        op.execute("DROP TABLE band_keys_0002")  # and its partitions
    op.create_index(
        "ix_band_keys_banding_id_document_id", "band_keys", ["banding_id", "document_id"]
    )
    op.execute(BUCKET_SIZES)
