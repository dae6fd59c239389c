"""Bad input through the command line for PostgreSQL and DuckDB databases: each case is a real
`sqlchorus ask` process, which must exit with its documented code after one clear line on stderr
(no traceback), never show a password, and leave the database as it was."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import spider_loader
from servers import free_port, postgres_of_a_test, require_password, restart_postgres

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "sqlchorus"
QUESTION = "How many singers are from France?"
SECRET = "s3cret-pass-7q"
"""A password put in every PostgreSQL URL given: it must show nowhere."""
WRONG = "wrong-pass-4z"
READER = "engine_reader"

FACTORIES = '''
"""Models for `--model python:engine_factories:NAME`."""
import json
import os
import subprocess

from sqlchorus.testing import ScriptedChatModel, oracle_model

GOLD = {"How many singers are from France?": """SELECT count(*) FROM singer WHERE "Country" = 'France'"""}


def oracle():
    return oracle_model(GOLD.get, name="oracle")


def halting():
    """The oracle, which stops the PostgreSQL server ($HALT_COMMAND) at its first call: the
    database is open, its schema read, and no statement of the question has run yet."""
    inner = oracle_model(GOLD.get, name="halting").responses

    def respond(messages):
        flag = os.environ["HALTED_FLAG"]
        if not os.path.exists(flag):
            subprocess.run(json.loads(os.environ["HALT_COMMAND"]), check=True, capture_output=True, timeout=300)
            open(flag, "w").close()
        return inner(messages)

    return ScriptedChatModel(respond, name="halting")
'''



@pytest.fixture(scope="module")
def env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("engine_cli")
    (folder / "engine_factories.py").write_text(FACTORIES, encoding="utf-8")
    return folder, {**os.environ, "PYTHONPATH": str(folder), "NO_COLOR": "1", "COLUMNS": "200",
                    "SQLCHORUS_VALUE_CACHE_DIR": str(folder / "values")}


def ask(env, tmp_path: Path, db: str, *extra: str, model: str = "oracle",
        more_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    folder, environ = env
    return subprocess.run(
        [str(BIN), "ask", QUESTION, "--db", db, "--model", f"python:engine_factories:{model}", "--no-cache",
         "--trace-dir", str(tmp_path / "traces"), *extra],
        capture_output=True, text=True, env={**environ, **(more_env or {})}, timeout=300, cwd=tmp_path,
    )


def stderr_lines(out: subprocess.CompletedProcess) -> list[str]:
    """The non-empty lines on stderr, after checking that no password and no traceback shows."""
    everything = out.stdout + out.stderr
    assert "Traceback" not in everything, everything
    assert SECRET not in everything and WRONG not in everything, everything
    return [line for line in out.stderr.splitlines() if line.strip()]


def one_error(out: subprocess.CompletedProcess, code: int, *phrases: str) -> str:
    """The one line of a refused command: exit ``code``, ``Error: ...`` naming ``phrases``."""
    lines = stderr_lines(out)
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: "), out.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert out.stdout == ""
    return lines[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- DuckDB --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def duck(spider, tmp_path_factory):
    pytest.importorskip("duckdb")
    folder = tmp_path_factory.mktemp("duck")
    spider_loader().load_database(spider("concert_singer"), duckdb_path=folder)
    return folder / "concert_singer.duckdb"


def test_a_missing_duckdb_file(env, tmp_path):
    db = tmp_path / "missing.duckdb"
    one_error(ask(env, tmp_path, str(db)), 2, "does not exist", str(db))
    assert not db.exists() and not (tmp_path / "missing.duckdb.wal").exists()


@pytest.mark.slow
def test_a_duckdb_file_without_tables(env, tmp_path):
    import duckdb

    db = tmp_path / "empty.duckdb"
    duckdb.connect(str(db)).close()
    before = sha256(db)
    one_error(ask(env, tmp_path, str(db)), 2, "no tables")
    assert sha256(db) == before and sorted(p.name for p in tmp_path.glob("empty.duckdb*")) == ["empty.duckdb"]


@pytest.mark.slow
def test_a_duckdb_file_another_process_writes(env, duck, tmp_path):
    db = tmp_path / "locked.duckdb"
    db.write_bytes(duck.read_bytes())
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
                               "sys.stdin.read(); c.close()", str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"  # it holds the file open for writing now
        before = sha256(db)
        one_error(ask(env, tmp_path, str(db)), 2, "another process holds it open for writing")
        assert sha256(db) == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=120)


@pytest.mark.slow
def test_a_duckdb_question_is_answered_and_nothing_is_written(env, duck, tmp_path):
    db = tmp_path / "concert_singer.duckdb"
    db.write_bytes(duck.read_bytes())
    before = sha256(db)
    out = ask(env, tmp_path, str(db), "--json")
    assert out.returncode == 0 and stderr_lines(out) == [], out.stderr
    assert json.loads(out.stdout)["rows"] == [[4]]
    assert sha256(db) == before and sorted(p.name for p in tmp_path.glob("concert_singer.duckdb*")) == [db.name]


# -- PostgreSQL without a server -----------------------------------------------------------------


@pytest.mark.slow
def test_a_malformed_postgresql_url(env, tmp_path):
    pytest.importorskip("psycopg")
    url = f"postgresql://sqlchorus:{SECRET}@127.0.0.1:notaport/concert_singer"
    one_error(ask(env, tmp_path, url), 2, "Cannot open the PostgreSQL database", "notaport")


@pytest.mark.slow
def test_an_unreachable_postgresql_server(env, tmp_path):
    pytest.importorskip("psycopg")
    url = f"postgresql://sqlchorus:{SECRET}@127.0.0.1:{free_port()}/concert_singer"  # nothing listens there
    one_error(ask(env, tmp_path, url), 2, "Cannot open the PostgreSQL database", "Connection refused")


# -- PostgreSQL ----------------------------------------------------------------------------------


def _readonly_role(server, dbname: str) -> None:
    """READER may log in to ``dbname`` with a password (SECRET) and only read it."""
    import psycopg

    with psycopg.connect(server.url(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER,)).fetchone():
            conn.execute(f"CREATE ROLE {READER} LOGIN PASSWORD '{SECRET}' NOSUPERUSER NOCREATEDB NOCREATEROLE")
            conn.execute(f"ALTER ROLE {READER} SET temp_file_limit = '64MB'")
    with psycopg.connect(server.url(dbname), autocommit=True) as conn:
        for line in (f"REVOKE ALL ON DATABASE {dbname} FROM PUBLIC", f"GRANT CONNECT ON DATABASE {dbname} TO {READER}",
                     "REVOKE CREATE ON SCHEMA public FROM PUBLIC", f"GRANT USAGE ON SCHEMA public TO {READER}",
                     f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {READER}"):
            conn.execute(line)
    require_password(server, dbname, READER)  # the server trusts everyone else


def state_of(url: str) -> dict[str, object]:
    """Every table's row count and checksum, every relation of a user schema, and every role."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")]
        sums = {t: conn.execute(f'SELECT count(*), md5(coalesce(string_agg(x::text, \',\' ORDER BY x::text), \'\')) '
                                f'FROM "{t}" AS x').fetchone() for t in tables}
        relations = conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1, 2").fetchall()
        roles = conn.execute("SELECT rolname, rolsuper FROM pg_roles ORDER BY 1").fetchall()
    return {"tables": sums, "relations": relations, "roles": roles}


