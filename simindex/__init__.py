"""simindex: a persistent near-duplicate index (MinHash LSH in PostgreSQL or SQLite).

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
        Match,
        Pair,
        PairsReport,
        Removal,
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
