"""Servers for tests: `sqlchorus serve` and `sqlchorus mcp` started for real on loopback, and a
PostgreSQL server of the test's own (initdb in a temporary folder, stopped at the end)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

SERVER_FACTORIES = '''
"""Models for servers under test: `python:server_factories:NAME`."""
import time

from sqlchorus.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model, prompt_text

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
MARKS = ("[slow] ", "[fail] ")


def _gold(question):
    for mark in MARKS:
        question = question.replace(mark, "")
    return GOLD.get(question)


def mixed():
    """The oracle; a question marked [fail] makes every call fail, [slow] makes each call take
    0.4 s."""
    inner = oracle_model(_gold, name="mixed").responses

    def respond(messages):
        text = prompt_text(messages)
        if "[fail]" in text:
            raise RuntimeError("the provider is down")
        if "[slow]" in text:
            time.sleep(0.4)
        return inner(messages)

    return ScriptedChatModel(respond, name="mixed")
'''

BIN = Path(sys.executable).parent / "sqlchorus"
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(folder: Path, **extra: str) -> dict[str, str]:
    """An environment whose `python:server_factories:mixed` is the scripted model above."""
    (folder / "server_factories.py").write_text(SERVER_FACTORIES, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "SQLCHORUS_TOKEN"}
    env.update({"PYTHONPATH": str(folder), "NO_COLOR": "1", **extra})
    return env


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
                if httpx.get(ready_url, headers=headers, timeout=2).status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"the server did not start: {log.read()}")
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
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> PostgresServer:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "sqlchorus",
                  "--no-sync", "-E", "UTF8")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off " \
                  "-c max_connections=200 -c full_page_writes=off"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.folder / "log"), "-w", "-t", "60", "start")
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
