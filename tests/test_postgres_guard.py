"""The PostgreSQL guard holds as tightly as the SQLite one, on a server the test starts.

Spider's concert_singer is loaded into a database of the test's PostgreSQL server, with its keys,
a few comments, and the adminpack and dblink extensions attackers reach for. Most tests connect
as a read-only role (LOGIN, SELECT only, no TEMP or CREATE, temp_file_limit set on it) whose
password comes from a password file, never from the URL; others as the superuser the server was
made with, which opens only under allow_writable_role. Every statement of the attack corpus
(tests/fixtures/guard_corpus_postgres) runs as both and must end as the corpus says; afterwards
every table is byte-identical (row count and a checksum of its rows), no role, collation,
replication slot or origin, large object, advisory lock or file beside the server's data has
changed, and nothing returned holds a server file's content or path. Statements that could hang
run in a process of their own.
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
import time
from pathlib import Path

import psycopg
import pytest

from conftest import FIXTURES, load_pairs, spider_db, wait_for
from servers import (
    free_port,
    halt_postgres,
    postgres_of_a_test,
    require_password,
    running_statements,
)
from sqlchorus.tools.engines import base
from sqlchorus.tools.engines import postgres as module
from sqlchorus.tools.engines.sqlite import QueryResult
from sqlchorus.tools.engines.postgres import (
    PostgresDatabase,
    _run,
    check_postgres_query,
    redact_url,
)
from sqlchorus.tools.sql.errors import (
    DatabaseOpenError,
    ExecutionError,
    ForbiddenError,
    NotAQueryError,
    QueryTimeoutError,
    SqlError,
)

CORPUS = FIXTURES / "guard_corpus_postgres"
HANGING_CLASSES = {"time", "memory"}
"""Classes whose statements run (to their budget, or to a limit): each in a process of its own."""
GRACE_S = 60.0
"""Room past a budget for a stopped statement to be reported, on a busy machine."""
PASSWORD = "s3cret-Reader-pw-7fq"
READER = "reader"

RUNNER = r"""
import json, sys, time
from sqlchorus.tools.engines.postgres import PostgresDatabase
from sqlchorus.tools.sql.errors import SqlError
url, sql_path, budget, max_bytes = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
allow = sys.argv[5] == "allow"
sql = open(sql_path, encoding="utf-8").read()
with PostgresDatabase(url, timeout_s=budget, max_bytes=max_bytes, workers=1, prestart=False,
                      allow_writable_role=allow) as db:
    start = time.monotonic()
    said = ""
    try:
        result = db.execute(sql)
        outcome = "ok, truncated" if result.truncated else "ok"
        said = json.dumps(result.rows, default=str)
    except SqlError as e:
        outcome, said = e.kind, e.message
    seconds = time.monotonic() - start
