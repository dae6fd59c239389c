"""Each layer of the SQLite guard, alone.

The guard (:mod:`sqlchorus.tools.engines.sqlite`) is layered so that no layer has to be perfect,
which also means that a layer standing behind another is never seen at work: the parse check
refuses a write before the read-only open could, the authorizer refuses ATTACH before the limit
of attached databases could. So each test here assembles one layer from the guard's own parts
(:mod:`sqlchorus.tools.engines.sqlite_guard`), with the other layers off, and runs the part of the
attack corpus that layer is meant to stop: every attack must be refused by that layer, with that
layer's own error (SQLite's message for it, or what the authorizer recorded), the database file
must stay byte-identical, no file may appear beside it or outside it, and nothing outside the
database may come back; the questions a user asks must still pass that layer alone.

The corpus is tests/fixtures/guard and tests/fixtures/guard_corpus, plus attacks written here for
a layer the fixtures do not reach alone (ATTACH of a database that holds a secret, VACUUM INTO a
file outside: SQLite's read-only open lets both through, see ``OUTSIDE_THE_READ_ONLY_OPEN``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import FIXTURES, load_pairs
from guard_layers import Untouched, within
from sqlchorus.tools.engines.sqlite import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    GuardedDatabase,
    NotAQueryError,
    QueryTimeoutError,
    check_single_query,
)
from sqlchorus.tools.engines.sqlite_guard import (
    LIMITS,
    GuardState,
    authorize,
    capped_rows,
    open_guarded,
    run,
)

REFUSED = load_pairs(FIXTURES / "guard" / "refused.sql")
AUTHORIZER = load_pairs(FIXTURES / "guard" / "authorizer.sql")
CORPUS = FIXTURES / "guard_corpus"
FUNCTIONS = load_pairs(CORPUS / "functions.sql")
PARSING = load_pairs(CORPUS / "parsing.sql")
RESOURCES = load_pairs(CORPUS / "resources.sql")
TIME = load_pairs(CORPUS / "time.sql")

SECRET = "sqlchorus-outside-secret-4c1e"
"""What a database and a text file outside the guarded database hold: never returned."""
OUTSIDE = "/outside"
"""Where attacks name the folder outside the database; each test puts its own there."""
ALL_LIMITS = range(12)
"""Every SQLite run-time limit (SQLITE_LIMIT_LENGTH is 0, SQLITE_LIMIT_WORKER_THREADS 11)."""
WATCHDOG_S = 60.0
"""How long a statement may run in a test before the test itself stops it, far past any budget
here: a layer that did not stop it then fails the test instead of hanging it."""


def _text(pair) -> str:
    return eval(pair.input) if pair.meta.get("python") else pair.input  # fixture data of our own


def _by_text(cases):
    """``cases`` without a statement given twice (the fixtures overlap)."""
    seen, out = set(), []
    for case in cases:
        key = " ".join(case[1].split()).rstrip(";")
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out



@pytest.fixture
def concert(spider, tmp_path):
    """A private, writable copy of Spider's concert_singer in a folder of its own."""
    folder = tmp_path / "db"
    folder.mkdir()
    path = folder / "concert_singer.sqlite"
    shutil.copyfile(spider("concert_singer"), path)
    path.chmod(0o644)
    return path


@pytest.fixture
def outside(tmp_path):
    """A folder outside the database: a database and a text file holding the secret."""
    folder = tmp_path / "outside"
    folder.mkdir()
    conn = sqlite3.connect(folder / "secret.sqlite")
    conn.execute("CREATE TABLE secrets (note TEXT)")
    conn.execute("INSERT INTO secrets VALUES (?)", (SECRET,))
    conn.commit()
    conn.close()
    (folder / "secret.txt").write_text(SECRET, encoding="utf-8")
    return folder


def _without(conn: sqlite3.Connection, *, authorizer: bool = False, deadline: bool = False,
             limits: bool = False) -> sqlite3.Connection:
    """``conn`` (a guarded connection) with the named layers taken off: the authorizer removed,
    the progress handler removed, the limits raised to SQLite's own maxima."""
    if authorizer:
        conn.set_authorizer(None)
    if deadline:
        conn.set_progress_handler(None, 0)
    if limits:
        for limit in ALL_LIMITS:
            conn.setlimit(limit, 2**31 - 1)  # SQLite caps it at its compiled maximum
    return conn


