"""A guarded MySQL or MariaDB database: the same guard as the others, built from the server's parts.

A read-only transaction alone does not hold on MySQL and MariaDB: ``SELECT ... INTO OUTFILE``,
``GET_LOCK`` and user variables are not transactional, several statements sent as one text run
one after the other (``START TRANSACTION READ ONLY; COMMIT; INSERT ...`` writes), and sqlglot's
reading of a statement is not the server's (an executable comment ``/*! ... */`` is code to the
server). So the guard rests on what the server itself reads, resolves and permits, in layers,
none of which has to be perfect:

1. the server's rules of reading text (:func:`~sqlchorus.tools.engines.mysql_check.check_text`): no
   executable comment or optimizer hint, variable, ``INTO``, row lock, ``PROCEDURE``, sequence
   or second statement, and every call checked against the functions of
   :data:`~sqlchorus.tools.engines.mysql_check.ALLOWED_FUNCTIONS` (the dangerous ones named with the
   reason: ``LOAD_FILE``, ``SLEEP``, ``BENCHMARK``, ``GET_LOCK`` and the other lock functions,
   stored and user-defined functions); then sqlglot's reading (``dialect="mysql"``): exactly one
   query, nothing that writes anywhere in it, only tables of the pinned database (no
   ``information_schema``, ``mysql``, ``performance_schema``, ``sys`` or other database, no table
   MariaDB's sequence engine makes up);
2. the server's reading (:func:`~sqlchorus.tools.engines.mysql_check.check_note`): inside the
   statement's own read-only transaction and under its time limit, ``EXPLAIN EXTENDED`` and the
   note the server prints with it show every call as the server resolved it and every column
   with its database; anything not allowed is refused before the statement runs;
3. one statement per call: the driver does not ask for several (no ``CLIENT_MULTI_STATEMENTS``),
   so the server refuses a second one;
4. every statement runs in its own ``START TRANSACTION READ ONLY`` on a session whose default
   is read-only, with the SQL mode pinned (so that text reads as checked) and recursion bounded;
   after it the connection is reset (``COM_RESET_CONNECTION``: locks, variables, temporary
   tables and prepared statements gone) and the settings put back;
5. the user: :meth:`MySQLDatabase.user_write_reasons` says what the connected user could do (any
   privilege on every database, such as ``FILE``, ``SUPER`` or ``PROCESS``; a privilege past
   reading on the database; any on another database; a routine, a proxy or the grant option);
   such a user is refused unless ``allow_writable_role``, and then every run is warned of what
   no guard can stop;
6. a time limit the server enforces per statement (``SET STATEMENT max_statement_time = s FOR``
   on MariaDB, ``max_execution_time`` on MySQL); at the budget plus
   :data:`~sqlchorus.tools.engines.base.KILL_GRACE_S`, ``KILL QUERY`` from a second connection; if
   the statement still runs :data:`~sqlchorus.tools.engines.base.TERMINATE_AFTER_S` later,
   ``KILL CONNECTION`` and the socket shut, the connection replaced;
7. rows are read unbuffered (the server streams them) and capped in rows and bytes as they come;
   a capped result's connection is dropped rather than read to its end.

The user that should be used is a read-only one, made once by an administrator (:data:`READONLY_USER_SQL`;
``reader`` and ``db`` stand for yours, and a ``_`` or ``%`` in the database's name is written ``\\_``
or ``\\%``, since GRANT reads them as wildcards)::

    CREATE USER 'reader'@'%' IDENTIFIED BY '...';
    GRANT SELECT, SHOW VIEW ON `db`.* TO 'reader'@'%';

A database is named ``mysql://user@host:3306/db`` (or ``mariadb://``); the password comes from
the URL, else the ``[client]`` group of ``~/.my.cnf``, else ``MYSQL_PWD``, as for the ``mysql``
client, and is never shown. PyMySQL (``pip install 'sqlchorus[mysql]'``) is imported when a
database is opened, so that this module imports without it.
"""

from __future__ import annotations

import configparser
import os
import re
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from sqlglot import exp
from typing_extensions import Unpack

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.engines import base
from sqlchorus.tools.engines.duckdb_guard import plain
from sqlchorus.tools.engines.names import redact_url
from sqlchorus.tools.engines.mysql_check import (
    ALLOWED_FUNCTIONS,
    REFUSED_FUNCTIONS,
    SYSTEM_SCHEMAS,
    check_note,
    check_text,
    sequence_table,
)
from sqlchorus.tools.engines.catalog import Column, ForeignKey, Table
from sqlchorus.tools.sql.errors import (
    DatabaseOpenError,
    ExecutionError,
    ForbiddenError,
    NotAQueryError,
    SqlError,
)
from sqlchorus.tools.engines.sqlite_guard import capped_rows

__all__ = [
    "ALLOWED_FUNCTIONS", "INSTALL_HINT", "MYSQL_SCHEMES", "MySQLDatabase", "READONLY_USER_SQL", "REFUSED_FUNCTIONS",
    "check_mysql_query", "mysql_error", "readonly_user_sql", "redact_url",
]

