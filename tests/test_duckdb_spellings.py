"""No spelling DuckDB accepts runs a function the DuckDB guard does not allow.

The functions come from DuckDB itself (``duckdb_functions()`` on a connection opened with the
guard's settings), every one whose name is not in ``ALLOWED_FUNCTIONS``; each is written in every
way DuckDB reads a call: plainly, in upper case, quoted, qualified by schema and catalogue,
as a method (DuckDB reads ``a.f(b)`` as ``f(a, b)``), in FROM, as a statement, nested in a
subquery or a clause, and bare (DuckDB reads ``user`` or ``"current_schema"`` as a call when no
column of that name is in reach). Each statement must be refused by the parse check or, where
the check lets it through, fail in a real ``DuckDatabase`` without DuckDB resolving the name to
the function; a statement that runs, or that DuckDB binds to the function and refuses only for
its arguments, is a failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")

from sqlchorus.tools.engines import duckdb_guard
from sqlchorus.tools.engines.duckdb import ALLOWED_FUNCTIONS, DuckDatabase
from sqlchorus.tools.sql.errors import ForbiddenError, NotAQueryError, SqlError

DATABASE = "spellings"

VALUE_NAMES = ("localtime", "localtimestamp")
"""Names DuckDB's binder reads as calls (``SELECT localtime``) that ``duckdb_functions()`` does not
list; they are tried bare with the functions' names."""

UNRESOLVED = re.compile(r'Referenced (column|table) "[^"]*" (was )?not found|Function with name \S+ '
                        r"(does not exist|is not in the catalog)|Parser Error: syntax error")
"""DuckDB's errors for a name it did not resolve to a function: the function never ran. Not among
them: 'No function matches the given name and argument types' (DuckDB found the function, and
with the right arguments it would have run), nor an error of a function that ran and failed
('Table with name x does not exist' from query_table)."""

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Function:
    name: str
    kind: str  # duckdb_functions()'s function_type: scalar, aggregate, window, macro, table...
    schema: str  # main, or pg_catalog for DuckDB's PostgreSQL compatibility macros

    @property
    def plain(self) -> bool:
        """Whether the name can be written unquoted (operators such as '||' are functions too)."""
        return IDENTIFIER.fullmatch(self.name) is not None

    @property
    def quoted(self) -> str:
        return '"' + self.name.replace('"', '""') + '"'


def shape(callee: str, kind: str) -> str:
    """A statement calling ``callee`` where DuckDB expects a function of its kind."""
    if kind in ("table", "table_macro", "pragma"):
        return f"SELECT * FROM {callee}()"
    if kind == "aggregate":
        return f"SELECT {callee}(x) FROM t"
    if kind == "window":
        return f"SELECT {callee}(x) OVER () FROM t"
    return f"SELECT {callee}(1)"


def _plain(f: Function) -> list[str]:
    return [shape(f.name, f.kind)] if f.plain else []


def _upper_case(f: Function) -> list[str]:
    # DuckDB's names are case-insensitive, quoted or not.
    return [shape(f.name.upper(), f.kind), shape(f.quoted.upper(), f.kind)] if f.plain else []


def _quoted(f: Function) -> list[str]:
    return [shape(f.quoted, f.kind)]


QUALIFIERS = ("main", "system", "system.main", "pg_catalog", "system.pg_catalog", f"{DATABASE}.main", "temp.main")
"""What may come before a function's name. DuckDB 2.0 resolves ``main.f``, ``system.f``,
``system.main.f``, and ``pg_catalog.f``/``system.pg_catalog.f`` for its PostgreSQL macros; the
database's own catalogue and ``temp`` hold no functions, and are tried anyway."""


def _qualified(f: Function) -> list[str]:
    return [shape(f"{q}.{f.name}", f.kind) for q in QUALIFIERS] if f.plain else []


def _quoted_qualified(f: Function) -> list[str]:
    return [shape(f'"system"."{f.schema}".{f.quoted}', f.kind), shape(f'"{f.schema}".{f.quoted}', f.kind)]


def _method(f: Function) -> list[str]:
    if not f.plain:
        return []
    return [f"SELECT ('x').{f.name}()", f"SELECT 'x'.{f.name}()", f"SELECT x.{f.name}() FROM t",
            f"SELECT t.s.{f.name}(1) FROM t", f"SELECT [1, 2].{f.name}()"]


def _from(f: Function) -> list[str]:
    if not f.plain:
        return [f"SELECT * FROM {f.quoted}()"]
    return [f"SELECT * FROM {f.name}()", f"FROM {f.name}()", f"SELECT * FROM t, {f.name}(t.x)",
            f"SELECT * FROM t JOIN {f.name}() ON true", f"SELECT * FROM t, LATERAL {f.name}(t.s)"]


def _statement(f: Function) -> list[str]:
    return [f"PRAGMA {f.name}", f"CALL {f.name}()"] if f.plain else []


def _nested(f: Function) -> list[str]:
    if not f.plain:
        return []
    inner = shape(f.name, f.kind)
    nested = [f"SELECT x FROM t WHERE EXISTS ({inner})", f"WITH c AS ({inner}) SELECT * FROM c",
              f"SELECT (SELECT count(*) FROM ({inner}) AS s) FROM t"]
    if f.kind not in ("table", "table_macro", "pragma"):
        nested += [f"SELECT x FROM t WHERE {f.name}(x) IS NOT NULL", f"SELECT x FROM t ORDER BY {f.name}(x)",
                   f"SELECT x FROM t GROUP BY x HAVING {f.name}(x) IS NOT NULL",
                   f"SELECT list_transform(l, lambda v: {f.name}(v)) FROM t"]
    return nested


