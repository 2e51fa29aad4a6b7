"""Golden vectors of signature schemes "simindex-v1" (vectors.json) and "simindex-v2"
(vectors-v2.json), docs/spec.md.

Every index stores content hashes, shingle counts, signatures and band keys computed by its
scheme. If a test here fails, the code changed what stored data means: old indexes would
silently stop matching new documents. The fix is never to edit the vectors; either restore
the old behaviour, or introduce a new scheme version (simindex.spec.SCHEMES) with its own
spec and vectors.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simindex.pipeline.banding import band_keys
from simindex.pipeline.minhash import SIGNATURE_DTYPE, pack, sign, signatures, unpack
from simindex.pipeline.shingle import (
    content_hash,
    normalize,
    normalize_batch,
    normalize_utf8,
    shingle_sets,
)
from simindex.spec import NORMALIZATION, SCHEME_V1, SCHEME_V2, SCHEMES, SignatureSpec

sys.path.insert(0, str(Path(__file__).parent))
import reference  # noqa: E402

VECTOR_FILES = {SCHEME_V1: "vectors.json", SCHEME_V2: "vectors-v2.json"}
ALL_VECTORS = {
    scheme: json.loads(Path(__file__).with_name(name).read_text(encoding="utf-8"))
    for scheme, name in VECTOR_FILES.items()
}
VECTORS = ALL_VECTORS[SCHEME_V1]  # the text-level values (normalization to shingles) are shared
CASES = [
    (scheme, v, c) for scheme, vs in ALL_VECTORS.items() for v in vs["vectors"] for c in v["cases"]
]
CASE_IDS = [
    f"{scheme[-2:]}-{v['id']}-{c['shingle']}{c['k']}-{c['num_perm']}-s{c['seed']}"
    for scheme, v, c in CASES
]

STORED_DATA = (
    "signature scheme {scheme} changed: {what} differs from tests/golden/vectors.json for "
    "vector {vid!r}. Indexes store these values, so this is a change to stored data: it needs "
    "a new scheme version (simindex.spec.SCHEME_VERSION, docs/spec.md), not an edit of the "
    "vectors."
)


def _msg(what: str, vid: str, scheme: str = SCHEME_V1) -> str:
    return STORED_DATA.format(scheme=scheme, what=what, vid=vid)


def _bandings(case: dict) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in name.split("x")) for name in case["band_keys"]]


def _spec(case: dict, scheme: str) -> SignatureSpec:
    return SignatureSpec(
        shingle=case["shingle"],
        k=case["k"],
        num_perm=case["num_perm"],
        seed=case["seed"],
        scheme=scheme,
    )


def test_vector_files_are_for_their_schemes():
    assert set(ALL_VECTORS) == set(SCHEMES) == {reference.SCHEME_V1, reference.SCHEME_V2}
    for scheme, vectors in ALL_VECTORS.items():
        assert vectors["scheme"] == scheme
        assert vectors["normalization"] == NORMALIZATION == reference.NORMALIZATION
        assert len(vectors["vectors"]) >= 12


def test_schemes_share_everything_but_the_signature():
    """Same texts, normalization, content hashes and shingles in both files; the signatures
    (and so the band keys) differ."""
    v1, v2 = ALL_VECTORS[SCHEME_V1]["vectors"], ALL_VECTORS[SCHEME_V2]["vectors"]
    assert len(v1) == len(v2)
    for a, b in zip(v1, v2, strict=True):
        assert {**a, "cases": None} == {**b, "cases": None}
        for case_a, case_b in zip(a["cases"], b["cases"], strict=True):
            shared = ("shingle", "k", "num_perm", "seed", "shingle_count", "first_hashes")
            assert all(case_a[f] == case_b[f] for f in shared)
            assert (case_a["signature"] is None) == (case_b["signature"] is None)
            if case_a["signature"] is not None and case_a["shingle_count"] > 1:
                assert case_a["signature"] != case_b["signature"]


# -- (a) the library reproduces every vector -----------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=[v["id"] for v in VECTORS["vectors"]])
def test_library_normalization_and_content_hash(vector):
    vid = vector["id"]
    normalized = normalize(vector["text"])
    assert normalized == vector["normalized"], _msg("the normalized text", vid)
    assert len(normalized) == vector["code_points"], _msg("the code point count", vid)
    assert content_hash(normalized) == vector["content_hash"], _msg("the content hash", vid)


@pytest.mark.parametrize(("scheme", "vector", "case"), CASES, ids=CASE_IDS)
def test_library_signature_and_band_keys(scheme, vector, case):
    vid = vector["id"]
    spec = _spec(case, scheme)
    sets = shingle_sets([vector["normalized"]], spec)
    hashes = [int(h) for h in sets[0]]
    assert int(sets.counts[0]) == case["shingle_count"], _msg("the shingle count", vid)
    assert hashes[: len(case["first_hashes"])] == case["first_hashes"], _msg(
        "the shingle hashes", vid
    )
    if case["signature"] is None:
        assert case["shingle_count"] == 0
        return
    sig = signatures(sets, spec)
    assert sig.dtype == np.uint32 and sig.shape == (1, spec.num_perm)
    assert [int(v) for v in sig[0]] == case["signature"], _msg("the signature", vid, scheme)
    signed, counts = sign([vector["normalized"]], spec)  # the ingest path, without sorted sets
    assert [int(v) for v in signed[0]] == case["signature"], _msg("the signature", vid, scheme)
    assert int(counts[0]) == case["shingle_count"], _msg("the shingle count", vid)
    for bands, rows in _bandings(case):
        keys = band_keys(sig, bands, rows)
        assert keys.dtype == np.int64 and keys.shape == (1, bands)
        assert [int(x) for x in keys[0]] == case["band_keys"][f"{bands}x{rows}"], _msg(
            f"the {bands}x{rows} band keys", vid, scheme
        )


# -- (b) the reference implementation (written from the spec) reproduces them too -----------


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=[v["id"] for v in VECTORS["vectors"]])
def test_reference_normalization_and_content_hash(vector):
    normalized = reference.normalize(vector["text"])
    assert normalized == vector["normalized"]
    assert reference.content_hash(normalized) == vector["content_hash"]


@pytest.mark.parametrize(("scheme", "vector", "case"), CASES, ids=CASE_IDS)
def test_reference_signature_and_band_keys(scheme, vector, case):
    hashes = reference.shingle_hashes(vector["normalized"], case["shingle"], case["k"])
    assert len(hashes) == case["shingle_count"]
    assert hashes[: len(case["first_hashes"])] == case["first_hashes"]
    if case["signature"] is None:
        assert hashes == []
        return
    sig = reference.signature(hashes, case["num_perm"], case["seed"], scheme)
    assert sig == case["signature"]
    for bands, rows in _bandings(case):
        assert reference.band_keys(sig, bands, rows) == case["band_keys"][f"{bands}x{rows}"]


def test_reference_primitives():
    """Published splitmix64 values (seed 0 -> 0xE220A8397B1DCDAF, ...) and mix64 fixed point."""
    assert reference.mix64(0) == 0
    assert reference.splitmix64(0, 3) == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
    ]


def test_reference_coefficients_match_library():
    for num_perm, seed in [(1, 0), (16, 42), (128, 1), (7, 2**63 - 1)]:
        a, b = SignatureSpec(num_perm=num_perm, seed=seed).coefficients
        ref = reference.coefficients(num_perm, seed)
        assert [int(x) for x in a] == [x for x, _ in ref]
        assert [int(x) for x in b] == [x for _, x in ref]
        assert all(x & 1 for x, _ in ref)


# -- storage format ---------------------------------------------------------------------------


def test_pack_is_little_endian_uint32_and_round_trips():
    vector = VECTORS["vectors"][0]
    sig = np.array([vector["cases"][0]["signature"]], dtype=np.uint32)
    blob = pack(sig[0])
    assert SIGNATURE_DTYPE == np.dtype("<u4")
    assert len(blob) == 4 * sig.shape[1]
    assert blob == struct.pack(f"<{sig.shape[1]}I", *vector["cases"][0]["signature"])
    assert blob == reference.pack(vector["cases"][0]["signature"])
    assert np.array_equal(unpack([blob], sig.shape[1]), sig)
    # Explicit bytes: 0x01020304 is stored as 04 03 02 01, and extreme values survive.
    edge = np.array([0x01020304, 0, 0xFFFFFFFF, 0x80000000], dtype=np.uint32)
    assert pack(edge) == bytes.fromhex("0403020100000000ffffffff00000080")
    assert np.array_equal(unpack([pack(edge)], 4)[0], edge)
    # Big-endian input arrays are stored little-endian all the same.
    assert pack(edge.astype(">u4")) == pack(edge)
    # Several blobs concatenate into rows.
    both = unpack([pack(edge), pack(edge[::-1].copy())], 4)
    assert both.dtype == np.uint32 and np.array_equal(both, np.stack([edge, edge[::-1]]))


# -- (c) property tests: library == reference on random text -----------------------------------

WHITESPACE_CHARS = "".join(chr(c) for c in sorted(reference.WHITESPACE))
INTERESTING = (
    "aAbBzZ \t\n\r\x0b\x0c\x1c\x85\u00a0\u2003\u3000\u200b\u00a8\u0130\u0131\u0307\u0331"
    "Hh\u03a3\u03c3\u03c2\u039f\ufb01\ufb04\uff21\uff41\u2460\u216b\u00b2\u00df\u1e9e"
    "\u6771\u4eac\U0001f600\U0001f680\U0001d518\u0300\u0301\u0308"
)
texts = st.one_of(
    st.text(max_size=40),  # arbitrary Unicode (no lone surrogates)
    st.text(alphabet=INTERESTING, max_size=40),
    st.text(alphabet="ab \t\n", max_size=30),  # few distinct shingles, many repeats
    st.lists(
        st.sampled_from(["the", "a", "Cat", "sat", "ON", "mat", "\U0001f600"]), max_size=12
    ).map(" ".join),
)
shingle_kinds = st.sampled_from(["char", "word"])
schemes = st.sampled_from(SCHEMES)
# v2's bins: fewer than, about as many as, and far more than the shingles of a short text.
num_perms = st.sampled_from([32, 1, 7, 200])
ks = st.integers(min_value=1, max_value=8) | st.just(64)
seeds = st.integers(min_value=0, max_value=2**63 - 1) | st.sampled_from([0, 1, 42])

PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(text=texts)
@example(text="H\u0331")
@example(text="\u00a8")
@example(text="\u039f\u0394\u039f\u03a3 \u03a3\u0391")
def test_normalize_agrees(text):
    normalized = normalize(text)
    assert reference.normalize(text) == normalized
    assert reference.content_hash(normalized) == content_hash(normalized)
    assert "  " not in normalized and normalized == normalized.strip(" ")
    assert not any(ord(c) in reference.WHITESPACE and c != " " for c in normalized)


@PROPERTY_SETTINGS
@given(text=texts, shingle=shingle_kinds, k=ks, seed=seeds, scheme=schemes)
def test_shingles_signatures_band_keys_agree(text, shingle, k, seed, scheme):
    normalized = normalize(text)
    spec = SignatureSpec(shingle=shingle, k=k, num_perm=32, seed=seed, scheme=scheme)
    sets = shingle_sets([normalized], spec)
    ref_hashes = reference.shingle_hashes(normalized, shingle, k)
    assert [int(h) for h in sets[0]] == ref_hashes
    assert int(sets.counts[0]) == len(ref_hashes)
    if not ref_hashes:
        assert normalized == ""
        return
    sig = signatures(sets, spec)
    ref_sig = reference.signature(ref_hashes, 32, seed, scheme)
    assert [int(v) for v in sig[0]] == ref_sig
    for bands, rows in [(8, 4), (32, 1), (1, 32), (5, 6)]:
        assert [int(x) for x in band_keys(sig, bands, rows)[0]] == reference.band_keys(
            ref_sig, bands, rows
        )
    assert np.array_equal(unpack([pack(sig[0])], 32)[0], sig[0])
    assert pack(sig[0]) == reference.pack(ref_sig)


@PROPERTY_SETTINGS
@given(
    batch=st.lists(
        texts | st.text(alphabet=WHITESPACE_CHARS + "a\u00e9\u03a3\u6771\U0001f600", max_size=30),
        max_size=8,
    )
)
@example(batch=[])
@example(batch=["", " \u3000 ", "\u039f\u0394\u039f\u03a3 \u03a3\u0391", "H\u0331\u00a8"])
def test_normalize_batch_equals_normalize(batch):
    """The batch kernel (UTF-8 decode and whitespace step) gives normalize's texts, their
    code points and content hashes; shingling either gives the same sets."""
    normalized = normalize_batch(batch)
    expected = [reference.normalize(t) for t in batch]
    assert len(normalized) == len(batch)
    for i, text in enumerate(expected):
        points = normalized.code_points[normalized.offsets[i] : normalized.offsets[i + 1]]
        assert points.tolist() == [ord(c) for c in text]
        utf8 = normalized.utf8[normalized.utf8_offsets[i] : normalized.utf8_offsets[i + 1]]
        assert utf8.tobytes() == text.encode("utf-8")
    assert normalized.content_hashes() == [reference.content_hash(t) for t in expected]
    spec = SignatureSpec()
    from_batch, from_texts = shingle_sets(normalized, spec), shingle_sets(expected, spec)
    assert np.array_equal(from_batch.offsets, from_texts.offsets)
    assert np.array_equal(from_batch.hashes, from_texts.hashes)


@PROPERTY_SETTINGS
@given(
    batch=st.lists(
        texts | st.text(alphabet=WHITESPACE_CHARS + "aZ\u00c9\u03a3\u6771\U0001f600", max_size=30),
        max_size=8,
    ),
    prefix=st.binary(max_size=5),
)
@example(batch=[], prefix=b"")
@example(batch=["ABC DEF", "\u00c9T\u00c9", "", "\ufb01ne  X", "plain"], prefix=b"\xff")
def test_normalize_utf8_equals_normalize_batch(batch, prefix):
    """Texts given as UTF-8 buffers (after unrelated bytes: offsets need not start at 0)
    normalize as normalize_batch normalizes the strings, ASCII and other texts alike."""
    encoded = [t.encode("utf-8") for t in batch]
    offsets = np.cumsum([len(prefix)] + [len(t) for t in encoded]).astype(np.int64)
    data = np.frombuffer(prefix + b"".join(encoded) + b"\x00tail", np.uint8)
    got, expected = normalize_utf8(data, offsets), normalize_batch(batch)
    assert np.array_equal(got.utf8_offsets, expected.utf8_offsets)
    assert np.array_equal(got.utf8, expected.utf8)
    assert np.array_equal(got.offsets, expected.offsets)
    assert np.array_equal(got.code_points, expected.code_points)


@PROPERTY_SETTINGS
@given(text=st.text(alphabet=WHITESPACE_CHARS, max_size=30), shingle=shingle_kinds, k=ks)
def test_whitespace_only_text_has_no_shingles(text, shingle, k):
    normalized = normalize(text)
    assert normalized == "" == reference.normalize(text)
    sets = shingle_sets([normalized], SignatureSpec(shingle=shingle, k=k))
    assert int(sets.counts[0]) == 0 and sets[0].size == 0
    assert reference.shingle_hashes(normalized, shingle, k) == []


@PROPERTY_SETTINGS
@given(
    batch=st.lists(texts, min_size=1, max_size=6),
    shingle=shingle_kinds,
    k=ks,
    num_perm=num_perms,
    scheme=schemes,
)
def test_batches_equal_single_documents(batch, shingle, k, num_perm, scheme):
    """A document's hashes and signature don't depend on the rest of its batch; signing
    without sorted sets (sign, the ingest path) gives the same signatures and counts."""
    spec = SignatureSpec(shingle=shingle, k=k, num_perm=num_perm, seed=7, scheme=scheme)
    normalized = [normalize(t) for t in batch]
    sets = shingle_sets(normalized, spec)
    sigs = signatures(sets, spec)
    signed, counts = sign(normalize_batch(batch), spec)
    for i, t in enumerate(normalized):
        ref_hashes = reference.shingle_hashes(t, shingle, k)
        assert [int(h) for h in sets[i]] == ref_hashes
        assert int(counts[i]) == len(ref_hashes)
        if ref_hashes:
            ref_sig = reference.signature(ref_hashes, num_perm, 7, scheme)
            assert [int(v) for v in sigs[i]] == ref_sig
            assert [int(v) for v in signed[i]] == ref_sig


def test_spec_worked_example_matches_vectors():
    """The numbers printed in docs/spec.md section 9 are the spec-example vector's."""
    spec_text = (Path(__file__).parents[2] / "docs" / "spec.md").read_text(encoding="utf-8")
    vector = next(v for v in VECTORS["vectors"] if v["id"] == "spec-example")
    case = vector["cases"][0]
    numbers = [vector["content_hash"], *case["first_hashes"][:3], *case["signature"][:5]]
    numbers += case["band_keys"]["20x5"][:4]
    for number in numbers:
        assert str(number) in spec_text, f"docs/spec.md's worked example lacks {number}"
    assert reference.pack(case["signature"][:2]).hex(" ") in spec_text
    v2 = next(v for v in ALL_VECTORS[SCHEME_V2]["vectors"] if v["id"] == "spec-example")
    v2_case = v2["cases"][0]
    for number in [*v2_case["signature"][:5], *v2_case["band_keys"]["20x5"][:4]]:
        assert str(number) in spec_text, f"docs/spec.md's v2 worked example lacks {number}"
    assert reference.pack(v2_case["signature"][:2]).hex(" ") in spec_text
    bin_key, densify_key = reference.splitmix64(1, 2)
    assert f"bin_key = 0x{bin_key:016X}, densify_key = 0x{densify_key:016X}" in spec_text
    hashed = reference.mix64(case["first_hashes"][0] ^ bin_key)
    assert f"0x{hashed:016X}, bin {reference.bin_of(hashed, 128)}" in spec_text