INSTALL_HINT = "pip install 'sqlchorus[mysql]'"
MYSQL_SCHEMES = ("mysql://", "mariadb://")

CONNECT_TIMEOUT_S = 10
"""How long opening a connection may take (an unreachable host otherwise waits minutes)."""
FETCH_BATCH = 256
MAX_RECURSION = 1000
"""Iterations a recursive common table expression may make (MySQL's own default for
``cte_max_recursion_depth``; MariaDB's ``max_recursive_iterations`` is four billion)."""
OPTION_FILE = "~/.my.cnf"
"""The option file whose ``[client]`` group gives what a URL leaves out, as for ``mysql``."""
MAX_ROLES = 32
"""Roles followed at most when reading what a user may do (roles can be granted to roles)."""

_COM_RESET_CONNECTION = 0x1F
_READ_ONLY_PRIVILEGES = frozenset({"SELECT", "SHOW VIEW", "USAGE"})
_TEXT_MODES = frozenset({"ANSI_QUOTES", "PIPES_AS_CONCAT", "NO_BACKSLASH_ESCAPES", "IGNORE_SPACE", "ANSI",
                         "ORACLE", "MSSQL", "DB2", "POSTGRESQL", "MAXDB", "HIGH_NOT_PRECEDENCE", "EMPTY_STRING_IS_NULL",
                         "SIMULTANEOUS_ASSIGNMENT", "TIME_ROUND_FRACTIONAL"})
"""SQL modes that change how text reads (quotes, ``||``, backslashes, spaces before ``(``, other
dialects' syntax): removed from the session's mode, so that the server reads a statement as the
checks did."""

READONLY_USER_SQL = """\
CREATE USER 'reader'@'%' IDENTIFIED BY '...';
GRANT SELECT, SHOW VIEW ON `db`.* TO 'reader'@'%';"""
"""The statements that make a read-only user (``reader`` on database ``db``). ``SHOW VIEW`` lets
the server explain a query that reads a view, which the guard's second reading needs."""


