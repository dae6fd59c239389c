"""Each layer of the PostgreSQL guard, alone.

The guard (:mod:`sqlchorus.tools.engines.postgres`) stands in layers: the statement check (two
readings: PostgreSQL's own parser, :func:`~sqlchorus.tools.engines.postgres_check.check_statement`,
then sqlglot's), the check of the server's plan (:func:`~sqlchorus.tools.engines.postgres_check.
check_plan`), one query per call through a server-side cursor, the read-only transaction on a
read-only session, the read-only role, the time limit (the server's ``statement_timeout``, then a
cancel from outside), the reset between statements, and the result caps. With the check in front,
a layer behind it is never seen at work. Each test here assembles one layer from the guard's own
parts, with the others off, and runs the part of the attack corpus that layer is meant to stop:
every attack must be refused by that layer (its own error: the check's, or the server's SQLSTATE
for that layer), the server must be left as it was (every table, role, large object, advisory lock
and the folder beside the server's data, see ``test_postgres_guard.server_state``), and nothing
outside the database (a secret file the server can read) may come back; the questions a user
asks must still pass the layer alone.

The readings of the check need no server and run in the quick tier; the rest start a PostgreSQL
server (one for the module) and are marked slow. The corpus is tests/fixtures/guard_corpus_postgres,
plus attacks written here that need objects the corpus's database lacks (a function and a procedure
that write, a sequence) or aim at the secret file.
"""

from __future__ import annotations

import re
import shutil

import psycopg
import pytest

from conftest import FIXTURES, load_pairs, spider_db
from guard_layers import NeverStopped, assert_the_caps_cut, ids, within
from servers import postgres_of_a_test
from test_postgres_guard import prepare_concert, server_state

from sqlchorus.tools.engines import postgres as module
from sqlchorus.tools.engines.postgres import READONLY_ROLE_SQL, PostgresDatabase, check_postgres_query
from sqlchorus.tools.engines.postgres_check import check_plan, check_statement
from sqlchorus.tools.sql.errors import ForbiddenError, NotAQueryError, QueryTimeoutError, SqlError

CORPUS = FIXTURES / "guard_corpus_postgres"
CASES = {f"{path.stem}: {p.name}": p for path in sorted(CORPUS.glob("*.sql")) for p in load_pairs(path)}
REFUSED = {name: p for name, p in CASES.items() if p.expected in ("forbidden", "not_a_query")}
ROLE = "layer_reader"
"""A role made by the guard's own :data:`READONLY_ROLE_SQL` (cluster-wide; the module's server is its own)."""
SECRET = "sqlchorus-pg-secret-9e3a"
OUTSIDE = "/outside"
"""Where attacks name the folder beside the server's data; replaced by the module's own."""
WRITE_OBJECTS = (
    "CREATE SEQUENCE s",
    "CREATE FUNCTION add_row() RETURNS int LANGUAGE sql AS "
    "$$ INSERT INTO stadium (stadium_id, name) VALUES (99, 'x') RETURNING 1 $$",
    "CREATE PROCEDURE add_rows() LANGUAGE sql AS $$ INSERT INTO stadium (stadium_id, name) VALUES (98, 'y') $$",
)
"""What a query could call to write, beside the corpus's database: a sequence, a function, a procedure."""


def _attacks(names, extra=()):
    """The corpus's cases of ``names`` (each must exist), then ``extra``: ``(name, sql)`` pairs."""
    missing = [n for n in names if n not in CASES]
    assert not missing, f"no such case in the corpus: {missing}"
    return [(n, CASES[n].input) for n in names] + list(extra)


READS = [p.input for p in CASES.values() if p.expected == "ok"] + [
    "SELECT name, age FROM singer WHERE age > 30 ORDER BY age DESC",
    "SELECT country, count(*), avg(age) FROM singer GROUP BY country HAVING count(*) >= 1",
    "SELECT s.name FROM singer AS s JOIN singer_in_concert AS sc ON sc.singer_id = s.singer_id",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) SELECT sum(i) FROM n",
    "SELECT g FROM generate_series(1, 3) AS g",
]
"""Questions a user asks: every layer alone lets them run."""


# -- 1a. the check: PostgreSQL's parser's reading -----------------------------------------------

