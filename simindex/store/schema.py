"""SQLAlchemy Core tables of an index, as the migrations leave them.

The Alembic migrations in migrations/versions are the truth for the database; these
definitions mirror them so that store.py can build statements. A test checks that the two
agree (tests/db/test_migrations.py).
"""

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Table,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# JSON columns are JSONB on PostgreSQL (indexable, ->> on either).
Json = JSON().with_variant(JSONB(), "postgresql")

# Document ids are BIGINT on PostgreSQL and the rowid (INTEGER PRIMARY KEY) on SQLite.
DocumentId = BigInteger().with_variant(Integer(), "sqlite")

index_settings = Table(
    "index_settings",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("scheme", Text, nullable=False),
    Column("normalization", Text, nullable=False),
    Column("shingle", Text, nullable=False),
    Column("k", Integer, nullable=False),
    Column("num_perm", Integer, nullable=False),
    Column("seed", BigInteger, nullable=False),
    Column("keep_text", Boolean, nullable=False),
    Column("threshold", Float, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("created_by", Text, nullable=False),
    CheckConstraint("id = 1", name="single_row"),
)

documents = Table(
    "documents",
    metadata,
    Column("id", DocumentId, primary_key=True, autoincrement=True),
    Column("external_id", Text, nullable=False, unique=True),
    Column("content_hash", BigInteger, nullable=False, index=True),
    Column("shingle_count", Integer, nullable=False),
    Column("text", Text),
    Column("metadata", Json),
    Column(
        "ingested_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=func.now(),
        index=True,
    ),
    # SQLite: AUTOINCREMENT, so a deleted document's id is never handed out again (the
    # incremental pairs step tells new documents by id).
    sqlite_autoincrement=True,
)

# No foreign key: loading millions of rows through a per-row check costs more than the
# load; Store.delete_documents deletes signatures itself.
signatures = Table(
    "signatures",
    metadata,
    Column("document_id", DocumentId, primary_key=True, autoincrement=False),
    Column("minhashes", LargeBinary, nullable=False),
)

bandings = Table(
    "bandings",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("bands", Integer, nullable=False),
    Column("rows", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("is_active", Boolean, nullable=False),
    Column("pairs_threshold", Float),
    Column("pairs_through", BigInteger),
    Column("clusters_threshold", Float),
    Column("clusters_rule", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("state IN ('building', 'complete')", name="state"),
    Index(
        "uq_bandings_one_active",
        "is_active",
        unique=True,
        sqlite_where=Column("is_active"),
        postgresql_where=Column("is_active"),
    ),
)

# Narrow on purpose (DESIGN: it is the largest table): no surrogate key, no foreign keys, one
# index. The primary key serves GROUP BY band, key and every look-up (a document's own keys
# are computed from its signature). On PostgreSQL each banding is a partition, band_keys_<id>
# (see store.BandKeyWriter).
band_keys = Table(
    "band_keys",
    metadata,
    Column("banding_id", Integer, primary_key=True),
    Column("band", SmallInteger, primary_key=True),
    Column("key", BigInteger, primary_key=True),
    Column("document_id", DocumentId, primary_key=True),
    sqlite_with_rowid=False,
    postgresql_partition_by="LIST (banding_id)",
)

# No foreign keys to documents (pairs and clusters): a per-row check that locks the document
# costs more than writing the row (see migration 0004); Store.delete_documents deletes a
# document's pairs and cluster rows itself.
pairs = Table(
    "pairs",
    metadata,
    Column("banding_id", Integer, ForeignKey("bandings.id", ondelete="CASCADE"), primary_key=True),
    Column("doc_a", DocumentId, primary_key=True),
    Column("doc_b", DocumentId, primary_key=True),
    Column("estimated_jaccard", Float, nullable=False),
    Column("exact_jaccard", Float),
    Column("found_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("doc_a < doc_b", name="ordered"),
    Index("ix_pairs_banding_id_doc_b", "banding_id", "doc_b"),
)

clusters = Table(
    "clusters",
    metadata,
    Column("banding_id", Integer, ForeignKey("bandings.id", ondelete="CASCADE"), primary_key=True),
    Column("document_id", DocumentId, primary_key=True),
    # The document id of the cluster's representative (so it names the cluster).
    Column("cluster_id", DocumentId, nullable=False),
    Index("ix_clusters_banding_id_cluster_id", "banding_id", "cluster_id"),
)

# The audit trail (migration 0005). No foreign keys: it outlives the documents it names.
runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("command", Text, nullable=False),
    Column("parameters", Json, nullable=False),
    Column("scheme", Text, nullable=False),
    Column("banding_id", Integer),
    Column("bands", Integer),
    Column("rows", Integer),
    Column("threshold", Float, nullable=False),
    Column("keep", Text),
    Column("version", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False),
    # The document ids the run indexed (ids only grow and writers take turns: one range).
    Column("first_document", DocumentId),
    Column("last_document", DocumentId),
    Column("counts", Json, nullable=False),
    sqlite_autoincrement=True,
)

decisions = Table(
    "decisions",
    metadata,
    Column("run_id", Integer, primary_key=True),
    Column("document_id", DocumentId, primary_key=True),
    Column("representative_id", DocumentId, nullable=False),
    Column("similarity", Float, nullable=False),
)
