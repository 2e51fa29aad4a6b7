"""simindex: a persistent near-duplicate index (MinHash LSH in SQLite or PostgreSQL).

Open or create an index, add documents, ask what duplicates a text, find all pairs::

    >>> from simindex import Index
    >>> with Index.create("sqlite:///news.db") as index:          # or Index.open(url)
    ...     result = index.add([("a", "Stocks rose on Monday."), ("b", "Stocks rose on Monday!")])
    ...     report = index.find_pairs()                          # verified, stored pairs
    ...     pairs = list(index.pairs())                          # Pair(id_a, id_b, ...)
    ...     matches = index.query("Stocks rose on Monday")       # [Match(external_id, ...)]

Deduplicate a file to a file with :func:`simindex.dedup.dedup_files` (the ``simindex dedup``
command), or on Spark with :func:`simindex.spark.dedup`. The pairs and clusters are tables
and views an analyst can query in SQL (docs/sql.md).

The public names load on first use (PEP 562), so importing a light submodule (the CLI for
``--help``) does not load numba, NumPy or SQLAlchemy.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simindex.errors import LowRecallWarning, SimindexError
    from simindex.index import Index
    from simindex.pipeline.banding import (
        approx_threshold,
        band_keys,
        candidate_probability,
        similarity_at,
        tune,
        tune_threshold,
    )
    from simindex.pipeline.minhash import estimate_jaccard, signatures
    from simindex.pipeline.shingle import normalize, shingle_sets
    from simindex.results import (
        AddResult,
        ClusterMember,
        ClusterReport,
        Decision,
        Explanation,
        IndexStats,
        LargestCluster,
        Match,
        Pair,
        PairsReport,
        Removal,
        RunRecord,
        StoredDocument,
    )
    from simindex.spec import SignatureSpec

_MODULES = {
    "AddResult": "results",
    "ClusterMember": "results",
    "ClusterReport": "results",
    "Index": "index",
    "LowRecallWarning": "errors",
    "Match": "results",
    "Pair": "results",
    "PairsReport": "results",
    "Removal": "results",
    "StoredDocument": "results",
    "Explanation": "results",
    "IndexStats": "results",
    "Decision": "results",
    "RunRecord": "results",
    "LargestCluster": "results",
    "SignatureSpec": "spec",
    "SimindexError": "errors",
    "approx_threshold": "pipeline.banding",
    "band_keys": "pipeline.banding",
    "candidate_probability": "pipeline.banding",
    "estimate_jaccard": "pipeline.minhash",
    "normalize": "pipeline.shingle",
    "shingle_sets": "pipeline.shingle",
    "signatures": "pipeline.minhash",
    "similarity_at": "pipeline.banding",
    "tune": "pipeline.banding",
    "tune_threshold": "pipeline.banding",
}
__all__ = [
    "AddResult",
    "ClusterMember",
    "ClusterReport",
    "Index",
    "LowRecallWarning",
    "Match",
    "Pair",
    "PairsReport",
    "Removal",
    "StoredDocument",
    "Explanation",
    "IndexStats",
    "Decision",
    "RunRecord",
    "LargestCluster",
    "SignatureSpec",
    "SimindexError",
    "approx_threshold",
    "band_keys",
    "candidate_probability",
    "estimate_jaccard",
    "normalize",
    "shingle_sets",
    "signatures",
    "similarity_at",
    "tune",
    "tune_threshold",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module 'simindex' has no attribute {name!r}")
    return getattr(import_module(f"simindex.{_MODULES[name]}"), name)
