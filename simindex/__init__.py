"""simindex: a persistent near-duplicate index (MinHash LSH in PostgreSQL or SQLite).

The public names load on first use (PEP 562), so importing a light submodule (the CLI for
``--help``) does not load numba, NumPy or SQLAlchemy.
"""

import os
from importlib import import_module
from typing import TYPE_CHECKING, Any

# The parallel kernels run on numba's OpenMP threads, whose default is to spin for a while
# after each parallel loop: between a batch's kernels they burned the CPU that the database
# work (SQLite runs in this process) and the next batch needed, and a batch signed in parts
# paid it per part. Set before OpenMP loads (a user's own setting wins).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Arrow's buffers come and go batch by batch; its default allocator (mimalloc) keeps freed
# ones resident through an ingest, the C library's returns them (peak RSS per command:
# benchmarks/bench_scale.py). Set before pyarrow
# loads (a user's own setting, or a pyarrow loaded earlier, wins).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

if TYPE_CHECKING:
    from simindex.errors import LowRecallWarning, SimindexError
    from simindex.index import (
        AddResult,
        ClusterMember,
        Index,
        Match,
        Pair,
        PairsReport,
        Removal,
        StoredDocument,
    )
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
    from simindex.spec import SignatureSpec

_MODULES = {
    "AddResult": "index",
    "ClusterMember": "index",
    "Index": "index",
    "LowRecallWarning": "errors",
    "Match": "index",
    "Pair": "index",
    "PairsReport": "index",
    "Removal": "index",
    "StoredDocument": "index",
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
