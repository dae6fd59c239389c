"""Each layer of the MySQL/MariaDB guard, alone.

The guard (:mod:`sqlchorus.tools.engines.mysql`) stands in layers: the statement check (two
readings: the server's rules of reading text, :func:`~sqlchorus.tools.engines.mysql_check.
check_text`, then sqlglot's), the check of the server's reading of the statement (:func:`~sqlchorus.
tools.engines.mysql_check.check_note`), one statement per call, the read-only transaction on a
read-only session, the read-only user, the time limit (the server's own, then ``KILL`` from
outside), the bound on recursion, the reset between statements, and the result caps. With the
check in front, a layer behind it is never seen at work. Each test here assembles one layer from
the guard's own parts, with the others off, and runs the part of the attack corpus that layer is
meant to stop: every attack must be refused by that layer (its own error: the check's, or the
server's error code for that layer), the server must be left as it was (every table's checksum,
user, routine, named lock, sequence, global setting and the folder the server may write to, see
``test_mysql_guard.server_state``), and nothing outside the database (a secret file the server can
read, another database's secret) may come back; the questions a user asks must still pass the
layer alone.

The readings of the check need no server and run in the quick tier; the rest start a MariaDB
server (one for the module) and are marked slow. The corpus is tests/fixtures/guard_corpus_mysql;
its database (``test_mysql_guard.prepare_concert``) has a function and a procedure that write, a
sequence, and another database holding a secret.
"""

from __future__ import annotations

import re

import pytest

from conftest import FIXTURES, load_pairs, spider_db
from guard_layers import NeverStopped, assert_the_caps_cut, ids, within
from servers import mariadb_of_a_test
from test_mysql_guard import DATABASE, OTHER_SECRET, SECRET_FILE_TEXT, TABLES, prepare_concert, server_state

from sqlchorus.tools.engines import mysql as module
from sqlchorus.tools.engines.mysql import MAX_RECURSION, MySQLDatabase, check_mysql_query, readonly_user_sql
from sqlchorus.tools.engines.mysql_check import check_note, check_text
from sqlchorus.tools.sql.errors import ForbiddenError, NotAQueryError, QueryTimeoutError

pymysql = pytest.importorskip("pymysql")

CORPUS = FIXTURES / "guard_corpus_mysql"
CASES = {f"{path.stem}: {p.name}": p for path in sorted(CORPUS.glob("*.sql")) for p in load_pairs(path)}
REFUSED = {name: p for name, p in CASES.items() if p.expected in ("forbidden", "not_a_query")}
USER = "layer_reader"
"""A user made by the guard's own :func:`readonly_user_sql`."""
USER_PASSWORD = "layer-Pw-8d2"
OUTSIDE = "{outside}"
"""How the corpus names the folder the server may read and write (secure_file_priv)."""
SECRETS = (SECRET_FILE_TEXT, OTHER_SECRET)
WATCHDOG_S = 120.0
"""How long a test lets a statement run before it stops it itself, far past any budget here: a
layer that does not stop it then fails the test instead of hanging it."""


def _attacks(names, extra=()):
    """The corpus's cases of ``names`` (each must exist), then ``extra``: ``(name, sql)`` pairs."""
    missing = [n for n in names if n not in CASES]
    assert not missing, f"no such case in the corpus: {missing}"
    return [(n, CASES[n].input) for n in names] + list(extra)


READS = [p.input for p in CASES.values() if p.expected == "ok" and "RECURSIVE" not in p.input] + [
    "SELECT Name, Age FROM singer WHERE Age > 30 ORDER BY Age DESC",
    "SELECT Country, count(*), avg(Age) FROM singer GROUP BY Country HAVING count(*) >= 1",
    "SELECT s.Name FROM singer AS s JOIN singer_in_concert AS sc ON sc.Singer_ID = s.Singer_ID",
    "SELECT date_format(now(), '%Y'), group_concat(Name ORDER BY Name SEPARATOR ', ') FROM singer",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) SELECT sum(i) FROM n",
]
"""Questions a user asks: every layer alone lets them run."""


