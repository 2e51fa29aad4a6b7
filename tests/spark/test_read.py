"""Reading inputs on Spark: a large file is read in parts by several tasks, with the records
and the line numbers in messages of the file read whole."""

from __future__ import annotations

import gzip
import json

from simindex.spark.read import read_files


def _rows(frame) -> list[tuple]:
    return sorted(
        (tuple(r) for r in frame.collect()), key=lambda r: (r[0] is None, r[0], r[4] or "")
    )


def test_a_file_split_into_parts_reads_as_the_whole_file(spark, tmp_path):
    lines = [json.dumps({"id": f"d{i}", "text": f"story {i} ü", "n": i}) for i in range(300)]
    lines[7], lines[150], lines[222] = "{not json", '{"id": "x"}', '{"id": "z", "text": "\udcff"}'
    path = tmp_path / "in.jsonl"
    # Line 223 holds a byte that is not UTF-8: a bad record like the others.
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    whole = read_files(spark, [str(path)])
    parts = read_files(spark, [str(path)], split_bytes=1000)
    assert whole.rdd.getNumPartitions() == 1 and parts.rdd.getNumPartitions() > 10
    rows = _rows(parts)
    assert rows == _rows(whole) and len(rows) == 300
    problems = [r[4] for r in rows if r[4]]
    assert problems == [f"{path}:8: not valid JSON (Expecting property name enclosed in "
                        "double quotes)", f"{path}:151: no 'text' field (fields: id); choose "
                        "the fields with --id-field / --text-field",
                        f"{path}:223: is not valid utf-8 (invalid start byte at byte 22 of the "
                        "line); pass --on-error skip to leave such records out, or "
                        "--encoding-errors replace to read them with U+FFFD for the bad bytes"]  # fmt: skip
    assert json.loads(rows[0][3]) == {"id": "d0", "text": None, "n": 0}  # text kept once


def test_a_large_compressed_file_is_read_whole_and_spread_over_partitions(spark, tmp_path):
    lines = [json.dumps({"id": f"d{i}", "text": f"story {i}"}) for i in range(300)]
    path = tmp_path / "in.jsonl.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    spread = read_files(spark, [str(path)], split_bytes=1000)
    assert spread.rdd.getNumPartitions() > 1
    assert _rows(spread) == _rows(read_files(spark, [str(path)]))
