"""Reading the values to index from a database, through its guard.

Which values are indexed (the documented rule; skipped columns are listed in ``index.skipped``):
the distinct text values of every column of every ordinary table, in key order, up to
``max_values_per_column`` per column. Values longer than :data:`MAX_VALUE_CHARS` are not indexed
(questions do not quote paragraphs). A column is skipped when a sample of its text values (the
first :data:`SAMPLE_ROWS` in table order) averages more than :data:`FREE_TEXT_AVG_CHARS`
characters (free text) or when nearly all sampled values are hexadecimal or UUID identifiers
(nobody types them with a typo). Views are skipped (their values come from tables) and so are
virtual tables.

How they are read (:func:`_read_columns`): a SQLite table, every column at once, row by row, in
one statement of at most :data:`WHOLE_ROWS` rows (:func:`_table_reads`). A table no larger than
that is thereby read whole, and its columns' distinct values are made from it as SQLite would
make them (SQLite's sort for ``SELECT DISTINCT`` costs more than Python's over the same values);
most tables of most databases are that small, and one statement per table instead of one or two
per column is most of what reading them costs (each statement is parsed and checked by the
guard). In a larger table, the first :data:`SAMPLE_ROWS` + 1 rows read are the table's sample: a
column whose sampled rows are all text has its sample; any other column gets a sample of its own
text values; then each column's text values are read whole, joined into one string
(:func:`_joined`), when it has at most :data:`WHOLE_ROWS` of them, and made into distinct values
the same way; else its distinct values are read by ``SELECT DISTINCT`` in key order, a page
(about :data:`PAGE_BYTES`, at most :data:`PAGE_SIZE` values) a statement, which SQLite also
returns joined. Another engine's table is sampled by its first :data:`SAMPLE_ROWS` + 1 rows
(:func:`_table_sample`) and, when larger, read column by column the same way. A table that
declares a collation (which only SQLite knows how to compare by) is read column by column, a row
a value. The rowid (an ``INTEGER PRIMARY KEY``) holds only integers and is not read.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlchorus.tools.engines.sqlite import Database, GuardedDatabase, SqlError
from sqlchorus.tools.values.parameters import (
    FREE_TEXT_AVG_CHARS,
    MAX_VALUE_CHARS,
    PAGE_BYTES,
    PAGE_SIZE,
    SAMPLE_ROWS,
    WHOLE_ROWS,
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
    conn = db.introspection_connection()
    with db.locked():
        # A fixed statement of sqlchorus's own, like the PRAGMAs below: run on the guarded
        # connection without the parse that checks a query's text.
        tables = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                              "AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()
        for name, sql in tables:
            if (sql or "").lstrip().upper().startswith("CREATE VIRTUAL"):
                skipped.append({"table": name, "column": "*", "reason": "virtual table"})
                continue
            info = conn.execute(f"PRAGMA table_info({_quote(name)})").fetchall()
            rowid = _rowid_alias(sql or "", info)
            for row in info:
                declared = (row[2] or "").upper()
                if "BLOB" in declared:
                    skipped.append({"table": name, "column": row[1], "reason": "BLOB column"})
                    continue
                if row[1] == rowid:
                    continue  # the rowid itself: only ever an integer
                plans.append(ColumnPlan(name, row[1], "COLLATE" in (sql or "").upper()))
    return plans, skipped


def _rowid_alias(sql: str, info: list[tuple]) -> str | None:
    """The column that is the table's rowid (an ``INTEGER PRIMARY KEY`` of a rowid table), or
    None. SQLite refuses any value but an integer there, so it holds no text to index.
    ``INTEGER PRIMARY KEY DESC`` is not an alias (a quirk SQLite keeps): a table whose
    definition says ``DESC`` anywhere keeps all its columns, to be safe."""
    keys = [row for row in info if row[5]]
    upper = " ".join(sql.upper().split())
    if len(keys) != 1 or (keys[0][2] or "").upper() != "INTEGER" or "WITHOUT ROWID" in upper \
            or "DESC" in upper:
        return None
    return keys[0][1]


@dataclass
class _ColumnRead:
    """One column's values as read: why it is not indexed (None when it is), its pages of
    distinct text values in key order, and whether more than the limit exist (None: not known
    yet, ask :func:`_count_beyond` when the limit is reached). ``error``: the column could not
    be read."""

    plan: ColumnPlan
    reason: str | None
    pages: Iterable[list[str]]
    truncated: bool | None
    error: SqlError | None = None

    def known_truncated(self) -> bool | None:
        """Whether more than the limit exist, as far as reading the pages told (call it after
        reading them); None when only :func:`_count_beyond` can tell."""
        if self.truncated is None and isinstance(self.pages, _Pages):
            return self.pages.truncated
        return self.truncated


def _read_columns(db: Database, plans: list[ColumnPlan], limit: int, timeout_s: float
                  ) -> Iterator[_ColumnRead]:
    """Every column of ``plans`` (grouped by table, as :func:`_text_columns` lists them), read,
    one for each plan in order. A column read on its own is read a page at a time as its
    ``pages`` are iterated, which may raise :class:`SqlError`."""
    for _, group in itertools.groupby(plans, key=lambda p: p.table):
        columns = list(group)
        if _joinable(db, columns[0]):
            yield from _table_reads(db, columns, limit, timeout_s)
        else:
            sample = None if columns[0].collated else _table_sample(db, columns, timeout_s)
            yield from _column_reads(db, columns, sample, limit, timeout_s)


def _column_reads(db: Database, columns: list[ColumnPlan], sample: tuple[int, list[list[str]]] | None,
                  limit: int, timeout_s: float) -> Iterator[_ColumnRead]:
    """The reads of one table's ``columns`` given its :func:`_table_sample` (None when there is
    none): a table no larger than the sample is made from it; in a larger one, each column is
    read on its own, from its sample when its first rows are all text."""
    for i, plan in enumerate(columns):
        if sample is not None:
            rows, texts = sample[0], sample[1][i]
            if rows <= SAMPLE_ROWS:  # the whole table
                yield _from_values(plan, texts, limit)
                continue
            if len(texts) == rows:  # its first rows are all text: the column's own sample
                reason = _skip_reason(texts[:SAMPLE_ROWS])
                pages: Iterable[list[str]] = (
                    () if reason else _Pages(db, plan, limit, timeout_s, texts))
                yield _ColumnRead(plan, reason, pages, None)
                continue
        try:
            reason, pages = _column_pages(db, plan, limit, timeout_s)
        except SqlError as e:
            yield _ColumnRead(plan, None, (), None, e)
        else:
            yield _ColumnRead(plan, reason, pages, None)


def _table_sample(db: Database, columns: list[ColumnPlan], timeout_s: float
                  ) -> tuple[int, list[list[str]]] | None:
    """How many of the first :data:`SAMPLE_ROWS` + 1 rows of a table there are, and the text
    values of each of ``columns`` (the table's) in them, in table order; read in one statement.
    None when that fails or outgrows the byte cap (each column is then read on its own, so one
    column that cannot be read costs only itself). A table of at most :data:`SAMPLE_ROWS` rows
    is thereby read whole.

    Row by row, not joined (:func:`_joined`): the guard parses every statement, at a cost that
    grows with its text (about as much per character as a value read costs), and a joined read
    of many columns is long, while a sample has at most :data:`SAMPLE_ROWS` + 1 rows.
    """
    names = ", ".join(_quote(p.column) for p in columns)
    try:
        result = db.lookup(f"SELECT {names} FROM {_quote(columns[0].table)} "
                           f"LIMIT {SAMPLE_ROWS + 1}", timeout_s=timeout_s,
                           max_rows=SAMPLE_ROWS + 1)
    except SqlError:
        return None
    if result.truncated:
        return None
    texts = [[v for v in column if isinstance(v, str)] for column in zip(*result.rows)]
    return len(result.rows), texts or [[] for _ in columns]


def _table_reads(db: Database, columns: list[ColumnPlan], limit: int, timeout_s: float
                 ) -> Iterator[_ColumnRead]:
    """The reads of ``columns``, a SQLite table's (no collation declared), from one statement
    that reads the table row by row, every column at once, up to :data:`WHOLE_ROWS` rows.

    A table no larger than that is read whole: each column is made from all of its text values,
    in table order, as :func:`_from_values` makes them (its sample being its first
    :data:`SAMPLE_ROWS` text values, as a column read on its own has). Most tables of most
    databases are that small, so one statement a table is what reading them costs. In a larger
    table (or one whose values outgrow the guard's byte cap), the rows read give the table's
    sample, its first :data:`SAMPLE_ROWS` + 1 rows, and each column is read on its own
    (:func:`_column_reads`); with fewer rows than that read, each column is read on its own
    from the start.
    """
    names = ", ".join(_quote(p.column) for p in columns)
    try:
        result = db.lookup(f"SELECT {names} FROM {_quote(columns[0].table)} LIMIT {WHOLE_ROWS + 1}",
                           timeout_s=timeout_s, max_rows=WHOLE_ROWS)
    except SqlError:
        yield from _column_reads(db, columns, None, limit, timeout_s)
        return
    if not result.truncated:
        for plan, texts in zip(columns, _texts(result.rows, len(columns))):
            yield _from_values(plan, texts, limit)
        return
    sample = None
    if len(result.rows) > SAMPLE_ROWS:
        sample = (SAMPLE_ROWS + 1, _texts(result.rows[:SAMPLE_ROWS + 1], len(columns)))
    yield from _column_reads(db, columns, sample, limit, timeout_s)


def _texts(rows: list[tuple[Any, ...]], width: int) -> list[list[str]]:
    """The text values of each of ``width`` columns in ``rows``, in order."""
    if not rows:
        return [[] for _ in range(width)]
    return [[v for v in column if type(v) is str] for column in zip(*rows)]


def _joined(db: Database, inner: str, exprs: list[str], params: tuple, timeout_s: float
            ) -> tuple[int, list[list[str]]] | None:
    """SQLite: the rows of the query ``inner``, counted, and the non-NULL values of each of
    ``exprs`` over them, in order; None when the statement fails or a value holds a NUL.

    Each expression's values come back as one NUL-separated string (``group_concat``), so the
    statement returns one row, however many values: each value read through the guard costs a
    Python call to decode and another to measure, while one long string costs one of each and
    is split by a C method. A value longer than the guard lets one value be fails the
    statement (SQLite's ``string or blob too big``), and the caller reads row by row.
    """
    parts = ["count(*)"] + [f"group_concat({e}, char(0)), count({e})" for e in exprs]
    try:
        result = db.lookup(f"SELECT {', '.join(parts)} FROM ({inner})", parameters=params,
                           timeout_s=timeout_s, max_rows=1, max_bytes=2**62)
    except SqlError:
        return None
    row = result.rows[0]
    columns: list[list[str]] = []
    for joined, count in zip(row[1::2], row[2::2]):
        values = joined.split("\x00") if isinstance(joined, str) else []
        if len(values) != count:  # a value holding a NUL of its own was split
            return None
        columns.append(values)
    return row[0], columns


def _skip_reason(sample: list[str]) -> str | None:
    """Why a column whose sampled text values are ``sample`` is not indexed, or None."""
    avg = sum(map(len, sample)) / len(sample)
    if avg > FREE_TEXT_AVG_CHARS:
        return f"free text (sampled values average {avg:.0f} characters)"
    # Identifiers are 16 characters or more: most columns are decided by their lengths alone.
    long = [v for v in sample if len(v) >= 16]
    if len(sample) >= 20 and len(long) >= 0.95 * len(sample) and \
            sum(1 for v in long if _HEX_ID.match(v)) >= 0.95 * len(sample):
        return "identifiers (hexadecimal or UUID values)"
    return None


def _from_values(plan: ColumnPlan, values: list[str], limit: int) -> _ColumnRead:
    """A column read from all of its text values (in table order): its distinct values as
    SQLite's ``SELECT DISTINCT ... ORDER BY`` would list them (binary order, 1 to
    :data:`MAX_VALUE_CHARS` characters as ``length()`` counts them)."""
    if not values:
        return _ColumnRead(plan, None, (), False)
    reason = _skip_reason(values[:SAMPLE_ROWS])
    if reason:
        return _ColumnRead(plan, reason, (), False)
    distinct = set(values)
    if "\x00" in "".join(distinct):
        distinct = {v for v in distinct if 1 <= _sqlite_length(v) <= MAX_VALUE_CHARS}
    else:  # no NUL: length() counts every character
        distinct.discard("")
        if max(map(len, distinct), default=0) > MAX_VALUE_CHARS:
            distinct = {v for v in distinct if len(v) <= MAX_VALUE_CHARS}
    page = sorted(distinct)
    return _ColumnRead(plan, None, [page[:limit]] if page else (), len(page) > limit)


def _column_pages(db: Database, plan: ColumnPlan, limit: int, timeout_s: float
                  ) -> tuple[str | None, Iterable[list[str]]]:
    """Why a column is not indexed (None when it is), and its pages of distinct text values,
    read on its own.

    A sample of the column's text values (the first :data:`SAMPLE_ROWS` in table order)
    decides. When the sample holds every text value of the column, the page is made from it,
    as SQLite would make it (distinct, 1 to :data:`MAX_VALUE_CHARS` characters, in binary
    order), without reading the column again.
    """
    col, tbl = _quote(plan.column), _quote(plan.table)
    sql = f"SELECT {col} FROM {tbl} WHERE {_is_text(db, col)} LIMIT {SAMPLE_ROWS + 1}"
    joined = _joined(db, sql, [col], (), timeout_s) if _joinable(db, plan) else None
    if joined is not None:
        values = joined[1][0]
    else:
        sample = db.lookup(sql, timeout_s=timeout_s, max_rows=SAMPLE_ROWS + 1)
        values = [r[0] for r in sample.rows] + ([None] if sample.truncated else [])
    complete = len(values) <= SAMPLE_ROWS
    values = values[:SAMPLE_ROWS]
    if not values:
        return None, ()
    reason = _skip_reason(values)
    if reason:
        return reason, ()
    if complete and not plan.collated:
        page = sorted({v for v in values if 1 <= _sqlite_length(v) <= MAX_VALUE_CHARS})[:limit]
        return None, [page] if page else ()
    return None, _Pages(db, plan, limit, timeout_s, values)


def _joinable(db: Database, plan: ColumnPlan) -> bool:
    """Whether a column's values may be read joined (:func:`_joined`): SQLite's, and not under
    a declared collation, whose order and equality only SQLite knows."""
    return db.engine == "sqlite" and not plan.collated


def _sqlite_length(text: str) -> int:
    """SQLite's ``length()`` of a text value: its characters before the first NUL."""
    nul = text.find("\x00")
    return len(text) if nul < 0 else nul


class _Pages:
    """Distinct text values of one column, a page at a time, in key order (keyset paging); a
    page holds about :data:`PAGE_BYTES` of values as long as ``sample``'s (the column's). Each
    page asks for one value more than it keeps, so once the pages are read, ``truncated`` says
    whether the column has more than ``limit`` values, without another statement."""

    def __init__(self, db: Database, plan: ColumnPlan, limit: int, timeout_s: float,
                 sample: list[str]):
        self.db, self.plan, self.limit, self.timeout_s = db, plan, limit, timeout_s
        chars = min(sum(map(len, sample)) / max(len(sample), 1), MAX_VALUE_CHARS)
        self.step = max(1000, min(PAGE_SIZE, int(PAGE_BYTES / (chars + 1))))
        self.truncated: bool | None = None

    def __iter__(self) -> Iterator[list[str]]:
        db, plan = self.db, self.plan
        col, tbl = _quote(plan.column), _quote(plan.table)
        base = (f"SELECT DISTINCT {col} FROM {tbl} WHERE {_is_text(db, col)} "
                f"AND length({col}) BETWEEN 1 AND {MAX_VALUE_CHARS}")
        if _joinable(db, plan):
            whole = _joined(db, f"SELECT {col} FROM {tbl} WHERE {_is_text(db, col)} AND "
                                f"length({col}) BETWEEN 1 AND {MAX_VALUE_CHARS} "
                                f"LIMIT {WHOLE_ROWS + 1}", [col], (), self.timeout_s)
            if whole is not None and whole[0] <= WHOLE_ROWS:  # every value: no NUL in any
                distinct = sorted(set(whole[1][0]))
                for at in range(0, min(len(distinct), self.limit), self.step):
                    yield distinct[at:min(at + self.step, self.limit)]
                self.truncated = len(distinct) > self.limit
                return
        last: str | None = None
        params: tuple[str, ...]
        remaining = self.limit
        while remaining > 0:
            size = min(self.step, remaining)
            if last is None:
                sql, params = f"{base} ORDER BY {col} LIMIT {size + 1}", ()
            elif db.engine == "sqlite":
                sql, params = f"{base} AND {col} > ? ORDER BY {col} LIMIT {size + 1}", (last,)
            else:  # placeholders differ between engines; the value is the database's own text
                sql, params = (f"{base} AND {col} > {_literal(last)} ORDER BY {col} "
                               f"LIMIT {size + 1}", ())
            joined = (_joined(db, sql, [col], params, self.timeout_s) if _joinable(db, plan)
                      else None)
            if joined is not None:
                # The subquery's ORDER BY decides which values its LIMIT keeps; sorting again
                # makes the order certain (binary, as SQLite's without a collation).
                page = sorted(joined[1][0])
            else:
                rows = db.lookup(sql, parameters=params, timeout_s=self.timeout_s,
                                 max_rows=size + 1,
                                 max_bytes=(size + 1) * MAX_VALUE_CHARS * 4 + 1024).rows
                page = [r[0] for r in rows]
            more = len(page) > size
            page = page[:size]
            if page:
                yield page
            remaining -= len(page)
            if not more:
                self.truncated = False
                return
            last = page[-1]
        self.truncated = True


def _count_beyond(db: Database, plan: ColumnPlan, limit: int, timeout_s: float) -> bool:
    col, tbl = _quote(plan.column), _quote(plan.table)
    rows = db.lookup(
        f"SELECT 1 FROM (SELECT DISTINCT {col} FROM {tbl} WHERE {_is_text(db, col)} "
        f"AND length({col}) BETWEEN 1 AND {MAX_VALUE_CHARS}) AS d LIMIT 1 OFFSET {limit}",
        timeout_s=timeout_s, max_rows=1,
    ).rows
    return bool(rows)