def _ctes(sql: str) -> set[str]:
    """The names of ``sql``'s common table expressions (what the guard tells the text check)."""
    return set(re.findall(r"(?:WITH(?: RECURSIVE)?|,)\s+(\w+)\s*(?:\([^)]*\))?\s+AS\s*\(", sql, re.IGNORECASE))


# -- 1a. the check: the server's rules of reading text ------------------------------------------

SQLGLOTS = {n for n, p in REFUSED.items() if p.expected == "not_a_query"} | {
    "catalogue: information_schema.TABLES", "catalogue: information_schema in capitals, quoted",
    "catalogue: the users and their passwords", "catalogue: the users, with spaces around the dot",
    "catalogue: other sessions", "catalogue: the sys schema", "catalogue: the catalogue in a subquery of a plain read",
    "catalogue: TABLE of the users", "catalogue: another database",
    "catalogue: another database, quoted, joined to a plain read",
}
"""Statements that are not a query, and tables of the server's catalogue or of another database:
sqlglot's reading refuses them. (A few of them the text's reading refuses as well, for what it
sees in them: ``INSERT INTO stadium (...)`` reads as a call.)"""

TEXT_ATTACKS = [(n, p.input) for n, p in REFUSED.items() if n not in SQLGLOTS or n in {
    "writes: INSERT", "writes: REPLACE", "writes: a read, then a delete, in one text",
    "writes: leaving the read-only transaction, then inserting, in one text", "writes: CALL of a procedure",
    "writes: DO", "files: LOAD XML", "network: a table of another server through the CONNECT engine",
    "network: FEDERATED"}]
"""Calls of functions not allowed (files, sleeps, locks, identity, stored and loadable functions,
sequences), executable comments and hints, variables, INTO, row locks, several statements."""


@pytest.mark.parametrize("name,sql", TEXT_ATTACKS, ids=ids(TEXT_ATTACKS))
def test_the_texts_reading_alone_refuses_calls_comments_variables_and_clauses(name, sql):
    """:func:`check_text` with nothing else."""
    with pytest.raises((ForbiddenError, NotAQueryError)):
        check_text(sql.replace(OUTSIDE, "/srv/outside"))


@pytest.mark.parametrize("sql", READS)
def test_the_texts_reading_alone_lets_questions_through(sql):
    check_text(sql, not_calls=_ctes(sql))


# -- 1b. the check: sqlglot's reading ---------------------------------------------------------

SQLGLOT_ATTACKS = [(n, REFUSED[n].input) for n in sorted(SQLGLOTS)] + [
    ("a table MariaDB's sequence engine makes up", "SELECT count(*) FROM seq_1_to_1000000000"),
    ("a server setting", "SELECT @@datadir"),
    ("a user variable assigned", "SELECT @x := Name FROM singer"),
]
"""What is not one query, tables of the catalogue, of another database or of the sequence
engine, and variables."""


@pytest.mark.parametrize("name,sql", SQLGLOT_ATTACKS, ids=ids(SQLGLOT_ATTACKS))
def test_sqlglots_reading_alone_refuses_statements_and_other_databases(monkeypatch, name, sql):
    """:func:`check_mysql_query` with its reading of the text switched off."""
    monkeypatch.setattr(module, "check_text", lambda *args, **kw: None)
    with pytest.raises((ForbiddenError, NotAQueryError)):
        check_mysql_query(sql.replace(OUTSIDE, "/srv/outside"), database=DATABASE, tables=TABLES)


@pytest.mark.parametrize("sql", READS)
def test_sqlglots_reading_alone_lets_questions_through(monkeypatch, sql):
    monkeypatch.setattr(module, "check_text", lambda *args, **kw: None)
    check_mysql_query(sql, database=DATABASE, tables=TABLES)


# -- the server -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    yield from mariadb_of_a_test()


