"""Stage 6: duplicate clusters = connected components of the verified pairs.

Each cluster is named by its representative's document id. Representative rules:
``earliest`` (the smallest document id, i.e. ingested first) and ``longest`` (the most
distinct shingles; ties to the earliest). Same pairs in, same clusters out, on any backend.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numba import njit

from simindex.pipeline.runs import pair_documents

Rule = Literal["earliest", "longest"]
RULES: tuple[Rule, ...] = ("earliest", "longest")


def components(doc_a: np.ndarray, doc_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the graph with edges (doc_a[i], doc_b[i]).

    Returns (documents, component): every document on an edge (sorted, int64) and the
    smallest document id of its component. Cost O(edges * log), memory ~40 bytes an edge.
    """
    documents = pair_documents(doc_a, doc_b)
    parent = np.arange(documents.shape[0])
    unite(parent, np.searchsorted(documents, doc_a), np.searchsorted(documents, doc_b))
    return documents, documents[flatten(parent)]


@njit(cache=True, nogil=True)
def unite(parent, a, b):
    """Join the sets of a[i] and b[i] (indices into ``parent``, a union-find forest, each
    entry its index's parent; np.arange(n) to start), edge after edge: the smaller root
    becomes the root, so a set's root is its smallest index. Called edges a block at a time
    when they don't fit in memory at once (candidates.Candidates.by_component)."""
    for i in range(a.shape[0]):
        x, y = a[i], b[i]
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        while parent[y] != y:
            parent[y] = parent[parent[y]]
            y = parent[y]
        if x < y:
            parent[y] = x
        elif y < x:
            parent[x] = y


@njit(cache=True, nogil=True)
def flatten(parent):
    """Point every entry of a union-find forest (see unite) at its root; returns it."""
    for i in range(parent.shape[0]):
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
