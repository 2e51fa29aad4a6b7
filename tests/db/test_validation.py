"""One validation of a record before any database sees it: the same records are accepted or
refused, with the same message, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import random
import re
import string

import pytest

from simindex import Index
from simindex.errors import InputError
from simindex.pipeline.documents import MAX_ID_BYTES
from tests.cli.test_cli import run

# Random letters don't compress: PostgreSQL's B-tree stores such an id at full length.
LONGEST_ID = "".join(random.Random(0).choices(string.ascii_letters, k=MAX_ID_BYTES))

REFUSED = [
    (("nan", "text", {"score": float("nan")}), "holds nan (not a JSON number)"),
    (("inf", "text", {"a": [1, {"b": float("-inf")}]}), "holds -inf (not a JSON number)"),
    (("nul", "text", {"a": {"b": "x\x00y"}}), "holds a NUL character (U+0000)"),
    (("surrogate", "text", {"a": ["\ud800"]}), "holds a lone surrogate (not Unicode text)"),
    ((LONGEST_ID + "x", "text", None), f"is longer than {MAX_ID_BYTES:,} bytes (UTF-8)"),
    (("🎉" * (MAX_ID_BYTES // 4 + 1), "text", None), f"is longer than {MAX_ID_BYTES:,} bytes"),
]


@pytest.mark.parametrize(("document", "message"), REFUSED, ids=[d[0][:9] for d, _ in REFUSED])
def test_what_a_database_cannot_hold_is_refused_alike_and_nothing_is_added(
    db_url, document, message
):
    with Index.create(db_url) as index:
        with pytest.raises(InputError, match=re.escape(message)):
            index.add([("ok", "a fine text"), document])
        assert index.stats().documents == 0


def test_the_longest_ids_and_int_ids_are_stored_on_both_backends(db_url):
    emoji = "🎉" * (MAX_ID_BYTES // 4)
    with Index.create(db_url) as index:
        result = index.add([(LONGEST_ID, "first text"), (emoji, "second text"), (7, "third")])
        assert result.added == 3 and result.total == 3
        assert index.query("third", threshold=1.0)[0].external_id == "7"
        assert index.query("first text", threshold=1.0)[0].external_id == LONGEST_ID


def test_on_error_skip_skips_them_alike_from_the_cli(db_url, tmp_path):
    source, log = tmp_path / "in.jsonl", tmp_path / "errors.jsonl"
    lines = [json.dumps({"id": "ok", "text": "a fine text"})]
    lines += [
        json.dumps({"id": external_id, "text": text, **(metadata or {})})
        for (external_id, text, metadata), _ in REFUSED
    ]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    result = run(
        "ingest", str(source), "--db", db_url, "--on-error", "skip", "--error-log", str(log)
    )
    assert "Added 1 new documents" in result.stderr
    logged = [json.loads(line)["error"] for line in log.read_text().splitlines()]
    assert len(logged) == len(REFUSED)
    for line, (_, message) in enumerate(REFUSED, start=2):
        assert logged[line - 2].startswith(f"{source}:{line}: ")
        assert message.split(" (")[0] in logged[line - 2]
