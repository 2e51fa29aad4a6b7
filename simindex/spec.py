"""The signature scheme: every parameter that decides what a stored signature means.

A :class:`SignatureSpec` is recorded in an index's metadata when the index is created, and
an index refuses documents or queries made under another spec (see docs/spec.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from simindex.defaults import DEFAULT_SCHEME, SCHEME_V1, SCHEMES
from simindex.defaults import SCHEME_V2 as SCHEME_V2  # v1: MinHash; v2: one permutation
from simindex.errors import ParameterError, SpecMismatchError

NORMALIZATION = "nfkc-lower-space"
MAX_NUM_PERM = 4096
MAX_K = 64
# A stored signature: num_perm little-endian u32, no header (docs/spec.md).
SIGNATURE_DTYPE = np.dtype("<u4")

ShingleKind = Literal["char", "word"]


@dataclass(frozen=True)
class SignatureSpec:
    """Parameters of a signature scheme (docs/spec.md).

    scheme: ``"simindex-v2"`` (default: one hash per shingle, num_perm bins) or
    ``"simindex-v1"`` (num_perm hashes per shingle); both share everything but the signature.
    shingle: ``"char"`` (k consecutive Unicode code points) or ``"word"`` (k consecutive words).
    k: shingle length, 1..64 (default 5 characters).
    num_perm: number of MinHash functions = signature length, 1..4096 (default 128).
    seed: derives the MinHash coefficients; an integer in [0, 2**63) (it is stored in a BIGINT).
    """

    shingle: ShingleKind = "char"
    k: int = 5
    num_perm: int = 128
    seed: int = 1
    normalization: str = NORMALIZATION
    scheme: str = DEFAULT_SCHEME

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise SpecMismatchError(
                f"signature scheme {self.scheme!r} is not supported by this simindex "
                f"(it knows {', '.join(SCHEMES)}); upgrade simindex to read this index"
            )
        if self.normalization != NORMALIZATION:
            raise ParameterError(
                f"normalization {self.normalization!r} is unknown; scheme {self.scheme} "
                f"defines only {NORMALIZATION!r}"
            )
        if self.shingle not in ("char", "word"):
            raise ParameterError(f"shingle must be 'char' or 'word', got {self.shingle!r}")
        if not isinstance(self.k, int) or not 1 <= self.k <= MAX_K:
            raise ParameterError(
                f"k (shingle length) must be an integer in 1..{MAX_K}, got {self.k!r}"
            )
        if not isinstance(self.num_perm, int) or not 1 <= self.num_perm <= MAX_NUM_PERM:
            raise ParameterError(
                f"num_perm must be an integer in 1..{MAX_NUM_PERM}, got {self.num_perm!r}"
            )
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ParameterError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")

    @cached_property
    def coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """v1's MinHash coefficients (a, b), each uint64 of shape (num_perm,); every a is odd.

        Drawn in order a_0, b_0, a_1, b_1, ... from splitmix64 started at ``seed``.
        """
        from simindex.pipeline.hashing import (
            splitmix64_stream,  # numba: only where signing needs it
        )

        stream = splitmix64_stream(self.seed, 2 * self.num_perm)
        return stream[0::2] | np.uint64(1), stream[1::2]

    @cached_property
    def bin_keys(self) -> tuple[np.uint64, np.uint64]:
        """v2's two keys: the first two splitmix64 outputs from ``seed`` (bin hash, densification)."""
        from simindex.pipeline.hashing import splitmix64_stream

        bin_key, densify_key = splitmix64_stream(self.seed, 2)
        return bin_key, densify_key

    def require_scheme(self, scheme: str | None) -> None:
        """Refuse to mix: an index made under this spec takes no signatures of another scheme."""
        if scheme is not None and scheme != self.scheme:
            raise SpecMismatchError(
                f"the index uses signature scheme {self.scheme}, not {scheme}: signatures of "
                "two schemes can't be compared; drop the scheme option or use another database"
            )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> SignatureSpec:
        return cls(**values)  # type: ignore[arg-type]

    def describe(self) -> str:
        unit = "character" if self.shingle == "char" else "word"
        values = "hashes" if self.scheme == SCHEME_V1 else "bins"
        return (
            f"{self.scheme}: {self.k}-{unit} shingles, {self.num_perm} {values}, seed {self.seed}, "
            f"normalization {self.normalization}"
        )
