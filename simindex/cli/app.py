"""The Typer applications (``simindex``, ``simindex db``, ``simindex spark``) and the global
options that go before a command."""

from __future__ import annotations

from typing import Annotated

import typer

from simindex.cli.options import DB_HELP, SCHEMA_HELP

app = typer.Typer(
    help="A persistent near-duplicate index: MinHash LSH in SQLite or PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
    # Plain help: Typer's rich help labels every flag (--json, --help) "<bool>" as if it took
    # a value.
    rich_markup_mode=None,
)
db_app = typer.Typer(
    help="The database schema: upgrade it, show its revision.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(db_app, name="db")
spark_app = typer.Typer(
    help="The same pipeline on Apache Spark, for corpora past one machine (needs the spark "
    "extra and Java 17).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(spark_app, name="spark")


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"simindex {version('simindex')}")
        raise typer.Exit()


@app.callback()
def main(
    db: Annotated[
        str | None,
        typer.Option("--db", envvar="SIMINDEX_DATABASE_URL", help=DB_HELP, show_default=False),
    ] = None,
    schema: Annotated[
        str | None,
        typer.Option("--schema", envvar="SIMINDEX_SCHEMA", help=SCHEMA_HELP, show_default=False),
    ] = None,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """A persistent near-duplicate index: MinHash LSH in SQLite or PostgreSQL.

    Global options go before the command and apply to it: `simindex --db news.db stats`."""
