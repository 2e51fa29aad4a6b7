"""simindex.datasketch without a database: keys round-trip through their stored form, and
a threshold picks the bands and rows datasketch picks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simindex.datasketch import datasketch_params, decode_key, encode_key

keys = st.recursive(
    st.one_of(st.text(), st.integers(), st.binary(), st.none(), st.floats(allow_nan=False)),
    # Not sets: equal sets built in another order can pickle differently (docs/datasketch.md).
    lambda inner: st.tuples(inner, inner) | st.lists(inner, max_size=3).map(tuple),
    max_leaves=5,
)


@given(keys)
def test_keys_round_trip_and_equal_keys_share_one_id(key):
    assert decode_key(encode_key(key)) == key
    assert encode_key(key) == encode_key(decode_key(encode_key(key)))


def test_str_keys_are_stored_readably():
    assert encode_key("doc-1") == "s:doc-1"
    assert encode_key(1) != encode_key("1")


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.8, 0.9, 0.95])
@pytest.mark.parametrize("weights", [(0.5, 0.5), (0.3, 0.7)])
def test_threshold_picks_datasketchs_bands_and_rows(threshold, weights):
    lsh = pytest.importorskip("datasketch.lsh")
    expected = lsh._optimal_param(threshold, 128, *weights)
    assert datasketch_params(threshold, 128, weights) == expected
