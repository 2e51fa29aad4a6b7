"""Signing on Spark (simindex.spark.pipeline.sign: stages.sign inside mapInArrow) gives what the
library gives: the golden vectors, and random Unicode texts byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simindex.pipeline.banding import band_keys
from simindex.pipeline.documents import document_problem
from simindex.pipeline.minhash import pack, sign
from simindex.pipeline.shingle import content_hash, normalize
from simindex.spark.pipeline import SIGNED_SCHEMA, sign_batch
from simindex.spark.pipeline import sign as spark_sign
from simindex.spec import SCHEME_V1, SCHEME_V2, SCHEMES, SignatureSpec

GOLDEN = Path(__file__).parents[1] / "golden"
VECTOR_FILES = {SCHEME_V1: "vectors.json", SCHEME_V2: "vectors-v2.json"}
CASE_FIELDS = ("scheme", "shingle", "k", "num_perm", "seed", "bands", "rows")


def _golden_rows() -> list[dict]:
    """One row per (vector, case, banding) of both vector files."""
    rows = []
    for scheme, name in VECTOR_FILES.items():
        vectors = json.loads((GOLDEN / name).read_text(encoding="utf-8"))["vectors"]
        for vector in vectors:
            for case in vector["cases"]:
                for banding, keys in case["band_keys"].items():
                    bands, rows_ = map(int, banding.split("x"))
                    rows.append(
                        {
                            "doc": len(rows),
                            "id": vector["id"],
                            "text": vector["text"],
                            "scheme": scheme,
                            **{f: case[f] for f in ("shingle", "k", "num_perm", "seed")},
                            "bands": bands,
                            "rows": rows_,
                            "expected": json.dumps(
                                {
                                    "content_hash": vector["content_hash"],
                                    "shingle_count": case["shingle_count"],
                                    "signature": case["signature"],
                                    "band_keys": keys,
                                }
                            ),
                        }
                    )
    return rows


def _sign_by_case(batches):
    """sign_batch of each row group of one (scheme, shingling, banding), in a Spark task."""
    for batch in batches:
        table = pa.Table.from_batches([batch])
        cases = {
            tuple(row[f] for f in CASE_FIELDS) for row in table.select(CASE_FIELDS).to_pylist()
        }
        for scheme, shingle, k, num_perm, seed, bands, rows in sorted(cases):
            spec = SignatureSpec(shingle=shingle, k=k, num_perm=num_perm, seed=seed, scheme=scheme)
            mask = np.ones(table.num_rows, bool)
            for field, value in zip(CASE_FIELDS, (scheme, shingle, k, num_perm, seed, bands, rows)):
                mask &= np.asarray(table.column(field).to_pylist(), dtype=object) == value
            part = table.filter(pa.array(mask)).combine_chunks().to_batches()[0]
            signed = sign_batch(part, spec, bands, rows)
            yield signed.append_column("expected", part.column("expected"))


def test_golden_vectors_through_spark_signing(spark) -> None:
    rows = _golden_rows()
    assert {r["scheme"] for r in rows} == set(SCHEMES)
    frame = spark.createDataFrame(rows).repartition(2)
    schema = f"{SIGNED_SCHEMA}, expected string"
    signed = frame.mapInArrow(_sign_by_case, schema).collect()
    assert len(signed) == len(rows)
    for row in signed:
        expected = json.loads(row["expected"])
        assert row["problem"] is None
        assert row["content_hash"] == expected["content_hash"], row["id"]
        assert row["shingle_count"] == expected["shingle_count"], row["id"]
        if expected["signature"] is None:  # no shingles: no signature, no band keys
            assert row["signature"] is None and row["band_keys"] is None
            continue
        stored = np.array(expected["signature"], np.uint32)
        assert row["signature"] == pack(stored), row["id"]
        assert row["band_keys"] == expected["band_keys"], row["id"]


TEXTS = st.lists(
    st.one_of(
        st.text(max_size=80),  # any code points but surrogates, NUL included
        st.text(alphabet="aAbB \t\n\u00e9\u0301\ufb01\u2028\u00a0İ", max_size=30),
        st.text(alphabet=st.characters(codec="utf-8", categories=["L", "Z"]), max_size=200),
    ),
    min_size=1,
    max_size=120,
)


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=TEXTS, scheme=st.sampled_from(SCHEMES), k=st.sampled_from([1, 3, 5]))
def test_spark_signing_equals_the_library_byte_for_byte(spark, texts, scheme, k) -> None:
    spec = SignatureSpec(k=k, num_perm=64, scheme=scheme)
    bands, rows = 16, 4
    frame = spark.createDataFrame(
        [(i, f"t{i}", text) for i, text in enumerate(texts)], "doc long, id string, text string"
    )
    signed = {row["doc"]: row for row in spark_sign(frame, spec, bands, rows).collect()}
    assert sorted(signed) == list(range(len(texts)))
    for i, text in enumerate(texts):
        row, problem = signed[i], document_problem(f"t{i}", text)
        assert row["problem"] == problem
        if problem:
            assert row["signature"] is None
            continue
        normalized = normalize(text)
        signature, counts = sign([normalized], spec)
        assert row["content_hash"] == content_hash(normalized)
        assert row["shingle_count"] == int(counts[0])
        if counts[0] == 0:
            assert row["signature"] is None and row["band_keys"] is None
            continue
        assert row["signature"] == pack(signature[0])
        assert row["band_keys"] == band_keys(signature, bands, rows)[0].tolist()
