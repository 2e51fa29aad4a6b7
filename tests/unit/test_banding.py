"""The LSH maths: the S-curve, its inverse, the tuner, band keys."""

import math

import numpy as np
import pytest

from simindex.errors import ParameterError
from simindex.pipeline import banding as lsh


@pytest.mark.parametrize(
    ("s", "bands", "rows", "expected"),
    [
        (0.5, 42, 3, 0.996),
        (0.05, 42, 3, 0.005),
        (0.8, 20, 5, 0.99965),
        (0.4, 20, 5, 0.186),
        (0.75, 2, 3, 0.666),
    ],
)
def test_s_curve_matches_the_published_numbers(s, bands, rows, expected):
    # As published, to their last digit (0.99965 is 0.999644 rounded up at the 5th digit).
    digits = len(str(expected).split(".")[1])
    assert lsh.candidate_probability(s, bands, rows) == pytest.approx(expected, abs=10**-digits)


def test_s_curve_is_the_formula_at_every_point():
    s = np.linspace(0, 1, 101)
    assert np.allclose(lsh.candidate_probability(s, 20, 5), 1 - (1 - s**5) ** 20)


def _bisect(f, lo=0.0, hi=1.0):
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize(("bands", "rows"), [(20, 5), (42, 3), (9, 13), (1, 1)])
@pytest.mark.parametrize("p", [0.001, 0.5, 0.99, 0.9995])
def test_similarity_at_inverts_the_curve(bands, rows, p):
    root = _bisect(lambda s: lsh.candidate_probability(s, bands, rows) - p)
    assert lsh.similarity_at(p, bands, rows) == pytest.approx(root, abs=1e-9)


def test_approx_threshold_is_near_the_steepest_point():
    s = np.linspace(0.01, 0.99, 9801)
    slope = np.gradient(lsh.candidate_probability(s, 20, 5), s)
    assert lsh.approx_threshold(20, 5) == pytest.approx(s[np.argmax(slope)], abs=0.03)


def test_infeasible_targets_report_a_compromise_and_the_num_perm_needed():
    result = lsh.tune(128, 0.05, 0.001, 0.5, 0.99)
    assert not result.meets_targets
    chosen = result.chosen
    # The compromise keeps the recall target and has the fewest low-similarity candidates.
    assert chosen.p_at_high >= 0.99
    assert (chosen.bands, chosen.rows) == (35, 3)
    assert chosen.p_at_low == pytest.approx(0.00437, abs=1e-5)
    # 72 bands x 4 rows: P(0.5) = 0.9904, P(0.05) = 0.00045; nothing smaller meets both.
    assert result.num_perm_needed == 288
    assert lsh.tune(288, 0.05, 0.001, 0.5, 0.99).meets_targets
    assert not lsh.tune(287, 0.05, 0.001, 0.5, 0.99).meets_targets


def test_feasible_targets_list_only_bandings_that_meet_them():
    result = lsh.tune(128, 0.3, 0.05, 0.8, 0.99)
    assert result.meets_targets
    for b in result.feasible:
        assert b.bands * b.rows <= 128
        assert lsh.candidate_probability(0.3, b.bands, b.rows) <= 0.05
        assert lsh.candidate_probability(0.8, b.bands, b.rows) >= 0.99
    assert result.chosen == result.feasible[0]
    assert lsh.candidate_probability(
        result.low_crossing, result.chosen.bands, result.chosen.rows
    ) == pytest.approx(0.05)
    assert lsh.candidate_probability(
        result.high_crossing, result.chosen.bands, result.chosen.rows
    ) == pytest.approx(0.99)


def test_a_single_threshold_tunes_to_20_bands_of_5_rows_at_0_8():
    result = lsh.tune_threshold(128, 0.8)
    assert (result.chosen.bands, result.chosen.rows) == (20, 5)
    assert result.chosen.p_at_high >= lsh.DEFAULT_RECALL


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: lsh.check_banding(42, 4, 128),
            "bands*rows must be <= num_perm, got 42*4=168 > 128",
        ),
        (lambda: lsh.tune(128, 0.9, 0.1, 0.5, 0.9), "low similarity must be below the high one"),
        (lambda: lsh.tune_threshold(128, 1.5), "threshold must be strictly between 0 and 1"),
        (lambda: lsh.candidate_probability(1.2, 2, 2), "within [0, 1]"),
    ],
)
def test_nonsense_parameters_are_refused_with_the_arithmetic(call, message):
    with pytest.raises(
        ParameterError, match=message.replace("*", r"\*").replace("[", r"\[").replace("]", r"\]")
    ):
        call()


def test_band_keys_fit_a_signed_bigint_and_depend_on_the_band():
    rng = np.random.default_rng(0)
    sigs = rng.integers(0, 2**32, size=(50, 128), dtype=np.uint64).astype(np.uint32)
    keys = lsh.band_keys(sigs, 20, 5)
    assert keys.shape == (50, 20) and keys.dtype == np.int64
    assert (keys >= 0).all()
    # Equal rows in different bands must not give equal keys.
    same = np.tile(sigs[:, :5], (1, 20))
    same_keys = lsh.band_keys(same, 20, 5)
    assert all(len(set(row)) == 20 for row in same_keys.tolist())
    # A key changes when any value of its band changes, and only that key.
    changed = sigs.copy()
    changed[:, 7] ^= 1
    diff = lsh.band_keys(changed, 20, 5) != keys
    assert diff[:, 1].all() and not diff[:, [0] + list(range(2, 20))].any()
    assert math.isclose(len(np.unique(keys)) / keys.size, 1.0)
