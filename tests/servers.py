"""Servers for tests: `sqlchorus serve` and `sqlchorus mcp` started for real on loopback, gates
that hold their model calls until a test lets them go, and a PostgreSQL server of the test's own
(initdb in a temporary folder, stopped at the end), and a MariaDB server of the test's own (likewise)."""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from conftest import WAIT_S, require_slow, wait_for

TOKEN = secrets.token_urlsafe(32)
"""A bearer token as strong as a server requires (32 random bytes)."""

SERVER_FACTORIES = '''
"""Models for servers under test: `python:server_factories:NAME`."""
import os
import re
import time
from pathlib import Path

from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model, prompt_text

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
FAIL = "[fail] "
GATE = re.compile(r"\\[gate (\\w+)\\] ")
GATES = Path(os.environ["TEST_GATES"]) if os.environ.get("TEST_GATES") else None
HOLD_LIMIT_S = 100.0
"""The longest a call waits at a gate the test never opens (a test that failed half-way), so
that no call is held for ever; within the server's 120 s model time limit, so that the call
ends here rather than being given up on and tried again."""


def _gold(question):
    return GOLD.get(GATE.sub("", question).replace(FAIL, ""))


def _held(name):
    """Hold a call at gate NAME: say so (a line in NAME.called in $TEST_GATES), then wait until
    the test creates NAME.open there."""
    with open(GATES / f"{name}.called", "a", encoding="utf-8") as f:
        f.write("called\\n")
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not (GATES / f"{name}.open").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gate {name} was never opened")
        time.sleep(0.01)


def mixed():
    """The oracle; a question marked [fail] makes every call fail, one marked [gate NAME] holds
    every call until the test opens that gate."""
    inner = oracle_model(_gold, name="mixed").responses

    def respond(messages):
        text = prompt_text(messages)
        if "[fail]" in text:
            raise RuntimeError("the provider is down")
        gate = GATE.search(text)
        if gate:
            _held(gate.group(1))
        return inner(messages)

    return ScriptedChatModel(respond, name="mixed")
'''

BIN = Path(sys.executable).parent / "sqlchorus"
START_TIMEOUT_S = 180.0
"""Room for a server to start (imports, the demo database's index) on a busy machine."""

# Each call of httpx's, with room for a busy machine (httpx's own default gives up after 5 s).
http = SimpleNamespace(**{verb: functools.partial(getattr(httpx, verb), timeout=WAIT_S)
                          for verb in ("get", "post", "put", "delete")})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(folder: Path, gates: Path | None = None, **extra: str) -> dict[str, str]:
    """An environment whose `python:server_factories:mixed` is the scripted model above, its
    gates in ``gates`` (``folder/gates`` by default)."""
    (folder / "server_factories.py").write_text(SERVER_FACTORIES, encoding="utf-8")
    gates = gates or folder / "gates"
    gates.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "SQLCHORUS_TOKEN"}
    env.update({"PYTHONPATH": str(folder), "NO_COLOR": "1", "TEST_GATES": str(gates), **extra})
    return env


class Gate:
    """Holds the model calls of one question in a server under test until the test opens it.

    The question starts with ``mark``; each call of `mixed` on it adds a line to
    ``<name>.called`` in the gates folder, then waits for ``<name>.open``. The gate opens when
    the ``with`` block ends, if the test has not opened it, so that no call is left waiting.
    """

    def __init__(self, gates: Path):
        self.gates = gates
        self.name = uuid.uuid4().hex[:12]
        self.mark = f"[gate {self.name}] "

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.open()

    def wait_called(self) -> None:
        """Until a call is held at the gate."""
        wait_for((self.gates / f"{self.name}.called").exists, f"a model call at gate {self.name}")

    def open(self) -> None:
        (self.gates / f"{self.name}.open").touch()


