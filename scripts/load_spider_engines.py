"""Load Spider's SQLite databases into PostgreSQL, DuckDB and MySQL/MariaDB, keeping names, keys and values.

One PostgreSQL database per Spider database, named after it (``--postgres URL``: a server URL
whose role can CREATE DATABASE), one ``<name>.duckdb`` file per database (``--duckdb-dir``), and
one MySQL or MariaDB database per Spider database (``--mysql URL``: ``mysql://`` or ``mariadb://``,
a user that can CREATE DATABASE; the password from the URL, ``~/.my.cnf`` or ``MYSQL_PWD``).
Tables and columns keep their SQLite names exactly (quoted identifiers, case kept).

Types follow the SQLite declared type, checked against the data, because SQLite's type affinity
lets any value sit in any column and Spider's data uses that:

* INTEGER/INT... -> bigint; a column holding non-integral numbers -> double precision; a column
  holding any text or blob -> text (reported as kept as text).
* REAL/FLOAT/DOUBLE -> double precision; NUMERIC/DECIMAL(p,s) -> numeric(p,s) when every value
  fits p and s exactly, else numeric (PostgreSQL) / DOUBLE (DuckDB, whose DECIMAL needs a width).
  Non-numeric values -> text.
* DATE/DATETIME/TIMESTAMP -> date/timestamp only when every value parses and prints back as the
  very same text (so results normalised to ISO text equal SQLite's); else text, reported.
* BOOLEAN -> bigint when every value is 0 or 1 (SQLite has no booleans; Spider's queries compare
  such columns with 1 and 0, which PostgreSQL refuses on boolean), else text (Spider's are 'T'/'F').
* BLOB -> bytea/BLOB when every value is a blob, else text. No declared type: by the data.
* Anything else (TEXT, VARCHAR(n), CHAR(n)...) -> text; numbers found in it are written as the
  text SQLite would give them.

Primary keys are kept when the key's values are unique and not NULL. Foreign keys (which SQLite
does not enforce) are kept when the referenced columns are a kept primary key or unique and not
NULL in the data (they then get a UNIQUE constraint, which both engines require of a referenced
key), the types agree, and every non-NULL referencing tuple exists; otherwise they are skipped and reported. An engine that
still refuses a key reports it skipped with its message.

MySQL and MariaDB differ where SQLite's results depend on it (:func:`load_mysql`): text compares
there case-sensitively and without padding only under a binary collation without PAD SPACE
(``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on MySQL), which every loaded database
takes, as SQLite's BINARY compares; text is ``VARCHAR(255)`` (a key needs a bounded length), or
``LONGTEXT`` when a value is longer (a key on it is then skipped and reported); NUMERIC/DECIMAL
columns are ``DOUBLE``, which is how SQLite holds them (a ``DECIMAL`` would make ``avg`` and ``/``
exact decimals that SQLite's doubles are not); DATETIME is ``DATETIME(6)``.

PostgreSQL is loaded with COPY; DuckDB with multi-row INSERT ... VALUES statements in one
transaction per table (see :data:`DUCKDB_BATCH`; pyarrow, DuckDB's fastest path, is not a
dependency, and Spider dev is small: 77 tables, 8.5k rows); MySQL with multi-row INSERTs.

Run: ``python scripts/load_spider_engines.py --postgres postgresql://user@host:port/postgres
--duckdb-dir DIR --mysql mysql://user@host:port/ [--replace] [--reader-role] [DB ...]``. Prints
one line per database and engine, then one JSON line of totals. ``--reader-role`` is PostgreSQL's
only: sqlchorus refuses a MySQL user that may read other databases than the one it opens, so one
reader of every Spider database would be refused on each.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

__all__ = ["Column", "Table", "Schema", "read_schema", "load_database", "load_postgres",
           "load_duckdb", "load_mysql", "main"]

READER_ROLE = "sqlchorus_reader"


def quote(name: str) -> str:
    """A quoted identifier: SQLite's names keep their case and may be keywords."""
    return '"' + name.replace('"', '""') + '"'


