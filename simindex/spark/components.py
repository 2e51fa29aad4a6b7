"""Connected components of a Spark DataFrame of edges: the duplicate clusters of the pairs.

Two ways, one answer (every document on an edge, labelled with the smallest document of its
component, as :func:`simindex.pipeline.cluster.components` labels it):

* up to ``max_driver_edges`` edges (default 10^8: 16 bytes an edge, 1.6 GB), the edges are
  collected to the driver and joined by simindex.pipeline.cluster's union-find;
* above, in the engine by alternating large-star and small-star rounds (Kiveris, Lattanzi,
  Mirrokni, Rastogi, Vassilvitskii: "Connected Components in MapReduce and Beyond", SoCC
  2014), O(log^2 n) rounds; each round's edges are checkpointed, so the plan (and a
  recomputation after a lost executor) stays one round long.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Past this many edges the driver's union-find would need more than ~1.6 GB for them.
DEFAULT_MAX_DRIVER_EDGES = 100_000_000


def components(
    edges: DataFrame,
    *,
    src: str = "doc_a",
    dst: str = "doc_b",
    max_driver_edges: int = DEFAULT_MAX_DRIVER_EDGES,
) -> DataFrame:
    """Connected components of the undirected graph with edges (``src``, ``dst``) (long
    columns; repeats and either direction are fine; a self-loop is no edge).

    Returns a DataFrame with columns ``doc`` and ``component`` (long): every document on an
    edge once, and the smallest document of its component. Collected to the driver when
    there are at most ``max_driver_edges`` edges, computed in the engine otherwise.
    """
    edges = edges.select(edges[src].alias("a"), edges[dst].alias("b")).filter("a != b")
    if edges.count() <= max_driver_edges:
        return _on_driver(edges)
    return _in_engine(edges)


def _on_driver(edges: DataFrame) -> DataFrame:
    """simindex.pipeline.cluster's union-find on the collected edges."""
    import pyarrow as pa

    from simindex.pipeline.cluster import components as union_find

    table = edges.toArrow()
    documents, component = union_find(
        table.column("a").to_numpy().astype("int64", copy=False),
        table.column("b").to_numpy().astype("int64", copy=False),
    )
    labels = pa.table({"doc": documents, "component": component})
    return edges.sparkSession.createDataFrame(labels)


def _in_engine(edges: DataFrame) -> DataFrame:
    """Alternate large-star and small-star until every component is a star around its
    smallest document; then each edge is (member, smallest)."""
    from pyspark.sql import functions as F

    edges = checkpoint(_canonical(edges))
    while True:
        edges = checkpoint(_small_star(_large_star(edges)))
        if _are_stars(edges):
            break
    centres = edges.select(F.col("b").alias("doc"), F.col("b").alias("component")).distinct()
    members = edges.select(F.col("a").alias("doc"), F.col("b").alias("component"))
    return members.unionByName(centres)


def _canonical(edges: DataFrame) -> DataFrame:
    """Each undirected edge once, as (a, b) with a > b."""
    from pyspark.sql import functions as F

    return edges.select(F.greatest("a", "b").alias("a"), F.least("a", "b").alias("b")).distinct()


def _both_ways(edges: DataFrame) -> DataFrame:
    """(node, neighbour) for every edge in both directions."""
    from pyspark.sql import functions as F

    return edges.select(F.col("a").alias("node"), F.col("b").alias("neighbour")).unionByName(
        edges.select(F.col("b").alias("node"), F.col("a").alias("neighbour"))
    )


def _large_star(edges: DataFrame) -> DataFrame:
    """Connect every neighbour of a node that is larger than it to the smallest of the
    node's closed neighbourhood."""
    from pyspark.sql import functions as F

    adjacent = _both_ways(edges)
    smallest = adjacent.groupBy("node").agg(F.min("neighbour").alias("smallest"))
    linked = adjacent.join(smallest, "node").filter(F.col("neighbour") > F.col("node"))
    return _canonical(
        linked.select(F.col("neighbour").alias("a"), F.least("node", "smallest").alias("b"))
    )


def _small_star(edges: DataFrame) -> DataFrame:
    """Connect a node and its smaller neighbours to the smallest of them."""
    from pyspark.sql import functions as F

    # Canonical edges (a > b) are exactly each node's smaller neighbours.
    smallest = edges.groupBy("a").agg(F.min("b").alias("smallest"))
    linked = edges.join(smallest, "a")
    neighbours = linked.select(F.col("b").alias("a"), F.col("smallest").alias("b"))
    nodes = smallest.select("a", F.col("smallest").alias("b"))
    return _canonical(neighbours.unionByName(nodes).filter(F.col("a") != F.col("b")))


def _are_stars(edges: DataFrame) -> bool:
    """Whether every component is a star around its smallest node: no node has two smaller
    neighbours, and no node is both the larger end of an edge and the smaller of another."""
    from pyspark.sql import functions as F

    ends = edges.select(F.col("a").alias("node"), F.lit(1).alias("larger")).unionByName(
        edges.select(F.col("b").alias("node"), F.lit(0).alias("larger"))
    )
    per_node = ends.groupBy("node").agg(
        F.sum("larger").alias("larger"), F.min("larger").alias("smaller_somewhere")
    )
    not_star = per_node.filter(
        (F.col("larger") > 1) | ((F.col("larger") >= 1) & (F.col("smaller_somewhere") == 0))
    )
    return not_star.isEmpty()


def checkpoint(frame: DataFrame) -> DataFrame:
    """The frame materialized with its lineage cut: to the checkpoint directory when the
    SparkContext has one (survives a lost executor), else in the executors' storage."""
    if frame.sparkSession.sparkContext.getCheckpointDir() is not None:
        return frame.checkpoint(eager=True)
    return frame.localCheckpoint(eager=True)
