"""What the CLI prints: user data never as terminal markup, summaries that say what happened,
a low-recall warning, the documents behind the ids (--show, `simindex show`), typed results."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from simindex.cli import app, shown
from tests.conftest import NEWS

runner = CliRunner()

STORY = "The central bank kept its key interest rate unchanged on Thursday, citing steady growth."
# Ids that rich would take as markup, a hyperlink, or terminal escape sequences.
HOSTILE_IDS = [
    "[/]",
    "[bold red]x[/bold red]",
    "[link=https://example.com]click[/link]",
    "esc\x1b[31mred\x1b]8;;https://example.com\x07",
]


def run(*args: str, ok: bool = True, input: str | None = None):
    # Wide enough that no table cell is cut short.
    result = runner.invoke(app, list(args), input=input, env={"COLUMNS": "400"})
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


def _write(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def test_shown_escapes_control_characters_and_keeps_the_rest():
    assert shown("a\x1b[31mb\n\tc\u200b") == "a\\x1b[31mb\\n\\tc\\u200b"
    assert shown("[bold]é 日本 ok[/]") == "[bold]é 日本 ok[/]"


def test_ids_print_as_themselves_never_as_markup(db_url, tmp_path):
    records = [{"id": i, "text": STORY} for i in HOSTILE_IDS]
    run("ingest", _write(tmp_path / "hostile.jsonl", records), "--db", db_url)
    outputs = [
        run("pairs", "--db", db_url),
        run("clusters", "--db", db_url),
        run("query", "--db", db_url, "--id", "[/]"),
        run("query", "--db", db_url, "--id", "[/]", "--show"),
        run("show", "[bold red]x[/bold red]", "--db", db_url),
        run("delete", HOSTILE_IDS[3], "nosuch\x1b[2J", "--db", db_url, "--dry-run"),
    ]
    for result in outputs:
        assert "\x1b" not in result.output and "\x07" not in result.output
    pairs, clusters, query = outputs[0].stdout, outputs[1].stdout, outputs[2].stdout
    for table in (pairs, query):
        assert (
            "[bold red]x[/bold red]" in table and "[link=https://example.com]click[/link]" in table
        )
        assert "esc\\x1b[31mred\\x1b]8;;https://example.com\\x07" in table
    assert "[/]" in pairs and "[/]" in clusters
    assert "[bold red]x[/bold red]" in outputs[4].stdout
    assert "not found: nosuch\\x1b[2J" in outputs[5].stderr


def test_an_error_message_with_user_data_is_one_escaped_line(tmp_path):
    missing = tmp_path / "x[/]\x1b[31m.txt"
    result = run("delete", "--ids-file", str(missing), "--db", str(tmp_path / "i.db"), ok=False)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert (
        result.stderr.splitlines()[-1].startswith("Error: ")
        and "x[/]\\x1b[31m.txt: can't read" in result.stderr
    )
    assert "\x1b" not in result.stderr and result.stderr.count("\n") == 1


def test_pairs_says_what_is_new_and_what_is_stored(db_url, tmp_path):
    lines = NEWS.read_text(encoding="utf-8").splitlines()
    first, rest = tmp_path / "first.jsonl", tmp_path / "rest.jsonl"
    first.write_text("\n".join(lines[:60]) + "\n")
    rest.write_text("\n".join(lines[60:]) + "\n")
    run("ingest", str(first), "--db", db_url)
    full = run("pairs", "--db", db_url).stderr
    assert "(full rebuild)" in full and "banding 1 (20 x 5" in full and ">= 0.8" in full
    stored_first = int(full.split("; ")[1].split()[0].replace(",", ""))

    run("ingest", str(rest), "--db", db_url)
    incremental = run("pairs", "--db", db_url).stderr
    assert "(incremental: 40 new documents)" in incremental
    new = int(incremental.split(" new pairs")[0].split()[-1])
    stored = int(incremental.split("; ")[1].split()[0].replace(",", ""))
    assert new > 0 and stored == stored_first + new

    rebuilt = run("pairs", "--db", db_url, "--full").stderr
    assert "(full rebuild)" in rebuilt and f"-> {stored} new pairs" in rebuilt
    assert f"{stored} pairs stored" in rebuilt

    clusters = run("clusters", "--db", db_url).stderr
    assert "clusters hold" in clusters and "documents" in clusters


def test_a_threshold_the_banding_cannot_serve_warns_with_the_expected_recall(tmp_path):
    db = str(tmp_path / "news.db")
    run("ingest", str(NEWS), "--db", db)
    served = run("pairs", "--db", db, "--threshold", "0.8")
    assert "Warning" not in served.stderr and "expected recall 99.96%" in served.stderr
    low = run("pairs", "--db", db, "--threshold", "0.5")
    warning = [line for line in low.stderr.splitlines() if line.startswith("Warning:")]
    # P(0.5) of 20 x 5 = 1 - (1 - 0.5**5)**20 = 0.470
    assert len(warning) == 1 and "probability 47.0%" in warning[0]
    assert "simindex reband --threshold 0.5" in warning[0]
    again = run("pairs", "--db", db, "--threshold", "0.5")  # warned again, not only once
    assert "Warning: the active banding (20 bands x 5 rows)" in again.stderr
    query = run("query", "--db", db, "--id", "n001", "--threshold", "0.3")
    assert "Warning:" in query.stderr and "simindex reband --threshold 0.3" in query.stderr
    run("reband", "--db", db, "--threshold", "0.5")
    assert "Warning" not in run("pairs", "--db", db, "--threshold", "0.5").stderr


def test_reband_to_a_threshold_makes_it_the_indexs_and_a_plain_pairs_keeps_its_pairs(db_url):
    run("ingest", str(NEWS), "--db", db_url)
    run("pairs", "--db", db_url)
    at_08 = _exported_similarities(db_url)
    built = run("reband", "--db", db_url, "--threshold", "0.5").stderr
    stats = json.loads(run("stats", "--db", db_url, "--json").stdout)
    active = next(b for b in stats["bandings"] if b["is_active"])
    assert stats["threshold"] == 0.5 and active["pairs_threshold"] == 0.5
    assert f"({active['bands']} bands x {active['rows']} rows)" in built
    at_05 = _exported_similarities(db_url)
    assert set(at_08) < set(at_05) and min(at_05.values()) >= 0.5
    assert any(similarity < 0.8 for similarity in at_05.values())
    run("pairs", "--db", db_url)  # at the index's threshold, now 0.5: the same pairs
    assert _exported_similarities(db_url) == at_05


def test_activating_a_banding_finds_the_pairs_and_clusters_the_old_one_had(db_url):
    run("ingest", str(NEWS), "--db", db_url)
    run("reband", "--db", db_url, "--bands", "32", "--rows", "4", "--no-activate")
    said = run("activate", "2", "--db", db_url).stderr.strip()
    assert said == (  # the old banding had no pairs either
        "Banding 2 is now active; it has no pairs yet: run `simindex pairs` (and `simindex "
        "clusters`)"
    )
    run("activate", "1", "--db", db_url)
    run("pairs", "--db", db_url)
    run("clusters", "--db", db_url, "--mode", "star")
    pairs, clusters = _exported_similarities(db_url), _exported_clusters(db_url)
    assert len(pairs) == 18 and len(clusters) == 36
    assert run("activate", "2", "--db", db_url).stderr.strip() == "Banding 2 is now active"
    # the views and export answer as before, with no `pairs` or `clusters` in between
    assert _exported_similarities(db_url) == pairs and _exported_clusters(db_url) == clusters
    stats = json.loads(run("stats", "--db", db_url, "--json").stdout)
    assert stats["active_banding"] == 2 and stats["pairs"] == 18


def _exported_clusters(db_url: str) -> list[dict[str, str]]:
    return list(
        csv.DictReader(io.StringIO(run("export", "--db", db_url, "--what", "clusters").stdout))
    )


def _exported_similarities(db_url: str) -> dict[tuple[str, str], float]:
    rows = csv.DictReader(io.StringIO(run("export", "--db", db_url).stdout))
    return {(r["id_a"], r["id_b"]): float(r["similarity"]) for r in rows}


def test_show_prints_titles_and_one_document(tmp_path):
    db = str(tmp_path / "news.db")
    run("ingest", str(NEWS), "--db", db)
    story = json.loads(NEWS.read_text(encoding="utf-8").splitlines()[0])
    pairs = run("pairs", "--db", db, "--show").stdout
    assert "title_a" in pairs
    query = run("query", "--db", db, "--id", story["id"], "--show", "--json").stdout
    match = json.loads(query.splitlines()[0])
    assert match["title"] and match["title"].removesuffix("...") in NEWS.read_text(encoding="utf-8")
    assert "title" in run("clusters", "--db", db, "--show").stdout

    document = run("show", story["id"], "--db", db).stdout
    assert story["text"].splitlines()[0] in document and story["title"] in document
    as_json = json.loads(run("show", story["id"], "--db", db, "--json").stdout)
    assert as_json["text"] == story["text"] and as_json["metadata"]["title"] == story["title"]
    missing = run("show", "nosuch", "--db", db, ok=False)
    assert missing.exit_code == 1 and "no document with id 'nosuch'" in missing.stderr


def test_a_title_falls_back_to_the_start_of_the_text(tmp_path):
    db = str(tmp_path / "t.db")
    text = "word " * 40
    records = [{"id": "a", "text": text}, {"id": "b", "text": text + "x"}]
    run("ingest", _write(tmp_path / "t.jsonl", records), "--db", db)
    table = run("pairs", "--db", db, "--show").stdout
    assert "word word word" in table and "..." in table


@pytest.mark.parametrize("command", [["stats"], ["pairs"], ["evaluate"], ["query", "x"]])
def test_help_shows_flags_as_flags(command):
    help_text = run(*command, "--help").stdout
    assert "<bool>" not in help_text and "--help" in help_text


def test_evaluate_takes_a_threshold(tmp_path):
    db = str(tmp_path / "news.db")
    run("ingest", str(NEWS), "--db", db)
    result = json.loads(run("evaluate", "--db", db, "--threshold", "0.9", "--json").stdout)
    assert result["threshold"] == 0.9
    assert json.loads(run("evaluate", "--db", db, "--json").stdout)["threshold"] == 0.8


def test_paths_in_summaries_print_as_themselves(tmp_path):
    db = str(tmp_path / "news.db")
    run("ingest", str(NEWS), "--db", db)
    run("pairs", "--db", db, "--top", "0")
    target = tmp_path / "[bold]pairs\x1b[2J.csv"
    exported = run("export", "--db", db, "-o", str(target))
    assert target.exists() and "[bold]pairs\\x1b[2J.csv" in exported.stderr
    assert "\x1b" not in exported.stderr
