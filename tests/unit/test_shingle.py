"""Normalization and shingling, checked against sets built in plain Python."""

import numpy as np

from simindex import SignatureSpec, normalize, shingle_sets
from simindex.pipeline.minhash import _keep_first_seen, sign
from simindex.pipeline.shingle import normalize_batch
from simindex.pipeline.verify import exact_jaccard


def test_normalize_folds_case_compatibility_forms_and_whitespace():
    assert normalize("  Ｈｅｌｌｏ\tWORLD\n\n ﬁne  ") == "hello world fine"
    assert normalize(" \t\n ") == ""


def test_char_shingle_counts_are_the_distinct_k_grams():
    texts = ["abcabcabc", "abcd", "a", "", "ééééé é", "日本語のテキストです"]
    sets = shingle_sets(texts, SignatureSpec(k=3))
    expected = [len({t[i : i + 3] for i in range(max(len(t) - 2, 1))}) if t else 0 for t in texts]
    assert sets.counts.tolist() == expected


def test_word_shingles():
    spec = SignatureSpec(shingle="word", k=2)
    sets = shingle_sets(["a b a b", "one", "x y z"], spec)
    assert sets.counts.tolist() == [2, 1, 2]  # {a b, b a}; {one}; {x y, y z}


def test_exact_jaccard_of_shingle_sets_matches_python_sets():
    texts = ["the cat sat on the mat", "the cat sat on a mat", "completely different words"]
    sets = shingle_sets(texts, SignatureSpec(k=4))
    python = [{t[i : i + 4] for i in range(len(t) - 3)} for t in texts]
    rows_a, rows_b = np.array([0, 0, 1]), np.array([1, 2, 2])
    got = exact_jaccard(sets, rows_a, rows_b)
    want = [len(python[a] & python[b]) / len(python[a] | python[b]) for a, b in zip(rows_a, rows_b)]
    assert np.allclose(got, want)
    for i in range(3):  # each set is sorted and distinct
        assert np.all(np.diff(sets[i].astype(np.float64)) > 0)


def test_normalize_batch_treats_every_ascii_code_point_as_normalize_does():
    """The batch kernel's ASCII fast path has its own table of spaces."""
    texts = [f" a{chr(c)}{chr(c)}b {chr(c)}" for c in range(128)]
    batch = normalize_batch(texts)
    for i, text in enumerate(texts):
        utf8 = batch.utf8[batch.utf8_offsets[i] : batch.utf8_offsets[i + 1]]
        assert utf8.tobytes().decode("utf-8") == normalize(text), repr(chr(i))


def test_keep_first_seen_moves_the_distinct_values_to_the_front():
    """Zero (the table's free mark) and values equal in their low bits are kept apart."""
    values = np.array([7, 0, 5, 0, 5, (1 << 40) | 5, 7, 1 << 63, (1 << 40) | 5, 9], np.uint64)
    distinct = _keep_first_seen(values[1:])  # values[0] is outside the slice
    assert distinct == 6 and values[0] == 7
    assert values[1:7].tolist() == [0, 5, (1 << 40) | 5, 7, 1 << 63, 9]


def test_sign_counts_repeated_shingles_once():
    counts = sign(["aaaaaaaa", "abcabcabc", "", "ab"], SignatureSpec(k=3))[1]
    assert counts.tolist() == [1, 3, 0, 1]


def test_texts_in_the_database_order_are_taken_in_id_order():
    """Store.utf8_texts' fallback, for rows an aggregate took out of order."""
    from simindex.store.rows import take_texts as _take_texts

    texts = [b"", b"alpha", b"b", b"\xc3\xa9t\xc3\xa9", b"", b"omega!"]
    order = np.array([3, 0, 5, 1, 4, 2])
    data = np.frombuffer(b"".join(texts), np.uint8)
    taken, offsets = _take_texts(data, np.array([len(t) for t in texts]), order)
    got = [taken[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(order))]
    assert got == [texts[i] for i in order]