def _writable(path: Path) -> sqlite3.Connection:
    """A plain read-write connection, shown to write (a table created and rolled back), so that
    a refusal on it comes from whatever a test installs, never from the file being read-only."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN")
    conn.execute("CREATE TABLE write_probe (x INTEGER)")
    conn.execute("ROLLBACK")
    return conn


def _outside(sql: str, folder: Path) -> str:
    return sql.replace(OUTSIDE, str(folder))


READS = [
    "SELECT Name, Age FROM singer WHERE Age > 30 ORDER BY Age DESC",
    "SELECT Country, count(*), avg(Age) FROM singer GROUP BY Country HAVING count(*) >= 1",
    "SELECT s.Name, c.concert_Name FROM singer AS s JOIN singer_in_concert AS sc ON sc.Singer_ID = s.Singer_ID "
    "JOIN concert AS c ON c.concert_ID = sc.concert_ID",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) SELECT sum(i) FROM n",
    "SELECT Name FROM singer WHERE Singer_ID IN (SELECT Singer_ID FROM singer_in_concert)",
] + [p.input for p in FUNCTIONS if p.expected == "ok"]
"""Questions a user asks: every layer alone lets them run."""


# -- 1. the parse check -----------------------------------------------------------------------

PARSE_ATTACKS = _by_text(
    [(p.name, p.input, p.expected) for p in REFUSED if p.expected == "not_a_query"]
    + [(p.name, p.input, "not_a_query") for p in AUTHORIZER if not p.input.upper().startswith("SELECT")]
    + [(p.name, _text(p), p.expected) for p in PARSING if p.expected != "ok"]
    + [
        ("vacuum into a file outside", f"VACUUM INTO '{OUTSIDE}/copy.sqlite'", "not_a_query"),
        ("attach a database outside", f"ATTACH DATABASE '{OUTSIDE}/secret.sqlite' AS o", "not_a_query"),
        ("detach", "DETACH DATABASE main", "not_a_query"),
        ("create temp trigger", "CREATE TEMP TRIGGER t AFTER INSERT ON singer BEGIN SELECT 1; END", "not_a_query"),
        ("create virtual table", "CREATE VIRTUAL TABLE temp.f USING fts5(x)", "not_a_query"),
        ("begin immediate", "BEGIN IMMEDIATE", "not_a_query"),
        ("savepoint", "SAVEPOINT a", "not_a_query"),
        ("reindex", "REINDEX", "not_a_query"),
        ("analyze", "ANALYZE", "not_a_query"),
        ("pragma writable_schema", "PRAGMA writable_schema = ON", "not_a_query"),
        ("a read, then a vacuum into", f"SELECT 1; VACUUM INTO '{OUTSIDE}/copy.sqlite'", "not_a_query"),
    ]
)
"""What is not one query: every write, schema change, ATTACH, PRAGMA and transaction statement,
several statements, and text past the parser's bounds (too long, too deep)."""


@pytest.mark.parametrize("name,sql,kind", PARSE_ATTACKS, ids=[c[0] for c in PARSE_ATTACKS])
def test_the_parse_check_alone_refuses_what_is_not_one_query(name, sql, kind):
    with pytest.raises(NotAQueryError) as raised:
        check_single_query(sql)
    assert raised.value.kind == kind, raised.value.message


@pytest.mark.parametrize("sql", READS + [_text(p) for p in PARSING if p.expected == "ok"])
def test_the_parse_check_alone_lets_questions_through(sql):
    check_single_query(sql)


# -- 2. the read-only open --------------------------------------------------------------------

