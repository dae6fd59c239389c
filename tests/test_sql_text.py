"""Parsing within bounds, on every path that parses SQL a model wrote: a text too long or nested
too deep is a typed error, never a parse that runs away or a RecursionError."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, load_pairs
from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.sql.classify import FALLBACK_CLASS, classify_sql
from sqlchorus.tools.engines.sqlite import (
    GuardedDatabase,
    NotAQueryError,
    SqlTooDeepError,
    SqlTooLongError,
)
from sqlchorus.tools.examples.fewshot import sql_links
from sqlchorus.tools.sql.hardness import hardness_counts
from sqlchorus.tools.steps.decompose import DecomposeError, decompose
from sqlchorus.tools.models.parsing import extract_sql
from sqlchorus.tools.candidates.results import check_sql
from sqlchorus.tools.schema.introspect import introspect
from sqlchorus.tools.candidates.selection import tables_and_columns
from sqlchorus.tools.steps.verify import verify_sql

PARSING = [p for p in load_pairs(FIXTURES / "guard_corpus" / "parsing.sql") if p.expected != "ok"]
TOO_LONG = "SELECT " + "+".join(["1"] * 50_000)
TOO_DEEP = "SELECT Name FROM singer WHERE Singer_ID IN " + "(SELECT Singer_ID FROM singer WHERE Singer_ID IN " * 25 + "(SELECT 1)" + ")" * 25
KINDS = {"too_long": SqlTooLongError, "too_deep": SqlTooDeepError}


@pytest.mark.parametrize("pair", PARSING, ids=[p.name for p in PARSING])
def test_bounds_give_typed_errors(pair):
    with pytest.raises(KINDS[pair.expected]):
        sql_text.parse(eval(pair.input))


def test_brackets_in_literals_and_names_do_not_count():
    sql_text.check_bounds("SELECT '" + "(" * 100 + "', \"" + "(" * 100 + "\" FROM t")


def test_a_recursion_error_is_a_typed_error(monkeypatch):
    def explode(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(sql_text.sqlglot, "parse", explode)
    with pytest.raises(SqlTooDeepError):
        sql_text.parse("SELECT 1")


def test_unparseable_text_is_not_a_query():
    with pytest.raises(NotAQueryError, match="does not parse"):
        sql_text.parse_one("SELEC 1 FROM")


@pytest.mark.parametrize("sql,kind", [(TOO_LONG, "too_long"), (TOO_DEEP, "too_deep")], ids=["long", "deep"])
def test_every_path_that_parses_model_output_is_bounded(sql, kind, spider):
    answer = f"Here is the query:\n```sql\n{sql}\n```"
    assert extract_sql(answer) is None  # generation, the fixer, LIST steps, DIN, N-rep
    with pytest.raises(DecomposeError):  # LIST's decomposer
        decompose(sql)
    with GuardedDatabase(spider("concert_singer")) as db:
        schema = introspect(db, sample_values=0)
        assert verify_sql(sql, db, schema=schema)["kind"] == "syntax"  # LIST's verifier
        checked = check_sql(db, sql)  # check_candidates, standalone selection, evaluation
        assert (checked["status"], checked["error_kind"]) == ("error", kind)
        assert tables_and_columns(sql, schema) == {}  # pairwise selection's schema
        assert sql_links(sql, schema) == {}  # few-shot links
    assert classify_sql(sql) == FALLBACK_CLASS  # DIN's classes
    with pytest.raises(ValueError):  # hardness, for evaluation reports
        hardness_counts(sql)


def test_the_guard_worker_and_the_parser_bound_sql_text_alike():
    # The guard's worker runs as a script that imports nothing of the package, so it holds its own
    # copy of the bound; the two must not drift apart.
    from sqlchorus.tools.engines import sqlite_guard

    assert sqlite_guard.MAX_SQL_CHARS == sql_text.MAX_SQL_CHARS
    with pytest.raises(SqlTooLongError):
        sql_text.check_bounds("SELECT 1" + " " * sqlite_guard.MAX_SQL_CHARS)
