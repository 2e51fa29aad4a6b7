"""datasketch's MinHashLSH interface, kept in a simindex index on SQLite or PostgreSQL.

    from simindex.datasketch import MinHashLSH        # instead of: from datasketch import ...
    lsh = MinHashLSH(threshold=0.8, num_perm=128, url="postgresql://.../db")
    lsh.insert("doc-1", minhash)                     # datasketch MinHash / LeanMinHash
    lsh.query(minhash)                               # -> ["doc-1"]

The index records datasketch's hash family, seed and num_perm as its signature scheme
(spec.datasketch_spec), so it refuses simindex's text signatures and texts, and every other
process that opens the same URL (and schema) gets the same answers. See docs/datasketch.md.
"""

from __future__ import annotations

import base64
import math
import os
import pickle
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from simindex.errors import DatabaseError, DuplicateIdError, InputError, NoIndexError
from simindex.index import Index
from simindex.pipeline.banding import approx_threshold
from simindex.spec import DATASKETCH_PREFIX, datasketch_spec

__all__ = ["MinHashLSH", "datasketch_params", "decode_key", "encode_key"]

# The stored external id of a key: a str as itself behind a tag, any other picklable key
# pickled (a fixed protocol, so equal keys give equal ids) and base64-encoded.
STR_TAG = "s:"
PICKLED_TAG = "p:"
PICKLE_PROTOCOL = 4
# datasketch's default buffer of a session.
SESSION_BUFFER = 50_000
# The seed and hash family of datasketch's MinHash by default (what a bare array is taken as).
DEFAULT_SEED = 1
DEFAULT_FAMILY = "affine32"


def encode_key(key: Hashable) -> str:
    """The external id that stores ``key``: ``"s:" + key`` for a str, else ``"p:"`` and the
    base64 of its pickle (protocol 4). Equal keys of str, int, bytes and tuples of them get
    equal ids; equal sets built in another order may not (their pickle follows it)."""
    if type(key) is str:
        return STR_TAG + key
    return PICKLED_TAG + base64.b64encode(pickle.dumps(key, PICKLE_PROTOCOL)).decode("ascii")


def decode_key(external_id: str) -> Hashable:
    """The key an external id made by :func:`encode_key` stores."""
    if external_id.startswith(STR_TAG):
        return external_id[len(STR_TAG) :]
    return pickle.loads(base64.b64decode(external_id[len(PICKLED_TAG) :]))


def datasketch_params(
    threshold: float, num_perm: int, weights: tuple[float, float] = (0.5, 0.5)
) -> tuple[int, int]:
    """(bands, rows) as datasketch's MinHashLSH picks them for ``threshold``: the grid point
    of least ``weights[0] * FP + weights[1] * FN``, FP and FN being the integrals of the
    S-curve below and of its complement above the threshold (scipy's quad, as datasketch
    computes them, so that the choice is the same). Those integrals are areas, not
    probabilities: the S-curve is no density over similarities. simindex.tune chooses by
    the probability at the threshold instead (docs/datasketch.md)."""
    try:
        from scipy.integrate import quad
    except ImportError:  # datasketch depends on scipy, simindex does not
        raise ValueError(
            "choosing bands and rows from a threshold as datasketch does needs scipy: "
            "pip install scipy, or pass params=(bands, rows)"
        ) from None
    false_positive_weight, false_negative_weight = weights
    min_error = math.inf
    best = (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, int(num_perm / b) + 1):
            fp, _ = quad(lambda s: 1 - (1 - s ** float(r)) ** float(b), 0.0, threshold)  # noqa: B023
            fn, _ = quad(lambda s: 1 - (1 - (1 - s ** float(r)) ** float(b)), threshold, 1.0)  # noqa: B023
            error = fp * false_positive_weight + fn * false_negative_weight
            if error < min_error:
                min_error, best = error, (b, r)
    return best


