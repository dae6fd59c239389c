"""Schema introspection: tables, columns, keys, row counts, sample values, descriptions.

:func:`introspect` reads a database through its guarded :class:`Database` and returns a
:class:`DatabaseSchema`, the plain-data model every schema view is rendered from.

How it is read, and why:

* The structure (tables and views, columns, keys) comes from each engine's own catalogue,
  through :meth:`~sqlchorus.tools.engines.base.Database.read_structure` (for SQLite, see
  :meth:`GuardedDatabase.read_structure <sqlchorus.tools.engines.sqlite.GuardedDatabase.read_structure>`:
  sqlite-utils on the guarded connection, and why).
* Row counts and sample values are data, not structure: they run through
  :meth:`Database.lookup` with a short time budget each. A count that runs out of time is
  ``None``. Samples come from one ``SELECT <columns> ... LIMIT`` per table; only a column that
  shows fewer distinct values than wanted in those rows, in a table with more rows than were read,
  gets its own ``SELECT DISTINCT``, and those extra queries share one overall time budget, so a
  huge table of mostly-NULL columns cannot stall introspection. Empty strings are not kept as
  samples. Nothing is cached between calls.

Descriptions follow BIRD's layout: one ``<table>.csv`` per table in a ``database_description``
folder, with columns ``original_column_name, column_name, column_description, data_format,
value_description``. Their encodings vary (UTF-8 with a byte-order mark, cp1252), so each file is
tried as UTF-8 first and falls back to cp1252, then latin-1.

:func:`schema_only_database` builds an empty SQLite file from one entry of a Spider or BIRD
``tables.json``, which lets a schema without its data (BIRD's dev databases are not shipped here)
go through the same introspection and views.
"""

from __future__ import annotations

import csv
import io
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sqlchorus.tools.engines.sqlite import Database, SqlError
from sqlchorus.tools.engines.catalog import DatabaseSchema, Table, quote_identifier
from sqlchorus.tools.json_values import BLOB_TYPES, blob_text

DESCRIPTION_FOLDER = "database_description"

_COUNT_TIMEOUT_S = 1.0
_SCAN_TIMEOUT_S = 1.0
_SCAN_ROWS = 200
_SCAN_MAX_BYTES = 4 * 1024 * 1024
_DISTINCT_TIMEOUT_S = 0.25
_DISTINCT_BUDGET_S = 3.0

# -- introspection ----------------------------------------------------------------------------


def introspect(
    db: Database,
    *,
    sample_values: int = 3,
    descriptions_dir: str | os.PathLike[str] | None = None,
    max_sample_chars: int = 60,
) -> DatabaseSchema:
    """Read the schema of ``db``: tables and views, columns, keys, row counts, samples.

    Args:
        db: the guarded database to read.
        sample_values: distinct non-null example values to keep per column (0 for none).
        descriptions_dir: a BIRD-style ``database_description`` folder. When None, a folder of
            that name beside the database file is used if there is one.
        max_sample_chars: longer text samples are cut to this many characters plus ``…``.

    Returns:
        The schema, tables in ``sqlite_master`` order (tables first, then views), columns in
        declaration order.

    Raises:
        FileNotFoundError: ``descriptions_dir`` is given but is not a folder.
    """
    tables = db.read_structure()
    for table in tables:
        table.row_count = _row_count(db, table.name)
    if sample_values > 0:
        deadline = time.monotonic() + _DISTINCT_BUDGET_S
        for table in tables:
            _fill_samples(db, table, sample_values, max_sample_chars, deadline)
    if descriptions_dir is not None:
        if not Path(descriptions_dir).is_dir():
            raise FileNotFoundError(f"No descriptions folder at {descriptions_dir}.")
        apply_descriptions(tables, descriptions_dir)
    elif db.path is not None and (db.path.parent / DESCRIPTION_FOLDER).is_dir():
        apply_descriptions(tables, db.path.parent / DESCRIPTION_FOLDER)
    return DatabaseSchema(name=db.name, tables=tables)


def _row_count(db: Database, table: str) -> int | None:
    try:
        result = db.lookup(
            f"SELECT count(*) FROM {quote_identifier(table)}", timeout_s=_COUNT_TIMEOUT_S
        )
    except SqlError:
        return None
    return int(result.rows[0][0]) if result.rows else None


