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

import copy
import math
import os
import select
import sqlite3
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from opentelemetry.trace import Status, StatusCode
from sqlglot import exp
from typing_extensions import Self

from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.sql.errors import (
    DatabaseOpenError,
    ExecutionError,
    ForbiddenError,
    NotAQueryError,
    QueryTimeoutError,
    ResourceError,
    SqlError,
    SqlTooDeepError,
    SqlTooLongError,
    sqlite_error,
)
from sqlchorus.tools.engines.sqlite_guard import (
    GuardState,
    receive,
    run,
    send,
    worker_command,
)
from sqlchorus.tools.engines.sqlite_open import open_checked
from sqlchorus.tools.tracing.content import ALL, METADATA, NONE, content_mode, rows_preview, set_value

__all__ = [
    "DEFAULT_MAX_BYTES", "DEFAULT_MAX_ROWS", "DEFAULT_TIMEOUT_S", "DEFAULT_WORKERS", "DatabaseOpenError",
    "ExecutionError",
    "Database", "ForbiddenError", "GuardedDatabase", "KILL_GRACE_S", "NotAQueryError", "QueryResult", "QueryTimeoutError",
    "ResourceError", "SqlError", "SqlTooDeepError", "SqlTooLongError", "check_single_query",
]

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 10_000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_WORKERS = 4
"""Worker processes per database: statements running on it at once at most."""
MAX_WORKERS = 64

KILL_GRACE_S = 0.5
"""How long past its budget a statement may run before its worker is killed; SQLite's own
progress handler stops every statement that has steps at the budget itself."""

WORKER_START_S = 30.0
"""How long a new worker may take to open the database."""



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


def check_single_query(sql: str, *, dialect: str = "sqlite") -> exp.Expr:
    """Parse ``sql`` in ``dialect`` (sqlglot's name), within bounds, and require exactly one query
    statement.

    Raises:
        NotAQueryError: empty text, a parse error, several statements, or a non-query statement;
            :class:`SqlTooLongError` or :class:`SqlTooDeepError` past a bound.
    """
    text = (sql or "").strip()
    if not text:
        raise NotAQueryError("The SQL text is empty.", sql=sql)
    statements = sql_text.parse(text, dialect=dialect)
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
    """One worker process of a database's pool (see :mod:`sqlchorus.tools.engines.sqlite_guard`): started
    ahead or on first use, killed at a deadline and started again. One statement at a time uses
    it: the pool hands it out, and only :meth:`interrupt` is called from another thread."""

    def __init__(self, path: Path, max_value_bytes: int):
        self.path = path
        self.max_value_bytes = max_value_bytes
        self.process: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._stopping = False
        # Orders a start against interrupt() from another thread: a process started after it
        # would run on unstopped.
        self._guard = threading.Lock()
        self.replaced = 0
        """How many times its process was killed (at a deadline, or after dying) and replaced."""

    def prestart(self) -> None:
        """Start the process now and let it open the database while this one goes on; the
        next statement then finds it ready (its start costs tens of milliseconds)."""
        with self._guard:
            if self.process is None and not self._stopping:
                self.process = subprocess.Popen(
                    worker_command(str(self.path), self.max_value_bytes), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
                )
                self._ready = False

    def _ensure(self) -> subprocess.Popen[bytes]:
        """The running process, ready: started (or replaced, when it died idle) as needed."""
        if self.process is not None and self.process.poll() is not None:
            self._discard()
        if self.process is None:
            self.prestart()
        process = self.process
        if process is None:  # interrupted: the database is closing
            raise _Closed()
        if not self._ready:
            reply = self._reply(process, WORKER_START_S)
            if not reply or reply[0] != "ready":
                self._discard()
                if self._stopping:
                    raise _Closed()
                why = reply[1] if reply else "the worker did not start"
                raise DatabaseOpenError(f"Cannot open {self.path} as a database: {why}")
            self._ready = True
        return process

    @staticmethod
    def _reply(process: subprocess.Popen[bytes], timeout: float) -> tuple | None:
        """The worker's next reply; None when none came in time or the worker died."""
        stdout = process.stdout
        assert stdout is not None  # started with stdout=PIPE
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready:
            return None
        return receive(stdout)

    @staticmethod
    def _stop(process: subprocess.Popen[bytes]) -> None:
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass

    def _discard(self) -> None:
        process, self.process, self._ready = self.process, None, False
        if process is not None:
            self._stop(process)

    def run(self, request: tuple, deadline_s: float) -> tuple:
        """Send ``request``; its reply, or ``("killed", why)`` when the worker ran past
        ``deadline_s`` or died (a replacement is then started at once, for the next statement)."""
        process = self._ensure()
        stdin = process.stdin
        assert stdin is not None  # started with stdin=PIPE
        try:
            send(stdin, request)
            reply = self._reply(process, deadline_s)
        except (OSError, ValueError):
            reply = None
        except BaseException:  # interrupted (Ctrl-C): its reply must not answer the next statement
            self._discard()
            raise
        if reply is not None:
            return reply
        died = process.poll() is not None
        self._discard()
        if not self._stopping:
            self.replaced += 1
            self.prestart()
        return ("killed", "died" if died else "deadline")

    def interrupt(self) -> None:
        """Kill the process from another thread (the database is closing): the statement it runs
        ends, and no replacement is started."""
        with self._guard:
            self._stopping = True
            process = self.process
        if process is not None:
            try:
                process.kill()
            except OSError:
                pass

    def close(self) -> None:
        with self._guard:
            self._stopping = True
            process, self.process = self.process, None
        if process is None:
            return
        if self._ready:
            try:
                if process.stdin is not None:
                    process.stdin.close()  # the worker ends at the end of its input
                process.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._stop(process)

    @property
    def pid(self) -> int | None:
        process = self.process
        return process.pid if process is not None and process.poll() is None else None


