"""No spelling SQLite accepts runs a function the SQLite guard does not allow.

The functions come from SQLite itself (``pragma_function_list`` of Python's sqlite3), every one
not in ``ALLOWED_FUNCTIONS``, called with the number of arguments SQLite lists for it so that
the call resolves; each is written in every way SQLite reads a name (plainly, in upper case,
"quoted", [bracketed], `backticked`) and placed in every part of a query (the select list,
WHERE, ORDER BY, GROUP BY and HAVING, a join condition, LIMIT, a window, a scalar subquery, a
subquery in FROM, a CTE, a recursive CTE). Table-valued functions (SQLite's eponymous virtual
tables, from ``pragma_module_list`` and ``pragma_pragma_list``) are read in FROM, and functions
SQLite calls for an operator (``MATCH``) through the operator. Every statement runs through a
real ``GuardedDatabase``, whose authorizer sees every function the engine resolves; each must be
refused, and the same statements with an allowed function in its place must run, so that a
refusal is the guard's and not a mistake in the statement.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.sql.errors import ExecutionError, ForbiddenError, NotAQueryError, SqlError
from sqlchorus.tools.engines.sqlite_guard import ALLOWED_FUNCTIONS


@dataclass(frozen=True)
class Function:
    name: str
    kind: str  # pragma_function_list's type: s (scalar), a (aggregate), w (window)
    narg: int  # -1: any number

    def call(self, callee: str) -> str:
        args = ", ".join(["1"] * (1 if self.narg < 0 else self.narg))
        return f"{callee}({args})" + (" OVER ()" if self.kind == "w" else "")


QUOTES: dict[str, Callable[[str], str]] = {
    "plain": lambda name: name,
    "upper_case": lambda name: name.upper(),
    "double_quoted": lambda name: f'"{name}"',
    "bracketed": lambda name: f"[{name}]",
    "backticked": lambda name: f"`{name}`",
}
"""The ways SQLite reads a function's name ('name'(...) and schema.name(...) are syntax errors)."""

PLACES = (
    "SELECT {call}",
    "SELECT x FROM t WHERE {call} IS NOT NULL",
    "SELECT x FROM t ORDER BY {call}",
    "SELECT count(*) FROM t GROUP BY {call}",
    "SELECT count(*) FROM t GROUP BY x HAVING {call} IS NOT NULL",
    "SELECT a.x FROM t AS a JOIN t AS b ON {call} IS NOT NULL",
    "SELECT x FROM t LIMIT coalesce({call}, 1) * 0 + 1",
    "SELECT sum(x) OVER (ORDER BY {call}) FROM t",
    "SELECT CASE WHEN x > 0 THEN {call} END FROM t",
    "SELECT (SELECT {call})",
    "SELECT x FROM t WHERE x IN (SELECT {call})",
    "SELECT x FROM t WHERE EXISTS (SELECT 1 WHERE {call} IS NOT NULL)",
    "SELECT v FROM (SELECT {call} AS v)",
    "WITH c(v) AS (SELECT {call}) SELECT v FROM c",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 2 AND {call} IS NOT NULL) "
    "SELECT n FROM r",
)
"""Where a call may stand in a query; each statement runs as written with an allowed function."""

OPERATORS = {"like": "LIKE", "glob": "GLOB", "match": "MATCH", "regexp": "REGEXP"}
"""SQLite's operators that call the function of that name."""

NOT_READ = re.compile(r"no such table: |invalid arguments to fts4aux constructor")
"""SQLite's errors for a name in FROM that it could not make a table of, so nothing was read: a
scalar function, a module that is no table-valued function (fts3, rtree), a pragma without
results; and fts4aux, which SQLite offers as an eponymous table but whose constructor needs
arguments that such a table never gets, so it fails before the authorizer is asked."""


def _sqlite_lists(sql: str) -> list[tuple]:
    with sqlite3.connect(":memory:") as conn:
        return conn.execute(sql).fetchall()


def _refused_functions() -> list[Function]:
    rows = _sqlite_lists("SELECT name, type, narg FROM pragma_function_list")
    return sorted({Function(name, kind, narg) for name, kind, narg in rows if name.lower() not in ALLOWED_FUNCTIONS},
                  key=lambda f: (f.name, f.narg))


def _table_valued() -> list[str]:
    """SQLite's table-valued functions and virtual tables: its modules, and the pragma_* table of
    every pragma (each is an eponymous virtual table, made when first named)."""
    modules = {name for (name,) in _sqlite_lists("SELECT name FROM pragma_module_list")}
    pragmas = {f"pragma_{name}" for (name,) in _sqlite_lists("SELECT name FROM pragma_pragma_list")}
    return sorted(modules | pragmas)


