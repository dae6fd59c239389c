"""The one guarded path through which every SQL statement runs.

Candidates, LIST sub-queries, the fixer, schema introspection and evaluation all execute through
:class:`GuardedDatabase`. The guard is layered so that no single layer has to be perfect:

1. a parsed check with sqlglot, within bounds (:mod:`sqlchorus.tools.sql.text`): exactly one
   statement, and it must be a query;
2. the file is opened read-only (``mode=ro`` URI), so SQLite itself refuses writes;
3. an authorizer allows reading only, and only the functions on a reviewed list: no writes, no
   ATTACH/DETACH, no PRAGMA that changes anything, no extension loading, no temporary objects,
   no virtual tables (:mod:`sqlchorus.tools.engines.sqlite_guard`);
4. limits on values, patterns, expressions and memory, with temporary data kept in memory;
5. a time budget per statement: a progress handler stops it between SQLite's steps, and since
   one long call (a function over megabytes) has no steps, each statement runs in a worker
   process that is killed at the deadline (plus :data:`KILL_GRACE_S`) and replaced. A database
   has several workers (``workers``, bounded), so a cheap statement is not stuck behind
   expensive ones; more statements than workers wait their turn within their own budget, and
   one client's statements hold at most ``client_workers`` of them at once;
6. results are capped in rows and bytes, and a capped result says so.

Errors are typed (:class:`SqlError` and subclasses, :mod:`sqlchorus.tools.sql.errors`) and carry
a message meant for a person.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sqlglot import exp
from typing_extensions import Unpack

from sqlchorus.tools.engines import base

# What every engine shares is importable from here too, where callers have long found it.
from sqlchorus.tools.engines.base import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WORKERS,
    KILL_GRACE_S,
    MAX_WORKERS,
    Database,
    DatabaseOpenError,
    ExecutionError,
    ForbiddenError,
    NotAQueryError,
    QueryResult,
    QueryTimeoutError,
    ResourceError,
    SqlError,
    SqlTooDeepError,
    SqlTooLongError,
    check_single_query,
)
from sqlchorus.tools.engines.catalog import Column, ForeignKey, Table, quote_identifier
from sqlchorus.tools.sql.errors import sqlite_error
from sqlchorus.tools.engines.sqlite_guard import GuardState, run, worker_command
from sqlchorus.tools.engines.sqlite_open import open_checked

if TYPE_CHECKING:
    import sqlite_utils

__all__ = [
    "DEFAULT_MAX_BYTES", "DEFAULT_MAX_ROWS", "DEFAULT_TIMEOUT_S", "DEFAULT_WORKERS", "DatabaseOpenError",
    "ExecutionError",
    "Database", "ForbiddenError", "GuardedDatabase", "KILL_GRACE_S", "MAX_WORKERS", "NotAQueryError", "QueryResult",
    "QueryTimeoutError", "ResourceError", "SqlError", "SqlTooDeepError", "SqlTooLongError", "check_single_query",
]

# Suffixes of the shadow tables that full-text and r-tree virtual tables keep beside themselves.
_SHADOW_SUFFIXES = (
    "_content", "_data", "_idx", "_docsize", "_config", "_segments", "_segdir", "_stat",
    "_node", "_parent", "_rowid",
)


class GuardedDatabase(base.WorkerDatabase):
    """A read-only, authorizer-guarded, time- and size-bounded SQLite database.

    Args:
        path: path of an existing SQLite file.
        timeout_s: default time budget per statement.
        max_rows: default cap on rows returned.
        max_bytes: default cap on the approximate size of the rows returned.
        tracer: an OpenTelemetry tracer; each execution becomes a child span ``sql``.
        prestart: start one worker process now, so that the first statement finds it ready;
            False starts it on first use (a database read only through :meth:`lookup` never
            starts one).
        workers: worker processes at most, so statements running at once at most (1 to
            :data:`MAX_WORKERS`); each is started when a statement first needs it.
        client_workers: statements one client (see :meth:`execute`) runs at once at most;
            by default half the workers, rounded up.

    Statements run in the worker processes of this database, each its own guarded read-only
    connection; schema lookups and sqlchorus's own reads use a guarded connection of this process
    (:meth:`lookup`, :meth:`introspection_connection`), which never waits for a statement.

    Raises:
        DatabaseOpenError: the file is missing, is not a file, or is not a SQLite database.
        ValueError: ``workers`` or ``client_workers`` out of range.
    """

    def __init__(self, path: str | os.PathLike[str], **options: Unpack[base.GuardOptions]):
        pooling = self._configure(**options)
        self.path = Path(path).expanduser().resolve()
        self.name = self.path.stem
        # Serialises use of this process's connection only; statements in workers never take it.
        self._lock = threading.RLock()
        # Shared with this database's traced views (see with_tracer), like the workers.
        self._state = GuardState()
        # No single value (string or blob) may outgrow the byte cap: a query cannot build a
        # huge string in memory even if it would return only its length.
        self._max_value_bytes = max(1_000_000, min(self.max_bytes, 2**31 - 1))
        self._conn = open_checked(str(self.path), self._state, max_value_bytes=self._max_value_bytes)
        path, command = self.path, worker_command(str(self.path), self._max_value_bytes)
        self._hold(pooling, lambda: base.Worker(path, command), [self._conn], functools.partial(_close, self._lock))

    # -- executing ---------------------------------------------------------------------------

    def _lookup(self, sql: str, parameters: base.Parameters, limits: base.Limits) -> QueryResult:
        """sqlchorus's own read, in this process under the same authorizer, limits and deadline,
        checked like any statement."""
        tree = self.check(sql)
        with self._lock:
            try:
                columns, rows, truncated, elapsed = run(self._conn, self._state, sql, parameters, *limits)
            except sqlite3.Error as e:
                raise self._worker_error(str(e), self._state.refused, sql, tree, limits.budget) from e
        return QueryResult(sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)

    def _worker_error(self, message: str, detail: str | None, sql: str, tree: exp.Expr, budget: float) -> SqlError:
        """The typed error of SQLite's ``message``, ``detail`` being what the authorizer refused."""
        refused = detail
        if refused and refused.startswith("a virtual table"):  # name the tables that are not the database's
            names = self._unknown_tables(tree)
            refused = refused + (f" ({', '.join(names)})" if names else "")
        return sqlite_error(message, refused, sql, budget)

    def _unknown_tables(self, tree: exp.Expr) -> list[str]:
        """Names the query reads from that are not tables or views of the database."""
        with self._lock:
            known = {r[0].lower() for r in self._conn.execute("SELECT name FROM sqlite_master").fetchall()}
        ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        names = set()
        for table in tree.find_all(exp.Table):
            # A table-valued function is a table whose "name" is a call: json_each('[1]').
            name = table.this.name if isinstance(table.this, exp.Func) else table.name
            if name and name.lower() not in known | ctes:
                names.add(name)
        return sorted(names)

    def explain_query_plan(self, sql: str, *, timeout_s: float | None = None) -> QueryResult:
        """SQLite's ``EXPLAIN QUERY PLAN`` of one read query, under the same guard.

        ``EXPLAIN`` is not a query to the parse check, so the check runs on ``sql`` itself (one
        statement, a query) and only then is the prefix added; the statement is prepared under the
        same authorizer and time budget, so anything it would refuse to run it refuses to explain.

        Returns:
            Rows ``(id, parent, notused, detail)``.

        Raises:
            NotAQueryError, ForbiddenError, QueryTimeoutError, ResourceError, ExecutionError.
        """
        tree = self.check(sql)
        return self._traced("EXPLAIN QUERY PLAN " + sql.strip(), tree, self._limits(timeout_s, None, None), ())

    # -- the catalogue -----------------------------------------------------------------------

    def read_structure(self) -> list[Table]:
        """The tables and views, their columns and foreign keys, from SQLite's catalogue: tables
        in ``sqlite_master`` order, then views, columns in declaration order.

        sqlite-utils (``sqlite_utils.Database(conn, recursive_triggers=False,
        execute_plugins=False)``) wraps the guarded connection of this process under
        :meth:`locked`. With those two flags it issues nothing on construction, and everything
        run here (``SELECT`` on ``sqlite_master``, ``PRAGMA table_xinfo(...)``, ``PRAGMA
        foreign_key_list(...)``) passes the guard's authorizer. Table-valued pragma functions
        (``pragma_table_info(...)`` in a ``SELECT``) are refused by the guard, so columns cannot be
        read for all tables in one query.

        Views are listed with sqlite-utils' ``view_names()``; tables with one ``sqlite_master``
        query, which also tells virtual tables apart so that their shadow tables (``<name>_content``,
        ``<name>_data``, ...) and SQLite's own ``sqlite_*`` tables are left out. Columns and foreign
        keys are read with plain ``PRAGMA table_xinfo`` and ``PRAGMA foreign_key_list``, not with
        sqlite-utils' ``Table.columns`` and ``Table.foreign_keys``: ``Table.columns`` lists every
        table again on each call (quadratic: 1.7 s for 2,000 tables instead of 0.05 s),
        ``table_xinfo`` also shows generated columns, and sqlite-utils resolves a foreign key that
        omits its referenced columns by a case-sensitive table lookup, where SQLite's names are
        case-insensitive. Such a key refers to the target's primary key; a compound key becomes one
        :class:`ForeignKey` per column pair.
        """
        import sqlite_utils

        with self._lock:
            su = sqlite_utils.Database(self._conn, recursive_triggers=False, execute_plugins=False)
            table_names = _user_tables(su)
            view_names = [v for v in su.view_names() if not v.lower().startswith("sqlite_")]
            tables = []
            for name, is_view in [(n, False) for n in table_names] + [(n, True) for n in view_names]:
                try:
                    tables.append(Table(name=name, columns=_read_columns(su, name), is_view=is_view))
                except sqlite3.DatabaseError:
                    # A virtual table whose module is missing or that the guard will not open
                    # (FTS5 tables, for one), or a broken view: it cannot be queried, so it is not
                    # shown.
                    continue
            by_name = {t.name.lower(): t for t in tables}
            for table in tables:
                if not table.is_view:
                    table.foreign_keys = _read_foreign_keys(su, table, by_name)
        return tables

    def introspection_connection(self) -> sqlite3.Connection:
        """The guarded connection of this process, for read-only introspection (PRAGMA table_info
        and the like): fixed lookups, never a query from a model or a user.

        Callers must hold no cursor open across threads; use :meth:`locked` around use.
        """
        return self._conn

    def locked(self) -> threading.RLock:
        """The lock that serialises use of this process's connection (statements in workers
        never take it)."""
        return self._lock


