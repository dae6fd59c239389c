"""LIST's verifier: a step's query checked on the database, sub-query by sub-query.

The strong verifier (the paper's) decomposes the step's query into LIST sub-queries and runs
each one through the guarded database, so a failure points at the clause that broke rather than
at the whole query. In order, it reports:

1. ``syntax``: the query does not parse as one read query;
2. the guard's errors (``execution``, ``timeout``, ``forbidden``, ...): the first sub-query that
   does not run, with the sub-queries before it as the ones that "run well";
3. implausible growth: ``cross_join``, a join without ON or USING (``FROM a, b``) between
   tables of more than one row; ``growth``, a join whose condition holds for every pair of rows,
   or that returns more than ``Settings.list_join_growth`` times the rows of its larger input.
   A join without a condition is judged at its scope's WHERE step when the query has one,
   because the WHERE clause may be what relates the two tables;
4. ``empty``: the first sub-query that returns no rows.

The weak verifier (the paper's ablation) runs only the step's whole query: errors and empty
results, no decomposition, no growth check.

An empty result is a warning, not a verdict (the paper only warns about it): the model is told,
and when its repaired query is the same query again, the empty result is accepted, recorded, and
not reported again for that sub-query. A join without a condition is treated the same way, since
a plan may pair the rows in one step and relate them in the next step's WHERE. Every sub-query runs with a one-row cap, because the
verifier needs only "does it run" and "is it empty"; join sizes are counted with ``COUNT(*)``.
"""

from __future__ import annotations

import math
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.engines.sqlite import GuardedDatabase, QueryTimeoutError, SqlError
from sqlchorus.tools.steps.decompose import DecomposeError, Step, decompose, execute_steps

SOFT_KINDS = frozenset({"empty", "cross_join"})
"""Verdicts the model may overrule by answering a reprompt with the same query."""


