"""simindex: a persistent near-duplicate index (MinHash LSH in PostgreSQL or SQLite)."""

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