UNQUALIFIED_CATALOGUE = [
    "catalogue: pg_shadow", "catalogue: pg_authid's passwords", "catalogue: pg_roles by a quoted, upper-case name",
    "catalogue: pg_settings", "catalogue: pg_stat_activity", "catalogue: the catalogue in a subquery of a plain read",
    "catalogue: TABLE pg_authid", "privacy: pg_settings", "privacy: pg_file_settings",
    "privacy: pg_stat_activity's statements", "privacy: pg_hba_file_rules",
]
"""Relations of the catalogue named without their schema: PostgreSQL's parser reads a name, not
where it resolves (``pg_*`` resolves to ``pg_catalog`` whatever the search path), so sqlglot's
reading and the plan refuse these; every other refused statement is the parser's reading's too."""

PARSER_ATTACKS = [(n, p.input, p.expected) for n, p in REFUSED.items() if n not in UNQUALIFIED_CATALOGUE]


@pytest.mark.parametrize("name,sql,kind", PARSER_ATTACKS, ids=ids(PARSER_ATTACKS))
def test_the_parsers_reading_alone_refuses_calls_casts_and_statements(name, sql, kind):
    """:func:`check_statement` with nothing else (and no catalogue read from a server)."""
    with pytest.raises(SqlError) as raised:
        check_statement(sql)
    assert raised.value.kind == kind, raised.value.message


@pytest.mark.parametrize("sql", [s for s in READS if "jsonb_each" not in s])
def test_the_parsers_reading_alone_lets_questions_through(sql):
    """(A field of a record a function returns needs the server's names to be told from a call.)"""
    check_statement(sql)


# -- 1b. the check: sqlglot's reading ---------------------------------------------------------

SQLGLOT_ATTACKS = [(n, p.input, p.expected) for n, p in REFUSED.items() if p.expected == "not_a_query"] + [
    (n, REFUSED[n].input, "forbidden") for n in UNQUALIFIED_CATALOGUE + [
        "catalogue: pg_authid qualified", "catalogue: information_schema.tables",
        "catalogue: information_schema grants", "catalogue: another schema's table",
        "locks: FOR UPDATE", "locks: FOR SHARE", "locks: FOR NO KEY UPDATE", "locks: FOR KEY SHARE SKIP LOCKED",
        "locks: FOR UPDATE in a subquery", "writes: a CTE that deletes", "writes: a CTE that updates",
        "writes: a CTE that inserts", "writes: a CTE that deletes, nested in a subquery", "writes: SELECT INTO",
    ]
]
"""What is not one query, writes anywhere in it, locks rows, or reads a relation outside the
pinned schema. (Calls are the parser's reading's and the plan's.)"""


@pytest.mark.parametrize("name,sql,kind", SQLGLOT_ATTACKS, ids=ids(SQLGLOT_ATTACKS))
def test_sqlglots_reading_alone_refuses_statements_writes_locks_and_the_catalogue(monkeypatch, name, sql, kind):
    """:func:`check_postgres_query` with its first reading (PostgreSQL's parser) switched off."""
    monkeypatch.setattr(module, "check_statement", lambda *args, **kw: [])
    with pytest.raises(SqlError) as raised:
        check_postgres_query(sql)
    got = "not_a_query" if isinstance(raised.value, NotAQueryError) else raised.value.kind
    assert got == kind, raised.value.message


@pytest.mark.parametrize("sql", READS)
def test_sqlglots_reading_alone_lets_questions_through(monkeypatch, sql):
    monkeypatch.setattr(module, "check_statement", lambda *args, **kw: [])
    check_postgres_query(sql)


# -- the server -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    yield from postgres_of_a_test()


