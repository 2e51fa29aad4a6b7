"""Every SQL recipe in README.md and docs/sql.md runs as written on both backends and answers
what it says; the neighbors view and the candidates recipe agree with Index.query_id.

Only public names of simindex are used: the recipes are what a user runs beside the library.
"""

import re
import warnings

import numpy as np
import pytest
import sqlalchemy as sa

from simindex import Index, LowRecallWarning, band_keys
from tests.conftest import REPO

POSTGRES_ONLY = "-- PostgreSQL only\n"


def _recipes(name: str, db_url: str) -> list[str]:
    """The ```sql blocks of a file that run on the backend of ``db_url``."""
    text = (REPO / name).read_text(encoding="utf-8")
    recipes = re.findall(r"```sql\n(.*?)```", text, re.S)
    if db_url.startswith("sqlite"):
        return [r for r in recipes if not r.startswith(POSTGRES_ONLY)]
    return recipes


def _run(db_url: str, recipes: list[str], ids: list[str] | None = None) -> list[list[list]]:
    """The rows of each recipe (outer list) for each id in place of its 'n001' (inner list;
    without ``ids``, as written), numbers as floats (PostgreSQL's numeric is a Decimal)."""
    engine = sa.create_engine(db_url)  # the fixtures' URLs name their driver
    with engine.connect() as connection:
        results = [
            [
                [tuple(_plain(v) for v in row) for row in connection.execute(sa.text(r), {"x": x})]
                for x in ids or [None]
            ]
            for r in (recipes if ids is None else [r.replace("'n001'", ":x") for r in recipes])
        ]
    engine.dispose()
    return results


def _plain(value):
    return value if isinstance(value, str | int | float | None) else float(value)


def _neighbors_recipe(db_url: str) -> str:
    (recipe,) = [r for r in _recipes("docs/sql.md", db_url) if "FROM neighbors" in r]
    assert "0.9" in recipe
    return recipe


def _candidates_recipes(db_url: str) -> list[str]:
    """The candidates-of-X recipes that run on this backend (PostgreSQL has two)."""
    recipes = [r for r in _recipes("docs/sql.md", db_url) if "candidates AS" in r]
    assert len(recipes) == (1 if db_url.startswith("sqlite") else 2)
    return recipes


def _check_against_query_id(db_url: str, external_ids: list[str], paired: bool = True) -> None:
    """The candidates recipes find every candidate Index.query_id finds, with its estimate;
    the neighbors recipe finds its matches at 0.9 (of ``paired`` documents: pairs found)."""
    *candidates, neighbors = _run(
        db_url, [*_candidates_recipes(db_url), _neighbors_recipe(db_url)], external_ids
    )
    with Index.open(db_url) as index, warnings.catch_warnings():
        # threshold 0 asks for every candidate, not for recall at 0 (which no banding has)
        warnings.simplefilter("ignore", LowRecallWarning)
        found = [index.query_id(x, threshold=0) for x in external_ids]
    for i, (x, matches) in enumerate(zip(external_ids, found, strict=True)):
        estimates = sorted(((m.external_id, m.estimated_jaccard) for m in matches),
                           key=lambda match: (-match[1], match[0]))  # fmt: skip
        assert [recipe[i] for recipe in candidates] == [estimates] * len(candidates), x
        if paired:
            strong = [m for m in matches if m.similarity >= 0.9]
            assert [other for other, _ in neighbors[i]] == [m.external_id for m in strong], x
            assert [s for _, s in neighbors[i]] == pytest.approx([m.similarity for m in strong])


@pytest.fixture
def news_index(db_url, news):
    """An index of the news corpus with pairs and clusters at 0.8; its URL."""
    with Index.create(db_url) as index:
        index.add(news)
        index.find_pairs()
        index.cluster()
    return db_url


def _audit(recipe: str) -> bool:
    """Whether a recipe reads the audit trail (tests/db/test_audit.py runs those)."""
    return "run_log" in recipe or "decision_log" in recipe


