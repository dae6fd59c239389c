"""The DuckDB guard: its check, its connection, its budget and caps, its catalogue reads, and an
attack corpus (writes, files, network, time, memory, catalogue tricks) run each in a process of
its own, on a private DuckDB copy of Spider's concert_singer, with the file byte-identical and no
file created afterwards."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, load_pairs, sha256, spider_db

duckdb = pytest.importorskip("duckdb")

from sqlchorus.tools.engines.sqlite import Database, DatabaseOpenError
from sqlchorus.tools.engines.duckdb import (
    ALLOWED_FUNCTIONS,
    DuckDatabase,
    check_duckdb_query,
)
from sqlchorus.tools.sql.errors import (
    ForbiddenError,
    NotAQueryError,
    QueryTimeoutError,
)

CORPUS = FIXTURES / "guard_corpus_duckdb"
SLOW_CLASSES = {"time", "memory"}
GRACE_S = 20.0

DDL = """
CREATE TABLE stadium ("Stadium_ID" INTEGER PRIMARY KEY, "Location" VARCHAR, "Name" VARCHAR, "Capacity" INTEGER,
                      "Highest" INTEGER, "Lowest" INTEGER, "Average" INTEGER);
CREATE TABLE singer ("Singer_ID" INTEGER PRIMARY KEY, "Name" VARCHAR NOT NULL, "Country" VARCHAR,
                     "Song_Name" VARCHAR, "Song_release_year" VARCHAR, "Age" INTEGER, "Is_male" BOOLEAN);
CREATE TABLE concert ("concert_ID" INTEGER PRIMARY KEY, "concert_Name" VARCHAR, "Theme" VARCHAR,
                      "Stadium_ID" INTEGER REFERENCES stadium ("Stadium_ID"), "Year" VARCHAR);
CREATE TABLE singer_in_concert ("concert_ID" INTEGER REFERENCES concert ("concert_ID"),
                                "Singer_ID" INTEGER REFERENCES singer ("Singer_ID"),
                                PRIMARY KEY ("concert_ID", "Singer_ID"));
CREATE TABLE ticket ("Ticket_ID" INTEGER PRIMARY KEY, "concert_ID" INTEGER, "Singer_ID" INTEGER,
                     "Price" DECIMAL(8, 2), "Sold" DATE,
                     FOREIGN KEY ("concert_ID", "Singer_ID") REFERENCES singer_in_concert ("concert_ID", "Singer_ID"));
