"""Cutting work into chunks of bounded cost: every stage that must hold a bounded amount at a
time (signing, a COPY, verification, candidate pairs, the evaluation's shingling) cuts its
items this one way; and overlapping the stage that makes chunks with the one that uses them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

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


def ahead(items: Iterable[Any], function: Callable[[Any], Any] | None = None) -> Iterator[Any]:
    """function(item) (or the item itself) for each item, in order, while the caller uses the
    previous result: a worker thread takes the next item and computes on it, so reading and
    signing a batch overlap writing the one before (the kernels and NumPy release the GIL,
    and the driver does while it waits). At most two results exist at a time."""
    items = iter(items)
    done = object()

    def produce() -> Any:
        item = next(items, done)
        return item if item is done or function is None else function(item)

    with ThreadPoolExecutor(max_workers=1) as worker:
        pending = worker.submit(produce)
        while (result := pending.result()) is not done:
            pending = worker.submit(produce)
            yield result
