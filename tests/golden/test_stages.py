"""The Arrow stages (simindex.pipeline.stages) give the library's values: the golden vectors of both
schemes, and byte-equal content hashes, shingle counts, signatures and band keys on random
Unicode text. Another executor of the stages reuses :func:`check_golden` (given its own way
of running :func:`simindex.pipeline.stages.sign`) and :func:`assert_signed_like_library`."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from simindex.errors import InputError
from simindex.pipeline import signing, stages
from simindex.pipeline.banding import band_keys
from simindex.pipeline.candidates import bucket_pairs, unique_pairs
from simindex.pipeline.documents import MAX_ID_BYTES, document_problem
from simindex.pipeline.minhash import SIGNATURE_DTYPE, signatures
from simindex.pipeline.shingle import content_hash, normalize, shingle_sets
from simindex.pipeline.verify import Profiles, compare
from simindex.spec import SignatureSpec
from tests.golden.test_golden import (
    ALL_VECTORS,
    PROPERTY_SETTINGS,
    _bandings,
    _spec,
    num_perms,
    schemes,
    seeds,
    shingle_kinds,
    texts,
)

# A way to run stages.sign(documents, spec, bandings, shingles=True) on an executor.
Sign = Callable[[pa.RecordBatch, SignatureSpec, dict[int, tuple[int, int]]], pa.RecordBatch]


def local_sign(batch, spec, bandings):
    return stages.sign(batch, spec, bandings, shingles=True)


def golden_cases() -> list[tuple[SignatureSpec, tuple[tuple[int, int], ...], list[dict]]]:
    """The golden vectors grouped by signature spec and bandings: (spec, bandings, [{text,
    content_hash, shingle_count, signature, band_keys}]), one batch to sign per group."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for scheme, vectors in ALL_VECTORS.items():
        for vector in vectors["vectors"]:
            for case in vector["cases"]:
                bandings = tuple(_bandings(case))
                expected = {"text": vector["text"], "content_hash": vector["content_hash"]}
                groups[(_spec(case, scheme), bandings)].append({**expected, **case})
    return [(spec, bandings, cases) for (spec, bandings), cases in groups.items()]


def check_golden(sign: Sign) -> None:
    """Every golden vector through ``sign`` gives the vector's values."""
    for spec, bandings, cases in golden_cases():
        ids = [str(i) for i in range(len(cases))]
        batch = pa.RecordBatch.from_pydict({"id": ids, "text": [c["text"] for c in cases]})
        signed = sign(batch, spec, dict(enumerate(bandings))).to_pydict()
        assert signed["id"] == ids
        assert signed["problem"] == [None] * len(cases)
        assert signed["content_hash"] == [c["content_hash"] for c in cases]
        assert signed["shingle_count"] == [c["shingle_count"] for c in cases]
        assert signed["signature"] == [c["signature"] for c in cases]
        for banding_id, (bands, rows) in enumerate(bandings):
            expected = [
                None if c["signature"] is None else c["band_keys"][f"{bands}x{rows}"] for c in cases
            ]
            assert signed[stages.band_keys_column(banding_id)] == expected
        for row, case in zip(signed["shingles"], cases):
            assert row[: len(case["first_hashes"])] == case["first_hashes"]


def assert_signed_like_library(
    documents: list[str], signed: pa.RecordBatch, spec: SignatureSpec, bandings: dict
) -> None:
    """``signed`` (the output of stages.sign for ``documents``, all valid) holds the bytes the
    library computes one document at a time."""
    normalized = [normalize(t) for t in documents]
    sets = shingle_sets(normalized, spec)
    assert signed.column("content_hash").to_pylist() == [content_hash(t) for t in normalized]
    counts = signed.column("shingle_count").to_numpy()
    assert np.array_equal(counts, sets.counts)
    present = counts > 0
    signature_column = signed.column("signature")
    assert signature_column.is_null().to_pylist() == (~present).tolist()
    sigs = signatures(sets, spec)
    got = stages.signed_arrays(signed)[0]
    assert got.dtype == SIGNATURE_DTYPE
    assert got[present].tobytes() == sigs[present].astype(SIGNATURE_DTYPE).tobytes()
    for banding_id, (bands, rows) in bandings.items():
        keys = stages.band_keys_array(signed, banding_id)
        assert keys[present].tobytes() == band_keys(sigs, bands, rows)[present].tobytes()
    if "shingles" in signed.schema.names:
        from_stage = stages.shingle_sets_of(signed)
        assert np.array_equal(from_stage.offsets, sets.offsets)
        assert from_stage.hashes.tobytes() == sets.hashes.tobytes()