CREATE VIEW young_singer AS SELECT "Name", "Age" FROM singer WHERE "Age" < 30;
COMMENT ON TABLE singer IS 'Singers who performed';
COMMENT ON COLUMN singer."Age" IS 'Age in years';
"""


def build_duckdb(sqlite_path: Path, target: Path) -> Path:
    """A DuckDB file with concert_singer's rows, keys and a few comments, plus a ticket table
    with a compound foreign key."""
    src = sqlite3.connect(sqlite_path)
    con = duckdb.connect(str(target))
    try:
        con.execute(DDL)
        for table in ("stadium", "singer", "concert", "singer_in_concert"):
            rows = src.execute(f'SELECT * FROM "{table}"').fetchall()
            marks = ", ".join("?" * len(rows[0]))
            con.executemany(f'INSERT INTO {table} VALUES ({marks})', rows)
        first = src.execute('SELECT "concert_ID", "Singer_ID" FROM singer_in_concert LIMIT 1').fetchone()
        con.execute("INSERT INTO ticket VALUES (1, ?, ?, 12.50, DATE '2014-06-01'), (2, ?, ?, 30, NULL)",
                    [first[0], int(first[1]), first[0], int(first[1])])
        con.execute("CHECKPOINT")
    finally:
        con.close()
        src.close()
    return target


@pytest.fixture
def duck_file(spider, tmp_path) -> Path:
    folder = tmp_path / "db"
    folder.mkdir()
    return build_duckdb(spider("concert_singer"), folder / "concert_singer.duckdb")


@pytest.fixture
def duck(duck_file):
    with DuckDatabase(duck_file, timeout_s=5, workers=2) as db:
        yield db


# -- the check ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sql", [
    "SELECT Name, Age FROM singer WHERE Age > 30 ORDER BY Age DESC LIMIT 3",
    "SELECT count(*), avg(Age), max(Age) FROM singer GROUP BY Country HAVING count(*) > 1",
    "SELECT s.Name FROM singer s JOIN singer_in_concert sc ON s.Singer_ID = sc.Singer_ID",
    "WITH t AS (SELECT * FROM concert) SELECT Year, count(*) FROM t GROUP BY Year",
    "SELECT Name FROM singer WHERE Name LIKE '%a%' UNION SELECT Name FROM stadium",
    "SELECT strftime(Sold, '%Y'), round(Price, 1), CAST(Price AS INTEGER) FROM ticket",
    "SELECT upper(Name), length(Name), substring(Name, 1, 2), coalesce(Country, '') FROM singer",
    "SELECT row_number() OVER (ORDER BY Age), rank() OVER (PARTITION BY Country ORDER BY Age) FROM singer",
    "FROM singer SELECT Name",
    "SELECT * FROM main.singer",
    "SELECT x FROM range(3) t(x)",
    "SELECT Name FROM young_singer",
    "SELECT list_sort([3, 1, 2]), unnest([1, 2])",
    "SELECT CASE WHEN Age > 30 THEN 'old' ELSE 'young' END FROM singer",
    "SELECT date_diff('day', DATE '2020-01-01', Sold), year(Sold) FROM ticket",
])
def test_plain_questions_pass_the_check(duck, sql):
    duck.check(sql)
    duck.execute(sql)


@pytest.mark.parametrize("sql, error", [
    ("SELECT * FROM read_csv('/etc/passwd')", ForbiddenError),
    ("SELECT * FROM 'x.csv'", ForbiddenError),
    ("SELECT getenv('HOME')", ForbiddenError),
    ("SELECT * FROM duckdb_settings()", ForbiddenError),
    ("SELECT * FROM nosuch", ForbiddenError),
    ("SELECT 'a'::regclass", ForbiddenError),
    ("CREATE TEMP TABLE z(x INT)", NotAQueryError),
    ("CHECKPOINT", NotAQueryError),
    ("SELECT 1; SELECT 2", NotAQueryError),
])
def test_the_check_refuses(duck, sql, error):
    with pytest.raises(error):
        duck.check(sql)


def test_refusals_name_the_function_and_the_reason(duck):
    with pytest.raises(ForbiddenError, match=r"read_text \(reads files"):
        duck.check("SELECT content FROM read_text('/etc/hostname')")
    with pytest.raises(ForbiddenError, match=r"current_setting \(reveals the settings"):
        duck.check("SELECT current_setting('threads')")
    with pytest.raises(ForbiddenError, match="not on|does not allow"):
        duck.check("SELECT some_new_function(1)")


def test_allowed_functions_are_duckdb_functions():
    con = duckdb.connect()
    names = {r[0] for r in con.execute("SELECT DISTINCT function_name FROM duckdb_functions()").fetchall()}
    constructs = {"case", "cast", "try_cast", "exists", "extract", "columns", "coalesce", "ifnull",
                  "current_time", "current_timestamp", "percentile_cont", "percentile_disc", "->"}
    assert sorted(ALLOWED_FUNCTIONS - names - constructs) == []


def test_check_without_a_table_list_still_refuses_files_and_catalogue():
    check_duckdb_query("SELECT * FROM anything")
    for sql in ("SELECT * FROM 'a.parquet'", "SELECT * FROM duckdb_tables", "SELECT * FROM information_schema.tables"):
        with pytest.raises(ForbiddenError):
            check_duckdb_query(sql)


# -- opening -----------------------------------------------------------------------------------


def test_it_is_a_database_of_its_engine(duck, duck_file):
    assert isinstance(duck, Database)
    assert (duck.engine, duck.dialect, duck.name) == ("duckdb", "duckdb", "concert_singer")
    assert duck.path == duck_file.resolve()
    assert duck.location == str(duck_file.resolve())


def test_a_duckdb_url_is_accepted(duck_file):
    with DuckDatabase(f"duckdb://{duck_file}", prestart=False) as db:
        assert db.path == duck_file.resolve()
        assert db.lookup("SELECT count(*) FROM singer").rows == [(6,)]


def _one_line(error: DatabaseOpenError) -> str:
    assert "\n" not in error.message
    return error.message


def test_a_missing_file_is_one_clear_line(tmp_path):
    with pytest.raises(DatabaseOpenError) as e:
        DuckDatabase(tmp_path / "nope.duckdb")
    assert "does not exist" in _one_line(e.value)
    assert not (tmp_path / "nope.duckdb").exists()  # DuckDB would have created it


def test_a_file_that_is_not_duckdb_is_one_clear_line(tmp_path, spider):
    text = tmp_path / "text.duckdb"
    text.write_text("hello " * 100)
    with pytest.raises(DatabaseOpenError) as e:
        DuckDatabase(text)
    assert "not a DuckDB database" in _one_line(e.value)
    lite = tmp_path / "lite.duckdb"
    shutil.copy(spider("concert_singer"), lite)
    with pytest.raises(DatabaseOpenError) as e:
        DuckDatabase(lite)
    assert "SQLite database" in _one_line(e.value)
    empty = tmp_path / "empty.duckdb"
    empty.write_bytes(b"")
    with pytest.raises(DatabaseOpenError) as e:
        DuckDatabase(empty)
    assert "empty" in _one_line(e.value)
    with pytest.raises(DatabaseOpenError) as e:
        DuckDatabase(tmp_path)
    assert "not a file" in _one_line(e.value)


def test_a_database_without_tables_is_one_clear_line(tmp_path):
    path = tmp_path / "nothing.duckdb"
    duckdb.connect(str(path)).close()
    with pytest.raises(DatabaseOpenError) as e:
        DuckDatabase(path)
    assert "no tables" in _one_line(e.value)


def test_a_file_held_by_a_writer_is_one_clear_line(duck_file):
    script = ("import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); c.execute('SELECT 1'); "
              "print('held', flush=True); time.sleep(3600)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(duck_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DatabaseOpenError) as e:
            DuckDatabase(duck_file)
        assert "another process holds it open for writing" in _one_line(e.value)
    finally:
        holder.kill()
        holder.wait()


def test_without_duckdb_it_says_how_to_install(monkeypatch, duck_file):
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(DatabaseOpenError, match=r"pip install 'sqlchorus\[duckdb\]'"):
        DuckDatabase(duck_file)


# -- structure, lookups and plans --------------------------------------------------------------


def test_read_structure_gives_types_keys_and_comments(duck):
    tables = {t.name: t for t in duck.read_structure()}
    assert set(tables) == {"stadium", "singer", "concert", "singer_in_concert", "ticket", "young_singer"}
    singer = tables["singer"]
    assert singer.description == "Singers who performed"
    assert singer.primary_key == ["Singer_ID"]
    assert singer.column("Age").description == "Age in years"
    assert singer.column("Age").type == "INTEGER"
    assert singer.column("Name").not_null and not singer.column("Country").not_null
    assert tables["singer_in_concert"].primary_key == ["concert_ID", "Singer_ID"]
    fks = {(f.column, f.ref_table, f.ref_column) for f in tables["concert"].foreign_keys}
    assert fks == {("Stadium_ID", "stadium", "Stadium_ID")}
    compound = [(f.column, f.ref_table, f.ref_column) for f in tables["ticket"].foreign_keys]
    assert compound == [("concert_ID", "singer_in_concert", "concert_ID"),
                        ("Singer_ID", "singer_in_concert", "Singer_ID")]
    assert tables["ticket"].column("Price").type == "DECIMAL(8,2)"
    assert tables["young_singer"].is_view and [c.name for c in tables["young_singer"].columns] == ["Name", "Age"]


def test_lookup_runs_sqlchorus_reads_under_the_caps(duck):
    assert duck.lookup('SELECT count(*) FROM "singer"').rows == [(6,)]
    capped = duck.lookup('SELECT "Name" FROM "singer"', max_rows=2)
    assert capped.truncated and len(capped.rows) == 2
    with pytest.raises(ForbiddenError):
        duck.lookup("SELECT * FROM duckdb_settings()")


def test_explain_gives_plan_lines_and_never_runs(duck):
    plan = duck.explain_query_plan("SELECT Name FROM singer WHERE Age > 30")
    assert plan.columns == ["id", "detail"]
    assert plan.rows and all(isinstance(r[-1], str) for r in plan.rows)
    assert any("singer" in r[-1].lower() for r in plan.rows)
    with pytest.raises(NotAQueryError):
        duck.explain_query_plan("ANALYZE SELECT 1")
    with pytest.raises(ForbiddenError):
        duck.explain_query_plan("SELECT * FROM read_csv('x')")


# -- results -----------------------------------------------------------------------------------


def test_values_are_plain(duck):
    result = duck.execute("SELECT Price, Sold, Ticket_ID, [1, 2], {'a': 1.5::DECIMAL(3, 1)} FROM ticket "
                          "ORDER BY Ticket_ID")
    assert result.rows == [(12.5, "2014-06-01", 1, [1, 2], {"a": 1.5}), (30, None, 2, [1, 2], {"a": 1.5})]
    assert isinstance(result.rows[1][0], int)


def test_rows_and_bytes_are_capped(duck):
    rows = duck.execute("SELECT x FROM range(100000) t(x)", max_rows=1000)
    assert rows.truncated and len(rows.rows) == 1000
    sized = duck.execute("SELECT 'x' || x::VARCHAR || string_agg('y', '') FROM range(10000) t(x), range(100) u(y) "
                         "GROUP BY x", max_bytes=100_000)
    assert sized.truncated and sum(len(r[0]) for r in sized.rows) <= 100_000
    whole = duck.execute("SELECT * FROM singer")
    assert not whole.truncated and len(whole.rows) == 6


@pytest.mark.slow
def test_the_budget_stops_a_statement_no_sooner_than_it(duck_file):
    with DuckDatabase(duck_file, timeout_s=1, workers=1) as db:
        for sql in ("SELECT count(*) FROM range(1000000000000) a(x), range(1000) b(y) WHERE a.x + b.y < 0",
                    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"):
            start = time.monotonic()
            with pytest.raises(QueryTimeoutError):
                db.execute(sql)
            took = time.monotonic() - start
            assert 1.0 <= took <= 1.0 + GRACE_S
        assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]


@pytest.mark.slow
def test_a_worker_past_its_deadline_is_killed_and_replaced(duck_file):
    """What ends a call DuckDB does not interrupt: the worker's own timer is set far past the
    parent's deadline here, so only the kill can stop the statement."""
    with DuckDatabase(duck_file, timeout_s=5, workers=1) as db:
        worker = db._pool.acquire(None, 5)
        try:
            before = worker.pid
            start = time.monotonic()
            reply = worker.run(("run", "SELECT count(*) FROM range(1000000000000) t(x) WHERE x < 0", (), 1000.0,
                                10, 1000), 1.0)
            took = time.monotonic() - start
        finally:
            db._pool.release(worker)
        assert reply == ("killed", "deadline")
        assert 1.0 <= took <= 1.0 + GRACE_S
        assert db.worker_status()["replaced"] == 1
        assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]
        assert worker.pid != before


