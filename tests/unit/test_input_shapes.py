"""Inputs as they come: bytes not in the encoding, directories holding other files, CSV with
other delimiters or no header, and messages that stay one short line."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from simindex.errors import InputError
from simindex.io.delimited import CsvLayout
from simindex.io.lines import ReplacedRecords
from simindex.io.readers import (
    document_problem,
    expand_inputs,
    read_documents,
    read_records,
    scan_inputs,
)

GOOD = [("a", "café, first", None), ("c", "naïve third", None)]


def _jsonl(bad: bytes) -> bytes:
    return b"".join(
        [
            json.dumps({"id": "a", "text": "café, first"}, ensure_ascii=False).encode() + b"\n",
            b'{"id": "b", "text": "' + bad + b'"}\n',
            json.dumps({"id": "c", "text": "naïve third"}, ensure_ascii=False).encode() + b"\n",
        ]
    )


FILES = {
    "in.jsonl": _jsonl(b"caf\xe9"),
    "in.jsonl.gz": gzip.compress(_jsonl(b"caf\xe9")),
    "in.tsv": "a\tcafé, first\nb\tcaf\xe9\nc\tnaïve third\n".encode(
        "utf-8", "surrogateescape"
    ).replace(b"caf\xc3\xa9\n", b"caf\xe9\n"),  # fmt: skip
    "in.csv": 'id,text\na,"café, first"\nb,caf\xe9\nc,naïve third\n'.encode().replace(
        b"caf\xc3\xa9\n", b"caf\xe9\n"
    ),
}


@pytest.mark.parametrize("name", FILES)
def test_a_byte_not_in_the_encoding_spoils_only_its_record(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(FILES[name])
    with pytest.raises(InputError) as raised:
        list(read_documents(str(path)))
    message = str(raised.value)
    assert message.startswith(f"{path}:{3 if name == 'in.csv' else 2}: is not valid utf-8 (")
    assert "--on-error skip" in message and "--encoding-errors replace" in message
    assert "latin-1" not in message  # it would turn every valid record into mojibake
    skipped: list[InputError] = []
    assert list(read_documents(str(path), on_error=skipped.append)) == GOOD
    assert [str(e) for e in skipped] == [message]
    replaced = ReplacedRecords()
    lenient = list(read_documents(str(path), encoding_errors="replace", on_replaced=replaced))
    assert lenient == [GOOD[0], ("b", "caf\ufffd", None), GOOD[1]]
    assert replaced.count == 1 and replaced.first == f"{path}:{3 if name == 'in.csv' else 2}"
    assert "1 record(s) held bytes that are not utf-8" in replaced.summary()


def test_a_csv_record_over_several_lines_is_spoiled_by_a_bad_byte_in_any(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b'id,text\na,"one\ntw\xff\nthree"\nb,fine\n')
    errors: list[InputError] = []
    assert list(read_documents(str(path), on_error=errors.append)) == [("b", "fine", None)]
    assert [str(e).split(" (")[0] for e in errors] == [f"{path}:3: is not valid utf-8"]
    replaced = ReplacedRecords()
    documents = list(read_documents(str(path), encoding_errors="replace", on_replaced=replaced))
    assert documents[0] == ("a", "one\ntw\ufffd\nthree", None)
    assert (replaced.count, replaced.first) == (1, f"{path}:4")


def test_a_file_read_in_spans_refuses_and_replaces_bad_bytes_alike(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(FILES["in.jsonl"])
    middle = FILES["in.jsonl"].index(b"\n") + 1  # the second span starts with the bad line
    spans = [(0, middle, 1), (middle, len(FILES["in.jsonl"]), 2)]
    errors: list[InputError] = []
    found = [r for s in spans for r in read_records(str(path), on_error=errors.append, span=s)]
    assert [n for n, _ in found] == [1, 3] and str(errors[0]).startswith(f"{path}:2: is not")
    replaced = ReplacedRecords()
    lenient = read_records(
        str(path), encoding_errors="replace", on_replaced=replaced, span=spans[1]
    )
    assert [r["text"] for _, r in lenient] == ["caf\ufffd", "naïve third"]
    assert replaced.first == f"{path}:2"


def test_other_encodings_still_read_and_utf16_is_decoded_as_one_stream(tmp_path):
    latin = tmp_path / "latin.tsv"
    latin.write_bytes("a\tcafé\n".encode("latin-1"))
    assert list(read_documents(str(latin), encoding="latin-1")) == [("a", "café", None)]
    wide = tmp_path / "wide.tsv"
    wide.write_bytes("a\tone\nb\ttwo\n".encode("utf-16") + b"\x00\xd8" + "\n".encode("utf-16-le"))
    with pytest.raises(InputError, match=r"wide.tsv: is not valid utf-16 past line \d+ .*replace"):
        list(read_documents(str(wide), encoding="utf-16"))
    replaced = ReplacedRecords()
    documents = read_documents(
        str(wide), encoding="utf-16", encoding_errors="replace", on_replaced=replaced, on_error=str
    )
    assert [d[0] for d in documents][:2] == ["a", "b"] and replaced.count == 1


def test_an_unknown_encoding_errors_mode_is_an_error(tmp_path):
    (tmp_path / "a.jsonl").write_text("")
    with pytest.raises(InputError, match="unknown encoding errors mode 'ignore'; choose strict"):
        list(read_documents(str(tmp_path / "a.jsonl"), encoding_errors="ignore"))  # type: ignore[arg-type]


def test_a_directory_reads_the_shard_formats_and_lists_what_it_skipped(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    line = b'{"id": "x", "text": "y"}\n'
    names = ["a.jsonl", "b.ndjson.gz", "c.csv", "d.tsv.zst", "e.parquet", "README.txt",
             "info.json", "notes.md", ".hidden.jsonl"]  # fmt: skip
    for name in names:
        (shards / name).write_bytes(line)
    (shards / "sub.jsonl").mkdir()  # a subdirectory is named, not read
    (shards / ".cache").mkdir()
    found = scan_inputs([str(shards), str(shards / "README.txt")])
    assert found.files == [str(shards / n) for n in names[:5]] + [str(shards / "README.txt")]
    skipped = ("README.txt", "info.json", "notes.md", "sub.jsonl/")
    assert found.skipped == [f"{shards}/{n}" for n in skipped]
    assert found.note() == (
        "skipped 4 file(s) of the directories not named .jsonl, .ndjson, .csv, .tsv or .parquet "
        "(compressed or not): README.txt, info.json, notes.md, sub.jsonl/; name a file to read it"
    )
    assert expand_inputs([str(shards)]) == found.files[:5]
    assert scan_inputs([str(shards / "a.jsonl")]).note() is None
    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "1.txt").write_text("a\tb\n")
    (texts / "2024").mkdir()
    with pytest.raises(InputError, match=r"texts: the directory holds no file named \.jsonl.*, "
                       r"only 1.txt, 2024/; name the files to read them"):  # fmt: skip
        scan_inputs([str(texts)])
    assert list(read_documents(str(texts / "1.txt"))) == [("a", "b", None)]  # named: id<TAB>text


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_a_csv_delimiter_is_found_or_given(tmp_path, delimiter):
    path = tmp_path / "in.csv"
    rows = [["id", "text", "tag"], ["a", "one, two; three | four", "x"], ["b", "second", "y"]]
    path.write_text(
        "".join(delimiter.join(f'"{v}"' if "," in v else v for v in r) + "\n" for r in rows)
    )
    expected = [("a", "one, two; three | four", {"tag": "x"}), ("b", "second", {"tag": "y"})]
    assert list(read_documents(str(path))) == expected
    given = CsvLayout(delimiter="\\t" if delimiter == "\t" else delimiter)
    assert list(read_documents(str(path), csv_layout=given)) == expected


def test_a_comma_header_keeps_the_comma_whatever_the_rows_hold(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id,text\na,x;y;z\nb,u;v;w\n")
    assert list(read_documents(str(path))) == [("a", "x;y;z", None), ("b", "u;v;w", None)]


def test_without_a_header_the_delimiter_that_comes_first_wins(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text('1;Hello, world;x\n"2;a";Bye, all\n')
    layout = CsvLayout(header=False)
    assert [d[:2] for d in read_documents(str(path), csv_layout=layout)] == [
        ("1", "Hello, world"),
        ("2;a", "Bye, all"),
    ]


def test_a_headerless_csv_reads_its_columns_by_position(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("u1;2024;first text\nu2;2025;second text\nu3\n")
    layout = CsvLayout(header=False, id_column=0, text_column=2)
    errors: list[InputError] = []
    documents = list(read_documents(str(path), csv_layout=layout, on_error=errors.append))
    assert documents == [("u1", "first text", {"1": "2024"}), ("u2", "second text", {"1": "2025"})]
    assert [str(e) for e in errors] == [
        f"{path}:3: has 1 column(s), no column 2 (counted from 0); choose the columns with "
        "--id-column / --text-column, or the delimiter with --delimiter"
    ]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"delimiter": ";;"}, "the CSV delimiter must be one character"),
        ({"delimiter": '"'}, "the CSV delimiter must be one character"),
        ({"text_column": -1}, "--text-column must be a column number from 0, got -1"),
        ({"header": False, "id_column": 1}, "the id and the text can't both be column 1"),
    ],
)
def test_a_csv_layout_that_cannot_be_is_an_error(layout, message):
    with pytest.raises(InputError, match=message):
        CsvLayout(**layout)


def test_messages_cut_long_values_and_field_lists(tmp_path):
    story = "Once upon a time, " * 200
    path = tmp_path / "headerless.csv"
    path.write_text(f"a,{story}\nb,{story}\n")
    with pytest.raises(InputError) as raised:
        list(read_documents(str(path)))
    assert len(str(raised.value)) < 300 and "…); choose the fields" in str(raised.value)
    assert "--no-header" in str(raised.value)
    wide = tmp_path / "wide.parquet"
    pq.write_table(pa.table({f"column_{i}": [i] for i in range(50)}), wide)
    with pytest.raises(InputError, match=r"no 'id' field \(fields: column_0, .{60,80}…\);"):
        list(read_documents(str(wide)))
    long_id = "x" * 3000
    for problem in (document_problem(long_id, "t"), document_problem(long_id[:100], None)):
        assert len(problem) < 200 and "xxx…" in problem


def test_a_semicolon_csv_no_longer_fails_on_its_header(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id;text\na;first\n")
    assert list(read_documents(str(path))) == [("a", "first", None)]


@pytest.mark.parametrize("block", [1, 2, 3, 5, 64])
def test_lines_end_alike_whatever_the_blocks_they_are_read_in(tmp_path, monkeypatch, block):
    data = b"\xef\xbb\xbfa\tone\r\nb\ttwo\rc\tthree\r\r\nd\t\xe2\x80\xa8four\n\ne\tlast"
    path = tmp_path / "in.tsv"
    path.write_bytes(data)
    whole = list(read_records(str(path)))
    assert [n for n, _ in whole] == [1, 2, 3, 5, 7]
    monkeypatch.setattr("simindex.io.lines._BLOCK", block)
    assert list(read_records(str(path))) == whole
    assert [r["text"] for _, r in whole] == ["one", "two", "three", "\u2028four", "last"]
