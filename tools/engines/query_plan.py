"""Human-readable query plans, from SQLite's ``EXPLAIN QUERY PLAN`` and the query's syntax tree.

CHASE-SQL's query-plan generator reasons the way a database engine executes a query: find the
tables, match and filter rows, then deliver the final columns. Its few-shot plans are derived from
the engine's own plan of their gold SQL, turned into text a model reads easily.

``EXPLAIN QUERY PLAN`` (run through :meth:`GuardedDatabase.explain_query_plan`) gives the
engine's side: which tables are scanned or searched, in which order, through which index, where
subqueries and temporary B-trees come in. It does not show filters or output columns, so those
come from the parsed SQL (sqlglot): each ``WHERE``/``ON`` conjunct is attached to the first plan
step after which every table it names has been opened, which is where an engine can test it.
Names are matched by alias, first occurrence first; a conjunct that matches no step is listed at
the end of the matching section rather than dropped. Grouping, ordering and limits of the outer
query, and its output columns, close the plan.

The text has four sections, as in the paper's Figure 19: preparation (tables opened), matching
and filtering, finishing (aggregation, grouping, ordering, limits), delivering the result.

Another engine's examples keep SQLite's plan of the SQLite query (its steps, order and indexes)
and write every condition, key and output in the engine's SQL: :func:`plan_for_schema` with
``written``, the same query carried into that ``dialect``, whose tables and aliases are SQLite's.
"""

from __future__ import annotations

import re
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sqlglot import exp

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.engines.sqlite import GuardedDatabase


@dataclass(frozen=True)
class PlanStep:
    """One row of ``EXPLAIN QUERY PLAN``."""

    id: int
    parent: int
    detail: str


def explain(db: GuardedDatabase, sql: str) -> list[PlanStep]:
    """The engine's plan of ``sql``, through the guard.

    Raises:
        sqlchorus.tools.engines.sqlite.SqlError: the query is refused or does not prepare.
        ValueError: ``db`` is not SQLite: plans are worded from SQLite's ``EXPLAIN QUERY PLAN``
            (the query-plan generator's examples are planned on SQLite whatever the engine).
    """
    if db.engine != "sqlite":
        raise ValueError(f"Query plans are worded from SQLite's EXPLAIN QUERY PLAN, not {db.engine}'s.")
    result = db.explain_query_plan(sql)
    return [PlanStep(int(r[0]), int(r[1]), str(r[3])) for r in result.rows]


def query_plan_text(db: GuardedDatabase, sql: str) -> str:
    """The human-readable plan of ``sql`` on ``db``."""
    return describe_plan(sql, explain(db, sql))


def plan_for_schema(ddl: str, sql: str, *, written: str | None = None, dialect: str = "sqlite") -> str:
    """The plan of ``sql`` over an empty database built from ``ddl`` (``CREATE`` statements).

    Few-shot examples carry only their schema, so their plans come from a scratch database that
    holds the schema and no rows; the plan of a query does not depend on the data unless the
    database has been analysed, and a fresh one has not. With ``written`` (``sql`` carried into
    ``dialect``, sqlglot's name), the plan is SQLite's and its expressions are ``written``'s.
    """
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "schema.sqlite"
        conn = sqlite3.connect(path)
        try:
            conn.executescript(ddl)
            conn.commit()
        finally:
            conn.close()
        with GuardedDatabase(path) as db:
            if written is None:
                return query_plan_text(db, sql)
            return describe_plan(written, explain(db, sql), dialect=dialect)


# -- the syntax side ---------------------------------------------------------------------------


@dataclass
class _Conjunct:
    text: str
    names: frozenset[str]
    join: bool


def _without_subqueries(node: exp.Expr, dialect: str = "sqlite") -> str:
    copy = node.copy()
    for subquery in list(copy.find_all(exp.Subquery)):
        if subquery is not copy:
            subquery.replace(exp.column("(subquery)"))
    for select in list(copy.find_all(exp.Select)):
        if select is not copy and select.parent is not None:
            select.replace(exp.column("(subquery)"))
    return copy.sql(dialect=dialect).replace('"(subquery)"', "(subquery)").replace("`(subquery)`", "(subquery)")


def _own_columns(node: exp.Expr, select: exp.Select) -> list[exp.Column]:
    """Columns of ``node`` that belong to ``select`` itself, not to a nested query."""
    return [c for c in node.find_all(exp.Column) if c.find_ancestor(exp.Select) is select]


def _sources(select: exp.Select) -> dict[str, str]:
    """Alias (or name) -> table name of the tables ``select`` reads directly."""
    names: dict[str, str] = {}
    for table in select.find_all(exp.Table):
        if table.find_ancestor(exp.Select) is select:
            names.setdefault(table.alias_or_name.lower(), table.name)
    return names