class MinHashLSH:
    """datasketch's ``MinHashLSH``, persisted: the same constructor and methods, over the
    simindex index at ``url`` (PostgreSQL or SQLite; default: $SIMINDEX_DATABASE_URL, else
    ./simindex.db) in ``schema`` (default $SIMINDEX_SCHEMA), created by the first insert.

    threshold, num_perm, weights, params: as datasketch's; bands and rows are ``params`` or
    datasketch's own choice for the threshold (:func:`datasketch_params`), so answers are
    datasketch's. An existing index must have this num_perm and bands x rows (ValueError
    otherwise). storage_config, prepickle and hashfunc are accepted for compatibility and
    not used: the database is the storage and keys are stored as :func:`encode_key` makes.

    MinHashes: datasketch ``MinHash``/``LeanMinHash`` objects (their ``hashvalues``,
    ``seed`` and ``scheme``), or hash values as a 1-d NumPy array (taken as seed 1,
    "affine32"). The first one inserted decides the index's seed and hash family, and a
    MinHash of another is a ValueError, as one of a wrong length is.

    Each insert and remove is one transaction; a session's buffer is written in one
    transaction per flush (when it is full, when the session ends, and before any read or
    other write of this object, so that reads see what was inserted). A key already
    indexed makes an insert fail with ValueError; in a session, that is found when the
    buffer is flushed, and then none of that flush is written.
    """

    def __init__(
        self,
        threshold: float = 0.9,
        num_perm: int = 128,
        weights: tuple[float, float] = (0.5, 0.5),
        params: tuple[int, int] | None = None,
        storage_config: dict | None = None,
        prepickle: bool | None = None,
        hashfunc: Any = None,
        *,
        url: str | os.PathLike[str] | None = None,
        schema: str | None = None,
    ) -> None:
        if threshold > 1.0 or threshold < 0.0:
            raise ValueError("threshold must be in [0.0, 1.0]")
        if num_perm < 2:
            raise ValueError("Too few permutation functions")
        if any(w < 0.0 or w > 1.0 for w in weights):
            raise ValueError("Weight must be in [0.0, 1.0]")
        if sum(weights) != 1.0:
            raise ValueError("Weights must sum to 1.0")
        if params is not None:
            b, r = params
            if b * r > num_perm:
                raise ValueError(
                    f"b*r must be <= num_perm, got {b}*{r}={b * r} > {num_perm}: pass num_perm "
                    "or smaller params"
                )
        else:
            b, r = datasketch_params(threshold, num_perm, weights)
        if b < 2:
            raise ValueError("The number of bands are too small (b < 2)")
        self.threshold, self.h, self.b, self.r = threshold, num_perm, b, r
        self.hashranges = [(i * r, (i + 1) * r) for i in range(b)]
        self.url = url if url is not None else os.environ.get("SIMINDEX_DATABASE_URL")
        self.schema = schema if schema is not None else os.environ.get("SIMINDEX_SCHEMA")
        # (seed, hash family) of the MinHashes indexed: the index's, or the first inserted.
        self._scheme: tuple[int, str] | None = None
        self._session: _Session | None = None
        self._index: Index | None = None
        self._open()

    # -- the index -------------------------------------------------------------------------

    def _open(self) -> Index | None:
        """The index at the URL, opened (and checked) once it exists; None before."""
        if self._index is None:
            try:
                index = Index.open(self.url, schema=self.schema)
            except NoIndexError:
                return None
            self._use(index)
        return self._index

    def _use(self, index: Index) -> None:
        spec = index.spec
        where = f"the index at {index.url}"
        try:
            if spec.signs_text:
                raise ValueError(
                    f"{where} holds simindex text signatures ({spec.scheme}), not datasketch "
                    "MinHashes: use another URL or schema"
                )
            if spec.num_perm != self.h:
                raise ValueError(
                    f"{where} holds MinHashes of num_perm {spec.num_perm}, not {self.h}: pass "
                    f"num_perm={spec.num_perm}"
                )
            active = next(b for b in index.bandings() if b["is_active"])
            if (active["bands"], active["rows"]) != (self.b, self.r):
                raise ValueError(
                    f"{where} has {active['bands']} bands of {active['rows']} rows, not "
                    f"{self.b} x {self.r}: pass params=({active['bands']}, {active['rows']}), "
                    "or re-band it (Index.reband)"
                )
            self._check_scheme(spec.seed, spec.scheme.removeprefix(DATASKETCH_PREFIX))
        except BaseException:
            index.close()
            raise
        self._index = index

    def _writable(self) -> Index:
        """The index, created for the scheme of the MinHashes seen if there is none yet."""
        index = self._open()
        if index is not None:
            return index
        seed, family = self._scheme or (DEFAULT_SEED, DEFAULT_FAMILY)
        spec = datasketch_spec(self.h, seed, family)
        threshold = self.threshold if self.threshold > 0 else approx_threshold(self.b, self.r)
        try:
            self._use(
                Index.create(self.url, spec, threshold=threshold, bands=self.b, rows=self.r,
                             keep_text=False, schema=self.schema)
            )  # fmt: skip
        except DatabaseError:
            if self._open() is None:  # not made meanwhile by another writer
                raise
        assert self._index is not None
        return self._index

    def _check_scheme(self, seed: int, family: str) -> None:
        if self._scheme is None:
            self._scheme = (seed, family)
        elif self._scheme != (seed, family):
            raise ValueError(
                f"MinHash of seed {seed} and scheme {family!r} does not match seed "
                f"{self._scheme[0]} and scheme {self._scheme[1]!r} of the MinHashes of this "
                "index: their hash values can't be compared"
            )

    def _values(self, minhash: Any) -> np.ndarray:
        """The hash values of a MinHash (or array), checked like datasketch checks them."""
        values = np.asarray(getattr(minhash, "hashvalues", minhash))
        if values.ndim != 1 or values.shape[0] != self.h:
            raise ValueError(f"Expecting minhash with length {self.h}, got {values.shape[0]}")
        if hasattr(minhash, "hashvalues"):
            self._check_scheme(
                int(getattr(minhash, "seed", DEFAULT_SEED)),
                getattr(minhash, "scheme", DEFAULT_FAMILY),
            )
        return values

    def close(self) -> None:
        """Flush an open session and close the database connections."""
        self._flush()
        if self._index is not None:
            self._index.close()
            self._index = None

    def __enter__(self) -> MinHashLSH:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- datasketch's interface ------------------------------------------------------------

    def insert(self, key: Hashable, minhash: Any, check_duplication: bool = True) -> None:
        """Index ``key`` with ``minhash``; ValueError if the key is already indexed. With
        ``check_duplication=False`` an indexed key's MinHash is replaced (datasketch would
        file the key under both)."""
        values = self._values(minhash)
        self._flush()
        self._add([encode_key(key)], values[np.newaxis, :], check_duplication, repr(key))

    def query(self, minhash: Any) -> list[Hashable]:
        """The keys sharing a bucket with ``minhash`` in any band (unverified candidates,
        in no order), as datasketch answers."""
        values = self._values(minhash)
        self._flush()
        index = self._open()
        return [] if index is None else [decode_key(i) for i in index.query_signature(values)]

    def __contains__(self, key: Hashable) -> bool:
        self._flush()
        index = self._open()
        return index is not None and bool(index.content_hashes([encode_key(key)]))

    def remove(self, key: Hashable) -> None:
        """Remove ``key`` from the index; ValueError if it is not indexed."""
        self._flush()
        self._remove([encode_key(key)], repr(key))

    def is_empty(self) -> bool:
        self._flush()
        index = self._open()
        return index is None or len(index) == 0

    def get_counts(self) -> list[dict[int, int]]:
        """Per band (b of them), bucket -> the number of keys in it; a bucket is named by
        its band key (an int64), where datasketch uses the band's hash values as bytes."""
        self._flush()
        index = self._open()
        return [{} for _ in range(self.b)] if index is None else index.bucket_counts()

    def insertion_session(self, buffer_size: int = SESSION_BUFFER) -> InsertionSession:
        """A context manager whose ``insert`` buffers up to ``buffer_size`` inserts and
        writes them in one transaction."""
        return InsertionSession(self, buffer_size)

    def deletion_session(self, buffer_size: int = SESSION_BUFFER) -> DeletionSession:
        """A context manager whose ``remove`` buffers up to ``buffer_size`` removals and
        makes them in one transaction; ValueError there if a key is not indexed (and none
        of that flush is removed)."""
        return DeletionSession(self, buffer_size)

    # -- writes ----------------------------------------------------------------------------

    def _add(
        self, keys: list[str], signatures: np.ndarray, check_duplication: bool, shown: str
    ) -> None:
        """``shown``: the key, or the keys of a session's flush, as an error names them."""
        index = self._writable()
        try:
            index.add_signatures(
                keys, signatures, on_duplicate="fail" if check_duplication else "replace"
            )
        except DuplicateIdError:
            raise ValueError(f"The given key already exists: {shown}") from None

    def _remove(self, keys: list[str], shown: str) -> None:
        index = self._open()
        try:
            if index is None:
                raise InputError("no index yet")
            index.delete(keys, must_exist=True)
        except InputError:
            raise ValueError(f"The given key does not exist: {shown}") from None

    def _flush(self) -> None:
        if self._session is not None:
            self._session.flush()

    @contextmanager
    def _in_session(self, session: _Session) -> Iterator[None]:
        self._flush()
        self._session = session
        try:
            yield
        finally:
            self._session = None