def test_golden_vectors_through_the_sign_stage():
    check_golden(local_sign)


def test_golden_vectors_through_the_sign_stage_without_shingles():
    check_golden(_without_shingles)


def _without_shingles(batch, spec, bandings):
    """stages.sign on the ingest path (no sorted sets), with the golden test's shingles
    column taken from the other path: only the signatures' route differs."""
    signed = stages.sign(batch, spec, bandings)
    assert "shingles" not in signed.schema.names
    return signed.append_column("shingles", local_sign(batch, spec, bandings).column("shingles"))


BANDINGS = {1: (8, 4), 7: (32, 1), 9: (5, 6)}
# What ingest accepts (the stage marks a NUL character as a problem).
valid_texts = texts.map(lambda text: text.replace("\x00", ""))


@PROPERTY_SETTINGS
@given(
    batch=st.lists(valid_texts, max_size=8),
    shingle=shingle_kinds,
    k=st.integers(min_value=1, max_value=8),
    seed=seeds,
    scheme=schemes,
    with_shingles=st.booleans(),
)
@example(batch=[], shingle="char", k=5, seed=1, scheme="simindex-v2", with_shingles=False)
@example(batch=["", " \u3000 ", "ASCII Only", "\u0130stanbul"], shingle="char", k=5, seed=1,
         scheme="simindex-v2", with_shingles=True)  # fmt: skip
def test_sign_stage_equals_the_library(batch, shingle, k, seed, scheme, with_shingles):
    spec = SignatureSpec(shingle=shingle, k=k, num_perm=32, seed=seed, scheme=scheme)
    documents = pa.RecordBatch.from_pydict(
        {"id": [f"d{i}" for i in range(len(batch))], "text": batch},
        schema=pa.schema([("id", pa.string()), ("text", pa.string())]),
    )
    signed = stages.sign(documents, spec, BANDINGS, shingles=with_shingles)
    assert signed.column("problem").null_count == len(batch)
    assert_signed_like_library(batch, signed, spec, BANDINGS)


@PROPERTY_SETTINGS
@given(batch=st.lists(valid_texts, min_size=1, max_size=6), num_perm=num_perms, scheme=schemes)
def test_sign_stage_on_a_slice_equals_the_library(batch, num_perm, scheme):
    """Arrow arrays can be views into larger buffers (offsets not from 0)."""
    spec = SignatureSpec(num_perm=num_perm, scheme=scheme)
    whole = pa.RecordBatch.from_pydict(
        {"id": [f"d{i}" for i in range(len(batch) + 2)], "text": ["Before", *batch, "after"]}
    )
    signed = stages.sign(whole.slice(1, len(batch)), spec, {0: (1, 1)})
    assert_signed_like_library(batch, signed, spec, {0: (1, 1)})


@PROPERTY_SETTINGS
@given(
    batch=st.lists(valid_texts, max_size=8),
    part_bytes=st.integers(min_value=1, max_value=12),
    with_shingles=st.booleans(),
)
def test_signing_texts_in_any_parts_equals_the_sign_stage(batch, part_bytes, with_shingles):
    """What Index signs (signing.sign_texts, from Python strings, SIGN_TEXT_BYTES characters
    at a time) is byte for byte what the stage signs, whatever the size of the parts."""
    spec = SignatureSpec(num_perm=32)
    documents = pa.RecordBatch.from_pydict(
        {"id": [str(i) for i in range(len(batch))], "text": batch},
        schema=pa.schema([("id", pa.string()), ("text", pa.string())]),
    )
    stage = stages.sign(documents, spec, BANDINGS, shingles=with_shingles)
    with mock.patch.object(signing, "SIGN_TEXT_BYTES", part_bytes):
        signed = signing.sign_texts(batch, spec, BANDINGS, shingles=with_shingles)
    assert signed.content_hashes == stage.column("content_hash").to_pylist()
    sigs, counts = stages.signed_arrays(stage)
    assert np.array_equal(signed.counts, counts) and signed.counts.dtype == np.int64
    assert signed.signatures.tobytes() == sigs.tobytes()
    for banding_id in BANDINGS:
        assert (
            signed.keys[banding_id].tobytes() == stages.band_keys_array(stage, banding_id).tobytes()
        )
    if with_shingles:
        sets = stages.shingle_sets_of(stage)
        assert np.array_equal(signed.sets.offsets, sets.offsets)
        assert signed.sets.hashes.tobytes() == sets.hashes.tobytes()
    else:
        assert signed.sets is None