@pytest.fixture(scope="module")
def pg(server):
    """concert_singer as the corpus expects it (see ``test_postgres_guard.prepare_concert``), with
    :data:`WRITE_OBJECTS`, a role made by :data:`READONLY_ROLE_SQL`, and a secret file beside the
    server's data that the server can read. Its URLs: ``admin`` (the superuser) and ``reader``."""
    source = spider_db("concert_singer")
    if not source.exists():
        pytest.skip(f"Spider database concert_singer not found at {source}")
    admin = server.new_database()
    dbname = admin.rsplit("/", 1)[1]
    prepare_concert(source, admin, dbname, "reader", "not-used-here")
    role_sql = re.sub(r"\breader\b", ROLE, READONLY_ROLE_SQL).replace("DATABASE db ", f"DATABASE {dbname} ")
    with psycopg.connect(admin, autocommit=True) as conn:
        for statement in WRITE_OBJECTS:
            conn.execute(statement)
        # What PUBLIC may do on a new database (prepare_concert took it away for its own role):
        # the guard's SQL must take it away itself.
        conn.execute(f"GRANT CONNECT, TEMPORARY ON DATABASE {dbname} TO PUBLIC")
        conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
        for statement in role_sql.replace("'...'", "'layer-pw-5c'").split(";"):
            if statement.strip():
                conn.execute(statement)
    outside = server.folder / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    if server.as_user:
        for path in (outside, outside / "secret.txt"):
            shutil.chown(path, "postgres", "postgres")
    return {"admin": admin, "reader": admin.replace("postgresql://sqlchorus@", f"postgresql://{ROLE}@"),
            "outside": outside, "server": server, "state": server_state(admin, outside)}


@pytest.fixture(scope="module")
def admin_db(pg):
    """The superuser, opened as an administrator may (allow_writable_role), so that the role
    stops nothing: a long budget, so that only a statement's own stops it."""
    db = PostgresDatabase(pg["admin"], timeout_s=600, workers=1, prestart=False, allow_writable_role=True)
    yield db
    db.close()


@pytest.fixture(scope="module")
def reader_db(pg):
    db = PostgresDatabase(pg["reader"], timeout_s=600, workers=1, prestart=False)
    yield db
    db.close()


class Untouched:
    """The server as the module set it up (``server_state``, taken once: nothing here may change
    it); :meth:`check` asserts it still is."""

    def __init__(self, pg):
        self.pg = pg
        self.state = pg["state"]

    def check(self) -> None:
        assert server_state(self.pg["admin"], self.pg["outside"]) == self.state


def _outside(sql: str, pg) -> str:
    return sql.replace(OUTSIDE, str(pg["outside"]))


def _refused(error: BaseException, *kinds: type[BaseException]) -> None:
    """``error`` is one of ``kinds`` (psycopg's classes of a SQLSTATE) and shows no secret."""
    assert isinstance(error, kinds), f"{type(error).__name__}: {error}"
    assert SECRET not in str(error)


# -- 2. the check of the server's plan --------------------------------------------------------

NOT_PLANNED = {
    "catalogue: pg_roles by a quoted, upper-case name", "catalogue: another schema's table",
    "spellings: an operator of another schema", "spellings: a function of another schema",
    "spellings: a table sample method that is a function", "writes: a CTE that deletes, nested in a subquery",
    "writes: nextval", "writes: setval",
}
"""Statements the server refuses to plan (no such relation, operator, function or method)."""

NOT_THE_PLANS = {
    "locks: FOR UPDATE", "locks: FOR SHARE", "locks: FOR NO KEY UPDATE", "locks: FOR KEY SHARE SKIP LOCKED",
    "locks: FOR UPDATE in a subquery", "writes: a CTE that deletes", "writes: a CTE that updates",
    "writes: a CTE that inserts", "writes: SELECT INTO",
    "memory: repeat of a billion characters", "memory: lpad to a billion characters",
}
"""Writes and row locks: the plan check reads calls, casts and relations, not what a node does.
And immutable calls over constants, which the server folds while planning (so it would build the
billion characters to explain the statement): the parser's reading refuses them before."""

PLAN_ATTACKS = _attacks(
    [n for n, p in REFUSED.items() if p.expected == "forbidden" and n not in NOT_PLANNED | NOT_THE_PLANS],
    [("writes: nextval of a sequence", "SELECT nextval('s')"),
     ("the secret file read", f"SELECT pg_read_file('{OUTSIDE}/secret.txt')")],
)
"""Every call, cast and relation the guard does not allow, however written, as the server resolved
it: files, large objects, settings, other sessions, locks, sleeps, identity, the catalogue."""