@contextlib.contextmanager
def running(args: list[str], cwd: Path, env: dict[str, str], ready_url: str,
            headers: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """Run ``sqlchorus ARGS`` until the block ends; ready once ``ready_url`` answers. Only a
    test marked slow may."""
    require_slow(f"`sqlchorus {' '.join(args[:1])}` (servers.running)")
    log = open(cwd / f"server-{uuid.uuid4().hex[:6]}.log", "w+", encoding="utf-8")
    process = subprocess.Popen([str(BIN), *args], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the server exited ({process.returncode}): {log.read()}")
            try:
                if httpx.get(ready_url, headers=headers, timeout=10).status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"no server within {START_TIMEOUT_S:g} s: {log.read()}")
            time.sleep(0.2)
        yield process
    finally:
        stop(process)
        log.close()


def stop(process: subprocess.Popen, timeout_s: float = 15.0) -> None:
    """End a server: asked to stop, then killed if it does not within ``timeout_s``."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# -- PostgreSQL ----------------------------------------------------------------------------------


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (Debian puts them off the PATH), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


class PostgresServer:
    """A PostgreSQL server in a temporary folder on a loopback port, trusting local users.

    PostgreSQL will not run as root; as root, it runs as the ``postgres`` user the Debian
    package creates.
    """

    def __init__(self) -> None:
        self.bin = postgres_bin()
        if self.bin is None:
            raise RuntimeError("PostgreSQL's server programs (initdb, pg_ctl) are not installed: "
                               "apt-get install postgresql")
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                raise RuntimeError("running as root without runuser: cannot start PostgreSQL")
            try:
                import pwd

                pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no postgres user to run PostgreSQL as") from None
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.folder = Path(tempfile.mkdtemp(prefix="sqlchorus-pg-"))
        self.port = free_port()
        self.data = self.folder / "data"
        if self.as_user:
            shutil.chown(self.folder, "postgres", "postgres")

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=300)

    def start(self) -> PostgresServer:
        require_slow("a PostgreSQL server (servers.PostgresServer)")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "sqlchorus",
                  "--no-sync", "-E", "UTF8")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off " \
                  "-c max_connections=200 -c full_page_writes=off"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.folder / "log"), "-w", "-t", "180", "start")
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://sqlchorus@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh database on this server; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.folder, ignore_errors=True)


def require_password(server: PostgresServer, database: str, role: str) -> None:
    """Make ``role`` give its password on ``server`` (which trusts everyone else) and wait until
    the reload has taken effect: a wrong password is refused. The reload is asynchronous."""
    import psycopg

    hba = server.data / "pg_hba.conf"
    if role not in hba.read_text():
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        server._run(str(server.bin / "pg_ctl"), "-D", str(server.data), "reload")

    def refused() -> bool:
        try:
            psycopg.connect(f"postgresql://{role}:not-its-password@127.0.0.1:{server.port}/{database}").close()
        except psycopg.OperationalError as e:
            return "password authentication failed" in str(e)
        return False

    wait_for(refused, f"the server to ask {role} for its password")


def running_statements(url: str) -> int:
    """How many of sqlchorus's connections to the server of ``url`` are running a statement now
    (the guard reads rows through a cursor, so the text running is a FETCH, not the query)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                            "AND application_name = 'sqlchorus' AND pid <> pg_backend_pid()").fetchone()[0]


def halt_postgres(server: PostgresServer) -> None:
    """Stop ``server`` as a crash would (immediate mode), keeping its data for :func:`restart_postgres`."""
    server._run(str(server.bin / "pg_ctl"), "-D", str(server.data), "-m", "immediate", "-w", "stop")


def restart_postgres(server: PostgresServer) -> None:
    """Start ``server`` again, on the same port and data, after :func:`halt_postgres`."""
    options = f"-p {server.port} -k {server.folder} -c listen_addresses=127.0.0.1 -c fsync=off " \
              "-c max_connections=200 -c full_page_writes=off"
    server._run(str(server.bin / "pg_ctl"), "-D", str(server.data), "-o", options, "-l",
                str(server.folder / "log"), "-w", "-t", "180", "start")


@contextlib.contextmanager
def allow_writable_role() -> Iterator[None]:
    """Let settings open a PostgreSQL database as a role that could write (the test server's
    superuser), as ``--allow-writable-role`` does, while the block runs."""
    old = os.environ.get("SQLCHORUS_ALLOW_WRITABLE_ROLE")
    os.environ["SQLCHORUS_ALLOW_WRITABLE_ROLE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SQLCHORUS_ALLOW_WRITABLE_ROLE", None)
        else:
            os.environ["SQLCHORUS_ALLOW_WRITABLE_ROLE"] = old


def postgres_of_a_test() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, for a fixture to yield from and stop at its end.
    Without PostgreSQL's server programs the test skips, unless the run requires them
    (SQLCHORUS_REQUIRE_POSTGRES), and then it fails. Only a test marked slow may have one."""
    require_slow("a PostgreSQL server (servers.postgres_of_a_test)")
    if postgres_bin() is None:
        if os.environ.get("SQLCHORUS_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL's server programs are not installed, and this run requires them.")
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed: apt-get install postgresql")
    server = PostgresServer().start()
    try:  # stopped however the test ends, even when it drives this generator by hand and fails
        yield server
    finally:
        server.stop()


# -- MariaDB -------------------------------------------------------------------------------------


def mariadb_bin() -> Path | None:
    """The folder of MariaDB's server programs (mariadbd, mariadb-install-db), or None."""
    for name in ("mariadbd", "mysqld"):
        found = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
        if found:
            return Path(found).resolve().parent
    return None