def _bare(f: Function) -> list[str]:
    return [f"SELECT {f.name} FROM t", f"SELECT x FROM t WHERE {f.name} IS NOT NULL"] if f.plain else []


def _bare_quoted(f: Function) -> list[str]:
    return [f"SELECT {f.quoted} FROM t", f"SELECT {f.quoted}"]


SPELLINGS: dict[str, Callable[[Function], list[str]]] = {
    "plain": _plain, "upper_case": _upper_case, "quoted": _quoted, "qualified": _qualified,
    "quoted_qualified": _quoted_qualified, "method": _method, "from": _from, "statement": _statement,
    "nested": _nested, "bare": _bare, "bare_quoted": _bare_quoted,
}
BARE = {"bare", "bare_quoted"}


@pytest.fixture(scope="module")
def duck_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("spellings") / f"{DATABASE}.duckdb"
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE t (x INTEGER, s VARCHAR, l INTEGER[])")
        con.execute("INSERT INTO t VALUES (1, 'a', [1, 2]), (40, 'b', [3])")
        con.execute('CREATE TABLE accounts ("user" VARCHAR, current_schema VARCHAR)')
        con.execute("INSERT INTO accounts VALUES ('ann', 'sales')")
    finally:
        con.close()
    return path


@pytest.fixture(scope="module")
def refused_functions(duck_file) -> list[Function]:
    """Every function DuckDB offers the guard's connection that is not allowed. An in-memory
    database cannot take the guard's settings (read-only, no temporary directory), so the
    listing is read on the test's file, opened as the guard opens it."""
    con = duckdb_guard.open_guarded(str(duck_file))
    try:
        rows = con.execute("SELECT DISTINCT function_name, function_type, schema_name FROM duckdb_functions()")
        functions = {Function(name, kind, schema) for name, kind, schema in rows.fetchall()}
    finally:
        con.close()
    return sorted((f for f in functions if f.name.lower() not in ALLOWED_FUNCTIONS), key=lambda f: (f.name, f.kind))


@pytest.fixture(scope="module")
def duck(duck_file, refused_functions):
    # After the listing: one process holds one configuration of a file at a time.
    with DuckDatabase(duck_file, timeout_s=5, workers=1) as db:
        yield db


def _outcome(db: DuckDatabase, sql: str) -> str | None:
    """None when the statement could not run the function; else what happened."""
    try:
        db.check(sql)
    except (ForbiddenError, NotAQueryError):
        return None
    try:
        result = db.execute(sql)
    except (ForbiddenError, NotAQueryError):
        return None
    except SqlError as e:
        first = e.message.strip().splitlines()[0]
        if UNRESOLVED.search(first):
            return None
        return f"the check let it through and DuckDB bound the call: {first}"
    return f"the check let it through and it ran: {result.rows[:1]}"


def test_the_functions_come_from_duckdb(refused_functions):
    names = {f.name for f in refused_functions}
    # The dangerous ones the guard's reasons name, each under DuckDB's own name.
    assert {"read_csv", "query", "duckdb_settings", "current_setting", "user", "current_schema", "pg_sleep"} <= names
    assert not {n.lower() for n in names} & ALLOWED_FUNCTIONS
    assert {f.kind for f in refused_functions} >= {"scalar", "aggregate", "table", "macro", "pragma"}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.slow
def test_no_spelling_runs_a_function_the_guard_does_not_allow(spelling, refused_functions, duck):
    functions = list(refused_functions)
    if spelling in BARE:
        functions += [Function(name, "scalar", "main") for name in VALUE_NAMES]
    failures, pairs = [], 0
    for function in functions:
        for sql in SPELLINGS[spelling](function):
            pairs += 1
            outcome = _outcome(duck, sql)
            if outcome:
                failures.append(f"{function.name} ({function.kind}): {sql}\n    {outcome}")
    assert pairs, f"the {spelling} spelling wrote no statement"
    assert not failures, (f"{len(failures)} of {pairs} {spelling} statements of functions the guard does not "
                          "allow got past it:\n" + "\n".join(failures[:40]))


def test_a_column_named_like_a_value_function_is_still_read(duck):
    # DuckDB binds a name to a column of a table its SELECT reads before it tries a function.
    for sql in ("SELECT user FROM accounts", 'SELECT "user" FROM accounts', "SELECT a.user FROM accounts AS a",
                "SELECT USER FROM main.accounts", "SELECT user, x FROM accounts JOIN t ON x = 1"):
        assert duck.execute(sql).rows[0][0] == "ann", sql
    assert duck.execute("SELECT current_schema FROM accounts WHERE user = 'ann'").rows == [("sales",)]
    # No table of the SELECT has the column: DuckDB would call the function. A correlated name
    # (the last) would be the outer table's column, but the check does not follow scopes.
    for sql in ("SELECT user FROM t", "WITH accounts AS (SELECT 1 AS x) SELECT user FROM accounts",
                "SELECT (SELECT user) FROM accounts"):
        with pytest.raises(ForbiddenError, match=r"call of user\(\) \(reveals the connection.*write it with its table"):
            duck.check(sql)
