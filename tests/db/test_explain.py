"""Index.explain and `simindex explain`: the similarities, the bands and the shared passages."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simindex import Index, SignatureSpec, band_keys, candidate_probability, signatures
from simindex.errors import SimindexError
from simindex.pipeline.passages import shared_passages
from simindex.pipeline.shingle import normalize, shingle_sets
from tests.cli.test_cli import run


def test_explain_agrees_with_the_pairs_and_the_banding(db_url, news):
    with Index.create(db_url) as index:
        index.add(news)
        index.find_pairs()
        pair = next(index.pairs())
        found = index.explain(pair.id_a, pair.id_b)
        apart = index.explain("n001", "n002")
        with pytest.raises(SimindexError, match="'nope' is not indexed"):
            index.explain("n001", "nope")
    assert found.exact_jaccard == pytest.approx(pair.exact_jaccard, abs=1e-12)
    assert found.estimated_jaccard == pytest.approx(pair.estimated_jaccard, abs=1e-12)
    texts = {d[0]: d[1] for d in news}
    sets = shingle_sets([normalize(texts[pair.id_a]), normalize(texts[pair.id_b])], SignatureSpec())
    keys = band_keys(signatures(sets, SignatureSpec()), found.bands, found.rows)
    assert found.collided_bands == tuple(np.flatnonzero(keys[0] == keys[1]).tolist())
    assert found.is_candidate and not apart.is_candidate
    assert apart.candidate_probability == pytest.approx(
        float(candidate_probability(apart.exact_jaccard, apart.bands, apart.rows))
    )
    assert found.text_a == normalize(texts[pair.id_a]) and found.passages_a


def test_shared_passages_mark_exactly_the_common_shingles():
    a, b = "the cat sat on the mat", "a cat sat on a hat"
    spans_a, spans_b = shared_passages(a, b, "char", 5)
    assert [a[s:e] for s, e in spans_a] == [" cat sat on "]
    assert [b[s:e] for s, e in spans_b] == [" cat sat on "]
    words_a, words_b = shared_passages(a, b, "word", 2)
    assert [a[s:e] for s, e in words_a] == ["cat sat on"]
    assert [b[s:e] for s, e in words_b] == ["cat sat on"]
    assert shared_passages("abc", "abc", "char", 5) == ([(0, 3)], [(0, 3)])


def test_the_explain_command_prints_and_writes_json(tmp_path):
    db = str(tmp_path / "i.db")
    docs = tmp_path / "docs.jsonl"
    text = "[bold]markup[/bold] is text here, and this story is long enough to be shingled well"
    docs.write_text(
        json.dumps({"id": "[red]a", "text": text})
        + "\n"
        + json.dumps({"id": "b", "text": text + "!"})
        + "\n"
    )
    run("ingest", str(docs), "--db", db)
    shown = run("explain", "[red]a", "b", "--db", db).stdout
    assert "[red]a ~ b: exact Jaccard" in shown and "[bold]markup[/bold]" in shown
    assert "collide in 20 of 20 bands" in shown
    found = json.loads(run("explain", "[red]a", "b", "--db", db, "--json").stdout)
    assert found["id_a"] == "[red]a" and found["collided_bands"] == list(range(20))
    assert found["passages_a"] == [[0, len(normalize(text))]]
    missing = run("explain", "a", "b", "--db", db, ok=False)
    assert missing.exit_code == 1 and "'a' is not indexed" in missing.output
