"""Human-readable query plans, and the guarded EXPLAIN QUERY PLAN they come from."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import FIXTURES, load_pairs, sha256
from sqlchorus.tools.engines.sqlite import GuardedDatabase, SqlError
from sqlchorus.tools.engines.query_plan import explain, plan_for_schema, query_plan_text

DATA = json.loads((FIXTURES / "query_plan" / "cases.json").read_text())
REFUSED = load_pairs(FIXTURES / "query_plan" / "refused.txt")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    path = tmp_path_factory.mktemp("qp") / "library.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(DATA["schema"])
    conn.execute("INSERT INTO author VALUES (1, 'Ana', 'Chile')")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("case", DATA["cases"], ids=[c["sql"][:40] for c in DATA["cases"]])
def test_plan_text(library, case):
    with GuardedDatabase(library) as db:
        assert query_plan_text(db, case["sql"]) == case["plan"]
    assert plan_for_schema(DATA["schema"], case["sql"]) == case["plan"]


@pytest.mark.parametrize(
    "kind,sql", [(p.expected, p.input) for p in REFUSED], ids=[p.name for p in REFUSED]
)
def test_explain_refuses(library, kind, sql):
    before = sha256(library)
    with GuardedDatabase(library) as db:
        with pytest.raises(SqlError) as raised:
            db.explain_query_plan(sql)
        assert raised.value.kind == kind
        # the connection still works and the file is untouched
        assert db.execute("SELECT COUNT(*) FROM author").rows == [(1,)]
    assert sha256(library) == before


def test_explain_does_not_run_the_query(library):
    # A query that would run for ever is only planned, never stepped: stepped, it would meet the
    # time limit and fail; planning stays far within that limit on any machine.
    forever = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"
    with GuardedDatabase(library, timeout_s=30) as db:
        steps = explain(db, forever)
    assert any("SCAN n" in s.detail for s in steps)


def test_explain_is_traced(library, spans):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with GuardedDatabase(library, tracer=provider.get_tracer("t")) as db:
        db.explain_query_plan("SELECT name FROM author")
    (span,) = spans.get_finished_spans()
    assert span.attributes["db.query.text"] == "EXPLAIN QUERY PLAN SELECT name FROM author"
