"""Checkpoints and run records in PostgreSQL, shared by every server pointed at the database;
:func:`open_checkpoints` opens the store a setting names, a SQLite file or a PostgreSQL URL.

LangGraph's Postgres saver keeps the checkpoints (it already stores each channel's value once per
version); :class:`~sqlchorus.core.checkpoints.RunRecords` keeps the rest in tables of the same
database. Several ``sqlchorus serve`` processes given the same ``postgresql://`` URL share runs:
one started on any of them can be read, cancelled or resumed on any other.
Needs the ``postgres`` extra: ``pip install 'sqlchorus[postgres]'``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlchorus.core.checkpoints import (
    STATUS_COLUMNS,
    TABLES,
    CheckpointFileError,
    RunCheckpoints,
    RunRecords,
    is_database_url,
)
from sqlchorus.tools.errors import EXIT_NO_ANSWER, SqlchorusError

try:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as e:  # pragma: no cover - depends on the extra being installed
    psycopg = None
    PostgresSaver = object
    ConnectionPool = object
    MISSING: str | None = f"Checkpoints in PostgreSQL need the postgres extra: pip install 'sqlchorus[postgres]' ({e})."
else:
    MISSING = None

POOL_SIZE = 8
"""Connections one process keeps open to the database at most."""
CONNECT_TIMEOUT_S = 10
PING_TIMEOUT_S = 3
"""How long a try of a database that is away may take."""
STORE_TIMEOUT_S = 5.0
"""How long a statement waits for a connection of the pool while the database answers (every
connection busy)."""
WAIT_BEFORE_ASKING_S = 0.25
"""How long a statement waits for a connection of the pool before the database itself is tried:
a database that went away is found out this soon (and a connection attempt's time later), not
after ``STORE_TIMEOUT_S``."""
SEEN_FOR_S = 1.0
"""A database that answered a try this recently is not tried again for a statement that waits."""
_SETUP_LOCK = 0x5C1C0405
"""The advisory lock that keeps two servers starting at once from creating the tables together."""


def redacted(url: str) -> str:
    """``url`` without its password, to show in messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


class PoolBusyError(SqlchorusError, PoolTimeout if MISSING is None else Exception):
    """The database answers, but no connection of the pool came free in time."""

    kind = "store_busy"
    exit_code = EXIT_NO_ANSWER
    http_status = 503


class AnsweringPool(ConnectionPool):
    """A connection pool whose wait for a connection ends at once when the database is away.

    psycopg's pool, when its connections are found broken (the server stopped), makes new ones
    in the background and lets a statement wait the whole pool timeout for one, however soon
    each attempt is refused. Here a statement that has waited :data:`WAIT_BEFORE_ASKING_S`
    tries the database itself (one attempt at a time for all of them, and none while the
    database answered within :data:`SEEN_FOR_S`): refused, the statement fails with the
    database's own reason; answering, it waits on for a connection of the pool as before.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._asking = threading.Lock()
        self._answered_at = 0.0

    def getconn(self, timeout: float | None = None) -> Any:
        timeout = self.timeout if timeout is None else timeout
        first = min(timeout, WAIT_BEFORE_ASKING_S)
        try:
            return super().getconn(first)
        except PoolTimeout:
            if first >= timeout:
                raise
        self.ask_database()
        try:
            return super().getconn(timeout - first)
        except PoolTimeout as e:
            # Busy, or gone meanwhile: only a database that answers now makes it busy.
            self.ask_database(fresh=True)
            raise PoolBusyError(f"no connection of the pool came free in {timeout:g} s") from e

    def ask_database(self, fresh: bool = False) -> None:
        """Connect to the database once, unless it answered lately (``fresh``: whenever).

        Raises:
            psycopg.OperationalError: it cannot be reached.
        """
        with self._asking:
            if not fresh and time.monotonic() - self._answered_at < SEEN_FOR_S:
                return
            kwargs = {**(self.kwargs or {}), "connect_timeout": PING_TIMEOUT_S}
            psycopg.connect(self.conninfo, **kwargs).close()
            self._answered_at = time.monotonic()


class PostgresRunCheckpoints(RunRecords, PostgresSaver):
    """LangGraph's Postgres checkpointer with sqlchorus's run records, over a connection pool.

    Raises:
        CheckpointFileError: the database cannot be reached or its tables cannot be made.
    """

    db_errors = (psycopg.Error,) if psycopg is not None else ()
    CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    # The Postgres saver keeps values in its blobs, never as references; a store's values table
    # is read for references all the same, should a value ever be kept there.
    VALUE_SOURCES = ("SELECT checkpoint::text FROM checkpoints",)

    def __init__(self, url: str):
        self.url = url
        self.path = redacted(url)
        if MISSING:
            raise CheckpointFileError(MISSING)
        try:
            # One connection first: a server that is not there is one clear error, at once.
            psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
            # check: a connection the database dropped (it restarted) is found and replaced
            # before a statement runs on it, instead of failing the first requests after.
            pool = AnsweringPool(
                url, min_size=1, max_size=POOL_SIZE, open=True, timeout=STORE_TIMEOUT_S,
                check=ConnectionPool.check_connection, reconnect_timeout=0,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                        "connect_timeout": CONNECT_TIMEOUT_S},
            )
            pool.wait(timeout=CONNECT_TIMEOUT_S)
        except (psycopg.Error, OSError) as e:
            raise CheckpointFileError(f"Cannot reach the checkpoint database {self.path}: {_first_line(e)}") from e
        super().__init__(pool)
        self.failed = None
        try:
            with pool.connection() as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (_SETUP_LOCK,))
                try:
                    self.setup()
                    for statement in TABLES.split(";"):
                        if statement.strip():
                            conn.execute(statement.replace("BLOB", "BYTEA"))
                    for column, sql_type in STATUS_COLUMNS.items():
                        conn.execute(f"ALTER TABLE sqlchorus_status ADD COLUMN IF NOT EXISTS {column} {sql_type}")
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK,))
        except psycopg.Error as e:
            pool.close()
            raise CheckpointFileError(f"{self.path} is not a usable checkpoint database: {_first_line(e)}") from e

    def close(self) -> None:
        self.conn.close()

    # The saver's own methods hold its lock while they use the pool; run records need no lock
    # of theirs, each statement being one transaction on a connection of its own.

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self.conn.connection() as conn:
            return [tuple(row.values()) for row in conn.execute(sql.replace("?", "%s"), params).fetchall()]

    def _write(self, sql: str, params: tuple = ()) -> None:
        with self.conn.connection() as conn:
            conn.execute(sql.replace("?", "%s"), params)

    def ping(self) -> None:
        if self.away:
            # A connection of its own, not the pool's: an answer at once, and the reason
            # (refused, no such host) instead of the pool's time limit.
            psycopg.connect(self.url, connect_timeout=PING_TIMEOUT_S).close()
            return
        super().ping()

    def busy(self, error: BaseException) -> bool:
        return isinstance(error, PoolBusyError)

    def _update(self, sql: str, params: tuple = ()) -> int:
        with self.conn.connection() as conn:
            return conn.execute(sql.replace("?", "%s"), params).rowcount

    def _batch(self, statements: list[tuple[str, tuple]]) -> None:
        with self.conn.connection() as conn, conn.transaction():
            for sql, params in statements:
                conn.execute(sql.replace("?", "%s"), params)

    def used_bytes(self) -> int | None:
        tables = (*self.CHECKPOINT_TABLES, *self.RECORD_TABLES, "sqlchorus_values")
        # The rows' own sizes: a table's size on disk stays until a vacuum, the rows' goes at once.
        return int(sum(self._rows(f"SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {table} t")[0][0]
                       for table in tables))

    def compact(self, vacuum: bool = False) -> None:
        """PostgreSQL's autovacuum reuses the space of removed rows; ``vacuum`` runs a plain
        ``VACUUM`` of the tables now (not ``VACUUM FULL``, which would lock out every server)."""
        if vacuum:
            with self.conn.connection() as conn:
                for table in (*self.CHECKPOINT_TABLES, *self.RECORD_TABLES, "sqlchorus_values"):
                    conn.execute(f"VACUUM {table}")

    def put(self, config, checkpoint, metadata, new_versions):
        return self._going_on(lambda versions: self._put(config, checkpoint, metadata, versions), config, checkpoint,
                              metadata, new_versions)

    def _put(self, config, checkpoint, metadata, versions):
        return super().put(config, checkpoint, metadata, versions)

    def put_writes(self, config, writes, task_id, task_path=""):
        self._going_on(lambda: super(PostgresRunCheckpoints, self).put_writes(config, writes, task_id, task_path),
                       config)

    def bytes_of(self, thread_id: str) -> int:
        """Bytes the thread's checkpoints, their values, pending writes and model calls take."""
        queries = (
            "SELECT COALESCE(SUM(pg_column_size(checkpoint) + pg_column_size(metadata)), 0) FROM checkpoints WHERE thread_id = ?",
            "SELECT COALESCE(SUM(pg_column_size(blob)), 0) FROM checkpoint_blobs WHERE thread_id = ?",
            "SELECT COALESCE(SUM(pg_column_size(blob)), 0) FROM checkpoint_writes WHERE thread_id = ?",
            "SELECT COALESCE(SUM(LENGTH(messages) + LENGTH(answer) + LENGTH(params) + LENGTH(usage)), 0) "
            "FROM sqlchorus_calls WHERE thread_id = ?",
        )
        return int(sum(self._rows(q, (thread_id,))[0][0] for q in queries))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def open_checkpoints(target: str | Path) -> RunRecords:
    """The checkpoint store ``target`` names: a SQLite file, or a PostgreSQL database by its
    ``postgresql://`` URL (shared by every server pointed at it).

    Raises:
        CheckpointFileError: the store cannot be opened or used.
    """
    if is_database_url(target):
        return PostgresRunCheckpoints(str(target))
    return RunCheckpoints(target)
