"""Runs and checkpoints in PostgreSQL: a server the test starts itself (initdb in a temporary
folder, a loopback port), shared by the library and by two `sqlchorus serve` processes."""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import psycopg
import pytest

from servers import PostgresServer, free_port, postgres_bin, running, server_env
from sqlchorus import Session
from sqlchorus.config.settings import Settings
from sqlchorus.core.checkpoints import CheckpointFileError
from sqlchorus.core.checkpoints_postgres import open_checkpoints
from sqlchorus.debugger import Debugger
from sqlchorus.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


@pytest.fixture(scope="module")
def postgres():
    if postgres_bin() is None:
        if os.environ.get("SQLCHORUS_REQUIRE_POSTGRES"):
            pytest.fail("PostgreSQL's server programs are not installed, and this run requires them.")
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed: apt-get install postgresql")
    server = PostgresServer().start()
    yield server
    server.stop()


def test_a_run_kept_in_postgresql_is_opened_stepped_and_replayed(postgres, tmp_path):
    url = postgres.new_database()
    settings = Settings(checkpoints=url, trace_dir=str(tmp_path / "traces"), cache=False)
    with Session(settings, model=oracle_model(GOLD.get)) as session:
        result = session.ask(QUESTION)
        assert result.rows == [[62]] and result.checkpoint_path.startswith("postgresql://")
        debugger = Debugger.open(result.run_id, session=session)
        history = debugger.history()
        assert history[0]["source"] == "input" and history[-1]["next"] == []
        assert debugger.state("answer")["rows"] == [[62]]
        replayed, served, called = debugger.replay()
        assert replayed.rows == [[62]] and served >= 3 and called == 0
        everything = debugger.history()  # the replay's steps fork the run's thread
    with psycopg.connect(url) as conn:
        kept = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = %s", (result.run_id,)).fetchone()[0]
        calls = conn.execute("SELECT COUNT(*) FROM sqlchorus_calls WHERE thread_id = %s", (result.run_id,)).fetchone()[0]
    assert kept == len(everything) > len(history)
    assert calls == len(result.usage) + len(replayed.usage)  # the replay keeps its calls too


def test_an_unreachable_database_is_one_clear_error(postgres):
    with pytest.raises(CheckpointFileError, match=r"Cannot reach the checkpoint database postgresql://sqlchorus:\*\*\*@127.0.0.1:\d+/none: .*refused"):
        open_checkpoints(f"postgresql://sqlchorus:pw@127.0.0.1:{free_port()}/none")
    with pytest.raises(CheckpointFileError) as raised:
        open_checkpoints(f"postgresql://sqlchorus:pw@127.0.0.1:{free_port()}/none")
    assert "pw" not in str(raised.value)


def _serve(folder, url):
    port = free_port()
    folder.mkdir()
    args = ["serve", "--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--checkpoints", url]
    base = f"http://127.0.0.1:{port}"
    return base, running(args, folder, server_env(folder), base + "/v1/health")


