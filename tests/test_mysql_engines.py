"""MySQL and MariaDB through sqlchorus's front doors, on a MariaDB server the test starts: a
question answered through the whole pipeline (the Python API and `sqlchorus ask`), the trace
naming the engine and the database without its password; and bad input through the command
line, each case a real `sqlchorus ask` process that must exit with its documented code after one
clear line on stderr (no traceback), never show a password, and leave the database as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import spider_db
from servers import free_port, load_sqlite_into_mariadb, mariadb_of_a_test
from sqlchorus import Session
from sqlchorus.config.settings import Settings
from sqlchorus.core.trace_file import read_spans
from sqlchorus.runs.databases import database_ids
from sqlchorus.testing import oracle_model
from sqlchorus.tools.engines.opening import database_key, database_name, database_url, display_name, engine_of

BIN = Path(sys.executable).parent / "sqlchorus"
QUESTION = "How many singers are from France?"
GOLD = {QUESTION: "SELECT count(*) FROM singer WHERE Country = 'France'"}
SECRET = "s3cret-pass-7q"
"""The read-only user's password: it must show nowhere."""
WRONG = "wrong-pass-4z"
READER = "engine_reader"
EMPTY_READER = "empty_reader"

FACTORIES = '''
"""Models for `--model python:mysql_factories:NAME`."""
import json
import os
import subprocess

from sqlchorus.testing import ScriptedChatModel, oracle_model

GOLD = {"How many singers are from France?": "SELECT count(*) FROM singer WHERE Country = 'France'"}


def oracle():
    return oracle_model(GOLD.get, name="oracle")


def halting():
    """The oracle, which stops the MariaDB server ($HALT_COMMAND) at its first call: the database
    is open, its schema read, and no statement of the question has run yet."""
    inner = oracle_model(GOLD.get, name="halting").responses

    def respond(messages):
        flag = os.environ["HALTED_FLAG"]
        if not os.path.exists(flag):
            subprocess.run(json.loads(os.environ["HALT_COMMAND"]), check=True, capture_output=True, timeout=300)
            open(flag, "w").close()
        return inner(messages)

    return ScriptedChatModel(respond, name="halting")
'''


@pytest.mark.parametrize("name", ["mysql://me@db.example/shop", "mariadb://me@db.example:3307/shop",
                                  "MySQL://me@db.example/shop"])
def test_a_mysql_database_is_named_the_same_way_everywhere(name):
    assert engine_of(name) == "mysql"


def test_a_mysql_name_shows_no_password():
    url = f"mysql://me:{SECRET}@db.example:3306/shop"
    assert SECRET not in display_name(url) and SECRET not in database_key(url)
    assert display_name(url) == "mysql://me@db.example:3306/shop"
    assert database_url("mariadb://me@db.example:3306/", "other") == "mariadb://me@db.example:3306/other"
    ids = database_ids([url, "/data/third.sqlite"])
    assert list(ids) == ["shop", "third"] and ids["shop"] == url


# -- a server ------------------------------------------------------------------------------------


def state_of(server, database: str) -> dict[str, object]:
    """Every table's row count and checksum, every relation, every user."""
    tables = [r[0] for r in server.admin_sql(
        f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{database}' "
        "AND TABLE_TYPE = 'BASE TABLE' ORDER BY 1")[0]]
    sums = {t: server.admin_sql(f"CHECKSUM TABLE `{database}`.`{t}` EXTENDED")[0][0][1] for t in tables}
    relations = server.admin_sql("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                                 "WHERE TABLE_SCHEMA NOT IN ('information_schema', 'performance_schema', 'mysql') "
                                 "ORDER BY 1, 2")[0]
    users = server.admin_sql("SELECT User, Host FROM mysql.global_priv ORDER BY 1, 2")[0]
    return {"tables": sums, "relations": relations, "users": users}


def _loaded(server) -> None:
    server.admin_sql("CREATE DATABASE concert_singer", "CREATE DATABASE empty_one")
    load_sqlite_into_mariadb(server, spider_db("concert_singer"), "concert_singer")
    server.reader("concert_singer", READER, SECRET)
    # A user that may read another database too is refused: the empty one has a reader of its own.
    server.reader("empty_one", EMPTY_READER, SECRET)


@pytest.fixture(scope="module")
def maria():
    if not spider_db("concert_singer").exists():
        pytest.skip("Spider database concert_singer not found")
    for server in mariadb_of_a_test():
        _loaded(server)
        yield server


def url_of(server, database: str, user: str = READER, password: str = SECRET, scheme: str = "mysql") -> str:
    return f"{scheme}://{user}:{password}@127.0.0.1:{server.port}/{database}"