@pytest.fixture(scope="module")
def my(server):
    """concert_singer as the corpus expects it, other_db beside it, and a user made by the guard's
    own :func:`readonly_user_sql`. Its URLs: ``admin`` (every privilege) and ``reader``."""
    source = spider_db(DATABASE)
    if not source.exists():
        pytest.skip(f"Spider database {DATABASE} not found at {source}")
    prepare_concert(server, source)
    user_sql = readonly_user_sql(DATABASE).replace("'reader'", f"'{USER}'").replace("'...'", f"'{USER_PASSWORD}'")
    server.admin_sql(*[s for s in user_sql.split(";\n") if s.strip()])
    return {"admin": server.url(DATABASE), "reader": server.url(DATABASE, USER, USER_PASSWORD), "server": server,
            "state": server_state(server)}


@pytest.fixture(scope="module")
def admin_db(my):
    """The administrator (every privilege), opened as an administrator may (allow_writable_role),
    so that the user stops nothing; a long budget, so that only a statement's own stops it."""
    db = MySQLDatabase(my["admin"], timeout_s=600, workers=1, prestart=False, allow_writable_role=True)
    yield db
    db.close()


@pytest.fixture(scope="module")
def reader_db(my):
    db = MySQLDatabase(my["reader"], timeout_s=600, workers=1, prestart=False)
    yield db
    db.close()


class Untouched:
    """The server as the module set it up (``server_state``, taken once: nothing here may change
    it); :meth:`check` asserts it still is."""

    def __init__(self, my):
        self.server = my["server"]
        self.state = my["state"]

    def check(self) -> None:
        assert server_state(self.server) == self.state


def _outside(sql: str, my) -> str:
    return sql.replace(OUTSIDE, str(my["server"].outside))


def _code(error: BaseException) -> int:
    return error.args[0] if error.args and isinstance(error.args[0], int) else 0


def _no_secret(*texts: object) -> None:
    for text in texts:
        assert not any(secret in str(text) for secret in SECRETS), text


def _raw(my, url: str = "admin"):
    """A plain PyMySQL connection of ``url``'s user, with nothing of the guard: autocommit, the
    server's default SQL mode, read-write, no time limit."""
    params = module.connection_parameters(my[url])
    return pymysql.connect(**params, charset="utf8mb4", autocommit=True)


# -- 2. the check of the server's reading -----------------------------------------------------

NOTE_ATTACKS = _attacks([
    "catalogue: information_schema.TABLES", "catalogue: information_schema in capitals, quoted",
    "catalogue: the users and their passwords", "catalogue: the users, with spaces around the dot",
    "catalogue: other sessions", "catalogue: the sys schema", "catalogue: another database",
    "catalogue: another database, quoted, joined to a plain read", "catalogue: a server setting",
    "catalogue: a server setting, qualified", "catalogue: a user variable assigned", "catalogue: a user variable read",
    "catalogue: version", "catalogue: user", "catalogue: current_user, without parentheses", "catalogue: database",
    "catalogue: connection_id",
    "files: LOAD_FILE", "files: LOAD_FILE in lower case, in a subquery", "files: LOAD_FILE as a quoted name",
    "files: LOAD_FILE with a space before the parenthesis", "files: LOAD_FILE in an executable comment",
    "files: LOAD_FILE in a MariaDB executable comment", "files: LOAD_FILE after two dashes that are not a comment",
    "files: LOAD_FILE on the line after a hash comment",
    "locks: GET_LOCK", "locks: GET_LOCK as a quoted name", "locks: GET_LOCK in an executable comment",
    "locks: IS_USED_LOCK", "locks: IS_FREE_LOCK", "locks: RELEASE_ALL_LOCKS",
    "network: a name lookup leaking data through a UNC path", "network: waiting for replication",
    "network: waiting for a GTID",
])
"""Calls, variables and tables as the server resolved them, executable comments' included. Not
here: what the optimizer evaluates while planning (a constant subquery: the catalogue read, or
GET_LOCK, is done and folded away before the reading is printed; a stored function runs, and the
read-only transaction refuses its write), INTO (the printed reading leaves it out), and clauses
the server refuses to explain in a read-only transaction (FOR UPDATE): the text's reading, the
read-only transaction and the user stop those."""


