"""Star clusters against a plain reading of their rule, on random graphs with exact copies."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simindex.pipeline.cluster import stars
from simindex.pipeline.runs import pair_documents


def greedy_stars(documents, rank, doc_a, doc_b, content_hashes) -> dict[int, int]:
    """Each document's representative, by the rule as written: copies (equal hashes) are one
    node ranked by its best document; in rank order an unclaimed node claims itself and its
    unclaimed neighbours; a node's documents go to its claimer's best document."""
    node = {int(d): int(h) for d, h in zip(documents, content_hashes, strict=True)}
    best: dict[int, int] = {}
    for d, _ in sorted(zip(documents.tolist(), rank.tolist(), strict=True), key=lambda x: x[1]):
        best.setdefault(node[d], d)
    neighbours: dict[int, set[int]] = {h: set() for h in best}
    for a, b in zip(doc_a.tolist(), doc_b.tolist(), strict=True):
        if node[a] != node[b]:
            neighbours[node[a]].add(node[b])
            neighbours[node[b]].add(node[a])
    claimer: dict[int, int] = {}
    rank_of = dict(zip(documents.tolist(), rank.tolist(), strict=True))
    for h in sorted(best, key=lambda h: rank_of[best[h]]):
        if h not in claimer:
            claimer[h] = h
            for n in neighbours[h]:
                claimer.setdefault(n, h)
    return {d: best[claimer[node[d]]] for d in documents.tolist()}


@settings(max_examples=200, deadline=None)
@given(
    edges=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=120),
    copies=st.integers(1, 41),
    seed=st.integers(0, 2**32 - 1),
)
def test_stars_follow_the_greedy_rule(edges, copies, seed):
    rng = np.random.default_rng(seed)
    pairs = np.array([(min(a, b), max(a, b)) for a, b in edges if a != b], dtype=np.int64)
    if not pairs.size:
        return
    doc_a, doc_b = pairs[:, 0] * 7 + 3, pairs[:, 1] * 7 + 3  # ids neither dense nor from 0
    documents = pair_documents(doc_a, doc_b)
    rank = rng.permutation(documents.size).astype(np.int64)
    content_hashes = rng.integers(0, copies, documents.size)  # few values: many copies
    found = stars(documents, rank, doc_a, doc_b, content_hashes)
    expected = greedy_stars(documents, rank, doc_a, doc_b, content_hashes)
    assert dict(zip(documents.tolist(), found.tolist(), strict=True)) == expected
