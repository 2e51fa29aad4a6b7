"""Clusters under a keep policy on Spark: each connected component's pairs go to one task,
which runs :func:`simindex.pipeline.cluster.clusters_of` on them, as the local index does
on all of its pairs (the policy's order is a pure function of each document's fields, so
the clusters are the same however the work is split)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from simindex.policies import ClusterPolicy
from simindex.results import LargestCluster
from simindex.spark.components import checkpoint

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


def representatives(
    pairs: DataFrame, labelled: DataFrame, fields: DataFrame, policy: ClusterPolicy
) -> DataFrame:
    """``doc``, ``representative`` of every document of the ``pairs`` (``doc_a``,
    ``doc_b``) under ``policy``, given their components (``labelled``: ``doc``,
    ``component``) and ranking ``fields`` (``doc`` in input order, ``id``, ``shingle_count``,
    ``content_hash`` and, with keep_by, ``keep_value``: see :func:`field_values`)."""
    from pyspark.sql import functions as F

    if "keep_value" not in fields.columns:
        fields = fields.withColumn("keep_value", F.lit(None).cast("string"))
    edges = pairs.select("doc_a", "doc_b").join(labelled.withColumnRenamed("doc", "doc_a"), "doc_a")
    for end in ("a", "b"):
        renamed = fields.select([F.col(c).alias(f"{c}_{end}") for c in fields.columns])
        edges = edges.join(renamed, f"doc_{end}")

    def choose(table: pa.Table) -> pa.Table:
        return component_clusters(table, policy)

    chosen = edges.groupBy("component").applyInArrow(choose, "doc long, representative long")
    # Cut here: the plans that join the clusters would otherwise carry (and describe, on
    # every adaptive re-plan) the whole lineage of pairs, components and fields.
    return checkpoint(chosen)


def component_clusters(table: pa.Table, policy: ClusterPolicy) -> pa.Table:
    """The clusters of one component's pairs (``doc_a``, ``doc_b``, and each end's ``id``,
    ``shingle_count``, ``content_hash`` and ``keep_value``, suffixed ``_a`` and ``_b``): ``doc``,
    ``representative``."""
    import numpy as np
    import pyarrow as pa

    from simindex.pipeline.cluster import RankFields, clusters_of

    doc_a, doc_b = table.column("doc_a").to_numpy(), table.column("doc_b").to_numpy()
    ends = np.concatenate((doc_a, doc_b))
    named = {
        column: table.column(f"{column}_a").to_pylist() + table.column(f"{column}_b").to_pylist()
        for column in ("id", "shingle_count", "content_hash", "keep_value")
    }

    def fields_of(documents: np.ndarray) -> RankFields:
        first = np.unique(ends, return_index=True)[1]  # aligned: documents is np.unique(ends)
        return RankFields(
            documents,
            [named["id"][i] for i in first],
            np.array([named["shingle_count"][i] for i in first], dtype=np.int64),
            np.array([named["content_hash"][i] for i in first], dtype=np.int64),
            [_field_value(named["keep_value"][i]) for i in first] if policy.keep_by else None,
        )

    documents, chosen = clusters_of(doc_a, doc_b, policy, fields_of)
    return pa.table({"doc": documents, "representative": chosen})


def _field_value(wrapped: str | None) -> object:
    """A keep_by value from its JSON ``{"v": value}`` (None when missing)."""
    return None if wrapped is None else json.loads(wrapped).get("v")


def field_values(records: DataFrame, field: str) -> DataFrame:
    """``doc``, ``keep_value``: each record's ``field`` (from its ``record`` JSON, as the
    local index reads its metadata) as JSON ``{"v": value}``."""
    from pyspark.sql import functions as F

    def value(record):  # no type hints: pyspark would read them as a pandas UDF's
        return None if record is None else json.dumps({"v": json.loads(record).get(field)})

    wrapped = F.udf(value, "string")
    return records.filter("problem is null").select("doc", wrapped("record").alias("keep_value"))


def largest_clusters(
    clusters: DataFrame, ids: DataFrame, limit: int = 3
) -> tuple[LargestCluster, ...]:
    """The ``limit`` largest of the ``clusters`` (``doc``, ``representative``,
    ``similarity``), then by the representative's id (``ids``: ``doc``, ``id``), each with
    its weakest member's similarity to the representative."""
    from pyspark.sql import functions as F

    largest = (
        clusters.groupBy("representative")
        .agg(F.count("*").alias("size"), F.min("similarity").alias("weakest"))
        .join(ids.withColumnRenamed("doc", "representative"), "representative")
        .orderBy(F.desc("size"), "id")
        .limit(limit)
        .collect()
    )
    return tuple(LargestCluster(r["id"], r["size"], r["weakest"]) for r in largest)
