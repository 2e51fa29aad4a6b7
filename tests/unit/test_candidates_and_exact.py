"""Candidate pairs from buckets, hot buckets, and the exact all-pairs join."""

import numpy as np
import pytest

from simindex import SignatureSpec, shingle_sets
from simindex.pipeline.candidates import bucket_pairs, collect, group_keys, positions, unique_pairs
from simindex.pipeline.exact import rank_tokens, similar_pairs
from simindex.pipeline.shingle import ShingleSets
from simindex.pipeline.verify import exact_jaccard
from simindex.store.rows import parse_id_arrays as _parse_id_arrays


def test_bucket_pairs_pairs_small_buckets_and_links_hot_ones():
    members = np.array([5, 3, 9, 1, 2, 3, 4], dtype=np.int64)
    offsets = np.array([0, 3, 7])
    a, b, hot = bucket_pairs(members, offsets, max_bucket_size=3)
    assert hot == 1
    assert sorted(zip(a.tolist(), b.tolist())) == [(1, 2), (1, 3), (1, 4), (3, 5), (3, 9), (5, 9)]


def test_collect_deduplicates_across_buckets_and_chunks():
    chunk = (np.array([1, 2, 2, 1]), np.array([0, 2, 4]))
    candidates = collect([chunk, chunk], max_bucket_size=10)
    assert list(zip(*candidates.arrays())) == [(1, 2)]
    assert candidates.largest_bucket == 2


@pytest.mark.parametrize(
    "documents",
    [
        np.arange(2**40, 2**40 + 1000, 3),  # dense (a table), from a sequence started high
        np.array([5, 2**31 + 7, 2**62]),  # sparse (searched)
        np.array([17]),
        np.array([], dtype=np.int64),
    ],
)
def test_positions_of_documents_are_their_places_in_the_sorted_ids(documents):
    documents = documents.astype(np.int64)
    rng = np.random.default_rng(5)
    wanted = rng.choice(documents, size=50) if documents.size else documents
    found = positions(documents)(wanted)
    assert found.dtype == np.intp
    assert np.array_equal(documents[found], wanted)
    assert np.array_equal(found, np.searchsorted(documents, wanted))


def test_a_hot_bucket_of_20000_members_costs_linear_pairs():
    members = np.arange(1, 20_001, dtype=np.int64)
    candidates = collect([(members, np.array([0, 20_000]))], max_bucket_size=500)
    assert candidates.arrays()[0].size == 19_999 and candidates.hot_buckets == 1


def test_group_keys_finds_shared_band_keys():
    keys = np.array([[1, 7], [2, 7], [1, 8]], dtype=np.int64)
    members, offsets = group_keys(keys, np.array([10, 11, 12]))
    buckets = sorted(
        sorted(members[offsets[i] : offsets[i + 1]].tolist()) for i in range(len(offsets) - 1)
    )
    assert buckets == [[10, 11], [10, 12]]