print(json.dumps({"outcome": outcome, "seconds": seconds, "said": said}))
"""
ROLES = ("reader", "superuser")
"""Every statement of the corpus runs as the read-only role and as the superuser the server was
made with (opened under allow_writable_role): the guard must hold for both."""


# -- the server and its database -----------------------------------------------------------------


def _pg_type(declared: str) -> str:
    return "bigint" if "int" in (declared or "").lower() else "text"


def load_sqlite(sqlite_path, url: str) -> None:
    """Copy a SQLite database into the PostgreSQL database at ``url``: names in lower case,
    primary and foreign keys kept (a referencing column takes its referenced column's type)."""
    src = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    tables = [r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                        "AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    info = {t: src.execute(f'PRAGMA table_info("{t}")').fetchall() for t in tables}
    fks = {t: src.execute(f'PRAGMA foreign_key_list("{t}")').fetchall() for t in tables}
    types = {(t, c[1].lower()): _pg_type(c[2]) for t in tables for c in info[t]}
    for t in tables:
        for fk in fks[t]:
            types[(t, fk[3].lower())] = types[(fk[2].lower(), fk[4].lower())]
    with psycopg.connect(url, autocommit=True) as conn:
        for t in tables:
            cols = [f"{c[1].lower()} {types[(t, c[1].lower())]}" for c in info[t]]
            pk = [c[1].lower() for c in sorted(info[t], key=lambda c: c[5]) if c[5]]
            if pk:
                cols.append(f"PRIMARY KEY ({', '.join(pk)})")
            for fk in fks[t]:
                cols.append(f"FOREIGN KEY ({fk[3].lower()}) REFERENCES {fk[2].lower()} ({fk[4].lower()})")
            conn.execute(f"CREATE TABLE {t.lower()} ({', '.join(cols)})")
        for t in tables:
            names = [c[1].lower() for c in info[t]]
            rows = src.execute(f'SELECT * FROM "{t}"').fetchall()
            kinds = [types[(t, n)] for n in names]
            rows = [tuple(None if v is None else (int(v) if k == "bigint" else str(v)) for v, k in zip(r, kinds))
                    for r in rows]
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {t.lower()} ({', '.join(names)}) VALUES "
                                f"({', '.join(['%s'] * len(names))})", rows)
    src.close()


def table_checksums(url: str) -> dict[str, tuple[int, str]]:
    """Every table of the public schema: its row count and the md5 of its rows in order."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")]
        out = {}
        for t in tables:
            out[t] = conn.execute(
                f"SELECT count(*), md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM {t} AS x"
            ).fetchone()
        return out


def _folder(path: Path) -> list[tuple[str, int, str]]:
    """Every file under ``path``: its name, size and the md5 of its content."""
    import hashlib

    out = []
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        try:
            out.append((str(file.relative_to(path)), file.stat().st_size, hashlib.md5(file.read_bytes()).hexdigest()))
        except OSError:
            out.append((str(file.relative_to(path)), -1, ""))
    return out


def server_state(url: str, outside: Path | None = None) -> dict[str, object]:
    """What a statement might have left behind: every table, its checksum, every relation of a
    user schema, every role, collation, replication slot and origin, large object, advisory lock
    and comment, the settings of the database and its roles, and every file of ``outside`` (a
    folder beside the server's data)."""
    with psycopg.connect(url, autocommit=True) as conn:
        one = lambda sql: conn.execute(sql).fetchall()  # noqa: E731
        state = {
            "tables": table_checksums(url),
            "relations": one("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                             "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1, 2"),
            "roles": one("SELECT rolname, rolsuper, rolcreaterole FROM pg_roles ORDER BY 1"),
            "collations": one("SELECT count(*) FROM pg_collation"),
            "replication_slots": one("SELECT count(*) FROM pg_replication_slots"),
            "replication_origins": one("SELECT count(*) FROM pg_replication_origin"),
            "large_objects": one("SELECT count(*) FROM pg_largeobject_metadata"),
            "advisory_locks": one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
            "comments": one("SELECT count(*), md5(coalesce(string_agg(description, ',' ORDER BY description), ''))"
                            " FROM pg_description"),
            "role_settings": one("SELECT setrole, setdatabase, setconfig::text FROM pg_db_role_setting ORDER BY 1, 2"),
        }
    if outside is not None:
        state["outside"] = _folder(outside)
    return state


@pytest.fixture(scope="module")
def server():
    yield from postgres_of_a_test()


SECRET_FILE_TEXT = "sqlchorus-secret-3f9a1c"
"""The content of a file outside the database that the server could read: never returned."""


@pytest.fixture(scope="module")
def outside(server):
    """A folder outside the database, beside the server's data, with a file the server's user
    can read and write: no statement may change it or return its content."""
    folder = server.folder / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET_FILE_TEXT)
    if server.as_user:
        for path in (folder, folder / "secret.txt"):
            shutil.chown(path, "postgres", "postgres")
    return folder


def prepare_concert(source: Path, admin: str, dbname: str, reader: str, password: str) -> None:
    """Load concert_singer into the empty database ``dbname`` (``admin`` its superuser URL) as the
    corpus expects it: comments, a compound foreign key, a view, the adminpack and dblink
    extensions, and a read-only role ``reader``
    with ``temp_file_limit`` set on it. Also what ``benchmarks/engine_guard.py --corpus`` runs on."""
    load_sqlite(source, admin)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("COMMENT ON TABLE singer IS 'People who sing at concerts'")
        conn.execute("COMMENT ON COLUMN singer.age IS 'Age in years'")
        # A compound foreign key, and a view.
        conn.execute("CREATE TABLE performance (concert_id bigint, singer_id bigint, minutes bigint, "
                     "FOREIGN KEY (concert_id, singer_id) REFERENCES singer_in_concert (concert_id, singer_id))")
        conn.execute("INSERT INTO performance SELECT concert_id, singer_id, 30 FROM singer_in_concert")
        conn.execute("CREATE VIEW singer_names AS SELECT name FROM singer")
        # The extensions attackers reach for: server files (adminpack, in pg_catalog) and other
        # sessions that are not read-only (dblink, in the schema the guard reads).
        conn.execute("CREATE EXTENSION adminpack")
        conn.execute("CREATE EXTENSION dblink")
        conn.execute(f"CREATE ROLE {reader} LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB NOCREATEROLE")
        for line in (f"REVOKE ALL ON DATABASE {dbname} FROM PUBLIC",
                     f"GRANT CONNECT ON DATABASE {dbname} TO {reader}",
                     "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
                     f"GRANT USAGE ON SCHEMA public TO {reader}",
                     f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader}",
                     f"ALTER ROLE {reader} SET temp_file_limit = '64MB'"):
            conn.execute(line)


@pytest.fixture(scope="module")
def concert(server, tmp_path_factory):
    """concert_singer in a database of its own, a read-only role with a password in a password
    file (PGPASSFILE, set for the module), and the URLs: ``admin`` (the superuser) and ``reader``
    (no password in it)."""
    source = spider_db("concert_singer")
    if not source.exists():
        pytest.skip(f"Spider database concert_singer not found at {source}")
    admin = server.new_database()
    dbname = admin.rsplit("/", 1)[1]
    prepare_concert(source, admin, dbname, READER, PASSWORD)
    require_password(server, dbname, READER)  # the server trusts everyone else
    folder = tmp_path_factory.mktemp("pgpass")
    passfile = folder / "pgpass"
    passfile.write_text(f"127.0.0.1:{server.port}:{dbname}:{READER}:{PASSWORD}\n")
    passfile.chmod(0o600)
    old = os.environ.get("PGPASSFILE")
    os.environ["PGPASSFILE"] = str(passfile)
    reader = f"postgresql://{READER}@127.0.0.1:{server.port}/{dbname}"
    try:
        yield {"admin": admin, "reader": reader, "dbname": dbname, "passfile": str(passfile), "server": server}
    finally:
        if old is None:
            os.environ.pop("PGPASSFILE", None)
        else:
            os.environ["PGPASSFILE"] = old


@pytest.fixture(scope="module")
def reader_db(concert):
    db = PostgresDatabase(concert["reader"], timeout_s=5, workers=2)
    yield db
    db.close()


@pytest.fixture(scope="module")
def admin_db(concert):
    """The superuser, let open as an administrator may (allow_writable_role)."""
    db = PostgresDatabase(concert["admin"], timeout_s=5, workers=2, allow_writable_role=True)
    yield db
    db.close()


# -- the attack corpus ---------------------------------------------------------------------------


def _cases():
    out = []
    for path in sorted(CORPUS.glob("*.sql")):
        for pair in load_pairs(path):
            marks = [pytest.mark.slow]
            out.append(pytest.param(path.stem, pair, id=f"{path.stem}-{pair.name}", marks=marks))
    return out


@pytest.mark.parametrize("corpus,pair", _cases())
@pytest.mark.parametrize("role", ROLES)
def test_the_guard_holds(corpus, pair, role, concert, reader_db, admin_db, outside, tmp_path):
    budget = float(pair.meta.get("budget", 1))
    max_bytes = int(pair.meta.get("max_bytes", 16 * 1024 * 1024))
    url, db = (concert["reader"], reader_db) if role == "reader" else (concert["admin"], admin_db)
    before = server_state(concert["admin"], outside)
    if corpus in HANGING_CLASSES:
        sql_file = tmp_path / "statement.sql"
        sql_file.write_text(pair.input, encoding="utf-8")
        out = subprocess.run(
            [sys.executable, "-c", RUNNER, url, str(sql_file), str(budget), str(max_bytes),
             "allow" if role == "superuser" else "refuse"],
            capture_output=True, text=True, timeout=budget + 60, cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PGPASSFILE": concert["passfile"]},
        )
        assert out.returncode == 0, f"the process died (code {out.returncode}): {out.stderr[-2000:]}"
        report = json.loads(out.stdout)
    else:
        start = time.monotonic()
        try:
            result = db.execute(pair.input, timeout_s=budget, max_bytes=max_bytes)
            outcome = "ok, truncated" if result.truncated else "ok"
            said = json.dumps(result.rows, default=str)
        except SqlError as e:
            outcome, said = e.kind, e.message
        report = {"outcome": outcome, "seconds": time.monotonic() - start, "said": said}
    assert report["outcome"] == pair.expected, report
    if report["outcome"] == "timeout":
        assert report["seconds"] >= budget, f"stopped after {report['seconds']:.2f} s of a {budget:g} s budget"
    assert report["seconds"] <= budget + GRACE_S, f"ran {report['seconds']:.2f} s against a {budget:g} s budget"
    assert server_state(concert["admin"], outside) == before
    # No file's content, setting or path of the server came back, in rows or in a message.
    for secret in (SECRET_FILE_TEXT, str(concert["server"].data), str(concert["server"].folder)):
        assert secret not in report["said"], report


def test_every_class_has_a_corpus():
    assert {p.stem for p in CORPUS.glob("*.sql")} == {
        "writes", "files", "network", "time", "memory", "catalogue", "locks", "spellings", "privacy"}
    assert all(len(load_pairs(p)) >= 6 for p in CORPUS.glob("*.sql"))


def test_the_corpus_is_refused_by_the_check_alone_as_well():
    """Every refused statement is refused before it reaches a server (the check needs none)."""
    for path in sorted(CORPUS.glob("*.sql")):
        for pair in load_pairs(path):
            if pair.expected in ("forbidden", "not_a_query"):
                with pytest.raises((ForbiddenError, NotAQueryError)):
                    check_postgres_query(pair.input)


# -- the check, without a server -----------------------------------------------------------------


@pytest.mark.parametrize("sql", [
    "SELECT lower(name), upper(country), length(name), count(*) FROM singer GROUP BY 1, 2, 3",
    "SELECT name FROM singer WHERE name ILIKE 'j%' AND age BETWEEN 20 AND 40 OR country IN ('France')",
    "SELECT date_trunc('month', now()), extract(year FROM current_date), to_char(now(), 'YYYY')",
    "SELECT avg(age), round(avg(age)::numeric, 2), string_agg(name, ', ' ORDER BY name) FROM singer",
    "SELECT name, rank() OVER (ORDER BY age DESC), lag(age) OVER (PARTITION BY country ORDER BY age) FROM singer",
    "SELECT coalesce(nullif(country, ''), 'none'), CASE WHEN age > 30 THEN 'old' ELSE 'young' END FROM singer",
    "WITH a AS (SELECT * FROM singer) SELECT a.name FROM a JOIN singer_in_concert s ON s.singer_id = a.singer_id",
    "SELECT substring(name FROM 1 FOR 3), position('a' IN name), split_part(name, ' ', 1) FROM singer",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY age) FROM singer",
    "SELECT count(*) FILTER (WHERE age > 30), bool_and(age > 1) FROM singer",
    "SELECT g FROM generate_series(1, 3) AS g",
])
def test_the_questions_a_user_asks_pass_the_check(sql):
    check_postgres_query(sql)


