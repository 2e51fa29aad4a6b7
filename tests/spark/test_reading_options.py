"""The Spark commands read a CSV file's layout (--delimiter, --no-header, --id-column,
--text-column) and bytes that are not in the encoding (--encoding-errors) as the local ones
do: the same records, so the same kept set and the same index."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simindex.cli import app
from tests.cli.test_cli import run
from tests.spark.test_dedup import _jsonl
from tests.spark.test_ingest import snapshot

HOW = [
    "--delimiter", ";", "--no-header", "--id-column", "2", "--text-column", "0",
    "--encoding-errors", "replace",
]  # fmt: skip


def _inputs(folder: Path) -> tuple[set[str], str]:
    """A folder of a headerless CSV file (text;source;id) and a JSON-lines file with a byte
    that is not UTF-8 in two records: stories, and edited copies of some (a record later in
    the input). Returns the ids of the first copies (what dedup keeps) and where the first
    record with a bad byte is."""
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(3000)] + ["naïve", "Straße", "a,b"]
    stories = [" ".join(rng.choice(words, 80)) for _ in range(12)]
    folder.mkdir()
    # The text first: with no header, the id's column is found by --id-column alone.
    rows = [f"{text};wire;s{i}" for i, text in enumerate(stories[:8])]
    rows += [f"{stories[i]} Updated.;desk;s{i}-edit" for i in (1, 4)]
    (folder / "a.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    lines = [json.dumps({"id": f"j{i}", "text": stories[i]}).encode() for i in range(8, 12)]
    # A bad byte in an edited copy of s2 (dropped) and in a story of its own (kept).
    lines.append(b'{"id": "j2-edit", "text": "' + stories[2].encode() + b' \xff"}')
    lines.append(b'{"id": "j12", "text": "a story of its own, \xff read as it can be"}')
    (folder / "b.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    first_copies = {f"s{i}" for i in range(8)} | {f"j{i}" for i in range(8, 13)}
    return first_copies, f"{folder / 'b.jsonl'}:5"


def _replaced(first: str) -> str:
    """What both commands say of the two records read with U+FFFD."""
    return (
        "2 record(s) held bytes that are not utf-8, read with U+FFFD in their place (the "
        f"first at {first})"
    )


def test_spark_dedup_reads_a_headerless_csv_and_bad_bytes_as_dedup(spark, tmp_path):
    expected, first_bad = _inputs(tmp_path / "in")
    local = tmp_path / "kept.jsonl"
    said = run("dedup", str(tmp_path / "in"), "-o", str(local), *HOW).stderr
    out = tmp_path / "out"
    told = run(
        "spark", "dedup", str(tmp_path / "in"), "--out", str(out), *HOW, "--output-format", "jsonl"
    ).stderr
    kept = {r["id"]: r for r in map(json.loads, local.open())}
    assert kept.keys() == expected
    assert {r["id"]: r for r in _jsonl(out / "kept")} == kept  # every field, as read
    assert kept["s0"]["1"] == "wire" and "\ufffd read as it can be" in kept["j12"]["text"]
    assert _replaced(first_bad) in said and _replaced(first_bad) in told
    dropped = {r["id"]: r["representative"] for r in _jsonl(out / "dropped")}
    assert dropped == {"s1-edit": "s1", "s4-edit": "s4", "j2-edit": "s2"}

    strict = run(
        "spark", "dedup", str(tmp_path / "in"), "--out", str(out / "x"), *HOW[:-2], ok=False
    )
    assert f"{first_bad}: is not valid utf-8" in strict.output and not (out / "x").exists()


@pytest.mark.postgres
def test_spark_ingest_reads_a_headerless_csv_and_bad_bytes_as_ingest(spark, pg_url, tmp_path):
    _, first_bad = _inputs(tmp_path / "in")
    runner = CliRunner()
    told = runner.invoke(
        app, ["spark", "ingest", str(tmp_path / "in"), "--db", pg_url, "--schema", "spark", *HOW]
    )
    assert told.exit_code == 0, told.output
    said = runner.invoke(
        app, ["ingest", str(tmp_path / "in"), "--db", pg_url, "--schema", "local", *HOW]
    )
    assert said.exit_code == 0, said.output
    assert snapshot(pg_url, "spark") == snapshot(pg_url, "local")
    documents = snapshot(pg_url, "spark")["documents"]
    assert len(documents) == 16 and {d[1] for d in documents} >= {"s0", "s1-edit", "j12"}
    assert _replaced(first_bad) in told.output and _replaced(first_bad) in said.output