@pytest.mark.slow
def test_a_question_over_mariadb_names_it_without_its_password(maria, tmp_path):
    url = url_of(maria, "concert_singer", scheme="mariadb")
    before = state_of(maria, "concert_singer")
    settings = Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"),
                        checkpoints=str(tmp_path / "checkpoints.sqlite"), value_cache_dir=str(tmp_path / "values"),
                        cache=False)
    with Session(settings) as session:
        result = session.ask(QUESTION, url)
        db = session.database(url).db
        assert database_name(db) == f"mariadb://{READER}@127.0.0.1:{maria.port}/concert_singer"
    assert result.ok and result.rows == [[4]], result.error
    spans = read_spans(result.trace_path)
    root = next(s for s in spans if not s.get("parent_id"))
    assert root["attributes"]["db.system.name"] == "mysql"
    assert root["attributes"]["sqlchorus.database"] == f"mariadb://{READER}@127.0.0.1:{maria.port}/concert_singer"
    statements = [s for s in spans if s["name"] == "sql"]
    assert statements and all(s["attributes"]["db.system.name"] == "mysql" for s in statements)
    assert any(p.suffix == ".sqlite" for p in (tmp_path / "values").iterdir())  # its value index
    written = "".join(p.read_bytes().decode("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET not in written and SECRET not in json.dumps(result.to_dict(), default=str)
    assert state_of(maria, "concert_singer") == before


# -- the command line ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mysql_cli")
    (folder / "mysql_factories.py").write_text(FACTORIES, encoding="utf-8")
    home = folder / "home"  # no option file: the passwords are the URLs' own
    home.mkdir()
    environ = {k: v for k, v in os.environ.items() if k not in ("MYSQL_PWD", "SQLCHORUS_ALLOW_WRITABLE_ROLE")}
    return folder, {**environ, "PYTHONPATH": str(folder), "NO_COLOR": "1", "COLUMNS": "200", "HOME": str(home),
                    "SQLCHORUS_VALUE_CACHE_DIR": str(folder / "values")}


def ask(env, tmp_path: Path, db: str, *extra: str, model: str = "oracle",
        more_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    folder, environ = env
    return subprocess.run(
        [str(BIN), "ask", QUESTION, "--db", db, "--model", f"python:mysql_factories:{model}", "--no-cache",
         "--trace-dir", str(tmp_path / "traces"), *extra],
        capture_output=True, text=True, env={**environ, **(more_env or {})}, timeout=300, cwd=tmp_path,
    )


def stderr_lines(out: subprocess.CompletedProcess, *secrets: str) -> list[str]:
    """The non-empty lines on stderr, after checking that no password and no traceback shows."""
    everything = out.stdout + out.stderr
    assert "Traceback" not in everything, everything
    for secret in (SECRET, WRONG, *secrets):
        assert secret not in everything, everything
    return [line for line in out.stderr.splitlines() if line.strip()]


def one_error(out: subprocess.CompletedProcess, code: int, *phrases: str, secrets: tuple[str, ...] = ()) -> str:
    """The one line of a refused command: exit ``code``, ``Error: ...`` naming ``phrases``."""
    lines = stderr_lines(out, *secrets)
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: "), out.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert out.stdout == ""
    return lines[0]


@pytest.mark.slow
def test_a_malformed_mysql_url(env, tmp_path):
    pytest.importorskip("pymysql")
    url = f"mysql://{READER}:{SECRET}@127.0.0.1:notaport/concert_singer"
    one_error(ask(env, tmp_path, url), 2, "Cannot open the MySQL database", "notaport")


@pytest.mark.slow
def test_an_unreachable_mysql_server(env, tmp_path):
    pytest.importorskip("pymysql")
    url = f"mariadb://{READER}:{SECRET}@127.0.0.1:{free_port()}/concert_singer"  # nothing listens there
    one_error(ask(env, tmp_path, url), 2, "Cannot open the MariaDB database", "Connection refused")


@pytest.mark.slow
def test_refused_login(env, maria, tmp_path):
    before = state_of(maria, "concert_singer")
    one_error(ask(env, tmp_path, url_of(maria, "concert_singer", password=WRONG)), 2,
              "Cannot open the MySQL database", f"Access denied for user '{READER}'")
    assert state_of(maria, "concert_singer") == before


@pytest.mark.slow
def test_a_mysql_database_that_does_not_exist(env, maria, tmp_path):
    one_error(ask(env, tmp_path, maria.url("no_such_db")), 2, "Unknown database 'no_such_db'",
              secrets=(maria.ADMIN_PASSWORD,))
    # The server tells a user that may not see it only that it may not use it.
    one_error(ask(env, tmp_path, url_of(maria, "no_such_db")), 2,
              f"Access denied for user '{READER}'@'127.0.0.1' to database 'no_such_db'")


@pytest.mark.slow
def test_a_mysql_database_without_tables(env, maria, tmp_path):
    before = state_of(maria, "empty_one")
    one_error(ask(env, tmp_path, url_of(maria, "empty_one", EMPTY_READER)), 2, "no tables")
    assert state_of(maria, "empty_one") == before


@pytest.mark.slow
def test_a_read_only_user_is_answered_without_a_warning(env, maria, tmp_path):
    before = state_of(maria, "concert_singer")
    out = ask(env, tmp_path, url_of(maria, "concert_singer"), "--json", "--require-readonly-role")
    assert out.returncode == 0 and stderr_lines(out) == [], out.stderr
    assert json.loads(out.stdout)["rows"] == [[4]]
    assert state_of(maria, "concert_singer") == before


@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), ("--require-readonly-role", "--allow-writable-role")])
def test_a_privileged_user_is_refused_by_default(env, maria, tmp_path, extra):
    before = state_of(maria, "concert_singer")
    line = one_error(ask(env, tmp_path, maria.url("concert_singer"), *extra), 2,
                     "The user sqlchorus could change or reach past", "ALL PRIVILEGES", "read-only user",
                     "GRANT SELECT, SHOW VIEW ON `concert\\_singer`.*", "--allow-writable-role", secrets=(maria.ADMIN_PASSWORD,))
    assert "\n" not in line
    assert state_of(maria, "concert_singer") == before


