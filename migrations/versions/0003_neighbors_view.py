"""SQL for any document: the neighbors view, and on PostgreSQL a document's band keys.

similar_pairs holds a pair once (doc_a < doc_b), so "everything similar to X" needs ``CASE``
and ``OR``. neighbors lists (X, Y) and (Y, X), so ``WHERE id = 'X'`` is enough; each half
names the active banding by a scalar subquery, so both directions are index look-ups
(pairs' primary key for doc_a, ix_pairs_banding_id_doc_b for doc_b).

A document's band keys are not stored by document (band_keys has no per-document index; see
0002): simindex computes them from the signature. On PostgreSQL, simindex_band_keys does
the same in SQL (signature scheme v1, docs/spec.md: splitmix64 over the band's values, in
64-bit arithmetic done on numeric), so the candidates of any document are a few primary-key
look-ups (docs/sql.md). SQLite has no such function: its recipe scans the banding's keys.

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
SELECT d.external_id AS id, o.external_id AS other_id,
       COALESCE(p.exact_jaccard, p.estimated_jaccard) AS similarity,
       p.exact_jaccard, p.estimated_jaccard,
       p.doc_a AS document_id, p.doc_b AS other_document_id, p.banding_id, p.found_at
FROM pairs p
JOIN documents d ON d.id = p.doc_a
JOIN documents o ON o.id = p.doc_b
WHERE p.banding_id = (SELECT id FROM bandings WHERE is_active)
UNION ALL
SELECT d.external_id, o.external_id,
       COALESCE(p.exact_jaccard, p.estimated_jaccard),
       p.exact_jaccard, p.estimated_jaccard,
       p.doc_b, p.doc_a, p.banding_id, p.found_at
FROM pairs p
JOIN documents d ON d.id = p.doc_b
JOIN documents o ON o.id = p.doc_a
WHERE p.banding_id = (SELECT id FROM bandings WHERE is_active)
"""

# splitmix64's finalizer on a 64-bit pattern held in a bigint: >> on bigint is arithmetic,
# so the mask makes it logical; the products wrap modulo 2**64 in numeric.
MIX64 = """
CREATE FUNCTION simindex_mix64(x bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  two64 CONSTANT numeric := 18446744073709551616;
  product numeric;
BEGIN
  x := x # ((x >> 30) & 17179869183);  -- x ^ (x >>> 30), a logical shift
  product := (CASE WHEN x < 0 THEN x + two64 ELSE x END) * 13787848793156543929 % two64;
  x := (CASE WHEN product >= 9223372036854775808 THEN product - two64 ELSE product END);
  x := x # ((x >> 27) & 137438953471);
  product := (CASE WHEN x < 0 THEN x + two64 ELSE x END) * 10723151780598845931 % two64;
  x := (CASE WHEN product >= 9223372036854775808 THEN product - two64 ELSE product END);
  RETURN x # ((x >> 31) & 8589934591);
END
$$;
"""

# (band, key) of one signature, as simindex.pipeline.banding.band_keys computes them (4 is
# hashing.TAG_BAND_KEY). ROWS tells the planner to expect few rows (a bad guess there turns
# the look-ups into a scan); the search_path of the index's schema (--schema) finds
# simindex_mix64 whatever the caller's search_path.
BAND_KEYS = """
CREATE FUNCTION simindex_band_keys(minhashes bytea, bands integer, rows integer)
RETURNS TABLE (band integer, key bigint)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE ROWS 20
SET search_path FROM CURRENT AS $$
DECLARE
  h bigint;
  v bigint;
BEGIN
  FOR j IN 0 .. bands - 1 LOOP
    h := simindex_mix64((4::bigint << 32) | (rows + 1));
    h := simindex_mix64(h # j);
    FOR q IN j * rows .. (j + 1) * rows - 1 LOOP
      v := get_byte(minhashes, 4 * q)::bigint
           | (get_byte(minhashes, 4 * q + 1)::bigint << 8)
           | (get_byte(minhashes, 4 * q + 2)::bigint << 16)
           | (get_byte(minhashes, 4 * q + 3)::bigint << 24);
      h := simindex_mix64(h # v);
    END LOOP;
    band := j;
    key := h & 9223372036854775807;
    RETURN NEXT;
  END LOOP;
END
$$;
"""


def upgrade() -> None:
    op.execute(NEIGHBORS)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(MIX64)
        op.execute(BAND_KEYS)


def downgrade() -> None:
    op.execute("DROP VIEW neighbors")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION simindex_band_keys(bytea, integer, integer)")
        op.execute("DROP FUNCTION simindex_mix64(bigint)")
