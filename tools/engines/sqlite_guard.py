"""The connection-level guard, and the worker process that runs guarded statements.

:class:`~sqlchorus.tools.engines.sqlite.GuardedDatabase` runs every statement in a worker process
(this module run as a script, ``python -I -S sqlite_guard.py``), so that a statement that outruns
its budget inside one long SQLite call (a ``printf`` with a huge width, ``instr`` over megabytes
built in the query) can be stopped from outside: the parent kills the worker at the deadline and
starts a fresh one for the next statement. Inside the worker, and on the parent's own connection
for schema lookups, the connection is guarded the same way:

* opened read-only (``mode=ro`` URI), extension loading off;
* an authorizer that allows reading only, and calls only of the functions in
  :data:`ALLOWED_FUNCTIONS` (every other function, and every virtual table or table-valued
  function, is refused and named);
* a progress handler that stops a statement at its deadline between virtual-machine steps;
* limits lowered to what answering questions needs (:data:`LIMITS`): the length of a value,
  of a LIKE pattern, of the SQL text, the depth of an expression, the terms of a compound select;
* temporary data kept in memory (``temp_store``), never in files, under a heap limit
  (:data:`HEAP_LIMIT_BYTES`, in the worker), so a sort that would outgrow it fails with a typed
  error instead of filling memory or disk;
* results capped in rows and bytes.

This module imports a few built-in modules only (no ``pathlib``, no ``pickle``: messages are
``marshal``-ed tuples of plain values), so a worker starts in about twenty milliseconds.
"""

from __future__ import annotations

import itertools
import marshal
import os
import sqlite3
import struct
import sys
import time
from collections.abc import Callable
from typing import IO, Any, BinaryIO

# -- what a query may do -------------------------------------------------------------------------

ALLOWED_FUNCTIONS: frozenset[str] = frozenset(
    # core scalar functions
    "abs char coalesce concat concat_ws format glob hex ifnull iif instr length like likelihood "
    "likely lower ltrim max min nullif octet_length printf quote random replace round rtrim sign "
    "soundex substr substring trim typeof unhex unicode unlikely upper".split()
    # date and time
    + "date time datetime julianday unixepoch strftime timediff current_date current_time "
    "current_timestamp".split()
    # aggregates
    + "avg count group_concat string_agg sum total".split()
    # window functions
    + "row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value "
    "nth_value".split()
    # math (SQLITE_ENABLE_MATH_FUNCTIONS)
    + "acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10 "
    "log2 mod pi pow power radians sin sinh sqrt tan tanh trunc".split()
    # JSON (values in, values out; nothing is written)
    + "json json_array json_array_length json_extract json_insert json_object json_patch json_quote "
    "json_remove json_replace json_set json_type json_valid json_group_array json_group_object "
    "jsonb jsonb_array jsonb_extract jsonb_insert jsonb_object jsonb_patch jsonb_remove "
    "jsonb_replace jsonb_set jsonb_group_array jsonb_group_object json_pretty json_error_position "
    "-> ->>".split()
)
"""Functions a query may call: SQLite's scalar, aggregate, window, date, math and JSON functions.
A name the linked SQLite does not offer is never called; see :data:`REFUSED_FUNCTIONS` for the
ones it offers that are refused, and why."""

REFUSED_FUNCTIONS: dict[str, str] = {
    "load_extension": "loads native code",
    "fts3_tokenizer": "registers or reveals a native pointer (a crash, or worse, follows)",
    "sqlite_log": "writes to the error log",
    "randomblob": "makes bytes no question asks for, and resource attacks of them",
    "zeroblob": "makes bytes no question asks for, and resource attacks of them",
    "changes": "says nothing about the data",
    "total_changes": "says nothing about the data",
    "last_insert_rowid": "says nothing about the data",
    "subtype": "internal to SQLite's extensions",
    "sqlite_compileoption_get": "reveals the build, not the data",
    "sqlite_compileoption_used": "reveals the build, not the data",
    "sqlite_source_id": "reveals the build, not the data",
    "sqlite_version": "reveals the build, not the data",
    "fts5": "full-text internals (full-text tables cannot be read through the guard)",
    "fts5_source_id": "full-text internals",
    "bm25": "full-text auxiliary function",
    "highlight": "full-text auxiliary function",
    "snippet": "full-text auxiliary function",
    "match": "full-text operator",
    "matchinfo": "full-text auxiliary function",
    "offsets": "full-text auxiliary function",
    "optimize": "full-text maintenance",
    "rtreecheck": "R-tree internals",
    "rtreedepth": "R-tree internals",
    "rtreenode": "R-tree internals",
}
"""Functions SQLite offers that a query may not call, each with the reason. Every function the
linked SQLite offers is in this table or in :data:`ALLOWED_FUNCTIONS` (a test checks it), so a
new SQLite's new functions are refused until reviewed."""

