"""Every function PostgreSQL offers outside the guard's allow-list is refused, however it is spelled.

The functions come from ``pg_proc`` of the test's own server (PostgreSQL as installed), not from
a list of ours: each one outside :data:`ALLOWED_FUNCTIONS` is written in every spelling the
server accepts (a plain call, schema-qualified and quoted names, field-selection notation
``(arg).fn``, column notation ``row.fn``, in FROM, in ``ROWS FROM``, ``LATERAL``, and in every
clause), and each must be refused by the guard's check (the server's parser) or by its check of
the server's plan. A statement the guard lets through is planned, and the server's own text of
that plan must show no call of the function: a field selection the server resolved to a column
is not a call. Operators and casts whose functions are outside the list, and the input of every
type outside :data:`ALLOWED_TYPES`, are derived the same way from ``pg_operator``, ``pg_cast``
and ``pg_type``.
"""

from __future__ import annotations

import re

import pytest

from sqlchorus.tools.engines.postgres_check import ALLOWED_FUNCTIONS, ALLOWED_TYPES, PLAN_TYPES, refusal
from sqlchorus.tools.engines.postgres import PostgresDatabase, check_postgres_query
from sqlchorus.tools.sql.errors import ExecutionError, ForbiddenError, NotAQueryError, QueryTimeoutError
from test_postgres_guard import concert, server  # noqa: F401  (module fixtures: the server, the database)

pytestmark = pytest.mark.slow

_ANY_VALUE = {"any": "1", "anyelement": "1", "anynonarray": "1", "anycompatible": "1",
              "anycompatiblenonarray": "1", "anyarray": "ARRAY[1]", "anycompatiblearray": "ARRAY[1]",
              "record": "ROW(1)"}
"""Arguments of polymorphic types: values of plain types the server resolves them with."""


@pytest.fixture(scope="module")
def db(concert):  # noqa: F811
    with PostgresDatabase(concert["reader"], timeout_s=10, workers=1, prestart=False) as opened:
        yield opened


@pytest.fixture(scope="module")
def functions(db):
    """Every function of pg_catalog outside the allow-list: ``(name, [argument], variadic, one_arg)``."""
    rows = db._catalogue(
        "SELECT p.proname, p.pronargs, p.pronargdefaults, p.provariadic <> 0, "
        "ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) AS t) "
        "FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind <> 'p' ORDER BY 1, 2")
    out = {}
    for name, nargs, ndefaults, variadic, types in rows:
        if name in ALLOWED_FUNCTIONS and refusal(name) is None:
            continue
        args = [_ANY_VALUE.get(t, f"NULL::{t}") for t in types]
        one_arg = nargs - ndefaults <= 1 <= nargs or (variadic and nargs == 1)
        out.setdefault(name, (name, args, variadic, one_arg))  # one overload a name is enough to spell it
    assert len(out) > 1500, f"only {len(out)} functions outside the allow-list: is pg_proc read?"
    return list(out.values())


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _spellings(name: str, args: list[str], one_arg: bool) -> list[tuple[str, str]]:
    call = f"{name}({', '.join(args)})"
    quoted = f"{_quoted(name)}({', '.join(args)})"
    out = [
        ("plain", f"SELECT {call}"),
        ("qualified", f"SELECT pg_catalog.{call}"),
        ("quoted", f"SELECT {quoted}"),
        ("qualified and quoted", f"SELECT pg_catalog.{quoted}"),
        ("in FROM", f"SELECT * FROM {call} AS t"),
        ("ROWS FROM", f"SELECT * FROM ROWS FROM ({call}) AS t"),
        ("LATERAL", f"SELECT * FROM singer AS s CROSS JOIN LATERAL {call} AS t"),
        ("in WHERE", f"SELECT name FROM singer WHERE {call} IS NOT NULL"),
        ("in GROUP BY", f"SELECT count(*) FROM singer GROUP BY {call}"),
        ("in ORDER BY", f"SELECT name FROM singer ORDER BY {call}"),
        ("in HAVING", f"SELECT count(*) FROM singer HAVING {call} IS NULL"),
        ("in a subquery", f"SELECT name FROM singer WHERE age > (SELECT count(*) FROM singer WHERE {call} IS NULL)"),
        ("in VALUES", f"SELECT * FROM (VALUES ({call})) AS v(x)"),
        ("column notation", f"SELECT s.{_quoted(name)} FROM singer AS s"),
        ("field of a row", f"SELECT (s).{name} FROM singer AS s"),
    ]
    if one_arg and args:
        out += [("field selection", f"SELECT ({args[0]}).{name}"),
                ("field selection, quoted", f"SELECT ({args[0]}).{_quoted(name)}"),
                ("field selection of a column", f"SELECT (s.name).{name} FROM singer AS s")]
    return out


def _outcome(db: PostgresDatabase, sql: str, name: str) -> str | None:
    """None when the guard refused ``sql`` or the server could not resolve it (nothing ran);
    otherwise what went wrong: the plan the guard let through calls ``name``."""
    try:
        check_postgres_query(sql, schema=db.schema, tables=db._tables, names=db.names)
    except (ForbiddenError, NotAQueryError):
        return None
    try:
        plan = db.explain_query_plan(sql)
    except (ForbiddenError, NotAQueryError):
        return None
    except (ExecutionError, QueryTimeoutError):
        return None  # the server found no such call, column or type: nothing of it can run
    text = "\n".join(str(r[-1]) for r in plan.rows)
    if re.search(rf"(?<![\w$]){re.escape(name)}\s*\(|\"{re.escape(name)}\"\s*\(", text):
        return f"let through, and the server's plan calls it: {text[:300]}"
    return None