def test_exact_join_equals_brute_force():
    rng = np.random.default_rng(3)
    base = ["".join(rng.choice(list("abcdefgh"), size=rng.integers(5, 60))) for _ in range(60)]
    texts = base + [t[: len(t) // 2] + "x" + t[len(t) // 2 :] for t in base[:30]]
    sets = shingle_sets(texts, SignatureSpec(k=3))
    rows_a, rows_b = np.triu_indices(len(texts), 1)
    jaccard = exact_jaccard(sets, rows_a, rows_b)
    for threshold in (0.3, 0.5, 0.8, 1.0):
        a, b, j = similar_pairs(sets, threshold)
        keep = jaccard >= threshold
        assert set(zip(a.tolist(), b.tolist())) == set(
            zip(rows_a[keep].tolist(), rows_b[keep].tolist())
        )
        assert np.allclose(np.sort(j), np.sort(jaccard[keep]))


def test_ranked_tokens_in_chunks_keep_every_intersection_and_order_rarest_first():
    rng = np.random.default_rng(5)
    base = ["".join(rng.choice(list("abcdef"), size=rng.integers(0, 80))) for _ in range(40)]
    texts = base + [t[::-1] for t in base[:20]] + base[:10]
    sets = shingle_sets(texts, SignatureSpec(k=3))
    whole = rank_tokens(lambda: [sets])
    cuts = [0, 1, 17, 17, 50, len(texts)]  # an empty chunk too
    chunked = rank_tokens(lambda: [sets.take(np.arange(lo, hi)) for lo, hi in zip(cuts, cuts[1:])])
    assert whole.sets.hashes.dtype == np.int32
    assert np.array_equal(chunked.sets.hashes, whole.sets.hashes)
    assert np.array_equal(chunked.sets.offsets, sets.offsets)
    assert (chunked.tokens, chunked.shared) == (whole.tokens, whole.shared)
    hashes, in_sets = np.unique(sets.hashes, return_counts=True)
    assert whole.tokens == hashes.size and whole.shared == int((in_sets == 1).sum())
    frequency = np.bincount(whole.sets.hashes, minlength=whole.tokens)
    assert np.all(np.diff(frequency) >= 0)  # rank order: rarest first
    rows_a, rows_b = np.triu_indices(len(texts), 1)
    jaccard = exact_jaccard(sets, rows_a, rows_b)
    assert np.array_equal(exact_jaccard(whole.sets, rows_a, rows_b), jaccard)
    for ranked in (whole, chunked):
        a, b, j = similar_pairs(ranked, 0.4)
        keep = jaccard >= 0.4
        assert np.array_equal(a, rows_a[keep]) and np.array_equal(b, rows_b[keep])
        assert np.array_equal(j, jaccard[keep])


def test_ranks_past_one_set_per_token_are_all_shared():
    sets = ShingleSets(np.array([1, 5, 9, 5, 7, 9], np.uint64), np.array([0, 3, 6]))
    ranked = rank_tokens(lambda: [sets])
    assert (ranked.tokens, ranked.shared) == (4, 2)  # 1 and 7 in one set; 5 and 9 in two
    assert ranked.sets.hashes.tolist() == [0, 2, 3, 1, 2, 3]
    a, b, j = similar_pairs(ranked, 0.5)
    assert (a.tolist(), b.tolist(), j.tolist()) == ([0], [1], [0.5])


def test_collect_keeps_ids_up_to_2_63_apart_distinct():
    top = 2**63 - 1
    members = np.array([top, 2**40, 2**31, 7, top, 2**40], dtype=np.int64)
    candidates = collect([(members, np.array([0, 4, 6]))], max_bucket_size=10)
    doc_a, doc_b = candidates.arrays()
    pairs = list(zip(doc_a.tolist(), doc_b.tolist()))
    assert pairs == [(7, 2**31), (7, 2**40), (7, top), (2**31, 2**40), (2**31, top), (2**40, top)]


@pytest.mark.parametrize("start", [1, 2**40, 2**63 - 2**33])
@pytest.mark.parametrize("span", [50, 2**32 - 1, 2**32, 2**33])
def test_unique_pairs_are_the_distinct_pairs_in_order_however_far_apart_the_ids(start, span):
    """Spans under 2**32 are sorted packed into one integer; others as two columns."""
    rng = np.random.default_rng(span % 97)
    a = start + rng.integers(0, span, 400, dtype=np.int64)
    b = start + rng.integers(0, span, 400, dtype=np.int64)
    a[:2], b[:2] = start, start + span - 1  # the span's ends
    a, b = np.concatenate((a, a[:100])), np.concatenate((b, b[:100]))  # repeats
    got_a, got_b = unique_pairs(a, b)
    assert list(zip(got_a.tolist(), got_b.tolist())) == sorted(set(zip(a.tolist(), b.tolist())))
    assert got_a.dtype == got_b.dtype == np.int64


def test_buckets_in_any_order_make_the_same_pairs():
    """The databases hand a bucket's members over ascending; any other order is sorted."""
    rng = np.random.default_rng(11)
    sizes = rng.integers(2, 9, 300)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    members = rng.permutation(5_000)[: offsets[-1]].astype(np.int64)
    ascending = np.concatenate(
        [np.sort(members[lo:hi]) for lo, hi in zip(offsets[:-1], offsets[1:], strict=True)]
    )
    for max_bucket_size in (3, 10):
        shuffled = bucket_pairs(members, offsets, max_bucket_size)
        ordered = bucket_pairs(ascending, offsets, max_bucket_size)
        assert np.array_equal(shuffled[0], ordered[0]) and np.array_equal(shuffled[1], ordered[1])
        assert np.all(shuffled[0] < shuffled[1]) and shuffled[2] == ordered[2]


def test_bucket_arrays_of_either_database_parse_to_members_and_offsets():
    """The COPY text of array_agg(document_id) per bucket (PostgresStore.banding_buckets) and the
    lines of SQLite's group_concat (Store.iter_buckets), ids up to 2**63 - 1."""
    text = b"{9223372036854775807,1099511627776}\n{5,6,7}\n{3,4}\n"
    members, offsets = _parse_id_arrays(text)
    assert members.tolist() == [2**63 - 1, 2**40, 5, 6, 7, 3, 4]
    assert offsets.tolist() == [0, 2, 5, 7]
    members, offsets = _parse_id_arrays(b"")
    assert members.size == 0 and offsets.tolist() == [0]
    members, offsets = _parse_id_arrays(b"9223372036854775807,1099511627776\n5,6,7\n3,4\n")
    assert members.tolist() == [2**63 - 1, 2**40, 5, 6, 7, 3, 4]  # SQLite's group_concat
    assert offsets.tolist() == [0, 2, 5, 7]
