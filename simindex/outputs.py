"""Output files that never destroy data.

Every command that writes files goes through two steps:

1. :func:`check_outputs`, before anything is written: no output may be an input, another
   output or the SQLite database (with its -wal, -shm and -journal files). Paths are compared
   resolved (symlinks followed) and by (st_dev, st_ino), so a hard link is caught too.
   Standard input and output ("-", or no path) are not files.
2. :func:`atomic_output`: the bytes go to an unnamed file beside the target (Linux
   O_TMPFILE) that gets a name only when the output is complete, so a killed command leaves
   neither a partial target nor a temporary file. Where O_TMPFILE is unsupported, a hidden
   ``.NAME.XXXX.tmp`` file is used and removed on any exception (a kill -9 can leave it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from sqlalchemy.engine import make_url

from simindex.errors import InputError
from simindex.store import database_url

_SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def database_files(db: str | os.PathLike[str] | None) -> list[str]:
    """The files a SQLite database URL stands for (none for PostgreSQL or :memory:)."""
    url = make_url(database_url(db))
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return []
    return [url.database + suffix for suffix in _SQLITE_SIDE_FILES]


def check_outputs(
    outputs: Iterable[str | os.PathLike[str] | None],
    inputs: Iterable[str | os.PathLike[str]] = (),
    db: str | os.PathLike[str] | None | bool = False,
) -> None:
    """Raise InputError naming both paths if an output is an input, another output, or
    the database file ``db`` (False: no database involved)."""
    taken: list[tuple[str, str, tuple[Path, tuple[int, int] | None]]] = []
    for path in inputs:
        taken.append(("input", os.fspath(path), _identity(path)))
    if db is not False:
        for path in database_files(db):  # type: ignore[arg-type]
            taken.append(("database file", path, _identity(path)))
    for output in outputs:
        if output is None or os.fspath(output) == "-":
            continue
        identity = _identity(output)
        for role, path, other in taken:
            if identity[0] == other[0] or (identity[1] and identity[1] == other[1]):
                raise InputError(
                    f"{os.fspath(output)}: is also the {role} {path}; writing it would destroy "
                    "that file: choose another output path"
                )
        taken.append(("output", os.fspath(output), identity))


def _identity(path: str | os.PathLike[str]) -> tuple[Path, tuple[int, int] | None]:
    """The resolved path, and (device, inode) when the file exists."""
    if os.fspath(path) == "-":
        return Path("-"), None
    resolved = Path(path).resolve()
    try:
        stat = resolved.stat()
    except OSError:
        return resolved, None
    return resolved, (stat.st_dev, stat.st_ino)


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary stream whose bytes replace ``path`` only if the block ends without an
    exception; otherwise ``path`` is untouched and no temporary file remains."""
    target = Path(path)
    directory = target.parent
    try:
        try:
            fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o666)
            named = None
        except (AttributeError, OSError):  # no O_TMPFILE (not Linux, or the filesystem)
            fd, named = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
            os.chmod(named, 0o666 & ~_umask())
    except OSError as exc:
        raise InputError(f"{target}: can't write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
            if named is None:
                _name(fd, target)
        if named is not None:
            os.replace(named, target)
            named = None
    except OSError as exc:
        raise InputError(f"{target}: can't write: {exc.strerror}") from None
    finally:
        if named is not None:
            with suppress(OSError):
                os.unlink(named)


def _name(fd: int, target: Path) -> None:
    """Give the unnamed file ``fd`` the name ``target``, replacing what is there."""
    source = f"/proc/self/fd/{fd}"
    try:
        os.link(source, target, follow_symlinks=True)
        return
    except FileExistsError:
        pass
    # os.link can't replace: link under a hidden name, then rename over the target.
    hidden = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with suppress(FileNotFoundError):
        os.unlink(hidden)
    os.link(source, hidden, follow_symlinks=True)
    try:
        os.replace(hidden, target)
    except OSError:
        os.unlink(hidden)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
