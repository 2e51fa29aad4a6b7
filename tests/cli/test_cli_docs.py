"""Every CLI command and option is documented in docs/cli.md."""

import re

import typer.main

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