LOOKUP_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
     "foreign_key_list"}
)
"""PRAGMAs whose argument names a table or index: they only ever read."""

BARE_PRAGMAS = frozenset(
    {"database_list", "collation_list", "function_list", "compile_options", "schema_version",
     "user_version", "page_size", "page_count", "encoding"}
)
"""PRAGMAs that read when called bare and write when given a value: allowed bare only."""

_READING = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})

# -- limits --------------------------------------------------------------------------------------

MAX_SQL_CHARS = 20_000
"""The longest SQL text run: :data:`sqlchorus.tools.sql.text.MAX_SQL_CHARS`, written again because
this module runs as a script that imports nothing of the package (a test holds the two equal)."""

LIMITS: dict[int, int] = {
    sqlite3.SQLITE_LIMIT_LENGTH: 8 * 1024 * 1024,
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: MAX_SQL_CHARS * 4,  # bytes; UTF-8 is at most 4 per character
    sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 1_000,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 200,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 100,
    sqlite3.SQLITE_LIMIT_VDBE_OP: 1_000_000,
    sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 100,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER: 1_000,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
    sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0,
}
"""SQLite's run-time limits on a guarded connection: a value at most 8 MB, a LIKE pattern at most
1,000 bytes, the SQL text as long as the parse check allows, expressions 200 deep, 100 terms in
a compound select, and a program of at most a million operations."""

HEAP_LIMIT_BYTES = 1024 * 1024 * 1024
"""SQLite's memory in a worker at most: a sort or a temporary index that would need more fails
(``resource``) instead of spilling to disk or exhausting the machine."""

PROGRESS_STEPS = 1000
"""Virtual-machine steps between two checks of the deadline."""


class GuardState:
    """What a guarded connection's callbacks read and write: the running statement's deadline,
    and what the authorizer refused last (so the error can name it); and whether the database
    has shown text that is not UTF-8 (:func:`run` then decodes leniently from the start)."""

    __slots__ = ("deadline", "refused", "lenient_text")

    def __init__(self) -> None:
        self.deadline = float("inf")
        self.refused: str | None = None
        self.lenient_text = False


def authorize(state: GuardState, action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
    """The authorizer: reading, allowed functions and read-only PRAGMA lookups; nothing else."""
    if action in _READING:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        name = str(arg2 or "").lower()
        if name in ALLOWED_FUNCTIONS:
            return sqlite3.SQLITE_OK
        why = REFUSED_FUNCTIONS.get(name, "it is not on the list of allowed functions")
        state.refused = f"the function {arg2} ({why})"
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA:
        name = str(arg1 or "").lower()
        if name in LOOKUP_PRAGMAS or (name in BARE_PRAGMAS and arg2 is None):
            return sqlite3.SQLITE_OK
        state.refused = f"PRAGMA {arg1}" + (f" = {arg2}" if arg2 is not None and name in BARE_PRAGMAS else "")
        return sqlite3.SQLITE_DENY
    if action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE) and arg1 in (
        "sqlite_master", "sqlite_temp_master"
    ):
        # What SQLite asks for when a query opens a virtual table or a table-valued function.
        state.refused = "a virtual table or table-valued function"
        return sqlite3.SQLITE_DENY
    state.refused = "an operation other than reading"
    return sqlite3.SQLITE_DENY


def _file_uri(path: str) -> str:
    """A ``file:`` URI of an absolute path, with the characters a URI gives meaning escaped."""
    absolute = os.path.abspath(path)
    for char, code in (("%", "%25"), ("?", "%3F"), ("#", "%23")):
        absolute = absolute.replace(char, code)
    return "file:" + absolute


def _decode_text(raw: bytes) -> str:
    # TEXT columns with invalid UTF-8 (common in scraped benchmark data) must not crash a query.
    return raw.decode("utf-8", errors="replace")


