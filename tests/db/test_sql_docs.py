"""Every SQL recipe in docs/sql.md runs on both backends and answers what it says."""

import re

import sqlalchemy as sa

from simindex import Index
from simindex.store import database_url
from tests.conftest import REPO


def _recipes() -> list[str]:
    text = (REPO / "docs" / "sql.md").read_text(encoding="utf-8")
    return re.findall(r"```sql\n(.*?)```", text, re.S)


def test_sql_recipes_run(db_url, news):
    with Index.create(db_url) as index:
        index.add(news)
        index.find_pairs()
        index.cluster()
    engine = sa.create_engine(database_url(db_url))
    results = []
    with engine.connect() as connection:
        for recipe in _recipes():
            if engine.dialect.name == "sqlite":  # the one dialect difference the guide names
                recipe = re.sub(
                    r"(\w)\.metadata->>'(\w+)'", r"json_extract(\1.metadata, '$.\2')", recipe
                )
            results.append(connection.exec_driver_sql(recipe).all())
    engine.dispose()
    exact, near_n001, sources, sizes, largest, every = results
    assert sorted(row[2] for row in exact) == ["n003", "n047", "n067", "n079"]
    assert near_n001 == [("n005", near_n001[0][1])] and near_n001[0][1] >= 0.9
    assert sum(row[2] for row in sources) == 18  # every pair at the default 0.8 threshold
    assert sum(size * count for size, count in sizes) == 100 * 20  # 20 band keys per document
    assert len(largest) == 10 and all(row[1] == 2 for row in largest)  # planted pairs
    assert largest[0][:2] == ("n001", 2) and largest[0][2]
    assert len(every) == 100 and sum(row[2] for row in every) == 100 - 18
    assert ("n019", "n003", 0) in every
