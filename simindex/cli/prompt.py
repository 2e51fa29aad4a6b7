"""Asking the user before a command deletes for good."""

from __future__ import annotations

import sys
from collections.abc import Callable

import typer

from simindex.cli.render import err
from simindex.errors import ParameterError


def confirm(yes: bool, what: str, question: Callable[[], str | None]) -> None:
    """Go on only if the user agrees: --yes, or "y" to ``question()`` (None: nothing to ask)
    on a terminal. With no terminal to ask on and no --yes, refuse, saying ``what`` happens."""
    if yes:
        return
    if not interactive():
        raise ParameterError(f"{what}; with no terminal to ask on, pass --yes to confirm")
    text = question()
    if text is not None and not typer.confirm(text, err=True):
        err.print("Nothing changed.")
        raise typer.Exit(1)


def interactive() -> bool:
    """Whether a person can answer a question (stdin is a terminal)."""
    return sys.stdin.isatty()
