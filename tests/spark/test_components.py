"""Connected components in the engine (large-star/small-star) equal simindex.pipeline.cluster's
union-find, on random graphs and on the shapes that take the most rounds (long paths)."""

from __future__ import annotations

import numpy as np

from simindex.pipeline.cluster import components as union_find
from simindex.spark.components import components


def _graph(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint graphs on random int64 labels: a long path, a star, a cycle, cliques, random
    sparse graphs of several densities; with repeated, reversed and self edges."""
    rng = np.random.default_rng(seed)
    parts, start = [], 0
    shapes = [("path", 100), ("star", 50), ("cycle", 40), ("clique", 8), ("clique", 2)]
    shapes += [("random", int(n)) for n in rng.integers(2, 40, 8)]
    for shape, n in shapes:
        nodes = np.arange(start, start + n)
        start += n
        if shape == "path":
            a, b = nodes[:-1], nodes[1:]
        elif shape == "star":
            a, b = np.full(n - 1, nodes[n // 2]), np.delete(nodes, n // 2)
        elif shape == "cycle":
            a, b = nodes, np.roll(nodes, 1)
        elif shape == "clique":
            a, b = (x.ravel() for x in np.meshgrid(nodes, nodes))
        else:
            m = int(rng.integers(1, 2 * n))
            a, b = rng.choice(nodes, m), rng.choice(nodes, m)
        parts.append((a, b))
    a = np.concatenate([p[0] for p in parts])
    b = np.concatenate([p[1] for p in parts])
    # Random labels, so a path's order is not its labels' order; then repeats and reversals.
    labels = rng.choice(np.int64(2) ** 62, start, replace=False).astype(np.int64)
    a, b = labels[a], labels[b]
    extra = rng.integers(0, a.size, a.size // 4)
    a, b = np.concatenate((a, b[extra])), np.concatenate((b, a[extra]))
    order = rng.permutation(a.size)
    return a[order], b[order]


def _labels(frame) -> dict[int, int]:
    rows = frame.collect()
    labels = {row["doc"]: row["component"] for row in rows}
    assert len(labels) == len(rows)  # every document once
    return labels


def test_in_engine_components_equal_union_find(spark) -> None:
    a, b = _graph(seed=7)
    assert (a == b).any()
    edges = spark.createDataFrame(list(zip(a.tolist(), b.tolist())), "doc_a long, doc_b long")
    a, b = a[a != b], b[a != b]  # a self-loop is no edge
    documents, component = union_find(a, b)
    expected = dict(zip(documents.tolist(), component.tolist()))
    assert len(set(expected.values())) > 10  # many components, of many shapes
    in_engine = _labels(components(edges, max_driver_edges=0))
    assert in_engine == expected
    assert _labels(components(edges)) == expected  # on the driver


def test_components_of_a_single_edge_and_of_only_self_loops(spark) -> None:
    edges = spark.createDataFrame([(5, 9), (9, 5), (3, 3)], "doc_a long, doc_b long")
    labels = _labels(components(edges, max_driver_edges=0))
    assert labels == {5: 5, 9: 5}