# Ids and texts near every rule of readers.document_problem.
ids = st.one_of(
    st.text(max_size=6), st.just(""), st.just("x" * (MAX_ID_BYTES + 1)), st.just("a\x00"),
    st.just("\u00e9" * (MAX_ID_BYTES // 2)), st.none(),
)  # fmt: skip
problem_texts = st.one_of(texts, st.just("nul \x00 here"), st.just("x" * 41), st.none())
metadata = st.one_of(
    st.none(), st.just('{"source": "a"}'), st.just('{"x": NaN}'), st.just("{not json"),
    st.just('{"s": "\\u0000"}'), st.just("[1, 2]"),
)  # fmt: skip


@PROPERTY_SETTINGS
@given(rows=st.lists(st.tuples(ids, problem_texts, metadata), max_size=8))
def test_sign_stage_marks_what_ingest_refuses(rows):
    """A row's problem is readers.document_problem's message (metadata JSON that doesn't
    parse has its own); its other columns are null, and the valid rows are signed as alone."""
    spec = SignatureSpec(num_perm=16)
    signed = stages.sign(_rows_batch(rows), spec, {0: (4, 4)}, max_chars=40)
    expected = []
    for external_id, text, extra in rows:
        try:
            parsed = None if extra is None else json.loads(extra)
        except ValueError:
            expected.append("not JSON")
            continue
        expected.append(document_problem(external_id, text, 40, parsed))
    problems = signed.column("problem").to_pylist()
    for got, want in zip(problems, expected):
        assert got == want or (want == "not JSON" and "is not JSON" in got)
    valid = [i for i, p in enumerate(problems) if p is None]
    for name in ("content_hash", "shingle_count", "signature", stages.band_keys_column(0)):
        column = signed.column(name)
        assert all(column[i].as_py() is None for i, p in enumerate(problems) if p is not None)
    kept = signed.take(pa.array(valid, pa.int64()))
    assert_signed_like_library([rows[i][1] for i in valid], kept, spec, {0: (4, 4)})


def _rows_batch(rows: list[tuple]) -> pa.RecordBatch:
    """Documents of (id, text, metadata) rows."""
    return pa.RecordBatch.from_pydict(
        {
            "id": [r[0] for r in rows],
            "text": [r[1] for r in rows],
            "metadata": [r[2] for r in rows],
        },
        schema=pa.schema([("id", pa.string()), ("text", pa.string()), ("metadata", pa.string())]),
    )


@PROPERTY_SETTINGS
@given(
    rows=st.lists(st.tuples(ids, problem_texts, metadata), max_size=8),
    part_bytes=st.integers(min_value=1, max_value=12),
    with_shingles=st.booleans(),
)
def test_sign_stage_in_parts_of_its_text_equals_it_whole(rows, part_bytes, with_shingles):
    """The stage signs SIGN_TEXT_BYTES of text at a time: parts of any size give the batch
    that signing it whole gives."""
    spec = SignatureSpec(num_perm=16)
    documents = _rows_batch(rows)
    whole = stages.sign(documents, spec, {0: (4, 4)}, max_chars=40, shingles=with_shingles)
    with mock.patch.object(stages, "SIGN_TEXT_BYTES", part_bytes):
        parts = stages.sign(documents, spec, {0: (4, 4)}, max_chars=40, shingles=with_shingles)
    assert parts.equals(whole)


def test_sign_stage_takes_integer_ids_and_refuses_wrong_columns():
    spec = SignatureSpec(num_perm=8)
    signed = stages.sign(
        pa.RecordBatch.from_pydict({"id": [7, -1], "text": ["a b", "c"]}), spec, {}
    )
    assert signed.column("id").to_pylist() == ["7", "-1"]
    with pytest.raises(InputError, match="no text column"):
        stages.sign(pa.RecordBatch.from_pydict({"id": ["a"]}), spec, {})
    with pytest.raises(InputError, match="the text column must be text"):
        stages.sign(pa.RecordBatch.from_pydict({"id": ["a"], "text": [1.5]}), spec, {})
    bad = pa.Array.from_buffers(
        pa.string(), 1, [None, pa.py_buffer(np.array([0, 2], np.int32)), pa.py_buffer(b"\xff\xfe")]
    )
    with pytest.raises(InputError, match="not valid UTF-8"):
        stages.sign(pa.RecordBatch.from_arrays([pa.array(["a"]), bad], ["id", "text"]), spec, {})


@PROPERTY_SETTINGS
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=9), max_size=12),
    max_bucket_size=st.integers(min_value=1, max_value=6),
    data=st.data(),
)
def test_bucket_pairs_stage_equals_the_library(sizes, max_bucket_size, data):
    members = np.array(
        data.draw(st.lists(st.integers(-(2**62), 2**62), min_size=sum(sizes), max_size=sum(sizes))),
        np.int64,
    )
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    found = stages.bucket_pairs(stages.buckets_batch(members, offsets), max_bucket_size)
    a, b, _ = bucket_pairs(members, offsets, max_bucket_size)
    a, b = unique_pairs(a, b)
    assert found.column("doc_a").to_numpy().tobytes() == a.tobytes()
    assert found.column("doc_b").to_numpy().tobytes() == b.tobytes()


