"""Every option's values and their messages, declared once for the CLI, the library and Spark.

Each choice is a ``Literal`` (what type checkers and Typer read) and a :class:`Choice` (its
values as a tuple, the CLI option and library keyword that take it, the check and the
advice that name both). Imports nothing heavy: the CLI builds its options from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from simindex.errors import ParameterError

OnEmpty = Literal["fail", "skip"]
OnDuplicate = Literal["fail", "skip", "replace"]
OnError = Literal["fail", "skip"]
# Bytes that are not in the input's encoding: the record is malformed, or they become U+FFFD.
EncodingErrors = Literal["strict", "replace"]
# Which document of a cluster is kept (represents it): the first ingested, or the one with
# the most distinct shingles (ties to the earliest).
KeepRule = Literal["earliest", "longest"]
Shingle = Literal["char", "word"]
InputFormat = Literal["auto", "jsonl", "csv", "tsv", "parquet"]
ExportFormat = Literal["csv", "jsonl", "parquet"]
SparkOutputFormat = Literal["parquet", "jsonl"]


@dataclass(frozen=True)
class Choice:
    """One option's values: ``keyword`` is the library's argument (``on_duplicate``), whose
    CLI option is its kebab-case (``--on-duplicate``) unless ``option`` says otherwise."""

    keyword: str
    values: tuple[str, ...]
    option: str = ""

    @property
    def flag(self) -> str:
        return self.option or "--" + self.keyword.replace("_", "-")

    def check(self, value: str) -> str:
        """``value`` if it is one of the values, else ParameterError naming them."""
        if value not in self.values:
            raise ParameterError(f"{self.keyword} must be {_one_of(self.values)}, got {value!r}")
        return value

    def advice(self, value: str, outcome: str) -> str:
        """'pass --on-duplicate skip / on_duplicate='skip' to keep the first copy': how to
        choose ``value``, in the CLI's words and the library's."""
        return f"pass {self.flag} {value} / {self.keyword}={value!r} {outcome}"


def _one_of(values: tuple[str, ...]) -> str:
    quoted = [repr(v) for v in values]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]


ON_EMPTY = Choice("on_empty", get_args(OnEmpty))
ON_DUPLICATE = Choice("on_duplicate", get_args(OnDuplicate))
ON_ERROR = Choice("on_error", get_args(OnError))
ENCODING_ERRORS = Choice("encoding_errors", get_args(EncodingErrors))
KEEP = Choice("keep", get_args(KeepRule))
INPUT_FORMATS = Choice("fmt", get_args(InputFormat), option="--format")
EXPORT_FORMATS = Choice("fmt", get_args(ExportFormat), option="--format")
SPARK_OUTPUT_FORMATS = Choice("output_format", get_args(SparkOutputFormat))

# The outcome of each duplicate-id choice, for the advice of an error that names one.
DUPLICATE_OUTCOMES = {"skip": "to keep the first copy", "replace": "to keep the last"}


def duplicate_advice(offered: tuple[str, ...] = ON_DUPLICATE.values) -> str:
    """How to get past a repeated or already indexed id, naming only the ``offered`` choices
    (a caller that lacks "replace", like dedup, must not advise it)."""
    ways = [ON_DUPLICATE.advice(v, DUPLICATE_OUTCOMES[v]) for v in offered if v != "fail"]
    return ", or ".join(ways)
