"""SQL written for SQLite, rewritten for PostgreSQL or DuckDB so that it means what it meant there.

Benchmarks' gold SQL (Spider, BIRD) is SQLite's. :func:`transpile` writes it in another engine's
dialect with sqlglot and, given the database's :class:`Names`, makes the rewrites SQLite's name
resolution and comparison rules need, which sqlglot cannot know without the schema:

* names of tables and columns are written as the schema spells them, quoted: SQLite matches names
  case-insensitively, PostgreSQL folds unquoted names to lower case, and loaded tables keep
  SQLite's case (``Documents``, ``Stadium_ID``);
* a double-quoted word that names no column, table or alias is a string, as SQLite reads it
  (Spider's gold writes ``WHERE name = "Paris"``); sqlglot reads it as a name;
* ``LIKE`` becomes ``ILIKE``: SQLite's LIKE ignores the case of ASCII letters, the engines' does
  not, and gold SQL relies on it (``paragraph_text like 'korea'``);
* a subquery in FROM without an alias gets one (``_subN``): PostgreSQL 15 refuses none;
* SQLite's comparison affinity is made explicit where the engines refuse to compare text with
  numbers (:func:`_apply_affinity`): ``open_year < 2009`` on a TEXT column compares text in
  SQLite, and ``concert.Stadium_ID = stadium.Stadium_ID`` (TEXT = INT) compares numbers.

What stays different is SQLite-only behaviour no rewrite can give another engine: bare columns
beside GROUP BY, which row of a tie ``ORDER BY ... LIMIT`` keeps, ``avg`` over text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import sqlglot
from sqlglot import exp

from sqlchorus.tools.schema import Table

DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "postgres": "postgres", "duckdb": "duckdb"}
"""sqlglot's dialect of each engine, by the engine's name (``postgres`` is sqlglot's spelling)."""


def _dialect(engine: str) -> str:
    try:
        return DIALECTS[engine]
    except KeyError:
        raise ValueError(f"No SQL dialect for engine {engine!r}; known: sqlite, postgresql, duckdb.") from None


@dataclass
class Names:
    """A SQLite database's names, by lower-cased name -> the schema's spelling, and the type
    affinity of every column (``(table, column)``, lower-cased)."""

    tables: dict[str, str]
    columns: dict[str, str]
    affinity: dict[tuple[str, str], str]


def affinity_of(declared: str) -> str:
    """SQLite's column affinity from a declared type (section 3.1 of SQLite's datatype doc)."""
    d = declared.upper()
    if "INT" in d:
        return "integer"
    if any(k in d for k in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if d == "" or "BLOB" in d:
        return "blob"
    if any(k in d for k in ("REAL", "FLOA", "DOUB")):
        return "real"
    return "numeric"


def sqlite_names(db_path: str | Path) -> Names:
    """The names and column affinities of a SQLite database."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        columns: dict[str, str] = {}
        affinity: dict[tuple[str, str], str] = {}
        for t in tables:
            for r in conn.execute(f'PRAGMA table_info("{t}")'):
                columns.setdefault(r[1].lower(), r[1])
                affinity[(t.lower(), r[1].lower())] = affinity_of(r[2] or "")
    finally:
        conn.close()
    return Names({t.lower(): t for t in tables}, columns, affinity)


def names_of(tables: Iterable[Table]) -> Names:
    """The names of a database read through any engine (:meth:`Database.read_structure` or
    :func:`~sqlchorus.tools.schema.introspect`): affinities from the engine's types, which is
    close to SQLite's when the database was loaded from SQLite."""
    columns: dict[str, str] = {}
    affinity: dict[tuple[str, str], str] = {}
    for table in tables:
        for column in table.columns:
            columns.setdefault(column.name.lower(), column.name)
            kind = column.type.upper()
            affinity[(table.name.lower(), column.name.lower())] = (
                "text" if any(k in kind for k in ("CHAR", "TEXT", "STRING")) else affinity_of(kind))
    return Names({t.name.lower(): t.name for t in tables}, columns, affinity)


def transpile(sql: str, engine: str, names: Names | None = None) -> str:
    """SQLite's ``sql`` in ``engine``'s dialect (``postgresql``, ``duckdb``); with ``names``, the
    rewrites of the module's text as well.

    Raises:
        sqlglot.errors.ParseError: ``sql`` does not parse as SQLite's.
    """
    if names is None:
        return sqlglot.transpile(sql, read="sqlite", write=_dialect(engine))[0]
    tables, columns = names.tables, names.columns
    tree = sqlglot.parse_one(sql, read="sqlite")
    _apply_affinity(tree, names)
    aliases = {a.alias.lower() for a in tree.find_all(exp.Alias)} | {
        a.name.lower() for a in tree.find_all(exp.TableAlias)}
    for column in list(tree.find_all(exp.Column)):
        ident = column.this
        if not isinstance(ident, exp.Identifier):
            continue
        key = ident.name.lower()
        if ident.quoted and not column.table and key not in columns and key not in aliases \
                and key not in tables:
            column.replace(exp.Literal.string(ident.name))
            continue
        if key in columns and key not in aliases:
            column.set("this", exp.to_identifier(columns[key], quoted=True))
        qualifier = column.args.get("table")
        if isinstance(qualifier, exp.Identifier) and qualifier.name.lower() in tables \
                and qualifier.name.lower() not in aliases:
            column.set("table", exp.to_identifier(tables[qualifier.name.lower()], quoted=True))
    for like in list(tree.find_all(exp.Like)):
        like.replace(exp.ILike(this=like.this, expression=like.expression))
    for n, subquery in enumerate(list(tree.find_all(exp.Subquery))):
        if isinstance(subquery.parent, (exp.From, exp.Join)) and not subquery.alias:
            subquery.set("alias", exp.TableAlias(this=exp.to_identifier(f"_sub{n}")))
    for table in tree.find_all(exp.Table):
        ident = table.this
        if isinstance(ident, exp.Identifier) and ident.name.lower() in tables:
            table.set("this", exp.to_identifier(tables[ident.name.lower()], quoted=True))
    return tree.sql(dialect=_dialect(engine))


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_NUMERIC_AFFINITIES = ("integer", "real", "numeric")


def _column_affinity(node: exp.Expression, names: Names, scope_tables: dict[str, str]) -> str | None:
    """The affinity of a column reference, or None when it is not a column or is ambiguous."""
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
        return None
    col = node.name.lower()
    if node.table:
        table = scope_tables.get(node.table.lower())
        return names.affinity.get((table, col)) if table else None
    for candidates in (_local_tables(node), set(scope_tables.values())):
        found = {names.affinity[(t, col)] for t in candidates if (t, col) in names.affinity}
        if found:
            return found.pop() if len(found) == 1 else None
    return None


def _local_tables(node: exp.Expression) -> set[str]:
    """The tables in the FROM and JOINs of the SELECT a column belongs to (not of subqueries)."""
    select = node.find_ancestor(exp.Select)
    if select is None:
        return set()
    sources = [select.args.get("from_") or select.args.get("from"), *(select.args.get("joins") or [])]
    return {s.this.name.lower() for s in sources if s is not None and isinstance(s.this, exp.Table)}


def _number(node: exp.Expression) -> bool:
    if isinstance(node, exp.Neg):
        node = node.this
    return isinstance(node, exp.Literal) and node.is_number


def _apply_affinity(tree: exp.Expression, names: Names) -> None:
    """SQLite's comparison affinity, made explicit where the engines would refuse or differ.

    A TEXT column compared with a number literal compares as text in SQLite (the literal takes
    the column's affinity): the literal becomes a string. A TEXT column compared for equality
    with a numeric column compares as numbers in SQLite; the numeric side is cast to text, which
    gives the same answer for the canonical integer strings Spider holds and, unlike a cast of
    the text side to a number, cannot fail on a value that is not a number.
    """
    scope_tables = {}
    for table in tree.find_all(exp.Table):
        scope_tables[table.alias_or_name.lower()] = table.name.lower()
        scope_tables.setdefault(table.name.lower(), table.name.lower())
    for cmp in list(tree.find_all(*_COMPARISONS)):
        left, right = cmp.this, cmp.expression
        la = _column_affinity(left, names, scope_tables)
        ra = _column_affinity(right, names, scope_tables)
        if la == "text" and _number(right):
            right.replace(exp.Literal.string(right.sql()))
        elif ra == "text" and _number(left):
            left.replace(exp.Literal.string(left.sql()))
        elif isinstance(cmp, (exp.EQ, exp.NEQ)) and {la, ra} & {"text"} and \
                ({la, ra} - {"text"}) <= set(_NUMERIC_AFFINITIES) and la != ra:
            numeric_side = right if la == "text" else left
            numeric_side.replace(exp.cast(numeric_side.copy(), "text"))
    for in_ in list(tree.find_all(exp.In)):
        la = _column_affinity(in_.this, names, scope_tables)
        if la == "text":
            for item in in_.expressions:
                if _number(item):
                    item.replace(exp.Literal.string(item.sql()))
        query = in_.args.get("query")
        select = query.this if isinstance(query, exp.Subquery) else query
        if la in _NUMERIC_AFFINITIES and isinstance(select, exp.Select) and len(select.expressions) == 1:
            inner = select.expressions[0]
            if _column_affinity(inner, names, scope_tables) == "text":
                in_.this.replace(exp.cast(in_.this.copy(), "text"))