READ_ONLY_ATTACKS = {
    "insert": "INSERT INTO singer (Singer_ID, Name) VALUES (99, 'Intruder')",
    "insert from a select": "INSERT INTO singer_in_concert SELECT concert_ID, '99' FROM concert",
    "update": "UPDATE singer SET Name = 'Changed'",
    "update to the same value": "UPDATE singer_in_concert SET Singer_ID = Singer_ID",
    "delete": "DELETE FROM singer",
    "replace": "REPLACE INTO singer (Singer_ID, Name) VALUES (1, 'x')",
    "create table": "CREATE TABLE extra (x INTEGER)",
    "create index": "CREATE INDEX extra_name ON singer (Name)",
    "create view": "CREATE VIEW extra AS SELECT 1",
    "create trigger": "CREATE TRIGGER extra AFTER INSERT ON singer BEGIN SELECT 1; END",
    "alter table": "ALTER TABLE singer ADD COLUMN extra INTEGER",
    "rename table": "ALTER TABLE singer RENAME TO singers",
    "drop table": "DROP TABLE singer_in_concert",
    "pragma user_version": "PRAGMA user_version = 7",
    "pragma application_id": "PRAGMA application_id = 1",
    "pragma journal_mode": "PRAGMA journal_mode = WAL",
    "pragma incremental_vacuum": "PRAGMA incremental_vacuum",
    "vacuum": "VACUUM",
    "reindex": "REINDEX",
    "analyze": "ANALYZE",
}
"""Writes to the database file. ``OUTSIDE_THE_READ_ONLY_OPEN`` are not among them."""

OUTSIDE_THE_READ_ONLY_OPEN = {
    "create temp table": "CREATE TEMP TABLE scratch (x INTEGER)",
    "attach a database outside": f"ATTACH DATABASE '{OUTSIDE}/secret.sqlite' AS o",
    "vacuum into a file outside": f"VACUUM INTO '{OUTSIDE}/copy.sqlite'",
}
"""What SQLite's read-only open lets through (the authorizer and the limits stop them): temporary
objects live in memory, an attached database is opened for writing (a new one is created, and
can be written), and VACUUM INTO writes a new file."""


@pytest.mark.parametrize("sql", list(READ_ONLY_ATTACKS.values()), ids=list(READ_ONLY_ATTACKS))
def test_the_read_only_open_alone_refuses_writes(concert, outside, sql):
    untouched = Untouched(concert, outside)
    conn = _without(open_guarded(str(concert), GuardState()), authorizer=True, deadline=True, limits=True)
    try:
        conn.execute("CREATE TEMP TABLE authorizer_off (x INTEGER)")  # the authorizer would refuse it
        with pytest.raises(sqlite3.OperationalError, match="attempt to write a readonly database"):
            conn.execute(sql)
        for read in READS:
            conn.execute(read).fetchall()
    finally:
        conn.close()
    untouched.check()


# -- 3. the authorizer ------------------------------------------------------------------------

VIRTUAL_TABLES = [(p.name, p.input) for p in FUNCTIONS if p.expected == "forbidden"
                  and re.search(r"\bFROM\s+(pragma_|json_each|json_tree|dbstat)", p.input)]
"""Table-valued functions and virtual tables: the catalogue, JSON walked as rows, file pages."""

REFUSED_FUNCTION_CALLS = [
    (p.name, p.input) for p in FUNCTIONS if p.expected == "forbidden" and (p.name, p.input) not in VIRTUAL_TABLES
] + [
    ("total_changes", "SELECT total_changes()"),
    ("sqlite_source_id", "SELECT sqlite_source_id()"),
    ("sqlite_compileoption_used", "SELECT sqlite_compileoption_used('THREADSAFE')"),
    ("randomblob in a filter", "SELECT Name FROM singer WHERE length(randomblob(Age)) > 0"),
]
"""Calls of functions SQLite offers that are not on the allow-list (scalar calls; table-valued
functions are ``VIRTUAL_TABLES``)."""

