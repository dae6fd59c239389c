"""Each layer of the DuckDB guard, alone.

The guard (:mod:`sqlchorus.tools.engines.duckdb`) stands in layers: the statement check, the
connection's settings (:func:`~sqlchorus.tools.engines.duckdb_guard.settings`: read-only, external
access off, extensions neither installed nor loaded, no temporary directory, memory bounded, the
configuration locked), the timer that interrupts a statement at its budget, the worker's
address-space limit, the worker killed at its deadline, and the result caps. With the check in
front, every statement the settings are meant to refuse is refused before DuckDB sees it, so a
setting dropped from the connection went unnoticed. Each test here assembles one layer from the
guard's own parts, with the others off, and runs the part of the attack corpus that layer is
meant to stop: every attack must be refused by that layer, with that layer's own error, the
database file must stay byte-identical, no file may appear beside it, outside it or in the
temporary folder, and the file outside (a secret) must never come back; the questions a user asks
must still pass the layer alone.

The corpus is tests/fixtures/guard_corpus_duckdb, plus attacks written here that aim at a file
holding a secret outside the database (the corpus names files that may not exist).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import FIXTURES, load_pairs, spider_db
from guard_layers import Untouched, files

duckdb = pytest.importorskip("duckdb")

from test_duckdb_guard import build_duckdb  # noqa: E402  (after the skip: it needs DuckDB)

from sqlchorus.tools.engines.duckdb import DuckDatabase, check_duckdb_query  # noqa: E402
from sqlchorus.tools.engines.duckdb_guard import open_guarded, run  # noqa: E402
from sqlchorus.tools.engines.sqlite import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS  # noqa: E402
from sqlchorus.tools.sql.errors import NotAQueryError, SqlError  # noqa: E402

CORPUS = FIXTURES / "guard_corpus_duckdb"
CLASSES = {path.stem: load_pairs(path) for path in sorted(CORPUS.glob("*.sql"))}
TABLES = frozenset({"stadium", "singer", "concert", "singer_in_concert", "ticket", "young_singer"})
DATABASE = "concert_singer"
SECRET = "sqlchorus-duck-secret-2d7b"
OUTSIDE = "/outside"
"""Where attacks name the folder outside the database; each test puts its own there."""
WATCHDOG_S = 120.0
"""How long a test lets a statement run before it stops it itself, far past any budget here: a
layer that does not stop it then fails the test instead of hanging it."""


def _corpus(*classes: str, expected: tuple[str, ...] = ("forbidden", "not_a_query")):
    return [(f"{c}: {p.name}", p.input, p.expected) for c in classes for p in CLASSES[c] if p.expected in expected]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    sqlite = spider_db("concert_singer")
    if not sqlite.exists():
        pytest.skip("Spider's concert_singer is not available")
    return build_duckdb(sqlite, tmp_path_factory.mktemp("duck") / "concert_singer.duckdb")


@pytest.fixture
def concert(source, tmp_path) -> Path:
    """A private copy of the DuckDB concert_singer, in a folder of its own."""
    folder = tmp_path / "db"
    folder.mkdir()
    path = folder / "concert_singer.duckdb"
    shutil.copyfile(source, path)
    return path


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside the database: a CSV file, a DuckDB and a SQLite database holding the secret."""
    import sqlite3

    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.csv").write_text(f"note\n{SECRET}\n", encoding="utf-8")
    con = duckdb.connect(str(folder / "secret.duckdb"))
    con.execute("CREATE TABLE secrets AS SELECT ? AS note", [SECRET])
    con.close()
    lite = sqlite3.connect(folder / "secret.sqlite")
    lite.execute("CREATE TABLE secrets (note TEXT)")
    lite.execute("INSERT INTO secrets VALUES (?)", (SECRET,))
    lite.commit()
    lite.close()
    return folder


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    """The process's temporary folder, empty: nothing may be spilled there."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


READS = [
    "SELECT Name, Age FROM singer WHERE Age > 30 ORDER BY Age DESC",
    "SELECT Country, count(*), avg(Age) FROM singer GROUP BY Country HAVING count(*) >= 1",
    "SELECT s.Name FROM singer s JOIN singer_in_concert sc ON s.Singer_ID = sc.Singer_ID",
    "SELECT strftime(Sold, '%Y'), round(Price, 1) FROM ticket",
    "SELECT x FROM range(3) t(x)",
    "SELECT Name FROM young_singer",
] + [p.input for p in CLASSES["writes"] if p.expected == "ok"]
"""Questions a user asks: every layer alone lets them run."""


# -- 1. the statement check -------------------------------------------------------------------

CHECK_ATTACKS = _corpus("writes", "files", "network", "catalogue", "memory")
"""Every statement the corpus expects refused (``forbidden`` or ``not_a_query``)."""


@pytest.mark.parametrize("name,sql,kind", CHECK_ATTACKS, ids=[c[0] for c in CHECK_ATTACKS])
def test_the_check_alone_refuses_the_corpus(name, sql, kind):
    with pytest.raises(SqlError) as raised:
        check_duckdb_query(sql, tables=TABLES, database=DATABASE)
    got = "not_a_query" if isinstance(raised.value, NotAQueryError) else raised.value.kind
    assert got == kind, raised.value.message


@pytest.mark.parametrize("sql", READS + [p.input for c in ("time",) for p in CLASSES[c]])
def test_the_check_alone_lets_questions_through(sql):
    check_duckdb_query(sql, tables=TABLES, database=DATABASE)


# -- 2. the connection's settings -------------------------------------------------------------

READ_ONLY = "attached in read-only mode"
NO_FILES = "file system operations are disabled by configuration"
LOCKED = "the configuration has been locked"
NO_LOADING = "Loading external extensions is disabled through configuration"
NOT_LOADED = r"but it exists in the \w+ extension"

_REFUSAL = {
    "writes: INSERT": READ_ONLY, "writes: UPDATE": READ_ONLY, "writes: DELETE": READ_ONLY,
    "writes: DROP TABLE": READ_ONLY, "writes: ALTER TABLE": READ_ONLY, "writes: a writing CTE": READ_ONLY,
    "writes: two statements, the second a write": READ_ONLY,
    "writes: SET a setting": LOCKED, "writes: RESET a setting": LOCKED,
    "writes: PRAGMA that changes a setting": LOCKED,
    "files: read_csv": NO_FILES, "files: read_csv_auto as a scalar subquery source": NO_FILES,
    "files: read_parquet": NO_FILES, "files: parquet_scan": NO_FILES, "files: read_json": NO_FILES,
    "files: read_text": NO_FILES, "files: read_blob": NO_FILES, "files: glob": NO_FILES, "files: sniff_csv": NO_FILES,
    "files: a CSV file named as a table with a quoted identifier": NO_FILES,
    "files: a file as a table in a join": NO_FILES, "files: COPY TO a file": NO_FILES,
    "files: COPY FROM a file": NO_FILES, "files: EXPORT DATABASE": NO_FILES, "files: IMPORT DATABASE": NO_FILES,
    "files: ATTACH another file": NO_FILES,
    "network: an https URL as a table": NO_FILES, "network: an s3 URL as a table": NO_FILES,
    "network: read_parquet of a URL": NO_FILES, "network: read_text of a URL in a scalar subquery": NO_FILES,
    "network: INSTALL an extension": NO_FILES, "network: FORCE INSTALL from a URL": NO_FILES,
    "network: a community extension": NO_FILES, "network: LOAD an extension": NO_LOADING,
    "network: a secret for a remote store": NOT_LOADED, "network: a sqlite scan of another file": NOT_LOADED,
}
"""The corpus's attacks the settings are meant to refuse, with the refusal DuckDB gives. The
others are the check's alone: the catalogue, temporary tables and macros, CHECKPOINT, SET
VARIABLE, sequences, and names that are neither files nor tables."""

SETTINGS_ATTACKS = [(name, sql, _REFUSAL[name]) for name, sql, _ in _corpus("writes", "files", "network")
                    if name in _REFUSAL] + [
    ("CREATE TABLE", "CREATE TABLE extra (x INTEGER)", READ_ONLY),
    ("CREATE TABLE AS", "CREATE TABLE extra AS SELECT * FROM singer", READ_ONLY),
    ("CREATE VIEW", "CREATE VIEW extra AS SELECT 1", READ_ONLY),
    ("CREATE SCHEMA", "CREATE SCHEMA extra", READ_ONLY),
    ("CREATE SEQUENCE", "CREATE SEQUENCE extra", READ_ONLY),
    ("the secret's CSV", f"SELECT * FROM read_csv('{OUTSIDE}/secret.csv')", NO_FILES),
    ("the secret's CSV named as a table", f"SELECT * FROM '{OUTSIDE}/secret.csv'", NO_FILES),
    ("the secret's text", f"SELECT content FROM read_text('{OUTSIDE}/secret.csv')", NO_FILES),
    ("the secret's bytes", f"SELECT content FROM read_blob('{OUTSIDE}/secret.csv')", NO_FILES),
    ("the folder outside listed", f"SELECT * FROM glob('{OUTSIDE}/*')", NO_FILES),
    ("ATTACH the secret's database", f"ATTACH '{OUTSIDE}/secret.duckdb' AS o", NO_FILES),
    ("ATTACH the secret's SQLite database", f"ATTACH '{OUTSIDE}/secret.sqlite' AS o (TYPE sqlite)", NO_LOADING),
    ("sqlite_scan of the secret's database", f"SELECT * FROM sqlite_scan('{OUTSIDE}/secret.sqlite', 'secrets')",
     NOT_LOADED),
    ("COPY a table outside", f"COPY singer TO '{OUTSIDE}/dump.csv'", NO_FILES),
    ("COPY a query outside as parquet", f"COPY (SELECT * FROM singer) TO '{OUTSIDE}/dump.parquet'", NO_FILES),
    ("EXPORT DATABASE outside", f"EXPORT DATABASE '{OUTSIDE}/dump'", NO_FILES),
    ("turn external access on", "SET enable_external_access = true", LOCKED),
    ("unlock the configuration", "SET lock_configuration = false", LOCKED),
    ("give a temporary directory", f"SET temp_directory = '{OUTSIDE}'", LOCKED),
    ("lift the temporary directory's size", "SET max_temp_directory_size = '100GB'", LOCKED),
    ("more threads", "SET threads = 8", LOCKED),
    ("more memory", "SET memory_limit = '64GB'", LOCKED),
    ("autoload extensions", "SET autoload_known_extensions = true", LOCKED),
    ("allow unsigned extensions", "SET allow_unsigned_extensions = true", LOCKED),
    ("persistent secrets", "SET allow_persistent_secrets = true", LOCKED),
]
"""Writes to the database, files and URLs read or written, extensions installed or loaded, and
every setting of the guard changed."""


@pytest.mark.parametrize("name,sql,refusal", SETTINGS_ATTACKS, ids=[c[0] for c in SETTINGS_ATTACKS])
def test_the_settings_alone_refuse_writes_files_network_and_changes(concert, outside, scratch, name, sql, refusal):
    """The guard's connection (:func:`open_guarded`) and nothing else: no check, no timer, no
    worker; each statement sent to DuckDB as it is."""
    untouched = Untouched(concert, outside, scratch)
    conn = open_guarded(str(concert))
    try:
        with pytest.raises(duckdb.Error) as raised:
            conn.execute(sql.replace(OUTSIDE, str(outside))).fetchall()
        assert re.search(refusal, str(raised.value)), str(raised.value)
        assert SECRET not in str(raised.value)
        for read in READS:
            conn.execute(read).fetchall()
    finally:
        conn.close()
    untouched.check()


MEMORY_LIMIT = 64 * 1024 * 1024
"""A memory limit for the test: the refusal comes as it would at the guard's 512 MB, sooner."""

