"""DuckDB's prompts ask for lambdas in the form DuckDB runs (``lambda x: x > 30``, never the
arrow ``x -> x > 30`` that DuckDB 2.0 refuses), and that form, as a model writes it and as
sqlglot writes it back, runs through the DuckDB guard."""

from __future__ import annotations

import re

import pytest

duckdb = pytest.importorskip("duckdb")

from sqlchorus import prompts
from sqlchorus.tools.engines.duckdb import DuckDatabase
from sqlchorus.tools.sql.errors import ExecutionError

ADVISING = ("generate_divide_conquer", "nrep_system", "nrep_system_question")
"""The templates with advice on the engine's functions, which DuckDB's prompts replace."""

EXAMPLE = re.compile(r"list_filter\(l, (lambda \w+: [^)]+)\)")


@pytest.fixture(scope="module")
def duck(tmp_path_factory):
    path = tmp_path_factory.mktemp("lambdas") / "lists.duckdb"
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE t (id INTEGER, l INTEGER[])")
        con.execute("INSERT INTO t VALUES (1, [10, 40, 50]), (2, [5])")
    finally:
        con.close()
    with DuckDatabase(path, workers=1) as db:
        yield db


@pytest.mark.parametrize("name", ADVISING)
def test_duckdb_prompts_ask_for_the_lambda_keyword(name):
    text = prompts.for_dialect(prompts.load(name), "duckdb")
    assert EXAMPLE.search(text), text
    # The arrow appears once, as what not to write.
    assert text.count("->") == 1 and "never with an arrow (x -> x > 30)" in text
    assert "lambda" not in prompts.load(name)  # SQLite's prompts have no lambdas to advise on


def _example_lambda() -> str:
    return EXAMPLE.search(prompts.for_dialect(prompts.load(ADVISING[0]), "duckdb")).group(1)


def test_the_advised_lambda_runs_through_the_guard(duck):
    lam = _example_lambda()
    sql = f"SELECT id, list_filter(l, {lam}) FROM t ORDER BY id"
    assert duck.execute(sql).rows == [(1, [40, 50]), (2, [])]
    # sqlglot writes the lambda back as LAMBDA x : ..., as the pipeline's rewriting steps do.
    assert duck.execute(duck.check(sql).sql(dialect="duckdb")).rows == [(1, [40, 50]), (2, [])]
    # The other list functions that take a lambda pass too: they only compute over the values.
    assert duck.execute("SELECT list_transform(l, lambda x: x + 1), list_reduce(l, lambda a, b: a + b) FROM t "
                        "ORDER BY id").rows == [([11, 41, 51], 100), ([6], 5)]


@pytest.mark.skipif(int(duckdb.__version__.split(".")[0]) < 2, reason="DuckDB before 2.0 still runs the arrow form")
def test_duckdb_refuses_the_arrow_form(duck):
    with pytest.raises(ExecutionError, match="lambda"):
        duck.execute("SELECT list_filter(l, x -> x > 30) FROM t")
