"""Signing a batch of valid texts with NumPy alone: normalize, shingle, MinHash and band.

:func:`simindex.pipeline.stages.sign` wraps :func:`sign_normalized` in Arrow for executors
that pass record batches about; the in-process executor starts from Python strings and calls
:func:`sign_texts`, so a command that builds no Arrow batch never loads pyarrow, whose
libraries would stay mapped for the rest of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from simindex.pipeline import banding
from simindex.pipeline.chunking import spans
from simindex.pipeline.minhash import sign as sign_without_sets
from simindex.pipeline.minhash import signatures as signatures_of_sets
from simindex.pipeline.shingle import NormalizedBatch, ShingleSets, normalize_batch, shingle_sets
from simindex.spec import SignatureSpec

# Text signed at a time: normalizing holds a copy of the text, and the sorted shingle sets of
# verification up to 8 bytes a character, so a batch of any size signs in bounded memory.
SIGN_TEXT_BYTES = 2**19


@dataclass(frozen=True)
class Signed:
    """The signing of a batch of texts, row-aligned with them."""

    content_hashes: list[int]  # shingle.content_hash of each normalized text
    counts: np.ndarray  # int64 (n,): distinct shingles; 0 for a text that normalizes to nothing
    signatures: np.ndarray  # uint32 (n, num_perm); an empty text's row is all 0xFFFFFFFF
    keys: dict[int, np.ndarray]  # banding id -> int64 (n, bands): the signatures' band keys
    sets: ShingleSets | None  # the sorted distinct shingle hashes, when asked for


def sign_normalized(
    normalized: NormalizedBatch,
    spec: SignatureSpec,
    bandings: Mapping[int, tuple[int, int]],
    shingles: bool = False,
) -> Signed:
    """Shingle, sign and band normalized texts (``bandings``: banding id -> (bands, rows)).
    Only ``shingles`` makes the sorted shingle sets (exact verification needs them); signing
    is faster without."""
    if shingles:
        sets = shingle_sets(normalized, spec)
        signatures, counts = signatures_of_sets(sets, spec), sets.counts
    else:
        sets = None
        signatures, counts = sign_without_sets(normalized, spec)
    keys = {
        banding_id: banding.band_keys(signatures, bands, rows)
        for banding_id, (bands, rows) in bandings.items()
    }
    return Signed(normalized.content_hashes(), counts, signatures, keys, sets)


def sign_texts(
    texts: Sequence[str],
    spec: SignatureSpec,
    bandings: Mapping[int, tuple[int, int]],
    shingles: bool = False,
) -> Signed:
    """:func:`sign_normalized` of texts that are valid documents' (strings without NUL or
    lone surrogates), normalized and signed SIGN_TEXT_BYTES characters at a time."""
    characters = np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)))
    parts = [
        sign_normalized(normalize_batch(texts[lo:hi]), spec, bandings, shingles)
        for lo, hi in spans(characters, SIGN_TEXT_BYTES)
    ]
    if not parts:  # no texts
        return sign_normalized(normalize_batch(texts), spec, bandings, shingles)
    return parts[0] if len(parts) == 1 else _concatenated(parts)


def _concatenated(parts: list[Signed]) -> Signed:
    """The parts' rows, one after another, as one Signed."""
    sets = None
    if parts[0].sets is not None:
        each = [part.sets for part in parts if part.sets is not None]
        counts = np.concatenate([s.counts for s in each])
        offsets = np.zeros(counts.shape[0] + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        sets = ShingleSets(np.concatenate([s.hashes for s in each]), offsets)
    return Signed(
        content_hashes=[h for part in parts for h in part.content_hashes],
        counts=np.concatenate([part.counts for part in parts]),
        signatures=np.concatenate([part.signatures for part in parts]),
        keys={key: np.concatenate([part.keys[key] for part in parts]) for key in parts[0].keys},
        sets=sets,
    )