MEMORY_ATTACKS = [(f"memory: {p.name}", p.input) for p in CLASSES["memory"]
                  if p.name.startswith(("string_agg", "sorting two hundred"))] + [
    ("DISTINCT over a billion values", "SELECT count(DISTINCT x) FROM range(1000000000) t(x)"),
    ("a hash join of twenty million rows a side",
     "SELECT count(*) FROM range(20000000) a(x) JOIN range(20000000) b(y) ON x = y"),
    ("a window over two hundred million rows",
     "SELECT max(r) FROM (SELECT row_number() OVER (ORDER BY -x) AS r FROM range(200000000) t(x))"),
]
"""Sorts, aggregates and joins whose data outgrows the memory limit: they would spill to a
temporary directory, which the settings do not give."""


def test_the_settings_alone_fail_what_outgrows_memory_without_spilling(concert, outside, scratch):
    untouched = Untouched(concert, outside, scratch)
    conn = open_guarded(str(concert), memory_limit=MEMORY_LIMIT)
    try:
        for name, sql in MEMORY_ATTACKS:
            with pytest.raises(duckdb.OutOfMemoryException):
                conn.execute(sql).fetchall()
        for read in READS:
            conn.execute(read).fetchall()
    finally:
        conn.close()
    untouched.check()


# -- 3. the timer at the budget ---------------------------------------------------------------