@dataclass
class Column:
    name: str
    declared: str
    kind: str = "text"
    """bigint, double, numeric, date, timestamp, blob or text."""
    precision: tuple[int, int] | None = None
    fell_back: str | None = None
    """Why a column whose declared type was not text is kept as text."""

    def pg_type(self) -> str:
        if self.kind == "numeric":
            return f"numeric({self.precision[0]},{self.precision[1]})" if self.precision else "numeric"
        return {"bigint": "bigint", "double": "double precision", "date": "date",
                "timestamp": "timestamp", "blob": "bytea", "text": "text"}[self.kind]

    def duckdb_type(self) -> str:
        if self.kind == "numeric":
            return f"DECIMAL({self.precision[0]},{self.precision[1]})" if self.precision else "DOUBLE"
        return {"bigint": "BIGINT", "double": "DOUBLE", "date": "DATE", "timestamp": "TIMESTAMP",
                "blob": "BLOB", "text": "VARCHAR"}[self.kind]

    def mysql_type(self, longest: int = 0) -> str:
        """MySQL's and MariaDB's type; ``longest`` is the column's longest text value."""
        if self.kind == "text":
            return "VARCHAR(255)" if longest <= MYSQL_VARCHAR else "LONGTEXT"
        return {"bigint": "BIGINT", "double": "DOUBLE", "numeric": "DOUBLE", "date": "DATE",
                "timestamp": "DATETIME(6)", "blob": "LONGBLOB"}[self.kind]


@dataclass
class ForeignKey:
    columns: list[str]
    parent: str
    parent_columns: list[str]

    def describe(self, table: str) -> str:
        return f"{table}({', '.join(self.columns)}) -> {self.parent}({', '.join(self.parent_columns)})"


@dataclass
class Table:
    name: str
    columns: list[Column]
    rows: list[tuple]
    primary_key: list[str] = field(default_factory=list)
    unique_keys: list[list[str]] = field(default_factory=list)
    """Columns referenced by a foreign key that are not the primary key but unique in the data."""
    foreign_keys: list[ForeignKey] = field(default_factory=list)


@dataclass
class Schema:
    """A SQLite database read whole, with the types and keys decided for the other engines."""

    name: str
    tables: list[Table]
    skipped_keys: list[str] = field(default_factory=list)

    @property
    def text_columns(self) -> list[str]:
        return [f"{t.name}.{c.name}: {c.fell_back}" for t in self.tables for c in t.columns if c.fell_back]


# -- reading and deciding ------------------------------------------------------------------------

