"""The DuckDB connection's settings, and the worker process that runs guarded DuckDB statements.

:class:`~sqlchorus.tools.engines.duckdb.DuckDatabase` runs every statement in a worker process
(this module run as a script, ``python -I duckdb_guard.py``), because DuckDB checks for an
interrupt between vectors only: one call over one huge value (``list_sort(range(300000000))``,
``len(range(2000000000))``) ran on for over a minute after ``interrupt()``, and
``repeat('x', 2000000000)`` grew the process to 4 GB past a 512 MB ``memory_limit`` (strings
and lists built by a function are not all counted by DuckDB's buffer manager). In a worker, the
parent kills the process at the deadline, and an address-space limit (:data:`ADDRESS_SPACE_EXTRA`
past DuckDB's own ``memory_limit``) turns such an allocation into an out-of-memory error.

Inside the worker the connection is opened by :func:`open_guarded`: read-only, external access
off (no files, no network, no extensions), the configuration locked so that no statement can
change it, no temporary directory (a sort or join that outgrows ``memory_limit`` fails instead
of spilling to disk), a bounded number of threads. Each statement runs under a timer that
interrupts it at its budget, and its rows are fetched in batches and capped in rows and bytes,
converted to plain values (:func:`plain`).

This module imports built-in modules only at its top (``duckdb`` when a connection is opened),
so that :mod:`sqlchorus.tools.engines.duckdb` imports without DuckDB installed, and it shares
:mod:`sqlchorus.tools.engines.sqlite_guard`'s (built-in only) message framing and result caps: messages
are ``marshal``-ed tuples of plain values.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import os
import sys
import threading
import time
import uuid
from typing import Any, BinaryIO

if __package__:
    from sqlchorus.tools.engines.sqlite_guard import answer, capped_rows, send
else:  # run as a worker script, in isolated mode: the same helpers from the file beside this one
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "sqlite_guard", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sqlite_guard.py"))
    assert _spec is not None and _spec.loader is not None  # a .py file's spec, with its loader
    _shared = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_shared)
    answer, capped_rows, send = _shared.answer, _shared.capped_rows, _shared.send

MEMORY_LIMIT_BYTES = 512 * 1024 * 1024
"""DuckDB's memory per connection at most (its buffer manager's ``memory_limit``)."""

ADDRESS_SPACE_EXTRA = 1024 * 1024 * 1024
"""The worker's address space beyond ``memory_limit``: the interpreter, DuckDB's code and the
values functions build outside the buffer manager. An allocation past it fails."""

THREADS = 1
"""DuckDB's threads per connection: one, so that a statement's work is bounded by its worker."""

FETCH_BATCH = 256


def settings(memory_limit: int = MEMORY_LIMIT_BYTES, threads: int = THREADS) -> dict[str, Any]:
    """The configuration every guarded DuckDB connection is opened with (only settings DuckDB 1.1
    and later know; ``lock_configuration`` last in meaning: nothing can be changed afterwards)."""
    return {
        # Before enable_external_access, which refuses any change of the temporary directory.
        "temp_directory": "",
        "max_temp_directory_size": "0B",
        "access_mode": "READ_ONLY",
        "enable_external_access": False,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
        "allow_unsigned_extensions": False,
        "allow_persistent_secrets": False,
        "memory_limit": f"{int(memory_limit)}B",
        "threads": int(threads),
        "python_enable_replacements": False,
        "lock_configuration": True,
    }


def open_guarded(path: str, memory_limit: int = MEMORY_LIMIT_BYTES, threads: int = THREADS):
    """Open ``path`` read-only under :func:`settings`.

    Raises:
        duckdb.Error: the file cannot be opened (missing, locked by a writer, not DuckDB's).
    """
    import duckdb

    config = settings(memory_limit, threads)
    known = _known_settings(duckdb)
    if known is not None:
        config = {k: v for k, v in config.items() if k in known}
    return duckdb.connect(path, read_only=True, config=config)


def _known_settings(duckdb) -> set[str] | None:
    """The names of the settings this DuckDB knows (an older one lacks a few of ours)."""
    try:
        probe = duckdb.connect(":memory:", config={"enable_external_access": False})
        try:
            return {r[0] for r in probe.execute("SELECT name FROM duckdb_settings()").fetchall()}
        finally:
            probe.close()
    except Exception:
        return None


def plain(value: Any) -> Any:
    """A value as the rest of sqlchorus sees SQLite's, so that results compare and serialise
    alike whatever the engine: a DECIMAL as an int when integral, else a float; dates, times,
    timestamps, intervals and UUIDs as their text; bytes as bytes; a LIST as a list and a STRUCT
    or MAP as a dict (keys as text), their items converted the same way."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        return float(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time, _dt.timedelta, uuid.UUID)):
        return str(value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return str(value)


def run(conn, sql: str, parameters: Any, budget: float, row_cap: int, byte_cap: int,
        ) -> tuple[list[str], list[tuple[Any, ...]], bool, float]:
    """Run one statement on a cursor of ``conn``, interrupted at ``budget`` seconds, its rows
    capped: ``(columns, rows, truncated, elapsed_ms)``.

    Raises:
        duckdb.Error: what DuckDB raised (``InterruptException`` at the budget).
    """
    start = time.monotonic()
    cur = conn.cursor()
    timer = threading.Timer(max(budget, 0.0), cur.interrupt)
    timer.daemon = True
    timer.start()
    try:
        cur.execute(sql, parameters or None)
        columns = [d[0] for d in cur.description or ()]
        rows, truncated = capped_rows(lambda _: cur.fetchmany(FETCH_BATCH), row_cap, byte_cap, plain)
    finally:
        timer.cancel()
        cur.close()
    return columns, rows, truncated, (time.monotonic() - start) * 1000.0


def error_kind(exc: BaseException) -> str:
    """DuckDB's name for an error's class (``InterruptException``, ``PermissionException``...),
    which the parent maps to a typed error."""
    return type(exc).__name__


# -- the worker ------------------------------------------------------------------------------------


def _limit_address_space(memory_limit: int) -> None:
    try:
        import resource
    except ImportError:  # not on this platform: DuckDB's memory_limit and the deadline still hold
        return
    cap = int(memory_limit) + ADDRESS_SPACE_EXTRA
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ValueError, OSError):
        pass


def serve(path: str, memory_limit: int, threads: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Answer ``("run", sql, parameters, budget, row_cap, byte_cap)`` requests until the stream ends.

    Replies ``("ok", columns, rows, truncated, elapsed_ms)`` or ``("error", message, kind)``
    (``kind``: DuckDB's error class name). The first reply says whether the database opened:
    ``("ready",)`` or ``("error", message, kind)``.
    """
    _limit_address_space(memory_limit)
    try:
        conn = open_guarded(path, memory_limit, threads)
    except Exception as e:
        send(stdout, ("error", str(e), error_kind(e)))
        return

    def reply(sql: str, parameters: Any, budget: float, row_cap: int, byte_cap: int) -> tuple:
        try:
            return ("ok", *run(conn, sql, parameters, budget, row_cap, byte_cap))
        except MemoryError:
            raise  # answered as out of memory
        except Exception as e:
            return ("error", str(e), error_kind(e))

    answer(stdin, stdout, reply, "OutOfMemoryException")


def worker_command(path: str, memory_limit: int = MEMORY_LIMIT_BYTES, threads: int = THREADS,
                   packages: str = "") -> list[str]:
    """The command that starts a worker for ``path``: this file, run by this interpreter in
    isolated mode; ``packages`` is the folder DuckDB was imported from here, added to the
    worker's path so that it finds the same DuckDB where isolated mode would not look (a user's
    site folder, ``PYTHONPATH``)."""
    return [sys.executable, "-I", os.path.abspath(__file__), str(path), str(int(memory_limit)), str(int(threads)),
            packages]


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[4] and sys.argv[4] not in sys.path:
        sys.path.append(sys.argv[4])
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.stdin.buffer, sys.stdout.buffer)
