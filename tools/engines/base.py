"""What every guarded database does, whatever its engine: the frame an engine's module fills in.

A guarded database opens its engine under the guard, checks each statement (:meth:`Database.check`),
runs it with a time budget on one of a bounded set of workers, reads its rows capped in number and
size, looks up its own catalogue (:meth:`Database.read_structure`) and closes. What is the same for
every engine is written here, once:

* :class:`Database`: the limits, tracing, per-run and per-client views, the statement path
  (:meth:`~Database.execute`: the check, then the run inside a traced span), :meth:`~Database.lookup`
  for sqlchorus's own reads, the worker figures and closing;
* :class:`Pool`: a database's workers, handed to statements in order of arrival within each one's
  budget, one client's statements holding at most its share of them; a worker is either a
* :class:`Worker`, a process that answers :mod:`~sqlchorus.tools.engines.sqlite_guard`'s messages,
  killed at its deadline and replaced (SQLite's and DuckDB's statements run in these: one long
  call inside either engine cannot be stopped otherwise), or a
* :class:`Session`, a connection to a server, opened, replaced and interrupted through the
  engine's :class:`Connector` (PostgreSQL's and MySQL's), whose statements a :class:`Watch`
  stops from outside when the server does not stop them itself;
* :class:`WorkerDatabase` and :class:`ServerDatabase`: the statement path over each kind.

An engine's module holds what is its own: how it connects, what it refuses, how it cancels.
"""

from __future__ import annotations

import copy
import importlib
import math
import select
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypedDict, TypeVar

from opentelemetry.trace import Status, StatusCode
from sqlglot import exp
from typing_extensions import Self

from sqlchorus.tools.errors import SqlchorusError
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
)
from sqlchorus.tools.engines.sqlite_guard import receive, send
from sqlchorus.tools.tracing.content import ALL, METADATA, NONE, content_mode, rows_preview, set_value

__all__ = [
    "DEFAULT_MAX_BYTES", "DEFAULT_MAX_ROWS", "DEFAULT_TIMEOUT_S", "DEFAULT_WORKERS", "KILL_GRACE_S", "MAX_WORKERS",
    "TERMINATE_AFTER_S", "Database", "GuardOptions", "QueryResult", "ServerDatabase", "WorkerDatabase",
    "check_single_query",
    # The typed errors every guarded database raises (sqlchorus.tools.sql.errors).
    "DatabaseOpenError", "ExecutionError", "ForbiddenError", "NotAQueryError", "QueryTimeoutError", "ResourceError",
    "SqlError", "SqlTooDeepError", "SqlTooLongError",
]

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_ROWS = 10_000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_WORKERS = 4
"""Workers per database: statements running on it at once at most."""
MAX_WORKERS = 64

KILL_GRACE_S = 0.5
"""How long past its budget a statement may run before it is stopped from outside (its worker
killed, or a cancel sent to the server); the engine's own stop ends every statement that has
steps at the budget itself."""

TERMINATE_AFTER_S = 1.0
"""How long after the cancel from outside a server's statement may go on before its session is
ended and its socket shut (a server checks for a cancel between steps, not inside every one)."""

WORKER_START_S = 30.0
"""How long a new worker process may take to open the database."""

REMEMBERED_CHECKS = 256
"""Statements whose check a server's database remembers for the check of its plan."""


