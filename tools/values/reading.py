"""Reading the values to index from a database, through its guard, a page at a time.

Which values are indexed (the documented rule; skipped columns are listed in ``index.skipped``):
text values of every column of every ordinary table, read as ``SELECT DISTINCT`` in key order,
a page at a time, up to ``max_values_per_column`` per column. Values longer than
:data:`MAX_VALUE_CHARS` are not indexed (questions do not quote paragraphs). A column is skipped
when a sample of its text values averages more than :data:`FREE_TEXT_AVG_CHARS` characters (free
text) or when nearly all sampled values are hexadecimal or UUID identifiers (nobody types them
with a typo). Views are skipped (their values come from tables) and so are virtual tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from sqlchorus.tools.engines.sqlite import Database, GuardedDatabase
from sqlchorus.tools.values.parameters import (
    FREE_TEXT_AVG_CHARS,
    MAX_VALUE_CHARS,
    PAGE_SIZE,
    SAMPLE_ROWS,
)

_HEX_ID = re.compile(r"^(?:[0-9a-fA-F]{16,}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                     r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")


@dataclass(frozen=True)
class ColumnPlan:
    """One column to read: plain data, so a build's plan can be sent to another process or
    machine that opens the same database (see :mod:`.parts`)."""

    table: str
    column: str
    collated: bool = False  # the table declares a collation: only SQLite sorts and compares it


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_TEXT_TYPES = ("char", "text", "string", "clob")
"""Declared types of a typed engine's (PostgreSQL's, DuckDB's) columns that hold text."""


def _typed_text_columns(db: Database) -> tuple[list[ColumnPlan], list[dict[str, str]]]:
    """The text columns of a typed engine's tables, from its catalogue: other columns hold no
    text (a number, a date) and are not indexed."""
    plans: list[ColumnPlan] = []
    for table in db.read_structure():
        if table.is_view:
            continue
        for column in table.columns:
            if any(t in (column.type or "").lower() for t in _TEXT_TYPES):
                plans.append(ColumnPlan(table.name, column.name))
    return plans, []


def _is_text(db: Database, col: str) -> str:
    """The condition that a value of ``col`` is text: SQLite's values have their own types; a
    typed engine's column has one type for all of them."""
    return f"typeof({col}) = 'text'" if db.engine == "sqlite" else f"{col} IS NOT NULL"


def _literal(value: str) -> str:
    """A text value as a SQL literal (standard quoting, which PostgreSQL and DuckDB share)."""
    return "'" + value.replace("'", "''") + "'"


def _text_columns(db: Database) -> tuple[list[ColumnPlan], list[dict[str, str]]]:
    if not isinstance(db, GuardedDatabase):
        return _typed_text_columns(db)
    plans: list[ColumnPlan] = []
    skipped: list[dict[str, str]] = []
    tables = db.lookup(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ).rows
    conn = db.introspection_connection()
    with db.locked():
        for name, sql in tables:
            if (sql or "").lstrip().upper().startswith("CREATE VIRTUAL"):
                skipped.append({"table": name, "column": "*", "reason": "virtual table"})
                continue
            for row in conn.execute(f"PRAGMA table_info({_quote(name)})").fetchall():
                declared = (row[2] or "").upper()
                if "BLOB" in declared:
                    skipped.append({"table": name, "column": row[1], "reason": "BLOB column"})
                    continue
                plans.append(ColumnPlan(name, row[1], "COLLATE" in (sql or "").upper()))
    return plans, skipped


def _column_pages(db: Database, plan: ColumnPlan, limit: int, timeout_s: float
                  ) -> tuple[str | None, Iterable[list[str]]]:
    """Why a column is not indexed (None when it is), and its pages of distinct text values.

    A sample of the column's text values (the first :data:`SAMPLE_ROWS` in table order)
    decides. When the sample holds every text value of the column, the page is made from it,
    as SQLite would make it (distinct, 1 to :data:`MAX_VALUE_CHARS` characters, in binary
    order), without reading the column again.
    """
    col, tbl = _quote(plan.column), _quote(plan.table)
    sample = db.lookup(
        f"SELECT {col} FROM {tbl} WHERE {_is_text(db, col)} LIMIT {SAMPLE_ROWS + 1}",
        timeout_s=timeout_s, max_rows=SAMPLE_ROWS + 1,
    )
    complete = not sample.truncated and len(sample.rows) <= SAMPLE_ROWS
    values = [r[0] for r in sample.rows[:SAMPLE_ROWS]]
    if not values:
        return None, ()
    avg = sum(len(v) for v in values) / len(values)
    if avg > FREE_TEXT_AVG_CHARS:
        return f"free text (sampled values average {avg:.0f} characters)", ()
    ids = sum(1 for v in values if _HEX_ID.match(v))
    if len(values) >= 20 and ids >= 0.95 * len(values):
        return "identifiers (hexadecimal or UUID values)", ()
    if complete and not plan.collated:
        page = sorted({v for v in values if 1 <= _sqlite_length(v) <= MAX_VALUE_CHARS})[:limit]
        return None, [page] if page else ()
    return None, _pages(db, plan, limit, timeout_s)


def _sqlite_length(text: str) -> int:
    """SQLite's ``length()`` of a text value: its characters before the first NUL."""
    nul = text.find("\x00")
    return len(text) if nul < 0 else nul


def _pages(db: Database, plan: ColumnPlan, limit: int, timeout_s: float
           ) -> Iterable[list[str]]:
    """Distinct text values of one column, a page at a time, in key order (keyset paging)."""
    col, tbl = _quote(plan.column), _quote(plan.table)
    base = (f"SELECT DISTINCT {col} FROM {tbl} WHERE {_is_text(db, col)} "
            f"AND length({col}) BETWEEN 1 AND {MAX_VALUE_CHARS}")
    last: str | None = None
    params: tuple[str, ...]
    remaining = limit
    while remaining > 0:
        size = min(PAGE_SIZE, remaining)
        if last is None:
            sql, params = f"{base} ORDER BY {col} LIMIT {size}", ()
        elif db.engine == "sqlite":
            sql, params = f"{base} AND {col} > ? ORDER BY {col} LIMIT {size}", (last,)
        else:  # placeholders differ between engines; the value is the database's own text
            sql, params = f"{base} AND {col} > {_literal(last)} ORDER BY {col} LIMIT {size}", ()
        rows = db.lookup(sql, parameters=params, timeout_s=timeout_s, max_rows=size,
                          max_bytes=size * MAX_VALUE_CHARS * 4 + 1024).rows
        if not rows:
            return
        page = [r[0] for r in rows]
        yield page
        remaining -= len(page)
        if len(page) < size:
            return
        last = page[-1]


def _count_beyond(db: Database, plan: ColumnPlan, limit: int, timeout_s: float) -> bool:
    col, tbl = _quote(plan.column), _quote(plan.table)
    rows = db.lookup(
        f"SELECT 1 FROM (SELECT DISTINCT {col} FROM {tbl} WHERE {_is_text(db, col)} "
        f"AND length({col}) BETWEEN 1 AND {MAX_VALUE_CHARS}) AS d LIMIT 1 OFFSET {limit}",
        timeout_s=timeout_s, max_rows=1,
    ).rows
    return bool(rows)