AUTHORIZER_ATTACKS = _by_text(
    [(p.name, p.input) for p in AUTHORIZER]
    + [(name, sql) for name, sql in READ_ONLY_ATTACKS.items()]
    + [(name, sql) for name, sql in OUTSIDE_THE_READ_ONLY_OPEN.items()]
    + [
        ("create temp trigger", "CREATE TEMP TRIGGER t AFTER INSERT ON singer BEGIN SELECT 1; END"),
        ("create virtual table", "CREATE VIRTUAL TABLE temp.f USING fts5(x)"),
        ("detach", "DETACH DATABASE temp"),
        ("begin", "BEGIN IMMEDIATE"),
        ("savepoint", "SAVEPOINT a"),
        ("pragma query_only", "PRAGMA query_only = 0"),
        ("pragma case_sensitive_like", "PRAGMA case_sensitive_like = 1"),
        ("pragma optimize", "PRAGMA optimize"),
        ("pragma wal_checkpoint", "PRAGMA wal_checkpoint"),
        ("pragma temp_store_directory", f"PRAGMA temp_store_directory = '{OUTSIDE}'"),
    ]
    + REFUSED_FUNCTION_CALLS
    + VIRTUAL_TABLES
)
"""Everything but reading: writes and schema changes, temporary objects, ATTACH and DETACH,
VACUUM INTO, transactions, PRAGMAs that set something, refused functions, virtual tables."""


@pytest.mark.parametrize("name,sql", AUTHORIZER_ATTACKS, ids=[c[0] for c in AUTHORIZER_ATTACKS])
def test_the_authorizer_alone_refuses_everything_but_reading(concert, outside, name, sql):
    """The guard's authorizer on a read-write connection with nothing else: no read-only open,
    no limits, no deadline, extension loading as SQLite leaves it."""
    untouched = Untouched(concert, outside)
    state = GuardState()
    conn = _writable(concert)
    try:
        conn.set_authorizer(lambda *args: authorize(state, *args))
        with pytest.raises(sqlite3.DatabaseError, match="not authorized|authorization denied|vtable constructor failed"):
            conn.execute(_outside(sql, outside)).fetchall()
        assert state.refused, "the refusal is not the authorizer's"
        state.refused = None
        for read in READS:
            conn.execute(read).fetchall()
        for lookup in ("PRAGMA table_info(singer)", "PRAGMA foreign_key_list(singer_in_concert)", "PRAGMA user_version"):
            conn.execute(lookup).fetchall()
        assert state.refused is None
    finally:
        conn.close()
    untouched.check()


@pytest.mark.parametrize("name,sql", REFUSED_FUNCTION_CALLS, ids=[c[0] for c in REFUSED_FUNCTION_CALLS])
def test_the_function_allow_list_alone_refuses_unreviewed_functions(concert, name, sql):
    """Only the authorizer's answer to function calls (every other action allowed), on a
    read-write connection: fts3_tokenizer, for one, would hand out a native pointer."""
    untouched = Untouched(concert)
    state = GuardState()

    def functions_only(action, *rest):
        return authorize(state, action, *rest) if action == sqlite3.SQLITE_FUNCTION else sqlite3.SQLITE_OK

    conn = _writable(concert)
    try:
        conn.set_authorizer(functions_only)
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            conn.execute(sql).fetchall()
        assert state.refused and state.refused.startswith("the function "), state.refused
        for read in READS:
            conn.execute(read).fetchall()
    finally:
        conn.close()
    untouched.check()


def test_extension_loading_off_alone_refuses_native_code(concert, tmp_path):
    """The guard's own connection with the authorizer taken off: what stops load_extension is
    extension loading being off (enabled, SQLite would try to load the file and fail otherwise).
    A Python built without extension support has no switch to turn it on: it stays off."""
    library = tmp_path / "evil.so"
    library.write_bytes(b"\x7fELF not really")
    untouched = Untouched(concert)
    conn = _without(open_guarded(str(concert), GuardState()), authorizer=True, deadline=True, limits=True)
    try:
        with pytest.raises(sqlite3.OperationalError, match="not authorized"):
            conn.execute("SELECT load_extension(?)", (str(library),)).fetchall()
        if hasattr(conn, "load_extension"):
            with pytest.raises(sqlite3.OperationalError, match="not authorized"):
                conn.load_extension(str(library))
    finally:
        conn.close()
    untouched.check()


# -- 4. the limits ----------------------------------------------------------------------------

_LIMITS_IN_THE_CORPUS = {
    "a value over the length limit": "string or blob too big",
    "a compound select of 150 terms": "too many terms in compound SELECT",
    "a function with 150 arguments": "too many arguments on function",
    "an expression 300 operators deep": "Expression tree is too large",
    "a LIKE pattern of 1,200 characters": "LIKE or GLOB pattern too complex",
}