def open_guarded(
    path: str, state: GuardState, *, heap_limit: int | None = None, max_value_bytes: int | None = None,
) -> sqlite3.Connection:
    """Open ``path`` read-only with the authorizer, progress handler and limits installed; a value
    may be at most ``max_value_bytes`` (and never more than :data:`LIMITS` allows).

    Raises:
        sqlite3.DatabaseError: the file cannot be opened as a database.
    """
    uri = f"{_file_uri(path)}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    conn.text_factory = _decode_text
    try:
        conn.enable_load_extension(False)
    except AttributeError:  # Python built without extension support: nothing to disable
        pass
    # Before the authorizer, which refuses every PRAGMA that sets something.
    conn.execute("PRAGMA temp_store = MEMORY")
    if heap_limit:
        conn.execute(f"PRAGMA hard_heap_limit = {int(heap_limit)}")  # process-wide: workers only
    for limit, value in LIMITS.items():
        conn.setlimit(limit, value)
    if max_value_bytes:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, min(LIMITS[sqlite3.SQLITE_LIMIT_LENGTH], max_value_bytes))
    conn.set_authorizer(lambda *args: authorize(state, *args))
    conn.set_progress_handler(lambda: 1 if time.monotonic() > state.deadline else 0, PROGRESS_STEPS)
    return conn


def value_size(value: Any) -> int:
    """A value's approximate size for the byte cap; lists and maps (other engines' values) count
    what they hold."""
    kind = type(value)
    if kind is str:  # the commonest first: an ASCII text (isascii is O(1)) is as long as its size
        return len(value) if value.isascii() else len(value.encode("utf-8", "replace"))
    if kind is int or kind is float:
        return 8
    if value is None:
        return 1
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace"))
    if isinstance(value, list):
        return 8 + sum(value_size(v) for v in value)
    if isinstance(value, dict):
        return 8 + sum(len(k) + value_size(v) for k, v in value.items())
    return 8


def capped_rows(fetch: Any, row_cap: int, byte_cap: int, convert: Any = None, *, flat: bool = False
                ) -> tuple[list[tuple[Any, ...]], bool]:
    """Rows from ``fetch(rows_so_far)`` (a batch a call, empty at the end), each value passed
    through ``convert`` when given, until ``row_cap`` rows or ``byte_cap`` bytes:
    ``(rows, truncated)``. Every engine's statement path caps its results here.

    ``flat`` says every value is None, a number, a text or a blob (SQLite's), whose bytes as
    :func:`value_size` counts them are at most twice what ``marshal`` (format 2, which writes
    every object whole, never a reference to one written before) takes for it: a text's UTF-8
    or a blob's bytes plus 5, 5 or more for an integer, 9 for a float, 1 for None. Then a batch
    is counted by that bound, made by C code a row at a time (no Python call a value, and no copy
    of more than a row), while the bound stays under ``byte_cap``; once it would not, the rows so
    far are measured exactly and the count goes on exactly, so the rows kept are the same either
    way.

    >>> batches = iter([[("abc", 1), (None, 2.5)], []])
    >>> capped_rows(lambda _: next(batches), 10, 20, flat=True)  # 3 + 8 + 1 + 8 bytes: they fit
    ([('abc', 1), (None, 2.5)], False)
    >>> batches = iter([[("abc", 1), (None, 2.5)], []])
    >>> capped_rows(lambda _: next(batches), 10, 19, flat=True)  # one byte less: the first row
    ([('abc', 1)], True)
    """
    rows: list[tuple[Any, ...]] = []
    size = 0
    bound: int | None = 0 if flat else None
    while True:
        batch = fetch(len(rows))
        if not batch:
            return rows, False
        fits = len(batch) <= row_cap - len(rows)
        if bound is not None:
            if convert is None and fits:
                more = 2 * sum(map(len, map(marshal.dumps, batch, itertools.repeat(2))))
                if bound + more <= byte_cap:
                    bound += more
                    rows.extend(map(tuple, batch))
                    continue
            size, bound = sum(map(value_size, itertools.chain.from_iterable(rows))), None
        if convert is None and fits:
            # A whole batch measured at once (one call per value, no frame per row) when it
            # fits; the batch that reaches a cap is gone through row by row below.
            batch_size = sum(map(value_size, itertools.chain.from_iterable(batch)))
            if size + batch_size <= byte_cap:
                size += batch_size
                rows.extend(map(tuple, batch))
                continue
        for row in batch:
            if len(rows) >= row_cap:
                return rows, True
            values = tuple(convert(v) for v in row) if convert else tuple(row)
            size += sum(map(value_size, values))
            if size > byte_cap:
                return rows, True
            rows.append(values)


