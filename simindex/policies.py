"""Every option's values and their messages, declared once for the CLI, the library and Spark.

Each choice is a ``Literal`` (what type checkers and Typer read) and a :class:`Choice` (its
values as a tuple, the CLI option and library keyword that take it, the check and the
advice that name both). Imports nothing heavy: the CLI builds its options from here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, get_args

from simindex.errors import ParameterError

OnEmpty = Literal["fail", "skip"]
OnDuplicate = Literal["fail", "skip", "replace"]
OnError = Literal["fail", "skip"]
# Bytes that are not in the input's encoding: the record is malformed, or they become U+FFFD.
EncodingErrors = Literal["strict", "replace"]
# Which document of a cluster is kept (represents it): the first or last ingested (by input
# position), or the one with the most or fewest distinct shingles (ties to the smaller id).
KeepRule = Literal["earliest", "latest", "longest", "shortest"]
# With keep_by: the largest or the smallest value of the metadata field is kept.
KeepOrder = Literal["max", "min"]
# How the verified pairs make clusters: stars around representatives (no chaining), or
# connected components (a chain of pairs links documents that are not similar).
ClusterMode = Literal["star", "components"]
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
KEEP_ORDER = Choice("keep_order", get_args(KeepOrder))
CLUSTER_MODE = Choice("mode", get_args(ClusterMode))
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


@dataclass(frozen=True)
class ClusterPolicy:
    """How clusters are made and which document of each is kept (its representative).

    The kept document is the first in an order that is a pure function of each document's
    (ingestion order, external id, shingle count, metadata), never of batches or workers:
    ``keep`` ranks by ingestion order ("earliest", "latest") or distinct shingles
    ("longest", "shortest"; ties to the smaller external id). ``keep_by`` names a metadata
    field that ranks instead (``keep_order`` "max": its largest value first; numbers before
    texts, documents lacking it last, ties to the smaller external id). Raises
    ParameterError for a value not declared above.
    """

    keep: KeepRule = "earliest"
    keep_by: str | None = None
    keep_order: KeepOrder = "max"
    mode: ClusterMode = "components"

    def __post_init__(self) -> None:
        KEEP.check(self.keep)
        KEEP_ORDER.check(self.keep_order)
        CLUSTER_MODE.check(self.mode)
        if self.keep_by is not None and not self.keep_by:
            raise ParameterError("keep_by must name a metadata field, got ''")

    @property
    def ties_by_external_id(self) -> bool:
        """Whether documents can tie in this order (then the smaller external id wins)."""
        return self.keep_by is not None or self.keep in ("longest", "shortest")

    def describe(self) -> str:
        """'longest' or 'keep-by quality (max)': the rule, as the CLI reports it."""
        return f"keep-by {self.keep_by} ({self.keep_order})" if self.keep_by else self.keep

    def stored(self) -> str:
        """The policy as an index stores it with its clusters (see :meth:`from_stored`)."""
        return json.dumps(
            {"mode": self.mode, "keep": self.keep, "keep_by": self.keep_by,
             "keep_order": self.keep_order}
        )  # fmt: skip

    @classmethod
    def from_stored(cls, text: str) -> ClusterPolicy:
        """The policy :meth:`stored` wrote, or a bare rule (what indexes stored before
        policies had a mode: components under that rule)."""
        return cls(**json.loads(text)) if text.startswith("{") else cls(keep=text)  # type: ignore[arg-type]