def readonly_user_sql(database: str) -> str:
    """:data:`READONLY_USER_SQL` for ``database``, its ``_`` and ``%`` escaped (GRANT reads them as
    wildcards: ``concert_singer`` would match ``concertXsinger`` too)."""
    name = database.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%").replace("`", "``")
    return READONLY_USER_SQL.replace("`db`", f"`{name}`")


# -- names ---------------------------------------------------------------------------------------



def _product(url: str) -> str:
    return "MariaDB" if url.lower().startswith("mariadb://") else "MySQL"


def _option_file() -> dict[str, str]:
    """The ``[client]`` group of :data:`OPTION_FILE`, values unquoted; empty when there is none."""
    path = os.path.expanduser(OPTION_FILE)
    if not os.path.isfile(path):
        return {}
    parser = configparser.RawConfigParser(allow_no_value=True, strict=False, inline_comment_prefixes=("#", ";"))
    try:
        with open(path, encoding="utf-8") as f:
            # !include lines are the server's business; the client group is all that is read here.
            parser.read_string("".join(line for line in f if not line.lstrip().startswith("!")))
    except (OSError, UnicodeDecodeError, configparser.Error):
        return {}
    if not parser.has_section("client"):
        return {}
    out = {}
    for key, value in parser.items("client"):
        value = (value or "").strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.replace("-", "_")] = value
    return out


def connection_parameters(url: str) -> dict[str, Any]:
    """What PyMySQL is given to connect to the database of ``url``: what the URL says, else the
    option file's ``[client]`` group, else the environment (``MYSQL_PWD``, ``MYSQL_HOST``,
    ``MYSQL_TCP_PORT``, ``USER``), as for the ``mysql`` client.

    Raises:
        DatabaseOpenError: not a ``mysql://``/``mariadb://`` URL, a port that is not a number, an
            option the guard does not know, or no database named.
    """
    location = redact_url(url)
    product = _product(url)
    if not url.lower().startswith(MYSQL_SCHEMES):
        raise DatabaseOpenError(f"Not a {product} URL (mysql://user@host:port/database): {location}")
    parts = urlsplit(url)
    options = _option_file()
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - {"unix_socket", "socket", "connect_timeout", "password", "passwd"})
    if unknown:
        raise DatabaseOpenError(f"Cannot open the {product} database {location}: unknown option "
                                f"{', '.join(unknown)} (known: unix_socket, connect_timeout)")
    try:
        port = parts.port
    except ValueError:
        netloc_port = parts.netloc.rpartition("@")[2].rpartition(":")[2]
        raise DatabaseOpenError(f"Cannot open the {product} database {location}: invalid port "
                                f"\"{netloc_port}\" (a number is expected)") from None
    password = unquote(parts.password) if parts.password is not None else None
    if password is None:
        password = query.get("password", query.get("passwd"))
    if password is None:
        password = options.get("password", options.get("passwd"))
    if password is None:
        password = os.environ.get("MYSQL_PWD")
    database = unquote(parts.path.lstrip("/")) or options.get("database") or ""
    if not database:
        raise DatabaseOpenError(f"Cannot open the {product} database {location}: the URL names no database "
                                "(mysql://user@host:port/database)")
    socket_path = query.get("unix_socket") or query.get("socket")
    host = unquote(parts.hostname) if parts.hostname else options.get("host") or os.environ.get("MYSQL_HOST") \
        or "localhost"
    if socket_path is None and not parts.hostname and options.get("socket"):
        socket_path = options["socket"]
    try:
        port = port or int(options.get("port") or os.environ.get("MYSQL_TCP_PORT") or 3306)
        timeout = int(query.get("connect_timeout") or CONNECT_TIMEOUT_S)
    except ValueError:
        raise DatabaseOpenError(f"Cannot open the {product} database {location}: a port or timeout that is not "
                                "a number") from None
    user = unquote(parts.username) if parts.username else options.get("user") or os.environ.get("USER") or ""
    params: dict[str, Any] = {"host": host, "port": port, "user": user, "password": password or "",
                              "database": database, "connect_timeout": timeout}
    if socket_path:
        params["unix_socket"] = socket_path
    return params


# -- what a query may do -------------------------------------------------------------------------

def check_mysql_query(sql: str, *, database: str | None = None, tables: frozenset[str] | None = None) -> exp.Expr:
    """The parsed statement (sqlglot's tree) if it is one MySQL query the guard lets run.

    First as the server reads text (:func:`~sqlchorus.tools.engines.mysql_check.check_text`); then as
    sqlglot reads it (``dialect="mysql"``): one query, nothing that writes or locks anywhere in
    it, no table of another database than ``database`` (the server's own above all), and no
    table MariaDB's sequence engine makes up (``seq_1_to_1000000``) unless ``tables`` (the
    database's) has one of that name.

    Raises:
        NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
    """
    text = base.bounded_text(sql)  # before either reading
    try:
        tree = base.check_single_query(text.rstrip(";").rstrip() or text, dialect="mysql")
    except NotAQueryError as e:
        if e.message.startswith("The SQL does not parse"):
            # sqlglot reads no INTO OUTFILE or LOAD DATA; a clause the reading of the text
            # refuses says more than "does not parse".
            check_text(text, functions=False)
        raise
    except (IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
        # sqlglot's builders of some functions fail this way on arguments they do not expect.
        raise NotAQueryError(f"The SQL does not parse: {type(e).__name__}.", sql=sql) from None
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    check_text(text, not_calls=ctes)
    for node in tree.walk():
        if isinstance(node, exp.Lock):
            raise ForbiddenError("The query locks rows (FOR UPDATE, FOR SHARE), which the guard does not allow; it "
                                 "was refused.", sql=sql)
        base.refuse_writing(node, sql, into="INTO")
        if isinstance(node, (exp.Parameter, exp.SessionParameter)):
            raise ForbiddenError("The query uses a variable, which the guard does not allow; it was refused.", sql=sql)
    known = {t.lower() for t in tables} if tables is not None else set()
    lowered_ctes = {c.lower() for c in ctes}
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Func) or not table.name:
            raise ForbiddenError("The query reads a table made by a function, which the guard does not allow; it "
                                 "was refused.", sql=sql)
        name, db, catalog = table.name, table.db, table.catalog
        full = ".".join(p for p in (catalog, db, name) if p)
        if catalog or (db and db.lower() in SYSTEM_SCHEMAS):
            what = "a table of the server's catalogue" if (db or catalog).lower() in SYSTEM_SCHEMAS | {"def"} else \
                "a table of another database"
            raise ForbiddenError(f"The query reads {full}, {what}, which the guard does not allow; it was refused.",
                                 sql=sql)
        if db and database is not None and db != database:
            raise ForbiddenError(f"The query reads {full}, a table of another database than {database}, which the "
                                 "guard does not allow; it was refused.", sql=sql)
        if not db and sequence_table(name) and name.lower() not in known | lowered_ctes:
            raise ForbiddenError(f"The query reads {name}, a table MariaDB's sequence engine makes up (as many rows "
                                 "as it is asked for), which the guard does not allow; it was refused.", sql=sql)
    return tree


def _bind(sql: str, parameters: tuple[Any, ...] | dict[str, Any]) -> str:
    """``sql`` with its ``%s`` (or ``%(name)s``) placeholders replaced by the values, escaped as
    PyMySQL escapes them: the guard then checks the very text the server is sent."""
    from pymysql.converters import escape_item

    if isinstance(parameters, dict):
        return sql % {k: escape_item(v, "utf8mb4") for k, v in parameters.items()}
    return sql % tuple(escape_item(v, "utf8mb4") for v in parameters)


# -- errors --------------------------------------------------------------------------------------

_TIMEOUT_CODES = frozenset({1969, 3024, 1317})
"""max_statement_time exceeded (MariaDB), max_execution_time exceeded (MySQL), interrupted (KILL QUERY)."""
_FORBIDDEN_CODES = frozenset({1792, 1142, 1143, 1044, 1045, 1227, 1370, 1290, 1568, 1238, 1621, 1794, 1095})
_RESOURCE_CODES = frozenset({1104, 1037, 1038, 1041, 1114, 1021, 1030, 3636, 1436, 1135, 1205})
_GONE_CODES = frozenset({2006, 2013, 2003, 2055, 1053, 1927, 4031, 2014})


def _code_message(exc: BaseException) -> tuple[int, str]:
    args: tuple[Any, ...] = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[0], int):
        return args[0], str(args[1]).strip().splitlines()[0] if str(args[1]).strip() else type(exc).__name__
    text = str(exc).strip()
    return 0, text.splitlines()[0] if text else type(exc).__name__


def mysql_error(exc: BaseException, sql: str, budget: float, product: str = "MySQL") -> SqlError:
    """The typed error of a statement the server refused or failed (``exc``, a PyMySQL error or a
    socket error), for a ``budget``-second budget."""
    code, message = _code_message(exc)
    if code == 1345:
        return ExecutionError(f"The server will not explain a query over a view without SHOW VIEW ({message}), "
                              "and the guard runs none it has not seen explained: grant the user SHOW VIEW on the "
                              "database (GRANT SELECT, SHOW VIEW ON `db`.* TO ...).", sql=sql)
    gone = code in _GONE_CODES or isinstance(exc, OSError) or (code == 0 and "InterfaceError" in type(exc).__name__)
    kind = ("timeout" if code in _TIMEOUT_CODES else "forbidden" if code in _FORBIDDEN_CODES
            else "resource" if code in _RESOURCE_CODES else "gone" if gone else "")
    return base.server_error(kind, message, sql, budget, product)


def _open_error(exc: BaseException, location: str, password: str | None, product: str) -> DatabaseOpenError:
    """One line saying why a connection could not be opened, with no password in it."""
    code, message = _code_message(exc)
    if code == 2003:
        message = re.sub(r"\s*\(\[Errno \d+\]\s*", " (", message)
        message += ". Is the server running on that host and accepting TCP/IP connections on that port?"
    return base.open_failed(product, location, message, password)


def _pymysql() -> Any:
    return base.driver("pymysql", f"MySQL and MariaDB support is not installed: {INSTALL_HINT}")


# -- connections ---------------------------------------------------------------------------------


def _close_quietly(conn) -> None:
    """Close ``conn`` without reading what the server may still be sending (a capped result, a
    statement stopped half-way): the rest of an unbuffered result is given up, not drained."""
    result = getattr(conn, "_result", None)
    if result is not None:
        result.unbuffered_active = False
    try:
        conn.close()
    except Exception:
        try:
            conn._force_close()
        except Exception:
            pass


def _shut_socket(conn) -> None:
    """Shut ``conn``'s socket under PyMySQL, so that a thread waiting on it gets an error now (the
    connection is then replaced; closing it from another thread would not be safe)."""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _watch(conn, after: float, opener: _Opener) -> base.Watch:
    """The stop from outside of the statement of ``conn``: at ``after`` seconds ``KILL QUERY``
    from a connection of its own; if the statement still runs, ``KILL CONNECTION`` and the socket
    shut."""
    try:
        thread = conn.thread_id()
    except Exception:
        thread = None

    def kill(connection: bool) -> None:
        if thread is not None:
            try:
                opener.kill(thread, connection=connection)
            except Exception:
                pass  # the server may be gone: the second step shuts the socket

    def end() -> None:
        kill(True)
        _shut_socket(conn)

    return base.Watch(after, lambda: kill(False), end, hold_cancel=False)


def _run(conn, sql: str, budget: float, row_cap: int, byte_cap: int, *, opener: _Opener, verify=None,
         ) -> tuple[list[str], list[tuple[Any, ...]], bool, float, bool]:
    """Run one query on ``conn`` in its own read-only transaction, rows streamed unbuffered, under
    its time limit and caps: ``(columns, rows, truncated, elapsed_ms, replace)``, where ``replace``
    says the connection is not to be used again (killed from outside, or left in the middle of a
    capped result). ``verify`` is given the server's reading of the statement (``EXPLAIN
    EXTENDED``'s note, in the same transaction, under the same limit) before it runs, and raises
    to refuse it. Afterwards the connection is reset, so that nothing of the statement outlives
    it there.

    Raises:
        pymysql.err.Error, OSError: what the server or the connection raised.
        Stopped: the statement was stopped from outside (its connection is not to be reused).
        SqlError: what ``verify`` raised.
    """
    pymysql = _pymysql()
    start = time.monotonic()
    deadline = start + budget
    watch = _watch(conn, budget + base.KILL_GRACE_S, opener)
    left = lambda: max(deadline - time.monotonic(), 0.001)  # noqa: E731
    truncated = False
    try:
        cur = conn.cursor()
        cur.execute("START TRANSACTION READ ONLY")
        if verify is not None:
            cur.execute(opener.limited(cur, opener.explain + sql, left()))
            cur.fetchall()
            cur.execute("SHOW WARNINGS")
            notes = [str(r[2]) for r in cur.fetchall() if len(r) >= 3 and r[1] == 1003]
            verify(notes[-1] if notes else None)
        stream = conn.cursor(pymysql.cursors.SSCursor)
        stream.execute(opener.limited(stream, sql, left()))
        columns = [d[0] for d in stream.description or ()]
        rows, truncated = capped_rows(lambda count: stream.fetchmany(min(FETCH_BATCH, row_cap + 1 - count)),
                                      row_cap, byte_cap, plain)
        if not truncated:
            stream.close()
            cur.execute("COMMIT")
    except Exception as e:
        watch.stop()
        if watch.terminated or (watch.fired and not conn.open):
            raise base.Stopped() from e
        gone = isinstance(e, OSError) or (isinstance(e, pymysql.err.Error) and _code_message(e)[0] in _GONE_CODES)
        if conn.open and not gone:
            try:
                conn.rollback()
                opener.reset(conn)
            except Exception:
                _close_quietly(conn)  # broken: the session replaces it
        raise
    watch.stop()
    replace = truncated or watch.fired
    if not replace:
        opener.reset(conn)
    return columns, rows, truncated, (time.monotonic() - start) * 1000.0, replace


class _Opener(base.Connector):
    """Opens guarded sessions for one database: read-only by default, SQL mode pinned, recursion
    bounded."""

    def __init__(self, params: dict[str, Any], location: str, product: str):
        self.params = params
        self.location = location
        self.product = product
        self.mariadb: bool | None = None
        self.sql_mode: str | None = None
        self.version = ""

    @property
    def explain(self) -> str:
        # MariaDB prints its reading of the statement with EXPLAIN EXTENDED; MySQL with EXPLAIN.
        return "EXPLAIN EXTENDED " if self.mariadb else "EXPLAIN "

    def raw(self):
        """A connection with no settings applied (for KILL)."""
        pymysql = _pymysql()
        try:
            return pymysql.connect(**self.params, charset="utf8mb4", autocommit=True, local_infile=False,
                                   program_name="sqlchorus")
        except pymysql.err.Error as e:
            raise _open_error(e, self.location, self.params.get("password"), self.product) from None
        except OSError as e:
            raise _open_error(e, self.location, self.params.get("password"), self.product) from None

    def __call__(self):
        pymysql = _pymysql()
        conn = self.raw()
        try:
            if self.mariadb is None:
                # MariaDB puts "5.5.5-" before its version for old replication clients.
                self.version = re.sub(r"^5\.5\.5-", "", conn.get_server_info() or "")
                self.mariadb = "mariadb" in self.version.lower()
                self.product = "MariaDB" if self.mariadb else "MySQL"
                with conn.cursor() as cur:
                    cur.execute("SELECT @@SESSION.sql_mode")
                    modes = str(cur.fetchone()[0] or "").split(",")
                self.sql_mode = ",".join(m for m in modes if m and m.upper() not in _TEXT_MODES)
            self.settle(conn)
        except pymysql.err.Error as e:
            _close_quietly(conn)
            raise _open_error(e, self.location, self.params.get("password"), self.product) from None
        return conn

    def settle(self, conn) -> None:
        """Put the session's settings on ``conn``: read-only by default, the SQL mode the checks
        read text by, recursion bounded."""
        with conn.cursor() as cur:
            if self.mariadb:
                cur.execute("SET SESSION sql_mode = %s, tx_read_only = 1, max_recursive_iterations = %s",
                            (self.sql_mode, MAX_RECURSION))
            else:
                cur.execute("SET SESSION sql_mode = %s, transaction_read_only = 1, cte_max_recursion_depth = %s",
                            (self.sql_mode, MAX_RECURSION))

    def limited(self, cur, text: str, seconds: float) -> str:
        """``text`` under a time limit the server enforces: on MariaDB, ``SET STATEMENT
        max_statement_time = s FOR text`` (for that statement only); on MySQL, the session's
        ``max_execution_time`` set first (the server applies it to each SELECT)."""
        if self.mariadb:
            return f"SET STATEMENT max_statement_time = {max(seconds, 0.001):.3f} FOR {text}"
        cur.execute(f"SET SESSION max_execution_time = {max(1, int(seconds * 1000))}")
        return text

    def reset(self, conn) -> None:
        """Leave nothing of the last statement on ``conn``: ``COM_RESET_CONNECTION`` ends its
        locks (``GET_LOCK``), user variables, temporary tables, prepared statements and session
        settings, keeping the database; then the settings again."""
        conn._execute_command(_COM_RESET_CONNECTION, b"")
        conn._read_ok_packet()
        self.settle(conn)

    def kill(self, thread_id: int, connection: bool) -> None:
        """``KILL QUERY`` (or ``KILL CONNECTION``) ``thread_id`` from a connection of its own: a
        user may kill its own sessions' statements."""
        conn = self.raw()
        try:
            with conn.cursor() as cur:
                cur.execute(f"KILL {'CONNECTION' if connection else 'QUERY'} {int(thread_id)}")
        finally:
            _close_quietly(conn)

    def usable(self, conn) -> bool:
        return conn.open

    def close(self, conn) -> None:
        _close_quietly(conn)

    def interrupt(self, conn) -> None:
        _shut_socket(conn)

    def backend(self, conn) -> int | None:
        return conn.thread_id() if conn.open else None

    def errors(self) -> tuple[type[BaseException], ...]:
        return (_pymysql().err.Error, OSError)

    def error(self, exc: BaseException, sql: str, budget: float) -> SqlError:
        return mysql_error(exc, sql, budget, self.product)

    def broken(self, conn, exc: BaseException) -> bool:
        return not conn.open


def _grant_parts(line: str) -> tuple[list[str], str, bool] | None:
    """The privileges, the target and whether the grant option comes with them, of one line of
    ``SHOW GRANTS`` (``GRANT SELECT, INSERT ON `db`.* TO ...``); None for a line that grants a role."""
    match = re.match(r"GRANT (?P<privs>.+?) ON (?P<target>.+?) TO ", line)
    if match is None:
        return None
    privs, depth, current = [], 0, ""
    for ch in match.group("privs"):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            privs.append(current.strip())
            current = ""
        else:
            current += ch
    privs.append(current.strip())
    # A column list ("SELECT (a, b)") is the privilege on those columns.
    privs = [re.sub(r"\s*\(.*\)$", "", p).upper() for p in privs if p]
    return privs, match.group("target").strip(), "WITH GRANT OPTION" in line.upper()


def _unquote_name(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "`'\"":
        text = text[1:-1].replace(text[0] * 2, text[0])
    return text