def _close(lock: threading.RLock, conn: sqlite3.Connection) -> None:
    """Close this process's connection once no lookup uses it."""
    with lock:
        conn.close()


def _user_tables(su: sqlite_utils.Database) -> list[str]:
    rows = su.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    virtual = [
        name.lower()
        for name, sql in rows
        if (sql or "").lstrip().upper().startswith("CREATE VIRTUAL")
    ]
    shadows = {v + suffix for v in virtual for suffix in _SHADOW_SUFFIXES}
    return [
        name for name, _ in rows
        if not name.lower().startswith("sqlite_") and name.lower() not in shadows
    ]


def _read_columns(su: sqlite_utils.Database, table: str) -> list[Column]:
    rows = su.execute(f"PRAGMA table_xinfo({quote_identifier(table)})").fetchall()
    columns = []
    for _cid, name, decl_type, notnull, _default, pk, hidden in rows:
        if hidden == 1:  # hidden columns of virtual tables; generated columns (2, 3) are kept
            continue
        columns.append(
            Column(name=name, type=decl_type or "", primary_key=pk > 0, not_null=bool(notnull))
        )
    return columns


def _read_foreign_keys(
    su: sqlite_utils.Database, table: Table, by_name: dict[str, Table]
) -> list[ForeignKey]:
    rows = su.execute(f"PRAGMA foreign_key_list({quote_identifier(table.name)})").fetchall()
    groups: dict[int, list[tuple[int, str, str, str | None]]] = {}
    for fk_id, seq, ref_table, from_col, to_col, *_ in rows:
        groups.setdefault(fk_id, []).append((seq, ref_table, from_col, to_col))
    result: list[ForeignKey] = []
    seen: set[tuple[str, str, str]] = set()
    for fk_id in sorted(groups):
        pairs = sorted(groups[fk_id])
        target = by_name.get(pairs[0][1].lower())
        ref_name = target.name if target else pairs[0][1]
        ref_cols: list[str | None] = [p[3] for p in pairs]
        if all(c is None for c in ref_cols):
            # "REFERENCES parent" with no columns means the parent's primary key.
            pk = target.primary_key if target else []
            if len(pk) != len(pairs):
                continue
            ref_cols = list(pk)
        for (_, _, from_col, _), to_col in zip(pairs, ref_cols):
            if to_col is None:
                continue
            own = table.column(from_col)
            ref_col = target.column(to_col) if target else None
            fk = ForeignKey(
                column=own.name if own else from_col,
                ref_table=ref_name,
                ref_column=ref_col.name if ref_col else to_col,
            )
            key = (fk.column.lower(), fk.ref_table.lower(), fk.ref_column.lower())
            if key not in seen:
                seen.add(key)
                result.append(fk)
    return result
