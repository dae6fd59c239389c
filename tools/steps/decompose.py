"""LIST decomposer: split a SQL query into executable, incremental sub-queries.

LIST (Linearly Incremental SQL Translator) reads a query's syntax tree in execution order and
emits one sub-query per clause, each adding one operation and its elements to the previous one:

    FROM -> JOIN (one step per join) -> WHERE -> GROUP BY -> HAVING -> SELECT -> DISTINCT
         -> ORDER BY -> LIMIT

Every step ``T_0 .. T_{n-1}`` projects ``*`` (the paper's ``f_select(., *)``) and the last step
``T_n`` is the query itself, so the last step is the full query rendered by sqlglot. A step that
would repeat the previous one verbatim (``SELECT * FROM t`` after ``FROM t``) is dropped.

Nested queries are decomposed recursively. A nested query's steps come right before the first
step of its enclosing query that uses it: a derived table in FROM before the FROM step, a
subquery in WHERE (``IN``, ``EXISTS``, scalar) before the WHERE step, and so on. CTE bodies come
first, each followed by a ``CTE`` step that names it (``WITH c AS (...) SELECT * FROM c``); every
later step carries the ``WITH`` clause so it runs on its own. A compound query (UNION, INTERSECT,
EXCEPT) decomposes each branch, then adds one combining step per operator, then its own ORDER BY
and LIMIT. ``depth`` counts nesting and ``scope`` names the nested query a step belongs to.

How every step stays executable (in SQLite):

* ``SELECT *`` steps need a FROM clause, so a query without FROM (``SELECT (SELECT ..) / (..)``)
  gets only its nested queries' steps and the final SELECT.
* SQLite lets WHERE, GROUP BY and HAVING name a SELECT alias (``WHERE yr > 2000`` with
  ``strftime('%Y', d) AS yr``). A ``SELECT *`` step has no such alias, so each intermediate
  step also projects the aliased expressions its clauses refer to: ``SELECT *, strftime(..) AS
  yr FROM t WHERE yr > 2000``. In SQLite a table column wins over an alias in these clauses, so
  adding the alias never changes what a name means; aliases of aggregates are not added to a
  WHERE step (an aggregate cannot appear in WHERE, so the name must be a table column there).
* ``SELECT *`` with GROUP BY is legal in SQLite but shows one arbitrary row per group, which
  says little about the grouping. A GROUP BY or HAVING step therefore projects the grouping keys
  and ``COUNT(*) AS group_size``, plus the aliases HAVING refers to (aggregates are legal
  there). Positional keys (``GROUP BY 1``) are replaced by the SELECT expression they point to,
  because the intermediate projection has different positions.
* ORDER BY and LIMIT come after SELECT, as in execution order, so they see the real projection
  (aliases, positions) and need no rewriting.
* A correlated subquery (one that names a table of an enclosing query) cannot run on its own.
  It is not expanded: it stays an element of the enclosing step, which runs. Correlation is
  detected by table qualifiers and, when ``schema`` is given, by unqualified column names that
  none of the subquery's own tables has.
* A recursive CTE's body refers to itself and is not expanded either; its CTE step is kept.

Steps are written by sqlglot, which normalises some spellings without changing results: a comma
join becomes ``CROSS JOIN``, ``x IS NOT NULL`` becomes ``NOT x IS NULL``, ``IFNULL`` becomes
``COALESCE`` and ``SUBSTR`` becomes ``SUBSTRING`` (SQLite 3.34 or later).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from sqlglot import exp
from sqlglot.errors import SqlglotError

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.engines.sqlite import GuardedDatabase, SqlError
from sqlchorus.tools.errors import SqlchorusError

if TYPE_CHECKING:
    from sqlchorus.tools.engines.catalog import DatabaseSchema

MAIN_SCOPE = "main"
GROUP_SIZE = "group_size"

_SET_OPERATIONS = {exp.Union: "UNION", exp.Intersect: "INTERSECT", exp.Except: "EXCEPT"}
_TAIL_ARGS = ("order", "limit", "offset")

_Q = TypeVar("_Q", bound=exp.Query)


class DecomposeError(SqlchorusError, ValueError):
    """The text is not one query that the decomposer can split."""

    kind = "not_decomposable"


@dataclass
class Step:
    """One incremental sub-query.

    Attributes:
        index: position in the step list, from 0.
        sql: an executable query: the steps so far, projected with ``*`` unless it is the last
            step of its scope.
        operation: what this step adds: ``FROM``, ``JOIN``, ``WHERE``, ``GROUP BY``,
            ``HAVING``, ``SELECT``, ``DISTINCT``, ``ORDER BY``, ``LIMIT``, ``CTE``, ``UNION``,
            ``UNION ALL``, ``INTERSECT``, ``EXCEPT``.
        elements: the text this step adds (the joined table and its condition, the predicate,
            the grouping keys, ...).
        depth: nesting level, 0 for the outermost query.
        scope: which query the step belongs to, e.g. ``main``, ``main > CTE totals``,
            ``main > WHERE subquery 1``, ``main > FROM subquery T1``, ``main > branch 2`` (a
            branch of a compound query).
        final: True for the last step of its scope; its ``sql`` is that whole (sub)query.
    """

    index: int
    sql: str
    operation: str
    elements: str
    depth: int = 0
    scope: str = MAIN_SCOPE
    final: bool = False


@dataclass(frozen=True)
class _Context:
    scope: str = MAIN_SCOPE
    depth: int = 0
    ctes: tuple[exp.CTE, ...] = ()
    recursive: bool = False

    def child(self, scope: str) -> _Context:
        return replace(self, scope=f"{self.scope} > {scope}", depth=self.depth + 1)


def decompose(
    sql: str,
    *,
    dialect: str = "sqlite",
    schema: Mapping[str, Iterable[str]] | DatabaseSchema | None = None,
) -> list[Step]:
    """Split one query into LIST steps, in execution order.

    Args:
        sql: one read query (SELECT, WITH ... SELECT, or a compound query).
        dialect: sqlglot dialect used both to read ``sql`` and to write the steps.
        schema: optional table -> column names, used only to spot correlated subqueries whose
            outer references are unqualified.

    Returns:
        The steps; the last one is the whole query and has ``scope == "main"``.

    Raises:
        DecomposeError: the text is empty, does not parse, or is not exactly one query.
    """
    tree = _parse(sql, dialect)
    builder = _Builder(sql_text.writer(dialect), _column_map(schema))
    builder.query(tree, _Context())
    if not builder.steps:
        raise DecomposeError("The query produced no steps.")
    return builder.steps


def split_pass(sql: str, *, dialect: str = "sqlite") -> bool:
    """True when ``sql`` decomposes without error (the paper's split pass)."""
    try:
        decompose(sql, dialect=dialect)
    except (DecomposeError, SqlglotError, RecursionError):
        return False
    return True


@dataclass
class StepCheck:
    """The outcome of running one step through the guard."""

    step: Step
    ok: bool
    row_count: int = 0
    truncated: bool = False
    error_kind: str | None = None
    error: str | None = None


def execute_steps(
    steps: Iterable[Step],
    db: GuardedDatabase,
    *,
    timeout_s: float | None = None,
    max_rows: int | None = None,
) -> list[StepCheck]:
    """Run every step through ``db`` and report which ones execute.

    A failing step does not stop the others: the caller sees every failure at once.
    """
    checks = []
    for step in steps:
        try:
            result = db.execute(step.sql, timeout_s=timeout_s, max_rows=max_rows)
        except SqlError as e:
            checks.append(StepCheck(step, ok=False, error_kind=e.kind, error=e.message))
        else:
            checks.append(
                StepCheck(step, ok=True, row_count=result.row_count, truncated=result.truncated)
            )
    return checks


_DESCRIPTIONS = {
    "WHERE": "Keep only the rows where {e}.",
    "GROUP BY": "Group the rows by {e}.",
    "HAVING": "Keep only the groups where {e}.",
    "SELECT": "Return {e}.",
    "DISTINCT": "Remove duplicate result rows.",
    "ORDER BY": "Sort the result by {e}.",
}


def describe_step(step: Step) -> str:
    """Describe what a step adds, quoting the SQL elements it adds.

    Example: ``Keep only the rows where T1.age > 30.`` or, for a nested query,
    ``In main > WHERE subquery 1: Group the rows by dept.`` The quoted SQL makes this a
    description for people and scripted models, not a plan example: LIST's plan examples are
    natural language with no SQL (``scripts/build_list_examples.py``).
    """
    op, e = step.operation, step.elements
    if op == "JOIN":
        text = _describe_join(e)
    elif op == "CTE":
        name = e.split(" AS ", 1)[0]
        name = name.split("(", 1)[0] if name.endswith(")") else name
        text = f"Name the result {name}, so that later steps can read it as a table."
    elif op == "FROM":
        text = f"Take the rows of {_source(e)}."
    elif op == "LIMIT":
        text = _describe_limit(e)
    elif op in _DESCRIPTIONS:
        text = _DESCRIPTIONS[op].format(e=e)
    elif op.split()[0] in _SET_OPERATIONS.values():
        text = _describe_set_operation(op, e)
    else:
        text = f"{op}: {e}."
    if step.scope != MAIN_SCOPE:
        text = f"In {step.scope}: {text}"
    return text


def describe_steps(steps: Iterable[Step]) -> str:
    """Number and describe a list of steps, one per line."""
    return "\n".join(f"Step {s.index + 1}: {describe_step(s)}" for s in steps)


# -- describing -------------------------------------------------------------------------------


def _source(text: str) -> str:
    """A table as written, or ``the subquery result t`` for a derived table ``(SELECT ..) AS t``."""
    if text.startswith("("):
        alias = re.search(r"\) AS (\S+)$", text)
        return f"the subquery result {alias.group(1)}" if alias else "the subquery result"
    return text


def _describe_join(elements: str) -> str:
    words = _split_on_condition(elements)
    head = words[0]
    kind, _, table = head.partition("JOIN ")
    table = _source(table)
    kind = kind.strip().lower()
    joined = f"{kind} join" if kind and kind != "cross" else "join"
    if kind == "cross":
        return f"Pair every row with every row of {table}."
    if len(words) == 2:
        return f"{joined.capitalize()} {table} on {words[1]}."
    return f"{joined.capitalize()} {table}."


def _split_on_condition(join: str) -> list[str]:
    """Split ``JOIN t AS x ON cond`` at the ON that follows the joined table, not one inside it."""
    depth = 0
    for i, char in enumerate(join):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and join.startswith(" ON ", i):
            return [join[:i], join[i + 4:]]
    return [join]


def _describe_limit(elements: str) -> str:
    parts = elements.split()
    count = parts[1] if len(parts) > 1 and parts[0] == "LIMIT" else None
    if count is None:
        text = "Keep all rows of the result"
    elif count == "1":
        text = "Keep the first row of the result"
    else:
        text = f"Keep the first {count} rows of the result"
    if "OFFSET" in parts:
        text += f", after skipping {parts[parts.index('OFFSET') + 1]}"
    return text + "."


def _describe_set_operation(op: str, elements: str) -> str:
    right = elements[len(op):].strip() if elements.startswith(op) else elements
    kind = op.split()[0]
    if kind == "UNION":
        dedupe = "keeping duplicates" if op.endswith("ALL") else "removing duplicates"
        return f"Add the rows of {right}, {dedupe} ({op})."
    if kind == "INTERSECT":
        return f"Keep only the rows also returned by {right} ({op})."
    return f"Remove the rows returned by {right} ({op})."


# -- parsing and schema ------------------------------------------------------------------------


def _parse(sql: str, dialect: str) -> exp.Query:
    text = (sql or "").strip().rstrip(";").strip()
    if not text:
        raise DecomposeError("The SQL text is empty.")
    try:
        statements = sql_text.parse(text, dialect=dialect)
    except SqlError as e:
        raise DecomposeError(e.message) from e
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise DecomposeError("Expected exactly one query (SELECT, WITH or a compound query).")
    return statements[0]


def _column_map(
    schema: Mapping[str, Iterable[str]] | DatabaseSchema | None,
) -> dict[str, frozenset[str]] | None:
    if schema is None:
        return None
    if hasattr(schema, "tables"):
        pairs: Iterable[tuple[str, Iterable[str]]] = (
            (t.name, (c.name for c in t.columns)) for t in schema.tables
        )
    else:
        pairs = schema.items()
    return {name.lower(): frozenset(c.lower() for c in cols) for name, cols in pairs}


# -- tree helpers ------------------------------------------------------------------------------


def _nested_queries(nodes: Iterable[exp.Expr | None]) -> Iterator[exp.Query]:
    """Queries directly inside ``nodes``, in source order, without entering them."""
    for node in nodes:
        if node is None:
            continue
        if isinstance(node, exp.Query):
            yield node
        else:
            yield from _nested_queries(node.iter_expressions())


def _own_columns(node: exp.Expr) -> Iterator[exp.Column]:
    """Columns of ``node`` that are not inside a nested query."""
    if isinstance(node, exp.Column):
        yield node
        return
    for child in node.iter_expressions():
        if not isinstance(child, exp.Query):
            yield from _own_columns(child)


def _has_aggregate(node: exp.Expr) -> bool:
    return any(
        not isinstance(agg.parent, exp.Window) and _outside_queries(agg, node)
        for agg in node.find_all(exp.AggFunc)
    )


def _outside_queries(node: exp.Expr, root: exp.Expr) -> bool:
    """True when no query lies between ``node`` and ``root`` (``node`` may be ``root``)."""
    while node is not root and node.parent is not None:
        node = node.parent
        if isinstance(node, exp.Query) and node is not root:
            return False
    return True


def _position(node: exp.Expr) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return int(node.this)
    return None


def _unwrap(query: exp.Expr) -> exp.Expr:
    while isinstance(query, exp.Subquery) and not any(query.args.get(k) for k in _TAIL_ARGS):
        query = query.this
    return query


def _set_operation_name(node: exp.SetOperation) -> str:
    name = next(v for k, v in _SET_OPERATIONS.items() if isinstance(node, k))
    return name if node.args.get("distinct", True) else f"{name} ALL"


def _tail_elements(query: exp.Expr, dialect: Any) -> str:
    parts = []
    if query.args.get("limit") is not None:
        parts.append(query.args["limit"].sql(dialect=dialect).strip())
    if query.args.get("offset") is not None:
        parts.append(query.args["offset"].sql(dialect=dialect).strip())
    return " ".join(parts)


# -- the builder -------------------------------------------------------------------------------


class _Builder:
    def __init__(self, dialect: Any, columns: dict[str, frozenset[str]] | None):
        self.dialect = dialect
        self.columns = columns
        self.steps: list[Step] = []
        self.counters: dict[tuple[str, str], int] = {}

    # emitting

    def emit(self, operation: str, query: exp.Query, elements: str, ctx: _Context) -> None:
        if ctx.ctes:
            query = query.copy()
            query.set("with_", exp.With(expressions=[c.copy() for c in ctx.ctes],
                                        recursive=ctx.recursive or None))
        sql = query.sql(dialect=self.dialect)
        last = self.steps[-1] if self.steps else None
        if last is not None and last.scope == ctx.scope and last.sql == sql:
            return
        self.steps.append(
            Step(len(self.steps), sql, operation, elements, depth=ctx.depth, scope=ctx.scope)
        )

    def close_scope(self, ctx: _Context) -> None:
        """Mark the scope's last step final (a CTE step supersedes its body's last step)."""
        last = None
        for step in self.steps:
            if step.scope == ctx.scope:
                step.final = False
                last = step
        if last is not None:
            last.final = True

    def sql(self, node: exp.Expr) -> str:
        return node.sql(dialect=self.dialect)

    # dispatch

    def query(self, query: exp.Expr, ctx: _Context) -> None:
        query = _unwrap(query)
        if isinstance(query, exp.Select):
            self.select(query, ctx)
        elif isinstance(query, exp.SetOperation):
            self.set_operation(query, ctx)
        elif isinstance(query, exp.Subquery):
            self.subquery_with_tail(query, ctx)
        else:
            raise DecomposeError(f"Cannot decompose a {type(query).__name__} query.")
        self.close_scope(ctx)

    def nested(self, nodes: Iterable[exp.Expr | None], ctx: _Context, clause: str) -> None:
        """Emit the steps of uncorrelated queries nested in ``nodes``."""
        for inner in _nested_queries(nodes):
            if self.is_correlated(inner):
                continue
            number = self.counters.get((ctx.scope, clause), 0) + 1
            self.counters[(ctx.scope, clause)] = number
            alias = inner.alias if isinstance(inner, exp.Subquery) else ""
            label = f"{clause} subquery {alias or number}"
            self.query(inner, ctx.child(label))

    def with_clause(self, query: _Q, ctx: _Context) -> tuple[_Q, _Context]:
        """Emit the steps of each CTE and return the query without its WITH, and the context."""
        with_ = query.args.get("with_")
        if with_ is None:
            return query, ctx
        query = query.copy()
        query.set("with_", None)
        ctes = list(ctx.ctes)
        recursive = ctx.recursive or bool(with_.args.get("recursive"))
        for cte in with_.expressions:
            name = cte.alias
            cte_ctx = replace(ctx.child(f"CTE {name}"), ctes=tuple(ctes), recursive=recursive)
            self_reference = any(t.name.lower() == name.lower() for t in cte.find_all(exp.Table))
            if not self_reference:
                self.query(cte.this, cte_ctx)
            ctes.append(cte)
            identifier = exp.to_identifier(name, quoted=cte.args["alias"].this.quoted)
            star = exp.select("*").from_(exp.Table(this=identifier))
            self.emit("CTE", star, self.sql(cte), replace(cte_ctx, ctes=tuple(ctes)))
            self.close_scope(cte_ctx)
        return query, replace(ctx, ctes=tuple(ctes), recursive=recursive)

    # correlation

    def is_correlated(self, query: exp.Query) -> bool:
        """True when ``query`` names something only an enclosing query defines."""
        inner = _unwrap(query)
        defined: set[str] = set()
        tables: set[str] = set()
        for table in inner.find_all(exp.Table):
            tables.add(table.name.lower())
            defined.update({table.name.lower(), table.alias_or_name.lower()})
        for node in inner.find_all(exp.Subquery, exp.CTE):
            if node.alias:
                defined.add(node.alias.lower())
        columns = list(inner.find_all(exp.Column))
        if any(c.table and c.table.lower() not in defined for c in columns):
            return True
        return self.unqualified_outer_reference(inner, tables, columns)

    def unqualified_outer_reference(
        self, inner: exp.Expr, tables: set[str], columns: list[exp.Column]
    ) -> bool:
        if self.columns is None:
            return False
        cte_names = {c.alias.lower() for c in inner.find_all(exp.CTE)}
        known: set[str] = set()
        for table in tables - cte_names:
            if table not in self.columns:
                return False  # a table we know nothing about could hold any name
            known |= self.columns[table]
        for select in inner.find_all(exp.Select):
            known |= {e.alias_or_name.lower() for e in select.expressions}
        for table_alias in inner.find_all(exp.TableAlias):
            known |= {c.name.lower() for c in table_alias.columns}
        for column in columns:
            ident = column.this
            if column.table or not isinstance(ident, exp.Identifier) or ident.quoted:
                continue  # quoted names may be SQLite's double-quoted string literals
            if column.name.lower() not in known:
                return True
        return False

    # SELECT

    def select(self, select: exp.Select, ctx: _Context) -> None:
        select, ctx = self.with_clause(select, ctx)
        aliases = {
            e.alias.lower(): e for e in select.expressions if isinstance(e, exp.Alias) and e.alias
        }
        from_ = select.args.get("from_")
        if from_ is not None:
            self.source_steps(select, from_, aliases, ctx)

        self.nested(select.expressions, ctx, "SELECT")
        body = select.copy()
        for key in ("distinct", *_TAIL_ARGS):
            body.set(key, None)
        self.emit("SELECT", body, ", ".join(self.sql(e) for e in select.expressions), ctx)
        if select.args.get("distinct") is not None:
            body.set("distinct", select.args["distinct"].copy())
            self.emit("DISTINCT", body, self.sql(select.args["distinct"]), ctx)
        self.tail_steps(select, body, ctx)

    def source_steps(
        self, select: exp.Select, from_: exp.From, aliases: dict[str, exp.Alias], ctx: _Context
    ) -> None:
        """FROM, JOIN, WHERE, GROUP BY and HAVING steps, each projected for execution."""
        base = exp.Select(expressions=[exp.Star()])
        self.nested([from_], ctx, "FROM")
        base.set("from_", from_.copy())
        self.emit("FROM", base, self.sql(from_.this), ctx)

        for join in select.args.get("joins") or []:
            self.nested([join], ctx, "JOIN")
            base.append("joins", join.copy())
            self.emit("JOIN", base, self.sql(join).lstrip(", "), ctx)

        where = select.args.get("where")
        if where is not None:
            self.nested([where], ctx, "WHERE")
            base.set("where", where.copy())
            step = base.copy()
            step.set("expressions", [exp.Star(), *self.alias_refs([where], aliases, agg=False)])
            self.emit("WHERE", step, self.sql(where.this), ctx)

        group = select.args.get("group")
        having = select.args.get("having")
        if group is None and having is None:
            return
        keys: list[exp.Expr] = []
        projection: list[exp.Expr] = []
        if group is not None:
            self.nested([group], ctx, "GROUP BY")
            keys, projection = self.group_keys(select, group, aliases)
            base.set("group", exp.Group(expressions=keys))
            step = base.copy()
            step.set("expressions", self.grouped_projection(projection, [], aliases))
            self.emit("GROUP BY", step, ", ".join(self.sql(k) for k in keys), ctx)
        if having is not None:
            self.nested([having], ctx, "HAVING")
            base.set("having", having.copy())
            step = base.copy()
            step.set("expressions", self.grouped_projection(projection, [having], aliases))
            self.emit("HAVING", step, self.sql(having.this), ctx)

    def group_keys(
        self, select: exp.Select, group: exp.Group, aliases: dict[str, exp.Alias]
    ) -> tuple[list[exp.Expr], list[exp.Expr]]:
        """The GROUP BY keys with positions resolved, and the expressions that show them."""
        keys: list[exp.Expr] = []
        shown: list[exp.Expr] = []
        outputs = select.expressions
        for key in group.expressions:
            position = _position(key)
            target: exp.Expr | None = None
            if position is not None and 1 <= position <= len(outputs):
                target = outputs[position - 1]
                if target.find(exp.Star):
                    # GROUP BY 1 over SELECT *: SQLite expands the star first; keep the number
                    # and let the step project * like the query does.
                    keys.append(key.copy())
                    shown.append(exp.Star())
                    continue
            elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
                target = aliases[key.name.lower()]
            if isinstance(target, exp.Alias):
                keys.append(exp.column(target.args["alias"].copy()))
                shown.append(target.copy())
            elif target is not None:
                keys.append(target.copy())
                shown.append(target.copy())
            else:
                keys.append(key.copy())
                shown.append(key.copy())
        return keys, shown

    def grouped_projection(
        self,
        shown: list[exp.Expr],
        clauses: list[exp.Expr],
        aliases: dict[str, exp.Alias],
    ) -> list[exp.Expr]:
        projection = [e.copy() for e in shown]
        present = {e.alias.lower() for e in projection if isinstance(e, exp.Alias)}
        projection += [
            a for a in self.alias_refs(clauses, aliases, agg=True) if a.alias.lower() not in present
        ]
        names = {e.alias_or_name.lower() for e in projection}
        if GROUP_SIZE not in names:
            projection.append(exp.alias_(exp.Count(this=exp.Star()), GROUP_SIZE))
        return projection

    def alias_refs(
        self, clauses: Iterable[exp.Expr], aliases: dict[str, exp.Alias], *, agg: bool
    ) -> list[exp.Alias]:
        """SELECT aliases named by unqualified columns in ``clauses``, in first-use order."""
        found: dict[str, exp.Alias] = {}
        for clause in clauses:
            for column in _own_columns(clause):
                name = column.name.lower()
                if column.table or name not in aliases or name in found:
                    continue
                alias = aliases[name]
                if not agg and _has_aggregate(alias.this):
                    continue
                found[name] = alias.copy()
        return list(found.values())

    def tail_steps(self, full: exp.Query, body: exp.Query, ctx: _Context) -> None:
        order = full.args.get("order")
        if order is not None:
            self.nested([order], ctx, "ORDER BY")
            body.set("order", order.copy())
            self.emit("ORDER BY", body, ", ".join(self.sql(o) for o in order.expressions), ctx)
        if full.args.get("limit") is not None or full.args.get("offset") is not None:
            self.nested([full.args.get("limit"), full.args.get("offset")], ctx, "LIMIT")
            self.emit("LIMIT", full, _tail_elements(full, self.dialect), ctx)

    # compound queries

    def set_operation(self, query: exp.SetOperation, ctx: _Context) -> None:
        query, ctx = self.with_clause(query, ctx)
        body = query.copy()
        for key in _TAIL_ARGS:
            body.set(key, None)
        self.compound(body, ctx, [0])
        self.tail_steps(query, body, ctx)

    def compound(self, node: exp.SetOperation, ctx: _Context, counter: list[int]) -> None:
        """Branches left to right, then one combining step per operator (left-associative)."""
        left = _unwrap(node.this)
        if isinstance(left, exp.SetOperation) and not any(left.args.get(k) for k in _TAIL_ARGS):
            self.compound(left, ctx, counter)
        else:
            self.branch(node.this, ctx, counter)
        self.branch(node.expression, ctx, counter)
        name = _set_operation_name(node)
        self.emit(name, node, f"{name} {self.sql(node.expression)}", ctx)

    def branch(self, query: exp.Expr, ctx: _Context, counter: list[int]) -> None:
        counter[0] += 1
        self.query(query, ctx.child(f"branch {counter[0]}"))

    def subquery_with_tail(self, query: exp.Subquery, ctx: _Context) -> None:
        """A parenthesised query with its own ORDER BY/LIMIT: ``(SELECT ..) LIMIT 1``."""
        self.query(query.this, ctx.child("subquery"))
        wrapped = exp.select("*").from_(exp.Subquery(this=query.this.copy()))
        order = query.args.get("order")
        if order is not None:
            wrapped.set("order", order.copy())
            self.emit("ORDER BY", wrapped, ", ".join(self.sql(o) for o in order.expressions), ctx)
        for key in ("limit", "offset"):
            if query.args.get(key) is not None:
                wrapped.set(key, query.args[key].copy())
        if query.args.get("limit") is not None or query.args.get("offset") is not None:
            self.emit("LIMIT", wrapped, _tail_elements(query, self.dialect), ctx)


def steps_as_dicts(steps: Iterable[Step]) -> list[dict[str, Any]]:
    """Plain dictionaries, for state, traces and JSON."""
    return [
        {
            "index": s.index,
            "sql": s.sql,
            "operation": s.operation,
            "elements": s.elements,
            "depth": s.depth,
            "scope": s.scope,
            "final": s.final,
        }
        for s in steps
    ]
