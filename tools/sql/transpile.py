"""SQL written for SQLite, rewritten for PostgreSQL, DuckDB or MySQL so that it means what it meant there.

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
* a subquery in FROM without an alias gets one (``_subN``): PostgreSQL 15 and MySQL refuse none;
* SQLite's comparison affinity is made explicit where the engines refuse to compare text with
  numbers (:func:`_apply_affinity`): ``open_year < 2009`` on a TEXT column compares text in
  SQLite, and ``concert.Stadium_ID = stadium.Stadium_ID`` (TEXT = INT) compares numbers.

MySQL (and MariaDB) needs more, since it differs from SQLite where the other two agree with it:

* ``/`` between integers divides exactly there (``7 / 2`` is 3.5, and 3 in SQLite): between two
  integer operands (integer columns, integer literals, ``count``) it becomes ``DIV``;
* ``avg`` gives a decimal of four more places than its argument (``33.3333``): its argument is
  taken as a double, as SQLite's is (not with ``idiomatic``);
* a table alias is case-sensitive there (``T1`` and ``t1`` are two names): every reference takes
  the spelling of the alias's definition;
* ``IN (SELECT ... LIMIT n)`` is refused: the subquery is read through a derived table.

With ``idiomatic=True`` (few-shot examples, which teach a model the engine's SQL rather than
reproduce SQLite's results) names are quoted only where the source quoted them or the engine needs
it (a keyword, PostgreSQL's capital letters), ``LIKE`` stays ``LIKE``, and neither SQLite's place
for NULLs under ``ORDER BY`` nor its precision of ``avg`` is spelled out.

What stays different is SQLite-only behaviour no rewrite can give another engine: bare columns
beside GROUP BY, which row of a tie ``ORDER BY ... LIMIT`` keeps, ``avg`` over text.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from sqlchorus.tools.sql import text as sql_text

if TYPE_CHECKING:  # the catalogue's model is the engines' room's, above this one
    from sqlchorus.tools.engines.catalog import Table

DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "postgres": "postgres", "duckdb": "duckdb",
            "mysql": "mysql", "mariadb": "mysql"}
"""sqlglot's dialect of each engine, by the engine's name (``postgres`` is sqlglot's spelling; MySQL
and MariaDB share ``mysql``)."""


def _dialect(engine: str) -> str:
    try:
        return DIALECTS[engine]
    except KeyError:
        raise ValueError(f"No SQL dialect for engine {engine!r}; known: sqlite, postgresql, duckdb, mysql.") from None


@dataclass
class Names:
    """A SQLite database's names, by lower-cased name -> the schema's spelling, and the type
    affinity of every column (``(table, column)``, lower-cased). ``columns`` holds a column's first
    spelling among all tables; ``spelled`` each table's own (``(table, column)``, lower-cased),
    since two tables may spell one name two ways (``Department_ID`` and ``department_ID``)."""

    tables: dict[str, str]
    columns: dict[str, str]
    affinity: dict[tuple[str, str], str]
    spelled: dict[tuple[str, str], str] = field(default_factory=dict)


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
        spelled: dict[tuple[str, str], str] = {}
        for t in tables:
            for r in conn.execute(f'PRAGMA table_info("{t}")'):
                columns.setdefault(r[1].lower(), r[1])
                affinity[(t.lower(), r[1].lower())] = affinity_of(r[2] or "")
                spelled[(t.lower(), r[1].lower())] = r[1]
    finally:
        conn.close()
    return Names({t.lower(): t for t in tables}, columns, affinity, spelled)


def names_of(tables: Iterable[Table]) -> Names:
    """The names of a database read through any engine (:meth:`Database.read_structure` or
    :func:`~sqlchorus.tools.schema.introspect.introspect`): affinities from the engine's types, which is
    close to SQLite's when the database was loaded from SQLite."""
    columns: dict[str, str] = {}
    affinity: dict[tuple[str, str], str] = {}
    spelled: dict[tuple[str, str], str] = {}
    tables = list(tables)
    for table in tables:
        for column in table.columns:
            columns.setdefault(column.name.lower(), column.name)
            kind = column.type.upper()
            affinity[(table.name.lower(), column.name.lower())] = (
                "text" if any(k in kind for k in ("CHAR", "TEXT", "STRING")) else affinity_of(kind))
            spelled[(table.name.lower(), column.name.lower())] = column.name
    return Names({t.name.lower(): t.name for t in tables}, columns, affinity, spelled)