LIMIT_ATTACKS = [(p.name, _text(p), _LIMITS_IN_THE_CORPUS[p.name]) for p in RESOURCES
                 if p.name in _LIMITS_IN_THE_CORPUS] + [
    ("attach a database outside", f"ATTACH DATABASE '{OUTSIDE}/secret.sqlite' AS o", "too many attached databases"),
    ("vacuum into a file outside", f"VACUUM INTO '{OUTSIDE}/copy.sqlite'", "too many attached databases"),
    # Between the guard's 100 and SQLite's own 127, which alone refuses the corpus's 150.
    ("a function with 120 arguments", "SELECT max(" + ", ".join(["1"] * 120) + ")", "too many arguments on function"),
    ("SQL text past the parse check's bound", "SELECT '" + "x" * 90_000 + "'", "query string is too large"),
    ("a variable past the thousandth", "SELECT ?1001", r"variable number must be between \?1 and \?1000"),
    ("zeroblob of nine megabytes", "SELECT length(zeroblob(9000000))", "string or blob too big"),
    ("replace growing a value past the limit",
     "SELECT length(replace(printf('%.*c', 3000000, 'x'), 'x', 'xxx'))", "string or blob too big"),
    ("group_concat growing past the limit",
     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 10000) "
     "SELECT length(group_concat(printf('%.*c', 1000, 'x'))) FROM c", "string or blob too big"),
]
"""What outgrows the limits: values, SQL text, expressions, compound selects, arguments, LIKE
patterns, variables, and attached databases (at most none: ATTACH, and VACUUM INTO, which
attaches its target)."""


def test_the_corpus_still_has_the_attacks_the_layers_take_from_it():
    """The layers' corpora are chosen from the fixtures by name: a renamed case must not silently
    leave a layer with fewer attacks."""
    assert {p.name for p in RESOURCES} >= set(_LIMITS_IN_THE_CORPUS)
    assert len(KILL_ATTACKS) == 3 and len(HEAP_ATTACKS) == 2 and len(VIRTUAL_TABLES) == 6
    assert len(DEADLINE_ATTACKS) == 4 and len(CAP_ATTACKS) == 2


@pytest.mark.parametrize("name,sql,message", LIMIT_ATTACKS, ids=[c[0] for c in LIMIT_ATTACKS])
def test_the_limits_alone_refuse_what_outgrows_them(concert, outside, name, sql, message):
    """The guard's own connection, its authorizer and progress handler taken off: its limits
    stand alone (the read-only open is left, but stops none of these: they read, or attach)."""
    untouched = Untouched(concert, outside)
    conn = _without(open_guarded(str(concert), GuardState()), authorizer=True, deadline=True)
    try:
        with pytest.raises(sqlite3.DatabaseError, match=message):
            conn.execute(_outside(sql, outside)).fetchall()
        for read in READS:
            conn.execute(read).fetchall()
    finally:
        conn.close()
    untouched.check()


def test_the_guards_connection_has_every_limit(concert):
    """Limits no attack above reaches (program size, trigger depth, worker threads) are set too."""
    conn = open_guarded(str(concert), GuardState())
    try:
        assert {limit: conn.getlimit(limit) for limit in LIMITS} == LIMITS
    finally:
        conn.close()


# -- 5. the deadline (SQLite's progress handler) ----------------------------------------------

DEADLINE_ATTACKS = _by_text(
    [(p.name, p.input) for p in TIME if p.name in ("a twenty-way join, 6^20 rows", "a recursive CTE without end")]
    + [(p.name, p.input) for p in REFUSED if p.expected == "timeout"]
    + [
        ("an endless sequence filtered to nothing",
         "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c WHERE x < 0"),
        ("a twelve-way join with a filter on every row",
         "SELECT count(*) FROM singer a, singer b, singer c, singer d, singer e, singer f, singer g, singer h, "
         "singer i, singer j, singer k, singer l WHERE a.Name || l.Name LIKE '%zz%'"),
    ]
)
"""Statements that run on, step after step, for ever. (The time corpus's others grow values as
they go, which the limits stop first, or spend their time inside one call, which only the
worker's kill stops: ``KILL_ATTACKS``.)"""


