"""Stage 6: duplicate clusters of the verified pairs, each named by its representative.

A :class:`~simindex.policies.ClusterPolicy` orders the documents (:func:`ranks`, a pure
function of each document's ingestion order, external id, shingle count and metadata value)
and says how pairs make clusters: ``star`` (in that order, the best unclaimed document
claims every unclaimed document paired with it, so every member is paired with its own
representative) or ``components`` (connected components, represented by their best
document). Both depend only on the pairs and the documents' fields, never on batches,
workers or the order pairs arrive in, and both work a connected component at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from simindex.pipeline.runs import pair_documents
from simindex.policies import ClusterPolicy


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


@dataclass(frozen=True)
class RankFields:
    """What a policy ranks documents by, aligned with a sorted int64 array of document ids:
    ``order`` (int64, ingestion order: the document id locally, the input position on
    Spark), ``external_ids`` (None where the policy has no ties to break: see
    ClusterPolicy.ties_by_external_id), ``lengths`` (int64 distinct shingles), ``content_hashes``
    (int64, of the normalized text: equal for exact copies) and ``values`` (the keep_by
    field of each document's metadata, None when it lacks it; None when the policy has no
    keep_by)."""

    order: np.ndarray
    external_ids: Sequence[str] | None
    lengths: np.ndarray
    content_hashes: np.ndarray
    values: Sequence[Any] | None = None


def ranks(policy: ClusterPolicy, fields: RankFields) -> np.ndarray:
    """Each document's position (int64, 0 = kept first) in the policy's order."""
    count = fields.order.shape[0]
    if policy.keep in ("earliest", "latest") and policy.keep_by is None:  # no ties
        sign = 1 if policy.keep == "earliest" else -1
        order = np.argsort(sign * fields.order, kind="stable")
    else:
        names = np.asarray(fields.external_ids, dtype=object)
        by_id = np.unique(names, return_inverse=True)[1].reshape(count).astype(np.int64)
        if policy.keep_by is not None:
            order = _by_value(fields.values or [None] * count, by_id, policy.keep_order == "max")
        else:
            sign = -1 if policy.keep == "longest" else 1
            order = np.lexsort((by_id, sign * fields.lengths))
    rank = np.empty(count, dtype=np.int64)
    rank[order] = np.arange(count, dtype=np.int64)
    return rank


def _by_value(values: Sequence[Any], by_id: np.ndarray, largest_first: bool) -> np.ndarray:
    """Indices of ``values`` in keep_by order: present values (numbers before texts, then
    by value, largest first if ``largest_first``), then the missing; ties by ``by_id``."""
    keys = [_comparable(v) for v in values]
    by_name = sorted(range(len(keys)), key=lambda i: by_id[i])
    present = [i for i in by_name if keys[i] is not None]
    # A stable sort keeps the by-id order among equal values, reversed or not.
    present.sort(key=lambda i: keys[i], reverse=largest_first)
    return np.array(present + [i for i in by_name if keys[i] is None], dtype=np.int64)


def _comparable(value: Any) -> tuple[int, Any] | None:
    """A metadata value as a key all values compare by: (0, number) or (1, text); None
    for a missing one (None or NaN). Other JSON values compare by their sorted JSON text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool | int | float):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    import json

    return (1, json.dumps(value, sort_keys=True))


def clusters_of(
    doc_a: np.ndarray,
    doc_b: np.ndarray,
    policy: ClusterPolicy,
    fields_of: Callable[[np.ndarray], RankFields],
) -> tuple[np.ndarray, np.ndarray]:
    """The clusters of the edges (doc_a[i], doc_b[i]) (int64 document ids) under
    ``policy``: (documents, representatives), every document on an edge (sorted) and its
    representative's id. ``fields_of(documents)`` gives what :func:`ranks` orders by."""
    documents = pair_documents(doc_a, doc_b)
    if not documents.size:
        return documents, documents.copy()
    fields = fields_of(documents)
    rank = ranks(policy, fields)
    if policy.mode == "star":
        return documents, stars(documents, rank, doc_a, doc_b, fields.content_hashes)
    return documents, representatives(documents, components(doc_a, doc_b)[1], rank)


def representatives(documents: np.ndarray, component: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The best-ranked (smallest ``rank``) document id of each document's component;
    arrays aligned with ``documents``."""
    if not documents.size:
        return component
    order = np.lexsort((rank, component))
    first = np.r_[True, component[order][1:] != component[order][:-1]]
    chosen = documents[order][first]  # one per component, in component order
    labels = np.unique(component)
    return chosen[np.searchsorted(labels, component)]


def stars(
    documents: np.ndarray,
    rank: np.ndarray,
    doc_a: np.ndarray,
    doc_b: np.ndarray,
    content_hashes: np.ndarray,
) -> np.ndarray:
    """Star clusters of the edges (doc_a[i], doc_b[i]): in ``rank`` order, a document not
    yet claimed becomes a representative and claims every unclaimed neighbour. Returns each
    document's representative id, aligned with ``documents`` (sorted, every edge's ends).

    Exact copies (equal ``content_hashes``) are one node: a copy's similarity to any
    document is its twin's, so a representative claims its copies and all their neighbours
    (the hot-bucket rule links a bucket's copies to one member, not to each other).
    """
    group = np.unique(content_hashes, return_inverse=True)[1].reshape(-1)
    group = group.astype(np.int32 if documents.shape[0] < 2**31 else np.int64)
    by_rank = np.lexsort((rank, group))  # each group's best document first
    best = by_rank[np.r_[True, group[by_rank][1:] != group[by_rank][:-1]]]
    visit = np.argsort(rank[best])  # the groups, best-ranked first (ranks are distinct)
    starts, neighbours = _adjacency(
        group[np.searchsorted(documents, doc_a)],
        group[np.searchsorted(documents, doc_b)],
        best.shape[0],
    )
    return documents[best[_claim(visit, starts, neighbours)[group]]]


@njit(cache=True, nogil=True)
def _adjacency(a, b, nodes):
    """The graph of the edges (a[i], b[i]) between ``nodes`` nodes, loops left out, as
    (starts, neighbours): node i's neighbours are neighbours[starts[i] : starts[i + 1]].
    A counting sort: two arrays the size of the edges, however many they are."""
    starts = np.zeros(nodes + 1, dtype=np.int64)
    for i in range(a.shape[0]):
        if a[i] != b[i]:
            starts[a[i] + 1] += 1
            starts[b[i] + 1] += 1
    for i in range(nodes):
        starts[i + 1] += starts[i]
    filled = starts[:-1].copy()
    neighbours = np.empty(starts[nodes], dtype=a.dtype)
    for i in range(a.shape[0]):
        if a[i] != b[i]:
            neighbours[filled[a[i]]] = b[i]
            filled[a[i]] += 1
            neighbours[filled[b[i]]] = a[i]
            filled[b[i]] += 1
    return starts, neighbours


@njit(cache=True, nogil=True)
def _claim(visit, starts, neighbours):
    """Greedy star cover: ``visit`` the nodes in order; an unclaimed one claims itself and
    its unclaimed ``neighbours[starts[i]:starts[i + 1]]``. Each node's claimer's index."""
    claimer = np.full(starts.shape[0] - 1, -1, dtype=np.int64)
    for i in visit:
        if claimer[i] == -1:
            claimer[i] = i
            for j in neighbours[starts[i] : starts[i + 1]]:
                if claimer[j] == -1:
                    claimer[j] = i
    return claimer
