"""Updates in place: on_duplicate="replace" swaps a document's text, signature and band keys,
and the next incremental find_pairs leaves pairs and clusters as a full rebuild would."""

import json

import pytest
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app
from simindex.errors import ParameterError


def _pairs_and_clusters(index: Index) -> tuple[list, list]:
    pairs = sorted((p.id_a, p.id_b, round(p.similarity, 12)) for p in index.pairs())
    clusters = sorted((c.external_id, c.cluster) for c in index.clusters())
    return pairs, clusters


def test_replace_then_incremental_pairs_equals_a_full_rebuild(db_url, news):
    texts = {external_id: text for external_id, text, _ in news}
    with Index.create(db_url) as index:
        index.add(news)
        index.find_pairs()
        index.cluster()
        assert ("n001", "n005") in {(p.id_a, p.id_b) for p in index.pairs()}
        # n005 (a near copy of n001) becomes a copy of n010; n020 of n030.
        corrected = [("n005", texts["n010"], None), ("n020", texts["n030"] + " Updated.", None)]
        result = index.add(corrected, on_duplicate="replace")
        assert (result.added, result.replaced) == (2, ["n005", "n020"])
        assert index.check() == []  # no stray signature or band key of the old copies
        report = index.find_pairs()
        assert report.incremental
        incremental = _pairs_and_clusters(index)
        index.find_pairs(full=True)
        rebuilt = _pairs_and_clusters(index)
    assert incremental == rebuilt
    pairs = {(a, b) for a, b, _ in incremental[0]}
    assert ("n001", "n005") not in pairs
    assert {("n005", "n010"), ("n020", "n030")} <= pairs | {(b, a) for a, b in pairs}
    clusters = dict(incremental[1])
    assert clusters["n005"] == clusters["n010"] and "n001" not in clusters


def test_replace_keeps_the_last_copy_within_a_call_and_across_batches(db_url, news):
    (_, first, _), (_, second, _), (_, third, _) = news[10:13]
    with Index.create(db_url) as index:
        result = index.add(
            [("a", first), ("b", second), ("a", second), ("a", third)],
            batch_size=2,  # "a" repeats within the second batch and across the two
            on_duplicate="replace",
        )
        assert (result.added, result.replaced) == (3, ["a", "a"])
        assert index.stats().documents == 2 and index.check() == []
        assert [m.external_id for m in index.query(third)] == ["a"]
        assert [m.external_id for m in index.query(first)] == []
        assert [m.external_id for m in index.query(second)] == ["b"]


def test_skip_keeps_the_first_copy_and_fail_names_replace(db_url, news):
    (_, first, _), (_, second, _) = news[10:12]
    with Index.create(db_url) as index:
        result = index.add([("a", first), ("a", second)], on_duplicate="skip")
        assert (result.added, result.replaced, result.skipped_existing) == (1, [], ["a"])
        assert [m.external_id for m in index.query(first)] == ["a"]
        with pytest.raises(ParameterError, match="'fail', 'skip' or 'replace'"):
            index.add([("a", first)], on_duplicate="overwrite")  # type: ignore[arg-type]


def test_cli_ingest_on_duplicate_replace(db_url, tmp_path, news):
    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps({"id": "a", "text": news[0][1]}) + "\n")
    correction = tmp_path / "correction.jsonl"
    correction.write_text(json.dumps({"id": "a", "text": news[1][1]}) + "\n")
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(first), "--db", db_url]).exit_code == 0
    result = runner.invoke(
        app, ["ingest", str(correction), "--db", db_url, "--on-duplicate", "replace"]
    )
    assert result.exit_code == 0, result.output
    assert "the index holds 1; 1 replaced an earlier copy" in result.stderr
    with Index.open(db_url) as index:
        assert [m.external_id for m in index.query(news[1][1])] == ["a"]