def _split_and(node: exp.Expr | None) -> list[exp.Expr]:
    if node is None:
        return []
    if isinstance(node, exp.And):
        return _split_and(node.left) + _split_and(node.right)
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.And):
        return _split_and(node.this)
    return [node]


def _conjuncts(tree: exp.Expr, dialect: str = "sqlite") -> list[_Conjunct]:
    found: list[_Conjunct] = []
    for select in tree.find_all(exp.Select):
        sources = _sources(select)
        parts: list[exp.Expr] = []
        where = select.args.get("where")
        if where is not None:
            parts += _split_and(where.this)
        for join in select.args.get("joins") or []:
            parts += _split_and(join.args.get("on"))
        for part in parts:
            names = set()
            for column in _own_columns(part, select):
                if column.table:
                    names.add(column.table.lower())
                else:
                    names |= set(sources)  # unqualified: testable once every source is open
            names &= set(sources) or names
            found.append(_Conjunct(_without_subqueries(part, dialect), frozenset(names), len(names) > 1))
    return found


def _aliases(tree: exp.Expr) -> dict[str, str]:
    names: dict[str, str] = {}
    for table in tree.find_all(exp.Table):
        names.setdefault(table.alias_or_name.lower(), table.name)
    return names


# -- the engine side ---------------------------------------------------------------------------

_SCAN = re.compile(r"^SCAN (?P<name>\S+)(?: USING (?P<covering>COVERING )?INDEX (?P<index>\S+))?")
_SEARCH = re.compile(
    r"^SEARCH (?P<name>\S+) USING (?:(?P<pk>INTEGER PRIMARY KEY)|(?P<auto>AUTOMATIC )?"
    r"(?:PARTIAL )?(?:COVERING )?INDEX (?P<index>\S+))(?: \((?P<cond>.*)\))?"
)
_SUBQUERY = re.compile(r"^(?P<corr>CORRELATED )?(?P<kind>SCALAR|LIST) SUBQUERY (?P<n>\d+)")
_TEMP = re.compile(r"^USE TEMP B-TREE FOR (?P<what>.+)$")
_COMPOUND_PART = re.compile(r"^(?P<op>UNION ALL|UNION|INTERSECT|EXCEPT)")


class _Walker:
    def __init__(self, steps: list[PlanStep], aliases: dict[str, str], conjuncts: list[_Conjunct]):
        self.children: dict[int, list[PlanStep]] = {}
        for step in steps:
            self.children.setdefault(step.parent, []).append(step)
        self.aliases = aliases
        self.pending = list(conjuncts)
        self.opened: list[str] = []
        self.lines: list[tuple[int, str]] = []

    def table(self, name: str) -> str:
        real = self.aliases.get(name.lower(), name)
        return real if real.lower() == name.lower() else f"{real} ({name})"

    def walk(self, parent: int = 0, depth: int = 0) -> None:
        for step in self.children.get(parent, []):
            self.step(step, depth)

    def emit(self, depth: int, text: str) -> None:
        self.lines.append((depth, text))

    def open(self, name: str, depth: int) -> None:
        key = name.lower()
        if key not in self.opened:
            self.opened.append(key)
        ready = [c for c in self.pending if key in c.names and c.names <= set(self.opened)]
        for c in ready:
            self.pending.remove(c)
            if c.join:
                self.emit(depth, f"Match rows on {c.text}.")
            else:
                self.emit(depth, f"Keep only rows where {c.text}.")

    def step(self, step: PlanStep, depth: int) -> None:
        detail = step.detail
        if m := _SEARCH.match(detail):
            name = m["name"]
            if m["pk"]:
                self.emit(depth, f"Look up the matching row of {self.table(name)} directly by its primary key.")
            else:
                how = "a temporary index the engine builds for this query" if m["auto"] else f"the index {m['index']}"
                cond = f" where {m['cond']}" if m["cond"] else ""
                self.emit(depth, f"Find the rows of {self.table(name)}{cond} through {how}.")
            self.open(name, depth)
        elif m := _SCAN.match(detail):
            name = m["name"]
            if name == "CONSTANT":
                self.emit(depth, "Produce a single row of constant values.")
                return
            via = f" in the order of the index {m['index']}" if m["index"] else ""
            self.emit(depth, f"Read the {self.table(name)} table row by row{via}.")
            self.open(name, depth)
        elif m := _SUBQUERY.match(detail):
            what = "a single value" if m["kind"] == "SCALAR" else "a list of values"
            again = ", again for each outer row it refers to" if m["corr"] else ""
            self.emit(depth, f"Compute subquery {m['n']}, which yields {what}{again}:")
            self.walk(step.id, depth + 1)
        elif detail.startswith(("MATERIALIZE ", "CO-ROUTINE ")):
            name = detail.split(" ", 1)[1]
            self.emit(depth, f"Build the intermediate result {name} first:")
            self.walk(step.id, depth + 1)
        elif detail == "COMPOUND QUERY":
            self.emit(depth, "Combine the results of several queries:")
            self.walk(step.id, depth + 1)
        elif detail == "LEFT-MOST SUBQUERY":
            self.emit(depth, "First query:")
            self.walk(step.id, depth + 1)
        elif m := _COMPOUND_PART.match(detail):
            self.emit(depth, f"Then combine with {m['op']}:")
            self.walk(step.id, depth + 1)
        elif m := _TEMP.match(detail):
            self.emit(depth, f"Collect the rows in a temporary B-tree for {m['what']}.")
        elif detail.startswith("BLOOM FILTER ON "):
            self.emit(depth, f"Build a Bloom filter on {detail[len('BLOOM FILTER ON '):]} to skip rows that cannot match.")
        else:
            self.emit(depth, f"Engine step: {detail}.")
            self.walk(step.id, depth + 1)


