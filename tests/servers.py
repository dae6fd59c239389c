"""Servers for tests: `sqlchorus serve` and `sqlchorus mcp` started for real on loopback, gates
that hold their model calls until a test lets them go, and a PostgreSQL server of the test's own
(initdb in a temporary folder, stopped at the end)."""

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

from conftest import WAIT_S, wait_for

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
    """Run ``sqlchorus ARGS`` until the block ends; ready once ``ready_url`` answers."""
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
    (SQLCHORUS_REQUIRE_POSTGRES), and then it fails."""
    if postgres_bin() is None:
        if os.environ.get("SQLCHORUS_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL's server programs are not installed, and this run requires them.")
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed: apt-get install postgresql")
    server = PostgresServer().start()
    try:  # stopped however the test ends, even when it drives this generator by hand and fails
        yield server
    finally:
        server.stop()