@dataclass
class QueryResult:
    """Rows returned by one guarded execution.

    Attributes:
        sql: the statement as executed.
        columns: output column names.
        rows: the rows, as tuples, at most ``max_rows`` of them.
        truncated: True when the row or byte cap cut the result short.
        elapsed_ms: wall time spent in the engine.
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


def plan_result(sql: str, lines: list[str], elapsed_ms: float) -> QueryResult:
    """A plan as :meth:`Database.explain_query_plan` gives it: rows ``(id, detail)``, the line's
    number and the line."""
    return QueryResult(sql=sql, columns=["id", "detail"], rows=list(enumerate(lines)), elapsed_ms=elapsed_ms)


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
        raise several_statements(sql)
    if not isinstance(tree, exp.Query):
        raise NotAQueryError(
            f"Only read queries may run; this statement is {type(tree).__name__.upper()}.",
            sql=sql,
        )
    return tree


def bounded_text(sql: str) -> str:
    """``sql`` stripped, when it is not empty and within the bounds of
    :mod:`sqlchorus.tools.sql.text`: what a server's check reads before either of its parsers does.

    Raises:
        NotAQueryError (SqlTooLongError, SqlTooDeepError).
    """
    text = (sql or "").strip()
    if not text:
        raise NotAQueryError("The SQL text is empty.", sql=sql)
    sql_text.check_bounds(text)
    return text


WRITING_NODES: tuple[type[exp.Expr], ...] = tuple(
    getattr(exp, n) for n in
    "Insert Update Delete Merge Create Drop Alter Command Copy Set Transaction Commit Rollback "
    "TruncateTable Pragma Use Grant Revoke Analyze Declare Lock Into LoadData Refresh Cache "
    "Uncache Kill Describe Show".split()
    if hasattr(exp, n)
)
"""sqlglot's nodes of statements that write or are not a read: none may stand anywhere in a query
(a writing CTE, ``SELECT INTO``)."""


def refuse_writing(node: exp.Expr, sql: str, *, nodes: tuple[type[exp.Expr], ...] = WRITING_NODES,
                   into: str = "SELECT INTO") -> None:
    """Refuse ``node`` of the query ``sql`` when it is one of ``nodes`` (an ``INTO`` named ``into``).

    Raises:
        ForbiddenError.
    """
    if isinstance(node, nodes):
        what = into if isinstance(node, exp.Into) else type(node).__name__.upper()
        raise ForbiddenError(f"The query contains {what}, which the guard does not allow: only reading may "
                             "run; it was refused.", sql=sql)


def budget_spent(budget: float, sql: str) -> QueryTimeoutError:
    """The error of a statement stopped at its ``budget``."""
    return QueryTimeoutError(f"The query ran longer than its {budget:g} s budget and was stopped.", sql=sql)


def several_statements(sql: str) -> NotAQueryError:
    """The error of a text of several statements."""
    return NotAQueryError("Expected exactly one statement, found several.", sql=sql)


def server_error(kind: str, message: str, sql: str, budget: float, product: str) -> SqlError:
    """The typed error of a statement a server refused or failed with ``message``, by the
    ``kind`` its engine reads in the driver's error: ``timeout`` (stopped at its ``budget``),
    ``forbidden``, ``resource``, ``gone`` (the ``product`` server went away), ``several``
    (statements in one text), or another (the server's message)."""
    if kind == "timeout":
        return budget_spent(budget, sql)
    if kind == "forbidden":
        return ForbiddenError(f"The server refused the query ({message}); only reading may run.", sql=sql)
    if kind == "resource":
        return ResourceError(f"The query needs more than the guard allows: {message}.", sql=sql)
    if kind == "gone":
        return ExecutionError(f"The {product} server went away during the query ({message}); it was not completed.",
                              sql=sql)
    if kind == "several":
        return several_statements(sql)
    return ExecutionError(message, sql=sql)


def open_failed(product: str, location: str, reason: str, password: str | None) -> DatabaseOpenError:
    """The one line saying why a connection to the ``product`` database at ``location`` could not
    be opened, with no ``password`` in it."""
    if password:
        reason = reason.replace(password, "***")
    return DatabaseOpenError(f"Cannot open the {product} database {location}: {reason}")


def driver(module: str, missing: str) -> Any:
    """The engine's driver ``module``, imported when a database is opened, so that the engine's
    module imports without it.

    Raises:
        DatabaseOpenError: ``missing``, when the driver is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DatabaseOpenError(missing) from None


def closed_error(sql: str) -> ExecutionError:
    """The error of a statement whose database was closed while it waited or ran."""
    return ExecutionError("The database was closed; the query did not complete.", sql=sql)


def _quietly(call: Callable[..., Any], *args: Any) -> None:
    """``call(*args)``, whatever it raises: a step of stopping or closing that may find its
    target gone already."""
    try:
        call(*args)
    except Exception:
        pass


def close_quietly(conn: Any) -> None:
    """Close ``conn``, which may be broken or closed already."""
    _quietly(conn.close)


class _Closed(ExecutionError):
    """The database was closed while a statement waited for, or ran on, a worker (internal: the
    statement path raises it as an :class:`ExecutionError` naming the statement)."""

    def __init__(self) -> None:
        super().__init__("The database was closed; the query did not complete.")


class Stopped(SqlchorusError):
    """A server's statement was stopped from outside (cancelled, or its session ended); raised
    within the engines only, where it becomes a :class:`QueryTimeoutError`."""


# -- workers ---------------------------------------------------------------------------------------


class _Member(Protocol):
    """What a pool hands out and ends: a worker process (:class:`Worker`) or a server's
    connection (:class:`Session`)."""

    replaced: int

    @property
    def pid(self) -> int | None: ...

    def prestart(self) -> None: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


_M = TypeVar("_M", bound=_Member)


class Worker:
    """One worker process of a database's pool, running ``command`` (a guard's script, which
    opens the database at ``path`` and answers :mod:`~sqlchorus.tools.engines.sqlite_guard`'s
    messages): started ahead or on first use, killed at a deadline and started again. One
    statement at a time uses it: the pool hands it out, and only :meth:`interrupt` is called from
    another thread."""

    def __init__(self, path: Path, command: list[str]):
        self.path = path
        self.command = command
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
                    self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    close_fds=True,
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


class Connector:
    """How an engine connects to its server, for a :class:`Session` and a :class:`ServerDatabase`:
    calling it opens a guarded connection; the rest says what becomes of one. Holds no reference to
    a database, so that a database dropped without close() is still collected and its connections
    closed."""

    product = ""
    """The server's name as messages say it."""

    def __call__(self) -> Any:
        """A new connection, with the guard's settings on it.

        Raises:
            DatabaseOpenError: the server cannot be reached or refuses the login.
        """
        raise NotImplementedError

    def usable(self, conn: Any) -> bool:
        """Whether ``conn`` may run another statement (neither closed nor broken)."""
        raise NotImplementedError

    def close(self, conn: Any) -> None:
        """Close ``conn``, whatever state it is in, raising nothing."""
        raise NotImplementedError

    def interrupt(self, conn: Any) -> None:
        """Stop the statement running on ``conn``, from another thread (the database is closing)."""
        raise NotImplementedError

    def backend(self, conn: Any) -> int | None:
        """The server's number of ``conn``'s session; None when it has none."""
        raise NotImplementedError

    def errors(self) -> tuple[type[BaseException], ...]:
        """What the driver raises for a statement the server refused or failed."""
        raise NotImplementedError

    def error(self, exc: BaseException, sql: str, budget: float) -> SqlError:
        """The typed error of ``exc``, one of :meth:`errors`, raised by ``sql`` under ``budget``."""
        raise NotImplementedError

    def broken(self, conn: Any, exc: BaseException) -> bool:
        """Whether ``conn``, whose statement raised ``exc``, is to be replaced."""
        raise NotImplementedError