TIMER_RUNNER = r"""
import json, sys
import duckdb
from sqlchorus.tools.engines.duckdb_guard import run
conn = duckdb.connect(sys.argv[1], read_only=True)
out = []
for sql in json.loads(sys.argv[2]):
    try:
        run(conn, sql, None, 0.5, 10, 100_000)
        out.append("ran")
    except duckdb.InterruptException:
        out.append("interrupted")
    except duckdb.Error as e:
        out.append(type(e).__name__ + ": " + str(e).splitlines()[0])
print(json.dumps(out))
"""

TIMER_ATTACKS = [(f"time: {p.name}", p.input) for p in CLASSES["time"]]


def test_the_timer_alone_interrupts_a_statement_at_its_budget(concert, scratch):
    """:func:`run`'s timer on a plain read-only connection (no settings, check or worker), in a
    process of its own that the test ends should the timer not."""
    untouched = Untouched(concert, scratch)
    out = subprocess.run([sys.executable, "-c", TIMER_RUNNER, str(concert), json.dumps([s for _, s in TIMER_ATTACKS])],
                         capture_output=True, text=True, timeout=WATCHDOG_S, cwd=scratch)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == ["interrupted"] * len(TIMER_ATTACKS)
    untouched.check()


# -- 4. the worker's address-space limit ------------------------------------------------------