def verify_sql(
    sql: str | None,
    db: GuardedDatabase,
    *,
    schema: Any = None,
    verifier: str = "strong",
    growth: float = 100.0,
    accepted: frozenset[str] | set[str] = frozenset(),
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Verify one step's query.

    Args:
        sql: the step's query, or None when the model wrote none.
        db: the guarded database every sub-query runs on.
        schema: the database schema, which helps the decomposer spot correlated subqueries.
        verifier: ``strong`` (decompose and run every sub-query) or ``weak`` (run the query).
        growth: the join growth factor above which a join is implausible.
        accepted: sub-queries whose soft verdict (empty, or a join without a condition) the
            model has already confirmed.
        timeout_s: time budget per statement (the database's default when None).

    Returns:
        A verdict: ``ok``, ``kind`` (``ok`` or the failure's kind), ``error``, ``failing`` (the
        sub-query that failed), ``runnable`` (sub-queries that ran before it), ``sub_queries``
        (how many were run) and ``sql``.
    """
    if not sql or not sql.strip():
        return _verdict(sql, "no_sql", "the answer contained no SQL query")
    if verifier == "weak":
        return _weak(sql, db, accepted, timeout_s)
    try:
        steps = decompose(sql, schema=schema, dialect=db.dialect)
    except (DecomposeError, SqlglotError, RecursionError) as e:
        return _verdict(sql, "syntax", str(e).strip().splitlines()[0] if str(e).strip() else "does not parse", failing=sql)
    checks = execute_steps(steps, db, timeout_s=timeout_s, max_rows=1)
    runnable: list[str] = []
    for check in checks:
        if not check.ok:
            return _verdict(
                sql, check.error_kind or "execution", check.error, failing=check.step.sql,
                runnable=runnable, sub_queries=len(checks),
            )
        runnable.append(check.step.sql)
    try:  # the last sub-query is sqlglot's rendering; the text as written must run too
        whole = db.execute(sql, timeout_s=timeout_s, max_rows=1)
    except SqlError as e:
        return _verdict(sql, e.kind, e.message, failing=sql, runnable=runnable, sub_queries=len(checks))
    problem = _growth(steps, db, growth, timeout_s, accepted)
    if problem is not None:
        kind, failing, message = problem
        return _verdict(sql, kind, message, failing=failing, runnable=_before(runnable, failing),
                        sub_queries=len(checks))
    for check in checks:
        if check.row_count == 0 and check.step.sql not in accepted:
            return _verdict(sql, "empty", "the query returned no rows", failing=check.step.sql,
                            runnable=_before(runnable, check.step.sql), sub_queries=len(checks))
    if whole.row_count == 0 and sql not in accepted and checks[-1].step.sql not in accepted:
        return _verdict(sql, "empty", "the query returned no rows", failing=sql, runnable=runnable,
                        sub_queries=len(checks))
    return _verdict(sql, "ok", None, runnable=runnable, sub_queries=len(checks))


def _weak(sql: str, db: GuardedDatabase, accepted: Any, timeout_s: float | None) -> dict[str, Any]:
    try:
        result = db.execute(sql, timeout_s=timeout_s, max_rows=1)
    except SqlError as e:
        return _verdict(sql, e.kind, e.message, failing=sql, sub_queries=1)
    if result.row_count == 0 and sql not in accepted:
        return _verdict(sql, "empty", "the query returned no rows", failing=sql, sub_queries=1)
    return _verdict(sql, "ok", None, sub_queries=1)


def _verdict(
    sql: str | None,
    kind: str,
    error: str | None,
    *,
    failing: str | None = None,
    runnable: list[str] | None = None,
    sub_queries: int = 0,
) -> dict[str, Any]:
    return {
        "ok": kind == "ok",
        "kind": kind,
        "error": error,
        "sql": sql,
        "failing": failing,
        "runnable": list(runnable or []),
        "sub_queries": sub_queries,
    }


def _before(runnable: list[str], failing: str) -> list[str]:
    return runnable[: runnable.index(failing)] if failing in runnable else runnable


# -- implausible growth --------------------------------------------------------------------------


def _count(db: GuardedDatabase, query: str, timeout_s: float | None) -> int:
    # An alias: PostgreSQL (before 16) refuses a subquery in FROM without one.
    result = db.execute(f"SELECT COUNT(*) FROM ({query}) AS counted", timeout_s=timeout_s, max_rows=1)
    return int(result.rows[0][0])


def _growth(
    steps: list[Step], db: GuardedDatabase, factor: float, timeout_s: float | None,
    accepted: Any = frozenset(),
) -> tuple[str, str, str] | None:
    """The first implausible join, as ``(kind, sub-query, why)``, or None.

    ``cross_join`` (a join with no condition at all, and no WHERE after it in its scope) is a
    soft verdict: a plan may pair every row on purpose and relate the tables in a later step's
    WHERE, so the model may keep it. ``growth`` (a condition that holds for every pair, or a
    result far larger than its inputs) is not.
    """
    deferred: dict[str, list[tuple[str, int, int]]] = {}  # scope -> unconditioned joins
    for step in steps:
        if step.operation == "WHERE" and step.scope in deferred:
            problem = _judge_where(step, deferred.pop(step.scope), db, factor, timeout_s)
            if problem:
                return "growth", step.sql, problem
        if step.operation != "JOIN":
            continue
        parts = _join_parts(step.sql, db.dialect)
        if parts is None:
            continue
        left_sql, right_sql, join = parts
        target = join.this.sql(dialect=sql_text.writer(db.dialect))
        try:
            left = _count(db, left_sql, timeout_s)
            right = _count(db, right_sql, timeout_s)
        except SqlError:
            continue  # the inputs ran as sub-queries already; a count that fails proves nothing
        condition = join.args.get("on")
        # sqlglot writes a bare ``JOIN t`` as ``JOIN t ON TRUE``: a constant relates nothing.
        related = condition is not None and not isinstance(condition, (exp.Boolean, exp.Literal))
        conditioned = related or bool(join.args.get("using") or join.args.get("method"))
        if not conditioned:
            later_where = any(
                s.operation == "WHERE" and s.scope == step.scope and s.index > step.index for s in steps
            )
            if later_where:
                deferred.setdefault(step.scope, []).append((target, left, right))
            elif left > 1 and right > 1 and step.sql not in accepted:
                return "cross_join", step.sql, (
                    f"the join of {target} has no condition: each of the {left} rows is paired "
                    f"with each of the {right} rows of {target} ({left * right} rows)"
                )
            continue
        try:
            rows = _count(db, step.sql, timeout_s)
        except QueryTimeoutError:
            return "growth", step.sql, f"counting the rows of the join of {target} ran out of time: the join explodes"
        except SqlError:
            continue
        how = (f"ON {condition.sql(dialect=sql_text.writer(db.dialect))}"
               if related and condition is not None else "its condition")
        if left > 1 and right > 1 and rows == left * right:
            return "growth", step.sql, (
                f"the join of {target} pairs every row with every row: {how} holds for all "
                f"{left} x {right} = {rows} pairs"
            )
        if rows > factor * max(left, right, 1):
            return "growth", step.sql, (
                f"the join of {target} returns {rows} rows from inputs of {left} and {right} rows, "
                f"more than {_factor(factor)} times the larger input"
            )
    return None


def _judge_where(
    step: Step, joins: list[tuple[str, int, int]], db: GuardedDatabase, factor: float,
    timeout_s: float | None,
) -> str | None:
    try:
        rows = _count(db, step.sql, timeout_s)
    except QueryTimeoutError:
        return "counting the rows after WHERE ran out of time: the tables it joins explode"
    except SqlError:
        return None
    for target, left, right in joins:
        if left > 1 and right > 1 and rows >= left * right:
            return (
                f"neither ON nor WHERE relates {target} to the tables before it: after WHERE "
                f"there are still {rows} rows, as many as {left} x {right} pairs"
            )
        if rows > factor * max(left, right, 1):
            return (
                f"the join of {target} returns {rows} rows after WHERE from inputs of {left} and "
                f"{right} rows, more than {_factor(factor)} times the larger input"
            )
    return None


def _join_parts(sql: str, dialect: str = "sqlite") -> tuple[str, str, exp.Join] | None:
    """The query before its last join, the joined source alone, and the join."""
    try:
        tree = sql_text.parse_one(sql, dialect=dialect)
    except SqlError:
        return None
    if not isinstance(tree, exp.Select) or not tree.args.get("joins"):
        return None
    joins = tree.args["joins"]
    join = joins[-1]
    left = tree.copy()
    left.set("joins", [j.copy() for j in joins[:-1]] or None)
    right = exp.select("*").from_(join.this.copy())
    if tree.args.get("with") is not None:
        right.set("with", tree.args["with"].copy())
    return left.sql(dialect=sql_text.writer(dialect)), right.sql(dialect=sql_text.writer(dialect)), join


def _factor(factor: float) -> str:
    return str(int(factor)) if math.isclose(factor, round(factor)) else f"{factor:g}"


def same_query(a: str | None, b: str | None, dialect: str = "sqlite") -> bool:
    """Whether two answers are the same query, up to spacing, case of keywords and a semicolon
    (read in ``dialect``, sqlglot's name of the database's engine)."""
    if not a or not b:
        return False
    return _canonical(a, dialect) == _canonical(b, dialect)


def _canonical(sql: str, dialect: str) -> str:
    try:
        return sql_text.parse_one(sql.strip().rstrip(";"), dialect=dialect).sql(dialect=dialect)
    except SqlError:
        return " ".join(sql.split()).rstrip(";")