def _plan(pg, sql: str):
    """The server's plan of ``sql`` (``EXPLAIN (VERBOSE, FORMAT JSON)``, as the guard takes it), made
    as the superuser in a read-only transaction that is rolled back: EXPLAIN plans, never runs."""
    with psycopg.connect(pg["admin"], autocommit=True) as conn:
        with conn.transaction(force_rollback=True):
            conn.execute("SET TRANSACTION READ ONLY")
            conn.execute("SET LOCAL statement_timeout = 30000")
            return conn.execute(module.EXPLAIN + sql).fetchone()[0]


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", PLAN_ATTACKS, ids=ids(PLAN_ATTACKS))
def test_the_plan_check_alone_refuses_what_the_server_would_call(pg, admin_db, name, sql):
    """:func:`check_plan` on the server's plan of the statement as written, with no first reading
    (so no padding call was checked, and none is allowed)."""
    untouched = Untouched(pg)
    sql = _outside(sql, pg)
    with pytest.raises(ForbiddenError):
        check_plan(_plan(pg, sql), sql, names=admin_db.names)
    untouched.check()


@pytest.mark.slow
def test_the_plan_check_alone_lets_questions_through(pg, admin_db):
    for sql in READS:
        if "lpad" not in sql:  # a padding call passes the plan only once the first reading checked it
            check_plan(_plan(pg, sql), sql, names=admin_db.names)


# -- 3. one query per call, through a server-side cursor --------------------------------------

PROTOCOL_ATTACKS = _attacks(
    [n for n, p in REFUSED.items() if p.expected == "not_a_query"]
    + ["writes: a CTE that deletes", "writes: a CTE that updates", "writes: a CTE that inserts", "writes: SELECT INTO"],
    [("two statements, a read then a write through a function", "SELECT 1; SELECT add_row()")],
)
"""Several statements in one text, and every statement that is not a query (the server declares a
cursor only for a query without a writing CTE or INTO)."""


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", PROTOCOL_ATTACKS, ids=ids(PROTOCOL_ATTACKS))
def test_one_query_through_a_cursor_alone_refuses_statements_and_several(pg, name, sql):
    """The guard's runner (``_run``) on a plain connection of the superuser that may write: no
    check, no read-only session or transaction (its transaction is rolled back whatever happens)."""
    untouched = Untouched(pg)
    with psycopg.connect(pg["admin"], autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as raised:
            with conn.transaction(force_rollback=True):
                module._run(conn, sql, (), 30.0, 10, 100_000)
        _refused(raised.value, psycopg.errors.SyntaxError, psycopg.errors.FeatureNotSupported)
        assert re.search("syntax error|cannot insert multiple commands|DECLARE CURSOR|INTO is not allowed",
                         str(raised.value)), str(raised.value)
    untouched.check()


# -- 4. the read-only transaction on a read-only session --------------------------------------

READ_ONLY_ATTACKS = _attacks(
    ["writes: DELETE", "writes: INSERT", "writes: UPDATE", "writes: DROP TABLE", "writes: CREATE TABLE",
     "writes: CREATE TABLE AS", "writes: TRUNCATE", "writes: ALTER TABLE", "writes: a CTE that deletes",
     "writes: a CTE that updates", "writes: a CTE that inserts", "writes: set_config of the transaction, in a subquery",
     "writes: two statements, a read then a drop", "writes: two statements, a commit and a delete after a read",
     "writes: two statements, the separator hidden after a comment", "writes: SELECT INTO",
     "writes: CREATE TEMP TABLE", "writes: CREATE TEMPORARY VIEW", "writes: DO block", "writes: CREATE FUNCTION",
     "writes: EXPLAIN ANALYZE of a delete", "writes: GRANT", "writes: COMMENT ON", "writes: MERGE",
     "locks: FOR UPDATE", "locks: FOR SHARE", "locks: FOR NO KEY UPDATE", "locks: FOR KEY SHARE SKIP LOCKED",
     "locks: FOR UPDATE in a subquery", "files: COPY from a program", "network: CREATE EXTENSION dblink",
     "network: IMPORT FOREIGN SCHEMA"],
    [("a function that writes", "SELECT add_row()"),
     ("a function that writes, in a filter", "SELECT name FROM singer WHERE add_row() = 1"),
     ("a procedure that writes", "CALL add_rows()"),
     ("nextval of a sequence", "SELECT nextval('s')"),
     ("setval of a sequence", "SELECT setval('s', 100)")],
)
"""Every write to the database or its catalogue, a lock on rows, a sequence advanced. What a
read-only transaction does not stop, as a superuser (server files written with COPY TO or
pg_file_write, a large object made with lo_from_bytea, advisory locks, other sessions ended,
SET TRANSACTION READ WRITE first in a transaction), the check, the plan and the role stop.
The read-only transaction and the session's read-only default are each tested alone."""


ESCAPES_ITS_TRANSACTION = "writes: two statements, a commit and a delete after a read"
"""Ends the transaction itself: what stops its write is the session's read-only default."""


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", [c for c in READ_ONLY_ATTACKS if c[0] != ESCAPES_ITS_TRANSACTION],
                         ids=[n for n in ids(READ_ONLY_ATTACKS) if n != ESCAPES_ITS_TRANSACTION])