def transpile(sql: str, engine: str, names: Names | None = None, *, idiomatic: bool = False) -> str:
    """SQLite's ``sql`` in ``engine``'s dialect (``postgresql``, ``duckdb``, ``mysql``); with
    ``names``, the rewrites of the module's text as well; with ``idiomatic``, as few-shot examples
    are carried (see the module's text).

    Raises:
        sqlglot.errors.ParseError: ``sql`` does not parse as SQLite's.
    """
    dialect = _dialect(engine)
    if names is None and not idiomatic and dialect != "mysql":
        return sqlglot.transpile(sql, read="sqlite", write=dialect)[0]
    tree = sqlglot.parse_one(sql, read="sqlite")
    if names is not None:
        _apply_names(tree, names, dialect, quote_all=not idiomatic, ilike=not idiomatic)
    for n, subquery in enumerate(list(tree.find_all(exp.Subquery))):
        if isinstance(subquery.parent, (exp.From, exp.Join)) and not subquery.alias:
            subquery.set("alias", exp.TableAlias(this=exp.to_identifier(f"_sub{n}")))
    if dialect == "mysql":
        _for_mysql(tree, names, faithful=not idiomatic)
    if idiomatic:
        _engine_null_order(tree, dialect)
        _quote_where_needed(tree, dialect)
        for div in tree.find_all(exp.Div):
            # SQLite's NULL for a division by zero (NULLIF around every divisor) is not what an
            # example teaches.
            div.set("safe", False)
    return tree.sql(dialect=sql_text.writer(dialect))


def _apply_names(tree: exp.Expr, names: Names, dialect: str, *, quote_all: bool, ilike: bool) -> None:
    """Names as the schema spells them (quoted, or with ``quote_all`` off only where the source
    quoted them or ``dialect`` needs it), a double-quoted word that names nothing as a string,
    SQLite's affinity made explicit and (``ilike``) LIKE without regard to case."""
    tables, columns = names.tables, names.columns

    def named(spelling: str, source: exp.Identifier, table: bool = False) -> exp.Identifier:
        if quote_all or source.quoted or needs_quotes(spelling, dialect):
            return exp.to_identifier(spelling, quoted=True)
        # Unquoted, the engine finds the name however it is written (PostgreSQL folds it, and the
        # schema's is lower case; DuckDB and MySQL's columns ignore case), but for MySQL's tables,
        # whose names are file names on most systems.
        return exp.to_identifier(spelling if table and dialect == "mysql" else source.name, quoted=False)

    _apply_affinity(tree, names)
    aliases = {a.alias.lower() for a in tree.find_all(exp.Alias)} | {
        a.name.lower() for a in tree.find_all(exp.TableAlias)}
    scope_tables = _scope_tables(tree)
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
            column.set("this", named(_spelling(column, key, names, scope_tables), ident))
        qualifier = column.args.get("table")
        if isinstance(qualifier, exp.Identifier) and qualifier.name.lower() in tables \
                and qualifier.name.lower() not in aliases:
            column.set("table", named(tables[qualifier.name.lower()], qualifier, table=True))
    if ilike:
        for like in list(tree.find_all(exp.Like)):
            like.replace(exp.ILike(this=like.this, expression=like.expression))
    for table in tree.find_all(exp.Table):
        ident = table.this
        if isinstance(ident, exp.Identifier) and ident.name.lower() in tables:
            table.set("this", named(tables[ident.name.lower()], ident, table=True))


def _scope_tables(tree: exp.Expr) -> dict[str, str]:
    """Alias (or name) -> table name, lower-cased, of every table the query reads."""
    scope_tables: dict[str, str] = {}
    for table in tree.find_all(exp.Table):
        scope_tables[table.alias_or_name.lower()] = table.name.lower()
        scope_tables.setdefault(table.name.lower(), table.name.lower())
    return scope_tables


