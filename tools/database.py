"""The one guarded path through which every SQL statement runs.

Candidates, LIST sub-queries, the fixer, schema introspection and evaluation all execute through
:class:`GuardedDatabase`. The guard is layered so that no single layer has to be perfect:

1. a parsed check with sqlglot, within bounds (:mod:`sqlchorus.tools.sql_text`): exactly one
   statement, and it must be a query;
2. the file is opened read-only (``mode=ro`` URI), so SQLite itself refuses writes;
3. an authorizer allows reading only, and only the functions on a reviewed list: no writes, no
   ATTACH/DETACH, no PRAGMA that changes anything, no extension loading, no temporary objects,
   no virtual tables (:mod:`sqlchorus.tools.sqlite_guard`);
4. limits on values, patterns, expressions and memory, with temporary data kept in memory;
5. a time budget per statement: a progress handler stops it between SQLite's steps, and since
   one long call (a function over megabytes) has no steps, each statement runs in a worker
   process that is killed at the deadline (plus :data:`KILL_GRACE_S`) and replaced;
6. results are capped in rows and bytes, and a capped result says so.

Errors are typed (:class:`SqlError` and subclasses, :mod:`sqlchorus.tools.sql_errors`) and carry
a message meant for a person.
"""

from __future__ import annotations

import copy
import os
import select
import sqlite3
import subprocess
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.trace import Status, StatusCode
from sqlglot import exp

from sqlchorus.tools import attributes as attrs
from sqlchorus.tools import sql_text
from sqlchorus.tools.sql_errors import (
    DatabaseOpenError,
    ExecutionError,
    ForbiddenError,
    NotAQueryError,
    QueryTimeoutError,
    ResourceError,
    SqlError,
    SqlTooDeepError,
    SqlTooLongError,
)
from sqlchorus.tools.sqlite_guard import (
    GuardState,
    open_guarded,
    receive,
    run,
    send,
    worker_command,
)
from sqlchorus.tools.trace_content import ALL, METADATA, NONE, content_mode, rows_preview, set_value

__all__ = [
    "DEFAULT_MAX_BYTES", "DEFAULT_MAX_ROWS", "DEFAULT_TIMEOUT_S", "DatabaseOpenError", "ExecutionError",
    "ForbiddenError", "GuardedDatabase", "KILL_GRACE_S", "NotAQueryError", "QueryResult", "QueryTimeoutError",
    "ResourceError", "SqlError", "SqlTooDeepError", "SqlTooLongError", "check_single_query",
]

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 10_000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024

KILL_GRACE_S = 0.5
"""How long past its budget a statement may run before its worker is killed; SQLite's own
progress handler stops every statement that has steps at the budget itself."""

WORKER_START_S = 30.0
"""How long a new worker may take to open the database."""

_RESOURCE_MESSAGES = ("out of memory", "too big", "too large", "too many", "too complex", "too deep")
_DAMAGE_MESSAGES = ("malformed", "file is not a database", "disk i/o error")


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
    """Parse ``sql`` as SQLite, within bounds, and require exactly one query statement.

    Raises:
        NotAQueryError: empty text, a parse error, several statements, or a non-query statement;
            :class:`SqlTooLongError` or :class:`SqlTooDeepError` past a bound.
    """
    text = (sql or "").strip()
    if not text:
        raise NotAQueryError("The SQL text is empty.", sql=sql)
    statements = sql_text.parse(text)
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


class _Worker:
    """The worker process that runs one database's statements (see
    :mod:`sqlchorus.tools.sqlite_guard`): started on first use, killed at a deadline, started
    again for the next statement. Callers hold the database's lock."""

    def __init__(self, path: Path, max_value_bytes: int):
        self.path = path
        self.max_value_bytes = max_value_bytes
        self.process: subprocess.Popen | None = None
        self._starting: subprocess.Popen | None = None

    def prestart(self) -> None:
        """Start the process now and let it open the database while this one goes on; the
        first statement then finds it ready (its start costs tens of milliseconds)."""
        if self.process is None and self._starting is None:
            self._starting = self._spawn()

    def _spawn(self) -> subprocess.Popen:
        return subprocess.Popen(
            worker_command(str(self.path), self.max_value_bytes), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, close_fds=True,
        )

    def _start(self) -> subprocess.Popen:
        process, self._starting = self._starting or self._spawn(), None
        reply = self._reply(process, WORKER_START_S)
        if not reply or reply[0] != "ready":
            self._stop(process)
            why = reply[1] if reply else "the worker did not start"
            raise DatabaseOpenError(f"Cannot open {self.path} as a database: {why}")
        return process

    @staticmethod
    def _reply(process: subprocess.Popen, timeout: float) -> tuple | None:
        """The worker's next reply; None when none came in time or the worker died."""
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        if not ready:
            return None
        return receive(process.stdout)

    @staticmethod
    def _stop(process: subprocess.Popen) -> None:
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def run(self, request: tuple, deadline_s: float) -> tuple:
        """Send ``request``; its reply, or ``("killed", why)`` when the worker ran past
        ``deadline_s`` or died (it is then replaced on the next request)."""
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        process = self.process
        try:
            send(process.stdin, request)
        except (BrokenPipeError, OSError):
            self.kill()
            return ("killed", "died")
        reply = self._reply(process, deadline_s)
        if reply is None:
            died = process.poll() is not None
            self.kill()
            return ("killed", "died" if died else "deadline")
        return reply

    def kill(self) -> None:
        if self.process is not None:
            self._stop(self.process)
            self.process = None

    def close(self) -> None:
        if self._starting is not None:
            self._stop(self._starting)
            self._starting = None
        process, self.process = self.process, None
        if process is None:
            return
        try:
            process.stdin.close()  # the worker ends at the end of its input
            process.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self._stop(process)