def _poll(base, run_id, until, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = httpx.get(f"{base}/v1/runs/{run_id}").json()
        if record.get("status") in until:
            return record
        time.sleep(0.1)
    raise AssertionError(f"{run_id} never reached {until}: {record}")


@pytest.mark.slow
def test_two_servers_share_runs_read_cancel_and_resume_across_them(postgres, tmp_path):
    url = postgres.new_database()
    base_a, server_a = _serve(tmp_path / "a", url)
    base_b, server_b = _serve(tmp_path / "b", url)
    with server_a, server_b:
        # Started on A, read and cancelled on B.
        run_id = httpx.post(f"{base_a}/v1/runs", json={"question": "[slow] " + QUESTION}).json()["run_id"]
        assert _poll(base_b, run_id, {"running"})["question"] == "[slow] " + QUESTION
        time.sleep(0.5)
        cancel = httpx.delete(f"{base_b}/v1/runs/{run_id}")
        assert cancel.status_code == 202 and cancel.json()["status"] == "cancelling"
        assert _poll(base_a, run_id, {"cancelled", "done", "failed"})["status"] == "cancelled"
        assert _poll(base_b, run_id, {"cancelled"})["status"] == "cancelled"
        # Resumed on B, from the checkpoints A wrote; read on A.
        resumed = httpx.post(f"{base_b}/v1/runs/{run_id}/resume").json()["run_id"]
        done = _poll(base_a, resumed, {"done", "failed", "cancelled"})
        assert done["status"] == "done" and done["result"]["rows"] == [[62]] and done["parent"] == run_id
        # A run's trace is read from either server (B's file, kept in the database for A).
        trace = httpx.get(f"{base_a}/v1/runs/{resumed}/trace")
        assert trace.status_code == 200
        assert {json.loads(line)["resource"]["attributes"]["sqlchorus.run_id"] for line in trace.text.splitlines()} == {resumed}
        history = httpx.get(f"{base_a}/v1/runs/{run_id}/history").json()["checkpoints"]
        assert history[-1]["next"] == []  # the thread went on to its end on B

        # Many at once, half to each server: every run answered, kept once, readable on both.
        questions = list(GOLD)[:10]

        async def main():
            async with httpx.AsyncClient(timeout=300) as client:
                return await asyncio.gather(*[
                    client.post(f"{(base_a, base_b)[i % 2]}/v1/ask", json={"question": questions[i % len(questions)]})
                    for i in range(30)])

        answers = [r.json() for r in asyncio.run(main())]
        assert all(a["sql"] == GOLD[a["question"]] for a in answers), answers
        for i, answer in enumerate(answers):
            other = (base_b, base_a)[i % 2]
            assert httpx.get(f"{other}/v1/runs/{answer['run_id']}").json()["result"]["rows"] == answer["rows"]
    with psycopg.connect(url) as conn:
        statuses = dict(conn.execute("SELECT thread_id, status FROM sqlchorus_status").fetchall())
    assert all(statuses[a["run_id"]] == "done" for a in answers)


def test_a_run_whose_server_stopped_is_read_as_failed_and_can_be_resumed(tmp_path):
    from sqlchorus.core.checkpoints import RunCheckpoints
    from sqlchorus.service import RunService

    settings = Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "cp.sqlite"), cache=False)
    service = RunService(settings=settings, model=oracle_model(GOLD.get))
    try:
        live = service.start(QUESTION)
        while not live.done.is_set():
            live.done.wait(0.1)
        store = RunCheckpoints(tmp_path / "cp.sqlite")
        # Another server's run, left "running" an hour ago when that server died.
        store.set_status("20260101T000000-deadbeef", "queued", owner="gone", question=QUESTION, database="demo",
                         kind="resume", parent=live.run_id)
        store._write("UPDATE sqlchorus_status SET status = 'running', updated = '2026-01-01T00:00:00+00:00' "
                     "WHERE thread_id = '20260101T000000-deadbeef'")
        record = service.get("20260101T000000-deadbeef")
        assert record["status"] == "failed" and record["result"]["kind"] == "stale"
        resumed = service.resume("20260101T000000-deadbeef")
        while not resumed.done.is_set():
            resumed.done.wait(0.1)
        assert resumed.status == "done" and resumed.result["rows"] == [[62]]
        store.close()
    finally:
        service.close()


def test_closing_the_service_ends_runs_that_never_started(tmp_path):
    from sqlchorus.service import RunService
    from sqlchorus.testing import ScriptedChatModel

    def slow(messages):
        time.sleep(0.5)
        return "no"

    settings = Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "cp.sqlite"), cache=False)
    service = RunService(settings=settings, model=ScriptedChatModel(slow), workers=1)
    runs = [service.start(QUESTION) for _ in range(3)]
    service.close(timeout_s=30)
    assert all(r.done.is_set() for r in runs)
    assert {r.status for r in runs[1:]} == {"cancelled"}
    assert runs[-1].events[-1] == {"event": "done", "run_id": runs[-1].run_id, "status": "cancelled"}