def _spelling(column: exp.Column, key: str, names: Names, scope_tables: dict[str, str]) -> str:
    """How the schema spells column ``key`` where ``column`` stands: in its qualifier's table, else
    in the first table of its own SELECT that has it, else as any table first spells it."""
    if column.table:
        table = scope_tables.get(column.table.lower())
        return names.spelled.get((table, key), names.columns[key]) if table else names.columns[key]
    for table in sorted(_local_tables(column)):
        if (table, key) in names.spelled:
            return names.spelled[(table, key)]
    return names.columns[key]


# -- MySQL ---------------------------------------------------------------------------------------


def _integer_operand(node: exp.Expr, names: Names | None, scope_tables: dict[str, str]) -> bool:
    """Whether SQLite computes ``node`` as an integer: an integer literal, ``count``, an integer
    column, or arithmetic (``+ - *``) and ``DIV`` of those."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        return _integer_operand(node.this, names, scope_tables)
    if isinstance(node, exp.Literal):
        return node.is_int
    if isinstance(node, exp.Count):
        return True
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.IntDiv)):
        return _integer_operand(node.this, names, scope_tables) and _integer_operand(node.expression, names,
                                                                                     scope_tables)
    if isinstance(node, exp.Cast):
        return node.to.is_type(*exp.DataType.INTEGER_TYPES)
    if isinstance(node, (exp.Sum, exp.Min, exp.Max)):
        return _integer_operand(node.this, names, scope_tables)
    return names is not None and _column_affinity(node, names, scope_tables) == "integer"


def _for_mysql(tree: exp.Expr, names: Names | None, *, faithful: bool) -> None:
    """The rewrites MySQL needs to mean what SQLite meant (see the module's text)."""
    scope_tables = _scope_tables(tree)
    for div in list(tree.find_all(exp.Div)):
        if _integer_operand(div.this, names, scope_tables) and _integer_operand(div.expression, names, scope_tables):
            div.replace(exp.IntDiv(this=div.this, expression=div.expression))
    if faithful:
        for avg in list(tree.find_all(exp.Avg)):
            if not isinstance(avg.this, exp.Distinct):
                avg.set("this", exp.cast(avg.this.copy(), exp.DataType.build("double", dialect="mysql")))
    defined = {a.name.lower(): a.name for a in tree.find_all(exp.TableAlias) if a.name}
    for column in tree.find_all(exp.Column):
        qualifier = column.args.get("table")
        if isinstance(qualifier, exp.Identifier) and qualifier.name != defined.get(qualifier.name.lower(),
                                                                                  qualifier.name):
            column.set("table", exp.to_identifier(defined[qualifier.name.lower()], quoted=qualifier.quoted))
    for n, in_ in enumerate(list(tree.find_all(exp.In))):
        query = in_.args.get("query")
        inner = query.this if isinstance(query, exp.Subquery) else query
        if isinstance(inner, exp.Query) and inner.args.get("limit") is not None:
            wrapped = exp.select("*").from_(exp.Subquery(this=inner.copy(), alias=exp.TableAlias(
                this=exp.to_identifier(f"_in{n}"))))
            in_.set("query", exp.Subquery(this=wrapped))


# -- examples ------------------------------------------------------------------------------------


def _engine_null_order(tree: exp.Expr, dialect: str) -> None:
    """Each ORDER BY key with the engine's own place for NULLs, so that none is spelled out."""
    ordering = sqlglot.Dialect.get_or_raise(dialect).NULL_ORDERING
    for ordered in tree.find_all(exp.Ordered):
        desc = bool(ordered.args.get("desc"))
        if ordering == "nulls_are_small":
            first = not desc
        elif ordering == "nulls_are_large":
            first = desc
        else:  # nulls_are_last
            first = False
        ordered.set("nulls_first", first)


_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def needs_quotes(name: str, dialect: str, *, stored: bool = True) -> bool:
    """Whether ``name`` must be quoted in ``dialect`` to mean itself: not a plain word, a word the
    dialect reserves, or, for a ``stored`` name (a table's or column's, not an alias, whose every
    use folds alike), a capital letter on PostgreSQL, which folds unquoted names to lower case."""
    if not _PLAIN_NAME.match(name):
        return True
    generator = sqlglot.Dialect.get_or_raise(dialect).generator_class
    reserved = {w.lower() for w in getattr(generator, "RESERVED_KEYWORDS", ())} | _RESERVED.get(dialect, frozenset())
    if name.lower() in reserved:
        return True
    return stored and dialect == "postgres" and name != name.lower()


_RESERVED = {
    "postgres": frozenset(
        """all analyse analyze and any array as asc asymmetric both case cast check collate column constraint
        create current_catalog current_date current_role current_time current_timestamp current_user default
        deferrable desc distinct do else end except false fetch for foreign from grant group having in initially
        intersect into lateral leading limit localtime localtimestamp not null offset on only or order placing
        primary references returning select session_user some symmetric table then to trailing true union unique
        user using variadic when where window with""".split()),
    "duckdb": frozenset(
        """all analyse analyze and any array as asc asymmetric both case cast check collate column constraint
        create default deferrable desc describe distinct do else end except false fetch for foreign from grant
        group having in initially intersect into lateral leading limit not null offset on only or order pivot
        placing primary qualify references returning select show some summarize symmetric table then to trailing
        true union unique unpivot using variadic when where window with""".split()),
}
"""Reserved words sqlglot's generators do not list themselves (PostgreSQL's appendix C, DuckDB's
``duckdb_keywords()`` of category reserved)."""


def _quote_where_needed(tree: exp.Expr, dialect: str) -> None:
    """Quotes on the names that need them in ``dialect``; a name the source quoted stays quoted."""
    for ident in tree.find_all(exp.Identifier):
        if not ident.quoted and needs_quotes(ident.name, dialect, stored=False):
            ident.set("quoted", True)


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_NUMERIC_AFFINITIES = ("integer", "real", "numeric")


def _column_affinity(node: exp.Expr, names: Names, scope_tables: dict[str, str]) -> str | None:
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


def _local_tables(node: exp.Expr) -> set[str]:
    """The tables in the FROM and JOINs of the SELECT a column belongs to (not of subqueries)."""
    select = node.find_ancestor(exp.Select)
    if select is None:
        return set()
    sources = [select.args.get("from_") or select.args.get("from"), *(select.args.get("joins") or [])]
    return {s.this.name.lower() for s in sources if s is not None and isinstance(s.this, exp.Table)}


def _number(node: exp.Expr) -> bool:
    if isinstance(node, exp.Neg):
        node = node.this
    return isinstance(node, exp.Literal) and node.is_number


def _apply_affinity(tree: exp.Expr, names: Names) -> None:
    """SQLite's comparison affinity, made explicit where the engines would refuse or differ.

    A TEXT column compared with a number literal compares as text in SQLite (the literal takes
    the column's affinity): the literal becomes a string. A TEXT column compared for equality
    with a numeric column compares as numbers in SQLite; the numeric side is cast to text, which
    gives the same answer for the canonical integer strings Spider holds and, unlike a cast of
    the text side to a number, cannot fail on a value that is not a number.
    """
    scope_tables = _scope_tables(tree)
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
        if isinstance(select, exp.Select) and len(select.expressions) == 1:
            inner = select.expressions[0]
            ia = _column_affinity(inner.unalias() if isinstance(inner, exp.Alias) else inner, names, scope_tables)
            if la in _NUMERIC_AFFINITIES and ia == "text":
                in_.this.replace(exp.cast(in_.this.copy(), "text"))
            elif la == "text" and ia in _NUMERIC_AFFINITIES:
                # SQLite compares the two as numbers; the numeric side as text gives the same
                # answer for the canonical integers keys hold, and cannot fail on a text value.
                inner.replace(exp.cast(inner.copy(), "text"))