@pytest.fixture(scope="module")
def pg(spider):
    pytest.importorskip("psycopg")
    import psycopg

    for server in postgres_of_a_test():
        spider_loader().load_database(spider("concert_singer"), postgres_url=server.url())
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE empty_one")
        _readonly_role(server, "concert_singer")
        _readonly_role(server, "empty_one")
        yield server


def url_of(server, database: str, user: str = "sqlchorus", password: str = SECRET) -> str:
    return f"postgresql://{user}:{password}@127.0.0.1:{server.port}/{database}"


@pytest.mark.slow
def test_refused_authentication(env, pg, tmp_path):
    before = state_of(pg.url("concert_singer"))
    one_error(ask(env, tmp_path, url_of(pg, "concert_singer", READER, WRONG)), 2,
              "Cannot open the PostgreSQL database", "password authentication failed", f'"{READER}"')
    assert state_of(pg.url("concert_singer")) == before


@pytest.mark.slow
def test_a_postgresql_database_that_does_not_exist(env, pg, tmp_path):
    line = one_error(ask(env, tmp_path, url_of(pg, "no_such_db")), 2, 'database "no_such_db" does not exist')
    assert "FATAL" not in line


@pytest.mark.slow
def test_a_postgresql_database_without_tables(env, pg, tmp_path):
    before = state_of(pg.url("empty_one"))
    one_error(ask(env, tmp_path, url_of(pg, "empty_one", READER)), 2, "no tables")
    assert state_of(pg.url("empty_one")) == before