def _note(my, sql: str) -> str:
    """The server's reading of ``sql`` (``EXPLAIN EXTENDED``'s note 1003, as the guard takes it),
    made by the administrator in a read-only transaction under a time limit: EXPLAIN plans,
    never runs."""
    conn = _raw(my)
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION READ ONLY")
            cur.execute("SET STATEMENT max_statement_time = 30 FOR EXPLAIN EXTENDED " + sql)
            cur.fetchall()
            cur.execute("SHOW WARNINGS")
            notes = [str(row[2]) for row in cur.fetchall() if row[1] == 1003]
            cur.execute("ROLLBACK")
    finally:
        conn.close()
    assert notes, "the server gave no reading"
    return notes[-1]


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", NOTE_ATTACKS, ids=ids(NOTE_ATTACKS))
def test_the_servers_reading_alone_refuses_what_it_would_call_and_read(my, name, sql):
    """:func:`check_note` on the server's reading of the statement as written, with no reading
    of the text before it."""
    untouched = Untouched(my)
    sql = _outside(sql, my)
    with pytest.raises(ForbiddenError) as raised:
        check_note(_note(my, sql), sql, database=DATABASE)
    _no_secret(raised.value.message)
    untouched.check()


@pytest.mark.slow
def test_the_servers_reading_alone_lets_questions_through(my):
    for sql in READS:
        check_note(_note(my, sql), sql, database=DATABASE, not_calls=_ctes(sql))


# -- 3. one statement per call ----------------------------------------------------------------

SEVERAL_ATTACKS = _attacks(
    ["writes: a read, then a delete, in one text", "writes: leaving the read-only transaction, then inserting, in one text",
     "writes: a delete hidden in an executable comment"],
    [("a read, then a drop", "SELECT 1; DROP TABLE singer_in_concert"),
     ("a read, then the stored function that inserts", "SELECT Name FROM singer; SELECT add_row()")],
)
"""Several statements in one text, the second one a write (however hidden)."""


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", SEVERAL_ATTACKS, ids=ids(SEVERAL_ATTACKS))
def test_one_statement_per_call_alone_refuses_several(my, admin_db, name, sql):
    """A connection as the guard opens it before any setting (``raw``), as the administrator:
    read-write, no check; the server parses the text as one statement and refuses it."""
    untouched = Untouched(my)
    conn = admin_db._connect.raw()
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION")
            with pytest.raises(pymysql.err.ProgrammingError) as raised:
                cur.execute(sql)
            cur.execute("ROLLBACK")
        assert _code(raised.value) == 1064, raised.value
    finally:
        conn.close()
    untouched.check()


# -- 4. the read-only transaction on a read-only session --------------------------------------

READ_ONLY_ATTACKS = _attacks(
    ["writes: DELETE", "writes: INSERT", "writes: REPLACE", "writes: UPDATE", "writes: DROP TABLE",
     "writes: CREATE TABLE AS", "writes: CREATE TEMPORARY TABLE", "writes: TRUNCATE", "writes: ALTER TABLE",
     "writes: a stored function that inserts", "writes: the same, qualified by its database",
     "writes: the same, quoted and with a space before the parenthesis",
     "writes: the stored function in a filter of a plain read", "writes: CALL of a procedure", "writes: DO",
     "writes: a sequence advanced", "writes: a sequence advanced, standard spelling",
     "locks: FOR UPDATE", "locks: FOR UPDATE NOWAIT in a subquery", "locks: LOCK TABLES",
     "files: LOAD DATA INFILE", "network: a table of another server through the CONNECT engine",
     "network: FEDERATED", "network: loading a plugin", "network: making a loadable function"],
)
"""Every write to the database, its schema or the server's tables, a stored routine that writes,
a sequence advanced, rows locked. What a read-only transaction does not stop (INTO OUTFILE and
named locks are not transactional; a setting of the session) the check, the user and the reset
stop. The read-only transaction and the session's read-only default are each tested alone."""

READ_ONLY_REFUSALS = {1792}
"""ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION."""


