"""The docs and the CLI agree: every command and option is in docs/cli.md, and every
`simindex ...` command line written in README.md and docs/*.md parses.

The docs are read when the test runs, so a command or option added (or renamed) anywhere is
checked against what the docs say now.
"""

import re
import shlex

import pytest
import typer.main
from typer import _click

from simindex.cli import app
from tests.conftest import REPO


def _commands(group, prefix="simindex"):
    click_group = typer.main.get_command(group) if not hasattr(group, "commands") else group
    for name, command in click_group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, f"{prefix} {name}")
        else:
            yield f"{prefix} {name}", command


def test_every_command_and_option_is_in_the_cli_reference():
    reference = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## `(simindex[^`]*)`\n(.*?)(?=^## |\Z)", reference, re.M | re.S))
    for name, command in _commands(app):
        assert name in sections, f"docs/cli.md has no section for `{name}`"
        for param in command.params:
            for option in param.opts:
                if option.startswith("--") and option != "--help":
                    assert option in sections[name], (
                        f"`{name}` option {option} is not in docs/cli.md"
                    )


# Where a shell command line ends: pipes, redirections, command separators, comments.
_SHELL_END = re.compile(r"^(\||\|\||&&|;|&|>|>>|<|2>|2>&1|#.*)$")


def documented_command_lines() -> list[tuple[str, str]]:
    """(where, command line) for each `simindex ...` in README.md and docs/*.md (not the
    generated docs/cli.md): console lines `$ simindex ...` (with `\\` continuations) and
    inline code spans `simindex ...`."""
    found = []
    paths = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for path in paths:
        if path.name == "cli.md":
            continue
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{path.relative_to(REPO)}:{number}"
            console = re.match(r"^\s*\$\s+(?:\S+=\S+\s+)*(simindex\s.*)$", line)
            spans = re.findall(r"`(?:\S+=\S+\s+)*(simindex\s[^`]*)`", line)
            found += [(where, command) for command in ([console[1]] if console else []) + spans]
    return found


def _parse(command_line: str) -> None:
    """Parse a command line as `simindex` would, without running the command. A `...`
    (the docs' "and so on") is left out; `simindex ... --option` (any command) must parse
    as some command."""
    words = []
    for word in shlex.split(command_line)[1:]:
        if _SHELL_END.match(word):
            break
        words.append(word)
    if words[:1] == ["..."]:
        for name, _ in _commands(app):
            try:
                return _parse(" ".join([name, *map(shlex.quote, words[1:])]))
            except _click.exceptions.MissingParameter:
                return None
            except _click.exceptions.ClickException:
                continue
        raise _click.exceptions.UsageError(f"no command takes: {' '.join(words[1:])}")
    words = [word for word in words if word != "..."]
    command = typer.main.get_command(app)
    context = command.make_context("simindex", words)
    while hasattr(command, "commands"):  # a group: go on with its subcommand's words
        rest = [*context._protected_args, *context.args]
        name, command, rest = command.resolve_command(context, rest)
        context = command.make_context(name, rest, parent=context)


DOCUMENTED = documented_command_lines()


def test_the_docs_show_command_lines():
    assert len(DOCUMENTED) > 20  # the extraction finds the docs' examples


@pytest.mark.parametrize(("where", "command_line"), DOCUMENTED, ids=[w for w, _ in DOCUMENTED])
def test_a_documented_command_line_parses(where, command_line):
    try:
        _parse(command_line)
    except _click.exceptions.MissingParameter:
        pass  # prose names a command without its arguments: "after `simindex ingest` ..."
    except typer.Exit:  # --help, --version
        pass
    except _click.exceptions.ClickException as exc:
        pytest.fail(f"{where}: `{command_line}` does not parse: {exc.format_message()}")


def test_the_parser_catches_a_wrong_command_line():
    with pytest.raises(_click.exceptions.ClickException, match="--nosuch"):
        _parse("simindex pairs --nosuch")
    with pytest.raises(_click.exceptions.ClickException):
        _parse("simindex evict --days soon")
    with pytest.raises(_click.exceptions.ClickException, match="no command takes: --nosuch"):
        _parse("simindex ... --nosuch 1")