@pytest.mark.slow
def test_a_read_only_role_is_answered_without_a_warning(env, pg, tmp_path):
    before = state_of(pg.url("concert_singer"))
    out = ask(env, tmp_path, url_of(pg, "concert_singer", READER), "--json", "--require-readonly-role")
    assert out.returncode == 0 and stderr_lines(out) == [], out.stderr
    assert json.loads(out.stdout)["rows"] == [[4]]
    assert state_of(pg.url("concert_singer")) == before


@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), ("--require-readonly-role",), ("--require-readonly-role", "--allow-writable-role")])
def test_a_role_that_could_write_is_refused_by_default(env, pg, tmp_path, extra):
    before = state_of(pg.url("concert_singer"))
    line = one_error(ask(env, tmp_path, url_of(pg, "concert_singer"), *extra), 2,
                     "The role sqlchorus could change or reach past", "superuser", "read-only role",
                     "GRANT SELECT ON ALL TABLES", "--allow-writable-role")
    assert SECRET not in line
    assert state_of(pg.url("concert_singer")) == before


@pytest.mark.slow
def test_with_allow_writable_role_every_run_is_warned_and_goes_on(env, pg, tmp_path):
    before = state_of(pg.url("concert_singer"))
    for _ in range(2):  # every run, not once per process or database
        out = ask(env, tmp_path, url_of(pg, "concert_singer"), "--json", "--allow-writable-role")
        lines = stderr_lines(out)
        assert out.returncode == 0, out.stderr
        assert len(lines) == 1 and lines[0].startswith("Warning: the role sqlchorus could change"), out.stderr
        assert "superuser" in lines[0] and "no guard can stop" in lines[0]
        answer = json.loads(out.stdout)
        assert answer["rows"] == [[4]]
        assert [e["kind"] for e in answer["errors"]] == ["writable_role"]
    assert state_of(pg.url("concert_singer")) == before


@pytest.mark.slow
def test_the_server_going_away_during_a_run(env, spider, tmp_path):
    """The model's first call stops the server (as a crash would): the database was opened and
    its schema read, no statement has run; the run ends without an answer, saying why."""
    servers = postgres_of_a_test()
    server = next(servers)
    try:
        spider_loader().load_database(spider("concert_singer"), postgres_url=server.url())
        _readonly_role(server, "concert_singer")
        before = state_of(server.url("concert_singer"))
        halt = [*server.as_user, str(server.bin / "pg_ctl"), "-D", str(server.data), "-m", "immediate", "-w", "stop"]
        flag = tmp_path / "halted"
        out = ask(env, tmp_path, url_of(server, "concert_singer", READER), model="halting",
                  more_env={"HALT_COMMAND": json.dumps(halt), "HALTED_FLAG": str(flag)})
        assert flag.exists()  # the server was stopped by the model's first call
        lines = stderr_lines(out)
        assert out.returncode == 1, (out.stdout, out.stderr)
        assert len(lines) == 1 and lines[0].startswith("No answer: "), out.stderr
        assert "PostgreSQL server went away" in lines[0] or "Cannot open the PostgreSQL database" in lines[0]
        restart_postgres(server)
        assert state_of(server.url("concert_singer")) == before
    finally:
        next(servers, None)