def test_files_are_neither_created_nor_changed(duck_file):
    before = sha256(duck_file), _files(duck_file.parent)
    with DuckDatabase(duck_file, workers=2) as db:
        db.read_structure()
        db.execute("SELECT * FROM singer ORDER BY Age")
        db.lookup("SELECT count(*) FROM concert")
        db.explain_query_plan("SELECT * FROM singer")
    assert (sha256(duck_file), _files(duck_file.parent)) == before


def test_concurrent_statements_run_on_their_own_workers(duck):
    out = []
    threads = [threading.Thread(target=lambda: out.append(duck.execute("SELECT count(*) FROM singer").rows))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [[(6,)]] * 4
    assert duck.worker_status()["started"] <= duck.workers == 2


# -- the attack corpus -------------------------------------------------------------------------

RUNNER = r"""
import json, sys, time
from pathlib import Path
from sqlchorus.tools.engines.duckdb import DuckDatabase
from sqlchorus.tools.sql.errors import SqlError
db_path, sql_path, budget = sys.argv[1], sys.argv[2], float(sys.argv[3])
sql = Path(sql_path).read_text(encoding="utf-8")
with DuckDatabase(db_path, timeout_s=budget) as db:
    start = time.monotonic()
    try:
        result = db.execute(sql)
        outcome = "ok, truncated" if result.truncated else "ok"
    except SqlError as e:
        outcome = e.kind
        if outcome in ("too_long", "too_deep"):
            outcome = "not_a_query"
    seconds = time.monotonic() - start
print(json.dumps({"outcome": outcome, "seconds": seconds}))
"""


def _cases():
    out = []
    for path in sorted(CORPUS.glob("*.sql")):
        for pair in load_pairs(path):
            marks = [pytest.mark.slow] if path.stem in SLOW_CLASSES else []
            out.append(pytest.param(path.stem, pair, id=f"{path.stem}-{pair.name}", marks=marks))
    return out


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def corpus_source(tmp_path_factory):
    source = spider_db("concert_singer")
    if not source.exists():
        pytest.skip("Spider's concert_singer is not available")
    return build_duckdb(source, tmp_path_factory.mktemp("duck") / "concert_singer.duckdb")


@pytest.mark.parametrize("corpus,pair", _cases())
@pytest.mark.slow
def test_the_guard_holds(corpus, pair, corpus_source, tmp_path):
    work = tmp_path / "work"
    scratch = work / "tmp"
    scratch.mkdir(parents=True)
    db = work / "concert_singer.duckdb"
    shutil.copy(corpus_source, db)
    sql_file = tmp_path / "statement.sql"
    sql_file.write_text(pair.input, encoding="utf-8")
    budget = float(pair.meta.get("budget", 1))
    before_hash, before_files = sha256(db), _files(work)

    out = subprocess.run(
        [sys.executable, "-c", RUNNER, str(db), str(sql_file), str(budget)],
        capture_output=True, text=True, timeout=budget + 90, cwd=scratch,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(scratch), "HOME": str(scratch),
             "SQLCHORUS_CACHE": str(scratch / "cache")},
    )

    assert out.returncode == 0, f"the process died (code {out.returncode}): {out.stderr[-2000:]}"
    report = json.loads(out.stdout)
    assert report["outcome"] == pair.expected
    if report["outcome"] == "timeout":
        assert report["seconds"] >= budget, f"stopped after {report['seconds']:.2f} s of a {budget:g} s budget"
    assert report["seconds"] <= budget + GRACE_S, f"ran {report['seconds']:.2f} s against a {budget:g} s budget"
    assert sha256(db) == before_hash
    assert _files(work) == before_files


def test_every_class_has_a_corpus():
    assert {p.stem for p in CORPUS.glob("*.sql")} == {"writes", "files", "network", "time", "memory", "catalogue"}
    assert all(len(load_pairs(p)) >= 6 for p in CORPUS.glob("*.sql"))