class GuardedDatabase:
    """A read-only, authorizer-guarded, time- and size-bounded SQLite database.

    Args:
        path: path of an existing SQLite file.
        timeout_s: default time budget per statement.
        max_rows: default cap on rows returned.
        max_bytes: default cap on the approximate size of the rows returned.
        tracer: an OpenTelemetry tracer; each execution becomes a child span ``sql``.
        prestart: start the worker process now, so that the first statement finds it ready;
            False starts it on first use (a database read only through :meth:`lookup` never
            starts one).

    Statements run in a worker process of this database; schema lookups and sqlchorus's own
    reads use a guarded connection of this process (:meth:`lookup`,
    :meth:`introspection_connection`).

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
        prestart: bool = True,
    ):
        self.path = Path(path).expanduser().resolve()
        self.name = self.path.stem
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.tracer = tracer
        self._lock = threading.RLock()
        # Shared with this database's traced views (see with_tracer), like the worker.
        self._state = GuardState()
        # No single value (string or blob) may outgrow the byte cap: a query cannot build a
        # huge string in memory even if it would return only its length.
        self._max_value_bytes = max(1_000_000, min(max_bytes, 2**31 - 1))
        self._conn = self._open()
        self._worker = _Worker(self.path, self._max_value_bytes)
        # A database dropped without close() still ends its worker (and its views share it).
        weakref.finalize(self, self._worker.close)
        if prestart:
            self._worker.prestart()

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
        try:
            return open_guarded(str(self.path), self._state, max_value_bytes=self._max_value_bytes)
        except sqlite3.DatabaseError as e:
            raise DatabaseOpenError(f"Cannot open {self.path} as a database: {e}") from e

    def with_tracer(self, tracer: Any) -> GuardedDatabase:
        """A view of this database whose executions are child spans ``sql`` of ``tracer``.

        The view shares the connection, the worker, their lock and the guard; only the tracer
        is its own. A run traces through its own view, so concurrent runs on one database never
        write per-run state onto it. Close the database, not its views.
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
            NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError, QueryTimeoutError,
            ResourceError, ExecutionError.
        """
        tree = check_single_query(sql)
        return self._traced(sql, tree, timeout_s, max_rows, max_bytes, parameters)

    def lookup(
        self,
        sql: str,
        *,
        timeout_s: float | None = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
        parameters: tuple[Any, ...] | dict[str, Any] = (),
    ) -> QueryResult:
        """Run one read query that sqlchorus wrote itself (schema lookups, sample values, the
        value index's reads) in this process, under the same authorizer, limits and deadline.

        Such a query calls no function over values large enough to outrun SQLite's progress
        handler, so it needs no worker; a query from a model or a user always goes through
        :meth:`execute`.

        Raises:
            the same errors as :meth:`execute`.
        """
        tree = check_single_query(sql)
        budget, row_cap, byte_cap = self._limits(timeout_s, max_rows, max_bytes)
        with self._lock:
            try:
                columns, rows, truncated, elapsed = run(self._conn, self._state, sql, parameters, budget, row_cap,
                                                         byte_cap)
            except sqlite3.Error as e:
                raise self._classify(str(e), self._state.refused, sql, tree, budget) from e
        return QueryResult(sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)

    def _limits(self, timeout_s: float | None, max_rows: int | None, max_bytes: int | None) -> tuple[float, int, int]:
        """A statement's time budget and caps: its own, else this database's defaults."""
        return (
            self.timeout_s if timeout_s is None else timeout_s,
            self.max_rows if max_rows is None else max_rows,
            self.max_bytes if max_bytes is None else max_bytes,
        )

    def _traced(self, sql: str, tree: exp.Expression, timeout_s, max_rows, max_bytes, parameters) -> QueryResult:
        tracer = self.tracer
        if tracer is None:
            return self._execute(sql, tree, timeout_s, max_rows, max_bytes, parameters)
        with tracer.start_as_current_span(attrs.SQL_SPAN) as span:
            span.set_attribute(attrs.DB_SYSTEM, "sqlite")
            span.set_attribute(attrs.DB_NAMESPACE, self.name)
            span.set_attribute(attrs.DB_QUERY_TEXT, sql)
            # OpenInference's kind: a statement run for the agent is a tool call.
            span.set_attribute(attrs.OPENINFERENCE_KIND, attrs.KIND_TOOL)
            content = content_mode(tracer)
            if content != NONE:  # the statement is structure, not user data
                set_value(span, "input", sql)
            try:
                result = self._execute(sql, tree, timeout_s, max_rows, max_bytes, parameters)
            except SqlError as e:
                span.set_attribute(attrs.SQL_ERROR, e.message)
                span.set_attribute(attrs.SQL_ERROR_KIND, e.kind)
                span.set_attribute(attrs.ERROR_TYPE, e.kind)
                span.set_status(Status(StatusCode.ERROR, e.message[:300]))
                raise
            span.set_status(Status(StatusCode.OK))
            span.set_attribute(attrs.DB_RETURNED_ROWS, result.row_count)
            span.set_attribute(attrs.SQL_ROWS, result.row_count)
            span.set_attribute(attrs.SQL_TRUNCATED, result.truncated)
            span.set_attribute(attrs.SQL_ELAPSED_MS, round(result.elapsed_ms, 3))
            if content == ALL:
                set_value(span, "output", rows_preview(result.columns, result.rows))
            elif content == METADATA:
                set_value(span, "output", {"columns": list(result.columns), "row_count": result.row_count})
            return result

    def _execute(
        self,
        sql: str,
        tree: exp.Expression,
        timeout_s: float | None,
        max_rows: int | None,
        max_bytes: int | None,
        parameters: tuple[Any, ...] | dict[str, Any],
    ) -> QueryResult:
        budget, row_cap, byte_cap = self._limits(timeout_s, max_rows, max_bytes)
        request = ("run", sql, parameters, budget, row_cap, byte_cap)
        with self._lock:
            reply = self._worker.run(request, budget + KILL_GRACE_S)
        if reply[0] == "ok":
            _, columns, rows, truncated, elapsed = reply
            return QueryResult(sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)
        if reply[0] == "killed":
            if reply[1] == "deadline":
                raise QueryTimeoutError(
                    f"The query ran longer than its {budget:g} s budget and was stopped.", sql=sql
                )
            raise ExecutionError("The query stopped the process that ran it; it was not completed.", sql=sql)
        _, message, refused = reply
        raise self._classify(message, refused, sql, tree, budget)

    def _classify(self, text: str, refused: str | None, sql: str, tree: exp.Expression, budget: float) -> SqlError:
        if text == "interrupted":
            return QueryTimeoutError(
                f"The query ran longer than its {budget:g} s budget and was stopped.", sql=sql
            )
        if refused or "not authorized" in text or "prohibited" in text:
            if refused and refused.startswith("a virtual table"):
                names = self._unknown_tables(tree)
                refused = refused + (f" ({', '.join(names)})" if names else "")
            what = refused or "an operation other than reading"
            return ForbiddenError(f"The query uses {what}, which the guard does not allow; it was refused.", sql=sql)
        if "readonly" in text:
            return ForbiddenError("The database is open read-only; writes are refused.", sql=sql)
        if any(marker in text.lower() for marker in _DAMAGE_MESSAGES):
            return DatabaseOpenError(f"The database file is damaged: {text}.", sql=sql)
        if any(marker in text.lower() for marker in _RESOURCE_MESSAGES):
            return ResourceError(f"The query needs more than the guard allows: {text}.", sql=sql)
        return ExecutionError(text, sql=sql)

    def _unknown_tables(self, tree: exp.Expression) -> list[str]:
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
        tree = check_single_query(sql)
        return self._traced("EXPLAIN QUERY PLAN " + sql.strip(), tree, timeout_s, None, None, ())

    def introspection_connection(self) -> sqlite3.Connection:
        """The guarded connection of this process, for read-only introspection (PRAGMA table_info
        and the like): fixed lookups, never a query from a model or a user.

        Callers must hold no cursor open across threads; use :meth:`locked` around use.
        """
        return self._conn

    def locked(self) -> threading.RLock:
        """The lock that serialises use of the connection."""
        return self._lock

    def close(self) -> None:
        with self._lock:
            self._worker.close()
            self._conn.close()

    def __enter__(self) -> GuardedDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GuardedDatabase({str(self.path)!r})"
