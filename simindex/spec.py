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
# Schemes of signatures made outside simindex by datasketch's MinHash, named by its hash
# family (datasketch 2.0's names); their values are < 2**32, so they take the u32 layout.
# Such an index has no shingling: it takes signatures, never texts (docs/datasketch.md).
DATASKETCH_PREFIX = "datasketch-"
DATASKETCH_FAMILIES = ("affine32", "legacy")
DATASKETCH_SCHEMES = tuple(DATASKETCH_PREFIX + family for family in DATASKETCH_FAMILIES)

ShingleKind = Literal["char", "word"]


@dataclass(frozen=True)
class SignatureSpec:
    """Parameters of a signature scheme (docs/spec.md).

    scheme: ``"simindex-v2"`` (default: one hash per shingle, num_perm bins) or
    ``"simindex-v1"`` (num_perm hashes per shingle); both share everything but the signature.
    Or ``"datasketch-affine32"`` / ``"datasketch-legacy"``: datasketch's MinHash of that hash
    family, whose permutations come from numpy's RandomState(seed) (made by
    :func:`datasketch_spec`); shingle, k and normalization then mean nothing.
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
        if self.scheme not in SCHEMES + DATASKETCH_SCHEMES:
            raise SpecMismatchError(
                f"signature scheme {self.scheme!r} is not supported by this simindex "
                f"(it knows {', '.join(SCHEMES + DATASKETCH_SCHEMES)}); upgrade simindex "
                "to read this index"
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

    @property
    def signs_text(self) -> bool:
        """Whether simindex makes this scheme's signatures from text (not datasketch's)."""
        return not self.scheme.startswith(DATASKETCH_PREFIX)

    def require_text_scheme(self) -> None:
        """Refuse to sign text under a scheme whose signatures are made outside simindex."""
        if not self.signs_text:
            raise SpecMismatchError(
                f"the index holds datasketch's MinHash signatures ({self.scheme}) and has no "
                "shingling scheme, so it takes no texts: add and query MinHash objects with "
                "simindex.datasketch.MinHashLSH (or Index.add_signatures / query_signature)"
            )

    def require_signature_scheme(self) -> None:
        """Refuse precomputed signatures in an index whose signatures simindex makes from
        text: they would not be comparable."""
        if self.signs_text:
            raise SpecMismatchError(
                f"the index uses signature scheme {self.scheme}, made from text by simindex: "
                "it takes no precomputed signatures; create an index with "
                "datasketch_spec(...) (or simindex.datasketch.MinHashLSH) for datasketch's"
            )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> SignatureSpec:
        return cls(**values)  # type: ignore[arg-type]

    def describe(self) -> str:
        if not self.signs_text:
            return (
                f"{self.scheme}: {self.num_perm} hash values of datasketch's MinHash "
                f"(hash family {self.scheme.removeprefix(DATASKETCH_PREFIX)}), seed {self.seed}"
            )
        unit = "character" if self.shingle == "char" else "word"
        values = "hashes" if self.scheme == SCHEME_V1 else "bins"
        return (
            f"{self.scheme}: {self.k}-{unit} shingles, {self.num_perm} {values}, seed {self.seed}, "
            f"normalization {self.normalization}"
        )


def datasketch_spec(num_perm: int, seed: int = 1, family: str = "affine32") -> SignatureSpec:
    """The spec of datasketch MinHash signatures: ``num_perm`` values, permutations from
    numpy's RandomState(``seed``), hash ``family`` as datasketch 2.0 names it ("affine32",
    its default, or "legacy"; "affine64" values do not fit the u32 layout). Raises
    ParameterError (a ValueError) for another family."""
    if family not in DATASKETCH_FAMILIES:
        raise ParameterError(
            f"datasketch hash family {family!r} can't be stored: simindex keeps 32-bit hash "
            f"values, which {' and '.join(DATASKETCH_FAMILIES)} make; use MinHash(scheme="
            "'affine32')"
        )
    return SignatureSpec(num_perm=num_perm, seed=seed, scheme=DATASKETCH_PREFIX + family)