def _finishing(tree: exp.Expr, dialect: str = "sqlite") -> list[str]:
    lines: list[str] = []
    select = tree if isinstance(tree, exp.Select) else None
    if select is not None:
        aggregates = sorted({_without_subqueries(a, dialect) for e in select.expressions
                             for a in e.find_all(exp.AggFunc) if a.find_ancestor(exp.Select) is select})
        group = select.args.get("group")
        if group is not None:
            keys = ", ".join(_without_subqueries(g, dialect) for g in group.expressions)
            lines.append(f"Group the rows by {keys}.")
        if aggregates:
            per = " for each group" if group is not None else " over all remaining rows"
            lines.append(f"Compute {', '.join(aggregates)}{per}.")
        having = select.args.get("having")
        if having is not None:
            lines.append(f"Keep only groups where {_without_subqueries(having.this, dialect)}.")
        if select.args.get("distinct") is not None:
            lines.append("Remove duplicate rows.")
    order = tree.args.get("order")
    if order is not None:
        keys = ", ".join(_without_subqueries(o, dialect) for o in order.expressions)
        lines.append(f"Order the rows by {keys}.")
    limit = tree.args.get("limit")
    if limit is not None:
        count = _without_subqueries(limit.expression, dialect) if limit.expression is not None else "?"
        offset = tree.args.get("offset")
        skip = f", after skipping {_without_subqueries(offset.expression, dialect)}" if offset is not None else ""
        lines.append(f"Keep the first {count} row(s){skip}.")
    return lines


def _outputs(tree: exp.Expr, dialect: str = "sqlite") -> str:
    while isinstance(tree, exp.SetOperation):
        tree = tree.left
    if isinstance(tree, exp.Subquery):
        tree = tree.this
    if not isinstance(tree, exp.Select):
        return "the result"
    return ", ".join(_without_subqueries(e, dialect) for e in tree.expressions)


def describe_plan(sql: str, steps: list[PlanStep], *, dialect: str = "sqlite") -> str:
    """Turn the engine's plan ``steps`` of ``sql`` (in sqlglot's ``dialect``) into the four-section
    text, its expressions written in that dialect."""
    tree = sql_text.parse_one(sql, dialect=dialect)
    aliases = _aliases(tree)
    walker = _Walker(steps, aliases, _conjuncts(tree, dialect))
    walker.walk()
    out = ["** Preparation Steps:**", "1. Initialize the process: start preparing to execute the query."]
    n = 1
    seen: list[str] = []
    for step in steps:
        m = _SEARCH.match(step.detail) or _SCAN.match(step.detail)
        if m and m["name"] != "CONSTANT" and m["name"].lower() not in seen:
            seen.append(m["name"].lower())
            n += 1
            out.append(f"{n}. Open the {walker.table(m['name'])} table so we can read from it.")
    out.append("** Matching and Filtering:**")
    lines = walker.lines + [(0, f"Also keep only rows where {c.text}.") for c in walker.pending]
    for i, (depth, text) in enumerate(lines, 1):
        out.append(f"{'   ' * depth}{i}. {text}")
    finishing = _finishing(tree, dialect)
    if finishing:
        out.append("** Finishing:**")
        out += [f"{i}. {text}" for i, text in enumerate(finishing, 1)]
    out.append("** Delivering the Result:**")
    out.append(f"1. Output {_outputs(tree, dialect)} for each resulting row.")
    out.append("2. End the process.")
    return "\n".join(out)
