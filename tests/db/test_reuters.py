"""Recall on real text: Reuters-21578 against the exact all-pairs Jaccard of the same shingles.

Skipped when ../shared/data/reuters21578.jsonl.gz is absent (it is not shipped).
"""

from __future__ import annotations

import numpy as np
import pytest

from simindex import Index, SignatureSpec, band_keys, normalize, shingle_sets, signatures
from simindex.pipeline.candidates import collect, group_keys
from simindex.pipeline.cluster import components
from simindex.pipeline.exact import similar_pairs


@pytest.fixture(scope="module")
def corpus(reuters):
    """Reuters without its empty texts, and its exact pairs at Jaccard >= 0.8."""
    docs = [d for d in reuters if normalize(d[1])]
    sets = shingle_sets([normalize(d[1]) for d in docs], SignatureSpec())
    a, b, jaccard = similar_pairs(sets, 0.8)
    truth = {
        (docs[x][0], docs[y][0]): j
        for x, y, j in zip(a.tolist(), b.tolist(), jaccard.tolist(), strict=True)
    }
    # The candidates the default banding (20 x 5) must produce, computed in memory.
    keys = band_keys(signatures(sets, SignatureSpec()), 20, 5)
    doc_a, doc_b = collect([group_keys(keys, np.arange(len(docs)))]).arrays()
    expected = {
        (docs[x][0], docs[y][0]) for x, y in zip(doc_a.tolist(), doc_b.tolist(), strict=True)
    }
    return docs, truth, expected


def test_reuters_recall_and_exact_export(db_url, corpus):
    docs, truth, candidates = corpus
    with Index.create(db_url) as index:  # defaults: threshold 0.8, 20 x 5, text kept
        index.add(docs)
        report = index.find_pairs()
        exported = {
            tuple(sorted((p.id_a, p.id_b), key=int)): p.exact_jaccard for p in index.pairs()
        }
        index.cluster()
        clusters = {(r.external_id, r.cluster) for r in index.clusters()}
    truth = {tuple(sorted(p, key=int)): j for p, j in truth.items()}
    strong = [p for p, j in truth.items() if j >= 0.85]
    recall = sum(p in exported for p in strong) / len(strong)
    assert len(strong) > 500
    assert recall >= 0.99, f"recall {recall:.4f} of {len(strong)} pairs with Jaccard >= 0.85"
    # No false positives, and each exported similarity is the exact Jaccard.
    for pair, exact in exported.items():
        assert exact == pytest.approx(truth[pair], abs=1e-12)
    # The database found exactly the pairs that the in-memory banding predicts (same on
    # every backend): the true pairs among the candidates.
    predicted = {tuple(sorted(p, key=int)) for p in candidates} & truth.keys()
    assert exported.keys() == predicted
    assert report.pairs == len(exported)
    # Clusters are the connected components of the exact pairs the LSH found, named by their
    # earliest document; with no pair missed, of all the exact pairs.
    ids = sorted({i for p in truth for i in p}, key=int)
    position = {i: n for n, i in enumerate(ids)}
    found = [p for p in truth if p in exported]
    members, roots = components(
        np.array([position[a] for a, _ in found]), np.array([position[b] for _, b in found])
    )
    assert clusters == {(ids[m], ids[r]) for m, r in zip(members.tolist(), roots.tolist())}
    if len(found) == len(truth):
        assert len(clusters) == len({i for p in truth for i in p})