class Session:
    """One connection of a server's database's pool, standing where a worker process stands:
    opened on first use (or ahead) through ``connect``, used by one statement at a time, replaced
    after a stop from outside or an error that broke it. Only :meth:`interrupt` is called from
    another thread."""

    def __init__(self, connect: Connector):
        self._connect = connect
        self.conn: Any = None
        self.replaced = 0
        self._stopping = False
        self._guard = threading.Lock()

    def connection(self) -> Any:
        conn = self.conn
        if conn is not None and not self._connect.usable(conn):
            self.discard(replace=True)
            conn = None
        if conn is None:
            if self._stopping:
                raise _Closed()
            conn = self._connect()
            with self._guard:
                if self._stopping:
                    self._connect.close(conn)
                    raise _Closed()
                self.conn = conn
        return conn

    def prestart(self) -> None:
        """Connect now, so that the first statement finds the connection open; a failure is the
        first statement's to report."""
        if self.conn is None:
            try:
                self.connection()
            except (SqlError, _Closed):
                pass

    def discard(self, replace: bool = False) -> None:
        with self._guard:
            conn, self.conn = self.conn, None
        if conn is not None:
            if replace:
                self.replaced += 1
            self._connect.close(conn)

    def interrupt(self) -> None:
        """Stop the statement running on it (the database is closing); no connection follows."""
        with self._guard:
            self._stopping = True
            conn = self.conn
        if conn is not None:
            _quietly(self._connect.interrupt, conn)

    def close(self) -> None:
        with self._guard:
            self._stopping = True
        self.discard()

    @property
    def pid(self) -> int | None:
        conn = self.conn
        try:
            return self._connect.backend(conn) if conn is not None else None
        except Exception:
            return None