ESCAPE_THEIR_TRANSACTION = {
    "writes: DROP TABLE", "writes: CREATE TABLE AS", "writes: TRUNCATE", "writes: ALTER TABLE", "locks: LOCK TABLES",
    "network: a table of another server through the CONNECT engine", "network: FEDERATED",
    "network: loading a plugin", "network: making a loadable function",
}
"""Statements the server runs only after committing the transaction they are sent in (schema
changes, LOCK TABLES, plugins and loadable functions installed): what stops them is the session's
read-only default, not the transaction."""

TRANSACTION_ATTACKS = [c for c in READ_ONLY_ATTACKS if c[0] not in ESCAPE_THEIR_TRANSACTION]


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", TRANSACTION_ATTACKS, ids=ids(TRANSACTION_ATTACKS))
def test_the_read_only_transaction_alone_refuses_writes(my, admin_db, name, sql):
    """A session the guard opens, as the administrator (so the user stops nothing), its read-only
    default turned off: the statement, sent as it is with no check, runs through the guard's
    runner (``_run``) in the read-only transaction it runs every statement in."""
    untouched = Untouched(my)
    conn = admin_db._connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION tx_read_only = 0")
        with pytest.raises(pymysql.err.MySQLError) as raised:
            module._run(conn, _outside(sql, my), 30.0, 10, 100_000, opener=admin_db._connect)
        assert _code(raised.value) in READ_ONLY_REFUSALS, raised.value
        with conn.cursor() as cur:
            for read in READS:
                cur.execute(read)
                cur.fetchall()
    finally:
        conn.close()
    untouched.check()


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", READ_ONLY_ATTACKS, ids=ids(READ_ONLY_ATTACKS))
def test_the_read_only_session_alone_refuses_writes(my, admin_db, name, sql):
    """A session the guard opens, as the administrator, the statement sent on its own, outside any
    transaction of the guard's: the session's read-only default refuses it."""
    untouched = Untouched(my)
    conn = admin_db._connect()
    try:
        with conn.cursor() as cur:
            with pytest.raises(pymysql.err.MySQLError) as raised:
                cur.execute(_outside(sql, my))
            assert _code(raised.value) in READ_ONLY_REFUSALS, raised.value
            for read in READS:
                cur.execute(read)
                cur.fetchall()
    finally:
        conn.close()
    untouched.check()


# -- 5. the read-only user --------------------------------------------------------------------

USER_ATTACKS = _attacks(
    ["catalogue: the users and their passwords", "catalogue: the users, with spaces around the dot",
     "catalogue: other sessions", "catalogue: the sys schema", "catalogue: the catalogue in a subquery of a plain read",
     "catalogue: another database", "catalogue: another database, quoted, joined to a plain read",
     "catalogue: USE another database",
     "files: INTO OUTFILE after FROM", "files: INTO OUTFILE before FROM", "files: INTO DUMPFILE",
     "files: INTO OUTFILE after a UNION", "files: INTO OUTFILE in an executable comment", "files: LOAD DATA INFILE",
     "locks: LOCK TABLES", "locks: FLUSH TABLES WITH READ LOCK", "locks: BACKUP STAGE",
     "network: sys_exec, a loadable function that runs a program", "network: sys_eval", "network: http_get",
     "network: loading a plugin", "network: making a loadable function", "network: replication to another server",
     "writes: DELETE", "writes: INSERT", "writes: REPLACE", "writes: UPDATE", "writes: DROP TABLE",
     "writes: CREATE TABLE AS", "writes: CREATE TEMPORARY TABLE", "writes: TRUNCATE", "writes: ALTER TABLE",
     "writes: a stored function that inserts", "writes: the same, qualified by its database",
     "writes: the same, quoted and with a space before the parenthesis",
     "writes: the stored function in a filter of a plain read", "writes: CALL of a procedure", "writes: PREPARE",
     "writes: DO", "writes: a sequence advanced", "writes: a sequence advanced, standard spelling"],
)
"""Writes, temporary tables, routines, sequences, files written or loaded, the server's own
tables, other databases, locks on tables, plugins, replication. What a read-only user may do (read
the catalogue's open views, variables, named locks, settings of its session, its own sessions)
the check, the server's reading, the time limit and the reset stop; stopping the server or ending
a session is not tried here, where the user's refusal would be all that stood between the test
and its own server."""

