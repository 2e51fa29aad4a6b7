"""Near-duplicate removal from file to file, in this process: ``simindex dedup`` as a library
call, the twin of :func:`simindex.spark.pipeline.dedup_files`.

    input files --read, sign, add (Index.add)--> an index (a scratch SQLite file, or ``db``)
    index --Index.find_pairs, Index.cluster(keep)--> clusters of near-duplicates
    input records --not held under another document of their cluster--> the output
    input records held under another document --> the dropped report (id, representative,
    similarity)

With ``db``, the index is kept (and grows with the input): an input record that duplicates a
document indexed before is dropped too, and the report names that document. The report and
the summary speak of the input's records only, never of documents the index held before.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from simindex.defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_THRESHOLD
from simindex.errors import DuplicateIdError, InputError
from simindex.io.delimited import CsvLayout
from simindex.io.outputs import check_outputs, scratch_directory
from simindex.io.readers import (
    DEFAULT_MAX_CHARS,
    detect_format,
    read_checked,
    read_documents,
    record_id,
    spool_stdin,
)
from simindex.io.writers import output_format, write_records
from simindex.policies import (
    ON_EMPTY,
    ON_ERROR,
    Choice,
    ClusterMode,
    ClusterPolicy,
    EncodingErrors,
    InputFormat,
    KeepOrder,
    KeepRule,
    OnEmpty,
    OnError,
    duplicate_advice,
)
from simindex.store import database_files

if TYPE_CHECKING:
    from simindex.index import Index
    from simindex.results import LargestCluster
    from simindex.spec import SignatureSpec

# dedup's choices for an id that repeats or is indexed with another text: no "replace", which
# would delete an indexed document that the output then lacks.
ON_DUPLICATE = Choice("on_duplicate", ("fail", "skip"))
# The steps, in order, as ``progress`` names them.
STEPS = ("checking", "indexing", "finding pairs", "clustering", "writing")
DROPPED_FIELDS = ["id", "representative", "similarity"]
_BATCH = 10_000  # records asked about at once (ids sent to the database in one statement)


class Problems(Protocol):
    """Where the records left out are listed (``on_error="skip"``)."""

    path: str | Path | None  # the list's file, checked like the outputs (None: no file)

    def add(self, error: InputError) -> None: ...

    def flush(self) -> None:
        """Called once the input is read, before the index commits its documents."""


@dataclass(frozen=True)
class Summary:
    """What a run did, counted in the input's records (the counts ``simindex dedup`` reports;
    the names of :class:`simindex.spark.pipeline.Summary` where they mean the same)."""

    documents: int  # signed and compared (empty ones not counted)
    empty: int  # no text after normalization: kept, not compared
    skipped: int  # bad records left out (on_error="skip")
    repeated: int  # records not indexed as their id was taken (on_duplicate="skip")
    indexed_before: int  # held by ``db`` with the same text already (an earlier run's)
    candidates: int
    hot_buckets: int
    largest_bucket: int
    pairs: int
    clusters: int
    kept: int  # records written to the output
    dropped: int  # records held under another document (listed in the dropped report)
    duplicates_of_indexed: int  # of the dropped, those held under a document not in the input
    # The largest clusters, each with its weakest member's similarity to the representative.
    largest_clusters: tuple[LargestCluster, ...] = ()


@dataclass(frozen=True)
class Deduplicated:
    """The result of :func:`dedup_files`: the files written and the :class:`Summary`."""

    output: str
    output_format: str
    dropped: str  # the dropped report (CSV unless its name says otherwise)
    summary: Summary


def dropped_path(output: str) -> str:
    """Where the dropped report goes by default: beside the output, named after it."""
    return f"{output.removesuffix('.gz')}.dropped.csv"


def dedup_files(
    paths: list[str],
    output: str,
    *,
    dropped: str | None = None,
    db: str | None = None,
    schema: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    threshold: float = DEFAULT_THRESHOLD,
    keep: KeepRule = "earliest",
    keep_by: str | None = None,
    keep_order: KeepOrder = "max",
    mode: ClusterMode = "star",
    spec: SignatureSpec | None = None,
    fmt: InputFormat = "auto",
    id_field: str = "id",
    text_field: str = "text",
    encoding: str = "utf-8",
    encoding_errors: EncodingErrors = "strict",
    csv_layout: CsvLayout | None = None,
    on_replaced: Callable[[str, int], None] | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    on_empty: OnEmpty = "skip",
    on_duplicate: str = "fail",
    on_error: OnError = "fail",
    problems: Problems | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> Deduplicated:
    """Write the records of ``paths`` (readers.scan_inputs' files; "-" is standard input)
    to ``output`` without their near-duplicates (similarity >= ``threshold``): of each
    cluster, the record the policy picks (``keep``, ``keep_by``, ``keep_order``: see
    :class:`~simindex.policies.ClusterPolicy`; earliest and latest go by position in the
    input, documents indexed before first). ``mode`` "star" drops only records similar to
    the record kept in their place; "components" drops whole chains. ``output`` has the
    input's records as read, in order, in the format its name says (else the input's);
    ``dropped`` (default: :func:`dropped_path`) lists the input records left out, each with
    the document it duplicates (the kept input record or a document indexed before).

    ``db``: the index to use and keep (default: a scratch SQLite file, removed after); what
    it holds with the same id and normalized text is no conflict (a re-run). The reading
    options are read_documents'. Empty texts are kept unindexed (``on_empty="skip"``) or an
    error; an id that repeats or is indexed with another text is a DuplicateIdError or its
    first copy is indexed (``on_duplicate="skip"``); bad records are an InputError or go to
    ``problems`` (``on_error="skip"``). ``progress(step, documents)`` is called as documents
    pass each of STEPS. Outputs are written whole or not at all; the index commits its
    documents, pairs and clusters in three transactions (see :func:`committed_before`).
    """
    for choice, value in ((ON_EMPTY, on_empty), (ON_DUPLICATE, on_duplicate)):
        choice.check(value)
    ON_ERROR.check(on_error)
    policy = ClusterPolicy(keep=keep, keep_by=keep_by, keep_order=keep_order, mode=mode)
    asked = {"inputs": paths, "output": output, "threshold": threshold, **vars(policy)}
    dropped = dropped or dropped_path(output)
    logged = [problems.path] if problems is not None and problems.path else []
    check_outputs([output, dropped, *logged], paths, database_files(db) if db else ())
    step = progress or (lambda name, documents: None)
    with scratch_directory() as scratch:
        paths = [spool_stdin(scratch) if path == "-" else path for path in paths]
        source = _Input(
            paths, fmt, id_field, text_field, encoding, max_chars,
            csv_layout, encoding_errors, on_replaced,
        )  # fmt: skip
        written_as = output_format(output, None, default=source.format)
        index, created = _open(db, scratch, schema, lock_timeout, threshold, spec)
        with index, index.run("dedup", asked):
            step("checking", 0)
            alike = set() if created else _indexed_alike(index, source)
            skip_errors = on_error == "skip"
            added = _add(index, source, alike, on_empty, on_duplicate, skip_errors, problems, step)
            step("finding pairs", 0)
            pairs = index.find_pairs(threshold)
            step("clustering", 0)
            clusters = index.cluster(threshold, **vars(policy))
            step("writing", 0)
            # The ids left out are only needed to tell the input's from what db held before.
            kept, known = _write_kept(index, source, output, written_as, on_duplicate, created)
            listed, foreign = _write_dropped(index, source, dropped, known)
    return Deduplicated(
        output=output,
        output_format=written_as,
        dropped=dropped,
        summary=Summary(
            documents=added.added + len(alike),
            empty=len(added.skipped_empty),
            skipped=added.skipped_malformed,
            repeated=len(added.skipped_existing),
            indexed_before=len(alike),
            candidates=pairs.candidates,
            hot_buckets=pairs.hot_buckets,
            largest_bucket=pairs.largest_bucket,
            pairs=pairs.pairs,
            clusters=clusters.clusters,
            kept=kept,
            dropped=listed,
            duplicates_of_indexed=foreign,
            largest_clusters=clusters.largest_clusters,
        ),
    )


def committed_before(step: str, db: str | None) -> str:
    """What a run stopped at the start of ``step`` (one of STEPS) has committed."""
    if db is None:
        return "nothing was written (the scratch index is removed)"
    done = ["the input's documents were added to the index", "their pairs stored"]
    done = done[: max(0, STEPS.index(step) - 1)] + (["clusters built"] if step == "writing" else [])
    if not done:
        return "nothing was committed and nothing written"
    return (
        f"{', '.join(done)}; no output was written: running the same dedup again finishes it "
        "(the records indexed now are no conflict then)"
    )


class _Input:
    """The input files and how to read them: as documents to index, as records to write."""

    def __init__(
        self,
        paths: list[str],
        fmt: str,
        id_field: str,
        text_field: str,
        encoding: str,
        max_chars: int,
        csv_layout: CsvLayout | None = None,
        encoding_errors: EncodingErrors = "strict",
        on_replaced: Callable[[str, int], None] | None = None,
    ):
        """``on_replaced`` hears of each record read with U+FFFD once: on the indexing pass."""
        self.paths, self.id_field, self.text_field = paths, id_field, text_field
        self.format = detect_format(paths[0]) if fmt == "auto" else fmt
        self.max_chars = max_chars
        how = {"fmt": fmt, "id_field": id_field, "text_field": text_field, "encoding": encoding}
        how |= {
            "max_chars": max_chars,
            "csv_layout": csv_layout,
            "encoding_errors": encoding_errors,
        }
        self._read = functools.partial(read_documents, **how, on_replaced=on_replaced)
        self._checked = functools.partial(read_checked, **how)

    def documents(self, on_error: Callable[[InputError], None] | None) -> Iterator[Any]:
        """(id, text, metadata) of every record; a bad one raises, or goes to ``on_error``."""
        for path in self.paths:
            yield from self._read(path, on_error=on_error)

    def records(self) -> Iterator[dict[str, Any]]:
        """The records as read, in order, bad ones left out (reported when indexing)."""
        for path in self.paths:
            for _, record, _ in self._checked(path, on_error=_ignore):
                yield record

    def ids(self) -> Iterator[str]:
        return (record_id(record, self.id_field) for record in self.records())

    def fields(self) -> list[str]:
        """Column names of the records, in their order: the CSV header, or the keys seen in
        the first thousand records."""
        seen: dict[str, None] = {}
        for record in itertools.islice(self.records(), 1000):
            seen.update(dict.fromkeys(record))
        return list(seen)


def _ignore(error: InputError) -> None:
    """An error already reported (or logged) by an earlier pass over the same input."""


def _open(
    db: str | None,
    scratch: str,
    schema: str | None,
    lock_timeout: float,
    threshold: float,
    spec: SignatureSpec | None,
) -> tuple[Index, bool]:
    from simindex.index import Index

    return Index.open_or_create(  # the schema is db's: a scratch file has none
        db or str(Path(scratch) / "dedup.db"),
        threshold=threshold,
        spec=spec,
        schema=schema if db else None,
        lock_timeout=lock_timeout,
    )


def _indexed_alike(index: Index, source: _Input) -> set[str]:
    """Ids of the input that the index already holds with the same normalized text: a
    re-run of a dedup interrupted between its transactions, not a conflict."""
    from simindex.pipeline.shingle import content_hash, normalize

    documents = source.documents(_ignore)
    alike: set[str] = set()
    while chunk := list(itertools.islice(documents, _BATCH)):
        stored = index.content_hashes(d[0] for d in chunk)
        alike.update(
            external_id
            for external_id, text, *_ in chunk
            if external_id in stored and stored[external_id] == content_hash(normalize(text))
        )
    return alike


@dataclass
class _Added:
    added: int
    skipped_empty: list[str]
    skipped_existing: list[str]
    skipped_malformed: int


def _add(
    index: Index,
    source: _Input,
    alike: set[str],
    on_empty: str,
    on_duplicate: str,
    skip_errors: bool,
    problems: Problems | None,
    step: Callable[[str, int], None],
) -> _Added:
    """Index.add of the input's documents but those indexed alike already, bad records
    counted and handed to ``problems`` (with ``skip_errors``), which is flushed before the
    commit; a duplicate id's advice names dedup's own choices."""
    malformed = [0]

    def skipped(error: InputError) -> None:
        malformed[0] += 1
        if problems is not None:
            problems.add(error)

    def documents() -> Iterator[Any]:
        read = source.documents(skipped if skip_errors else None)
        yield from (d for d in read if d[0] not in alike)
        if problems is not None:
            problems.flush()

    try:
        result = index.add(
            documents(),
            on_empty=on_empty,  # type: ignore[arg-type]
            on_duplicate=on_duplicate,  # type: ignore[arg-type]
            max_chars=source.max_chars,
            progress=lambda n: step("indexing", n),
        )
    except DuplicateIdError as exc:
        problem = str(exc).split("; pass ", 1)[0]
        raise DuplicateIdError(f"{problem}; {duplicate_advice(ON_DUPLICATE.values)}") from None
    return _Added(result.added, result.skipped_empty, result.skipped_existing, malformed[0])


def _write_kept(
    index: Index, source: _Input, output: str, fmt: str, on_duplicate: str, created: bool
) -> tuple[int, set[str] | None]:
    """Write the records that the index does not cluster under another document (with
    on_duplicate="skip", an id once); returns how many, and the ids left out (None for an
    index ``created`` by this run, whose clustered documents are all the input's)."""
    dropped: set[str] | None = None if created else set()

    def kept() -> Iterator[dict[str, Any]]:
        written: set[str] = set()
        once = on_duplicate == "skip"
        records = source.records()
        while chunk := list(itertools.islice(records, _BATCH)):
            duplicates = index.clustered_duplicates(record_id(r, source.id_field) for r in chunk)
            if dropped is not None:
                dropped.update(duplicates)
            for record in chunk:
                external_id = record_id(record, source.id_field)
                if external_id in duplicates or (once and external_id in written):
                    continue
                if once:
                    written.add(external_id)
                yield record

    fields = source.fields()
    count = write_records(kept(), fields, fmt, output, source.id_field, source.text_field)
    return count, dropped


def _write_dropped(
    index: Index, source: _Input, path: str, wanted: set[str] | None
) -> tuple[int, int]:
    """Write the dropped report: every clustered document held under another, or, when the
    index held documents before, only the input's (``wanted``). Returns how many rows, and
    how many of them are held under a document that is not in the input."""
    members = (
        m
        for m in index.clusters()
        if not m.is_representative and (wanted is None or m.external_id in wanted)
    )
    representatives: list[str] = []
    rows = (
        {"id": m.external_id, "representative": m.cluster, "similarity": m.similarity}
        for m in _noting(members, representatives, wanted is not None)
    )
    fmt = output_format(path, None, default="csv")
    count = write_records(rows, DROPPED_FIELDS, fmt, path)
    if wanted is None:
        return count, 0
    outside = set(representatives).difference(source.ids())
    return count, sum(r in outside for r in representatives)


def _noting(members: Iterable[Any], representatives: list[str], noted: bool) -> Iterator[Any]:
    """The members, each one's representative appended to ``representatives`` if ``noted``."""
    for member in members:
        if noted:
            representatives.append(member.cluster)
        yield member
