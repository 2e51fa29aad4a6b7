"""Stage 5: verify candidate pairs by the signature estimate and, when text is kept, exactly.

The estimate alone misjudges pairs near the threshold (its standard error is
sqrt(J(1-J)/num_perm), ~0.035 at J = 0.8 with 128 hashes), so when the index keeps text the
verdict uses the exact Jaccard of the shingle sets, computed by merging sorted hash arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from simindex.errors import InputError
from simindex.pipeline.kernels import threads_for
from simindex.pipeline.minhash import estimate_rows
from simindex.pipeline.shingle import NormalizedBatch, ShingleSets, shingle_sets
from simindex.spec import SignatureSpec

# How far below the threshold, in standard deviations of the estimate, a pair's estimate must
# fall for its exact similarity to be taken as below the threshold unread. The estimate's
# spread is at most sqrt(J(1-J)/num_perm) for J >= threshold, or up to 15% more between
# documents with fewer shingles than bins (docs/spec.md): 8 such deviations are 7 at the
# worst, a chance of ~1e-12 per true pair.
ESTIMATE_MARGIN = 8.0


def estimate_floor(threshold: float, num_perm: int) -> float:
    """The estimate below which a pair is taken to have exact Jaccard < threshold without
    computing it (0 or less: no pair is)."""
    worst = max(threshold, 0.5)  # J(1-J) is largest at 0.5
    return threshold - ESTIMATE_MARGIN * float(np.sqrt(worst * (1 - worst) / num_perm))


@dataclass(frozen=True)
class Profiles:
    """Row-aligned signatures (uint32, (n, num_perm)) and, if text is kept, shingle sets."""

    signatures: np.ndarray
    sets: ShingleSets | None

    def __len__(self) -> int:
        return self.signatures.shape[0]

    def concat(self, other: Profiles) -> Profiles:
        return Profiles.join([self, other])

    @staticmethod
    def join(parts: list[Profiles]) -> Profiles:
        """The rows of every part, in order (each array concatenated once)."""
        sets = None
        if all(p.sets is not None for p in parts):
            shifts = np.cumsum([0] + [p.sets.offsets[-1] for p in parts[:-1]])
            sets = ShingleSets(
                np.concatenate([p.sets.hashes for p in parts]),
                np.concatenate(
                    [parts[0].sets.offsets[:1]]
                    + [p.sets.offsets[1:] + shift for p, shift in zip(parts, shifts, strict=True)]
                ),
            )
        return Profiles(np.concatenate([p.signatures for p in parts]), sets)


def verified(
    doc_a: np.ndarray,
    doc_b: np.ndarray,
    ids: np.ndarray,
    signatures: np.ndarray,
    texts: NormalizedBatch | None,
    spec: SignatureSpec,
    threshold: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The pairs (doc_a[i], doc_b[i]) with similarity >= threshold, in input order, as
    (doc_a, doc_b, estimated, exact or None): compared by their documents' signatures and,
    when ``texts`` are given, exactly (``ids`` sorted; ``signatures`` (uint32, (n, num_perm))
    and the normalized ``texts`` row-aligned with them; raises InputError if a pair names a
    document not among ``ids``)."""
    sets = None if texts is None else shingle_sets(texts, spec)
    profiles = Profiles(signatures, sets)
    estimated, exact = compare(profiles, _rows(ids, doc_a), _rows(ids, doc_b))
    keep = (estimated if exact is None else exact) >= threshold
    return doc_a[keep], doc_b[keep], estimated[keep], None if exact is None else exact[keep]


def _rows(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions of ``wanted`` in the sorted ``ids``; raises InputError if one is missing."""
    rows = np.searchsorted(ids, wanted)
    found = np.zeros(wanted.shape[0], bool)
    inside = rows < ids.shape[0]
    found[inside] = ids[rows[inside]] == wanted[inside]
    missing = ~found
    if missing.any():
        raise InputError(
            f"a pair names document {int(wanted[missing][0])}, not among the documents"
        )
    return rows


def compare(
    profiles: Profiles, rows_a: np.ndarray, rows_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """(estimated Jaccard, exact Jaccard or None) of each pair of profile rows (float64)."""
    estimated = estimate_rows(profiles.signatures, rows_a, rows_b)
    if profiles.sets is None:
        return estimated, None
    return estimated, exact_jaccard(profiles.sets, rows_a, rows_b)


def exact_jaccard(sets: ShingleSets, rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """|A & B| / |A | B| of each pair of rows (two empty sets: 0)."""
    out = np.empty(rows_a.shape[0], dtype=np.float64)
    with threads_for(out.shape[0]):
        _jaccard_kernel(
            sets.hashes, sets.offsets, rows_a.astype(np.int64), rows_b.astype(np.int64), out
        )
    return out


@njit(parallel=True, cache=True, nogil=True)
def _jaccard_kernel(hashes, offsets, rows_a, rows_b, out):
    for p in prange(rows_a.shape[0]):
        i, i_end = offsets[rows_a[p]], offsets[rows_a[p] + 1]
        j, j_end = offsets[rows_b[p]], offsets[rows_b[p] + 1]
        common = intersection_size(hashes, i, i_end, j, j_end)
        union = (i_end - i) + (j_end - j) - common
        out[p] = common / union if union else 0.0


@njit(inline="always", cache=True)
def intersection_size(hashes, i, i_end, j, j_end):
    """Common values of the sorted runs hashes[i:i_end] and hashes[j:j_end] (a merge)."""
    common = 0
    while i < i_end and j < j_end:
        if hashes[i] == hashes[j]:
            common += 1
            i += 1
            j += 1
        elif hashes[i] < hashes[j]:
            i += 1
        else:
            j += 1
    return common
