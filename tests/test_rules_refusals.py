"""What each of the guards' checks makes of every statement of the attack corpora, word for word.

The layer tests (tests/test_layers_*.py) show that each check refuses what it must with the
right kind of error. Here every statement those tests draw on, the questions among them, and
the cases of tests/fixtures/rules/checks/ written for the corners of each check's reading
(quoting, comments, chains of names, a sequence, a cast), go through each check that reads text
or a server's account of it, and what comes out is compared with what it was when the file
tests/fixtures/rules/refusals.json was written: that it passes, or the error's kind and its
message as the user reads it, and for MySQL's lexer and PostgreSQL's plan reading the tokens
and the calls found. A change in what a check refuses, in what it tells the user, or in how it
reads a statement, fails a case here. The error must also carry the statement it refuses.

When a change is meant, write the file again and read its diff before committing::

    python tests/test_rules_refusals.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if __name__ == "__main__":  # run as a script to write the file: the tests' own imports first
    sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "scripts")]

import record_server_readings as recorder
import test_layers_duckdb as layers_duck
import test_layers_mysql as layers_my
import test_layers_postgres as layers_pg
import test_layers_sqlite as layers_sqlite
from conftest import FIXTURES, load_pairs

from sqlchorus.tools.engines.base import bounded_text, check_single_query
from sqlchorus.tools.engines.duckdb import check_duckdb_query
from sqlchorus.tools.engines.mysql_check import calls, check_note, check_text, tokens
from sqlchorus.tools.engines.postgres_check import check_plan, check_statement, plan_calls
from sqlchorus.tools.sql.errors import SqlError

GOLDEN = FIXTURES / "rules" / "refusals.json"
EXTRA = FIXTURES / "rules" / "checks"

PG_NAMES = recorder.names_of_json(json.loads(recorder.PLANS_FILE.read_text(encoding="utf-8"))["names"])


def _extra(name: str) -> dict[str, str]:
    return {f"extra: {p.name}": p.input for p in load_pairs(EXTRA / f"{name}.sql")}


def _reads(reads: list[str]) -> dict[str, str]:
    return {f"question: {sql}": sql for sql in reads}


def _corpus(cases: dict[str, Any]) -> dict[str, str]:
    return {name: p.input for name, p in cases.items()}


MYSQL = {**_corpus(layers_my.CASES), **_reads(layers_my.READS), **_extra("mysql")}
POSTGRES = {**_corpus(layers_pg.CASES), **_reads(layers_pg.READS), **_extra("postgres")}
DUCKDB = {**{f"{cls}: {p.name}": p.input for cls, pairs in layers_duck.CLASSES.items() for p in pairs},
          **_reads(layers_duck.READS), **_extra("duckdb")}
SQLITE = {**{f"refused: {p.name}": p.input for p in layers_sqlite.REFUSED},
          **{f"{path.stem}: {p.name}": p.input for path in sorted(layers_sqlite.CORPUS.glob("*.sql"))
             for p in load_pairs(path)},
          **_reads(layers_sqlite.READS)}
DUCKDB_COLUMNS = {"singer": frozenset({"singer_id", "name", "country", "age", "user"}),
                  "concert": frozenset({"concert_id", "concert_name", "year"})}
"""Columns as DuckDB's catalogue would give them, with one named as a function DuckDB reads bare."""
PG_OWN = dataclasses.replace(PG_NAMES, schema_operators=frozenset({"+", "=", "@@@"}),
                             schema_functions=PG_NAMES.schema_functions | {"upper"})
"""The server's names, in a database whose schema defines operators named +, = and @@@ and a
function named upper."""
PLANS = json.loads(recorder.PLANS_FILE.read_text(encoding="utf-8"))["cases"]
NOTES = json.loads(recorder.NOTES_FILE.read_text(encoding="utf-8"))["cases"]


def outcome(sql: str, check: Callable[[], Any], *, shortened: bool = False) -> str:
    """``passes``, or ``<kind>: <message>`` of the error the check raised, which must carry
    ``sql`` (when ``shortened``, its start, whose length is then part of the outcome)."""
    try:
        check()
    except SqlError as e:
        if shortened:
            assert e.sql and sql.strip().startswith(e.sql), f"the error carries {e.sql!r}"
            return f"{e.kind}: {e.message} [the statement's first {len(e.sql)} characters]"
        assert e.sql == sql, f"the error carries {e.sql!r}, not the statement it refuses"
        return f"{e.kind}: {e.message}"
    return "passes"


def _tokens(sql: str) -> str:
    return "\n".join(f"{t.kind} {t.start} {t.text}" for t in tokens(sql))


def _calls(sql: str) -> str:
    return "\n".join(f"{c.name}{' qualified' if c.qualified else ''}{' bare' if c.bare else ''}"
                     for c in calls(tokens(sql), not_calls=layers_my._ctes(sql)))


def _read(sql: str, reading: Callable[[str], str]) -> str:
    """What ``reading`` shows of ``sql``, or the error of a text the lexer cannot read."""
    try:
        return reading(sql)
    except SqlError as e:
        assert e.sql == sql
        return f"{e.kind}: {e.message}"


def _plan_calls(plan: Any) -> str:
    found = plan_calls(plan)
    return json.dumps({"functions": found.functions, "types": found.types, "relations": found.relations,
                       "identity": found.identity})


