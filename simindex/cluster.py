"""Stage 6: duplicate clusters = connected components of the verified pairs.

Each cluster is named by its representative's document id. Representative rules:
``earliest`` (the smallest document id, i.e. ingested first) and ``longest`` (the most
distinct shingles; ties to the earliest). Same pairs in, same clusters out, on any backend.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numba import njit

Rule = Literal["earliest", "longest"]
RULES: tuple[Rule, ...] = ("earliest", "longest")


def components(doc_a: np.ndarray, doc_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the graph with edges (doc_a[i], doc_b[i]).

    Returns (documents, component): every document on an edge (sorted, int64) and the
    smallest document id of its component. Cost O(edges * log), memory ~40 bytes an edge.
    """
    ends = np.concatenate((doc_a, doc_b))
    ends.sort()  # in place, then positions by binary search: no unique(return_inverse)'s
    first = np.ones(ends.shape[0], dtype=bool)  # argsort and inverse arrays
    first[1:] = ends[1:] != ends[:-1]
    documents = ends[first]
    del ends, first
    local_a, local_b = np.searchsorted(documents, doc_a), np.searchsorted(documents, doc_b)
    roots = _union_find(documents.shape[0], local_a, local_b)
    return documents, documents[roots]


@njit(cache=True)
def _union_find(n, a, b):
    parent = np.arange(n)
    for i in range(a.shape[0]):
        x, y = a[i], b[i]
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        while parent[y] != y:
            parent[y] = parent[parent[y]]
            y = parent[y]
        if x != y:  # the smaller index (= smaller document id) becomes the root
            if x < y:
                parent[y] = x
            else:
                parent[x] = y
    for i in range(n):
        root = i
        while parent[root] != root:
            root = parent[root]
        parent[i] = root
    return parent


def representatives(
    documents: np.ndarray, component: np.ndarray, shingle_counts: np.ndarray, rule: Rule
) -> np.ndarray:
    """The representative document id of each document's component, by ``rule``.

    ``shingle_counts`` is aligned with ``documents`` (used by "longest").
    """
    if rule == "earliest" or not documents.size:
        return component
    if rule != "longest":
        raise ValueError(f"unknown representative rule {rule!r}; choose one of {RULES}")
    # Per component: the largest count, then the smallest id.
    order = np.lexsort((documents, -shingle_counts, component))
    first = np.r_[True, component[order][1:] != component[order][:-1]]
    chosen = documents[order][first]  # one per component, in component order
    labels = np.unique(component)
    return chosen[np.searchsorted(labels, component)]