class Watch:
    """Stops a server's statement from outside, unless stopped first (a cancel that lands after
    the statement ended must not hit the next one): at ``after`` seconds ``cancel``; if the
    statement is still running :data:`TERMINATE_AFTER_S` later (a call the server does not
    interrupt), ``end``, which ends its session from a connection of its own and shuts its socket,
    so that the waiting client returns at once and the connection is replaced. Without ``end``
    the cancel is all.

    ``hold_cancel``: the cancel is sent before :meth:`stop` may return, and ``end`` is timed from
    when it was sent (a cancel request that reached the server after the statement's end would
    stop the next one); else ``end`` is timed from ``after`` and the cancel sent meanwhile (one
    that needs a connection of its own may take as long as connecting does)."""

    def __init__(self, after: float, cancel: Callable[[], Any], end: Callable[[], Any] | None = None, *,
                 hold_cancel: bool):
        self.fired = False
        self.terminated = False
        self._cancel = cancel
        self._end = end
        self._hold_cancel = hold_cancel
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(after, self._fire)
        self._timer.daemon = True
        self._second: threading.Timer | None = None
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            if self._hold_cancel:
                _quietly(self._cancel)
            if self._end is not None:
                self._second = threading.Timer(TERMINATE_AFTER_S, self._terminate)
                self._second.daemon = True
                self._second.start()
        if not self._hold_cancel:
            _quietly(self._cancel)

    def _terminate(self) -> None:
        with self._lock:
            if self._done:
                return
            self.terminated = True
        if self._end is not None:
            _quietly(self._end)

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True
            if self._second is not None:
                self._second.cancel()


class _Ticket(Generic[_M]):
    """A statement waiting for a worker: granted one by the pool, in order of arrival."""

    __slots__ = ("client", "event", "worker")

    def __init__(self, client: Hashable | None):
        self.client = client
        self.event = threading.Event()
        self.worker: _M | None = None


class Pool(Generic[_M]):
    """A database's workers (of the kind ``_M``, each made by ``make`` when a statement first needs
    it, or one ahead): at most ``size`` of them, each running one statement at a time; a statement
    waits for a free one in order of arrival, within its own time budget, and statements of one
    client hold at most ``client_cap`` of them at once (a statement without a client is not counted
    against any)."""

    def __init__(self, make: Callable[[], _M], size: int, client_cap: int):
        self._make = make
        self.size = size
        self.client_cap = client_cap
        self._lock = threading.Lock()
        self._all: list[_M] = []
        self._idle: list[_M] = []
        self._busy: dict[_M, Hashable | None] = {}
        self._per_client: dict[Hashable, int] = {}
        self._waiting: deque[_Ticket[_M]] = deque()
        self._closed = False

    def prestart(self) -> None:
        """Start one worker ahead, so that the first statement finds it ready."""
        with self._lock:
            if self._all or self._closed:
                return
            worker = self._make()
            self._all.append(worker)
            self._idle.append(worker)
        worker.prestart()

    def acquire_within(self, client: Hashable | None, budget: float, sql: str, *,
                       what: str = "worker", units: str = "statement workers") -> _M:
        """A free worker for ``client`` within ``budget`` seconds, or the error the statement
        ``sql`` fails with: :class:`QueryTimeoutError` saying why it waited its whole budget for
        a ``what`` (the client's share taken, or all the ``units`` busy), or
        :class:`ExecutionError` when the database was closed."""
        try:
            worker = self.acquire(client, budget)
        except _Closed:
            raise closed_error(sql) from None
        if worker is None:
            capped = client is not None and self.status()["running_by_client"].get(client, 0) >= self.client_cap
            why = (f"this client already runs {self.client_cap} statements on the database, its share"
                   if capped else f"all {self.size} of the database's {units} were busy")
            raise QueryTimeoutError(
                f"The query waited its whole {budget:g} s budget for a {what} ({why}) and did not run.", sql=sql
            )
        return worker

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
                worker = self._idle.pop()  # the most recently used: its process or connection is ready
            else:
                worker = self._make()  # started by its first statement
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
        """End every worker: idle ones now, busy ones by killing their process or interrupting
        their connection (their statement then fails), and wake the statements that wait."""
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


def _end(pool: Pool[Any], own: list[Any], close: Callable[[Any], None]) -> None:
    """End a database's workers, then its own connection: what close() does, and what dropping a
    database without close() does."""
    pool.close()
    close(own[0])