def test_a_function_the_guard_has_not_reviewed_is_refused():
    with pytest.raises(ForbiddenError, match="levenshtein is not allowed: it is not among the functions"):
        check_postgres_query("SELECT levenshtein(name, 'x') FROM singer")
    with pytest.raises(ForbiddenError, match="made_up_function"):
        check_postgres_query("SELECT made_up_function(1)")


def test_a_url_loses_its_password():
    assert redact_url("postgresql://u:pw@h:5/db?sslmode=require&password=pw2") == \
        "postgresql://u@h:5/db?sslmode=require"
    assert "pw" not in redact_url("host=h user=u password='p w' dbname=d")


def test_without_psycopg_opening_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(DatabaseOpenError, match=r"pip install 'sqlchorus\[postgres\]'"):
        PostgresDatabase("postgresql://u@127.0.0.1:1/db")


# -- the database --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_read_only_role_reads_with_its_password_from_the_password_file(concert, reader_db):
    assert PASSWORD not in concert["reader"]
    assert reader_db.write_warnings == [] and reader_db.limit_warnings == []
    assert reader_db.name == concert["dbname"] and reader_db.engine == "postgresql" and reader_db.path is None
    result = reader_db.execute("SELECT count(*) FROM singer")
    assert isinstance(result, QueryResult) and result.rows == [(6,)]
    for text in (repr(reader_db), reader_db.location, str(reader_db.worker_status())):
        assert PASSWORD not in text
    assert reader_db.lookup('SELECT count(*) FROM "singer"').rows == [(6,)]


