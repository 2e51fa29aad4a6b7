"""simindex: a persistent near-duplicate index (MinHash LSH in PostgreSQL or SQLite).

The public names load on first use (PEP 562), so importing a light submodule (the CLI for
``--help``) does not load numba, NumPy or SQLAlchemy.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simindex.banding import (
        approx_threshold,
        band_keys,
        candidate_probability,
        similarity_at,
        tune,
        tune_threshold,
    )
    from simindex.errors import SimindexError
    from simindex.index import AddResult, Index, Match, PairsReport
    from simindex.minhash import estimate_jaccard, signatures
    from simindex.shingle import normalize, shingle_sets
    from simindex.spec import SignatureSpec

_MODULES = {
    "AddResult": "index",
    "Index": "index",
    "Match": "index",
    "PairsReport": "index",
    "SignatureSpec": "spec",
    "SimindexError": "errors",
    "approx_threshold": "banding",
    "band_keys": "banding",
    "candidate_probability": "banding",
    "estimate_jaccard": "minhash",
    "normalize": "shingle",
    "shingle_sets": "shingle",
    "signatures": "minhash",
    "similarity_at": "banding",
    "tune": "banding",
    "tune_threshold": "banding",
}
__all__ = [
    "AddResult",
    "Index",
    "Match",
    "PairsReport",
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
