"""PostgreSQL specifics: connection errors are one clear line, and the password never shows."""

import pytest

from simindex import Index
from simindex.errors import DatabaseError


def test_a_closed_port_is_a_clear_error_without_the_password():
    with pytest.raises(DatabaseError) as info:
        Index.open("postgresql://someone:s3cret@127.0.0.1:1/nowhere")
    message = str(info.value)
    assert "127.0.0.1:1" in message and "failed" in message
    assert "s3cret" not in message


def test_band_keys_use_the_index_for_a_point_lookup(pg_url, news):
    import sqlalchemy as sa

    with Index.create(pg_url) as index:
        index.add(news)
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as connection:
        connection.exec_driver_sql("ANALYZE band_keys")
        plan = "\n".join(
            row[0]
            for row in connection.exec_driver_sql(
                "EXPLAIN SELECT document_id FROM band_keys WHERE banding_id = 1 AND band = 3 AND key = 42"
            )
        )
    engine.dispose()
    assert "pk_band_keys" in plan