@pytest.mark.slow
def test_the_structure_comes_from_the_catalogue(reader_db):
    tables = {t.name: t for t in reader_db.read_structure()}
    assert set(tables) == {"stadium", "singer", "concert", "singer_in_concert", "performance", "singer_names"}
    singer = tables["singer"]
    assert singer.description == "People who sing at concerts"
    columns = {c.name: c for c in singer.columns}
    assert columns["singer_id"].primary_key and columns["singer_id"].not_null
    assert columns["age"].description == "Age in years" and columns["age"].type == "bigint"
    assert not columns["name"].primary_key and not columns["name"].not_null
    assert {(f.column, f.ref_table, f.ref_column) for f in tables["concert"].foreign_keys} == {
        ("stadium_id", "stadium", "stadium_id")}
    assert [(f.column, f.ref_table, f.ref_column) for f in tables["performance"].foreign_keys] == [
        ("concert_id", "singer_in_concert", "concert_id"), ("singer_id", "singer_in_concert", "singer_id")]
    pk = [c.name for c in tables["singer_in_concert"].columns if c.primary_key]
    assert pk == ["concert_id", "singer_id"]
    assert tables["singer_names"].is_view and not singer.is_view


@pytest.mark.slow
def test_the_superuser_is_refused_unless_allowed_and_then_every_run_is_warned(concert):
    with pytest.raises(DatabaseOpenError, match="read-only role") as raised:
        PostgresDatabase(concert["admin"], prestart=False)
    text = raised.value.message
    assert "\n" not in text and "superuser" in text and "GRANT SELECT ON ALL TABLES" in text
    assert "--allow-writable-role" in text
    with PostgresDatabase(concert["admin"], allow_writable_role=True, prestart=False) as db:
        text = " ".join(db.write_warnings)
        assert "superuser" in text and "TEMP" in text and "DELETE on" in text
        assert "no guard can stop" in db.run_warning and db.run_warning in db.warnings
    with pytest.raises(DatabaseOpenError, match="read-only role"):
        PostgresDatabase(concert["admin"], allow_writable_role=True, require_readonly_role=True)
    with PostgresDatabase(concert["reader"], require_readonly_role=True, prestart=False) as db:
        assert db.write_warnings == [] and db.run_warning is None


