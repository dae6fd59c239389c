"""A `sqlchorus serve` process asked to stop (SIGTERM) while its PostgreSQL store is away: the run
it finished meanwhile is not lost. Its end (answer, newest checkpoint, model calls, trace) is kept
in a file of the server's folder, and the server started again over that folder writes it to the
store once the store is back, where another server reads all of it."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import psycopg
import pytest

from conftest import WAIT_S, wait_for
from servers import (
    Gate,
    free_port,
    halt_postgres,
    http,
    postgres_of_a_test,
    restart_postgres,
    running,
    server_env,
)

QUESTION = "How many customers do we have?"
FINISHED = {"done", "failed", "cancelled"}


@pytest.fixture
def postgres():
    yield from postgres_of_a_test()


def _serve(folder: Path, checkpoints: str, gates: Path, **env: str):
    """A server over the demo database whose traces (and kept runs) are in ``folder``."""
    folder.mkdir(exist_ok=True)
    port = free_port()
    args = ["serve", "--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--checkpoints", checkpoints]
    base = f"http://127.0.0.1:{port}"
    return base, running(args, folder, server_env(folder, gates, **env), base + "/v1/health")


def _poll(base: str, run_id: str, until: set[str]) -> dict:
    def reached() -> dict | None:
        response = http.get(f"{base}/v1/runs/{run_id}")
        assert response.status_code in (200, 503), response.text  # never a fault
        record = response.json() if response.status_code == 200 else None
        return record if record and record["status"] in until else None

    return wait_for(reached, f"{run_id} to reach {sorted(until)} on {base}")


def _log(folder: Path) -> str:
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(folder.glob("server-*.log")))


@pytest.mark.slow
def test_a_server_stopped_while_its_store_is_away_keeps_its_runs_end_for_the_store(postgres, tmp_path):
    url = postgres.new_database()
    gates = tmp_path / "gates"
    folder_a = tmp_path / "a"
    base_a, server_a = _serve(folder_a, url, gates, SQLCHORUS_RUN_HEARTBEAT_S="1")
    base_b, server_b = _serve(tmp_path / "b", url, gates, SQLCHORUS_RUN_HEARTBEAT_S="1")
    with server_b, Gate(gates) as gate:
        with server_a as process_a:
            run_id = http.post(f"{base_a}/v1/runs", json={"question": gate.mark + QUESTION}).json()["run_id"]
            gate.wait_called()
            assert _poll(base_b, run_id, {"running"})["status"] == "running"

            halt_postgres(postgres)
            gate.open()  # the run goes on and ends while the store is away
            ended = _poll(base_a, run_id, FINISHED)
            assert ended["status"] == "done" and ended["result"]["rows"] == [[62]], ended
            assert wait_for(lambda: http.get(f"{base_a}/v1/health").json()["unsaved_runs"] == 1,
                            "A to hold the run's end for the store")

            process_a.send_signal(signal.SIGTERM)
            try:
                process_a.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                pytest.fail("the server did not stop by itself when asked to")
            # It stopped by itself, after keeping the run's end and saying where, with the exit
            # code of a process ended by SIGTERM.
            assert process_a.returncode == 128 + signal.SIGTERM, (process_a.returncode, _log(folder_a))
        kept = folder_a / "traces" / "unsaved" / f"{run_id}.json"
        assert kept.is_file(), _log(folder_a)
        assert run_id in _log(folder_a) and "kept in" in _log(folder_a)
        record = json.loads(kept.read_text(encoding="utf-8"))
        assert record["end"]["status"] == "done" and record["end"]["trace"] and record["kept"]["checkpoints"]
        assert url not in kept.read_text(encoding="utf-8")  # the file names its store by a digest only

        restart_postgres(postgres)
        assert wait_for(lambda: http.get(f"{base_b}/v1/health").status_code == 200, "B to find the store back")
        # A started again, over the same folder: it writes the kept end to the store.
        base_c, server_c = _serve(folder_a, url, gates, SQLCHORUS_RUN_HEARTBEAT_S="1")
        with server_c:
            seen = _poll(base_b, run_id, {"done"})
            assert seen["result"]["rows"] == [[62]] and seen["result"]["sql"] == ended["result"]["sql"], seen
            wait_for(lambda: not kept.exists(), "the kept file to be removed once stored")
            assert f"the end of run {run_id}" in _log(folder_a)

            # B reads all of it from the store: the trace, and the run's newest checkpoint, the
            # run's end, from which it can go on.
            trace = http.get(f"{base_b}/v1/runs/{run_id}/trace")
            assert trace.status_code == 200, trace.text
            spans = [json.loads(line) for line in trace.text.splitlines() if line.strip()]
            assert any(s["name"] == "serve" and s.get("parent_id") is None for s in spans), spans[:3]
            history = http.get(f"{base_b}/v1/runs/{run_id}/history")
            assert history.status_code == 200, history.text
            checkpoints = history.json()["checkpoints"]
            newest = max(checkpoints, key=lambda c: c["step"])
            assert newest["next"] == [], checkpoints  # the checkpoint the run ended at
            with psycopg.connect(url) as conn:
                status, calls = conn.execute(
                    "SELECT s.status, (SELECT count(*) FROM sqlchorus_calls c WHERE c.thread_id = s.thread_id) "
                    "FROM sqlchorus_status s WHERE s.thread_id = %s", (run_id,)).fetchone()
            assert status == "done" and calls >= 3, (status, calls)  # the model calls made while it was away
            resumed = http.post(f"{base_b}/v1/runs/{run_id}/resume")
            assert resumed.status_code == 202, resumed.text
            again = _poll(base_b, resumed.json()["run_id"], FINISHED)
            assert again["status"] == "done" and again["result"]["rows"] == [[62]], again


@pytest.mark.parametrize("command,ready", [
    (["ui"], "/api/runs"),
    (["mcp", "--transport", "http"], None),
    (["serve"], "/v1/health"),
])
@pytest.mark.slow
def test_every_server_asked_to_stop_closes_its_run_service_first(command, ready, tmp_path):
    """SIGTERM reaches the command's own ``finally``, which closes the run service (saving what
    the store has not taken): the process ends with SIGTERM's exit code, 143, rather than being
    ended by the signal itself (-15) before that code runs."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [*command, "--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(tmp_path / "traces")]
    ready_url = base + ready if ready else base + "/mcp"
    with running(args, tmp_path, server_env(tmp_path), ready_url) as process:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail("the server did not stop by itself when asked to")
        assert process.returncode == 128 + signal.SIGTERM, (process.returncode, _log(tmp_path))
        assert "Traceback" not in _log(tmp_path)
