"""Stage 3: LSH banding: the S-curve, parameter tuning, and band keys.

A signature of num_perm values is cut into ``bands`` bands of ``rows`` consecutive values
(bands * rows <= num_perm; values past bands * rows are unused). Two documents are a
candidate pair when they agree on every row of at least one band. If one row agrees with
probability s (their Jaccard similarity), then

    P(candidate | s) = 1 - (1 - s**rows) ** bands                       (the S-curve)

Its steepest point is near (1 / bands) ** (1 / rows) (:func:`approx_threshold`), and it is
inverted exactly by :func:`similarity_at`: s = (1 - (1 - p) ** (1 / bands)) ** (1 / rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simindex.defaults import DEFAULT_RECALL
from simindex.errors import ParameterError


def check_banding(bands: int, rows: int, num_perm: int) -> None:
    """Raise ParameterError unless 1 <= bands, 1 <= rows and bands * rows <= num_perm."""
    if not (isinstance(bands, int) and isinstance(rows, int)) or bands < 1 or rows < 1:
        raise ParameterError(f"bands and rows must be positive integers, got {bands} x {rows}")
    if bands * rows > num_perm:
        raise ParameterError(
            f"bands*rows must be <= num_perm, got {bands}*{rows}={bands * rows} > {num_perm}"
        )


def candidate_probability(s, bands: int, rows: int):
    """P(candidate) = 1 - (1 - s**rows)**bands, for a similarity or an array of them."""
    s = np.asarray(s, dtype=np.float64)
    if np.any((s < 0) | (s > 1)):
        raise ParameterError("similarity must be within [0, 1]")
    # log1p/expm1 keep precision when s**rows is tiny or P is close to 1.
    with np.errstate(divide="ignore"):  # s = 1: log1p(-1) = -inf, and P = 1 as it should
        result = -np.expm1(bands * np.log1p(-(s**rows)))
    return float(result) if result.ndim == 0 else result


def _probability(s: float, bands: int, rows: int) -> float:
    """Scalar S-curve (math, not numpy: the tuner evaluates it tens of thousands of times)."""
    return -math.expm1(bands * math.log1p(-(s**rows))) if s < 1 else 1.0


def similarity_at(p: float, bands: int, rows: int) -> float:
    """The similarity at which the S-curve reaches probability p (exact inverse)."""
    if not 0 <= p <= 1:
        raise ParameterError(f"probability must be within [0, 1], got {p}")
    return float((-math.expm1(math.log1p(-p) / bands)) ** (1 / rows)) if p < 1 else 1.0


def approx_threshold(bands: int, rows: int) -> float:
    """(1 / bands) ** (1 / rows): roughly where the S-curve is steepest."""
    return (1 / bands) ** (1 / rows)


@dataclass(frozen=True)
class Banding:
    """One LSH configuration and what its S-curve does at the tuning targets."""

    bands: int
    rows: int
    p_at_low: float
    p_at_high: float

    @property
    def hashes_used(self) -> int:
        return self.bands * self.rows


@dataclass(frozen=True)
class TuneResult:
    """Outcome of :func:`tune`.

    feasible: every (bands, rows) within num_perm that meets both targets, best first.
    chosen: the first feasible one; if there is none, the best compromise: the banding that
        meets the recall target with the fewest low-similarity candidates, or failing that
        the one with the highest recall.
    num_perm_needed: the smallest signature length with which some banding meets both
        targets (None if none up to ``max_num_perm``).
    low_crossing / high_crossing: similarities where the chosen curve equals p_low / p_high.
    """

    num_perm: int
    s_low: float
    p_low: float
    s_high: float
    p_high: float
    feasible: list[Banding]
    chosen: Banding
    num_perm_needed: int | None
    low_crossing: float
    high_crossing: float

    @property
    def meets_targets(self) -> bool:
        return bool(self.feasible)


def _check_targets(s_low: float, p_low: float, s_high: float, p_high: float) -> None:
    for name, value in (("s_low", s_low), ("p_low", p_low), ("s_high", s_high), ("p_high", p_high)):
        if not 0 <= value <= 1:
            raise ParameterError(f"{name} must be within [0, 1], got {value}")
    if not s_low < s_high:
        raise ParameterError(
            f"the low similarity must be below the high one, got {s_low} >= {s_high}"
        )
    if not 0 < s_high < 1 or not 0 < p_high < 1:
        raise ParameterError("s_high and p_high must be strictly between 0 and 1")


def _fewest_bands(rows: int, s_high: float, p_high: float) -> int:
    """Smallest bands with P(s_high) >= p_high for this many rows (capped at 2**62)."""
    per_band = math.log1p(-(s_high**rows))
    if per_band == 0 or math.log1p(-p_high) / per_band > 2**62:
        return 2**62
    bands = math.ceil(math.log1p(-p_high) / per_band)
    while _probability(s_high, bands, rows) < p_high:  # guard against rounding
        bands += 1
    return max(bands, 1)


def tune(
    num_perm: int,
    s_low: float,
    p_low: float,
    s_high: float,
    p_high: float,
    max_num_perm: int = 1 << 16,
) -> TuneResult:
    """Choose (bands, rows) so that P(s_low) <= p_low and P(s_high) >= p_high.

    Rule: for each rows, the fewest bands that reach p_high at s_high (more bands only add
    candidates); among those, the rows that give the lowest P(s_low), ties to fewer hashes.
    Recall comes first because verification can drop false candidates but never recover a
    missed pair.
    """
    _check_targets(s_low, p_low, s_high, p_high)
    if num_perm < 1:
        raise ParameterError(f"num_perm must be positive, got {num_perm}")

    def banding(bands: int, rows: int) -> Banding:
        return Banding(
            bands, rows, _probability(s_low, bands, rows), _probability(s_high, bands, rows)
        )

    def order(b: Banding) -> tuple[float, int]:
        return (b.p_at_low, b.hashes_used)

    everything = [
        banding(bands, rows)
        for rows in range(1, num_perm + 1)
        for bands in range(1, num_perm // rows + 1)
    ]
    feasible = sorted(
        (b for b in everything if b.p_at_low <= p_low and b.p_at_high >= p_high), key=order
    )
    # Per rows, the fewest bands that meet the recall target; if any banding is feasible,
    # the best of these is (adding bands only raises P(s_low)).
    fewest = [(_fewest_bands(rows, s_high, p_high), rows) for rows in range(1, num_perm + 1)]
    recall_met = [banding(b, r) for b, r in fewest if b * r <= num_perm]
    if recall_met:
        chosen = min(recall_met, key=order)
    else:
        chosen = max(everything, key=lambda b: (b.p_at_high, -b.p_at_low))

    return TuneResult(
        num_perm=num_perm,
        s_low=s_low,
        p_low=p_low,
        s_high=s_high,
        p_high=p_high,
        feasible=feasible,
        chosen=chosen,
        num_perm_needed=_smallest_num_perm(s_low, p_low, s_high, p_high, max_num_perm),
        low_crossing=similarity_at(p_low, chosen.bands, chosen.rows),
        high_crossing=similarity_at(p_high, chosen.bands, chosen.rows),
    )


def _smallest_num_perm(
    s_low: float, p_low: float, s_high: float, p_high: float, max_num_perm: int
) -> int | None:
    """min over rows of rows * fewest_bands(rows) among bandings meeting both targets."""
    best = None
    rows = 1
    while rows <= max_num_perm and (best is None or rows < best):
        bands = _fewest_bands(rows, s_high, p_high)
        if bands * rows <= max_num_perm and _probability(s_low, bands, rows) <= p_low:
            best = bands * rows if best is None else min(best, bands * rows)
        rows += 1
    return best


def tune_threshold(num_perm: int, threshold: float, recall: float = DEFAULT_RECALL) -> TuneResult:
    """Banding for one similarity threshold t: P(t) >= recall, fewest candidates at t / 2.

    Equivalent to ``tune(num_perm, t / 2, 1.0, t, recall)``: the low target only ranks.
    """
    if not 0 < threshold < 1:
        raise ParameterError(f"threshold must be strictly between 0 and 1, got {threshold}")
    return tune(num_perm, threshold / 2, 1.0, threshold, recall)


def banding_for(num_perm: int, threshold: float) -> tuple[int, int]:
    """(bands, rows) a new index takes for ``threshold`` in (0, 1]: the tuner's choice
    (:func:`tune_threshold`; a threshold of 1 is tuned as 0.99)."""
    chosen = tune_threshold(num_perm, min(threshold, 0.99)).chosen
    return chosen.bands, chosen.rows


def band_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """Band keys, int64 of shape (n, bands), every key in [0, 2**63).

    Key j hashes (j, v[j*rows], ..., v[j*rows + rows - 1]) under TAG_BAND_KEY, so equal
    rows in different bands give different keys.
    """
    # The kernel (numba) loads here: the S-curve and the tuner above serve commands that
    # make no keys without it.
    from simindex.pipeline.hashing import band_key_kernel
    from simindex.pipeline.kernels import threads_for

    check_banding(bands, rows, signatures.shape[1])
    out = np.empty((signatures.shape[0], bands), dtype=np.int64)
    with threads_for(out.shape[0]):
        band_key_kernel(np.ascontiguousarray(signatures, dtype=np.uint32), bands, rows, out)
    return out