@pytest.mark.slow
def test_a_statement_is_stopped_at_its_budget_and_the_connection_serves_the_next(reader_db):
    budget = 1.5
    start = time.monotonic()
    with pytest.raises(QueryTimeoutError, match="1.5 s budget"):
        reader_db.execute("SELECT count(*) FROM (SELECT generate_series(1, 1000000000000) AS g) AS s",
                          timeout_s=budget)
    seconds = time.monotonic() - start
    assert budget <= seconds <= budget + GRACE_S
    assert reader_db.execute("SELECT count(*) FROM stadium").rows == [(9,)]


@pytest.mark.slow
def test_results_are_capped_in_rows_and_bytes(reader_db):
    result = reader_db.execute("SELECT g FROM generate_series(1, 1000) AS g", max_rows=5)
    assert result.truncated and result.rows == [(1,), (2,), (3,), (4,), (5,)]
    result = reader_db.execute("SELECT md5(g::text) FROM generate_series(1, 1000) AS g", max_bytes=100)
    assert result.truncated and len(result.rows) == 3
    result = reader_db.execute("SELECT g FROM generate_series(1, 5) AS g", max_rows=5)
    assert not result.truncated and len(result.rows) == 5


@pytest.mark.slow
def test_several_statements_are_refused_by_the_server_too(reader_db, concert):
    """Past the parse check, the extended protocol still runs one statement only."""
    before = table_checksums(concert["admin"])
    conn = psycopg.connect(concert["reader"], autocommit=True)
    try:
        with pytest.raises(psycopg.Error, match="multiple commands|syntax error"):
            _run(conn, "SELECT 1; DELETE FROM performance", (), 5.0, 10, 10_000)
    finally:
        conn.close()
    assert table_checksums(concert["admin"]) == before


@pytest.mark.slow
def test_the_server_refuses_a_write_the_check_missed(reader_db):
    """The session is read-only and the role reads only: a write that got past the check fails."""
    conn = reader_db._connect()
    try:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            with conn.transaction():
                conn.execute("CREATE TEMP TABLE x AS SELECT 1")
    finally:
        conn.close()


