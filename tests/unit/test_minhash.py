"""MinHash signatures: the estimator is unbiased with the binomial spread, and empty is refused."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simindex import SignatureSpec, estimate_jaccard, normalize, shingle_sets, signatures
from simindex.errors import ParameterError
from simindex.minhash import pack, unpack
from simindex.shingle import ShingleSets


def _sets(*arrays):
    arrays = [np.unique(np.asarray(a, dtype=np.uint64)) for a in arrays]
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([a.size for a in arrays], out=offsets[1:])
    return ShingleSets(np.concatenate(arrays), offsets)


@settings(max_examples=40, deadline=None)
@given(
    jaccard=st.floats(0.05, 0.95),
    size=st.integers(200, 800),
    seed=st.integers(0, 2**63 - 1),
)
def test_estimate_is_unbiased_on_random_sets(jaccard, size, seed):
    """Over many seeds (independent hash families), the mean estimate is the true Jaccard."""
    rng = np.random.default_rng(seed)
    common = round(2 * size * jaccard / (1 + jaccard))
    values = rng.choice(2**62, size=2 * size - common, replace=False).astype(np.uint64)
    a, b = values[:size], np.concatenate((values[:common], values[size:]))
    true = common / (2 * size - common)
    estimates = []
    for family in range(30):
        spec = SignatureSpec(num_perm=128, seed=(seed + family) % 2**63)
        sig = signatures(_sets(a, b), spec)
        estimates.append(estimate_jaccard(sig[0], sig[1]))
    # 30 x 128 Bernoulli(J) draws: standard error sqrt(J(1-J)/3840) <= 0.0081.
    assert abs(np.mean(estimates) - true) < 5 * np.sqrt(true * (1 - true) / 3840) + 1e-9


def test_estimate_spread_is_binomial():
    rng = np.random.default_rng(7)
    true, errors = 0.6, []
    for trial in range(300):
        values = rng.choice(2**62, size=1250, replace=False).astype(np.uint64)
        a, b = values[:1000], np.concatenate((values[:750], values[1000:]))  # J = 750/1250
        sig = signatures(_sets(a, b), SignatureSpec(seed=trial))
        errors.append(estimate_jaccard(sig[0], sig[1]) - true)
    expected = np.sqrt(true * (1 - true) / 128)
    assert abs(np.mean(errors)) < 4 * expected / np.sqrt(300)
    assert np.std(errors) == pytest.approx(expected, rel=0.15)


def test_identical_texts_have_identical_signatures_and_disjoint_ones_differ():
    spec = SignatureSpec()
    texts = [
        normalize("The quick brown fox"),
        normalize("the  QUICK brown fox"),
        normalize("zzzzzzzzz qqqq"),
    ]
    sig = signatures(shingle_sets(texts, spec), spec)
    assert estimate_jaccard(sig[0], sig[1]) == 1.0
    assert estimate_jaccard(sig[0], sig[2]) < 0.1


def test_empty_documents_have_no_signature():
    spec = SignatureSpec()
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