def test_the_read_only_transaction_alone_refuses_writes(pg, admin_db, name, sql):
    """A session the guard opens, as the superuser (so the role stops nothing), its read-only
    default turned off: the statement, sent as it is, runs in the transaction the guard runs every
    statement in (``BEGIN READ ONLY``; rolled back whatever happens)."""
    untouched = Untouched(pg)
    conn = admin_db._connect()
    try:
        conn.execute("SET default_transaction_read_only = off")
        with pytest.raises(psycopg.Error) as raised:
            with conn.transaction(force_rollback=True):
                conn.execute(sql)
        _refused(raised.value, psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.ActiveSqlTransaction)
        for read in READS:
            conn.execute(read).fetchall()
    finally:
        conn.close()
    untouched.check()


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", READ_ONLY_ATTACKS, ids=ids(READ_ONLY_ATTACKS))
def test_the_read_only_session_alone_refuses_writes(pg, admin_db, name, sql):
    """A session the guard opens, as the superuser, the statement sent on its own, outside any
    transaction of the guard's: the session's read-only default refuses it."""
    untouched = Untouched(pg)
    conn = admin_db._connect()
    try:
        with pytest.raises(psycopg.Error) as raised:
            conn.execute(sql)
        _refused(raised.value, psycopg.errors.ReadOnlySqlTransaction, psycopg.errors.ActiveSqlTransaction)
        for read in READS:
            conn.execute(read).fetchall()
    finally:
        conn.close()
    untouched.check()


# -- 5. the read-only role --------------------------------------------------------------------

ROLE_ATTACKS = _attacks(
    ["catalogue: pg_shadow", "catalogue: pg_authid's passwords", "catalogue: pg_authid qualified",
     "catalogue: TABLE pg_authid", "catalogue: current_setting", "catalogue: SHOW",
     "privacy: current_setting of data_directory", "privacy: current_setting of a setting that may be missing",
     "privacy: SHOW data_directory", "privacy: pg_file_settings", "privacy: pg_current_logfile",
     "privacy: pg_hba_file_rules",
     "files: pg_read_file", "files: pg_read_file with offsets, in a subquery", "files: pg_read_file qualified by its schema",
     "files: pg_read_file by a quoted name", "files: pg_read_binary_file", "files: pg_ls_dir in FROM",
     "files: pg_stat_file", "files: lo_import", "files: lo_export", "files: COPY to a file", "files: COPY from a program",
     "files: query_to_xml running a statement given as text", "files: pg_file_write (adminpack)",
     "locks: FOR UPDATE", "locks: FOR SHARE", "locks: FOR NO KEY UPDATE", "locks: FOR KEY SHARE SKIP LOCKED",
     "locks: FOR UPDATE in a subquery", "locks: LOCK TABLE",
     "network: dblink in FROM", "network: dblink_exec", "network: dblink_connect",
     "spellings: pg_read_file in field-selection notation",
     "spellings: pg_read_file, field selection of a subquery's column",
     "spellings: pg_read_file, field selection in ORDER BY", "spellings: pg_ls_dir in field-selection notation",
     "spellings: pg_ls_dir in ROWS FROM", "spellings: pg_file_unlink in field-selection notation",
     "spellings: lo_import in field-selection notation", "spellings: dblink_connect in field-selection notation",
     "spellings: pg_import_system_collations in field-selection notation",
     "spellings: a replication slot in field-selection notation",
     "spellings: pg_stat_reset_single_table_counters in field-selection notation",
     "spellings: current_setting in field-selection notation",
     "writes: DELETE", "writes: INSERT", "writes: UPDATE", "writes: DROP TABLE", "writes: CREATE TABLE",
     "writes: CREATE TABLE AS", "writes: TRUNCATE", "writes: ALTER TABLE", "writes: a CTE that deletes",
     "writes: a CTE that updates", "writes: a CTE that inserts", "writes: two statements, a read then a drop",
     "writes: two statements, a commit and a delete after a read",
     "writes: two statements, the separator hidden after a comment", "writes: SELECT INTO",
     "writes: CREATE TEMP TABLE", "writes: CREATE TEMPORARY VIEW", "writes: DO block", "writes: CREATE FUNCTION",
     "writes: EXPLAIN ANALYZE of a delete", "writes: COMMENT ON", "writes: MERGE"],
    [("a function that writes", "SELECT add_row()"),
     ("a procedure that writes", "CALL add_rows()"),
     ("nextval of a sequence", "SELECT nextval('s')"),
     ("setval of a sequence", "SELECT setval('s', 100)"),
     ("the secret file read", f"SELECT pg_read_file('{OUTSIDE}/secret.txt')"),
     ("the secret file imported", f"SELECT lo_import('{OUTSIDE}/secret.txt')"),
     ("a table copied beside the server's data", f"COPY singer TO '{OUTSIDE}/dump.csv'")],
)
"""Writes, temporary objects and locks on rows, the server's files, programs, settings and
passwords, other servers. What the role alone allows (the catalogue's open views, settings a
session may set, advisory locks, large objects it makes, its own sessions signalled) the check,
the plan, the read-only transaction and the reset stop."""

