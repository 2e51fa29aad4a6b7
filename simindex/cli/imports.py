"""Optional imports the ``simindex`` process declines: libraries that import a package only
if it is installed, for features no command uses, would otherwise load it into every
command (numba's BLAS probe imports scipy.linalg, pyarrow's pandas support imports pandas,
Alembic's templates import pygments to colour their errors). Only the console script does
this, around a command: a library caller's imports are its own."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# What no command needs; pandas stays importable for the Spark commands (pyspark uses it).
UNUSED = ("scipy", "pygments")
UNUSED_OUTSIDE_SPARK = (*UNUSED, "pandas")


class _Decline(importlib.abc.MetaPathFinder):
    """Fails the import of ``names`` (and their submodules) before any file is read, so the
    importer takes its "not installed" path."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"{fullname} is not imported by simindex's commands")


@contextmanager
def declined(names: tuple[str, ...]) -> Iterator[None]:
    """Inside the block, importing one of ``names`` that is not loaded yet fails at once."""
    finder = _Decline(tuple(name for name in names if name not in sys.modules))
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