# -- databases -------------------------------------------------------------------------------------


class GuardOptions(TypedDict, total=False):
    """The guard's options every engine's database takes, each with the default of
    :meth:`Database._configure` (see :class:`~sqlchorus.tools.engines.sqlite.GuardedDatabase`)."""

    timeout_s: float
    max_rows: int
    max_bytes: int
    tracer: Any
    prestart: bool
    workers: int
    client_workers: int | None


class _Pooling(NamedTuple):
    """How many workers a database has, the share one client may hold, and whether one starts
    ahead."""

    workers: int
    client_workers: int
    prestart: bool


class Limits(NamedTuple):
    """One statement's time budget and caps on rows and bytes."""

    budget: float
    row_cap: int
    byte_cap: int


Parameters = tuple[Any, ...] | dict[str, Any]

StatementRun = tuple[list[str], list[tuple[Any, ...]], bool, float, bool]
"""What a server's statement gave: ``(columns, rows, truncated, elapsed_ms, replace)``, where
``replace`` says its connection is not to be used again."""


class Database:
    """What every guarded database offers, whatever its engine.

    An engine's class (:class:`~sqlchorus.tools.engines.sqlite.GuardedDatabase` for SQLite, and
    the DuckDB, PostgreSQL and MySQL ones) sets :attr:`engine` and :attr:`dialect`, checks a
    statement in :meth:`check`, runs it in :meth:`_execute` and sqlchorus's own reads in
    :meth:`_lookup`, and reads its catalogue in :meth:`read_structure`. Tracing, per-run and
    per-client views, default limits, worker figures and closing are shared here.

    Attributes:
        engine: the engine's name as OpenTelemetry's ``db.system`` spells it.
        dialect: sqlglot's name for the engine's SQL.
        name: the database's short name (a file's stem, a server's database's name).
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
    _pool: Pool[Any]
    """The engine's bounded pool of workers (processes or connections) that run statements."""
    _close_all: weakref.finalize

    # -- opening and closing ---------------------------------------------------------------------

    def _configure(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, max_rows: int = DEFAULT_MAX_ROWS,
                   max_bytes: int = DEFAULT_MAX_BYTES, tracer: Any = None, prestart: bool = True,
                   workers: int = DEFAULT_WORKERS, client_workers: int | None = None) -> _Pooling:
        """Set the limits every engine's database keeps (:class:`GuardOptions`), after checking
        the worker bounds; the share of workers one client may hold is half of them, rounded up,
        unless given.

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
        return _Pooling(workers, client_workers, prestart)

    def _hold(self, pooling: _Pooling, worker: Callable[[], _Member], own: list[Any],
              close: Callable[[Any], None]) -> None:
        """Make the pool of at most ``pooling.workers`` workers (each made by ``worker``) and keep
        this process's connection ``own[0]`` (in a list shared with the database's views, so that
        a connection opened again serves them all): :meth:`close` ends both (``close`` ends the
        connection), and so does dropping the database without close()."""
        self._pool = Pool(worker, pooling.workers, pooling.client_workers)
        self._close_all = weakref.finalize(self, _end, self._pool, own, close)
        if pooling.prestart:
            self._pool.prestart()

    def close(self) -> None:
        """End the workers (a statement still running fails) and this process's connection."""
        self._close_all()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    @property
    def location(self) -> str:
        return str(self.path) if self.path is not None else self.name

    @property
    def warnings(self) -> list[str]:
        """What the caller should be told about how this database is opened (one line each)."""
        return []

    def read_structure(self) -> list[Any]:
        """The tables and views (:class:`sqlchorus.tools.engines.catalog.Table`), their columns and
        keys, from the engine's own catalogue."""
        raise NotImplementedError

    # -- views -----------------------------------------------------------------------------------

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

    # -- checking and executing ------------------------------------------------------------------

    def check(self, sql: str) -> exp.Expr:
        """The parsed statement, if it is one query this engine's guard lets run.

        Raises:
            NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
        """
        return check_single_query(sql, dialect=self.dialect)

    def _bind(self, sql: str, parameters: Parameters) -> tuple[str, Parameters]:
        """The statement and parameters the check reads and the engine runs: as given, unless the
        engine puts the values into the text first."""
        return sql, parameters

    def execute(self, sql: str, *, timeout_s: float | None = None, max_rows: int | None = None,
                max_bytes: int | None = None, parameters: Parameters = (), client: Hashable | None = None,
                ) -> QueryResult:
        """Run one read query under the guard and return its (capped) rows.

        The time budget covers waiting for a free worker: a statement still waiting when its
        budget is spent fails with :class:`QueryTimeoutError` without running. ``client`` (by
        default the view's, see :meth:`for_client`) counts the statement as that client's.

        Raises:
            NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError, QueryTimeoutError,
            ResourceError, ExecutionError.
        """
        sql, parameters = self._bind(sql, parameters)
        tree = self.check(sql)
        return self._traced(sql, tree, self._limits(timeout_s, max_rows, max_bytes), parameters, client)

    def lookup(self, sql: str, *, timeout_s: float | None = None, max_rows: int | None = None,
               max_bytes: int | None = None, parameters: Parameters = ()) -> QueryResult:
        """Run one read query that sqlchorus wrote itself (schema lookups, sample values, the
        value index's reads) on this process's connection, under the same guard, budget and caps
        (:meth:`_lookup` says what each engine checks of it). Such a query calls no function over
        values large enough to outrun the engine's own stop, so it needs no worker and never
        waits for a statement; a query from a model or a user always goes through :meth:`execute`.

        Raises:
            the same errors as :meth:`execute`.
        """
        sql, parameters = self._bind(sql, parameters)
        return self._lookup(sql, parameters, self._limits(timeout_s, max_rows, max_bytes))

    def _lookup(self, sql: str, parameters: Parameters, limits: Limits) -> QueryResult:
        raise NotImplementedError

    def explain_query_plan(self, sql: str, *, timeout_s: float | None = None) -> QueryResult:
        """The engine's plan of one read query, under the same guard; the last column of each
        row is a line of the plan."""
        raise NotImplementedError

    def _limits(self, timeout_s: float | None, max_rows: int | None, max_bytes: int | None) -> Limits:
        """A statement's time budget and caps: its own, else this database's defaults."""
        return Limits(
            self.timeout_s if timeout_s is None else timeout_s,
            self.max_rows if max_rows is None else max_rows,
            self.max_bytes if max_bytes is None else max_bytes,
        )

    def _traced(self, sql: str, tree: exp.Expr, limits: Limits, parameters: Parameters,
                client: Hashable | None = None) -> QueryResult:
        tracer = self.tracer
        if tracer is None:
            return self._execute(sql, tree, parameters, limits, client)
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
                result = self._execute(sql, tree, parameters, limits, client)
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

    def _execute(self, sql: str, tree: exp.Expr, parameters: Parameters, limits: Limits,
                 client: Hashable | None) -> QueryResult:
        """Run the checked statement ``sql`` (parsed: ``tree``) on a worker, within ``limits``,
        as ``client``'s (the view's when None)."""
        raise NotImplementedError

    # -- workers ---------------------------------------------------------------------------------

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
        (workers made so far), ``running`` and ``waiting`` (statements),
        ``running_by_client``, ``running_pids`` (the processes, or the servers' sessions, running
        statements), ``pids`` (every live one) and ``replaced`` (workers stopped at a deadline, or
        dead or broken, and replaced)."""
        return self._pool.status()


class WorkerDatabase(Database):
    """A database whose statements run in worker processes (:class:`Worker`): SQLite's and
    DuckDB's, where one long call inside the engine can only be stopped by killing its process."""

    def _execute(self, sql: str, tree: exp.Expr, parameters: Parameters, limits: Limits,
                 client: Hashable | None) -> QueryResult:
        params = dict(parameters) if isinstance(parameters, dict) else tuple(parameters or ())
        reply = self._in_worker(sql, params, limits, client)
        if reply[0] == "ok":
            _, columns, rows, truncated, elapsed = reply
            return QueryResult(sql=sql, columns=list(columns), rows=[tuple(r) for r in rows], truncated=truncated,
                               elapsed_ms=elapsed)
        _, message, detail = reply
        raise self._worker_error(message, detail, sql, tree, limits.budget)

    def _worker_error(self, message: str, detail: str | None, sql: str, tree: exp.Expr, budget: float) -> SqlError:
        """The typed error of a worker's ``("error", message, detail)`` reply to ``sql``."""
        raise NotImplementedError

    def _in_worker(self, sql: str, parameters: Any, limits: Limits, client: Hashable | None) -> tuple:
        """Run ``sql`` in a worker process of the pool, within the budget including the wait for
        a worker; the worker's ``("ok", columns, rows, truncated, elapsed)`` reply, or its
        ``("error", message, detail)`` reply for the engine to classify.

        Raises:
            QueryTimeoutError: no worker within the budget, or the statement ran past it and its
                worker was killed; ExecutionError: the database was closed, or the statement
                ended its worker.
        """
        budget, row_cap, byte_cap = limits
        client = self.client if client is None else client
        start = time.monotonic()
        worker = self._pool.acquire_within(client, budget, sql)
        try:
            # What is left of the budget after the wait; the worker's start is not counted.
            left = max(budget - (time.monotonic() - start), 0.001)
            reply = worker.run(("run", sql, parameters, left, row_cap, byte_cap), max(left + KILL_GRACE_S, 0.0))
        except _Closed:
            raise closed_error(sql) from None
        finally:
            self._pool.release(worker)
        if reply[0] == "killed":
            if self._pool.closed:
                raise closed_error(sql)
            if reply[1] == "deadline":
                raise budget_spent(budget, sql)
            raise ExecutionError("The query stopped the process that ran it; it was not completed.", sql=sql)
        return reply