REFUSED = _refused_functions()
TABLE_VALUED = _table_valued()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path: Path = tmp_path_factory.mktemp("spellings") / "spellings.sqlite"
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE t (x INTEGER, s TEXT)")
        conn.execute("INSERT INTO t VALUES (1, 'a'), (2, '[1, 2]')")
        conn.commit()
    finally:
        conn.close()
    with GuardedDatabase(path, workers=1) as guarded:
        yield guarded


def _outcome(db: GuardedDatabase, sql: str, *, in_from: bool = False) -> str | None:
    """None when the guard refused the statement; else what happened. With ``in_from``, a name
    SQLite could not make a table of (:data:`NOT_READ`) counts as refused too."""
    try:
        result = db.execute(sql)
    except (ForbiddenError, NotAQueryError):
        return None
    except ExecutionError as e:
        if in_from and NOT_READ.search(e.message):
            return None
        return f"not refused by the guard: {e.kind}: {e.message.strip().splitlines()[0]}"
    except SqlError as e:
        return f"not refused by the guard: {e.kind}: {e.message.strip().splitlines()[0]}"
    return f"it ran: {result.rows[:1]}"


def test_the_functions_come_from_sqlite():
    names = {f.name for f in REFUSED}
    # The dangerous ones the guard's reasons name, under SQLite's own names.
    assert {"load_extension", "fts3_tokenizer", "randomblob", "sqlite_version"} <= names
    assert not {n.lower() for n in names} & ALLOWED_FUNCTIONS
    assert {"json_each", "json_tree", "pragma_table_info", "pragma_function_list"} <= set(TABLE_VALUED)


@pytest.mark.parametrize("quote", sorted(QUOTES))
def test_the_statements_run_with_an_allowed_function(quote, db):
    """The control: each place and quoting is SQL the guard runs, so that the refusals below are
    the authorizer's and not a statement SQLite cannot read."""
    allowed = Function("abs", "s", 1)
    failures = []
    for place in PLACES:
        sql = place.format(call=allowed.call(QUOTES[quote]("abs")))
        try:
            db.execute(sql)
        except SqlError as e:
            failures.append(f"{sql}\n    {e.kind}: {e.message}")
    assert not failures, "statements that do not run with an allowed function:\n" + "\n".join(failures)


@pytest.mark.parametrize("quote", sorted(QUOTES))
def test_no_spelling_runs_a_function_the_guard_does_not_allow(quote, db):
    failures, pairs = [], 0
    for function in REFUSED:
        call = function.call(QUOTES[quote](function.name))
        for place in PLACES:
            sql = place.format(call=call)
            pairs += 1
            outcome = _outcome(db, sql)
            if outcome:
                failures.append(f"{function.name}/{function.narg}: {sql}\n    {outcome}")
    assert pairs, "no statement was written"
    assert not failures, (f"{len(failures)} of {pairs} {quote} statements of functions the guard does not allow "
                          "got past it:\n" + "\n".join(failures[:40]))


def test_no_table_valued_function_is_read(db):
    failures, pairs = [], 0
    # The functions too: a scalar function named as a table must not be read either.
    for name in TABLE_VALUED + sorted({f.name for f in REFUSED}):
        for spelled in (name, f'"{name}"', f"[{name}]", f"`{name}`"):
            for sql in (f"SELECT * FROM {spelled}", f"SELECT * FROM {spelled}('[1]')",
                        f"SELECT * FROM t, {spelled}(t.s)", f"SELECT x FROM t WHERE x IN (SELECT 1 FROM {spelled})"):
                pairs += 1
                outcome = _outcome(db, sql, in_from=True)
                if outcome:
                    failures.append(f"{name}: {sql}\n    {outcome}")
    assert not failures, (f"{len(failures)} of {pairs} statements reading a table-valued function got past the "
                          "guard:\n" + "\n".join(failures[:40]))


def test_no_operator_calls_a_function_the_guard_does_not_allow(db):
    called = sorted({f.name for f in REFUSED} & set(OPERATORS))
    assert called, "SQLite lists none of the operators' functions outside the allowed ones"
    failures = []
    for name in called:
        op = OPERATORS[name]
        for sql in (f"SELECT x FROM t WHERE s {op} 'a'", f"SELECT s {op} 'a' FROM t",
                    f"SELECT x FROM t WHERE s NOT {op} 'a'", f"SELECT x FROM t ORDER BY s {op} 'a'"):
            outcome = _outcome(db, sql)
            if outcome:
                failures.append(f"{name}: {sql}\n    {outcome}")
    assert not failures, "operators that called a function the guard does not allow:\n" + "\n".join(failures)
