"""Regenerate docs/cli.md from the CLI's own --help (run: python docs/make_cli_reference.py)."""

from pathlib import Path

import typer.main
from typer.testing import CliRunner

from simindex.cli import app

HEADER = """# CLI reference

Generated from `--help` by `python docs/make_cli_reference.py`; a test fails when a command or
option is missing here. Every command takes `--db` (or the `SIMINDEX_DATABASE_URL` environment
variable): a SQLite file path, `sqlite:///path`, or `postgresql://user@host:port/database`;
without it, `./simindex.db`. On PostgreSQL, `--schema NAME` (`SIMINDEX_SCHEMA`) picks the
schema that holds the index (docs/sql.md); commands that write wait at most `--lock-timeout`
seconds for another writer (docs/reliability.md). Data goes to stdout, progress and summaries to stderr; a user
error prints one `Error: ...` line and exits with status 1.
"""


def commands(group, path=()):
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name)


def main() -> None:
    runner = CliRunner()
    sections = [HEADER]
    for path in commands(typer.main.get_command(app)):
        result = runner.invoke(app, [*path, "--help"], terminal_width=100, env={"NO_COLOR": "1"})
        lines = result.output.replace("Usage: root", "Usage: simindex").splitlines()
        help_text = "\n".join(line.rstrip() for line in lines).strip("\n")
        sections.append(f"## `simindex {' '.join(path)}`\n\n```text\n{help_text}\n```\n")
    target = Path(__file__).with_name("cli.md")
    target.write_text("\n".join(sections), encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