def _mariadb_program(folder: Path, *names: str) -> str:
    for name in names:
        for where in (folder, Path("/usr/bin"), Path("/usr/sbin")):
            if (where / name).exists():
                return str(where / name)
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(f"none of {', '.join(names)} is installed: apt-get install mariadb-server")


class MariaDBServer:
    """A MariaDB server in a temporary folder on a loopback port: its own data folder, socket,
    temporary folder and error log, no option file read (``--no-defaults``), the grant tables
    in force. ``admin`` is a user with every privilege and no password, known only from
    127.0.0.1; LOAD_FILE and INTO OUTFILE reach only ``outside`` (``secure_file_priv``), a folder
    the tests watch.

    MariaDB will not run as root; as root, it runs as the ``mysql`` user the Debian package
    creates.
    """

    ADMIN = "sqlchorus"
    ADMIN_PASSWORD = "admin-Pw-3x9q"
    """The administrator's password, given in its URLs (so that an option file or MYSQL_PWD a
    test sets for a read-only user is not used for it)."""

    def __init__(self) -> None:
        self.bin = mariadb_bin()
        if self.bin is None:
            raise RuntimeError("MariaDB's server programs (mariadbd, mariadb-install-db) are not installed: "
                               "apt-get install mariadb-server")
        self.user = "mysql" if os.geteuid() == 0 else None
        if self.user:
            try:
                import pwd

                pwd.getpwnam(self.user)
            except KeyError:
                raise RuntimeError("running as root and there is no mysql user to run MariaDB as") from None
        self.folder = Path(tempfile.mkdtemp(prefix="sqlchorus-mariadb-"))
        self.port = free_port()
        self.data = self.folder / "data"
        self.socket = self.folder / "mysqld.sock"
        self.outside = self.folder / "outside"
        self.outside.mkdir()
        self.tmp = self.folder / "tmp"
        self.tmp.mkdir()
        self.process: subprocess.Popen | None = None
        if self.user:
            for path in (self.folder, self.outside, self.tmp):
                shutil.chown(path, self.user, self.user)

    def _user_args(self) -> list[str]:
        return [f"--user={self.user}"] if self.user else []

    def start(self) -> MariaDBServer:
        require_slow("a MariaDB server (servers.MariaDBServer)")
        install = _mariadb_program(self.bin, "mariadb-install-db", "mysql_install_db")
        subprocess.run([install, "--no-defaults", *self._user_args(), f"--datadir={self.data}",
                        "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"],
                       check=True, capture_output=True, timeout=300)
        self._launch()
        self.admin_sql(f"CREATE USER '{self.ADMIN}'@'127.0.0.1' IDENTIFIED BY '{self.ADMIN_PASSWORD}'",
                       f"GRANT ALL PRIVILEGES ON *.* TO '{self.ADMIN}'@'127.0.0.1' WITH GRANT OPTION")
        return self

    def _launch(self) -> None:
        server = _mariadb_program(self.bin, "mariadbd", "mysqld")
        log = self.folder / "error.log"
        self.process = subprocess.Popen(
            [server, "--no-defaults", *self._user_args(), f"--datadir={self.data}", f"--socket={self.socket}",
             f"--port={self.port}", "--bind-address=127.0.0.1", f"--pid-file={self.folder / 'mysqld.pid'}",
             f"--log-error={log}", "--skip-name-resolve", f"--secure-file-priv={self.outside}",
             f"--tmpdir={self.tmp}", "--innodb-buffer-pool-size=32M", "--innodb-flush-log-at-trx-commit=0",
             "--max-connections=300", "--skip-log-bin"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"MariaDB exited ({self.process.returncode}): "
                                   f"{log.read_text(errors='replace')[-3000:] if log.exists() else ''}")
            try:
                self.root().close()
                return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no MariaDB within {START_TIMEOUT_S:g} s")
            time.sleep(0.2)

    def root(self):
        """A connection as root over the server's socket (root has no password here)."""
        import pymysql

        return pymysql.connect(unix_socket=str(self.socket), user="root", autocommit=True, charset="utf8mb4")

    def admin_sql(self, *statements: str, database: str | None = None) -> list[list[tuple]]:
        """Run ``statements`` as root; each one's rows."""
        conn = self.root()
        try:
            out = []
            with conn.cursor() as cur:
                if database:
                    cur.execute(f"USE `{database}`")
                for statement in statements:
                    cur.execute(statement)
                    out.append(list(cur.fetchall()))
            return out
        finally:
            conn.close()

    def url(self, database: str, user: str = ADMIN, password: str | None = None, scheme: str = "mysql") -> str:
        """The URL of ``database`` for ``user`` (the administrator's with its password; another's
        with ``password`` if given, else none: it then comes from the option file or MYSQL_PWD)."""
        if user == self.ADMIN and password is None:
            password = self.ADMIN_PASSWORD
        secret = f":{password}" if password else ""
        return f"{scheme}://{user}{secret}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database on this server; its name."""
        name = f"t_{uuid.uuid4().hex[:10]}"
        self.admin_sql(f"CREATE DATABASE `{name}`")
        return name

    def reader(self, database: str, user: str, password: str) -> None:
        """A user that may only read ``database``, with a password (the read-only user of docs/engines.md)."""
        escaped = database.replace("_", "\\_")
        self.admin_sql(f"CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY '{password}'",
                       f"GRANT SELECT, SHOW VIEW ON `{escaped}`.* TO '{user}'@'127.0.0.1'")

    def running_statements(self, user: str) -> int:
        """How many of ``user``'s sessions are running a statement now."""
        rows = self.admin_sql(
            "SELECT count(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Query' "
            f"AND USER = '{user}' AND ID <> CONNECTION_ID()")[0]
        return int(rows[0][0])

    def halt(self) -> None:
        """Stop the server as a crash would (SIGKILL), keeping its data for :meth:`restart`."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)

    def restart(self) -> None:
        """Start the server again on the same port and data, after :meth:`halt`."""
        self._launch()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _mysql_type(declared: str) -> str:
    lowered = (declared or "").lower()
    if "int" in lowered:
        return "bigint"
    if any(t in lowered for t in ("real", "float", "double", "numeric", "decimal")):
        return "double"
    return "varchar(255)"


def load_sqlite_into_mariadb(server: MariaDBServer, sqlite_path: Path, database: str) -> None:
    """Copy a SQLite database into the empty database ``database`` of ``server``: names kept as
    they are, primary and foreign keys kept (a referencing column takes its referenced column's
    type), text as ``varchar(255)`` (a key must have a bounded length)."""
    import sqlite3

    src = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        info = {t: src.execute(f'PRAGMA table_info("{t}")').fetchall() for t in tables}
        fks = {t: src.execute(f'PRAGMA foreign_key_list("{t}")').fetchall() for t in tables}
        types = {(t, c[1].lower()): _mysql_type(c[2]) for t in tables for c in info[t]}
        for t in tables:
            for fk in fks[t]:
                types[(t, fk[3].lower())] = types.get((fk[2], fk[4].lower()), types[(t, fk[3].lower())])
        rows = {t: src.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables}
    finally:
        src.close()
    conn = server.root()
    try:
        with conn.cursor() as cur:
            cur.execute(f"USE `{database}`")
            cur.execute("SET SESSION foreign_key_checks = 0")
            for t in tables:
                cols = [f"`{c[1]}` {types[(t, c[1].lower())]}" for c in info[t]]
                pk = [f"`{c[1]}`" for c in sorted(info[t], key=lambda c: c[5]) if c[5]]
                if pk:
                    cols.append(f"PRIMARY KEY ({', '.join(pk)})")
                for fk in fks[t]:
                    cols.append(f"FOREIGN KEY (`{fk[3]}`) REFERENCES `{fk[2]}` (`{fk[4]}`)")
                cur.execute(f"CREATE TABLE `{t}` ({', '.join(cols)}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
            for t in tables:
                names = [c[1] for c in info[t]]
                if rows[t]:
                    cur.executemany(f"INSERT INTO `{t}` ({', '.join(f'`{n}`' for n in names)}) VALUES "
                                    f"({', '.join(['%s'] * len(names))})", rows[t])
            cur.execute("SET SESSION foreign_key_checks = 1")
    finally:
        conn.close()


def mariadb_of_a_test() -> Iterator[MariaDBServer]:
    """A MariaDB server of the test's own, for a fixture to yield from and stop at its end.
    Without MariaDB's server programs (or PyMySQL) the test skips, unless the run requires them
    (SQLCHORUS_REQUIRE_MARIADB), and then it fails. Only a test marked slow may have one."""
    require_slow("a MariaDB server (servers.mariadb_of_a_test)")
    missing = None
    if mariadb_bin() is None:
        missing = "MariaDB's server programs (mariadbd) are not installed: apt-get install mariadb-server"
    else:
        try:
            import pymysql  # noqa: F401
        except ImportError:
            missing = "PyMySQL is not installed: pip install 'sqlchorus[mysql]'"
    if missing:
        if os.environ.get("SQLCHORUS_REQUIRE_MARIADB"):
            pytest.fail(f"{missing}; this run requires it.")
        pytest.skip(missing)
    server = MariaDBServer().start()
    try:  # stopped however the test ends, even when it drives this generator by hand and fails
        yield server
    finally:
        server.stop()