USER_REFUSALS = {1044, 1045, 1142, 1143, 1227, 1370}
"""Access denied to a database, to a user, for a command on a table or column, for a privilege
(FILE, SUPER, RELOAD), to run a routine."""

LOAD_FILE_ATTACKS = [(n, p.input) for n, p in REFUSED.items() if "LOAD_FILE" in p.input.upper()]
"""The server's files read: for a user without FILE, LOAD_FILE gives NULL."""


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", USER_ATTACKS, ids=ids(USER_ATTACKS))
def test_the_user_alone_refuses_writes_files_and_the_server(my, name, sql):
    """A plain connection of the user the guard's :func:`readonly_user_sql` makes: read-write
    session, the server's SQL mode, no check; each statement in a transaction rolled back."""
    untouched = Untouched(my)
    conn = _raw(my, "reader")
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION")
            with pytest.raises(pymysql.err.MySQLError) as raised:
                cur.execute(_outside(sql, my))
            cur.execute("ROLLBACK")
            assert _code(raised.value) in USER_REFUSALS, raised.value
            _no_secret(raised.value)
            for read in READS:
                cur.execute(read)
                cur.fetchall()
    finally:
        conn.close()
    untouched.check()


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", LOAD_FILE_ATTACKS, ids=ids(LOAD_FILE_ATTACKS))
def test_the_user_alone_reads_no_file_of_the_server(my, name, sql):
    untouched = Untouched(my)
    conn = _raw(my, "reader")
    try:
        with conn.cursor() as cur:
            cur.execute(_outside(sql, my))
            rows = cur.fetchall()
    finally:
        conn.close()
    assert all(value is None for row in rows for value in row[-1:]), rows
    _no_secret(rows)
    untouched.check()


@pytest.mark.slow
def test_the_guard_reads_the_user_as_read_only(reader_db):
    assert reader_db.user_write_reasons() == []


# -- 6. the time limit ------------------------------------------------------------------------

TIME_ATTACKS = [(n, p.input) for n, p in CASES.items() if p.expected == "timeout"]
"""Reads that run on (billions of rows of a self-join): they pass every other layer."""


OUTSIDE_STOP_ATTACKS = [(n, sql) for n, sql in TIME_ATTACKS if n.startswith("time:")][:2]
"""Two statements that only take time (no value grows): KILL from outside is the one stop."""


@pytest.fixture
def timed_db(my):
    db = MySQLDatabase(my["reader"], timeout_s=600, workers=1, prestart=False)
    yield db
    db.close()


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", TIME_ATTACKS, ids=ids(TIME_ATTACKS))
def test_the_servers_time_limit_alone_stops_a_statement(my, timed_db, monkeypatch, name, sql):
    """Each statement passes the check and the server's reading (it only reads); KILL from
    outside is switched off: what stops it is the time limit the server enforces for it."""
    untouched = Untouched(my)
    monkeypatch.setattr(module, "_watch", lambda *args, **kw: NeverStopped())
    assert isinstance(within(WATCHDOG_S, timed_db, sql, 0.5), QueryTimeoutError)
    assert timed_db.execute("SELECT count(*) FROM singer").rows == [(6,)]
    untouched.check()


@pytest.mark.slow
def test_the_kill_from_outside_alone_stops_a_statement(my, timed_db, monkeypatch):
    """With no time limit given to the server, what stops each statement is KILL from outside at
    its budget plus the grace."""
    untouched = Untouched(my)
    monkeypatch.setattr(module._Opener, "limited", lambda self, cur, text, seconds: text)
    for name, sql in OUTSIDE_STOP_ATTACKS:
        assert isinstance(within(WATCHDOG_S, timed_db, sql, 0.5), QueryTimeoutError), name
    monkeypatch.undo()
    assert timed_db.execute("SELECT count(*) FROM singer").rows == [(6,)]
    untouched.check()


# -- 7. the bound on recursion ----------------------------------------------------------------