class _Closed(ExecutionError):
    """The database was closed while a statement waited for, or ran in, a worker (internal:
    :meth:`GuardedDatabase.execute` raises it as an :class:`ExecutionError` naming the statement)."""

    def __init__(self) -> None:
        super().__init__("The database was closed; the query did not complete.")


class _Member(Protocol):
    """What a pool hands out and ends: a worker process (:class:`_Worker`), or an engine's own
    kind (a server connection's session)."""

    replaced: int

    @property
    def pid(self) -> int | None: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


_M = TypeVar("_M", bound=_Member)


class _Ticket(Generic[_M]):
    """A statement waiting for a worker: granted one by the pool, in order of arrival."""

    __slots__ = ("client", "event", "worker")

    def __init__(self, client: Hashable | None):
        self.client = client
        self.event = threading.Event()
        self.worker: _M | None = None


class _BasePool(Generic[_M]):
    """A database's workers (of the kind ``_M``): at most ``size`` of them, each running one
    statement at a time; a statement waits for a free one in order of arrival, within its own time
    budget, and statements of one client hold at most ``client_cap`` of them at once (a statement
    without a client is not counted against any). Each kind of pool starts its workers its own
    way (:meth:`prestart`, :meth:`_new_worker`)."""

    def __init__(self, size: int, client_cap: int):
        self.size = size
        self.client_cap = client_cap
        self._lock = threading.Lock()
        self._all: list[_M] = []
        self._idle: list[_M] = []
        self._busy: dict[_M, Hashable | None] = {}
        self._per_client: dict[Hashable, int] = {}
        self._waiting: deque[_Ticket[_M]] = deque()
        self._closed = False

    def _new_worker(self) -> _M:
        """A worker for a slot not filled yet (called with the lock held); a pool that fills
        every slot at the start never needs one."""
        raise NotImplementedError

    def acquire_within(self, client: Hashable | None, budget: float, sql: str, *,
                       what: str = "worker", units: str = "statement workers") -> _M:
        """A free worker for ``client`` within ``budget`` seconds, or the error the statement
        ``sql`` fails with: :class:`QueryTimeoutError` saying why it waited its whole budget for
        a ``what`` (the client's share taken, or all the ``units`` busy), or
        :class:`ExecutionError` when the database was closed."""
        try:
            worker = self.acquire(client, budget)
        except _Closed:
            raise ExecutionError("The database was closed; the query did not complete.", sql=sql) from None
        if worker is None:
            capped = client is not None and self.status()["running_by_client"].get(client, 0) >= self.client_cap
            why = (f"this client already runs {self.client_cap} statements on the database, its share"
                   if capped else f"all {self.size} of the database's {units} were busy")
            raise QueryTimeoutError(
                f"The query waited its whole {budget:g} s budget for a {what} ({why}) and did not run.", sql=sql
            )
        return worker

    def prestart(self) -> None:
        """Start one worker ahead, so that the first statement finds it ready."""
        raise NotImplementedError

    def acquire(self, client: Hashable | None, timeout: float) -> _M | None:
        """A worker for one statement of ``client``; None when none was free within ``timeout``.

        Raises:
            _Closed: the database is closed, or was closed while the statement waited.
        """
        ticket: _Ticket[_M] = _Ticket(client)
        with self._lock:
            if self._closed:
                raise _Closed()
            self._waiting.append(ticket)
            self._dispatch()
        try:
            ticket.event.wait(max(0.0, timeout))
        except BaseException:  # interrupted (Ctrl-C): give back what it holds or will be given
            with self._lock:
                granted = ticket.worker
                if granted is None and ticket in self._waiting:
                    self._waiting.remove(ticket)
            if granted is not None:
                self.release(granted)
            raise
        with self._lock:
            if ticket.worker is not None:  # granted, perhaps just as the wait ended
                return ticket.worker
            if self._closed:
                raise _Closed()
            self._waiting.remove(ticket)
            return None

    def _dispatch(self) -> None:
        """Hand free workers to waiting statements in order of arrival, skipping those whose
        client holds its share already. Called with the lock held."""
        free = len(self._idle) + self.size - len(self._all)
        if free <= 0 or not self._waiting:
            return
        for ticket in list(self._waiting):
            if free <= 0:
                break
            if ticket.client is not None and self._per_client.get(ticket.client, 0) >= self.client_cap:
                continue
            self._waiting.remove(ticket)
            if self._idle:
                worker = self._idle.pop()  # the most recently used: its process is ready
            else:
                worker = self._new_worker()  # started by its first statement
                self._all.append(worker)
            self._busy[worker] = ticket.client
            if ticket.client is not None:
                self._per_client[ticket.client] = self._per_client.get(ticket.client, 0) + 1
            ticket.worker = worker
            free -= 1
            ticket.event.set()

    def release(self, worker: _M) -> None:
        with self._lock:
            client = self._busy.pop(worker, None)
            if client is not None:
                left = self._per_client.get(client, 1) - 1
                if left > 0:
                    self._per_client[client] = left
                else:
                    self._per_client.pop(client, None)
            closed = self._closed
            if not closed:
                self._idle.append(worker)
                self._dispatch()
        if closed:
            worker.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "workers": self.size,
                "client_workers": self.client_cap,
                "started": len(self._all),
                "running": len(self._busy),
                "waiting": len(self._waiting),
                "running_by_client": dict(self._per_client),
                "running_pids": sorted(p for p in (w.pid for w in self._busy) if p is not None),
                "pids": sorted(p for p in (w.pid for w in self._all) if p is not None),
                "replaced": sum(w.replaced for w in self._all),
            }

    def close(self) -> None:
        """End every worker: idle ones now, busy ones by killing their process (their statement
        then fails), and wake the statements that wait."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
            waiting = list(self._waiting)
            self._waiting.clear()
        for ticket in waiting:
            ticket.event.set()
        for worker in busy:
            worker.interrupt()
        for worker in idle:
            worker.close()


class _Pool(_BasePool[_Worker]):
    """The worker processes of the SQLite file ``path`` (see :class:`_BasePool`): each started
    when a statement first needs it, or one ahead (:meth:`prestart`)."""

    def __init__(self, path: Path, max_value_bytes: int, size: int, client_cap: int):
        super().__init__(size, client_cap)
        self.path = path
        self.max_value_bytes = max_value_bytes

    def _new_worker(self) -> _Worker:
        return _Worker(self.path, self.max_value_bytes)

    def prestart(self) -> None:
        """Start one worker ahead, so that the first statement finds it ready."""
        with self._lock:
            if self._all or self._closed:
                return
            worker = self._new_worker()
            self._all.append(worker)
            self._idle.append(worker)
            worker.prestart()


class Database:
    """What every guarded database offers, whatever its engine.

    An engine's class (:class:`GuardedDatabase` for SQLite, and the PostgreSQL and DuckDB ones)
    sets :attr:`engine` and :attr:`dialect`, checks a statement in :meth:`check`, runs it in
    :meth:`_execute`, and offers :meth:`lookup`, :meth:`explain_query_plan`, :meth:`close` and its
    worker figures. Tracing, per-run views and default limits are shared here.

    Attributes:
        engine: the engine's name as OpenTelemetry's ``db.system`` spells it.
        dialect: sqlglot's name for the engine's SQL.
        name: the database's short name (a file's stem, a PostgreSQL database's name).
        location: where the database is, without secrets (a path, or a URL with no password).
        path: the database file, or None for a database on a server.
    """

    engine = "sqlite"
    dialect = "sqlite"
    path: Path | None = None
    name: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_rows: int = DEFAULT_MAX_ROWS
    max_bytes: int = DEFAULT_MAX_BYTES
    tracer: Any = None
    client: Hashable | None = None

    def _configure(self, timeout_s: float, max_rows: int, max_bytes: int, tracer: Any, workers: int,
                   client_workers: int | None) -> int:
        """Set the limits every engine's database keeps, after checking the worker bounds; the
        share of workers one client may hold (half of them, rounded up, unless given).

        Raises:
            ValueError: ``workers`` or ``client_workers`` out of range.
        """
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"workers must be between 1 and {MAX_WORKERS}, not {workers}.")
        client_workers = math.ceil(workers / 2) if client_workers is None else client_workers
        if not 1 <= client_workers <= workers:
            raise ValueError(f"client_workers must be between 1 and workers ({workers}), not {client_workers}.")
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.tracer = tracer
        self.client = None
        return client_workers

    @property
    def location(self) -> str:
        return str(self.path) if self.path is not None else self.name

    @property
    def warnings(self) -> list[str]:
        """What the caller should be told about how this database is opened (one line each)."""
        return []

    def read_structure(self) -> list[Any]:
        """The tables (:class:`sqlchorus.tools.engines.catalog.Table`, which reads databases: not named
        here), their columns and keys, from the engine's own catalogue: offered by the engines
        other than SQLite, whose structure :func:`sqlchorus.tools.schema.introspect.introspect` reads through
        sqlite-utils."""
        raise NotImplementedError(f"The {self.engine} database does not read its structure itself.")

    def with_tracer(self, tracer: Any) -> Database:
        """A view of this database whose executions are child spans ``sql`` of ``tracer``.

        The view shares the connection, the workers, the lock and the guard; only the tracer
        is its own. A run traces through its own view, so concurrent runs on one database never
        write per-run state onto it. Close the database, not its views.
        """
        view = copy.copy(self)
        view.tracer = tracer
        return view

    def for_client(self, client: Hashable | None) -> Database:
        """A view of this database whose statements count as ``client``'s (a server passes the
        remote address or the token of a request): they run at most ``client_workers`` at once,
        so one client cannot take every worker. None counts them as nobody's (no cap).

        Like :meth:`with_tracer`'s, the view shares everything else; close the database, not it.
        """
        view = copy.copy(self)
        view.client = client
        return view

    def check(self, sql: str) -> exp.Expr:
        """The parsed statement, if it is one query this engine's guard lets run.

        Raises:
            NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
        """
        return check_single_query(sql, dialect=self.dialect)

    def execute(
        self,
        sql: str,
        *,
        timeout_s: float | None = None,
        max_rows: int | None = None,
        max_bytes: int | None = None,
        parameters: tuple[Any, ...] | dict[str, Any] = (),
        client: Hashable | None = None,
    ) -> QueryResult:
        """Run one read query under the guard and return its (capped) rows.

        The time budget covers waiting for a free worker: a statement still waiting when its
        budget is spent fails with :class:`QueryTimeoutError` without running. ``client`` (by
        default the view's, see :meth:`for_client`) counts the statement as that client's.

        Raises:
            NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError, QueryTimeoutError,
            ResourceError, ExecutionError.
        """
        tree = self.check(sql)
        return self._traced(sql, tree, timeout_s, max_rows, max_bytes, parameters, client)

    def _limits(self, timeout_s: float | None, max_rows: int | None, max_bytes: int | None) -> tuple[float, int, int]:
        """A statement's time budget and caps: its own, else this database's defaults."""
        return (
            self.timeout_s if timeout_s is None else timeout_s,
            self.max_rows if max_rows is None else max_rows,
            self.max_bytes if max_bytes is None else max_bytes,
        )

    def _traced(
        self, sql: str, tree: exp.Expr, timeout_s, max_rows, max_bytes, parameters, client=None,
    ) -> QueryResult:
        tracer = self.tracer
        if tracer is None:
            return self._execute(sql, tree, timeout_s, max_rows, max_bytes, parameters, client)
        with tracer.start_as_current_span(attrs.SQL_SPAN) as span:
            span.set_attribute(attrs.DB_SYSTEM, self.engine)
            span.set_attribute(attrs.DB_NAMESPACE, self.name)
            span.set_attribute(attrs.DB_QUERY_TEXT, sql)
            # OpenInference's kind: a statement run for the agent is a tool call.
            span.set_attribute(attrs.OPENINFERENCE_KIND, attrs.KIND_TOOL)
            content = content_mode(tracer)
            if content != NONE:  # the statement is structure, not user data
                set_value(span, "input", sql)
            try:
                result = self._execute(sql, tree, timeout_s, max_rows, max_bytes, parameters, client)
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
        tree: exp.Expr,
        timeout_s: float | None,
        max_rows: int | None,
        max_bytes: int | None,
        parameters: tuple[Any, ...] | dict[str, Any],
        client: Hashable | None = None,
    ) -> QueryResult:
        raise NotImplementedError

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
        value index's reads) under the same guard; a query from a model or a user always goes
        through :meth:`execute`."""
        raise NotImplementedError

    def explain_query_plan(self, sql: str, *, timeout_s: float | None = None) -> QueryResult:
        """The engine's plan of one read query, under the same guard; the last column of each
        row is a line of the plan."""
        raise NotImplementedError

    _pool: _BasePool[Any]
    """The engine's bounded pool of workers (processes or connections) that run statements."""

    @property
    def workers(self) -> int:
        """Statements that run at once on this database at most."""
        return self._pool.size

    @property
    def client_workers(self) -> int:
        """Statements one client runs at once on this database at most."""
        return self._pool.client_cap

    def worker_status(self) -> dict[str, Any]:
        """What the workers do now: ``workers`` and ``client_workers`` (the bounds), ``started``
        (workers made so far), ``running`` and ``waiting`` (statements), ``running_by_client``,
        ``running_pids`` (the processes running statements), ``pids`` (every live worker
        process) and ``replaced`` (workers killed at a deadline, or dead, and replaced)."""
        return self._pool.status()

    def _in_worker(self, sql: str, parameters: Any, row_cap: int, byte_cap: int, budget: float,
                   client: Hashable | None) -> tuple:
        """Run ``sql`` in a worker process of the pool, within ``budget`` including the wait for
        a worker; the worker's ``("ok", columns, rows, truncated, elapsed)`` reply, or its
        ``("error", message, detail)`` reply for the engine to classify.

        Raises:
            QueryTimeoutError: no worker within the budget, or the statement ran past it and its
                worker was killed; ExecutionError: the database was closed, or the statement
                ended its worker.
        """
        client = self.client if client is None else client
        start = time.monotonic()
        worker = self._pool.acquire_within(client, budget, sql)
        try:
            # What is left of the budget after the wait; the worker's start is not counted.
            left = max(budget - (time.monotonic() - start), 0.001)
            reply = worker.run(("run", sql, parameters, left, row_cap, byte_cap), max(left + KILL_GRACE_S, 0.0))
        except _Closed:
            raise ExecutionError("The database was closed; the query did not complete.", sql=sql) from None
        finally:
            self._pool.release(worker)
        if reply[0] == "killed":
            if self._pool.closed:
                raise ExecutionError("The database was closed; the query did not complete.", sql=sql)
            if reply[1] == "deadline":
                raise QueryTimeoutError(f"The query ran longer than its {budget:g} s budget and was stopped.", sql=sql)
            raise ExecutionError("The query stopped the process that ran it; it was not completed.", sql=sql)
        return reply

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GuardedDatabase(Database):
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

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tracer: Any = None,
        prestart: bool = True,
        workers: int = DEFAULT_WORKERS,
        client_workers: int | None = None,
    ):
        client_workers = self._configure(timeout_s, max_rows, max_bytes, tracer, workers, client_workers)
        self.path = Path(path).expanduser().resolve()
        self.name = self.path.stem
        # Serialises use of this process's connection only; statements in workers never take it.
        self._lock = threading.RLock()
        # Shared with this database's traced views (see with_tracer), like the workers.
        self._state = GuardState()
        # No single value (string or blob) may outgrow the byte cap: a query cannot build a
        # huge string in memory even if it would return only its length.
        self._max_value_bytes = max(1_000_000, min(max_bytes, 2**31 - 1))
        self._conn = self._open()
        self._pool = _Pool(self.path, self._max_value_bytes, workers, client_workers)
        # A database dropped without close() still ends its workers (and its views share them).
        weakref.finalize(self, self._pool.close)
        if prestart:
            self._pool.prestart()

    # -- opening -----------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        return open_checked(str(self.path), self._state, max_value_bytes=self._max_value_bytes)

    # -- executing ---------------------------------------------------------------------------

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
        tree = self.check(sql)
        budget, row_cap, byte_cap = self._limits(timeout_s, max_rows, max_bytes)
        with self._lock:
            try:
                columns, rows, truncated, elapsed = run(self._conn, self._state, sql, parameters, budget, row_cap,
                                                         byte_cap)
            except sqlite3.Error as e:
                raise self._classify(str(e), self._state.refused, sql, tree, budget) from e
        return QueryResult(sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)

    def _execute(
        self,
        sql: str,
        tree: exp.Expr,
        timeout_s: float | None,
        max_rows: int | None,
        max_bytes: int | None,
        parameters: tuple[Any, ...] | dict[str, Any],
        client: Hashable | None = None,
    ) -> QueryResult:
        budget, row_cap, byte_cap = self._limits(timeout_s, max_rows, max_bytes)
        reply = self._in_worker(sql, parameters, row_cap, byte_cap, budget, client)
        if reply[0] == "ok":
            _, columns, rows, truncated, elapsed = reply
            return QueryResult(sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)
        _, message, refused = reply
        raise self._classify(message, refused, sql, tree, budget)

    def _classify(self, text: str, refused: str | None, sql: str, tree: exp.Expr, budget: float) -> SqlError:
        if refused and refused.startswith("a virtual table"):  # name the tables that are not the database's
            names = self._unknown_tables(tree)
            refused = refused + (f" ({', '.join(names)})" if names else "")
        return sqlite_error(text, refused, sql, budget)

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
        return self._traced("EXPLAIN QUERY PLAN " + sql.strip(), tree, timeout_s, None, None, ())

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

    def close(self) -> None:
        """End the workers (a statement still running fails) and the connection."""
        self._pool.close()
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"GuardedDatabase({str(self.path)!r})"