_NUMERIC = re.compile(r"\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def _sqlite_text(value: Any) -> Any:
    """The text SQLite gives a value cast to TEXT."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else str(value)
    return str(value)


def _round_trips(values: list[str], kind: str) -> bool:
    parse = date.fromisoformat if kind == "date" else datetime.fromisoformat
    for v in values:
        try:
            parsed = parse(v)
        except ValueError:
            return False
        printed = parsed.isoformat() if kind == "date" else parsed.isoformat(sep=" ")
        if printed != v:
            return False
    return True


def _fits(values: list[Any], precision: int, scale: int) -> bool:
    for v in values:
        try:
            d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
        except InvalidOperation:
            return False
        if not d.is_finite() or d != d.quantize(Decimal(1).scaleb(-scale)):
            return False
        digits = len(d.quantize(Decimal(1).scaleb(-scale)).as_tuple().digits)
        if digits > precision:
            return False
    return True


def _decide(column: Column, values: list[Any]) -> None:
    """Set the column's kind from its declared type and its values (see the module docstring)."""
    declared = column.declared.lower()
    present = [v for v in values if v is not None]
    kinds = {type(v) for v in present}
    numeric_only = kinds <= {int, float}

    def text(reason: str) -> None:
        column.kind, column.fell_back = "text", reason

    def by_data() -> None:
        if not present or not kinds <= {int, float, bytes} or (bytes in kinds and len(kinds) > 1):
            column.kind = "text"
        elif kinds == {bytes}:
            column.kind = "blob"
        else:
            column.kind = "bigint" if kinds == {int} else "double"

    if "int" in declared:
        if kinds <= {int}:
            column.kind = "bigint"
        elif numeric_only:
            column.kind = "double"
        else:
            text(f"declared {column.declared}, holds {_example(present, (str, bytes))!r}")
    elif any(k in declared for k in ("real", "floa", "doub")):
        if numeric_only:
            column.kind = "double"
        else:
            text(f"declared {column.declared}, holds {_example(present, (str, bytes))!r}")
    elif "dec" in declared or "num" in declared:
        if not numeric_only:
            text(f"declared {column.declared}, holds {_example(present, (str, bytes))!r}")
            return
        column.kind = "numeric"
        m = _NUMERIC.search(declared)
        if m and m.group(2) is not None:
            p, s = int(m.group(1)), int(m.group(2))
            if 0 < p <= 38 and s <= p and _fits(present, p, s):
                column.precision = (p, s)
    elif declared.startswith("date") or "time" in declared:
        kind = "date" if declared == "date" else "timestamp"
        if kinds <= {str} and _round_trips(present, kind):
            column.kind = kind
        else:
            bad = next((v for v in present if not (isinstance(v, str) and _round_trips([v], kind))), None)
            text(f"declared {column.declared}, holds {bad!r}")
    elif "bool" in declared:
        if set(present) <= {0, 1} and kinds <= {int}:
            column.kind = "bigint"
        else:
            text(f"declared {column.declared}, holds {_example(present, object)!r}")
    elif "blob" in declared:
        if kinds <= {bytes}:
            column.kind = "blob"
        else:
            text(f"declared {column.declared}, holds {_example(present, (str, int, float))!r}")
    elif declared == "":
        by_data()
    else:
        column.kind = "text"


def _example(values: list[Any], types: Any) -> Any:
    return next((v for v in values if isinstance(v, types) and not isinstance(v, bool)), None)


def _resolve(name: str, names: list[str]) -> str | None:
    """SQLite resolves names case-insensitively; the real spelling of ``name`` in ``names``."""
    return next((n for n in names if n == name), None) or next(
        (n for n in names if n.lower() == name.lower()), None)


def read_schema(sqlite_path: str | Path) -> Schema:
    """Read a SQLite database: tables, rows, and the types and keys the other engines get."""
    path = Path(sqlite_path)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        tables: list[Table] = []
        declared_fks: dict[str, list[tuple[list[str], str, list[str | None]]]] = {}
        for name in names:
            info = conn.execute(f"PRAGMA table_info({quote(name)})").fetchall()
            columns = [Column(r[1], r[2] or "") for r in info]
            rows = conn.execute(f"SELECT * FROM {quote(name)}").fetchall()
            for i, column in enumerate(columns):
                _decide(column, [row[i] for row in rows])
            pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
            tables.append(Table(name, columns, rows, pk))
            groups: dict[int, tuple[list[str], str, list[str | None]]] = {}
            for r in conn.execute(f"PRAGMA foreign_key_list({quote(name)})").fetchall():
                fk_id, _seq, parent, child_col, parent_col = r[0], r[1], r[2], r[3], r[4]
                g = groups.setdefault(fk_id, ([], parent, []))
                g[0].append(child_col)
                g[2].append(parent_col)
            declared_fks[name] = list(groups.values())
    finally:
        conn.close()
    schema = Schema(path.stem, tables)
    _check_keys(schema, declared_fks)
    return schema


def _convert(table: Table) -> None:
    """Rewrite values of text columns as SQLite's text, so every engine gets the same strings."""
    texts = [i for i, c in enumerate(table.columns) if c.kind == "text"]
    if not texts:
        return
    if not any(not isinstance(row[i], (str, type(None))) for row in table.rows for i in texts):
        return
    table.rows = [tuple(_sqlite_text(v) if i in texts else v for i, v in enumerate(row))
                  for row in table.rows]


def _check_keys(schema: Schema, declared: dict[str, list[tuple[list[str], str, list[str | None]]]]) -> None:
    by_name = {t.name: t for t in schema.tables}
    for table in schema.tables:
        _convert(table)
        if table.primary_key:
            idx = [[c.name for c in table.columns].index(c) for c in table.primary_key]
            keys = [tuple(row[i] for i in idx) for row in table.rows]
            if any(v is None for k in keys for v in k):
                schema.skipped_keys.append(f"{table.name} primary key ({', '.join(table.primary_key)}): NULL values")
                table.primary_key = []
            elif len(set(keys)) != len(keys):
                schema.skipped_keys.append(f"{table.name} primary key ({', '.join(table.primary_key)}): duplicate values")
                table.primary_key = []
    for table in schema.tables:
        child_names = [c.name for c in table.columns]
        for child_cols, parent_name, parent_cols in declared.get(table.name, []):
            desc = f"{table.name}({', '.join(child_cols)}) -> {parent_name}({', '.join(str(c) for c in parent_cols)})"
            parent_key = _resolve(parent_name, list(by_name))
            if parent_key is None:
                schema.skipped_keys.append(f"{desc}: no table {parent_name}")
                continue
            parent = by_name[parent_key]
            pnames = [c.name for c in parent.columns]
            if all(c is None for c in parent_cols):
                resolved_parent: list[str | None] = list(parent.primary_key) if len(parent.primary_key) == len(child_cols) else [None]
            else:
                resolved_parent = [_resolve(c, pnames) if c else None for c in parent_cols]
            resolved_child = [_resolve(c, child_names) for c in child_cols]
            if None in resolved_parent or None in resolved_child:
                schema.skipped_keys.append(f"{desc}: a column does not exist")
                continue
            if sorted(resolved_parent) != sorted(parent.primary_key) and \
                    sorted(resolved_parent) not in [sorted(u) for u in parent.unique_keys]:
                pi = [pnames.index(c) for c in resolved_parent]
                keys = [tuple(row[i] for i in pi) for row in parent.rows]
                if any(None in k for k in keys) or len(set(keys)) != len(keys):
                    schema.skipped_keys.append(
                        f"{desc}: the referenced columns are not unique in {parent.name}")
                    continue
                new_unique = list(resolved_parent)
            else:
                new_unique = None
            ccols = [table.columns[child_names.index(c)] for c in resolved_child]
            pcols = [parent.columns[pnames.index(c)] for c in resolved_parent]
            if any(c.pg_type() != p.pg_type() for c, p in zip(ccols, pcols)):
                types = ", ".join(f"{c.pg_type()} vs {p.pg_type()}" for c, p in zip(ccols, pcols))
                schema.skipped_keys.append(f"{desc}: column types differ ({types})")
                continue
            ci = [child_names.index(c) for c in resolved_child]
            pi = [pnames.index(c) for c in resolved_parent]
            present = {tuple(row[i] for i in pi) for row in parent.rows}
            missing = [k for k in (tuple(row[i] for i in ci) for row in table.rows)
                       if None not in k and k not in present]
            if missing:
                schema.skipped_keys.append(f"{desc}: {len(missing)} rows reference no row, e.g. {missing[0]!r}")
                continue
            if new_unique:
                parent.unique_keys.append(new_unique)
            table.foreign_keys.append(ForeignKey(resolved_child, parent.name, resolved_parent))


def _create_order(schema: Schema) -> list[Table]:
    """Parents before children (DuckDB checks a foreign key's parent at CREATE); a cycle leaves
    the rest in file order."""
    done: list[Table] = []
    names: set[str] = set()
    pending = list(schema.tables)
    while pending:
        ready = [t for t in pending
                 if all(fk.parent in names or fk.parent == t.name for fk in t.foreign_keys)]
        if not ready:
            ready = pending[:1]
        for t in ready:
            done.append(t)
            names.add(t.name)
            pending.remove(t)
    return done


# -- PostgreSQL ----------------------------------------------------------------------------------


def _database_url(server_url: str, database: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(server_url)
    params["dbname"] = database
    return make_conninfo(**params)


def load_postgres(schema: Schema, server_url: str, *, replace: bool = False,
                  reader_role: bool = False) -> dict[str, Any]:
    """Create database ``schema.name`` on the server and load it with COPY.

    Returns ``{"status": "loaded"|"exists", "tables", "rows", "seconds", "skipped_keys"}``; an
    existing database is left as it is unless ``replace``.
    """
    import psycopg
    from psycopg import sql

    start = time.perf_counter()
    with psycopg.connect(server_url, autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (schema.name,)).fetchone()
        if exists and not replace:
            return {"status": "exists", "tables": 0, "rows": 0, "seconds": 0.0, "skipped_keys": []}
        if exists:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(schema.name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(schema.name)))
        if reader_role:
            _ensure_reader(admin)
            admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                sql.Identifier(schema.name), sql.Identifier(READER_ROLE)))
    skipped: list[str] = []
    rows = 0
    with psycopg.connect(_database_url(server_url, schema.name)) as conn:
        for table in schema.tables:
            cols = ", ".join(f"{quote(c.name)} {c.pg_type()}" for c in table.columns)
            conn.execute(f"CREATE TABLE {quote(table.name)} ({cols})")
            names = ", ".join(quote(c.name) for c in table.columns)
            with conn.cursor().copy(f"COPY {quote(table.name)} ({names}) FROM STDIN") as copy:
                for row in table.rows:
                    copy.write_row(row)
            rows += len(table.rows)
        for table in schema.tables:
            if table.primary_key:
                _try(conn, f"ALTER TABLE {quote(table.name)} ADD PRIMARY KEY "
                           f"({', '.join(quote(c) for c in table.primary_key)})",
                     f"{table.name} primary key", skipped)
            for unique in table.unique_keys:
                _try(conn, f"ALTER TABLE {quote(table.name)} ADD UNIQUE "
                           f"({', '.join(quote(c) for c in unique)})",
                     f"{table.name} unique ({', '.join(unique)})", skipped)
        for table in schema.tables:
            for fk in table.foreign_keys:
                _try(conn, f"ALTER TABLE {quote(table.name)} ADD FOREIGN KEY "
                           f"({', '.join(quote(c) for c in fk.columns)}) REFERENCES {quote(fk.parent)} "
                           f"({', '.join(quote(c) for c in fk.parent_columns)})",
                     fk.describe(table.name), skipped)
        if reader_role:
            conn.execute(f"GRANT USAGE ON SCHEMA public TO {READER_ROLE}")
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {READER_ROLE}")
            conn.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {READER_ROLE}")
        conn.execute("ANALYZE")
    return {"status": "loaded", "tables": len(schema.tables), "rows": rows,
            "seconds": time.perf_counter() - start, "skipped_keys": skipped}


