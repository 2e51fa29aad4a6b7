"""Documents too long for the shingling buffers (shingle.LONG_DOCUMENT code points) are
hashed a buffer at a time into a growing table of distinct shingles, or, with few repeats,
all at once and sorted: each way gives the reference's shingle sets, and signing gives their
signatures and counts. Long texts are folded a piece at a time, as they are whole."""

import numpy as np
import pytest

from simindex import SignatureSpec, normalize, shingle_sets, signatures
from simindex.pipeline.minhash import _keep_first_seen, sign
from simindex.pipeline.shingle import (
    FIRST_TABLE_BITS,
    FOLD_PIECE_BYTES,
    LONG_DOCUMENT,
    MOST_TABLE_BITS,
    normalize_batch,
)
from simindex.spec import SCHEMES
from tests.golden import reference


def words_text(characters: int, vocabulary: int, alphabet: str, seed: int) -> str:
    """``characters`` characters of words (3-8 letters of ``alphabet``) drawn at random from
    a vocabulary of ``vocabulary`` words: a text whose shingles repeat, as prose's do."""
    rng = np.random.default_rng(seed)
    letters = list(alphabet)
    words = ["".join(rng.choice(letters, size=rng.integers(3, 9))) for _ in range(vocabulary)]
    drawn = rng.integers(vocabulary, size=characters // 3)
    return " ".join(words[i] for i in drawn.tolist())[:characters]


def random_text(characters: int, seed: int) -> str:
    """Letters at random: nearly every shingle is distinct."""
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 26, size=characters) + ord("a")).astype(np.uint8).tobytes().decode()


def assert_signed_as_sorted_sets(texts: list[str], spec: SignatureSpec) -> np.ndarray:
    """Check shingle_sets() against the reference and sign() against the signatures of the
    sets; return the shingle counts."""
    normalized = normalize_batch(texts)
    sets = shingle_sets(normalized, spec)
    for i, text in enumerate(texts):
        expected = reference.shingle_hashes(reference.normalize(text), spec.shingle, spec.k)
        assert sets[i].tolist() == expected
    got_signatures, got_counts = sign(normalized, spec)
    assert got_counts.tolist() == sets.counts.tolist()
    assert np.array_equal(got_signatures, signatures(sets, spec))
    return got_counts


@pytest.mark.parametrize("scheme", SCHEMES)
def test_long_documents_are_shingled_and_signed_as_the_reference(scheme):
    """Long documents among short ones, ASCII and multi-byte (a character's bytes across
    two buffers), of few and of many distinct shingles (the table grows)."""
    texts = [
        "a short one",
        words_text(3 * LONG_DOCUMENT + 7, 300, "abcdefghij", seed=1),
        words_text(5 * LONG_DOCUMENT + 1, 40_000, "абвгдеёжзийклмн日本語", seed=2),
        words_text(LONG_DOCUMENT + 1, 50, "xyz", seed=3),
        "",
    ]
    counts = assert_signed_as_sorted_sets(texts, SignatureSpec(scheme=scheme))
    assert counts[2] > (1 << FIRST_TABLE_BITS) // 4  # more than the first table holds


def test_a_long_document_of_few_repeats_is_sorted_and_signed_the_same():
    """More distinct shingles than the table may hold (1 << MOST_TABLE_BITS slots, a quarter
    full): they are hashed into one array and sorted."""
    text = random_text((1 << MOST_TABLE_BITS) // 4 + 4 * LONG_DOCUMENT, seed=4)
    count = assert_signed_as_sorted_sets([text], SignatureSpec())[0]
    assert count == len({text[i : i + 5] for i in range(len(text) - 4)})
    assert count > (1 << MOST_TABLE_BITS) // 4


def test_long_documents_of_word_shingles_are_shingled_and_signed_as_the_reference():
    texts = [random_text(20, seed=5), words_text(8 * LONG_DOCUMENT, 30_000, "abcdefgh", seed=6)]
    counts = assert_signed_as_sorted_sets(texts, SignatureSpec(shingle="word", k=2))
    assert counts[1] > (1 << FIRST_TABLE_BITS) // 4


@pytest.mark.parametrize("distinct", [100, 50_000, 2_000_000])
def test_keep_first_seen_grows_its_table_or_sorts(distinct):
    """Few distinct values keep the first table; more grow it; most are sorted."""
    rng = np.random.default_rng(distinct)
    pool = rng.integers(0, 2**64, size=distinct, dtype=np.uint64)
    pool[0] = 0  # the table's free mark, tracked apart
    values = pool[rng.integers(0, distinct, size=3_000_000)]
    expected = np.unique(values)
    kept = values.copy()
    count = _keep_first_seen(kept)
    assert np.array_equal(np.sort(kept[:count]), expected)


def test_a_long_text_is_folded_a_piece_at_a_time_as_it_is_whole():
    """Pieces are cut before ASCII whitespace; what NFKC and str.lower() do next to one (a
    final sigma, combining marks, ligatures, a dotted capital I) comes out as folding the
    whole text gives."""
    words = [
        "ΟΔΟΣ",
        "ΣΑ",
        "Σ",
        "ΑΣ\u0301",
        "e\u0301",
        "\u0301",
        "ﬁne",
        "İstanbul",
        "Ǆ",
        "ＡＢＣ",
        "é",
    ]
    rng = np.random.default_rng(7)
    separators = [" ", "\n", "\t", "  ", " \u00a0 "]
    pieces = [
        words[w] + separators[s]
        for w, s in zip(rng.integers(len(words), size=600_000), rng.integers(5, size=600_000))
    ]
    text = "".join(pieces)
    assert len(text.encode("utf-8")) > 3 * FOLD_PIECE_BYTES
    normalized = normalize_batch(["plain ASCII", text, "Ω"])
    for i, original in enumerate(["plain ASCII", text, "Ω"]):
        utf8 = normalized.utf8[normalized.utf8_offsets[i] : normalized.utf8_offsets[i + 1]]
        assert utf8.tobytes().decode("utf-8") == normalize(original)