def test_sql_recipes_run_as_written(news_index):
    recipes = [r for r in _recipes("docs/sql.md", news_index) if not _audit(r)]
    results = [rows for (rows,) in _run(news_index, recipes)]
    if news_index.startswith("postgresql"):  # its own candidates recipe finds the same
        postgres_only = recipes.index(next(r for r in recipes if r.startswith(POSTGRES_ONLY)))
        assert results.pop(postgres_only) == results[postgres_only]
    exact, near_n001, candidates_n001, sources, sizes, largest, every = results
    assert sorted(row[2] for row in exact) == ["n003", "n047", "n067", "n079"]
    assert near_n001 == [("n005", near_n001[0][1])] and near_n001[0][1] >= 0.9
    assert candidates_n001 == [("n005", 0.953125)]  # 122 of 128 values equal
    assert sum(row[2] for row in sources) == 18  # every pair at the default 0.8 threshold
    assert sum(size * count for size, count in sizes) == 100 * 20  # 20 band keys per document
    assert len(largest) == 10 and all(row[1] == 2 for row in largest)  # planted pairs
    assert largest[0][:2] == ("n001", 2) and largest[0][2]
    assert len(every) == 100 and sum(row[2] for row in every) == 100 - 18
    assert ("n019", "n003", 0) in every


def test_readme_recipe_runs_as_written(news_index):
    ((syndicated,),) = _run(news_index, _recipes("README.md", news_index))
    with Index.open(news_index) as index:
        pairs = [p for p in index.pairs(0.9)]
    similarities: dict[str, list[float]] = {}
    for pair in pairs:
        similarities.setdefault(pair.id_a, []).append(pair.similarity)
    expected = sorted((id_a, len(s), round(sum(s) / len(s), 3)) for id_a, s in similarities.items())
    expected.sort(key=lambda row: -row[1])
    assert len(pairs) == 17 and syndicated == expected[:10]


def test_neighbors_view_and_candidates_recipes_find_what_query_id_finds(news_index, news):
    with Index.open(news_index) as index:
        paired = {x for p in index.pairs() for x in (p.id_a, p.id_b)}
    unpaired = [external_id for external_id, *_ in news[:10] if external_id not in paired]
    assert len(paired) == 36 and unpaired
    _check_against_query_id(news_index, sorted(paired)[:20] + unpaired)  # query_id is slow


def test_candidates_recipes_find_a_document_with_no_stored_pair(news_index, news):
    text = news[0][1]
    with Index.open(news_index) as index:
        index.add([("late", text.replace("the", "a", 3))])  # after pairs were found
    (*candidates, (neighbors,)) = _run(
        news_index, [*_candidates_recipes(news_index), _neighbors_recipe(news_index)], ["late"]
    )
    assert neighbors == []
    assert all(rows[0][0] == "n001" for (rows,) in candidates)
    _check_against_query_id(news_index, ["late"], paired=False)


@pytest.mark.reuters
def test_neighbors_and_candidates_match_query_id_on_reuters(db_url, reuters):
    with Index.create(db_url) as index:
        index.add(reuters, on_empty="skip")
        index.find_pairs()
        paired = sorted({p.id_a for p in index.pairs()})
    unpaired = [external_id for external_id, _ in reuters[:5]]
    _check_against_query_id(db_url, paired[::200] + unpaired)  # some: each costs a scan


@pytest.mark.postgres
def test_simindex_band_keys_computes_the_keys_simindex_stores(pg_url):
    Index.create(pg_url, schema="news").close()  # called from outside the index's schema
    rng = np.random.default_rng(7)
    sigs = rng.integers(0, 2**32, size=(20, 128), dtype=np.uint64).astype(np.uint32)
    sigs[0] = 2**32 - 1  # every bit set: the 64-bit arithmetic must wrap, not overflow
    engine = sa.create_engine(pg_url)
    with engine.connect() as connection:
        for bands, rows in ((20, 5), (42, 3), (1, 128)):
            expected = band_keys(sigs, bands, rows)
            for sig, keys in zip(sigs, expected, strict=True):
                found = connection.execute(
                    sa.text("SELECT band, key FROM news.simindex_band_keys(:s, :b, :r)"),
                    {"s": sig.astype("<u4").tobytes(), "b": bands, "r": rows},
                ).all()
                assert found == list(enumerate(keys.tolist()))
    engine.dispose()
