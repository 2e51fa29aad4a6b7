"""MinHash signatures, both schemes: the estimator is unbiased with (at most) the binomial
spread, also for sets with fewer shingles than v2 has bins, and empty is refused."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simindex import SignatureSpec, estimate_jaccard, shingle_sets, signatures
from simindex.errors import ParameterError, SpecMismatchError
from simindex.pipeline.minhash import estimate_rows, pack, unpack
from simindex.pipeline.shingle import ShingleSets
from simindex.spec import SCHEME_V1, SCHEME_V2, SCHEMES


def _sets(*arrays):
    arrays = [np.unique(np.asarray(a, dtype=np.uint64)) for a in arrays]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([a.size for a in arrays], out=offsets[1:])
    return ShingleSets(np.concatenate(arrays), offsets)


@settings(max_examples=40, deadline=None)
@given(
    jaccard=st.floats(0.05, 0.95),
    size=st.integers(200, 800) | st.integers(3, 60),  # also far fewer shingles than bins
    seed=st.integers(0, 2**63 - 1),
    scheme=st.sampled_from(SCHEMES),
)
def test_estimate_is_unbiased_on_random_sets(jaccard, size, seed, scheme):
    """Over many seeds (independent hash families), the mean estimate is the true Jaccard."""
    rng = np.random.default_rng(seed)
    common = round(2 * size * jaccard / (1 + jaccard))
    values = rng.choice(2**62, size=2 * size - common, replace=False).astype(np.uint64)
    a, b = values[:size], np.concatenate((values[:common], values[size:]))
    true = common / (2 * size - common)
    estimates = []
    for family in range(30):
        spec = SignatureSpec(num_perm=128, seed=(seed + family) % 2**63, scheme=scheme)
        sig = signatures(_sets(a, b), spec)
        estimates.append(estimate_jaccard(sig[0], sig[1]))
    # 30 x 128 Bernoulli(J) draws: standard error sqrt(J(1-J)/3840) <= 0.0081.
    assert abs(np.mean(estimates) - true) < 5 * np.sqrt(true * (1 - true) / 3840) + 1e-9


@settings(max_examples=30, deadline=None)
@given(
    num_perm=st.integers(1, 200),
    documents=st.integers(1, 50),
    pairs=st.integers(0, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_estimate_of_rows_is_the_estimate_of_the_gathered_signatures(
    num_perm, documents, pairs, seed
):
    """Verification estimates pairs by row index; it agrees with estimate_jaccard exactly
    (values drawn from a few so that many positions agree)."""
    rng = np.random.default_rng(seed)
    sigs = rng.integers(0, 4, size=(documents, num_perm)).astype(np.uint32)
    rows_a, rows_b = rng.integers(0, documents, size=(2, pairs))
    expected = estimate_jaccard(sigs[rows_a], sigs[rows_b])
    assert np.array_equal(estimate_rows(sigs, rows_a, rows_b), expected)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_estimate_spread_is_binomial(scheme):
    """v1 has the binomial spread sqrt(J(1-J)/k); v2 on a large set samples its bins without
    replacement, so it may only be tighter (by about sqrt(1 - k/|union|), 0.95 here)."""
    rng = np.random.default_rng(7)
    true, errors = 0.6, []
    for trial in range(300):
        values = rng.choice(2**62, size=1250, replace=False).astype(np.uint64)
        a, b = values[:1000], np.concatenate((values[:750], values[1000:]))  # J = 750/1250
        sig = signatures(_sets(a, b), SignatureSpec(seed=trial, scheme=scheme))
        errors.append(estimate_jaccard(sig[0], sig[1]) - true)
    expected = np.sqrt(true * (1 - true) / 128)
    assert abs(np.mean(errors)) < 4 * expected / np.sqrt(300)
    assert np.std(errors) == pytest.approx(expected, rel=0.15)


def test_v2_spread_on_sets_smaller_than_its_bins_is_near_binomial():
    """20 and 25 shingles in 128 bins (J = 15/30 = 0.5): densification copies bins, and the
    spread stays within 25% of classic MinHash's sqrt(J(1-J)/k)."""
    rng = np.random.default_rng(11)
    errors = []
    for trial in range(400):
        values = rng.choice(2**62, size=30, replace=False).astype(np.uint64)
        a, b = values[:20], np.concatenate((values[:15], values[20:]))
        sig = signatures(_sets(a, b), SignatureSpec(seed=trial, scheme=SCHEME_V2))
        errors.append(estimate_jaccard(sig[0], sig[1]) - 0.5)
    expected = np.sqrt(0.5 * 0.5 / 128)
    assert abs(np.mean(errors)) < 4 * np.std(errors) / np.sqrt(400)
    assert np.std(errors) < 1.25 * expected


def test_v2_signs_with_one_hash_per_shingle_into_bins():
    """A one-shingle set fills one bin, which every other bin copies; a second shingle (in
    another bin) adds exactly one more value. v1 gives one shingle a different value per hash."""
    sig = signatures(_sets([12345], [12345, 67890]), SignatureSpec(scheme=SCHEME_V2))
    assert len(set(sig[0].tolist())) == 1
    assert set(sig[0].tolist()) < set(sig[1].tolist())
    assert len(set(sig[1].tolist())) == 2
    v1 = signatures(_sets([12345]), SignatureSpec(scheme=SCHEME_V1))
    assert len(set(v1[0].tolist())) == 128


def test_new_specs_default_to_v2_and_unknown_schemes_are_refused():
    assert SignatureSpec().scheme == SCHEME_V2
    with pytest.raises(SpecMismatchError, match="'simindex-v9' is not supported"):
        SignatureSpec(scheme="simindex-v9")


def test_a_spec_refuses_signatures_of_another_scheme():
    spec = SignatureSpec(scheme=SCHEME_V1)
    spec.require_scheme(None)
    spec.require_scheme(SCHEME_V1)
    with pytest.raises(
        SpecMismatchError, match="uses signature scheme simindex-v1, not simindex-v2"
    ):
        spec.require_scheme(SCHEME_V2)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_empty_documents_have_no_signature(scheme):
    spec = SignatureSpec(scheme=scheme)
    sets = shingle_sets(["", "abc"], spec)
    assert sets.counts.tolist() == [0, 1]
    assert (signatures(sets, spec)[0] == 0xFFFFFFFF).all()


def test_signatures_round_trip_through_storage():
    spec = SignatureSpec(num_perm=64)
    sig = signatures(shingle_sets(["hello world", "goodbye"], spec), spec)
    assert len(pack(sig[0])) == 4 * 64
    assert np.array_equal(unpack([pack(s) for s in sig], 64), sig)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k \\(shingle length\\) must be an integer in 1..64, got 0"),
        ({"num_perm": 0}, "num_perm must be an integer in 1..4096, got 0"),
        ({"shingle": "byte"}, "shingle must be 'char' or 'word'"),
        ({"seed": -1}, "seed must be an integer in \\[0, 2\\*\\*63\\)"),
    ],
)
def test_bad_spec_parameters_are_refused(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        SignatureSpec(**kwargs)