def _split_target(target: str) -> tuple[str, str, str]:
    """``(kind, database, object)`` of a grant's target: kind ``global``, ``database``,
    ``table`` or ``routine``; names unquoted, and ``\\_``/``\\%`` read as the characters."""
    kind = "table"
    upper = target.upper()
    for word in ("PROCEDURE ", "FUNCTION ", "PACKAGE BODY ", "PACKAGE "):
        if upper.startswith(word):
            kind, target = "routine", target[len(word):]
            break
    if target.strip() == "*.*":
        return "global", "*", "*"
    parts = re.findall(r"`(?:[^`]|``)*`|[^.`]+", target)
    db = _unquote_name(parts[0]) if parts else ""
    obj = _unquote_name(parts[1]) if len(parts) > 1 else "*"
    db = db.replace("\\_", "_").replace("\\%", "%")
    if obj == "*" and kind == "table":
        kind = "database"
    return kind, db, obj


class MySQLDatabase(base.ServerDatabase):
    """A guarded, read-only, time- and size-bounded MySQL or MariaDB database (see the module's text).

    Args:
        url: ``mysql://user@host:port/database`` or ``mariadb://...``; the password comes from the
            URL, else ``~/.my.cnf`` (``[client]``), else ``MYSQL_PWD``.
        timeout_s, max_rows, max_bytes, tracer, workers, client_workers, prestart: as for
            :class:`~sqlchorus.tools.engines.sqlite.GuardedDatabase`; ``workers`` counts connections.
        allow_writable_role: open even when the user could write or reach past the database
            (:meth:`user_write_reasons`); the reasons are then kept on ``write_warnings`` and
            :attr:`run_warning` says what no guard can stop under such a user. Without it such a
            user is refused, with the SQL that makes a read-only one.
        require_readonly_role: refuse such a user even when ``allow_writable_role`` is given.

    Attributes:
        write_warnings: what the user could do past reading, for the caller to show (empty for a
            read-only user).
        server: ``MariaDB`` or ``MySQL``, as the server says; ``version`` its version text.

    Raises:
        DatabaseOpenError: PyMySQL is missing, the URL is malformed, the server cannot be reached,
            the login is refused, the database does not exist, or the user could write and
            ``allow_writable_role`` is not given.
        ValueError: ``workers`` or ``client_workers`` out of range.
    """

    engine = "mysql"
    dialect = "mysql"
    _who = "user"
    _harm = ("a user with FILE can read and write the server's files, one with SUPER can end other sessions and "
             "change the server's settings")
    _connect: _Opener

    def __init__(self, url: str, *, require_readonly_role: bool = False, allow_writable_role: bool = False,
                 **options: Unpack[base.GuardOptions]):
        pooling = self._configure(**options)
        self._location = redact_url(url)
        self.write_warnings: list[str] = []
        self.limit_warnings: list[str] = []
        params = connection_parameters(url)
        _pymysql()
        self.name = params["database"]
        self._login = params["user"]
        self._start(_Opener(params, self._location, _product(url)), pooling,
                    require_readonly_role or not allow_writable_role, readonly_user_sql(self.name))

    # -- opening -----------------------------------------------------------------------------

    def _learn(self) -> None:
        self.server = self._connect.product
        self.version = self._connect.version
        self._tables = self._table_names()
        self.write_warnings = self.user_write_reasons()

    def _read_catalogue(self, conn, sql: str, params: Any) -> list[tuple[Any, ...]]:
        pymysql = _pymysql()
        try:
            with conn.cursor() as cur:
                cur.execute("START TRANSACTION READ ONLY")
                cur.execute(self._connect.limited(cur, sql, self.timeout_s), params)
                rows = list(cur.fetchall())
                cur.execute("COMMIT")
                return rows
        except (pymysql.err.Error, OSError):
            if conn.open:
                try:
                    conn.rollback()
                except Exception:
                    _close_quietly(conn)
            raise

    def _table_names(self) -> frozenset[str]:
        rows = self._catalogue("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                               (self.name,))
        return frozenset(str(r[0]) for r in rows)

    def _grants(self, who: str | None = None) -> list[str]:
        sql = "SHOW GRANTS" if who is None else f"SHOW GRANTS FOR {who}"
        pymysql = _pymysql()
        with self._lock:
            conn = self._own()
            try:
                with conn.cursor() as cur:
                    cur.execute(sql)
                    return [str(r[0]) for r in cur.fetchall()]
            except (pymysql.err.Error, OSError) as e:
                raise mysql_error(e, sql, self.timeout_s, self._connect.product) from None

    def user_write_reasons(self) -> list[str]:
        """What the connected user could do past reading the database, each as a phrase; empty for
        a user that can only read it. Read from ``SHOW GRANTS`` (its own, then each role's it was
        granted, enabled or not): any privilege on every database (``*.*``) but ``USAGE``; on the
        database, any privilege but ``SELECT`` and ``SHOW VIEW``; on another database or its
        tables, any; a routine's privileges; ``PROXY``; the grant option."""
        reasons: list[str] = []
        seen_roles: set[str] = set()
        pending: list[str | None] = [None]
        while pending and len(seen_roles) <= MAX_ROLES:
            who = pending.pop(0)
            try:
                lines = self._grants(who)
            except SqlError:
                if who is None:
                    raise
                reasons.append(f"it was granted the role {who}, whose privileges it may not show")
                continue
            for line in lines:
                parts = _grant_parts(line)
                if parts is None:
                    role = re.match(r"GRANT (.+?) TO ", line)
                    if role and line.upper().startswith("GRANT ") and " ON " not in line.upper():
                        for name in role.group(1).split(","):
                            name = name.strip()
                            if name and name not in seen_roles:
                                seen_roles.add(name)
                                pending.append(name)
                    continue
                reasons += self._reasons_of(*parts, role=who)
        out: list[str] = []
        for reason in reasons:
            if reason not in out:
                out.append(reason)
        return out

    def _reasons_of(self, privs: list[str], target: str, grant_option: bool, role: str | None) -> list[str]:
        kind, db, obj = _split_target(target)
        via = f" (through the role {role})" if role else ""
        out = []
        if "PROXY" in privs:
            out.append(f"it may act as another user (PROXY){via}")
            privs = [p for p in privs if p != "PROXY"]
        if not privs:
            pass
        elif kind == "global":
            beyond = [p for p in privs if p != "USAGE"]
            if beyond:
                out.append(f"it has {', '.join(beyond)} on every database (*.*){via}")
        elif kind == "routine":
            out.append(f"it may run or change the routine {db}.{obj}{via}")
        elif db != self.name:
            where = f"database {db}" if kind == "database" else f"{db}.{obj}"
            out.append(f"it has {', '.join(privs)} on {where}, past {self.name}{via}")
        else:
            beyond = [p for p in privs if p not in _READ_ONLY_PRIVILEGES]
            if beyond:
                where = f"database {db}" if kind == "database" else f"{obj}"
                out.append(f"it has {', '.join(beyond)} on {where}{via}")
        if grant_option:
            out.append(f"it may grant its privileges to other users (GRANT OPTION on {target}){via}")
        return out

    def read_structure(self) -> list[Table]:
        """The tables and views of the database, from ``information_schema``: columns with their
        types, NOT NULL and primary keys, foreign keys (one :class:`ForeignKey` per column pair of a
        compound key, to tables of the same database), and comments as descriptions. Only
        relations the user may read (the catalogue shows no others)."""
        relations = self._catalogue(
            "SELECT TABLE_NAME, TABLE_TYPE = 'VIEW', TABLE_COMMENT FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = %s ORDER BY TABLE_NAME", (self.name,))
        columns = self._catalogue(
            "SELECT c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE = 'NO', c.COLUMN_COMMENT, "
            "EXISTS (SELECT 1 FROM information_schema.KEY_COLUMN_USAGE k WHERE k.TABLE_SCHEMA = c.TABLE_SCHEMA "
            "        AND k.TABLE_NAME = c.TABLE_NAME AND k.COLUMN_NAME = c.COLUMN_NAME "
            "        AND k.CONSTRAINT_NAME = 'PRIMARY') "
            "FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = %s ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION",
            (self.name,))
        keys = self._catalogue(
            "SELECT TABLE_NAME, COLUMN_NAME, REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME "
            "FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
            "AND REFERENCED_TABLE_SCHEMA = %s AND REFERENCED_TABLE_NAME IS NOT NULL "
            "ORDER BY TABLE_NAME, CONSTRAINT_NAME, ORDINAL_POSITION", (self.name, self.name))
        by_name: dict[str, Table] = {}
        out = []
        for name, is_view, comment in relations:
            # A view's comment is the server's word "VIEW", not a description.
            description = None if is_view or not comment else str(comment)
            table = Table(name=str(name), columns=[], description=description, is_view=bool(is_view))
            by_name[table.name] = table
            out.append(table)
        for table_name, name, type_, not_null, comment, primary in columns:
            owner = by_name.get(str(table_name))
            if owner is not None:
                owner.columns.append(Column(name=str(name), type=str(type_), primary_key=bool(primary),
                                            not_null=bool(not_null), description=str(comment) if comment else None))
        for table_name, column, ref_table, ref_column in keys:
            owner = by_name.get(str(table_name))
            if owner is not None:
                owner.foreign_keys.append(ForeignKey(column=str(column), ref_table=str(ref_table),
                                                     ref_column=str(ref_column)))
        self._tables = frozenset(by_name) | self._tables
        return out

    # -- checking and executing --------------------------------------------------------------

    def check(self, sql: str) -> exp.Expr:
        """The parsed statement, if it is one query the guard lets run (:func:`check_mysql_query`).

        Raises:
            NotAQueryError (SqlTooLongError, SqlTooDeepError), ForbiddenError.
        """
        tree = check_mysql_query(sql, database=self.name, tables=self._tables)
        # What the check of the server's reading needs of this one, so that it is parsed once.
        self._remember(sql, frozenset(c.alias_or_name for c in tree.find_all(exp.CTE)))
        return tree

    def _verifier(self, sql: str) -> Callable[[Any], None]:
        ctes = self._recall(sql)
        if ctes is None:  # not checked by this database first: its common table expressions from sqlglot
            try:
                ctes = frozenset(c.alias_or_name for t in sql_text.parse(sql.strip(), dialect="mysql") if t
                                 for c in t.find_all(exp.CTE))
            except SqlError:
                ctes = frozenset()

        def verify(note: str | None) -> None:
            if note is None:
                raise ForbiddenError("The server gave no reading of the query to check, so it was refused.", sql=sql)
            try:
                check_note(note, sql, database=self.name, not_calls=ctes)
            except NotAQueryError:
                raise ForbiddenError("The server's reading of the query could not be checked, so it was refused.",
                                     sql=sql) from None

        return verify

    def _bind(self, sql: str, parameters: base.Parameters) -> tuple[str, base.Parameters]:
        """``parameters`` fill ``%s`` placeholders, escaped into the text before the check, so
        that the text checked is the text run."""
        return (_bind(sql, parameters) if parameters else sql), ()

    def _run_statement(self, conn, sql: str, parameters: base.Parameters, limits: base.Limits,
                       verify: Callable[[Any], None] | None) -> base.StatementRun:
        return _run(conn, sql.strip().rstrip(";").rstrip(), *limits, opener=self._connect, verify=verify)

    def _checked_own(self, sql: str) -> str:
        """sqlchorus's own reads are written in standard SQL, names in double quotes as every other
        engine reads them; they are carried into MySQL's (backquoted names, ``CAST(x AS CHAR)``,
        ``CHAR_LENGTH``) and then checked, and run under the same read-only transaction, time
        limit and caps."""
        import sqlglot

        try:
            text = sqlglot.transpile(sql, read=None, write="mysql")[0]
        except sqlglot.errors.SqlglotError:
            raise NotAQueryError("The SQL text does not parse.", sql=sql) from None
        check_mysql_query(text, database=self.name, tables=self._tables)
        return text

    def explain_query_plan(self, sql: str, *, timeout_s: float | None = None) -> base.QueryResult:
        """The server's ``EXPLAIN FORMAT=JSON`` of one read query: the plan, never a run. The
        statement is checked first like one to run (its reading by the server included), then
        explained in a read-only transaction under the time limit.

        Returns:
            Rows ``(line, detail)``: the plan's line number and the line.
        """
        self.check(sql)
        verify = self._verifier(sql)
        budget = self.timeout_s if timeout_s is None else timeout_s
        text = "EXPLAIN FORMAT=JSON " + sql.strip().rstrip(";").rstrip()
        pymysql = _pymysql()
        start = time.monotonic()
        with self._lock:
            conn = self._own()
            watch = _watch(conn, budget + base.KILL_GRACE_S, self._connect)
            try:
                with conn.cursor() as cur:
                    cur.execute("START TRANSACTION READ ONLY")
                    cur.execute(self._connect.limited(cur, self._connect.explain + sql.strip().rstrip(";"), budget))
                    cur.fetchall()
                    cur.execute("SHOW WARNINGS")
                    notes = [str(r[2]) for r in cur.fetchall() if len(r) >= 3 and r[1] == 1003]
                    verify(notes[-1] if notes else None)
                    cur.execute(self._connect.limited(cur, text, budget))
                    plan = "\n".join(str(r[0]) for r in cur.fetchall())
                    cur.execute("COMMIT")
                self._connect.reset(conn)
            except (pymysql.err.Error, OSError, SqlError) as e:
                watch.stop()
                if conn.open:
                    try:
                        conn.rollback()
                        self._connect.reset(conn)
                    except Exception:
                        _close_quietly(conn)
                if isinstance(e, SqlError):
                    raise
                if watch.fired:
                    _close_quietly(conn)
                    raise base.budget_spent(budget, text) from None
                raise mysql_error(e, text, budget, self._connect.product) from None
            finally:
                watch.stop()
        return base.plan_result(text, plan.splitlines(), (time.monotonic() - start) * 1000.0)