@pytest.mark.slow
def test_the_plan_is_explained_without_running(reader_db):
    plan = reader_db.explain_query_plan("SELECT name FROM singer WHERE singer_id = 1")
    assert plan.rows and all(isinstance(r[-1], str) for r in plan.rows)
    assert "singer" in " ".join(r[-1] for r in plan.rows)
    with pytest.raises(ForbiddenError):
        reader_db.explain_query_plan("SELECT pg_read_file('/etc/passwd')")
    with pytest.raises(NotAQueryError):
        reader_db.explain_query_plan("DELETE FROM singer")


@pytest.mark.slow
def test_one_client_holds_at_most_its_share_of_connections(reader_db):
    assert reader_db.workers == 2 and reader_db.client_workers == 1
    mine = reader_db.for_client("a")
    errors = []

    def long():
        try:
            mine.execute("SELECT count(*) FROM (SELECT generate_series(1, 1000000000000) AS g) AS s", timeout_s=10)
        except SqlError as e:
            errors.append(e)

    worker = threading.Thread(target=long)
    worker.start()
    wait_for(lambda: reader_db.worker_status()["running_by_client"].get("a"), "the long statement to hold a connection")
    with pytest.raises(QueryTimeoutError, match="its share"):
        mine.execute("SELECT 1", timeout_s=0.5)
    assert reader_db.for_client("b").execute("SELECT 1").rows == [(1,)]
    worker.join()
    assert [e.kind for e in errors] == ["timeout"]


@pytest.mark.slow
def test_opening_fails_with_one_clear_line(concert, server):
    port = server.port
    dbname = concert["dbname"]
    cases = [
        ("postgresql://reader@127.0.0.1:notaport/x", "Not a PostgreSQL URL|invalid"),
        (f"postgresql://{READER}:wrong-pw-9x@127.0.0.1:{port}/{dbname}", "password authentication failed"),
        (f"postgresql://sqlchorus@127.0.0.1:{free_port()}/{dbname}", "refused"),
        (f"postgresql://sqlchorus@127.0.0.1:{port}/no_such_database", 'database "no_such_database" does not exist'),
    ]
    for url, message in cases:
        with pytest.raises(DatabaseOpenError, match=message) as raised:
            PostgresDatabase(url, prestart=False)
        text = raised.value.message
        assert "\n" not in text and "wrong-pw-9x" not in text and PASSWORD not in text
        assert "wrong-pw-9x" not in repr(raised.value)


@pytest.mark.slow
def test_an_empty_database_opens_and_says_a_table_is_missing(server):
    url = server.new_database()
    with PostgresDatabase(url, prestart=False, allow_writable_role=True) as db:
        assert db.read_structure() == []
        with pytest.raises(ExecutionError, match='relation "singer" does not exist'):
            db.execute("SELECT * FROM singer")


@pytest.mark.slow
def test_a_server_that_stops_mid_statement_is_one_clear_error():
    servers = postgres_of_a_test()
    other = next(servers)
    try:
        db = PostgresDatabase(other.url(), timeout_s=30, workers=1, allow_writable_role=True)
        errors = []

        def long():
            try:
                db.execute("SELECT count(*) FROM (SELECT generate_series(1, 1000000000000) AS g) AS s")
            except SqlError as e:
                errors.append(e)

        worker = threading.Thread(target=long)
        worker.start()
        wait_for(lambda: running_statements(other.url()),
                 "the statement to run on the server")
        halt_postgres(other)
        worker.join(timeout=60)
        assert not worker.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], ExecutionError)
        assert "server went away" in errors[0].message
        with pytest.raises(DatabaseOpenError, match="Cannot open the PostgreSQL database"):
            db.execute("SELECT 1")
        db.close()
    finally:
        next(servers, None)


