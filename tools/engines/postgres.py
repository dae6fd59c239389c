"""A guarded PostgreSQL database: the same guard as the SQLite one, built from PostgreSQL's parts.

A read-only transaction alone does not hold on PostgreSQL: ``SET TRANSACTION READ WRITE`` as a
transaction's first statement, ``SET default_transaction_read_only = off``, several statements
in one text sent by the simple protocol, ``pg_read_file`` or ``lo_import`` as a superuser and
``CREATE TEMP TABLE`` all get through one. And a reading of the text is not the server's:
``SELECT ('/etc/hostname').pg_read_file`` is PostgreSQL's own spelling of a call, which a parser
that does not know the types reads as a field. So the guard rests on what the server itself
resolves and permits, in layers, none of which has to be perfect:

1. the server's parser (:func:`~sqlchorus.tools.engines.postgres_check.check_statement`, libpg_query):
   exactly one query, every call, field selection, cast and operator checked against the
   functions of :data:`ALLOWED_FUNCTIONS` (the dangerous ones of :data:`REFUSED_FUNCTIONS`
   named with the reason), padding only as wide as written out, and names resolved against
   the server's catalogue; then sqlglot's reading: no writing statement anywhere, only tables
   of the pinned schema;
2. the server's plan (:func:`~sqlchorus.tools.engines.postgres_check.check_plan`): inside the
   statement's own read-only transaction and under its budget, ``EXPLAIN (VERBOSE, FORMAT
   JSON)`` shows every function the server resolved, however it was spelled, every cast and
   every relation; anything not allowed is refused before the statement runs;
3. the statement runs through the extended protocol (a server-side cursor), which the server
   itself refuses to run several statements through;
4. every statement runs in its own ``BEGIN READ ONLY`` transaction on a session opened with
   ``default_transaction_read_only=on``, ``search_path`` pinned, ``work_mem`` bounded (and
   ``temp_file_limit`` where the role may set it), so the server refuses writes too; after it,
   ``DISCARD ALL`` leaves nothing of it on the connection (locks, prepared statements,
   cursors, temporary objects, ``LISTEN``, settings) for the next statement;
5. the role: :meth:`PostgresDatabase.role_write_reasons` says what the connected role could do
   (a superuser, a role with write grants, CREATE or TEMP, membership of the roles that reach
   server files and programs or signal other sessions); such a role is refused unless
   ``allow_writable_role``, and then every run is warned of what no guard can stop;
6. a time budget per statement: ``SET LOCAL statement_timeout`` before it (and before each fetch,
   for what is left); at the budget plus :data:`~sqlchorus.tools.engines.base.KILL_GRACE_S` a
   cancel request from outside, and :data:`~sqlchorus.tools.engines.base.TERMINATE_AFTER_S`
   later the backend terminated (a role may signal its own) and the connection replaced, for a
   call the server would not interrupt;
7. results are fetched in batches from the server-side cursor and capped in rows and bytes.

The role that should be used is a read-only one, made once by an administrator (``reader``,
database ``db`` and schema ``public`` stand for yours)::

    CREATE ROLE reader LOGIN PASSWORD '...' NOSUPERUSER NOCREATEDB NOCREATEROLE;
    REVOKE ALL ON DATABASE db FROM PUBLIC;        -- CREATE and TEMP come from PUBLIC by default
    GRANT CONNECT ON DATABASE db TO reader;
    REVOKE CREATE ON SCHEMA public FROM PUBLIC;
    GRANT USAGE ON SCHEMA public TO reader;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
    ALTER ROLE reader SET temp_file_limit = '256MB';  -- only a superuser may set it for the role

psycopg (``pip install 'sqlchorus[postgres]'``) is imported when a database is opened, so that
this module imports without it.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import socket
import time
from collections.abc import Callable
from typing import Any

from sqlglot import exp
from typing_extensions import Unpack

from sqlchorus.tools.engines import base
from sqlchorus.tools.engines.duckdb_guard import plain
from sqlchorus.tools.engines.names import redact_url
from sqlchorus.tools.engines.postgres_check import (
    ALLOWED_FUNCTIONS,
    ALLOWED_TYPES,
    REFUSED_FUNCTIONS,
    ServerNames,
    check_plan,
    check_statement,
)
from sqlchorus.tools.engines.catalog import Column, ForeignKey, Table
from sqlchorus.tools.sql.errors import (
    DatabaseOpenError,
    ForbiddenError,
    NotAQueryError,
    SqlError,
)
from sqlchorus.tools.engines.sqlite_guard import capped_rows

__all__ = [
    "ALLOWED_FUNCTIONS", "ALLOWED_TYPES", "INSTALL_HINT", "PostgresDatabase", "READONLY_ROLE_SQL",
    "REFUSED_FUNCTIONS", "ServerNames", "check_postgres_query", "postgres_error", "redact_url",
]

_log = logging.getLogger(__name__)
_WARNED: set[str] = set()

INSTALL_HINT = "pip install 'sqlchorus[postgres]'"

WORK_MEM = "16MB"
"""Memory per sort or hash of a statement before it spills to temporary files."""
TEMP_FILE_LIMIT = "256MB"
"""Temporary file space per session, set where the role may (a superuser); others should have it
set on their role (:data:`READONLY_ROLE_SQL`)."""
IDLE_IN_TRANSACTION_S = 60
"""A session left inside a transaction (a client that died mid-fetch) is ended by the server."""
CONNECT_TIMEOUT_S = 10
"""How long opening a connection may take (an unreachable host otherwise waits minutes)."""
CANCEL_WAIT_S = 5.0
"""How long a cancel request sent from outside may take to reach the server."""
CLIENT_CHECK_MS = 1000
"""How often a backend running a statement checks that its client is still there
(``client_connection_check_interval``): one whose client has gone stops at its next step."""
FETCH_BATCH = 256

READONLY_ROLE_SQL = """\
CREATE ROLE reader LOGIN PASSWORD '...' NOSUPERUSER NOCREATEDB NOCREATEROLE;
REVOKE ALL ON DATABASE db FROM PUBLIC;
GRANT CONNECT ON DATABASE db TO reader;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader;
ALTER ROLE reader SET temp_file_limit = '256MB';"""
"""The statements that make a read-only role (``reader`` on database ``db``, schema ``public``)."""

# -- what a query may do -------------------------------------------------------------------------
# The lists and both readings of a statement (the server's parser, the server's plan) are in
# sqlchorus.tools.engines.postgres_check; this module adds the statement kinds and tables sqlglot reads,
# and runs the plan check inside each statement's transaction.

_OTHER_SCHEMAS = "pg_catalog information_schema pg_toast pg_temp".split()



def check_postgres_query(
    sql: str, *, schema: str = "public", functions: bool = True, tables: frozenset[str] | None = None,
    names: ServerNames | None = None, padding: list[str] | None = None,
) -> exp.Expr:
    """The parsed statement (sqlglot's tree) if it is one PostgreSQL query the guard lets run.

    First as PostgreSQL's own parser reads it (:func:`~sqlchorus.tools.engines.postgres_check.
    check_statement`, with ``names`` from the server's catalogue when known): one query, and
    when ``functions``, only the calls, field selections, casts and operators the guard allows.
    Then as sqlglot reads it (:func:`check_single_query`): no statement that writes or is not a
    read anywhere in it (a writing CTE, ``SELECT INTO``), no ``FOR UPDATE``/``FOR SHARE``, no
    table of another schema than ``schema`` (the catalogue: ``pg_*`` names resolve to
    ``pg_catalog`` whatever the search path, so an unqualified ``pg_*`` name that is not one of
    ``tables`` is refused too). ``padding``, when given, receives the padding functions the
    statement calls explicitly (for :func:`~sqlchorus.tools.engines.postgres_check.check_plan`).

    Raises:
        NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
    """
    text = base.bounded_text(sql)  # before either parser sees it
    called = check_statement(text, schema=schema, names=names, functions=functions)
    if padding is not None:
        padding.extend(called)
    try:
        tree = base.check_single_query(sql, dialect="postgres")
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
        # sqlglot's builders of some functions fail this way on arguments they do not expect.
        raise NotAQueryError(f"The SQL does not parse: {type(e).__name__}.", sql=sql) from None
    for node in tree.walk():
        if isinstance(node, exp.Lock):
            raise ForbiddenError("The query locks rows (FOR UPDATE/FOR SHARE), which the guard does not allow; "
                                 "it was refused.", sql=sql)
        base.refuse_writing(node, sql)
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    known = {t.lower() for t in tables} if tables is not None else None
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Func) or not table.name:
            continue  # a set-returning function in FROM: its call is checked with the functions
        db, catalog = table.db, table.catalog
        name = table.name
        full = ".".join(p for p in (catalog, db, name) if p)
        if db and db.lower() != schema.lower():
            raise ForbiddenError(f"The query reads {full}, a table outside schema {schema}, which the guard "
                                 "does not allow; it was refused.", sql=sql)
        if catalog:
            raise ForbiddenError(f"The query reads {full}, a table of another database, which the guard does "
                                 "not allow; it was refused.", sql=sql)
        if not db and name.lower() not in ctes and name.lower().startswith("pg_") and (
                known is None or name.lower() not in known):
            raise ForbiddenError(f"The query reads {name}, a table of the server's catalogue, which the guard "
                                 "does not allow; it was refused.", sql=sql)
    return tree


# -- errors --------------------------------------------------------------------------------------


def _primary(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    text = getattr(diag, "message_primary", None) if diag is not None else None
    return (text or str(exc) or type(exc).__name__).strip().splitlines()[0]


def postgres_error(exc: BaseException, sql: str, budget: float) -> SqlError:
    """The typed error of a statement PostgreSQL refused or failed (``exc``, a psycopg error), for
    a ``budget``-second budget."""
    import psycopg.errors as e

    message = _primary(exc)
    if isinstance(exc, e.QueryCanceled):
        kind = "timeout"
    elif isinstance(exc, (e.InsufficientPrivilege, e.ReadOnlySqlTransaction)):
        kind = "forbidden"
    elif isinstance(exc, (e.InsufficientResources, e.ProgramLimitExceeded, e.OutOfMemory, e.DiskFull,
                          e.ConfigurationLimitExceeded)):
        kind = "resource"
    elif isinstance(exc, (e.AdminShutdown, e.CrashShutdown, e.CannotConnectNow)) or (
            isinstance(exc, e.OperationalError) and not getattr(exc, "sqlstate", None)):
        kind = "gone"
    elif isinstance(exc, e.SyntaxError) and "cannot insert multiple commands" in message:
        kind = "several"
    else:
        kind = ""
    return base.server_error(kind, message, sql, budget, "PostgreSQL")


def _open_error(exc: BaseException, location: str, password: str | None) -> DatabaseOpenError:
    """One line saying why a connection could not be opened, with no password in it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(line if line.endswith((".", "?", "!", ":")) or i == len(lines) - 1 else line + "."
                    for i, line in enumerate(lines))
    # libpq says "connection to server at "h", port p failed: WHY" for each address it tried;
    # the last attempt's reason (with libpq's hint) is the one line worth showing, without the
    # server's severity word ("FATAL:").
    attempts = list(re.finditer(r"connection to server (?:at|on) .*? failed: ", text))
    reason = text[attempts[-1].end():] if attempts else (text or type(exc).__name__)
    return base.open_failed("PostgreSQL", location, re.sub(r"^(?:FATAL|ERROR):\s+", "", reason), password)


def _psycopg() -> Any:
    return base.driver("psycopg", f"PostgreSQL support is not installed: {INSTALL_HINT}")


# -- connections ---------------------------------------------------------------------------------


def _watch(conn, after: float, terminate=None) -> base.Watch:
    """PostgreSQL's stop from outside of the statement of ``conn``: at ``after`` seconds a cancel
    request; when ``terminate`` is given and the statement still runs, its backend terminated
    through ``terminate`` (a role may signal its own backends) and the socket shut."""
    try:
        pid = conn.info.backend_pid
    except Exception:
        pid = None

    def end() -> None:
        if pid is not None:
            try:
                terminate(pid)
            except Exception:
                pass  # the server may be gone: shutting the socket still frees the client
        _shut_socket(conn)

    return base.Watch(after, lambda: conn.cancel_safe(timeout=CANCEL_WAIT_S), None if terminate is None else end,
                      hold_cancel=True)


def _shut_socket(conn) -> None:
    """Shut ``conn``'s socket under libpq, so that a thread waiting on it gets an error now (the
    connection is then broken and replaced; closing it from another thread would not be safe)."""
    try:
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=os.dup(fd))
    except Exception:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


_cursor_names = itertools.count(1)

EXPLAIN = "EXPLAIN (VERBOSE, FORMAT JSON) "


def _set_timeout(conn, seconds: float) -> None:
    conn.execute(f"SET LOCAL statement_timeout = {max(1, int(seconds * 1000))}")


def _run(conn, sql: str, parameters: Any, budget: float, row_cap: int, byte_cap: int, *,
         verify=None, terminate=None, reset=None,
         ) -> tuple[list[str], list[tuple[Any, ...]], bool, float, bool]:
    """Run one query on ``conn`` in its own read-only transaction, through a server-side cursor,
    under its deadline and caps: ``(columns, rows, truncated, elapsed_ms, cancelled_from_outside)``.
    ``verify`` is given the server's plan of the statement (``EXPLAIN (VERBOSE, FORMAT JSON)``,
    in the same transaction, under the same budget) before it runs, and raises to refuse it.
    ``reset`` is called on the connection afterwards (``DISCARD ALL``), so that nothing of the
    statement outlives it there.

    Raises:
        psycopg.Error: what the server or the connection raised.
        Stopped: the statement was stopped from outside (its connection is not to be reused).
        SqlError: what ``verify`` raised.
    """
    start = time.monotonic()
    deadline = start + budget
    watch = _watch(conn, budget + base.KILL_GRACE_S, terminate)
    try:
        with conn.transaction():
            _set_timeout(conn, budget)
            if verify is not None:
                verify(conn.execute(EXPLAIN + sql, parameters or None).fetchone()[0])
            with conn.cursor(name=f"sqlchorus_{next(_cursor_names)}") as cur:
                cur.execute(sql, parameters or None)
                columns = [d.name for d in cur.description or ()]

                def fetch(count: int) -> list[tuple[Any, ...]]:
                    # What is left of the budget bounds each batch the server sends.
                    _set_timeout(conn, max(deadline - time.monotonic(), 0.001))
                    return cur.fetchmany(min(FETCH_BATCH, row_cap + 1 - count))

                rows, truncated = capped_rows(fetch, row_cap, byte_cap, plain)
    except Exception as e:
        watch.stop()
        if watch.terminated or (watch.fired and (conn.closed or conn.broken)):
            raise base.Stopped() from e
        if not (conn.closed or conn.broken) and reset is not None:
            _quiet_reset(conn, reset)
        raise
    watch.stop()
    if reset is not None and not watch.fired:
        reset(conn)
    return columns, rows, truncated, (time.monotonic() - start) * 1000.0, watch.fired


def _quiet_reset(conn, reset) -> None:
    try:
        reset(conn)
    except Exception:
        pass  # the statement's own error is the one to report; a broken connection is replaced


class _Opener(base.Connector):
    """Opens guarded sessions for one database: read-only by default, search path pinned, memory
    bounded."""

    product = "PostgreSQL"

    def __init__(self, url: str, kwargs: dict[str, Any], location: str, password: str | None,
                 limit_warnings: list[str]):
        self.url = url
        self.kwargs = kwargs
        self.location = location
        self.password = password
        self.limit_warnings = limit_warnings
        self.sets_temp_limit: bool | None = None

    def __call__(self):
        psycopg = _psycopg()
        try:
            # No statement is prepared on the server by psycopg: DISCARD ALL after each statement
            # would leave its cache naming statements that no longer exist.
            conn = psycopg.connect(self.url, autocommit=True, prepare_threshold=None, **self.kwargs)
        except psycopg.Error as e:
            raise _open_error(e, self.location, self.password) from None
        try:
            conn.read_only = True  # psycopg's transaction() then issues BEGIN READ ONLY
            self.limit(conn)
            limit = conn.execute("SHOW temp_file_limit").fetchone()[0]
            if limit == "-1" and not self.limit_warnings:
                self.limit_warnings.append(
                    f"temp_file_limit is unlimited for role {conn.info.user}: a superuser should run "
                    f"ALTER ROLE {conn.info.user} SET temp_file_limit = '{TEMP_FILE_LIMIT}'")
        except psycopg.Error as e:
            conn.close()
            raise _open_error(e, self.location, self.password) from None
        return conn

    def limit(self, conn) -> None:
        """Set the limits the role may set on itself but not in its startup options."""
        psycopg = _psycopg()
        if self.sets_temp_limit is False:
            return
        try:
            conn.execute(f"SET temp_file_limit = '{TEMP_FILE_LIMIT}'")
            self.sets_temp_limit = True
        except psycopg.errors.InsufficientPrivilege:
            self.sets_temp_limit = False  # only a superuser may; otherwise it is set on the role, or warned about

    def reset(self, conn) -> None:
        """Leave nothing of the last statement on ``conn``: advisory locks, prepared statements,
        cursors, temporary objects, ``LISTEN`` and settings (``DISCARD ALL``), then the limits
        again (the startup options' settings come back by themselves)."""
        conn.execute("DISCARD ALL")
        if self.sets_temp_limit:
            self.limit(conn)

    def terminate(self, pid: int) -> None:
        """End the backend ``pid`` of this role from a connection of its own."""
        psycopg = _psycopg()
        with psycopg.connect(self.url, autocommit=True, prepare_threshold=None, **self.kwargs) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

    def usable(self, conn) -> bool:
        return not (conn.closed or conn.broken)

    def close(self, conn) -> None:
        base.close_quietly(conn)

    def interrupt(self, conn) -> None:
        conn.cancel_safe(timeout=CANCEL_WAIT_S)

    def backend(self, conn) -> int | None:
        return None if conn.closed else conn.info.backend_pid

    def errors(self) -> tuple[type[BaseException], ...]:
        return (_psycopg().Error,)

    def error(self, exc: BaseException, sql: str, budget: float) -> SqlError:
        return postgres_error(exc, sql, budget)

    def broken(self, conn, exc: BaseException) -> bool:
        # A statement cancelled from outside leaves the connection to be replaced too.
        return conn.closed or conn.broken or isinstance(exc, _psycopg().errors.QueryCanceled)


class PostgresDatabase(base.ServerDatabase):
    """A guarded, read-only, time- and size-bounded PostgreSQL database (see the module's text).

    Args:
        url: a libpq URL or conninfo (``postgresql://user@host:port/db``); libpq fills in what it
            leaves out from the ``PG*`` environment variables and the password file
            (``~/.pgpass`` or ``PGPASSFILE``).
        timeout_s, max_rows, max_bytes, tracer, workers, client_workers, prestart: as for
            :class:`~sqlchorus.tools.engines.sqlite.GuardedDatabase`; ``workers`` counts connections.
        allow_writable_role: open even when the role could write or reach the server
            (:meth:`role_write_reasons`); the reasons are then kept on ``write_warnings`` and
            :attr:`run_warning` says what no guard can stop under such a role. Without it such a
            role is refused, with the SQL that makes a read-only one.
        require_readonly_role: accepted for callers that ask for the default; it refuses such a
            role even when ``allow_writable_role`` is given.
        schema: the schema read; the search path is pinned to it.

    Attributes:
        write_warnings: what the role could write, for the caller to show (empty for a
            read-only role).
        limit_warnings: limits the role could not set on itself (``temp_file_limit``).

    Raises:
        DatabaseOpenError: psycopg is missing, the server cannot be reached, the login is refused,
            the database does not exist, or the role could write and ``allow_writable_role`` is
            not given.
        ValueError: ``workers`` or ``client_workers`` out of range.
    """

    engine = "postgresql"
    dialect = "postgres"
    _harm = "a superuser can read and write the server's files, run programs and end other sessions"
    _connect: _Opener

    def __init__(self, url: str, *, require_readonly_role: bool = False, allow_writable_role: bool = False,
                 schema: str = "public", **options: Unpack[base.GuardOptions]):
        pooling = self._configure(**options)
        self._location = redact_url(url)
        self.schema = schema
        self.write_warnings: list[str] = []
        self.limit_warnings: list[str] = []
        psycopg = _psycopg()
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as e:
            raise DatabaseOpenError(f"Not a PostgreSQL URL: {self._location} ({_primary(e)})") from None
        password = params.get("password")  # a URL's parts are text
        self._password = str(password) if password else None
        self.name = str(params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user")
                        or os.environ.get("PGUSER") or "")
        self._url = url
        options_text = " ".join(f"-c {k}={v}" for k, v in (
            ("default_transaction_read_only", "on"),
            ("statement_timeout", max(1, int(self.timeout_s * 1000))),
            ("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_S * 1000),
            ("work_mem", WORK_MEM),
            ("search_path", _quoted_option(schema)),
            ("lock_timeout", max(1, int(self.timeout_s * 1000))),
            ("client_connection_check_interval", CLIENT_CHECK_MS),
        ))
        self._connect_kwargs = {"options": options_text, "application_name": "sqlchorus",
                                "connect_timeout": params.get("connect_timeout") or CONNECT_TIMEOUT_S}
        connect = _Opener(url, self._connect_kwargs, self._location, self._password, self.limit_warnings)
        self._start(connect, pooling, require_readonly_role or not allow_writable_role, READONLY_ROLE_SQL)
        for warning in self.limit_warnings:  # the role's warning is said by every run (run_warning)
            if warning not in _WARNED:  # once per process: an eval opens many databases as one role
                _WARNED.add(warning)
                _log.warning("Warning: %s", warning)

    # -- opening -----------------------------------------------------------------------------

    def _learn(self) -> None:
        conn = self._own_conn[0]
        self.name = conn.info.dbname or self.name
        self._login = conn.info.user
        self._tables = self._table_names()
        self.write_warnings = self.role_write_reasons()
        self.names = self.server_names()

    def _read_catalogue(self, conn, sql: str, params: Any) -> list[tuple[Any, ...]]:
        with conn.transaction():
            _set_timeout(conn, self.timeout_s)
            return conn.execute(sql, params or None, binary=True).fetchall()

    def _table_names(self) -> frozenset[str]:
        rows = self._catalogue(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')", (self.schema,))
        return frozenset(r[0] for r in rows)

    def role_write_reasons(self) -> list[str]:
        """What the connected role could write, create or reach past the database, each as a
        phrase; empty for a role that can only read. Checked: superuser, CREATEROLE, CREATEDB,
        membership of the roles that reach server files or programs, signal other sessions or
        write all data, INSERT/UPDATE/DELETE/TRUNCATE on any table of the database, UPDATE on a
        sequence of the schema, CREATE on the database or the schema, and TEMP on the database."""
        reasons: list[str] = []
        row = self._catalogue(
            "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user")
        if row:
            name, superuser, createrole, createdb = row[0]
            if superuser:
                reasons.append(f"role {name} is a superuser")
            if createrole:
                reasons.append(f"role {name} may create roles (CREATEROLE)")
            if createdb:
                reasons.append(f"role {name} may create databases (CREATEDB)")
        members = self._catalogue(
            "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s) "
            "AND pg_has_role(current_user, oid, 'MEMBER') ORDER BY rolname",
            (["pg_write_server_files", "pg_read_server_files", "pg_execute_server_program",
              "pg_write_all_data", "pg_signal_backend"],))
        reasons += [f"it is a member of {r[0]}" for r in members]
        writable = self._catalogue(
            "SELECT p.priv, string_agg(CASE WHEN n.nspname = %s THEN c.relname "
            "                               ELSE n.nspname || '.' || c.relname END, ', ' ORDER BY n.nspname, c.relname) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p(priv) "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') "
            "AND n.nspname NOT LIKE 'pg_temp%%' AND n.nspname NOT LIKE 'pg_toast_temp%%' "
            "AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
            "AND (has_table_privilege(c.oid, p.priv) "
            "     OR (p.priv IN ('INSERT', 'UPDATE') AND has_any_column_privilege(c.oid, p.priv))) "
            "GROUP BY p.priv ORDER BY p.priv", (self.schema,))
        reasons += [f"it has {priv} on {_few(tables)}" for priv, tables in writable]
        sequences = self._catalogue(
            "SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, 'UPDATE') ELSE false END",
            (self.schema,))
        if sequences and sequences[0][0]:
            reasons.append(f"it may advance the sequences {_few(sequences[0][0])}")
        db_create, db_temp, schema_create = self._catalogue(
            "SELECT has_database_privilege(current_database(), 'CREATE'), "
            "has_database_privilege(current_database(), 'TEMP'), "
            "coalesce(has_schema_privilege(%s, 'CREATE'), false)", (self.schema,))[0]
        if db_create:
            reasons.append("it may create schemas in the database (CREATE on the database)")
        if schema_create:
            reasons.append(f"it may create tables in schema {self.schema} (CREATE on the schema)")
        if db_temp:
            reasons.append("it may create temporary tables (TEMP on the database)")
        return reasons

    def server_names(self) -> ServerNames:
        """What the server's catalogue says about names, for the checks: every function name of
        ``pg_catalog`` and of the schema, the schema's own functions, operators and types, and
        its relations' column names."""
        functions = self._catalogue(
            "SELECT DISTINCT p.proname, n.nspname = %s FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname IN ('pg_catalog', %s)", (self.schema, self.schema))
        columns = self._catalogue(
            "SELECT DISTINCT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND a.attnum > 0 "
            "AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f')", (self.schema,))
        operators = self._catalogue(
            "SELECT DISTINCT o.oprname FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace "
            "WHERE n.nspname = %s", (self.schema,))
        types = self._catalogue(
            "SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = %s",
            (self.schema,))
        return ServerNames(
            functions=frozenset(r[0] for r in functions),
            schema_functions=frozenset(r[0] for r in functions if r[1]),
            columns=frozenset(r[0] for r in columns),
            schema_operators=frozenset(r[0] for r in operators),
            schema_types=frozenset(r[0] for r in types),
        )

    def read_structure(self) -> list[Table]:
        """The tables and views of the schema, from the catalogue: columns with their types, NOT
        NULL and primary keys, foreign keys (one :class:`ForeignKey` per column pair of a compound
        key), and ``COMMENT ON`` comments as descriptions. Only relations the role may read."""
        relations = self._catalogue(
            "SELECT c.oid, c.relname, c.relkind IN ('v', 'm'), obj_description(c.oid, 'pg_class') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
            "AND has_table_privilege(c.oid, 'SELECT') AND NOT c.relispartition ORDER BY c.relname",
            (self.schema,))
        oids = [r[0] for r in relations]
        columns = self._catalogue(
            "SELECT a.attrelid, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
            "col_description(a.attrelid, a.attnum), "
            "EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = a.attrelid AND k.contype = 'p' "
            "        AND a.attnum = ANY(k.conkey)) "
            "FROM pg_attribute a WHERE a.attrelid = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attrelid, a.attnum", (oids,))
        keys = self._catalogue(
            "SELECT con.conrelid, a.attname, rc.relname, ra.attname "
            "FROM pg_constraint con "
            "CROSS JOIN LATERAL unnest(con.conkey, con.confkey) WITH ORDINALITY AS k(col, refcol, ord) "
            "JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.col "
            "JOIN pg_class rc ON rc.oid = con.confrelid "
            "JOIN pg_attribute ra ON ra.attrelid = con.confrelid AND ra.attnum = k.refcol "
            "WHERE con.contype = 'f' AND con.conrelid = ANY(%s) ORDER BY con.conrelid, con.conname, k.ord",
            (oids,))
        by_oid: dict[int, Table] = {}
        out = []
        for oid, name, is_view, comment in relations:
            table = Table(name=name, columns=[], description=comment or None, is_view=bool(is_view))
            by_oid[oid] = table
            out.append(table)
        for oid, name, type_, not_null, comment, primary in columns:
            by_oid[oid].columns.append(Column(name=name, type=type_, primary_key=bool(primary),
                                              not_null=bool(not_null), description=comment or None))
        for oid, column, ref_table, ref_column in keys:
            by_oid[oid].foreign_keys.append(ForeignKey(column=column, ref_table=ref_table, ref_column=ref_column))
        self._tables = frozenset(t.name for t in out) | self._tables
        return out

    # -- checking and executing --------------------------------------------------------------

    def check(self, sql: str) -> exp.Expr:
        """The parsed statement, if it is one query the guard lets run (:func:`check_postgres_query`).

        Raises:
            NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
        """
        padding: list[str] = []
        tree = check_postgres_query(sql, schema=self.schema, tables=self._tables, names=self.names, padding=padding)
        self._remember(sql, padding)  # what the plan check needs of this reading
        return tree

    def _verifier(self, sql: str) -> Callable[[Any], None]:
        """The check of the server's plan of ``sql`` (already checked by :meth:`check`)."""
        padding = self._recall(sql)
        if padding is None:
            padding = check_statement(sql.strip(), schema=self.schema, names=self.names)

        def verify(plan: Any) -> None:
            check_plan(plan, sql, schema=self.schema, names=self.names, padding=padding)

        return verify


    def _run_statement(self, conn, sql: str, parameters: base.Parameters, limits: base.Limits,
                       verify: Callable[[Any], None] | None) -> base.StatementRun:
        return _run(conn, sql, parameters, *limits, verify=verify, terminate=self._connect.terminate,
                    reset=self._connect.reset)

    def _checked_own(self, sql: str) -> str:
        """sqlchorus's own reads run under the same read-only transaction, time budget and caps;
        their functions are not checked against the list (the rest of the check still holds)."""
        check_postgres_query(sql, schema=self.schema, functions=False, tables=self._tables)
        return sql

    def explain_query_plan(self, sql: str, *, timeout_s: float | None = None) -> base.QueryResult:
        """PostgreSQL's ``EXPLAIN (FORMAT TEXT)`` of one read query: the plan, never a run (no
        ANALYZE). The statement is checked first like one to run, then explained in a read-only
        transaction under the time budget, through the extended protocol.

        Returns:
            Rows ``(line, detail)``: the plan's line number and the line.
        """
        self.check(sql)
        verify = self._verifier(sql)
        budget = self.timeout_s if timeout_s is None else timeout_s
        text = "EXPLAIN (FORMAT TEXT) " + sql.strip()
        psycopg = _psycopg()
        start = time.monotonic()
        with self._lock:
            conn = self._own()
            watch = _watch(conn, budget + base.KILL_GRACE_S, self._connect.terminate)
            try:
                with conn.transaction():
                    _set_timeout(conn, budget)
                    verify(conn.execute(EXPLAIN + sql.strip()).fetchone()[0])
                    lines = [r[0] for r in conn.execute(text, binary=True).fetchall()]
            except psycopg.Error as e:
                watch.stop()
                if watch.terminated or conn.broken:
                    conn.close()
                if watch.fired:
                    raise base.budget_spent(budget, text) from None
                raise postgres_error(e, text, budget) from None
            finally:
                watch.stop()
        return base.plan_result(text, lines, (time.monotonic() - start) * 1000.0)


def _few(names: str, most: int = 5) -> str:
    parts = names.split(", ")
    return ", ".join(parts[:most]) + (f" and {len(parts) - most} more" if len(parts) > most else "")


def _quoted_option(value: str) -> str:
    """A setting's value for libpq's ``options``: spaces and backslashes escaped."""
    return value.replace("\\", "\\\\").replace(" ", "\\ ")
