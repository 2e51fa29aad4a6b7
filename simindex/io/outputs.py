"""Output files that never destroy data.

Every command that writes files goes through two steps:

1. :func:`check_outputs`, before anything is written: no output may be an input, another
   output or the SQLite database (with its -wal, -shm and -journal files). Paths are compared
   resolved (symlinks followed) and by (st_dev, st_ino), so a hard link is caught too.
   Standard input and output ("-", or no path) are not files.
2. :func:`atomic_output`: the bytes go to an unnamed file beside the target (Linux
   O_TMPFILE) that gets a name only when the output is complete, so a killed command leaves
   neither a partial target nor a temporary file. Where O_TMPFILE is unsupported, a hidden
   ``.NAME.simindex-PID-XXXX.tmp`` file is used, removed on any exception, and, when a
   kill -9 left it, by the next write of the same target.

A command's scratch directory (:func:`scratch_directory`) is named after its process too,
so the next command removes what a killed one left.
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from simindex.errors import InputError


def check_outputs(
    outputs: Iterable[str | os.PathLike[str] | None],
    inputs: Iterable[str | os.PathLike[str]] = (),
    database_files: Iterable[str] = (),
) -> None:
    """Raise InputError naming both paths if an output is an input, another output, or one
    of the database's files (see simindex.store.database_files)."""
    taken: list[tuple[str, str, tuple[Path, tuple[int, int] | None]]] = []
    for path in inputs:
        taken.append(("input", os.fspath(path), _identity(path)))
    for path in database_files:
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
    named = None
    try:
        _remove_stale(target.parent.glob(f".{glob.escape(target.name)}.{_TEMP_TAG}*.tmp"))
        fd = _unnamed_file(target.parent)
        if fd is None:
            fd, named = tempfile.mkstemp(
                prefix=f".{target.name}.{_TEMP_TAG}{os.getpid()}-", suffix=".tmp", dir=target.parent
            )
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


_TEMP_TAG = "simindex-"  # then the writer's process id: see _remove_stale
_AT_FDCWD, _AT_EMPTY_PATH = -100, 0x1000
_nameable: dict[int, bool] = {}  # st_dev -> whether unnamed files can be named there


def _unnamed_file(directory: Path) -> int | None:
    """An O_TMPFILE file descriptor in ``directory``, or None where that is unsupported or
    such a file can't be given a name later (checked once per filesystem)."""
    try:
        fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o666)
    except (AttributeError, OSError):  # not Linux, or the filesystem lacks O_TMPFILE
        return None
    device = os.fstat(fd).st_dev
    if device not in _nameable:
        probe = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o600)
        name = directory / f".{_TEMP_TAG}{os.getpid()}-probe.tmp"
        try:
            _link(probe, name)
            os.unlink(name)
            _nameable[device] = True
        except OSError:
            _nameable[device] = False
        finally:
            os.close(probe)
    if not _nameable[device]:
        os.close(fd)
        return None
    return fd


def _link(fd: int, name: Path) -> None:
    """Give the file ``fd`` the (new) name ``name``: through /proc, or where that link
    crosses mounts (some sandboxes), linkat(AT_EMPTY_PATH)."""
    try:
        os.link(f"/proc/self/fd/{fd}", name, follow_symlinks=True)
        return
    except FileExistsError:
        raise
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.linkat(fd, b"", _AT_FDCWD, os.fsencode(name), _AT_EMPTY_PATH) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error), str(name))


def _name(fd: int, target: Path) -> None:
    """Give the unnamed file ``fd`` the name ``target``, replacing what is there."""
    try:
        _link(fd, target)
        return
    except FileExistsError:
        pass
    # A link can't replace: link under a hidden name, then rename over the target.
    hidden = target.with_name(f".{target.name}.{_TEMP_TAG}{os.getpid()}.tmp")
    with suppress(FileNotFoundError):
        os.unlink(hidden)
    _link(fd, hidden)
    try:
        os.replace(hidden, target)
    except OSError:
        os.unlink(hidden)
        raise


def _remove_stale(paths: Iterable[Path]) -> None:
    """Remove the temporary files or directories named ``...simindex-PID-...`` whose
    process is gone (a kill -9 runs no clean-up)."""
    for path in paths:
        pid = path.name.partition(_TEMP_TAG)[2].split("-")[0].split(".")[0]
        if pid.isdigit() and not _alive(int(pid)):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with suppress(OSError):
                    path.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def scratch_directory() -> Iterator[str]:
    """A temporary directory, removed at the end. It is named after this process: one left
    by a killed process (kill -9 runs no clean-up) is removed by the next call."""
    base = Path(tempfile.gettempdir())
    _remove_stale(base.glob(f"{_TEMP_TAG}*-scratch-*"))
    prefix = f"{_TEMP_TAG}{os.getpid()}-scratch-"
    with tempfile.TemporaryDirectory(prefix=prefix) as path:
        yield path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