def _fill_samples(
    db: Database, table: Table, n: int, max_chars: int, deadline: float
) -> None:
    if not table.columns:
        return
    found: list[dict[tuple[str, Any], Any]] = [{} for _ in table.columns]
    select = ", ".join(quote_identifier(c.name) for c in table.columns)
    rows_read = 0
    complete = False
    try:
        result = db.lookup(
            f"SELECT {select} FROM {quote_identifier(table.name)} LIMIT {_SCAN_ROWS}",
            timeout_s=_SCAN_TIMEOUT_S,
            max_bytes=_SCAN_MAX_BYTES,
        )
        rows_read = len(result.rows)
        complete = not result.truncated and rows_read < _SCAN_ROWS
        for row in result.rows:
            for values, value in zip(found, row):
                if len(values) < n:
                    _add_sample(values, value, max_chars)
    except SqlError:
        pass
    if table.row_count is not None and table.row_count <= rows_read:
        complete = True
    for column, values in zip(table.columns, found):
        if len(values) < n and not complete and time.monotonic() < deadline:
            _distinct_samples(db, table.name, column.name, values, n, max_chars)
        column.samples = list(values.values())


def _distinct_samples(
    db: Database,
    table: str,
    column: str,
    values: dict[tuple[str, Any], Any],
    n: int,
    max_chars: int,
) -> None:
    col = quote_identifier(column)
    # SQLite compares any value with ''; a typed engine compares text only with text.
    empty = f"{col} <> ''" if db.engine == "sqlite" else f"CAST({col} AS TEXT) <> ''"
    sql = (
        f"SELECT DISTINCT {col} FROM {quote_identifier(table)} "
        f"WHERE {col} IS NOT NULL AND {empty} LIMIT {n + len(values)}"
    )
    try:
        result = db.lookup(sql, timeout_s=_DISTINCT_TIMEOUT_S, max_bytes=_SCAN_MAX_BYTES)
    except SqlError:
        return
    for (value,) in result.rows:
        if len(values) >= n:
            break
        _add_sample(values, value, max_chars)


def _add_sample(values: dict[tuple[str, Any], Any], value: Any, max_chars: int) -> None:
    # Empty and blank strings are skipped: as examples they read as a missing value.
    if value is None or (isinstance(value, str) and not value.strip()):
        return
    if isinstance(value, BLOB_TYPES):
        key: tuple[str, Any] = ("blob", bytes(value))
        shown: Any = blob_text(value)
    else:
        key = (type(value).__name__, value)
        shown = value
        if isinstance(value, str) and len(value) > max_chars:
            shown = value[:max_chars].rstrip() + "…"
    if key not in values:
        values[key] = shown


# -- descriptions -----------------------------------------------------------------------------


def apply_descriptions(tables: Iterable[Table], folder: str | os.PathLike[str]) -> None:
    """Fill column descriptions from BIRD-style ``<table>.csv`` files in ``folder``.

    Tables and columns are matched case-insensitively, ignoring surrounding whitespace; rows
    naming an unknown column are ignored, and the first row for a column wins.
    """
    files = {
        p.stem.strip().lower(): p for p in Path(folder).iterdir()
        if p.is_file() and p.suffix.lower() == ".csv"
    }
    for table in tables:
        path = files.get(table.name.strip().lower())
        if path is None:
            continue
        by_column = {c.name.strip().lower(): c for c in table.columns}
        done: set[str] = set()
        for row in read_description_csv(path):
            key = row.get("original_column_name", "").strip().lower()
            column = by_column.get(key)
            if column is None or key in done:
                continue
            done.add(key)
            column.full_name = _clean(row.get("column_name"))
            column.description = _clean(row.get("column_description"))
            column.value_description = _clean(row.get("value_description"))