def _try(conn: Any, statement: str, what: str, skipped: list[str]) -> None:
    import psycopg

    try:
        with conn.transaction():
            conn.execute(statement)
    except psycopg.Error as e:
        skipped.append(f"{what}: {str(e).splitlines()[0]}")


def _ensure_reader(admin: Any) -> None:
    """The read-only login role, created once per server (no password: the server's
    authentication rules decide how it logs in)."""
    if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER_ROLE,)).fetchone():
        admin.execute(f"CREATE ROLE {READER_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
    admin.execute(f"ALTER ROLE {READER_ROLE} SET default_transaction_read_only = on")


# -- DuckDB --------------------------------------------------------------------------------------


def load_duckdb(schema: Schema, directory: str | Path, *, replace: bool = False) -> dict[str, Any]:
    """Write ``<directory>/<name>.duckdb``; same return shape as :func:`load_postgres`."""
    import duckdb

    start = time.perf_counter()
    target = Path(directory) / f"{schema.name}.duckdb"
    if target.exists():
        if not replace:
            return {"status": "exists", "tables": 0, "rows": 0, "seconds": 0.0, "skipped_keys": []}
        target.unlink()
        Path(str(target) + ".wal").unlink(missing_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    rows = 0
    conn = duckdb.connect(str(target))
    try:
        for table in _create_order(schema):
            cols = [f"{quote(c.name)} {c.duckdb_type()}" for c in table.columns]
            keys = []
            if table.primary_key:
                keys.append(f"PRIMARY KEY ({', '.join(quote(c) for c in table.primary_key)})")
            keys += [f"UNIQUE ({', '.join(quote(c) for c in u)})" for u in table.unique_keys]
            fks = [(fk, f"FOREIGN KEY ({', '.join(quote(c) for c in fk.columns)}) REFERENCES "
                        f"{quote(fk.parent)} ({', '.join(quote(c) for c in fk.parent_columns)})")
                   for fk in table.foreign_keys]
            try:
                conn.execute(f"CREATE TABLE {quote(table.name)} ({', '.join(cols + keys + [f for _, f in fks])})")
            except duckdb.Error as e:
                # One refused key would lose the table: find the keys DuckDB takes, one by one.
                message = str(e).splitlines()[0]
                kept = []
                for fk, clause in fks:
                    try:
                        conn.execute(f"CREATE TEMP TABLE probe ({', '.join(cols + keys + [clause])})")
                        conn.execute("DROP TABLE probe")
                        kept.append(clause)
                    except duckdb.Error as e2:
                        skipped.append(f"{fk.describe(table.name)}: {str(e2).splitlines()[0]}")
                        conn.execute("DROP TABLE IF EXISTS probe")
                if len(kept) == len(fks):
                    raise RuntimeError(f"DuckDB refused table {table.name}: {message}") from e
                conn.execute(f"CREATE TABLE {quote(table.name)} ({', '.join(cols + keys + kept)})")
            if table.rows:
                conn.execute("BEGIN")
                _duckdb_insert(conn, table)
                conn.execute("COMMIT")
            rows += len(table.rows)
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
    return {"status": "loaded", "tables": len(schema.tables), "rows": rows,
            "seconds": time.perf_counter() - start, "skipped_keys": skipped}


DUCKDB_BATCH = 500
"""Rows per INSERT: one statement of many VALUES rows loads world_1 (5k rows) in 0.17 s where
``executemany`` (a statement per row) takes 1.3 s."""


def _duckdb_insert(conn: Any, table: Table) -> None:
    row_marks = "(" + ", ".join("?" for _ in table.columns) + ")"
    for i in range(0, len(table.rows), DUCKDB_BATCH):
        chunk = table.rows[i:i + DUCKDB_BATCH]
        conn.execute(f"INSERT INTO {quote(table.name)} VALUES {', '.join([row_marks] * len(chunk))}",
                     [v for row in chunk for v in _duckdb_row(table, row)])


def _duckdb_row(table: Table, row: tuple) -> tuple:
    # DuckDB binds a Python float to DECIMAL through a double; Decimal keeps the exact digits.
    return tuple(Decimal(repr(v)) if c.kind == "numeric" and isinstance(v, float) else v
                 for c, v in zip(table.columns, row))


# -- MySQL and MariaDB ---------------------------------------------------------------------------

MYSQL_VARCHAR = 255
"""Characters a loaded text column holds as ``VARCHAR`` (keys need a bounded length); a column with
a longer value is ``LONGTEXT``."""
MYSQL_BATCH = 500
"""Rows per INSERT statement."""


def mysql_quote(name: str) -> str:
    """A name quoted for MySQL and MariaDB (backquotes; SQLite's names keep their case)."""
    return "`" + name.replace("`", "``") + "`"


def _mysql_connect(server_url: str, database: str | None = None) -> Any:
    """A PyMySQL connection to the server of ``server_url`` (to ``database`` if given), with the
    password found as sqlchorus finds it (the URL, ``~/.my.cnf``, ``MYSQL_PWD``)."""
    import pymysql

    from sqlchorus.tools.engines.opening import database_url
    from sqlchorus.tools.engines.mysql import connection_parameters

    params = connection_parameters(database_url(server_url, database or "mysql"))
    if database is None:
        params.pop("database")
    return pymysql.connect(**params, autocommit=True, charset="utf8mb4")


def _mysql_collation(cur: Any) -> str:
    """The binary collation without PAD SPACE: text compares as SQLite's BINARY does."""
    cur.execute("SELECT VERSION()")
    return "utf8mb4_nopad_bin" if "mariadb" in str(cur.fetchone()[0]).lower() else "utf8mb4_0900_bin"


def load_mysql(schema: Schema, server_url: str, *, replace: bool = False) -> dict[str, Any]:
    """Create database ``schema.name`` on the MySQL or MariaDB server and load it; same return
    shape as :func:`load_postgres`. Keys are added after the rows, each on its own, so that one the
    server refuses is reported rather than losing its table."""
    start = time.perf_counter()
    conn = _mysql_connect(server_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (schema.name,))
            exists = cur.fetchone() is not None
            if exists and not replace:
                return {"status": "exists", "tables": 0, "rows": 0, "seconds": 0.0, "skipped_keys": []}
            if exists:
                cur.execute(f"DROP DATABASE {mysql_quote(schema.name)}")
            collation = _mysql_collation(cur)
            cur.execute(f"CREATE DATABASE {mysql_quote(schema.name)} CHARACTER SET utf8mb4 COLLATE {collation}")
            cur.execute(f"USE {mysql_quote(schema.name)}")
            cur.execute("SET SESSION foreign_key_checks = 0, unique_checks = 0, sql_mode = 'STRICT_ALL_TABLES'")
            rows = 0
            for table in schema.tables:
                types = [c.mysql_type(_longest(table, i)) for i, c in enumerate(table.columns)]
                cols = ", ".join(f"{mysql_quote(c.name)} {t}" for c, t in zip(table.columns, types))
                cur.execute(f"CREATE TABLE {mysql_quote(table.name)} ({cols}) ENGINE=InnoDB")
                _mysql_insert(cur, table)
                rows += len(table.rows)
            skipped: list[str] = []
            for table in schema.tables:
                if table.primary_key:
                    _mysql_try(cur, f"ALTER TABLE {mysql_quote(table.name)} ADD PRIMARY KEY "
                                    f"({', '.join(mysql_quote(c) for c in table.primary_key)})",
                               f"{table.name} primary key", skipped)
                for unique in table.unique_keys:
                    _mysql_try(cur, f"ALTER TABLE {mysql_quote(table.name)} ADD UNIQUE "
                                    f"({', '.join(mysql_quote(c) for c in unique)})",
                               f"{table.name} unique ({', '.join(unique)})", skipped)
            for table in schema.tables:
                for fk in table.foreign_keys:
                    _mysql_try(cur, f"ALTER TABLE {mysql_quote(table.name)} ADD FOREIGN KEY "
                                    f"({', '.join(mysql_quote(c) for c in fk.columns)}) REFERENCES "
                                    f"{mysql_quote(fk.parent)} ({', '.join(mysql_quote(c) for c in fk.parent_columns)})",
                               fk.describe(table.name), skipped)
            cur.execute("SET SESSION foreign_key_checks = 1, unique_checks = 1")
            for table in schema.tables:
                cur.execute(f"ANALYZE TABLE {mysql_quote(table.name)}")
                cur.fetchall()
    finally:
        conn.close()
    return {"status": "loaded", "tables": len(schema.tables), "rows": rows,
            "seconds": time.perf_counter() - start, "skipped_keys": skipped}


def _longest(table: Table, i: int) -> int:
    return max((len(row[i]) for row in table.rows if isinstance(row[i], str)), default=0)


def _mysql_insert(cur: Any, table: Table) -> None:
    if not table.rows:
        return
    names = ", ".join(mysql_quote(c.name) for c in table.columns)
    marks = "(" + ", ".join("%s" for _ in table.columns) + ")"
    for i in range(0, len(table.rows), MYSQL_BATCH):
        chunk = table.rows[i:i + MYSQL_BATCH]
        cur.execute(f"INSERT INTO {mysql_quote(table.name)} ({names}) VALUES {', '.join([marks] * len(chunk))}",
                    [v for row in chunk for v in row])


def _mysql_try(cur: Any, statement: str, what: str, skipped: list[str]) -> None:
    import pymysql

    try:
        cur.execute(statement)
    except pymysql.err.Error as e:
        message = e.args[1] if len(e.args) > 1 else str(e)
        skipped.append(f"{what}: {str(message).splitlines()[0]}")


# -- every engine --------------------------------------------------------------------------------


def load_database(sqlite_path: str | Path, *, postgres_url: str | None = None,
                  duckdb_path: str | Path | None = None, mysql_url: str | None = None, replace: bool = False,
                  reader_role: bool = False) -> dict[str, Any]:
    """Load one SQLite database into PostgreSQL (a server URL), DuckDB (a folder, or a path
    ending in ``.duckdb`` whose stem must be the database's name) and/or MySQL or MariaDB (a
    ``mysql://`` or ``mariadb://`` server URL).

    Returns ``{"database", "postgres": {...}|None, "duckdb": {...}|None, "mysql": {...}|None,
    "skipped_keys", "text_columns"}``; keys skipped by the data check are listed once, keys an
    engine refused under that engine.
    """
    schema = read_schema(sqlite_path)
    result: dict[str, Any] = {"database": schema.name, "postgres": None, "duckdb": None, "mysql": None,
                              "skipped_keys": schema.skipped_keys, "text_columns": schema.text_columns}
    if postgres_url:
        result["postgres"] = load_postgres(schema, postgres_url, replace=replace, reader_role=reader_role)
    if duckdb_path:
        folder = Path(duckdb_path)
        if folder.suffix == ".duckdb":
            folder = folder.parent
        result["duckdb"] = load_duckdb(schema, folder, replace=replace)
    if mysql_url:
        result["mysql"] = load_mysql(schema, mysql_url, replace=replace)
    return result


def _spider_databases(names: list[str]) -> list[Path]:
    from sqlchorus.evaluation.datasets import data_dir

    root = data_dir() / "spider" / "database"
    found = sorted(p for p in root.glob("*/*.sqlite") if p.stem == p.parent.name)
    if names:
        found = [p for p in found if p.stem in names]
        missing = set(names) - {p.stem for p in found}
        if missing:
            raise SystemExit(f"no Spider database {', '.join(sorted(missing))} under {root}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("databases", nargs="*", help="Spider database names (default: every one found)")
    parser.add_argument("--postgres", metavar="URL", help="PostgreSQL server URL (a role that can CREATE DATABASE)")
    parser.add_argument("--duckdb-dir", metavar="DIR", help="folder for <name>.duckdb files")
    parser.add_argument("--mysql", metavar="URL",
                        help="MySQL or MariaDB server URL (mysql://user@host:port/; a user that can CREATE DATABASE)")
    parser.add_argument("--replace", action="store_true", help="drop and recreate what exists")
    parser.add_argument("--reader-role", action="store_true",
                        help=f"create the read-only PostgreSQL role {READER_ROLE} and grant it every loaded database")
    args = parser.parse_args(argv)
    if not args.postgres and not args.duckdb_dir and not args.mysql:
        parser.error("give --postgres URL, --duckdb-dir DIR and/or --mysql URL")
    totals: dict[str, Any] = {"databases": 0, "tables": 0, "rows": 0,
                              "postgres_seconds": 0.0 if args.postgres else None,
                              "duckdb_seconds": 0.0 if args.duckdb_dir else None,
                              "mysql_seconds": 0.0 if args.mysql else None,
                              "keys_skipped": [], "columns_kept_as_text": [], "existing_left": []}
    for path in _spider_databases(args.databases):
        r = load_database(path, postgres_url=args.postgres, duckdb_path=args.duckdb_dir, mysql_url=args.mysql,
                          replace=args.replace, reader_role=args.reader_role)
        totals["databases"] += 1
        totals["keys_skipped"] += [f"{r['database']}: {k}" for k in r["skipped_keys"]]
        totals["columns_kept_as_text"] += [f"{r['database']}.{c}" for c in r["text_columns"]]
        tables = rows = 0
        for engine in ("postgres", "duckdb", "mysql"):
            e = r[engine]
            if e is None:
                continue
            totals[f"{engine}_seconds"] += e["seconds"]
            totals["keys_skipped"] += [f"{r['database']} ({engine}): {k}" for k in e["skipped_keys"]]
            if e["status"] == "exists":
                totals["existing_left"].append(f"{engine}:{r['database']}")
            tables, rows = max(tables, e["tables"]), max(rows, e["rows"])
            print(f"{r['database']:<32} {engine:<8} {e['status']:<7} {e['tables']:>3} tables "
                  f"{e['rows']:>6} rows {e['seconds']:.3f} s", file=sys.stderr, flush=True)
        totals["tables"] += tables
        totals["rows"] += rows
    for k in ("postgres_seconds", "duckdb_seconds", "mysql_seconds"):
        if totals[k] is not None:
            totals[k] = round(totals[k], 3)
    print(json.dumps(totals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