def test_every_function_outside_the_allow_list_is_refused_in_every_spelling(db, functions):
    failures, checked = [], 0
    for name, args, _variadic, one_arg in functions:
        for spelling, sql in _spellings(name, args, one_arg):
            checked += 1
            problem = _outcome(db, sql, name)
            if problem:
                failures.append(f"{spelling}: {sql}\n    {problem}")
    assert checked > 20_000, checked
    assert failures == [], f"{len(failures)} of {checked} spellings ran a function outside the list:\n" + \
        "\n".join(failures[:40])


def test_a_refusal_names_the_function_whatever_the_spelling(db):
    for sql in ("SELECT ('/etc/hostname').pg_read_file", "SELECT pg_catalog.\"pg_read_file\"('/etc/hostname')",
                "SELECT * FROM ROWS FROM (pg_read_file('/etc/hostname')) AS t",
                "SELECT name FROM singer ORDER BY (name).pg_read_file"):
        with pytest.raises(ForbiddenError, match="^pg_read_file is not allowed: it reads files of the server"):
            db.execute(sql)
    assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]  # and it goes on


def test_operators_whose_functions_are_outside_the_list_are_the_servers_own_and_compute_on_values(db):
    """An operator is a spelling of its function. Those of pg_catalog compute on values (none is
    volatile, none reaches files, sessions or the catalogue): the guard lets them be used over
    plain types. Every other operator, or one over a type that is not plain, is refused."""
    rows = db._catalogue(
        "SELECT o.oprname, format_type(o.oprleft, NULL), format_type(o.oprright, NULL), p.proname, "
        "p.provolatile, o.oprleft = 0 FROM pg_operator o JOIN pg_proc p ON p.oid = o.oprcode "
        "WHERE o.oprnamespace = 'pg_catalog'::regnamespace ORDER BY 1, 2, 3")
    failures, checked = [], 0
    for op, left, right, function, volatile, prefix in rows:
        if function in ALLOWED_FUNCTIONS:
            continue
        assert volatile != "v", f"operator {op} calls the volatile {function}"
        assert refusal(function) in (None, "belongs to the server, not to a question"), (op, function)
        lhs = "" if prefix else f"NULL::{left} "
        for sql in (f"SELECT {lhs}{op} NULL::{right}", f"SELECT {lhs}OPERATOR(pg_catalog.{op}) NULL::{right}"):
            checked += 1
            try:
                check_postgres_query(sql, names=db.names)
            except (ForbiddenError, NotAQueryError):
                continue
            base = lambda t: t.split("(")[0].removesuffix("[]").strip()  # noqa: E731
            plain = {base(left), base(right)} - {"-"} <= PLAN_TYPES
            if not plain:
                failures.append(f"{sql}: an operator over {left}, {right} was let through")
    assert checked > 300, checked
    assert failures == [], "\n".join(failures[:40])


def test_casts_and_type_input_reach_only_plain_types(db):
    """A cast runs its function (``pg_cast``) and a literal of a type runs the type's input
    function: both are refused for every type outside the plain data types."""
    types = db._catalogue(
        "SELECT t.typname FROM pg_type t WHERE t.typnamespace = 'pg_catalog'::regnamespace "
        "AND t.typtype IN ('b', 'r', 'm', 'd', 'e') AND t.typname NOT LIKE '\\_%' AND t.typisdefined ORDER BY 1")
    failures, checked = [], 0
    for (type_name,) in types:
        if type_name in ALLOWED_TYPES:
            continue
        for sql in (f"SELECT '1'::{type_name}", f"SELECT {type_name} '1'", f"SELECT CAST(NULL AS {type_name})",
                    f"SELECT name::{type_name} FROM singer", f"SELECT ARRAY['1']::{type_name}[]"):
            checked += 1
            try:
                check_postgres_query(sql, names=db.names)
            except (ForbiddenError, NotAQueryError):
                continue
            failures.append(sql)
    casts = db._catalogue(
        "SELECT format_type(c.castsource, NULL), format_type(c.casttarget, NULL), p.proname, p.provolatile "
        "FROM pg_cast c JOIN pg_proc p ON p.oid = c.castfunc ORDER BY 1, 2")
    for source, target, function, volatile in casts:
        assert volatile != "v", f"the cast {source} -> {target} calls the volatile {function}"
    assert checked > 100, checked
    assert failures == [], "\n".join(failures[:40])


def test_the_plan_check_alone_refuses_every_call_the_server_resolved(db, functions, concert):  # noqa: F811
    """The second reading does not lean on the first: every function outside the list, written
    in field-selection notation over a value the planner cannot fold, is planned by the server
    (as its superuser, in a read-only transaction: planning runs no volatile function), and the
    check of that plan alone refuses each call the plan shows."""
    import psycopg

    from sqlchorus.tools.engines.postgres_check import check_plan, plan_calls

    refused, planned = 0, 0
    with psycopg.connect(concert["admin"], autocommit=True) as conn:
        conn.read_only = True
        for name, args, _variadic, one_arg in functions:
            if not (one_arg and args):
                continue
            sql = f"SELECT ((SELECT {args[0]})).{_quoted(name)}"
            try:
                with conn.transaction():
                    conn.execute("SET LOCAL statement_timeout = 5000")
                    plan = conn.execute("EXPLAIN (VERBOSE, FORMAT JSON) " + sql).fetchone()[0]
            except psycopg.Error:
                continue  # the server resolves it to no call at all
            if name not in {n for _, n in plan_calls(plan).functions}:
                continue
            planned += 1
            with pytest.raises(ForbiddenError, match=f"^{re.escape(name)} is not allowed"):
                check_plan(plan, sql, names=db.names)
            refused += 1
    assert planned > 300 and refused == planned, (planned, refused)
