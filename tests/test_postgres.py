"""Runs and checkpoints in PostgreSQL: a server the test starts itself (initdb in a temporary
folder, a loopback port), shared by the library and by two `sqlchorus serve` processes."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest

from conftest import WAIT_S, wait_for
from servers import (
    Gate,
    free_port,
    http,
    postgres_of_a_test,
    running,
    server_env,
)
from sqlchorus import Session
from sqlchorus.config.settings import Settings
from sqlchorus.core.checkpoints import CheckpointFileError
from sqlchorus.core.checkpoints_postgres import open_checkpoints
from sqlchorus.runs.debugger import Debugger
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


@pytest.fixture(scope="module")
def postgres():
    yield from postgres_of_a_test()


@pytest.mark.slow
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


@pytest.mark.slow
def test_an_unreachable_database_is_one_clear_error(postgres):
    with pytest.raises(CheckpointFileError, match=r"Cannot reach the checkpoint database postgresql://sqlchorus:\*\*\*@127.0.0.1:\d+/none: .*refused"):
        open_checkpoints(f"postgresql://sqlchorus:pw@127.0.0.1:{free_port()}/none")
    with pytest.raises(CheckpointFileError) as raised:
        open_checkpoints(f"postgresql://sqlchorus:pw@127.0.0.1:{free_port()}/none")
    assert "pw" not in str(raised.value)


def _serve(folder, url, gates):
    port = free_port()
    folder.mkdir()
    args = ["serve", "--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--checkpoints", url]
    base = f"http://127.0.0.1:{port}"
    return base, running(args, folder, server_env(folder, gates), base + "/v1/health")


def _poll(base, run_id, until):
    def reached():
        record = http.get(f"{base}/v1/runs/{run_id}").json()
        return record if record.get("status") in until else None

    return wait_for(reached, f"{run_id} to reach {sorted(until)} on {base}")


@pytest.mark.slow
def test_two_servers_share_runs_read_cancel_and_resume_across_them(postgres, tmp_path):
    url = postgres.new_database()
    gates = tmp_path / "gates"  # one folder for both servers: a run's calls wait there on either
    base_a, server_a = _serve(tmp_path / "a", url, gates)
    base_b, server_b = _serve(tmp_path / "b", url, gates)
    with server_a, server_b, Gate(gates) as gate:
        # Started on A, read and cancelled on B while A holds it in a model call.
        question = gate.mark + QUESTION
        run_id = http.post(f"{base_a}/v1/runs", json={"question": question}).json()["run_id"]
        gate.wait_called()
        assert _poll(base_b, run_id, {"running"})["question"] == question
        cancel = http.post(f"{base_b}/v1/runs/{run_id}/cancel")
        assert cancel.status_code == 202 and cancel.json()["status"] == "cancelling"
        gate.open()  # A's call ends; before its next node A finds the cancel B left in the store
        assert _poll(base_a, run_id, {"cancelled", "done", "failed"})["status"] == "cancelled"
        assert _poll(base_b, run_id, {"cancelled"})["status"] == "cancelled"
        # Resumed on B, from the checkpoints A wrote; read on A.
        resumed = http.post(f"{base_b}/v1/runs/{run_id}/resume").json()["run_id"]
        done = _poll(base_a, resumed, {"done", "failed", "cancelled"})
        assert done["status"] == "done" and done["result"]["rows"] == [[62]] and done["parent"] == run_id
        # A run's trace is read from either server (B's file, kept in the database for A).
        trace = http.get(f"{base_a}/v1/runs/{resumed}/trace")
        assert trace.status_code == 200
        assert {json.loads(line)["resource"]["attributes"]["sqlchorus.run_id"] for line in trace.text.splitlines()} == {resumed}
        history = http.get(f"{base_a}/v1/runs/{run_id}/history").json()["checkpoints"]
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
            assert http.get(f"{other}/v1/runs/{answer['run_id']}").json()["result"]["rows"] == answer["rows"]
    with psycopg.connect(url) as conn:
        statuses = dict(conn.execute("SELECT thread_id, status FROM sqlchorus_status").fetchall())
    assert all(statuses[a["run_id"]] == "done" for a in answers)


def test_a_run_whose_server_stopped_is_read_as_failed_and_can_be_resumed(tmp_path):
    from sqlchorus.core.checkpoints import RunCheckpoints
    from sqlchorus.runs.service import RunService

    settings = Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "cp.sqlite"), cache=False)
    service = RunService(settings=settings, model=oracle_model(GOLD.get))
    try:
        live = service.start(QUESTION)
        assert live.done.wait(WAIT_S), "the run did not end"
        store = RunCheckpoints(tmp_path / "cp.sqlite")
        # Another server's run, left "running" an hour ago when that server died.
        store.set_status("20260101T000000-deadbeef", "queued", owner="gone", question=QUESTION, database="demo",
                         kind="resume", parent=live.run_id)
        an_hour_ago = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
        store._write("UPDATE sqlchorus_status SET status = 'running', updated = ? "
                     "WHERE thread_id = '20260101T000000-deadbeef'", (an_hour_ago,))
        record = service.get("20260101T000000-deadbeef")
        assert record["status"] == "failed" and record["result"]["kind"] == "stale"
        resumed = service.resume("20260101T000000-deadbeef")
        assert resumed.done.wait(WAIT_S), "the resumed run did not end"
        assert resumed.status == "done" and resumed.result["rows"] == [[62]]
        store.close()
    finally:
        service.close()


def test_closing_the_service_ends_runs_that_never_started(tmp_path):
    from sqlchorus.runs.service import RunService
    from sqlchorus.testing import ScriptedChatModel

    called, release = threading.Event(), threading.Event()

    def held(messages):
        # The first run's calls wait until the test lets them go: with one worker, the other
        # runs are certainly still queued when the service closes.
        called.set()
        release.wait(WAIT_S)
        return "no"

    settings = Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "cp.sqlite"), cache=False)
    service = RunService(settings=settings, model=ScriptedChatModel(held), workers=1)
    runs = [service.start(QUESTION) for _ in range(3)]
    closing = threading.Thread(target=service.close, kwargs={"timeout_s": WAIT_S})
    try:
        assert called.wait(WAIT_S), "the first run made no model call"
        closing.start()
        # Closing ends the queued runs at once, without waiting for the one under way.
        assert all(r.done.wait(WAIT_S) for r in runs[1:]), [r.status for r in runs]
    finally:
        release.set()
        if closing.ident is None:  # the test failed before closing it
            service.close()
    closing.join(WAIT_S)
    assert not closing.is_alive() and all(r.done.is_set() for r in runs)
    assert {r.status for r in runs[1:]} == {"cancelled"}
    assert runs[-1].events[-1] == {"event": "done", "run_id": runs[-1].run_id, "status": "cancelled"}