@pytest.mark.slow
def test_a_statement_the_server_would_not_stop_is_cancelled_from_outside(concert, monkeypatch):
    """Without the server's own statement_timeout, the cancel sent at the budget plus the grace
    stops the statement, and its connection is replaced."""
    # The connection's own statement_timeout (600 s) is far past the bound below, so only the
    # cancel from outside can end the statement within it.
    with PostgresDatabase(concert["reader"], timeout_s=600, workers=1) as db:
        monkeypatch.setattr(module, "_set_timeout", lambda conn, seconds: None)
        start = time.monotonic()
        with pytest.raises(QueryTimeoutError):
            db.execute("SELECT count(*) FROM (SELECT generate_series(1, 1000000000000) AS g) AS s", timeout_s=1)
        seconds = time.monotonic() - start
        # The cancel is a timer set at the budget plus the grace, which never fires early, over a
        # statement far longer than both; the upper bound is room for a busy machine.
        assert 1 + base.KILL_GRACE_S <= seconds <= 1 + GRACE_S
        assert db.worker_status()["replaced"] == 1
        monkeypatch.undo()
        assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]


@pytest.mark.slow
def test_no_password_reaches_a_span(concert):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    url = concert["reader"].replace(f"{READER}@", f"{READER}:{PASSWORD}@")
    with PostgresDatabase(url, prestart=False) as db:
        assert PASSWORD not in repr(db) and PASSWORD not in db.location
        traced = db.with_tracer(provider.get_tracer("test"))
        traced.execute("SELECT count(*) FROM singer")
        with pytest.raises(ExecutionError):
            traced.execute("SELECT * FROM no_such_table")
    spans = exporter.get_finished_spans()
    assert len(spans) == 2
    assert all(PASSWORD not in json.dumps(dict(s.attributes), default=str) for s in spans)


def test_text_that_breaks_the_parser_is_not_a_query():
    with pytest.raises(NotAQueryError, match="does not parse as PostgreSQL"):
        check_postgres_query("SELECT name FROM singer WHERE (")
    with pytest.raises(ForbiddenError, match="var_map is not allowed"):
        check_postgres_query("SELECT var_map(1)")


# -- Guard II: roles, what outlives a statement, calls the server will not interrupt -------------


