"""Regenerate docs/cli.md from the CLI's own --help: `python docs/make_cli_reference.py`.

`--check` writes nothing and exits 1 when docs/cli.md differs from what the CLI says now (the
docs build runs it, and tests/docs/test_doc_outputs.py does the same).
"""

import sys
from pathlib import Path

import typer.main
from typer.testing import CliRunner

from simindex.cli import app

HEADER = """# CLI reference

Generated from `--help` by `python docs/make_cli_reference.py`; a test fails when this page
differs from what the commands say. Every command takes `--db` (or the `SIMINDEX_DATABASE_URL`
environment variable): a SQLite file path, `sqlite:///path`, or
`postgresql://user@host:port/database`; without it, `./simindex.db`. On PostgreSQL,
`--schema NAME` (`SIMINDEX_SCHEMA`) picks the schema that holds the index
([SQL guide](sql.md)); commands that write wait at most `--lock-timeout` seconds for another
writer ([reliability](reliability.md)). `--db` and `--schema` may also come before the command
and apply to it (`simindex --db news.db stats`, like `git -C`); given after the command too,
that one wins. Data goes to stdout, progress and summaries to stderr; a user error prints one
`Error: ...` line and exits with status 1.
"""


def commands(group, path=()):
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name)


TARGET = Path(__file__).with_name("cli.md")


def reference() -> str:
    """The text of docs/cli.md: a section per command, its --help as the CLI prints it."""
    runner = CliRunner()
    sections = [HEADER]
    for path in [(), *commands(typer.main.get_command(app))]:
        result = runner.invoke(app, [*path, "--help"], terminal_width=100, env={"NO_COLOR": "1"})
        lines = result.output.replace("Usage: root", "Usage: simindex").splitlines()
        help_text = "\n".join(line.rstrip() for line in lines).strip("\n")
        name = " ".join(("simindex", *path))
        sections.append(f"## `{name}`\n\n```text\n{help_text}\n```\n")
    return "\n".join(sections)


def main(arguments: list[str]) -> int:
    text = reference()
    if arguments == ["--check"]:
        if TARGET.read_text(encoding="utf-8") == text:
            return 0
        print(f"{TARGET} is out of date: run python docs/make_cli_reference.py", file=sys.stderr)
        return 1
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
