"""The one exception family users see.

Library code raises a subclass of :class:`SimindexError` for anything the user can fix
(bad parameters, bad input, a database in the wrong state). The CLI prints its message
as ``Error: ...`` and exits non-zero; any other exception is a bug and keeps its traceback.
Every message names the problem and, where there is one, the next step.
"""


class SimindexError(Exception):
    """Base class: a problem the user can fix, with a message that says how."""


class ParameterError(SimindexError, ValueError):
    """A parameter is out of range or inconsistent (the message shows the arithmetic)."""


class InputError(SimindexError):
    """A document or input file can't be used as given (malformed line, empty text, ...)."""


class EmptyDocumentError(InputError):
    """A text normalizes to nothing, so it has no shingles and no MinHash signature."""


class DuplicateIdError(InputError):
    """An external id is already indexed, or repeats inside one batch."""


class DatabaseError(SimindexError):
    """The database can't be reached, or is not a simindex index that this version can use."""


class NoIndexError(DatabaseError):
    """There is no index to open (no database, or one without a complete index):
    ``Index.create`` makes one. ``problem`` is the message without its advice, for callers
    (the CLI) that advise in their own words; ``half_created``: an index was begun."""

    def __init__(self, problem: str, *, half_created: bool = False):
        self.problem, self.half_created = problem, half_created
        fix = "Index.create(url) completes it" if half_created else "Index.create(url) makes one"
        super().__init__(f"{problem}; {fix}")


class SchemaVersionError(DatabaseError):
    """The database schema is older or newer than this simindex's migrations."""


class SpecMismatchError(SimindexError):
    """Signatures made with one scheme or parameter set can't be mixed with another."""


class LowRecallWarning(UserWarning):
    """A threshold below what the active banding serves: many pairs at it are never
    candidates (the message gives the expected recall and the re-band that fixes it)."""


# Characters of a user's value (an id, a field list, a line) that a one-line message shows.
SHOWN_CHARS = 80


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis, for a one-line message."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