def _role(admin: str, dbname: str, name: str, *grants: str) -> str:
    """A login role on the test's database with ``grants`` beyond reading; its URL (the server
    trusts it without a password)."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
        conn.execute(f"GRANT CONNECT ON DATABASE {dbname} TO {name}")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {name}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {name}")
        for grant in grants:
            conn.execute(grant.format(role=name))
    return admin.replace("postgresql://sqlchorus@", f"postgresql://{name}@")


@pytest.mark.slow
@pytest.mark.parametrize("name,grants,said", [
    ("reads_files", ("GRANT pg_read_server_files TO {role}",), "member of pg_read_server_files"),
    ("writes_files", ("GRANT pg_write_server_files TO {role}",), "member of pg_write_server_files"),
    ("runs_programs", ("GRANT pg_execute_server_program TO {role}",), "member of pg_execute_server_program"),
    ("signals", ("GRANT pg_signal_backend TO {role}",), "member of pg_signal_backend"),
    ("writes_elsewhere", ("CREATE SCHEMA IF NOT EXISTS side", "CREATE TABLE IF NOT EXISTS side.notes (a int)",
                          "GRANT USAGE ON SCHEMA side TO {role}", "GRANT INSERT ON side.notes TO {role}"),
     "INSERT on side.notes"),
    ("deletes", ("GRANT DELETE ON singer_in_concert TO {role}",), "DELETE on singer_in_concert"),
])
def test_a_role_that_can_do_harm_is_refused_with_the_sql_of_a_read_only_one(concert, name, grants, said):
    url = _role(concert["admin"], concert["dbname"], name, *grants)
    with pytest.raises(DatabaseOpenError) as raised:
        PostgresDatabase(url, prestart=False)
    text = raised.value.message
    assert said in text and "\n" not in text
    assert "CREATE ROLE reader LOGIN" in text and "GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader" in text
    with PostgresDatabase(url, prestart=False, allow_writable_role=True) as db:
        assert said in db.run_warning and db.execute("SELECT count(*) FROM singer").rows == [(6,)]


@pytest.mark.slow
def test_nothing_of_a_statement_outlives_it_on_its_connection(concert):
    """What a statement could leave on a pooled connection (a session-level advisory lock, a
    setting, a prepared statement, a LISTEN) is gone after the guard's reset; without the
    reset it stays, which is what the check shows."""
    with PostgresDatabase(concert["reader"], workers=1, prestart=False) as db:
        opener = db._connect

        def left_behind(conn, reset) -> dict[str, object]:
            # Past the guard's check, as a statement that got through it would.
            _run(conn, "SELECT pg_advisory_lock(4242), set_config('work_mem', '1GB', false)", (), 5.0, 10, 10_000,
                 reset=reset)
            conn.execute("PREPARE kept AS SELECT 1")
            conn.execute("LISTEN sqlchorus_channel")
            if reset is not None:
                reset(conn)
            with psycopg.connect(concert["admin"], autocommit=True) as admin:
                locks = admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
                                      (conn.info.backend_pid,)).fetchone()[0]
            return {"locks": locks, "work_mem": conn.execute("SHOW work_mem").fetchone()[0],
                    "prepared": conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0],
                    "listening": conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone()[0]}

        kept = opener()
        try:
            assert left_behind(kept, None) == {"locks": 1, "work_mem": "1GB", "prepared": 1, "listening": 1}
        finally:
            kept.close()
        reset = opener()
        try:
            assert left_behind(reset, opener.reset) == {"locks": 0, "work_mem": "16MB", "prepared": 0, "listening": 0}
        finally:
            reset.close()
        # Through the front door, statement after statement on one connection, nothing piles up.
        for _ in range(12):
            assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]


@pytest.mark.slow
def test_a_call_the_server_does_not_interrupt_is_ended_within_budget_and_grace(concert):
    """format() pads a billion characters in one step, with no check for a cancel in it (21 s
    past a 3 s budget before the guard refused it). Past the check, as a statement that got
    through it would, the cancel is ignored; the backend is terminated, the socket shut, and
    the waiting client returns within the budget and the grace; the backend is gone soon after."""
    with PostgresDatabase(concert["reader"], workers=1, prestart=False) as db:
        conn = db._connect()
        pid = conn.info.backend_pid
        budget = 1.0
        start = time.monotonic()
        with pytest.raises(base.Stopped):
            _run(conn, "SELECT length(format('%1000000000s', 'x')) FROM generate_series(1, 1000)", (), budget, 10,
                 10_000, terminate=db._connect.terminate, reset=db._connect.reset)
        seconds = time.monotonic() - start
        # Both steps are timers, which never fire early, over a statement of a thousand
        # billion-character paddings (seconds each here): far longer than both on any machine;
        # the upper bound is room for a busy one.
        assert budget + base.KILL_GRACE_S + base.TERMINATE_AFTER_S <= seconds <= budget + GRACE_S
        assert conn.broken or conn.closed
        conn.close()

        def gone() -> bool:
            with psycopg.connect(concert["admin"], autocommit=True) as admin:
                return not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchall()

        wait_for(gone, "the terminated backend to end")
        assert db.execute("SELECT count(*) FROM singer").rows == [(6,)]


@pytest.mark.slow
def test_every_front_door_names_the_refused_function(concert, reader_db):
    """The one line a refusal gives names the function and why, through the database, its plan
    and the LangChain toolkit's execute_sql and validate_sql, and the database goes on."""
    from langchain_core.messages import ToolCall

    import sqlchorus

    from sqlchorus.testing import ScriptedChatModel

    model = ScriptedChatModel(["SELECT 1"])  # ask_database is not called: the other tools need no model
    tools = {t.name: t for t in sqlchorus.as_tools(concert["reader"], model=model,
                                                   settings=sqlchorus.Settings(trace_dir=None))}
    for sql, said in (("SELECT ('/etc/hostname').pg_read_file", "pg_read_file is not allowed: it reads files"),
                      ("SELECT length(format('%1000000000s', 'x'))", "format is not allowed here"),
                      ("SELECT (4242::bigint).pg_advisory_lock", "pg_advisory_lock is not allowed: it takes locks")):
        with pytest.raises(ForbiddenError) as raised:
            reader_db.execute(sql)
        assert raised.value.message.startswith(said) and "\n" not in raised.value.message
        with pytest.raises(ForbiddenError, match=f"^{re.escape(said)}"):
            reader_db.explain_query_plan(sql)
        for name in ("execute_sql", "validate_sql"):
            message = tools[name].invoke(ToolCall(name=name, args={"sql": sql}, id="1", type="tool_call"))
            assert message.status == "error" and said in message.content, message
    assert reader_db.execute("SELECT count(*) FROM singer").rows == [(6,)]
    assert tools["execute_sql"].invoke({"sql": "SELECT count(*) FROM singer"})["rows"] == [[6]]