class _Session:
    """A buffer of writes that an ``lsh`` makes in one transaction per flush."""

    def __init__(self, lsh: MinHashLSH, buffer_size: int):
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be positive, got {buffer_size}")
        self.lsh = lsh
        self.buffer_size = buffer_size
        self._scope = lsh._in_session(self)

    def __enter__(self) -> _Session:
        self._scope.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self.close()
        finally:
            self._scope.__exit__(*exc_info)

    def close(self) -> None:
        self.flush()

    def flush(self) -> None:
        raise NotImplementedError


class InsertionSession(_Session):
    """See MinHashLSH.insertion_session."""

    def __init__(self, lsh: MinHashLSH, buffer_size: int):
        super().__init__(lsh, buffer_size)
        self._buffer: dict[str, np.ndarray] = {}
        self._check_duplication = True

    def insert(self, key: Hashable, minhash: Any, check_duplication: bool = True) -> None:
        """Buffer an insert (see MinHashLSH.insert); a key buffered twice is a ValueError
        at once."""
        values = self.lsh._values(minhash)
        encoded = encode_key(key)
        if check_duplication != self._check_duplication:
            self.flush()  # one flush, one mode: keys fail or replace
            self._check_duplication = check_duplication
        if check_duplication and encoded in self._buffer:
            raise ValueError("The given key already exists")
        self._buffer[encoded] = values
        if len(self._buffer) >= self.buffer_size:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        keys, signatures = list(self._buffer), np.stack(list(self._buffer.values()))
        self._buffer.clear()
        shown = f"one of the {len(keys)} keys of this flush (none of them was written)"
        self.lsh._add(keys, signatures, self._check_duplication, shown)


class DeletionSession(_Session):
    """See MinHashLSH.deletion_session."""

    def __init__(self, lsh: MinHashLSH, buffer_size: int):
        super().__init__(lsh, buffer_size)
        self._buffer: dict[str, None] = {}

    def remove(self, key: Hashable) -> None:
        """Buffer a removal; a key buffered twice is a ValueError at once."""
        encoded = encode_key(key)
        if encoded in self._buffer:
            raise ValueError("The given key does not exist")
        self._buffer[encoded] = None
        if len(self._buffer) >= self.buffer_size:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        keys = list(self._buffer)
        self._buffer.clear()
        self.lsh._remove(keys, f"one of the {len(keys)} keys of this flush (none was removed)")
