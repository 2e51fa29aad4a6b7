"""The audit trail: every change records a run in its own transaction (a failed one leaves
none), a clustering run records each decision, the decisions agree with what `dedup --db`
dropped, and the recipes of docs/sql.md answer the analysts' questions on both backends."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app
from simindex.dedup import dedup_files
from simindex.errors import DuplicateIdError, ParameterError
from tests.conftest import REPO
from tests.db.test_sql_docs import _recipes


def _audit_recipes(db_url: str) -> list[str]:
    recipes = [r for r in _recipes("docs/sql.md", db_url) if "_log" in r]
    assert len(recipes) == 3
    return recipes


def _rows(db_url: str, sql: str) -> list[tuple]:
    engine = sa.create_engine(db_url)
    with engine.connect() as connection:
        rows = [tuple(row) for row in connection.execute(sa.text(sql))]
    engine.dispose()
    return rows


def test_each_change_records_a_run_and_a_failed_change_none(db_url, news):
    with Index.create(db_url, threshold=0.8) as index:
        index.add(news[:60])
        with pytest.raises(DuplicateIdError):
            index.add([("late", "a new story about nothing in particular"), news[0][:2]])
        index.add(news[60:], on_duplicate="skip")
        index.find_pairs()
        index.cluster(keep="longest", mode="star")
        clustered = [m for m in index.clusters() if not m.is_representative]
        index.delete(["n002", "n003"], dry_run=True)  # changes nothing: no run
        index.delete(["n002", "n003"])
        index.evict(datetime.now(UTC) - timedelta(days=1))
        index.reband(threshold=0.7)
        runs = index.runs()
        decisions = list(index.decisions(runs[3].id))
    assert [r.command for r in reversed(runs)] == [
        "ingest", "ingest", "pairs", "clusters", "delete", "evict", "reband",
    ]  # fmt: skip
    ingest, more, pairs, clusters, delete, evict, reband = reversed(runs)
    assert [r.id for r in runs] == sorted((r.id for r in runs), reverse=True)
    assert (ingest.first_document, ingest.last_document) == (1, 60)
    # the failed add allocated no id that a later run shows, and left no run
    assert more.counts["added"] == 40 and more.last_document - more.first_document == 39
    assert more.parameters["on_duplicate"] == "skip"
    assert pairs.counts["pairs"] == 18 and pairs.threshold == 0.8
    assert clusters.keep == "star, longest" and clusters.counts["decisions"] == 18
    assert delete.counts == {"removed": 2, "not_found": 0} and evict.counts == {"removed": 0}
    assert reband.threshold == 0.7 and reband.bands * reband.rows <= 128
    assert reband.banding_id == reband.counts["banding"] != ingest.banding_id
    assert all(r.version and r.scheme == "simindex-v2" for r in runs)
    assert all(r.started_at <= r.finished_at for r in runs)
    # the clusters run's decisions are the clusters it built; a document deleted since
    # keeps its decision, without its id (n019 was held under the deleted n003)
    built = {(m.external_id, m.cluster, round(m.similarity, 9)) for m in clustered}
    gone = {m.external_id for m in clustered if m.cluster == "n003"}
    assert {(i if i not in gone else None) for i, _, _ in built} == {
        d.external_id if d.representative is not None else None for d in decisions
    }
    assert {(d.external_id, d.representative, round(d.similarity, 9)) for d in decisions} == {
        (i, None, s) if r == "n003" else (i, r, s) for i, r, s in built
    }


def test_calls_grouped_as_one_run_record_one_row(db_url, news):
    with Index.create(db_url) as index:
        with index.run("nightly", {"source": REPO / "examples" / "news.jsonl"}):
            index.add(news)
            index.find_pairs()
            index.cluster(mode="star")
        with pytest.raises(ParameterError, match="inside run"):
            with index.run("outer"), index.run("inner"):
                pass
        (run,) = index.runs()
    assert run.command == "nightly" and run.parameters == {
        "source": str(REPO / "examples/news.jsonl")
    }
    assert (run.first_document, run.last_document) == (1, 100)
    assert run.counts["added"] == 100 and run.counts["pairs"] == run.counts["decisions"] == 18
    assert run.keep == "star, earliest"


def _week(news, lo, hi, copies=()):
    """Records lo..hi of the news, and edited copies of the stories ``copies``."""
    week = [{"id": i, "text": t} for i, t, _ in news[lo:hi]]
    for i, t, _ in (news[c] for c in copies):
        week.append({"id": f"again-{i}", "text": t.replace(".", ";", 1) + " (updated)"})
    return week


def _write(path, records):
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def _dropped(path: str) -> dict[str, tuple[str, float]]:
    with open(path, encoding="utf-8", newline="") as f:
        return {r["id"]: (r["representative"], float(r["similarity"])) for r in csv.DictReader(f)}


def test_the_audit_rows_agree_with_what_dedup_dropped_and_the_recipes_find_them(
    db_url, news, tmp_path
):
    """Last month's crawl (run 1), then this week's (run 2) with updated copies of last
    month's stories: the decisions of run 2 are its dropped report, and the recipe finds
    exactly the records dropped because of last month's."""
    last_month = _write(tmp_path / "month.jsonl", _week(news, 0, 50))
    this_week = _write(tmp_path / "week.jsonl", _week(news, 50, 100, copies=(0, 5, 10, 20)))
    week_ids = {r["id"] for r in _week(news, 50, 100, copies=(0, 5, 10, 20))}
    month_ids = {i for i, _, _ in news[:50]}
    for source in (last_month, this_week):
        out = str(tmp_path / "out.jsonl")
        done = dedup_files([source], out, db=db_url)
    dropped = _dropped(done.dropped)
    assert dropped and set(dropped) <= week_ids
    because_of_last_month = {i: v for i, v in dropped.items() if v[0] in month_ids}
    assert len(because_of_last_month) >= 4  # the four updated copies at least

    with Index.open(db_url) as index:
        runs = index.runs()
        decided = {d.external_id: (d.representative, d.similarity) for d in index.decisions(2)}
    assert [(r.id, r.command) for r in runs] == [(2, "dedup"), (1, "dedup")]
    assert runs[0].parameters["inputs"] == [this_week] and runs[0].keep == "star, earliest"
    # run 2's decisions about its own records are exactly its dropped report
    own = {i: v for i, v in decided.items() if i in week_ids}
    assert own.keys() == dropped.keys()
    for i, (representative, similarity) in own.items():
        assert representative == dropped[i][0]
        assert similarity == pytest.approx(dropped[i][1], abs=1e-6)

    latest, from_last_month, by_run = (_rows(db_url, r) for r in _audit_recipes(db_url))
    assert [(row[0], row[1]) for row in latest] == [(2, "dedup"), (1, "dedup")]
    assert latest[0][5] == len(decided)
    assert {row[0]: row[1] for row in from_last_month} == {
        i: v[0] for i, v in because_of_last_month.items()
    }
    assert [row[2] for row in from_last_month] == sorted(
        (row[2] for row in from_last_month), reverse=True
    )
    counted = {(row[0], row[1]): row[2] for row in by_run}
    assert counted[(2, 1)] == len(because_of_last_month)
    assert sum(counted.values()) == len(decided)


def test_simindex_runs_lists_the_runs_and_a_runs_decisions(tmp_path):
    db = str(tmp_path / "news.db")
    news = str(REPO / "examples" / "news.jsonl")
    runner = CliRunner()
    result = runner.invoke(app, ["dedup", news, "-o", str(tmp_path / "out.jsonl"), "--db", db])
    assert result.exit_code == 0, result.output
    listed = runner.invoke(app, ["runs", "--db", db, "--json"])
    assert listed.exit_code == 0, listed.output
    assert '"command": "dedup"' in listed.stdout and '"decisions": 18' in listed.stdout
    decisions = runner.invoke(app, ["runs", "--db", db, "--decisions", "1", "--limit", "100"])
    assert decisions.exit_code == 0
    dropped = _dropped(str(tmp_path / "out.jsonl.dropped.csv"))
    for i, (representative, similarity) in dropped.items():
        assert f"│ {i} " in decisions.stdout and f"│ {representative} " in decisions.stdout
        assert f"│ {similarity:.3f} " in decisions.stdout
    none = runner.invoke(app, ["runs", "--db", db, "--decisions", "7"])
    assert none.exit_code == 0 and "Run 7 recorded no decisions" in none.stderr
