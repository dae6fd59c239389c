"""The one guarded path through which every SQL statement runs.

Candidates, LIST sub-queries, the fixer, schema introspection and evaluation all execute through
:class:`GuardedDatabase`. The guard is layered so that no single layer has to be perfect:

1. a parsed check with sqlglot: exactly one statement, and it must be a query;
2. the file is opened read-only (``mode=ro`` URI), so SQLite itself refuses writes;
3. an authorizer allows reading only: no writes, no ATTACH/DETACH, no PRAGMA that changes
   anything, no extension loading, no temporary objects;
4. a progress handler enforces a time budget per statement;
5. results are capped in rows and bytes, and a capped result says so.

Errors are typed (:class:`SqlError` and subclasses) and carry a message meant for a person.
"""

from __future__ import annotations

import copy
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 10_000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024

# PRAGMAs whose argument names a table or index: they only ever read.
_LOOKUP_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
     "foreign_key_list"}
)
# PRAGMAs that read when called bare and write when given a value: allowed bare only.
_BARE_PRAGMAS = frozenset(
    {"database_list", "collation_list", "function_list", "compile_options", "schema_version",
     "user_version", "page_size", "page_count", "encoding"}
)

_ALLOWED_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        sqlite3.SQLITE_RECURSIVE,
    }
)


class SqlError(Exception):
    """Base of every error the guard raises. ``kind`` is a short stable name for the failure."""

    kind = "sql_error"

    def __init__(self, message: str, *, sql: str | None = None):
        super().__init__(message)
        self.message = message
        self.sql = sql


class DatabaseOpenError(SqlError):
    """The database file is missing, unreadable, or not a SQLite database."""

    kind = "database_open"


class NotAQueryError(SqlError):
    """The text is not exactly one read-only query (parse check)."""

    kind = "not_a_query"


class ForbiddenError(SqlError):
    """The authorizer refused an operation other than reading."""

    kind = "forbidden"


class QueryTimeoutError(SqlError):
    """The statement ran past its time budget and was interrupted."""

    kind = "timeout"


class ExecutionError(SqlError):
    """SQLite reported an error while preparing or running the statement."""

    kind = "execution"


@dataclass
class QueryResult:
    """Rows returned by one guarded execution.

    Attributes:
        sql: the statement as executed.
        columns: output column names.
        rows: the rows, as tuples, at most ``max_rows`` of them.
        truncated: True when the row or byte cap cut the result short.
        elapsed_ms: wall time spent in SQLite.
    """

    sql: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False
    elapsed_ms: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def row_count(self) -> int:
        return len(self.rows)


def check_single_query(sql: str) -> exp.Expression:
    """Parse ``sql`` as SQLite and require exactly one query statement.

    Raises:
        NotAQueryError: empty text, a parse error, several statements, or a non-query statement.
    """
    text = (sql or "").strip()
    if not text:
        raise NotAQueryError("The SQL text is empty.", sql=sql)
    try:
        statements = [s for s in sqlglot.parse(text, read="sqlite") if s is not None]
    except (ParseError, TokenError) as e:
        raise NotAQueryError(f"The SQL does not parse: {_first_line(str(e))}", sql=sql) from e
    if len(statements) != 1:
        raise NotAQueryError(
            f"Expected exactly one statement, found {len(statements)}.", sql=sql
        )
    tree = statements[0]
    if isinstance(tree, exp.Block):
        raise NotAQueryError("Expected exactly one statement, found several.", sql=sql)
    if not isinstance(tree, exp.Query):
        raise NotAQueryError(
            f"Only read queries may run; this statement is {type(tree).__name__.upper()}.",
            sql=sql,
        )
    return tree


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _value_size(value: Any) -> int:
    if value is None:
        return 1
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace"))
    return 8


