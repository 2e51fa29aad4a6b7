"""Signature schemes in an index: chosen at creation, recorded, used for every document and
query, and never mixed (docs/spec.md)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from simindex import Index, SignatureSpec, normalize, shingle_sets, signatures
from simindex.cli import app
from simindex.errors import SpecMismatchError
from simindex.spec import SCHEME_V1, SCHEME_V2, SCHEMES
from simindex.store import create_engine, database_url
from tests.conftest import NEWS

runner = CliRunner()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_an_index_signs_everything_with_its_recorded_scheme(db_url, news, scheme):
    spec = SignatureSpec(scheme=scheme)
    with Index.create(db_url, spec) as index:
        index.add(news[:30])
    with Index.open(db_url) as index:
        assert index.spec == spec and index.stats().spec["scheme"] == scheme
        with index._store.read() as connection:
            ids, stored = next(index._store.signature_chunks(connection, spec.num_perm, 100))
        assert len(ids) == 30
        expected = signatures(shingle_sets([normalize(t) for _, t, _ in news[:30]], spec), spec)
        assert (stored == expected).all()
        # A document's own text finds it with estimate 1 under either scheme.
        match = index.query(news[3][1])[0]
        assert match.external_id == news[3][0] and match.estimated_jaccard == 1.0


def test_open_or_create_refuses_an_index_of_another_scheme(db_url, news):
    with Index.create(db_url, SignatureSpec(scheme=SCHEME_V1)) as index:
        index.add(news[:5])
    with pytest.raises(
        SpecMismatchError, match="uses signature scheme simindex-v1, not simindex-v2"
    ):
        Index.open_or_create(db_url, spec=SignatureSpec(scheme=SCHEME_V2))
    index, created = Index.open_or_create(db_url, spec=SignatureSpec(scheme=SCHEME_V1))
    with index:
        assert not created and len(index.query(news[0][1])) >= 1


def test_an_index_of_an_unknown_scheme_is_refused_on_open(db_url):
    Index.create(db_url).close()
    engine = create_engine(database_url(db_url))
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE index_settings SET scheme = 'simindex-v9'"))
    engine.dispose()
    with pytest.raises(SpecMismatchError, match="'simindex-v9' is not supported"):
        Index.open(db_url)


def test_cli_init_takes_a_scheme_and_dedup_refuses_to_mix(tmp_path):
    db = str(tmp_path / "v1.db")
    result = runner.invoke(app, ["init", "--db", db, "--scheme", SCHEME_V1])
    assert result.exit_code == 0 and result.stderr.startswith("simindex-v1: 5-character")
    out = tmp_path / "kept.jsonl"
    args = ["dedup", str(NEWS), "-o", str(out), "--db", db]
    result = runner.invoke(app, [*args, "--scheme", SCHEME_V2])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: the index uses signature scheme simindex-v1, not")
    assert "Traceback" not in result.output and not out.exists()
    assert runner.invoke(app, [*args, "--scheme", SCHEME_V1]).exit_code == 0 and out.exists()
    result = runner.invoke(app, ["init", "--db", str(tmp_path / "v2.db")])
    assert result.exit_code == 0 and result.stderr.startswith("simindex-v2: 5-character")