_ROLE_REFUSALS = (psycopg.errors.InsufficientPrivilege, psycopg.errors.ProhibitedSqlStatementAttempted)
"""Permission denied; and dblink's own refusal of a role that is not a superuser (no password)."""


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", ROLE_ATTACKS, ids=ids(ROLE_ATTACKS))
def test_the_role_alone_refuses_writes_files_and_the_server(pg, name, sql):
    """A plain connection of the role the guard's :data:`READONLY_ROLE_SQL` makes: not read-only,
    no settings of the guard, no check; each statement in a transaction rolled back whatever
    happens."""
    untouched = Untouched(pg)
    with psycopg.connect(pg["reader"], autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as raised:
            with conn.transaction(force_rollback=True):
                conn.execute(_outside(sql, pg))
        _refused(raised.value, *_ROLE_REFUSALS)
        if "dblink" in sql:
            assert "password is required" in str(raised.value)
        for read in READS:
            conn.execute(read).fetchall()
    untouched.check()


@pytest.mark.slow
def test_the_guard_reads_the_role_as_read_only(reader_db):
    assert reader_db.role_write_reasons() == []


# -- 6. the time limit ------------------------------------------------------------------------

TIME_ATTACKS = [(n, p.input) for n, p in CASES.items() if p.expected == "timeout"]
"""Reads that run on (trillions of streamed rows, quintillions joined): they pass every other layer."""


OUTSIDE_STOP_ATTACKS = [(n, sql) for n, sql in TIME_ATTACKS if n.startswith("time:")][:2]
"""Two statements that only take time (no value grows): the stop from outside is the one stop."""


WATCHDOG_S = 120.0
"""How long a test lets a statement run before it stops it itself, far past any budget here: a
layer that does not stop it then fails the test instead of hanging it."""


@pytest.fixture
def timed_db(pg):
    """The read-only role's database, its sessions' own time limit far off (600 s)."""
    db = PostgresDatabase(pg["reader"], timeout_s=600, workers=1, prestart=False)
    yield db
    db.close()


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", TIME_ATTACKS, ids=ids(TIME_ATTACKS))
def test_the_servers_time_limit_alone_stops_a_statement(pg, timed_db, monkeypatch, name, sql):
    """Each statement passes the check and the plan (it only reads); the stop from outside is
    switched off and the session's own limit is far off: what stops it is the statement's
    ``statement_timeout``, set to its budget."""
    untouched = Untouched(pg)
    monkeypatch.setattr(module, "_watch", lambda *args, **kw: NeverStopped())
    assert isinstance(within(WATCHDOG_S, timed_db, sql, 0.5), QueryTimeoutError)
    assert timed_db.execute("SELECT count(*) FROM singer").rows == [(6,)]
    untouched.check()


@pytest.mark.slow
def test_the_stop_from_outside_alone_ends_a_statement(pg, timed_db, monkeypatch):
    """With the statement's ``statement_timeout`` never set (the session's is far off), what
    stops each statement is the cancel sent from outside at its budget plus the grace."""
    untouched = Untouched(pg)
    monkeypatch.setattr(module, "_set_timeout", lambda conn, seconds: None)
    for name, sql in OUTSIDE_STOP_ATTACKS:
        assert isinstance(within(WATCHDOG_S, timed_db, sql, 0.5), QueryTimeoutError), name
    monkeypatch.undo()
    assert timed_db.execute("SELECT count(*) FROM singer").rows == [(6,)]
    untouched.check()


# -- 7. the reset between statements ----------------------------------------------------------

LEFT_BEHIND = [
    ("an advisory lock held by the session", "SELECT pg_advisory_lock(4242)"),
    ("more memory for the session", "SELECT set_config('work_mem', '1GB', false)"),
    ("no time limit for the session", "SELECT set_config('statement_timeout', '0', false)"),
    ("no lock time limit for the session", "SET lock_timeout = 0"),
    ("the session's read-only default off", "SELECT set_config('default_transaction_read_only', 'off', false)"),
    ("the session's transactions read-write", "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE"),
    ("the search path moved", "SET search_path = pg_catalog, public"),
    ("a prepared statement", "PREPARE kept AS SELECT 1"),
    ("a channel listened to", "LISTEN sqlchorus_channel"),
    ("a cursor held past its transaction", "DECLARE kept CURSOR WITH HOLD FOR SELECT 1"),
]
"""What a statement that got past the checks could leave on a pooled session for the next one."""


def _session(conn, admin: str) -> dict[str, object]:
    """What a session carries from one statement to the next."""
    with psycopg.connect(admin, autocommit=True) as other:
        locks = other.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
                              (conn.info.backend_pid,)).fetchone()[0]
    shown = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in (
        "work_mem", "statement_timeout", "lock_timeout", "default_transaction_read_only", "search_path")}
    return {"advisory locks": locks, **shown,
            "prepared": conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0],
            "listening": conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone()[0],
            "cursors": conn.execute("SELECT count(*) FROM pg_cursors").fetchone()[0]}


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", LEFT_BEHIND, ids=ids(LEFT_BEHIND))
def test_the_reset_alone_leaves_nothing_of_a_statement_on_its_session(pg, reader_db, name, sql):
    """A session the guard opens, as the read-only role; the statement sent as it is (in the
    session's transaction), then the guard's reset: the session is as a fresh one again."""
    conn = reader_db._connect()
    try:
        fresh = _session(conn, pg["admin"])
        with conn.transaction():
            conn.execute(sql)
        assert _session(conn, pg["admin"]) != fresh, "the statement left nothing to reset"
        reader_db._connect.reset(conn)
        assert _session(conn, pg["admin"]) == fresh
    finally:
        conn.close()


# -- 8. the result caps -----------------------------------------------------------------------

CAP_ATTACKS = [(n, p.input, p.meta) for n, p in CASES.items() if p.expected == "ok, truncated"]


@pytest.mark.slow
@pytest.mark.parametrize("name,sql,meta", CAP_ATTACKS, ids=ids(CAP_ATTACKS))
def test_the_result_caps_alone_cut_rows_and_bytes(reader_db, name, sql, meta):
    """Each statement passes every other layer (a read, within its budget): the caps cut it."""
    assert_the_caps_cut(reader_db, sql, meta)


def test_the_corpus_still_has_what_the_layers_take_from_it():
    """Cases are chosen from the fixtures by name (``_attacks`` fails on a missing one); these
    are counted, so that a renamed class or case does not silently leave a layer with less."""
    assert len(TIME_ATTACKS) == 7 and len(CAP_ATTACKS) == 2
    assert set(UNQUALIFIED_CATALOGUE) <= set(REFUSED) and NOT_PLANNED | NOT_THE_PLANS <= set(REFUSED)