def cases() -> Iterator[tuple[str, str, Callable[[], str]]]:
    """Every (check, case, what the check makes of it), in a stable order."""
    for name, sql in MYSQL.items():
        not_calls = layers_my._ctes(sql)
        yield "mysql text", name, lambda sql=sql, nc=not_calls: outcome(sql, lambda: check_text(sql, not_calls=nc))
        yield "mysql tokens", name, lambda sql=sql: _read(sql, _tokens)
        yield "mysql calls", name, lambda sql=sql: _read(sql, _calls)
    for name, case in NOTES.items():
        if "note" in case:
            sql, note = case["sql"], case["note"]
            yield "mysql note", name, lambda sql=sql, note=note: outcome(
                sql, lambda: check_note(note, sql, database=layers_my.DATABASE, not_calls=layers_my._ctes(sql)))
    for p in load_pairs(EXTRA / "mysql_notes.sql"):
        yield "mysql note", f"extra: {p.name}", lambda note=p.input, nc=p.meta.get("not_calls", ""): outcome(
            note, lambda: check_note(note, note, database=layers_my.DATABASE, not_calls=nc.split()))
    for name, sql in POSTGRES.items():
        yield "postgres statement", name, lambda sql=sql: outcome(sql, lambda: check_statement(sql))
        yield "postgres statement, the server's names", name, lambda sql=sql: outcome(
            sql, lambda: check_statement(sql, names=PG_NAMES))
        yield "postgres statement, a schema with operators and functions of its own", name, lambda sql=sql: outcome(
            sql, lambda: check_statement(sql, names=PG_OWN))
    for name, sql in {"empty": "", "blank": "  \n ", "a query": " SELECT 1 ", "too long": "SELECT '" + "x" * 200_000 + "'",
                      "too deep": "SELECT " + "(" * 2000 + "1" + ")" * 2000}.items():
        yield "the text's bounds", name, lambda sql=sql: outcome(sql, lambda: bounded_text(sql),
                                                                 shortened=len(sql) > 200)
    for name, case in PLANS.items():
        if "plan" in case:
            sql, plan = case["sql"], case["plan"]
            yield "postgres plan", name, lambda sql=sql, plan=plan: outcome(
                sql, lambda: check_plan(plan, sql, names=PG_NAMES))
            yield "postgres plan calls", name, lambda plan=plan: _plan_calls(plan)
    for p in load_pairs(EXTRA / "postgres_plan_expressions.sql"):
        plan = [{"Plan": {"Node Type": "Result", "Output": [p.input]}}]
        yield "postgres plan calls", f"extra: {p.name}", lambda plan=plan: _plan_calls(plan)
        yield "postgres plan", f"extra: {p.name}", lambda plan=plan, sql=p.input: outcome(
            sql, lambda: check_plan(plan, sql, names=PG_NAMES))
        yield "postgres plan, as text", f"extra: {p.name}", lambda plan=json.dumps(plan), sql=p.input: outcome(
            sql, lambda: check_plan(plan, sql, names=PG_NAMES))
    for name, sql in DUCKDB.items():
        yield "duckdb statement", name, lambda sql=sql: outcome(
            sql, lambda: check_duckdb_query(sql, tables=layers_duck.TABLES, database=layers_duck.DATABASE))
        yield "duckdb statement, the database's columns", name, lambda sql=sql: outcome(
            sql, lambda: check_duckdb_query(sql, tables=layers_duck.TABLES, database=layers_duck.DATABASE,
                                            columns=DUCKDB_COLUMNS))
    for name, sql in SQLITE.items():
        yield "sqlite statement", name, lambda sql=sql: outcome(sql, lambda: check_single_query(sql))


CASES = list(cases())
EXPECTED: dict[str, dict[str, str]] = json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.exists() else {}


@pytest.mark.parametrize("check, name, made", CASES, ids=[f"{c}: {n}" for c, n, _ in CASES])
def test_what_each_check_makes_of_each_statement(check, name, made):
    assert name in EXPECTED.get(check, {}), f"no outcome written for this case: run {Path(__file__).name}"
    assert made() == EXPECTED[check][name]


def test_every_outcome_written_has_its_case():
    written = {(check, name) for check, by_name in EXPECTED.items() for name in by_name}
    assert written == {(check, name) for check, name, _ in CASES}


def test_the_checks_refuse_and_pass_what_the_file_shows():
    """A glance at the file's figures: each check refuses some statements and passes others."""
    for check in ("mysql text", "mysql note", "postgres statement", "postgres plan", "duckdb statement",
                  "sqlite statement"):
        outcomes = list(EXPECTED[check].values())
        assert "passes" in outcomes and any(o != "passes" for o in outcomes), check


def test_without_pglast_the_check_says_how_to_install_it(monkeypatch):
    from sqlchorus.tools.sql.errors import DatabaseOpenError

    monkeypatch.setitem(sys.modules, "pglast", None)  # an import of it fails
    with pytest.raises(DatabaseOpenError) as raised:
        check_statement("SELECT 1")
    assert str(raised.value) == "PostgreSQL support is not installed: pip install 'sqlchorus[postgres]'"


def main() -> None:
    written: dict[str, dict[str, str]] = {}
    for check, name, made in CASES:
        written.setdefault(check, {})[name] = made()
    GOLDEN.write_text(json.dumps(written, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {sum(map(len, written.values()))} outcomes of {len(written)} checks to {GOLDEN}")


if __name__ == "__main__":
    main()