@PROPERTY_SETTINGS
@given(
    batch=st.lists(texts, min_size=2, max_size=8),
    data=st.data(),
    threshold=st.sampled_from([0.0, 0.3, 0.8, 1.0]),
    exact=st.booleans(),
)
def test_verify_stage_equals_the_library(batch, data, threshold, exact):
    """stages.verify keeps the pairs verify.compare puts at or above the threshold, with its
    numbers, whatever the order of the documents."""
    spec = SignatureSpec(num_perm=32)
    n = len(batch)
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=12)
    )
    rows_a = np.array([p[0] for p in pairs], np.int64)
    rows_b = np.array([p[1] for p in pairs], np.int64)
    sets = shingle_sets([normalize(t) for t in batch], spec)
    sigs = signatures(sets, spec)
    estimated, exact_values = compare(Profiles(sigs, sets if exact else None), rows_a, rows_b)
    keep = (exact_values if exact else estimated) >= threshold
    doc_ids = np.array(data.draw(st.permutations(range(100, 100 + n))), np.int64)
    shuffle = np.array(data.draw(st.permutations(range(n))), np.int64)
    documents = stages.documents_batch(
        doc_ids[shuffle], sigs[shuffle], [batch[i] for i in shuffle] if exact else None
    )
    pair_batch = pa.RecordBatch.from_pydict({"doc_a": doc_ids[rows_a], "doc_b": doc_ids[rows_b]})
    found = stages.verify(pair_batch, documents, spec, threshold)
    assert found.schema == stages.VERIFIED
    assert np.array_equal(found.column("doc_a").to_numpy(), doc_ids[rows_a][keep])
    assert np.array_equal(found.column("doc_b").to_numpy(), doc_ids[rows_b][keep])
    assert found.column("estimated").to_numpy().tobytes() == estimated[keep].tobytes()
    if exact:
        assert found.column("exact").to_numpy().tobytes() == exact_values[keep].tobytes()
    else:
        assert found.column("exact").null_count == int(keep.sum())


def test_verify_stage_refuses_a_pair_of_a_missing_document():
    spec = SignatureSpec(num_perm=4)
    documents = stages.documents_batch(np.array([3, 5]), np.zeros((2, 4), np.uint32), None)
    pairs = pa.RecordBatch.from_pydict({"doc_a": [3, 4], "doc_b": [5, 5]})
    with pytest.raises(InputError, match="names document 4"):
        stages.verify(pairs, documents, spec, 0.5)
    pairs = pa.RecordBatch.from_pydict({"doc_a": [3], "doc_b": [6]})
    with pytest.raises(InputError, match="names document 6"):
        stages.verify(pairs, documents, spec, 0.5)
    nothing = stages.documents_batch(np.empty(0, np.int64), np.empty((0, 4), np.uint32), None)
    with pytest.raises(InputError, match="names document 3"):
        stages.verify(pairs, nothing, spec, 0.5)