RECURSION_ATTACKS = [(n, p.input) for n, p in CASES.items() if "without an end" in n] + [
    ("an endless recursion filtered to nothing",
     "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c WHERE n < 0"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", RECURSION_ATTACKS, ids=ids(RECURSION_ATTACKS))
def test_the_recursion_bound_alone_ends_an_endless_recursion(my, reader_db, name, sql):
    """A session the guard opens, the statement sent as it is: the session's bound ends the
    recursion after its iterations. (A time limit of a minute guards the test, not the server:
    should the bound not hold, the statement is stopped by it and the test fails.)"""
    conn = reader_db._connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET STATEMENT max_statement_time = 60 FOR {sql}")
            rows = cur.fetchall()
    finally:
        conn.close()
    assert len(rows) == 1 and rows[0][0] <= MAX_RECURSION + 1


# -- 8. the reset between statements ----------------------------------------------------------

LEFT_BEHIND = [
    ("a named lock held by the session", "SELECT GET_LOCK('sqlchorus', 0)"),
    ("a user variable", "SELECT @kept := 5"),
    ("the session's read-only default off", "SET SESSION tx_read_only = 0"),
    ("the recursion bound lifted", "SET SESSION max_recursive_iterations = 4000000000"),
    ("a SQL mode that reads text otherwise", "SET SESSION sql_mode = 'ANSI_QUOTES,NO_BACKSLASH_ESCAPES'"),
    ("group_concat's bound lifted", "SET SESSION group_concat_max_len = 4294967295"),
    ("a prepared statement", "PREPARE kept FROM 'SELECT 1'"),
]
"""What a statement that got past the checks could leave on a pooled session for the next one."""


def _session(conn) -> dict[str, object]:
    """What a session carries from one statement to the next."""
    with conn.cursor() as cur:
        cur.execute("SELECT IS_USED_LOCK('sqlchorus') = CONNECTION_ID(), @kept, @@SESSION.tx_read_only, "
                    "@@SESSION.max_recursive_iterations, @@SESSION.sql_mode, @@SESSION.group_concat_max_len")
        state = dict(zip(("lock", "variable", "read only", "recursion", "sql mode", "group_concat"), cur.fetchone()))
        try:
            cur.execute("EXECUTE kept")
            cur.fetchall()
            state["prepared"] = True
        except pymysql.err.MySQLError:
            state["prepared"] = False
    return state


@pytest.mark.slow
@pytest.mark.parametrize("name,sql", LEFT_BEHIND, ids=ids(LEFT_BEHIND))
def test_the_reset_alone_leaves_nothing_of_a_statement_on_its_session(my, reader_db, name, sql):
    """A session the guard opens, as the read-only user; the statement sent as it is, then the
    guard's reset: the session is as a fresh one again."""
    conn = reader_db._connect()
    try:
        fresh = _session(conn)
        with conn.cursor() as cur:
            cur.execute(sql)
        assert _session(conn) != fresh, "the statement left nothing to reset"
        reader_db._connect.reset(conn)
        assert _session(conn) == fresh
    finally:
        conn.close()


# -- 9. the result caps -----------------------------------------------------------------------

CAP_ATTACKS = [(n, p.input, p.meta) for n, p in CASES.items() if p.expected == "ok, truncated"]


@pytest.mark.slow
@pytest.mark.parametrize("name,sql,meta", CAP_ATTACKS, ids=ids(CAP_ATTACKS))
def test_the_result_caps_alone_cut_rows_and_bytes(reader_db, name, sql, meta):
    """Each statement passes every other layer (a read, within its budget): the caps cut it."""
    assert_the_caps_cut(reader_db, sql, meta)


def test_the_corpus_still_has_what_the_layers_take_from_it():
    """Cases are chosen from the fixtures by name (``_attacks`` fails on a missing one); these
    are counted, so that a renamed class or case does not silently leave a layer with less."""
    assert len(TIME_ATTACKS) == 6 and len(CAP_ATTACKS) == 2 and len(LOAD_FILE_ATTACKS) == 9
    assert len(RECURSION_ATTACKS) == 2 and SQLGLOTS <= set(REFUSED)
    assert ESCAPE_THEIR_TRANSACTION <= {name for name, _ in READ_ONLY_ATTACKS}
