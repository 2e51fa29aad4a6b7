"""The records a command left out: counted, and listed in the file the user named with
--error-log (none is written unasked)."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from simindex.cli.render import err, shown
from simindex.errors import InputError
from simindex.io.outputs import atomic_output


class ErrorLog:
    """Skipped records and empty documents, one JSON line each, in ``path`` if one is given.
    The file is written atomically (created only if there is something to list, only if
    the command succeeds), and the bad records are on disk before the documents commit
    (:meth:`flush`, which the command calls once the input is read)."""

    def __init__(self, path: Path | None):
        self.path, self.count, self.empty = path, 0, 0
        self.first: str | None = None
        self._file = ExitStack()
        self._stream: io.TextIOWrapper | None = None

    def add(self, error: InputError) -> None:
        self.first = self.first or str(error)
        self._write({"error": str(error)})
        self.count += 1

    def add_empty(self, ids: list[str]) -> None:
        for external_id in ids:
            self._write({"id": external_id, "error": "no text after normalization (not stored)"})
        self.empty += len(ids)

    def _write(self, entry: dict[str, str]) -> None:
        if self.path is None:
            return
        if self._stream is None:
            raw = self._file.enter_context(atomic_output(self.path))
            self._stream = io.TextIOWrapper(raw, encoding="utf-8")
        with self._failing():
            self._stream.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def flush(self) -> None:
        """Put the log on disk: a full disk fails the command before the database commits,
        never after."""
        if self._stream is not None:
            with self._failing():
                self._stream.flush()
                os.fsync(self._stream.fileno())

    def saved_after(self, documents: Iterator[Any]) -> Iterator[Any]:
        """The documents, then :meth:`flush`."""
        yield from documents
        self.flush()

    @contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise InputError(f"{self.path}: can't write the error log: {exc.strerror}") from None

    def __enter__(self) -> ErrorLog:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._stream is not None and exc_info[0] is None:
            self._stream.detach()  # flushes; atomic_output names the file
        self._file.__exit__(*exc_info)
        if exc_info[0] is None:
            self._summarize()

    def _summarize(self) -> None:
        """Where the left-out records are listed, or, with no log, the first bad one and how
        to list them all (empty documents are named in the command's summary)."""
        listed = [f"{self.count:,} bad record(s)"] if self.count else []
        if self.path is not None:
            listed += [f"{self.empty:,} empty document(s)"] if self.empty else []
            if listed:
                err.print(f"Listed {' and '.join(listed)} in {shown(self.path)}")
        elif self.count:
            err.print(
                f"Skipped {listed[0]}, the first: {shown(self.first)}; --error-log FILE "
                "lists them all"
            )
