"""Alembic environment: runs on the connection simindex hands over (see simindex/migrate.py),
or on ``sqlalchemy.url`` when the alembic command line is used directly."""

from alembic import context
from sqlalchemy import engine_from_config, pool

config = context.config


def run(connection) -> None:
    context.configure(
        connection=connection,
        render_as_batch=connection.dialect.name == "sqlite",
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