def run(
    conn: sqlite3.Connection, state: GuardState, sql: str, parameters: Any, budget: float, row_cap: int,
    byte_cap: int,
) -> tuple[list[str], list[tuple[Any, ...]], bool, float]:
    """Run one statement under its deadline and caps: ``(columns, rows, truncated, elapsed_ms)``.

    Raises:
        sqlite3.DatabaseError: what SQLite raised (``interrupted`` at the deadline).
    """
    start = time.monotonic()
    state.deadline = start + budget
    state.refused = None
    try:
        try:
            # Text decoded by the C default; a text that is not UTF-8 fails the statement,
            # which then runs again decoding every text leniently (Python's call a value), as
            # every later statement on this connection does: a database pays for the second
            # run once, not a statement at a time.
            conn.text_factory = _decode_text if state.lenient_text else str
            columns, rows, truncated = _rows(conn, sql, parameters, row_cap, byte_cap)
        except sqlite3.OperationalError as e:
            if state.lenient_text or not str(e).startswith(_NOT_UTF8):
                raise
            state.lenient_text = True
            conn.text_factory = _decode_text
            columns, rows, truncated = _rows(conn, sql, parameters, row_cap, byte_cap)
    finally:
        conn.text_factory = _decode_text
        state.deadline = float("inf")
    return columns, rows, truncated, (time.monotonic() - start) * 1000.0


_NOT_UTF8 = "Could not decode to UTF-8"


def _rows(conn: sqlite3.Connection, sql: str, parameters: Any, row_cap: int, byte_cap: int
          ) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    cur = conn.execute(sql, parameters)
    try:
        columns = [d[0] for d in cur.description or ()]
        rows, truncated = capped_rows(lambda _: cur.fetchmany(256), row_cap, byte_cap, flat=True)
    finally:
        cur.close()
    return columns, rows, truncated


# -- the worker ------------------------------------------------------------------------------------


def send(stream: IO[bytes], message: Any) -> None:
    data = marshal.dumps(message)
    stream.write(struct.pack("!I", len(data)) + data)
    stream.flush()


def receive(stream: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream."""
    header = stream.read(4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack("!I", header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return marshal.loads(data)


def answer(stdin: BinaryIO, stdout: BinaryIO, reply: Callable[..., tuple], out_of_memory: str | None = None) -> None:
    """Say ``("ready",)``, then answer each ``("run", sql, parameters, budget, row_cap, byte_cap)``
    request with ``reply(sql, parameters, budget, row_cap, byte_cap)`` until the stream ends: an
    engine's worker loop. Running out of memory is answered ``("error", "out of memory",
    out_of_memory)``."""
    send(stdout, ("ready",))
    while True:
        request = receive(stdin)
        if request is None:
            return
        _, sql, parameters, budget, row_cap, byte_cap = request
        try:
            send(stdout, reply(sql, parameters, budget, row_cap, byte_cap))
        except MemoryError:
            send(stdout, ("error", "out of memory", out_of_memory))


def serve(path: str, max_value_bytes: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Answer ``("run", sql, parameters, budget, row_cap, byte_cap)`` requests until the stream ends.

    Replies ``("ok", columns, rows, truncated, elapsed_ms)`` or ``("error", message, refused)``.
    The first reply says whether the database opened: ``("ready",)`` or ``("error", ...)``.
    """
    state = GuardState()
    try:
        conn = open_guarded(path, state, heap_limit=HEAP_LIMIT_BYTES, max_value_bytes=max_value_bytes)
    except sqlite3.DatabaseError as e:
        send(stdout, ("error", str(e), None))
        return

    def reply(sql: str, parameters: Any, budget: float, row_cap: int, byte_cap: int) -> tuple:
        try:
            columns, rows, truncated, elapsed = run(conn, state, sql, parameters, budget, row_cap, byte_cap)
        except sqlite3.Error as e:
            return ("error", str(e), state.refused)
        return ("ok", columns, rows, truncated, elapsed)

    answer(stdin, stdout, reply)


def worker_command(path: str, max_value_bytes: int) -> list[str]:
    """The command that starts a worker for ``path``: this file, run by this interpreter in
    isolated mode with no site packages (it needs none)."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(path), str(int(max_value_bytes))]


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), sys.stdin.buffer, sys.stdout.buffer)