class _Deadline:
    """When the statement running now must stop (``time.monotonic()``); infinite between statements."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = float("inf")


class GuardedDatabase:
    """A read-only, authorizer-guarded, time- and size-bounded SQLite database.

    Args:
        path: path of an existing SQLite file.
        timeout_s: default time budget per statement.
        max_rows: default cap on rows returned.
        max_bytes: default cap on the approximate size of the rows returned.
        tracer: an OpenTelemetry tracer; each execution becomes a child span ``sql``.

    Raises:
        DatabaseOpenError: the file is missing, is not a file, or is not a SQLite database.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tracer: Any = None,
    ):
        self.path = Path(path).expanduser().resolve()
        self.name = self.path.stem
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.tracer = tracer
        self._lock = threading.RLock()
        # One holder, shared by this database's traced views (see with_tracer), that the
        # connection's progress handler reads.
        self._deadline = _Deadline()
        self._conn = self._open()

    # -- opening -----------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if not self.path.exists():
            raise DatabaseOpenError(f"No database at {self.path}: the file does not exist.")
        if not self.path.is_file():
            raise DatabaseOpenError(f"{self.path} is not a file.")
        with open(self.path, "rb") as f:
            header = f.read(16)
        if header != b"SQLite format 3\x00":
            raise DatabaseOpenError(
                f"{self.path} is not a SQLite database (its header does not match)."
            )
        uri = f"{self.path.as_uri()}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as e:
            raise DatabaseOpenError(f"Cannot open {self.path} as a database: {e}") from e
        conn.text_factory = _decode_text
        try:
            conn.enable_load_extension(False)
        except AttributeError:  # Python built without extension support: nothing to disable
            pass
        # No single value (string or blob) may outgrow the byte cap: a query cannot build a
        # gigabyte string in memory even if it would return only its length.
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, min(max(1_000_000, self.max_bytes), 2**31 - 1))
        conn.set_authorizer(self._authorize)
        conn.set_progress_handler(self._progress, 1000)
        return conn

    # -- the guard ---------------------------------------------------------------------------

    def _authorize(self, action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
        if action in _ALLOWED_ACTIONS:
            if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() == "load_extension":
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            name = str(arg1 or "").lower()
            if name in _LOOKUP_PRAGMAS or (name in _BARE_PRAGMAS and arg2 is None):
                return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    def _progress(self) -> int:
        return 1 if time.monotonic() > self._deadline.at else 0

    def with_tracer(self, tracer: Any) -> GuardedDatabase:
        """A view of this database whose executions are child spans ``sql`` of ``tracer``.

        The view shares the connection, its lock and its guard; only the tracer is its own. A run
        traces through its own view, so concurrent runs on one database never write per-run
        state onto it. Close the database, not its views.
        """
        view = copy.copy(self)
        view.tracer = tracer
        return view

    # -- executing ---------------------------------------------------------------------------

    def execute(
        self,
        sql: str,
        *,
        timeout_s: float | None = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
        parameters: tuple[Any, ...] | dict[str, Any] = (),
    ) -> QueryResult:
        """Run one read query and return its (capped) rows.

        Raises:
            NotAQueryError, ForbiddenError, QueryTimeoutError, ExecutionError.
        """
        check_single_query(sql)
        tracer = self.tracer
        if tracer is None:
            return self._execute(sql, timeout_s, max_rows, max_bytes, parameters)
        with tracer.start_as_current_span("sql") as span:
            span.set_attribute("db.system.name", "sqlite")
            span.set_attribute("db.namespace", self.name)
            span.set_attribute("db.query.text", sql)
            try:
                result = self._execute(sql, timeout_s, max_rows, max_bytes, parameters)
            except SqlError as e:
                span.set_attribute("sql.error", e.message)
                span.set_attribute("sql.error_kind", e.kind)
                raise
            span.set_attribute("sql.rows", result.row_count)
            span.set_attribute("sql.truncated", result.truncated)
            span.set_attribute("sql.elapsed_ms", round(result.elapsed_ms, 3))
            return result

    def _execute(
        self,
        sql: str,
        timeout_s: float | None,
        max_rows: int | None,
        max_bytes: int | None,
        parameters: tuple[Any, ...] | dict[str, Any],
    ) -> QueryResult:
        budget = self.timeout_s if timeout_s is None else timeout_s
        row_cap = self.max_rows if max_rows is None else max_rows
        byte_cap = self.max_bytes if max_bytes is None else max_bytes
        with self._lock:
            start = time.monotonic()
            self._deadline.at = start + budget
            rows: list[tuple[Any, ...]] = []
            truncated = False
            try:
                cur = self._conn.execute(sql, parameters)
                columns = [d[0] for d in cur.description or ()]
                size = 0
                while True:
                    batch = cur.fetchmany(256)
                    if not batch:
                        break
                    for row in batch:
                        if len(rows) >= row_cap:
                            truncated = True
                            break
                        size += sum(_value_size(v) for v in row)
                        if size > byte_cap:
                            truncated = True
                            break
                        rows.append(tuple(row))
                    if truncated:
                        break
                cur.close()
            except sqlite3.DatabaseError as e:
                raise self._classify(e, sql, budget) from e
            finally:
                self._deadline.at = float("inf")
            elapsed = (time.monotonic() - start) * 1000.0
        return QueryResult(
            sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed
        )

    def _classify(self, error: sqlite3.DatabaseError, sql: str, budget: float) -> SqlError:
        text = str(error)
        if text == "interrupted":
            return QueryTimeoutError(
                f"The query ran longer than its {budget:g} s budget and was stopped.", sql=sql
            )
        if "not authorized" in text or "authoriz" in text or "prohibited" in text:
            return ForbiddenError(
                "The query tried an operation other than reading, and was refused.", sql=sql
            )
        if "readonly" in text:
            return ForbiddenError("The database is open read-only; writes are refused.", sql=sql)
        return ExecutionError(text, sql=sql)

    def explain_query_plan(self, sql: str, *, timeout_s: float | None = None) -> QueryResult:
        """SQLite's ``EXPLAIN QUERY PLAN`` of one read query, under the same guard.

        ``EXPLAIN`` is not a query to the parse check, so the check runs on ``sql`` itself (one
        statement, a query) and only then is the prefix added; the statement is prepared under the
        same authorizer and time budget, so anything it would refuse to run it refuses to explain.

        Returns:
            Rows ``(id, parent, notused, detail)``.

        Raises:
            NotAQueryError, ForbiddenError, QueryTimeoutError, ExecutionError.
        """
        check_single_query(sql)
        text = "EXPLAIN QUERY PLAN " + sql.strip()
        if self.tracer is None:
            return self._execute(text, timeout_s, None, None, ())
        with self.tracer.start_as_current_span("sql") as span:
            span.set_attribute("db.system.name", "sqlite")
            span.set_attribute("db.namespace", self.name)
            span.set_attribute("db.query.text", text)
            try:
                result = self._execute(text, timeout_s, None, None, ())
            except SqlError as e:
                span.set_attribute("sql.error", e.message)
                span.set_attribute("sql.error_kind", e.kind)
                raise
            span.set_attribute("sql.rows", result.row_count)
            return result

    def introspection_connection(self) -> sqlite3.Connection:
        """The guarded connection, for read-only introspection (PRAGMA table_info and the like).

        Callers must hold no cursor open across threads; use :meth:`locked` around use.
        """
        return self._conn

    def locked(self) -> threading.RLock:
        """The lock that serialises use of the connection."""
        return self._lock

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> GuardedDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GuardedDatabase({str(self.path)!r})"


def _decode_text(raw: bytes) -> str:
    # TEXT columns with invalid UTF-8 (common in scraped benchmark data) must not crash a query.
    return raw.decode("utf-8", errors="replace")