@pytest.mark.slow
def test_with_allow_writable_role_every_run_is_warned_and_goes_on(env, maria, tmp_path):
    before = state_of(maria, "concert_singer")
    for _ in range(2):  # every run, not once per process or database
        out = ask(env, tmp_path, maria.url("concert_singer"), "--json", "--allow-writable-role")
        lines = stderr_lines(out, maria.ADMIN_PASSWORD)
        assert out.returncode == 0, out.stderr
        assert len(lines) == 1 and lines[0].startswith("Warning: the user sqlchorus could change"), out.stderr
        assert "ALL PRIVILEGES" in lines[0] and "no guard can stop" in lines[0]
        answer = json.loads(out.stdout)
        assert answer["rows"] == [[4]]
        assert [e["kind"] for e in answer["errors"]] == ["writable_role"]
    assert state_of(maria, "concert_singer") == before


@pytest.mark.slow
def test_the_server_going_away_during_a_run(env, tmp_path):
    """The model's first call stops the server (as a crash would): the database was opened and
    its schema read, no statement has run; the run ends without an answer, saying why."""
    servers = mariadb_of_a_test()
    server = next(servers)
    try:
        _loaded(server)
        before = state_of(server, "concert_singer")
        flag = tmp_path / "halted"
        out = ask(env, tmp_path, url_of(server, "concert_singer"), model="halting",
                  more_env={"HALT_COMMAND": json.dumps(["kill", "-9", str(server.process.pid)]),
                            "HALTED_FLAG": str(flag)})
        assert flag.exists()  # the server was stopped by the model's first call
        lines = stderr_lines(out)
        assert out.returncode == 1, (out.stdout, out.stderr)
        assert len(lines) == 1 and lines[0].startswith("No answer: "), out.stderr
        assert "MariaDB server went away" in lines[0] or "Cannot open the MySQL database" in lines[0], lines[0]
        server.process.wait(timeout=60)
        server.restart()
        assert state_of(server, "concert_singer") == before
    finally:
        next(servers, None)


# -- the other front doors -------------------------------------------------------------------------


@pytest.mark.slow
def test_the_toolkit_and_the_rest_server_take_a_mariadb_url_and_name_a_refused_function(maria, env, tmp_path):
    """A MariaDB URL is taken by the LangChain toolkit and by `sqlchorus serve` as by `ask`: the
    toolkit's execute_sql and validate_sql name a refused function in one line, the server answers
    a question over it, and neither shows the password."""
    from langchain_core.messages import ToolCall

    import sqlchorus
    from servers import http, running

    url = url_of(maria, "concert_singer")
    before = state_of(maria, "concert_singer")
    tools = {t.name: t for t in sqlchorus.as_tools(url, model=oracle_model(GOLD.get),
                                                   settings=Settings(trace_dir=None, cache=False))}
    for sql, said in (("SELECT LOAD_FILE('/etc/hostname')", "load_file is not allowed: it reads files"),
                      ("SELECT SLEEP(5)", "sleep is not allowed"),
                      ("SELECT GET_LOCK('a', 1)", "get_lock is not allowed")):
        for name in ("execute_sql", "validate_sql"):
            message = tools[name].invoke(ToolCall(name=name, args={"sql": sql}, id="1", type="tool_call"))
            assert message.status == "error" and said in message.content, message
            assert SECRET not in message.content
    assert tools["execute_sql"].invoke({"sql": "SELECT count(*) FROM singer"})["rows"] == [[6]]

    folder, environ = env
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["serve", "--db", url, "--port", str(port), "--model", "python:mysql_factories:oracle", "--no-cache",
            "--trace-dir", str(tmp_path / "traces")]
    with running(args, tmp_path, environ, base + "/v1/health"):
        databases = http.get(f"{base}/v1/databases").json()
        assert SECRET not in json.dumps(databases)
        answer = http.post(f"{base}/v1/ask", json={"question": QUESTION})
        assert answer.status_code == 200, answer.text
        assert answer.json()["rows"] == [[4]] and SECRET not in answer.text
    log = "".join(p.read_text(encoding="utf-8", errors="replace") for p in tmp_path.glob("server-*.log"))
    assert SECRET not in log and "Traceback" not in log
    assert state_of(maria, "concert_singer") == before
