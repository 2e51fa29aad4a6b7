"""The one boundary between the library and the user: every command runs inside
:func:`command`, where a SimindexError becomes ``Error: ...`` and exit status 1, a full disk
says where to make room, and Ctrl-C says what the command committed and exits with 130. Any
other exception is a bug and keeps its traceback."""

from __future__ import annotations

import errno
import functools
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from rich.text import Text

from simindex.cli.imports import UNUSED, UNUSED_OUTSIDE_SPARK, declined
from simindex.cli.render import err, shown
from simindex.defaults import application_name
from simindex.errors import LowRecallWarning, NoIndexError, SimindexError

F = TypeVar("F", bound=Callable[..., Any])

NOTHING_COMMITTED = "nothing of this command was committed"
NOTHING_CHANGED = "this command changes nothing"
# The exit status of a process stopped by SIGINT, as shells report it (128 + 2).
INTERRUPTED = 130


class Interrupted(Exception):
    """Ctrl-C, with what the command had committed when it came (see :func:`noting`)."""


@contextmanager
def noting(committed: Callable[[], str]) -> Iterator[None]:
    """Inside the block, Ctrl-C is reported with ``committed()``: for a command that commits
    in parts, what it had committed by then."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(committed()) from None


def command(
    typer_app: typer.Typer,
    name: str | None = None,
    *,
    kernels: bool = False,
    spark: bool = False,
    interrupted: str = NOTHING_COMMITTED,
) -> Callable[[F], F]:
    """Register a function as a command of ``typer_app``, run at the boundary. ``kernels``:
    the command runs numba kernels, so the first run after install compiles them first and
    says so. ``spark``: it runs pyspark, which needs pandas (see simindex.cli.imports).
    ``interrupted``: what Ctrl-C leaves (unless the command says more: noting)."""
    unused = UNUSED if spark else UNUSED_OUTSIDE_SPARK

    def register(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            application_name.set(f"simindex {function.__name__}")  # seen in pg_stat_activity
            try:
                with warnings.catch_warnings(), declined(unused):
                    warnings.simplefilter("always", LowRecallWarning)  # every time, one line
                    warnings.showwarning = _show_warning
                    if kernels:
                        from simindex.cli.kernels import compile_once

                        compile_once()
                    return function(*args, **kwargs)
            except NoIndexError as exc:
                _fail(shown(f"{exc.problem}; {_NO_INDEX_FIX[exc.half_created]}"))
            except SimindexError as exc:
                _fail(shown(exc))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                _fail(_no_space(exc))
            except (KeyboardInterrupt, Interrupted) as exc:
                note = str(exc) if isinstance(exc, Interrupted) else interrupted
                err.print(f"interrupted: {note}")
                raise typer.Exit(INTERRUPTED) from None

        typer_app.command(name)(wrapper)
        return function

    return register


# The library advises Index.create; a command line advises the commands that create one.
_NO_INDEX_FIX = {
    False: "create one with `simindex init` (or `simindex ingest`, which creates it)",
    True: "`simindex init` (or `simindex ingest`) completes it",
}


def _fail(message: str) -> None:
    err.print(Text.assemble(("Error:", "bold red"), " ", message))
    raise typer.Exit(1) from None


def _no_space(exc: OSError) -> str:
    """A full disk, as a user can act on it: the file named if the error names one, else the
    temporary directory, where the command's scratch files live (nothing was committed: a
    command's work is one transaction, and its outputs are written aside and renamed)."""
    import tempfile

    where = exc.filename or f"the temporary directory ({tempfile.gettempdir()}) or an output"
    return (
        f"no space left on the device of {where}; free some, or set TMPDIR to a directory "
        "with room for the command's temporary files (docs/reliability.md says how much)"
    )


_default_showwarning = warnings.showwarning


def _show_warning(
    message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any
) -> None:
    """A library warning about the user's data or parameters is one ``Warning:`` line."""
    if issubclass(category, LowRecallWarning):
        err.print(Text.assemble(("Warning:", "bold yellow"), " ", shown(message)))
    else:
        _default_showwarning(message, category, *args, **kwargs)