ADDRESS_SPACE_RUNNER = r"""
import json, sys
import duckdb
from sqlchorus.tools.engines.duckdb_guard import MEMORY_LIMIT_BYTES, _limit_address_space
_limit_address_space(MEMORY_LIMIT_BYTES)
conn = duckdb.connect(":memory:")
out = []
for sql in json.loads(sys.argv[1]):
    try:
        conn.execute(sql).fetchall()
        out.append("ran")
    except (duckdb.OutOfMemoryException, MemoryError):
        out.append("out of memory")
    except duckdb.Error as e:
        out.append(type(e).__name__ + ": " + str(e).splitlines()[0])
print(json.dumps(out))
"""

ADDRESS_SPACE_ATTACKS = [(f"memory: {p.name}", p.input) for p in CLASSES["memory"]
                         if p.name.startswith(("a list of", "sorting one list", "repeat of"))]
"""One function call building a value of gigabytes, which DuckDB's buffer manager does not count
(and does not interrupt): only the address-space limit stops it."""


def test_the_address_space_limit_alone_fails_a_value_of_gigabytes(scratch):
    """In a process of its own, the worker's address-space limit and a DuckDB connection with
    none of the guard's settings (DuckDB's own memory limit: most of the machine's memory)."""
    out = subprocess.run([sys.executable, "-c", ADDRESS_SPACE_RUNNER, json.dumps([s for _, s in ADDRESS_SPACE_ATTACKS])],
                         capture_output=True, text=True, timeout=WATCHDOG_S, cwd=scratch)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == ["out of memory"] * len(ADDRESS_SPACE_ATTACKS)
    assert files(scratch) == set()