@pytest.mark.parametrize("name,sql", DEADLINE_ATTACKS, ids=[c[0] for c in DEADLINE_ATTACKS])
def test_the_deadline_alone_stops_a_statement_at_its_budget(concert, name, sql):
    """The guard's own connection, its authorizer off and its limits raised: the progress handler
    stops the statement at the budget :func:`run` sets."""
    state = GuardState()
    conn = _without(open_guarded(str(concert), state), authorizer=True, limits=True)
    stopped_by_the_test = threading.Event()

    def watchdog():
        stopped_by_the_test.set()
        conn.interrupt()

    timer = threading.Timer(WATCHDOG_S, watchdog)
    timer.start()
    try:
        with pytest.raises(sqlite3.OperationalError, match="^interrupted$"):
            run(conn, state, sql, (), 0.5, DEFAULT_MAX_ROWS, DEFAULT_MAX_BYTES)
        assert not stopped_by_the_test.is_set(), "the deadline did not stop the statement"
        assert run(conn, state, "SELECT count(*) FROM singer", (), 30, 10, 10_000)[1] == [(6,)]
    finally:
        timer.cancel()
        conn.close()


# -- 6. the worker's kill ---------------------------------------------------------------------

KILL_ATTACKS = [(p.name, p.input) for p in TIME if p.name.startswith(("printf with", "instr of", "LIKE over"))]
"""Statements that spend their time inside one SQLite call (``instr`` over megabytes built in the
query; ``printf`` padding to two billion characters and ``LIKE`` over eight megabytes, on each
row): the progress handler is never called, so only killing the worker process stops them."""


def test_the_workers_kill_alone_stops_a_statement_inside_one_call(concert):
    """These statements pass every other layer (each is one query, calls only allowed functions,
    builds no value past the limits) and the deadline cannot act inside one call: what stops each
    is the worker killed at the budget plus the grace, which worker_status counts."""
    untouched = Untouched(concert)
    with GuardedDatabase(concert, timeout_s=0.5, workers=1) as db:
        assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]
        for count, (name, sql) in enumerate(KILL_ATTACKS, start=1):
            assert isinstance(within(WATCHDOG_S, db, sql), QueryTimeoutError), name
            assert db.worker_status()["replaced"] == count, name
            assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]
    untouched.check()


# -- 7. the worker's heap limit, with temporary data in memory ---------------------------------

HEAP_RUNNER = r"""
import json, sqlite3, sys
from sqlchorus.tools.engines.sqlite_guard import HEAP_LIMIT_BYTES, GuardState, open_guarded
conn = open_guarded(sys.argv[1], GuardState(), heap_limit=HEAP_LIMIT_BYTES)
conn.set_authorizer(None)
conn.set_progress_handler(None, 0)
for limit in range(12):
    conn.setlimit(limit, 2**31 - 1)
out = []
for sql in json.loads(sys.argv[2]):
    try:
        conn.execute(sql).fetchall()
        out.append("ok")
    except MemoryError:
        out.append("out of memory")
    except sqlite3.Error as e:
        out.append(str(e))
print(json.dumps(out))
"""

HEAP_ATTACKS = [(p.name, p.input) for p in RESOURCES if "gigabytes" in p.name]
"""Sorts and DISTINCTs over gigabytes of values: temporary data is kept in memory, never in
files, under the worker's heap limit."""


def test_the_heap_limit_alone_fails_a_sort_past_it_without_a_temporary_file(concert, tmp_path):
    """In a process of its own (SQLite's heap limit is the process's), the guard's connection
    with its heap limit and nothing else: no authorizer, limits raised, no deadline. No
    temporary file appears in the process's temporary folder."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    untouched = Untouched(concert, scratch)
    env = {**os.environ, "TMPDIR": str(scratch), "SQLITE_TMPDIR": str(scratch)}
    out = subprocess.run([sys.executable, "-c", HEAP_RUNNER, str(concert), json.dumps([s for _, s in HEAP_ATTACKS])],
                         capture_output=True, text=True, timeout=600, cwd=scratch, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == ["out of memory"] * len(HEAP_ATTACKS)
    untouched.check()


# -- 8. the result caps -----------------------------------------------------------------------

CAP_ATTACKS = [(p.name, p.input) for p in RESOURCES if p.expected == "ok, truncated"] + [
    ("a hundred thousand rows",
     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100000) SELECT x FROM c"),
]


@pytest.mark.parametrize("name,sql", CAP_ATTACKS, ids=[c[0] for c in CAP_ATTACKS])
def test_the_result_caps_alone_cut_rows_and_bytes(concert, name, sql):
    """:func:`run`'s caps on a plain read-write connection with nothing else."""
    conn = sqlite3.connect(concert, isolation_level=None)
    try:
        _, rows, truncated, _ = run(conn, GuardState(), sql, (), 600, DEFAULT_MAX_ROWS, DEFAULT_MAX_BYTES)
    finally:
        conn.close()
    assert truncated
    assert len(rows) <= DEFAULT_MAX_ROWS
    assert sum(len(str(v)) for row in rows for v in row) <= DEFAULT_MAX_BYTES