class ServerDatabase(Database):
    """A database on a server (PostgreSQL's, MySQL's): its statements run on a pool of the
    server's connections (:class:`Session`), each in its own read-only transaction under the
    server's own time limit and a :class:`Watch`; sqlchorus's own reads run on this process's
    connection. The login is read when the database opens: one that could write or reach past
    the database is refused unless let (``allow_writable_role``), and then every run is warned.

    An engine's class says how it connects (a :class:`Connector`), what it reads of the
    catalogue on opening (:meth:`_learn`), what it checks of a statement and of the server's
    reading of it (:meth:`check`, :meth:`_verifier`), and runs one (:meth:`_run_statement`)."""

    path = None
    _who = "role"
    """What the server calls a login, as messages say it."""
    _harm = ""
    """What such a login could do past the checks, as every run on it is warned."""
    _connect: Connector
    _location: str
    _login: str
    write_warnings: list[str]
    limit_warnings: list[str]

    def _start(self, connect: Connector, pooling: _Pooling, refuse_writable: bool, readonly_sql: str) -> None:
        """Open this process's connection through ``connect``, read what the checks need of the
        catalogue (:meth:`_learn`), refuse a login that could write when ``refuse_writable`` (the
        error shows ``readonly_sql``, the statements that make a read-only one), then make the pool
        of connections.

        Raises:
            DatabaseOpenError: the server cannot be reached, refuses the login, or the login could
                write and ``refuse_writable``.
        """
        self._lock = threading.RLock()
        self._checked: dict[str, Any] = {}
        self._connect = connect
        self._own_conn = [connect()]
        try:
            self._learn()
        except BaseException:
            connect.close(self._own_conn[0])
            raise
        if self.write_warnings and refuse_writable:
            connect.close(self._own_conn[0])
            raise DatabaseOpenError(
                f"The {self._who} {self._login} could change or reach past {self._location} "
                f"({'; '.join(self.write_warnings)}), so it is refused; connect as a read-only {self._who}, made with: "
                + " ".join(readonly_sql.splitlines())
                + f" (or pass --allow-writable-role to go on as this {self._who})"
            )
        self._hold(pooling, lambda: Session(connect), self._own_conn, connect.close)

    def _learn(self) -> None:
        """Read what the checks need of the server's catalogue, and what the login could do
        (``write_warnings``), on this process's connection."""
        raise NotImplementedError

    @property
    def location(self) -> str:
        return self._location

    @property
    def warnings(self) -> list[str]:
        """One line saying what the login could do (when it was let open with such a login), then
        the limits it could not set on itself."""
        return ([self.run_warning] if self.run_warning else []) + self.limit_warnings

    @property
    def run_warning(self) -> str | None:
        """What every run on this database is warned of when the login could write or reach past
        it (``allow_writable_role``): None for a read-only one."""
        if not self.write_warnings:
            return None
        return (f"the {self._who} {self._login} could change or reach past {self._location} "
                f"({'; '.join(self.write_warnings)}); sqlchorus runs only checked reads in read-only "
                f"transactions, but no guard can stop what the {self._who} itself may do if a statement gets "
                f"past the checks ({self._harm}); connect as a read-only {self._who} instead")

    def _catalogue(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """sqlchorus's own read of the catalogue, on this process's connection, in a read-only
        transaction under the database's time budget (never a statement from a model or a user)."""
        with self._lock:
            conn = self._own()
            try:
                return self._read_catalogue(conn, sql, params)
            except self._connect.errors() as e:
                raise self._connect.error(e, sql, self.timeout_s) from None

    def _read_catalogue(self, conn: Any, sql: str, params: Any) -> list[tuple[Any, ...]]:
        """Run :meth:`_catalogue`'s ``sql`` on ``conn`` in a read-only transaction under the
        database's time budget.

        Raises:
            what :meth:`Connector.errors` names.
        """
        raise NotImplementedError

    def _own(self) -> Any:
        """This process's connection, opened again if the server dropped it."""
        conn = self._own_conn[0]
        if not self._connect.usable(conn):
            self._connect.close(conn)
            conn = self._own_conn[0] = self._connect()
        return conn

    def _remember(self, sql: str, reading: Any) -> None:
        """Keep what the check of the server's reading of ``sql`` needs of the check just made, so
        that the statement is parsed once."""
        with self._lock:
            self._checked[sql] = reading
            while len(self._checked) > REMEMBERED_CHECKS:
                self._checked.pop(next(iter(self._checked)))

    def _recall(self, sql: str) -> Any:
        """What :meth:`_remember` kept of ``sql``'s check; None when it was not checked here."""
        with self._lock:
            return self._checked.pop(sql, None)

    def _verifier(self, sql: str) -> Callable[[Any], None]:
        """The check of the server's reading of ``sql`` (already checked by :meth:`check`)."""
        raise NotImplementedError

    def _run_statement(self, conn: Any, sql: str, parameters: Parameters, limits: Limits,
                       verify: Callable[[Any], None] | None) -> StatementRun:
        """Run ``sql`` on ``conn`` in its own read-only transaction, after ``verify`` of the
        server's reading when given.

        Raises:
            Stopped: the statement was stopped from outside; what the driver raised; SqlError.
        """
        raise NotImplementedError

    def _execute(self, sql: str, tree: exp.Expr, parameters: Parameters, limits: Limits,
                 client: Hashable | None) -> QueryResult:
        budget = limits.budget
        client = self.client if client is None else client
        start = time.monotonic()
        session = self._pool.acquire_within(client, budget, sql, what="connection", units="connections")
        try:
            conn = session.connection()
            left = limits._replace(budget=max(budget - (time.monotonic() - start), 0.001))
            return self._run_on(session, conn, sql, parameters, left, budget)
        except _Closed:
            raise closed_error(sql) from None
        finally:
            self._pool.release(session)

    def _run_on(self, session: Session, conn: Any, sql: str, parameters: Parameters, limits: Limits,
                budget: float) -> QueryResult:
        try:
            columns, rows, truncated, elapsed, replace = self._run_statement(
                conn, sql, parameters, limits, self._verifier(sql))
        except Stopped:
            session.discard(replace=True)
            raise budget_spent(budget, sql) from None
        except self._connect.errors() as e:
            if self._pool.closed:
                raise closed_error(sql) from None
            if self._connect.broken(conn, e):
                session.discard(replace=True)  # stopped or broken: the next statement gets a fresh one
            raise self._connect.error(e, sql, budget) from None
        if replace:
            session.discard(replace=True)
        return QueryResult(sql=sql, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)

    def _checked_own(self, sql: str) -> str:
        """The text of one of sqlchorus's own reads to run, after the engine's check of it."""
        raise NotImplementedError

    def _lookup(self, sql: str, parameters: Parameters, limits: Limits) -> QueryResult:
        text = self._checked_own(sql)
        with self._lock:
            conn = self._own()
            try:
                columns, rows, truncated, elapsed, replace = self._run_statement(conn, text, parameters, limits, None)
            except Stopped:
                self._connect.close(conn)  # opened again for the next lookup
                raise budget_spent(limits.budget, text) from None
            except self._connect.errors() as e:
                raise self._connect.error(e, text, limits.budget) from None
            if replace:
                self._connect.close(conn)  # stopped from outside, or a capped result: opened again next time
        return QueryResult(sql=text, columns=columns, rows=rows, truncated=truncated, elapsed_ms=elapsed)
