"""The guarded executor refuses anything but reading, and leaves the database unchanged."""

from __future__ import annotations

import shutil
import sqlite3
import time

import pytest

from conftest import FIXTURES, load_pairs, sha256
from sqlchorus.tools.engines.sqlite import (
    DatabaseOpenError,
    GuardedDatabase,
    QueryTimeoutError,
    ResourceError,
    SqlError,
)
from sqlchorus.tools.engines.sqlite_guard import GuardState, authorize, open_guarded

REFUSED = load_pairs(FIXTURES / "guard" / "refused.sql")
AUTHORIZER = load_pairs(FIXTURES / "guard" / "authorizer.sql")


@pytest.fixture
def concert(spider, tmp_path):
    """A private copy of a Spider database, so a failure here could not harm the shared one."""
    path = tmp_path / "concert_singer.sqlite"
    shutil.copy(spider("concert_singer"), path)
    return path


@pytest.mark.parametrize(
    "sql,kind", [(p.input, p.expected) for p in REFUSED], ids=[p.name for p in REFUSED]
)
def test_guard_refuses_with_typed_error(concert, sql, kind):
    before = sha256(concert)
    # Only the runaway query gets a short budget: it can never finish, so it times out on any
    # machine. Every other statement is refused or fails at once, and a generous budget keeps a
    # slow machine from turning that refusal into a timeout.
    with GuardedDatabase(concert, timeout_s=0.5 if kind == "timeout" else 30) as db:
        with pytest.raises(SqlError) as info:
            db.execute(sql)
    assert info.value.kind == kind, info.value.message
    assert info.value.message
    assert sha256(concert) == before


@pytest.mark.parametrize("sql", [p.input for p in AUTHORIZER], ids=[p.name for p in AUTHORIZER])
def test_authorizer_refuses_without_parse_check(concert, sql):
    before = sha256(concert)
    with GuardedDatabase(concert) as db:
        conn = db.introspection_connection()
        with pytest.raises(sqlite3.DatabaseError, match="not authorized|prohibited|readonly|read-only"):
            conn.execute(sql)
    assert sha256(concert) == before


# Statements that would change the file, for the read-only open on its own. Temporary tables and
# views are not among them: they live in memory, so only the authorizer refuses them.
FILE_WRITES = {
    "insert": "INSERT INTO singer (Singer_ID, Name) VALUES (99, 'Intruder')",
    "update": "UPDATE singer SET Name = 'Changed'",
    "delete": "DELETE FROM singer",
    "replace": "REPLACE INTO singer (Singer_ID, Name) VALUES (1, 'x')",
    "create table": "CREATE TABLE extra (x INTEGER)",
    "create index": "CREATE INDEX extra_name ON singer (Name)",
    "create view": "CREATE VIEW extra AS SELECT 1",
    "alter table": "ALTER TABLE singer ADD COLUMN extra INTEGER",
    "drop table": "DROP TABLE singer",
    "pragma user_version": "PRAGMA user_version = 7",
}


@pytest.mark.parametrize("sql", list(FILE_WRITES.values()), ids=list(FILE_WRITES))
def test_the_read_only_open_alone_refuses_writes(concert, sql):
    """The guard's own open, with its authorizer taken off: SQLite itself refuses to write."""
    before = sha256(concert)
    conn = open_guarded(str(concert), GuardState())
    try:
        conn.set_authorizer(None)
        # The authorizer is off: a temporary table, which it refuses, is created in memory.
        conn.execute("CREATE TEMP TABLE scratch (x INTEGER)")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute(sql)
    finally:
        conn.close()
    assert sha256(concert) == before


@pytest.mark.parametrize("sql", [p.input for p in AUTHORIZER], ids=[p.name for p in AUTHORIZER])
def test_the_authorizer_alone_refuses_writes_on_a_writable_connection(concert, sql):
    """The guard's authorizer on a connection opened read-write: it refuses on its own."""
    before = sha256(concert)
    state = GuardState()
    conn = sqlite3.connect(concert, isolation_level=None)
    try:
        conn.set_authorizer(lambda *args: authorize(state, *args))
        assert conn.execute("SELECT count(*) FROM singer").fetchone()[0] > 0  # reading is allowed
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            conn.execute(sql)
        assert state.refused  # what was refused, for the error to name
    finally:
        conn.close()
    assert sha256(concert) == before


def test_runaway_query_stops_within_budget(concert):
    with GuardedDatabase(concert, timeout_s=0.3) as db:
        # The worker is started first, so that the time measured below is the statement's own.
        assert db.execute("SELECT 1").rows == [(1,)]
        start = time.monotonic()
        with pytest.raises(QueryTimeoutError, match="0.3 s budget"):
            # An unbounded recursion: it never finishes on any machine, so only the budget ends it.
            db.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")
        # The budget stopped it (0.3 s, plus the grace before the worker is killed); the bound
        # only says that it did stop, with room for a loaded machine.
        assert time.monotonic() - start < 30
        # The connection is usable after an interrupted query.
        assert db.execute("SELECT count(*) FROM singer").rows[0][0] > 0


def test_rows_and_bytes_are_capped(concert):
    with GuardedDatabase(concert, max_rows=2) as db:
        capped = db.execute("SELECT * FROM singer")
        assert capped.row_count == 2 and capped.truncated
        small = db.execute("SELECT * FROM singer", max_bytes=40, max_rows=100)
        assert small.truncated and small.row_count < capped.row_count + 10
        full = db.execute("SELECT * FROM singer", max_rows=1000)
        assert not full.truncated and full.columns[0] == "Singer_ID"


def test_read_only_pragmas_and_reads_work(concert):
    with GuardedDatabase(concert) as db:
        conn = db.introspection_connection()
        assert conn.execute("PRAGMA table_info(singer)").fetchall()
        assert conn.execute("PRAGMA foreign_key_list(singer_in_concert)").fetchall()
        assert db.execute("SELECT Name FROM singer WHERE Age > 30").rows


def test_binary_and_invalid_text_values_do_not_crash(tmp_path):
    path = tmp_path / "blobs.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, data BLOB, label TEXT)")
    conn.execute("INSERT INTO t VALUES (1, ?, CAST(? AS TEXT))", (b"\x00\xff\x10" * 100, b"caf\xe9"))
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db:
        rows = db.execute("SELECT data, label FROM t").rows
    assert isinstance(rows[0][0], bytes) and len(rows[0][0]) == 300
    assert rows[0][1].startswith("caf")


@pytest.mark.parametrize(
    "content,message",
    [(None, "does not exist"), (b"this is a text file, not a database\n" * 10, "not a SQLite database"),
     (b"", "not a SQLite database"), (b"SQLite format 3\x00" + b"\xff" * 200, "Cannot open")],
)
def test_bad_database_files(tmp_path, content, message):
    path = tmp_path / "bad.sqlite"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DatabaseOpenError, match=message):
        GuardedDatabase(path)


def test_a_query_cannot_build_a_value_larger_than_the_byte_cap(concert):
    with GuardedDatabase(concert, max_bytes=2_000_000) as db:
        with pytest.raises(ResourceError, match="too big"):
            db.execute("SELECT length(replace(printf('%.*c', 1000000, 'x'), 'x', 'xxx'))")
        assert db.execute("SELECT length(printf('%.*c', 1000, 'x'))").rows == [(1000,)]


def test_an_unbounded_byte_cap_opens(concert):
    with GuardedDatabase(concert, max_bytes=10**15) as db:
        assert db.execute("SELECT count(*) FROM singer").rows[0][0] > 0