def _size(value):
    if value is None:
        return 1
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace"))
    return 8


def _capped_row_by_row(batches, row_cap, byte_cap):
    """The caps' definition: rows in order until the next would pass a cap."""
    rows, size = [], 0
    for row in (row for batch in batches for row in batch):
        if len(rows) >= row_cap:
            return rows, True
        size += sum(map(_size, row))
        if size > byte_cap:
            return rows, True
        rows.append(tuple(row))
    return rows, False


@pytest.mark.parametrize("flat", [False, True], ids=["measured", "bounded-first"])
def test_the_caps_cut_where_row_by_row_would_whatever_the_batches(flat):
    """Batches measured whole cut at the very row, and count a text's UTF-8 bytes; counted by
    their bound first (``flat``), at the same row: caps near the total, where the bound passes
    the cap before the bytes do, and far above it, where the bound alone decides."""
    import random

    rng = random.Random(11)
    cells = [None, 7, 2**40, -3, 2.5, b"\x00\x01\x02", b"", "", "abc", "é", "東京", "\ud800", "\U0001f600",
             "x" * 40, "ü" * 300]
    for _ in range(600):
        batches = [[tuple(rng.choice(cells) for _ in range(rng.randint(1, 3)))
                    for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(0, 5))]
        total_rows = sum(map(len, batches))
        total_bytes = sum(_size(v) for b in batches for r in b for v in r)
        row_cap = rng.randint(0, total_rows + 1)
        byte_cap = rng.choice([rng.randint(0, total_bytes + 1), rng.randint(0, 12 * total_bytes + 200)])
        feed = iter(batches)
        got = capped_rows(lambda _: next(feed, []), row_cap, byte_cap, flat=flat)
        assert got == _capped_row_by_row(batches, row_cap, byte_cap), (batches, row_cap, byte_cap)


def test_text_that_is_not_utf8_is_read_leniently_and_only_it(tmp_path, monkeypatch):
    """A statement is read with the C decoder of text; one whose text is not UTF-8 runs again
    with the lenient one (a replacement character for each bad byte), and so does every later
    statement on that connection: the database has shown such text, and runs nothing twice again."""
    import sqlchorus.tools.engines.sqlite_guard as guard

    path = tmp_path / "bytes.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES ('good'), (CAST(x'41e9ff' AS TEXT))")
    conn.close()
    calls = []

    def counted(raw: bytes) -> str:
        calls.append(raw)
        return raw.decode("utf-8", errors="replace")
    monkeypatch.setattr(guard, "_decode_text", counted)
    state = GuardState()
    conn = open_guarded(str(path), state)
    try:
        assert run(conn, state, "SELECT x FROM t WHERE x = 'good'", (), 30, 10, 1000)[1] == [("good",)]
        assert calls == [] and not state.lenient_text  # valid text: decoded in C
        assert run(conn, state, "SELECT x FROM t ORDER BY rowid", (), 30, 10, 1000)[1] \
            == [("good",), ("A\ufffd\ufffd",)]
        assert b"A\xe9\xff" in calls and state.lenient_text
        assert conn.text_factory is counted
        calls.clear()
        assert run(conn, state, "SELECT x FROM t WHERE x = 'good'", (), 30, 10, 1000)[1] == [("good",)]
        assert calls == [b"good"]  # from now on, lenient from the start
    finally:
        conn.close()