def read_description_csv(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """Rows of one description file as dicts keyed by the lower-cased, stripped header."""
    raw = Path(path).read_bytes()
    text = _decode(raw)
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None:
        return []
    keys = [h.strip().lower() for h in header]
    return [
        {k: v for k, v in zip(keys, row) if k}
        for row in reader
        if any(cell.strip() for cell in row)
    ]


def _decode(raw: bytes) -> str:
    for encoding in ("utf-8-sig", "cp1252"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            continue
    return raw.decode("latin-1")


def _clean(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    return text or None


# -- schema-only databases --------------------------------------------------------------------


def schema_only_database(
    tables_json_entry: Mapping[str, Any], path: str | os.PathLike[str]
) -> Path:
    """Write an empty SQLite database with the schema of one ``tables.json`` entry.

    Works for Spider's and BIRD's ``tables.json``: every identifier is quoted, a table's
    primary-key columns (one or several entries, or nested lists) form one ``PRIMARY KEY``
    clause, and each foreign-key column pair becomes its own ``FOREIGN KEY`` clause (a compound
    key introspects back as the same pairs). Column types are the entry's, upper-cased; Spider's
    ``others`` becomes no declared type. Duplicate column or table names (case-insensitive) keep
    their first occurrence; tables without columns and tables named ``sqlite_*`` are left out,
    since SQLite cannot create them. An existing file at ``path`` is replaced.

    Returns:
        The path written.
    """
    statements = schema_only_ddl(tables_json_entry)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        tmp.unlink()
    conn = sqlite3.connect(tmp)
    try:
        with conn:
            for statement in statements:
                conn.execute(statement)
    finally:
        conn.close()
    os.replace(tmp, target)
    return target


def schema_only_ddl(entry: Mapping[str, Any]) -> list[str]:
    """The ``CREATE TABLE`` statements :func:`schema_only_database` runs, one per table."""
    table_names: list[str] = list(entry["table_names_original"])
    raw_columns: list[tuple[int, str]] = [tuple(c) for c in entry["column_names_original"]]
    types: list[str] = list(entry.get("column_types") or [])

    kept_tables: dict[int, str] = {}
    seen_tables: set[str] = set()
    for i, name in enumerate(table_names):
        # Names starting with sqlite_ are reserved (Spider lists world_1's sqlite_sequence).
        if name.lower() not in seen_tables and not name.lower().startswith("sqlite_"):
            seen_tables.add(name.lower())
            kept_tables[i] = name

    columns: dict[int, list[tuple[str, str]]] = {i: [] for i in kept_tables}
    column_of: dict[int, tuple[int, str]] = {}
    seen_cols: dict[int, set[str]] = {i: set() for i in kept_tables}
    for idx, (t_idx, name) in enumerate(raw_columns):
        if t_idx not in kept_tables:
            continue
        if name.lower() in seen_cols[t_idx]:
            # Keep the first spelling; later duplicates still resolve to it for keys.
            first = next(c for c in columns[t_idx] if c[0].lower() == name.lower())
            column_of[idx] = (t_idx, first[0])
            continue
        seen_cols[t_idx].add(name.lower())
        raw_type = (types[idx] if idx < len(types) else "") or ""
        decl = "" if raw_type.strip().lower() in ("", "others") else raw_type.strip().upper()
        columns[t_idx].append((name, decl))
        column_of[idx] = (t_idx, name)

    primary: dict[int, list[str]] = {i: [] for i in kept_tables}
    for item in flatten_indices(entry.get("primary_keys") or []):
        if item in column_of:
            t_idx, name = column_of[item]
            if name not in primary[t_idx]:
                primary[t_idx].append(name)

    foreign: dict[int, list[tuple[str, str, str]]] = {i: [] for i in kept_tables}
    for pair in entry.get("foreign_keys") or []:
        if len(pair) != 2 or pair[0] not in column_of or pair[1] not in column_of:
            continue
        (t_from, c_from), (t_to, c_to) = column_of[pair[0]], column_of[pair[1]]
        fk = (c_from, kept_tables[t_to], c_to)
        if fk not in foreign[t_from]:
            foreign[t_from].append(fk)

    statements = []
    for t_idx, table in kept_tables.items():
        if not columns[t_idx]:
            continue
        parts = [
            f"{quote_identifier(name)} {decl}".rstrip() for name, decl in columns[t_idx]
        ]
        if primary[t_idx]:
            parts.append(
                "PRIMARY KEY (" + ", ".join(quote_identifier(c) for c in primary[t_idx]) + ")"
            )
        for c_from, ref_table, c_to in foreign[t_idx]:
            parts.append(
                f"FOREIGN KEY ({quote_identifier(c_from)}) "
                f"REFERENCES {quote_identifier(ref_table)} ({quote_identifier(c_to)})"
            )
        body = ",\n  ".join(parts)
        statements.append(f"CREATE TABLE {quote_identifier(table)} (\n  {body}\n)")
    return statements


def flatten_indices(items: Iterable[Any]) -> Iterable[int]:
    """Column indices of a tables.json ``primary_keys`` entry, compound keys flattened."""
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from flatten_indices(item)
        elif isinstance(item, int):
            yield item