# -- debug and ui over the new engines -----------------------------------------------------------

STEPS = "next\nbreak check_candidates\ncontinue\nstate candidates\ncontinue\nsql SELECT count(*) FROM singer\nquit\n"


def debug(env, tmp_path: Path, db: str) -> subprocess.CompletedProcess:
    folder, environ = env
    commands = tmp_path / "commands.txt"
    commands.write_text(STEPS, encoding="utf-8")
    return subprocess.run(
        [str(BIN), "debug", QUESTION, "--db", db, "--model", "python:engine_factories:oracle", "--no-cache",
         "--trace-dir", str(tmp_path / "traces"), "--commands", str(commands)],
        capture_output=True, text=True, env=environ, timeout=300, cwd=tmp_path,
    )


def stepped_through(out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 0, (out.stdout, out.stderr)
    text = out.stdout
    assert "paused before extract_keywords" in text and "ran extract_keywords" in text
    assert "paused before check_candidates" in text and "unchecked" in text
    assert """ended at checkpoint""" in text and """answer SELECT count(*) FROM singer WHERE "Country" = 'France'""" in text
    assert "│ 6 " in text.split("(sqlchorus) sql SELECT count(*) FROM singer", 1)[1]  # the sql command's result


@pytest.mark.slow
def test_debug_steps_through_a_run_over_duckdb(env, duck, tmp_path):
    db = tmp_path / "concert_singer.duckdb"
    db.write_bytes(duck.read_bytes())
    before = sha256(db)
    out = debug(env, tmp_path, str(db))
    assert stderr_lines(out) == [], out.stderr
    stepped_through(out)
    assert sha256(db) == before


@pytest.mark.slow
def test_debug_steps_through_a_run_over_postgresql(env, pg, tmp_path):
    before = state_of(pg.url("concert_singer"))
    out = debug(env, tmp_path, url_of(pg, "concert_singer", READER))
    assert stderr_lines(out) == [], out.stderr
    stepped_through(out)
    assert state_of(pg.url("concert_singer")) == before


@pytest.mark.slow
def test_the_ui_answers_a_question_over_duckdb(env, duck, tmp_path):
    import httpx

    from servers import running

    folder, environ = env
    db = tmp_path / "concert_singer.duckdb"
    db.write_bytes(duck.read_bytes())
    before = sha256(db)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["ui", "--port", str(port), "--db", str(db), "--model", "python:engine_factories:oracle", "--no-cache",
            "--trace-dir", str(tmp_path / "traces")]
    with running(args, tmp_path, environ, base + "/api/runs"):
        (listed,) = httpx.get(base + "/api/databases", timeout=60).json()["databases"]
        assert "concert_singer" in json.dumps(listed)
        run_id = httpx.post(base + "/api/live", json={"question": QUESTION}, timeout=60).json()["run_id"]
        with httpx.stream("GET", f"{base}/api/live/{run_id}/events", timeout=120) as events:
            said = [json.loads(line[5:]) for line in events.iter_lines() if line.startswith("data:")]
        assert said[-1]["event"] == "done", said
        (answer,) = [e["answer"] for e in said if e["event"] == "answer"]
        assert answer["rows"] == [[4]] and answer["ok"], answer
        run = httpx.get(f"{base}/api/runs/{run_id}", timeout=60).json()
        assert run["summary"]["question"] == QUESTION and "concert_singer" in json.dumps(run["summary"])
    assert sha256(db) == before
