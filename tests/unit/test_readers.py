"""Reading inputs (formats, compression, shards, damage) and the output safeguards, no database."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from simindex.errors import InputError
from simindex.io.outputs import atomic_output, check_outputs
from simindex.io.readers import (
    expand_inputs,
    read_documents,
    read_records,
    span_lines,
    span_size,
)
from simindex.io.writers import output_format
from simindex.pipeline.documents import MAX_ID_BYTES, document_problem
from simindex.store import database_files

LINES = b'{"id": "a", "text": "first text", "tag": "x"}\n{"id": 2, "text": "second text"}\n'
DOCUMENTS = [("a", "first text", {"tag": "x"}), ("2", "second text", None)]


def test_zstd_and_gzip_are_read_by_their_magic_bytes(tmp_path):
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(LINES))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(LINES))
    (tmp_path / "c.jsonl").write_bytes(zstandard.ZstdCompressor().compress(LINES))  # misnamed
    for name in ("a.jsonl.zst", "b.jsonl.gz", "c.jsonl"):
        assert list(read_documents(str(tmp_path / name))) == DOCUMENTS


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: data[: len(data) // 2], "damaged or truncated gzip file"),
        (lambda data: data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:], "CRC check failed"),
    ],
)
def test_a_damaged_gzip_file_is_one_error_naming_it(tmp_path, damage, message):
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(damage(gzip.compress(LINES * 500)))
    with pytest.raises(InputError, match=message) as raised:
        list(read_documents(str(path)))
    assert str(raised.value).startswith(f"{path}: ")


def test_a_truncated_zstd_file_is_one_error_naming_it(tmp_path):
    path = tmp_path / "bad.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(LINES * 500)[:-10])
    with pytest.raises(InputError, match=f"{path}: is a damaged or truncated zstd file"):
        list(read_documents(str(path)))


@pytest.mark.parametrize(
    ("encoding", "message"),
    [
        ("no-such-codec", "unknown text encoding 'no-such-codec'"),
        ("rot13", "unknown text encoding 'rot13'"),  # a codec, but not a text encoding
        ("utf-16", "does not start with BOM.*utf-16-le"),
    ],
)
def test_encoding_mistakes_are_one_error(tmp_path, encoding, message):
    path = tmp_path / "a.jsonl"
    path.write_bytes(LINES.decode().encode("utf-16-le"))
    with pytest.raises(InputError, match=message):
        list(read_documents(str(path), encoding=encoding))
    assert list(read_documents(str(path), encoding="utf-16-le")) == DOCUMENTS


@pytest.mark.parametrize(("encoding", "name"), [("utf-16", "utf-16"), ("utf-32", "utf-32")])
@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".tsv"])
def test_a_utf16_or_utf32_file_read_as_utf8_names_its_encoding(tmp_path, encoding, name, suffix):
    path = tmp_path / f"a{suffix}"
    text = {".jsonl": '{"id": "a", "text": "café"}\n', ".csv": "id,text\na,café\n"}
    path.write_text(text.get(suffix, "a\tcafé\n"), encoding=encoding)  # with its byte-order mark
    message = f"{path}: starts with a {name} byte-order mark; pass --encoding {name}"
    with pytest.raises(InputError, match=message):
        list(read_documents(str(path), on_error=lambda e: None))  # not one skippable record
    assert [d[:2] for d in read_documents(str(path), encoding=encoding)] == [("a", "café")]


def test_a_csv_with_a_byte_order_mark_reads_its_first_column(tmp_path):
    path = tmp_path / "sheet.csv"
    path.write_bytes(b"\xef\xbb\xbfid,text\r\na,first text\r\n")
    assert list(read_documents(str(path))) == [("a", "first text", None)]


def test_json_nested_too_deep_is_a_record_error_that_can_be_skipped(tmp_path):
    path = tmp_path / "deep.jsonl"
    deep = '{"id": "d", "text": "t", "x": ' + "[" * 5000 + "]" * 5000 + "}\n"
    path.write_text(deep + LINES.decode())
    with pytest.raises(InputError, match=f"{path}:1: JSON nested too deeply"):
        list(read_documents(str(path)))
    skipped: list[InputError] = []
    assert list(read_documents(str(path), on_error=skipped.append)) == DOCUMENTS
    assert len(skipped) == 1


def test_parquet_columns_pick_id_and_text_and_the_rest_is_metadata(tmp_path):
    path = tmp_path / "a.parquet"
    table = pa.table({"url": ["u1", "u2"], "body": ["first text", "second text"], "n": [1, 2]})
    pq.write_table(table, path, row_group_size=1)
    documents = list(read_documents(str(path), id_field="url", text_field="body"))
    assert documents == [("u1", "first text", {"n": 1}), ("u2", "second text", {"n": 2})]
    with pytest.raises(InputError, match=f"{path}:1: no 'text' field"):
        list(read_documents(str(path), id_field="url"))


@pytest.mark.parametrize("damage", ["truncated", "not parquet"])
def test_a_damaged_parquet_file_is_one_error_naming_it(tmp_path, damage):
    path = tmp_path / "a.parquet"
    buffer = io.BytesIO()
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["one text", "another"]}), buffer)
    whole = buffer.getvalue()
    path.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else b'{"id": 1}\n' * 20)
    with pytest.raises(InputError, match=f"{path}: is not a readable Parquet file"):
        list(read_documents(str(path)))


def test_parquet_on_standard_input_is_recognised(tmp_path, monkeypatch):
    buffer = io.BytesIO()
    pq.write_table(pa.table({"id": ["a"], "text": ["first text"]}), buffer)
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(buffer.getvalue())))
    )
    assert list(read_documents("-")) == [("a", "first text", None)]


def test_directories_and_globs_stand_for_their_files_in_sorted_order(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for name in ("b.jsonl", "a.jsonl.gz", "c.parquet", "notes.md", ".hidden.jsonl"):
        (shards / name).write_bytes(b"")
    assert expand_inputs([str(shards)]) == [
        str(shards / n) for n in ("a.jsonl.gz", "b.jsonl", "c.parquet")
    ]
    assert expand_inputs([str(shards / "*.jsonl*"), "-"]) == [
        str(shards / "a.jsonl.gz"),
        str(shards / "b.jsonl"),
        "-",
    ]
    with pytest.raises(InputError, match=r"\*.csv: matches no file"):
        expand_inputs([str(shards / "*.csv")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="the directory holds no"):
        expand_inputs([str(tmp_path / "empty")])


def test_errors_of_a_shard_name_the_shard_and_line(tmp_path):
    (tmp_path / "1.jsonl").write_bytes(LINES)
    (tmp_path / "2.jsonl").write_bytes(LINES + b"{oops\n")
    files = expand_inputs([str(tmp_path)])
    with pytest.raises(InputError, match=f"{tmp_path / '2.jsonl'}:3: not valid JSON"):
        [d for f in files for d in read_documents(f)]


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ({"score": float("nan")}, "nan (not a JSON number)"),
        ({"a": [1, {"b": float("inf")}]}, "inf (not a JSON number)"),
        ({"a": {"b": "x\x00y"}}, "a NUL character (U+0000)"),
        ({"a": ["\ud800"]}, "a lone surrogate (not Unicode text)"),
        ({"\ud800": 1}, "a lone surrogate (not Unicode text)"),
    ],
)
def test_metadata_a_database_cannot_hold_is_a_problem_nested_too(metadata, problem):
    message = document_problem("d", "text", metadata=metadata)
    assert message == f"the metadata of document 'd' holds {problem}; remove it from the input"
    assert document_problem("d", "text", metadata={"fine": [1.5, None, {"x": "ü"}]}) is None


def test_metadata_must_be_json_and_an_escaped_nul_is_just_text():
    assert "a value JSON can't hold (Object of type set" in document_problem(
        "d", "text", metadata={"tags": {"a"}}
    )
    assert document_problem("d", "text", metadata={"raw": "a backslash-u \\u0000"}) is None


def test_ids_are_limited_in_utf8_bytes():
    assert document_problem("é" * (MAX_ID_BYTES // 2), "text") is None
    assert "longer than 2,000 bytes" in document_problem("é" * (MAX_ID_BYTES // 2 + 1), "text")


def test_a_json_line_writes_nan_and_it_is_refused_with_its_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "t", "score": float("nan")}) + "\n")
    with pytest.raises(InputError, match=f"{path}:1: the metadata of document 'a' holds nan"):
        list(read_documents(str(path)))


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_an_id_that_is_not_a_finite_number_is_refused_with_its_line(tmp_path, number):
    path = tmp_path / "a.jsonl"
    path.write_text(f'{{"id": 7, "text": "seven"}}\n{{"id": {number}, "text": "t"}}\n')
    with pytest.raises(InputError, match=f"{path}:2: a document id must be .*, got"):
        list(read_documents(str(path)))
    assert [d[0] for d in read_documents(str(path), on_error=lambda e: None)] == ["7"]


def test_output_format_follows_the_name_unless_given_and_a_conflict_is_an_error():
    assert output_format("p.parquet", None, "csv") == "parquet"
    assert output_format("p.jsonl.gz", None, "csv") == "jsonl"
    assert output_format("p", None, "tsv") == "tsv"
    assert output_format(None, None, "csv") == "csv"
    assert output_format("p.out", "jsonl", "csv") == "jsonl"
    with pytest.raises(InputError, match="the name says parquet but --format says csv"):
        output_format("x.parquet", "csv", "csv")
    with pytest.raises(InputError, match=r"pairs.xlsx: can't write a .xlsx file: name the "
                       r"output .csv, .jsonl, .tsv or .parquet"):  # fmt: skip
        output_format("pairs.xlsx", None, "csv")


def test_an_output_may_not_be_an_input_another_output_or_the_database(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_bytes(LINES)
    os.link(source, tmp_path / "hard.jsonl")
    os.symlink(source, tmp_path / "soft.jsonl")
    db = tmp_path / "v.db"
    for output, other in [
        (source, "the input"),
        (tmp_path / "hard.jsonl", "the input"),
        (tmp_path / "soft.jsonl", "the input"),
        (tmp_path / "sub" / ".." / "in.jsonl", "the input"),
        (db, "the database file"),
        (f"{db}-wal", "the database file"),
    ]:
        with pytest.raises(InputError, match=f"{output}: is also {other} "):
            check_outputs([output], [source], database_files(f"sqlite:///{db}"))
    with pytest.raises(InputError, match="is also the output"):
        check_outputs([tmp_path / "x.csv", tmp_path / "x.csv"])
    check_outputs(
        [tmp_path / "x.csv", "-", None], [source, "-"], database_files("postgresql://h/db")
    )
    assert database_files("postgresql://h:port/db") == []  # opening it says what's wrong


def test_a_failed_write_leaves_the_target_as_it_was_and_no_temporary_file(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(target) as stream:
        stream.write(b"partial")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["out.csv"]
    with atomic_output(target) as stream:
        stream.write(b"new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["out.csv"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def test_without_o_tmpfile_a_named_temporary_file_is_removed_and_stale_ones_too(
    tmp_path, monkeypatch
):
    monkeypatch.setattr("simindex.io.outputs._unnamed_file", lambda directory: None)
    target = tmp_path / "out.csv"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (tmp_path / f".out.csv.simindex-{dead}-abc.tmp").write_text("left by a kill -9")
    with pytest.raises(RuntimeError), atomic_output(target) as stream:
        stream.write(b"partial")
        raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []
    with atomic_output(target) as stream:
        stream.write(b"new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["out.csv"]


def test_read_records_numbers_csv_rows_by_line(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text('id,text\na,"two\nlines"\nb,x\n')
    assert [n for n, _ in read_records(str(path))] == [3, 4]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("fmt", ["jsonl", "tsv"])
def test_a_file_read_in_spans_gives_the_records_and_line_numbers_of_the_whole(tmp_path, fmt):
    lines = [
        "\ufeff" + json.dumps({"id": "a", "text": "first, after a byte-order mark"}),
        json.dumps({"id": "b", "text": "Straße 東京 naïve"}, ensure_ascii=False),
        "",
        "{not json",
        "\ufeff" + json.dumps({"id": "bom", "text": "a byte-order mark mid-file is a character"}),
        json.dumps({"id": "c", "text": "ends with a lone carriage return"}) + "\r{oops",
        json.dumps({"id": "d", "text": "crlf"}) + "\r",
        json.dumps({"id": "e", "text": "last, no line end"}),
    ]
    if fmt == "tsv":
        lines = [line.replace('{"id": ', "").replace(', "text": ', "\t") for line in lines]
    path = tmp_path / f"in.{fmt}"
    path.write_bytes("\n".join(lines).encode())
    size = path.stat().st_size

    def read(span=None):
        errors: list[str] = []
        found = list(read_records(str(path), on_error=lambda e: errors.append(str(e)), span=span))
        return found, errors

    whole = read()
    assert len(whole[0]) >= 5 and len(whole[1]) >= 2  # records and bad lines to number
    for split in (1, 2, 3, 7, 16, 50, size):
        spans = [(start, min(start + split, size)) for start in range(0, size, split)]
        records, errors, line = [], [], 1
        for start, stop in spans:
            with open(path, "rb") as raw:
                counted = sum(1 for _ in span_lines(raw, start, stop))
            found, bad = read((start, stop, line))
            records += found
            errors += bad
            line += counted
        assert (records, errors) == whole, split


def test_a_compressed_or_csv_file_is_not_read_in_spans(tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(LINES))
    (tmp_path / "a.jsonl").write_bytes(LINES)
    (tmp_path / "a.csv").write_text("id,text\na,b\n")
    assert span_size(str(tmp_path / "a.jsonl"), "auto", "utf-8") == len(LINES)
    assert span_size(str(tmp_path / "a.jsonl"), "auto", "utf-16") is None
    assert span_size(str(tmp_path / "a.jsonl.gz"), "auto", "utf-8") is None
    assert span_size(str(tmp_path / "a.csv"), "auto", "utf-8") is None
    with pytest.raises(InputError, match="is compressed"):
        list(read_records(str(tmp_path / "a.jsonl.gz"), span=(0, 10, 1)))