# -- 5. the worker's kill ---------------------------------------------------------------------

KILL_ATTACKS = [(f"time: {p.name}", p.input) for p in CLASSES["time"]
                if p.name.startswith(("a recursive CTE", "levenshtein"))]
"""Statements that run far past their budget: one that never ends, one that spends it in a single
call (levenshtein of two 200,000-character strings)."""

OWN_BUDGET_S = 1000.0
"""The budget the worker's own timer is given: far past the test, so that only the kill acts."""


def test_the_workers_kill_alone_ends_a_statement_at_its_deadline(concert):
    """A statement sent to a worker of the database with its own timer set far off: the worker
    process is killed at the deadline the parent keeps, and replaced; the next statement runs."""
    untouched = Untouched(concert)
    with DuckDatabase(concert, timeout_s=30, workers=1) as db:
        assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]
        for count, (name, sql) in enumerate(KILL_ATTACKS, start=1):
            assert _in_a_worker(db, sql, deadline_s=1.0) == ("killed", "deadline"), name
            assert db.worker_status()["replaced"] == count, name
            assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]
    untouched.check()


def _in_a_worker(db, sql: str, deadline_s: float) -> tuple:
    """The reply of a worker of ``db`` to ``sql`` run under :data:`OWN_BUDGET_S`, the parent waiting
    ``deadline_s`` for it (the request as the database sends it, its own timer set far off). A
    reply still awaited after :data:`WATCHDOG_S` fails the test, the database closed to end it."""
    worker = db._pool.acquire(None, WATCHDOG_S)
    assert worker is not None
    replies: list[tuple] = []
    thread = threading.Thread(target=lambda: replies.append(
        worker.run(("run", sql, (), OWN_BUDGET_S, 10, 100_000), deadline_s)), daemon=True)
    try:
        thread.start()
        thread.join(WATCHDOG_S)
        if thread.is_alive():
            db.close()
            pytest.fail(f"nothing ended the statement within {WATCHDOG_S:g} s")
        return replies[0]
    finally:
        db._pool.release(worker)


# -- 6. the result caps -----------------------------------------------------------------------

CAP_ATTACKS = [
    ("a hundred thousand rows", "SELECT x FROM range(100000) t(x)"),
    ("a hundred rows of a megabyte", "SELECT (SELECT string_agg('x', '') FROM range(1000000)) FROM range(100)"),
]


@pytest.mark.parametrize("name,sql", CAP_ATTACKS, ids=[c[0] for c in CAP_ATTACKS])
def test_the_result_caps_alone_cut_rows_and_bytes(concert, name, sql):
    """:func:`run`'s caps on a plain read-only connection with nothing else."""
    conn = duckdb.connect(str(concert), read_only=True)
    try:
        _, rows, truncated, _ = run(conn, sql, None, 600, DEFAULT_MAX_ROWS, DEFAULT_MAX_BYTES)
    finally:
        conn.close()
    assert truncated
    assert len(rows) <= DEFAULT_MAX_ROWS
    assert sum(len(str(v)) for row in rows for v in row) <= DEFAULT_MAX_BYTES


def test_the_corpus_still_has_the_attacks_the_layers_take_from_it():
    """The layers' corpora are chosen from the fixtures by name: a renamed case must not silently
    leave a layer with fewer attacks."""
    chosen = {name for name, _, _ in SETTINGS_ATTACKS}
    assert set(_REFUSAL) <= chosen
    assert len(MEMORY_ATTACKS) == 5 and len(ADDRESS_SPACE_ATTACKS) == 4 and len(TIMER_ATTACKS) == 6
    assert len(KILL_ATTACKS) == 2
