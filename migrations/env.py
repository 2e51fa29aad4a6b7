"""Alembic environment: runs on the connection simindex hands over (see simindex/migrate.py),
or on ``sqlalchemy.url`` when the alembic command line is used directly."""

from alembic import context
from sqlalchemy import engine_from_config, pool

config = context.config


def run(connection) -> None:
    # An index in a PostgreSQL schema of its own (simindex's --schema: the connection's
    # search_path is that schema, see store._configure_connections) is made there, with its
    # version table.
    schema = connection.info.get("simindex_schema")
    if schema is not None:
        connection.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    context.configure(
        connection=connection,
        render_as_batch=connection.dialect.name == "sqlite",
        version_table_schema=schema,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}),
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        run(conn)
