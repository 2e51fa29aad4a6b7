"""Cutting work into chunks of bounded cost: every stage that must hold a bounded amount at a
time (signing, a COPY, verification, candidate pairs, the evaluation's shingling) cuts its
items this one way."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def spans(cumulative: np.ndarray, budget: int) -> Iterator[tuple[int, int]]:
    """[lo, hi) ranges of items, each item's cost summed in ``cumulative``, that cost about
    ``budget`` each (at least one item per range)."""
    lo, total = 0, cumulative.shape[0]
    while lo < total:
        spent = cumulative[lo - 1] if lo else 0
        hi = max(lo + 1, int(np.searchsorted(cumulative, spent + budget, side="right")))
        yield lo, hi
        lo = hi
