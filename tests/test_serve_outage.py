"""Servers that lose nothing and block no one: `sqlchorus serve` processes sharing a PostgreSQL
database the test stops and starts mid-run, a server killed with SIGKILL mid-run, resumes racing,
and a server with as many runs as it takes."""

from __future__ import annotations

import asyncio

import httpx
import psycopg
import pytest

from conftest import wait_for
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
    # A server of the test's own: tests here stop it.
    yield from postgres_of_a_test()


def _serve(folder, checkpoints, gates, *extra, **env):
    port = free_port()
    folder.mkdir()
    args = ["serve", "--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--checkpoints", checkpoints, *extra]
    base = f"http://127.0.0.1:{port}"
    return base, running(args, folder, server_env(folder, gates, **env), base + "/v1/health")


def _record(base, run_id):
    """The run as ``base`` reads it; never a fault (a store that is away is a 503)."""
    response = http.get(f"{base}/v1/runs/{run_id}")
    assert response.status_code in (200, 503), (response.status_code, response.text)
    return response.json() if response.status_code == 200 else None


def _poll(base, run_id, until):
    def reached():
        record = _record(base, run_id)
        return record if record and record["status"] in until else None

    return wait_for(reached, f"{run_id} to reach {sorted(until)} on {base}")


def _health(base, status_code):
    def reached():
        response = http.get(f"{base}/v1/health")
        return response if response.status_code == status_code else None

    return wait_for(reached, f"{base}/v1/health to answer {status_code}").json()


@pytest.mark.slow
def test_a_postgresql_outage_mid_run_loses_no_run_and_blocks_no_one(postgres, tmp_path):
    url = postgres.new_database()
    gates = tmp_path / "gates"
    base_a, server_a = _serve(tmp_path / "a", url, gates, SQLCHORUS_RUN_HEARTBEAT_S="1")
    base_b, server_b = _serve(tmp_path / "b", url, gates, SQLCHORUS_RUN_HEARTBEAT_S="1")
    with server_a, server_b, Gate(gates) as gate:
        run_id = http.post(f"{base_a}/v1/runs", json={"question": gate.mark + QUESTION}).json()["run_id"]
        gate.wait_called()
        assert _poll(base_b, run_id, {"running"})["status"] == "running"

        halt_postgres(postgres)
        for base in (base_a, base_b):
            health = _health(base, 503)
            assert health["status"] == "degraded" and health["store"] == "unreachable", health
            # New runs are refused at once, told when to come back, rather than hanging.
            for path in ("/v1/runs", "/v1/ask"):
                refused = http.post(base + path, json={"question": QUESTION})
                assert refused.status_code == 503, refused.text
                assert refused.json()["error"]["kind"] == "store_unavailable"
                assert int(refused.headers["Retry-After"]) >= 1
            assert http.get(f"{base}/v1/runs/{run_id}").status_code in (200, 503)  # never a fault

        gate.open()  # A's run goes on and ends while the database is away
        ended = _poll(base_a, run_id, FINISHED)
        assert ended["status"] == "done" and ended["result"]["rows"] == [[62]], ended
        assert _health(base_a, 503)["unsaved_runs"] == 1  # its end waits for the store

        restart_postgres(postgres)
        for base in (base_a, base_b):
            health = _health(base, 200)
            assert health["store"] == "ok"
        # A wrote the run's end when the store came back: B reads it, rows and all, and the
        # database holds it.
        seen = _poll(base_b, run_id, {"done"})
        assert seen["result"]["rows"] == [[62]] and seen["result"]["sql"] == ended["result"]["sql"]
        assert wait_for(lambda: http.get(f"{base_a}/v1/health").json()["unsaved_runs"] == 0, "A to store the end")
        with psycopg.connect(url) as conn:
            status, result, trace = conn.execute(
                "SELECT status, result, trace FROM sqlchorus_status WHERE thread_id = %s", (run_id,)).fetchone()
        assert status == "done" and '"rows": [[62]]' in result and trace
        assert http.get(f"{base_b}/v1/runs/{run_id}/trace").status_code == 200
        # Both take runs again; the first request after the outage is answered, not a fault.
        for base in (base_b, base_a):
            answer = http.post(f"{base}/v1/ask", json={"question": QUESTION})
            assert answer.status_code == 200 and answer.json()["rows"] == [[62]], answer.text


@pytest.mark.slow
def test_a_killed_servers_run_is_stale_at_once_and_resumed_by_one_request(postgres, tmp_path):
    url = postgres.new_database()
    gates = tmp_path / "gates"
    # Leases of 6 s: a run whose server lives is never read as stale, on a busy machine too.
    base_a, server_a = _serve(tmp_path / "a", url, gates, SQLCHORUS_RUN_HEARTBEAT_S="2")
    base_b, server_b = _serve(tmp_path / "b", url, gates, SQLCHORUS_RUN_HEARTBEAT_S="2")
    with server_b, Gate(gates) as gate:
        with server_a as process:
            run_id = http.post(f"{base_a}/v1/runs", json={"question": gate.mark + QUESTION}).json()["run_id"]
            gate.wait_called()
            assert _poll(base_b, run_id, {"running"})["status"] == "running"
            process.kill()  # SIGKILL: A ends nothing, renews nothing
            process.wait()
        # A started again, as a new process: the run is not its own.
        base_c, server_c = _serve(tmp_path / "c", url, gates, SQLCHORUS_RUN_HEARTBEAT_S="2")
        with server_c:
            # Its lease runs out three heartbeats on: every server reads it as failed.
            stale = _poll(base_b, run_id, {"failed"})
            assert stale["result"]["kind"] == "stale", stale
            assert _record(base_c, run_id)["status"] == "failed"
            cancelled = http.post(f"{base_c}/v1/runs/{run_id}/cancel")
            assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled", cancelled.text
            assert _record(base_b, run_id)["status"] == "cancelled"

            # Three resumes at once, on two servers: one goes on with the run, the others are told so.
            async def main():
                async with httpx.AsyncClient(timeout=300) as client:
                    return await asyncio.gather(*[client.post(f"{base}/v1/runs/{run_id}/resume")
                                                  for base in (base_b, base_c, base_b)])

            responses = asyncio.run(main())
            codes = sorted(r.status_code for r in responses)
            assert codes == [202, 409, 409], [r.text for r in responses]
            assert {r.json()["error"]["kind"] for r in responses if r.status_code == 409} == {"already_resumed"}
            accepted = next(r for r in responses if r.status_code == 202)
            resumed = accepted.json()["run_id"]
            again = http.post(f"{base_c}/v1/runs/{run_id}/resume")  # while it runs, still refused
            assert again.status_code == 409 and again.json()["error"]["kind"] == "already_resumed"
            gate.open()
            done = _poll(base_c, resumed, FINISHED)
            assert done["status"] == "done" and done["result"]["rows"] == [[62]] and done["parent"] == run_id


@pytest.mark.slow
def test_a_server_with_as_many_runs_as_it_takes_answers_429(tmp_path):
    gates = tmp_path / "gates"
    base, server = _serve(tmp_path / "s", str(tmp_path / "checkpoints.sqlite"), gates, "--workers", "1",
                          SQLCHORUS_MAX_PENDING_RUNS="2")
    with server, Gate(gates) as gate:
        held = [http.post(f"{base}/v1/runs", json={"question": gate.mark + QUESTION}) for _ in range(2)]
        assert [r.status_code for r in held] == [202, 202]
        gate.wait_called()  # one runs, held; the other waits for the one worker
        health = http.get(f"{base}/v1/health").json()
        assert health["running"] + health["queued"] == 2 and health["max_pending"] == 2, health
        for path in ("/v1/runs", "/v1/ask"):
            refused = http.post(base + path, json={"question": QUESTION})
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["kind"] == "queue_full"
            assert int(refused.headers["Retry-After"]) >= 1
        gate.open()
        for response in held:
            assert _poll(base, response.json()["run_id"], FINISHED)["status"] == "done"
        answer = http.post(f"{base}/v1/ask", json={"question": QUESTION})
        assert answer.status_code == 200 and answer.json()["rows"] == [[62]]


@pytest.mark.slow
def test_the_first_requests_after_the_store_goes_away_are_answered_not_held(postgres, tmp_path):
    url = postgres.new_database()
    # A heartbeat far apart: what finds the store away is the request itself, or the keeper's try
    # of it every second, never a lease's renewal.
    base, server = _serve(tmp_path / "s", url, tmp_path / "gates", SQLCHORUS_RUN_HEARTBEAT_S="60")
    with server, httpx.Client(timeout=30) as client:
        assert client.post(f"{base}/v1/ask", json={"question": QUESTION}).status_code == 200
        halt_postgres(postgres)
        # Each is answered (the client's limit is generous: the benchmark measures how soon),
        # with a refusal that says when to come back, not a fault.
        for method, path, body in (("POST", "/v1/runs", {"question": QUESTION}),
                                   ("GET", "/v1/runs/20990101T000000-00000000", None),
                                   ("POST", "/v1/ask", {"question": QUESTION})):
            response = client.request(method, base + path, json=body)
            assert response.status_code == 503, (path, response.text)
            assert response.json()["error"]["kind"] == "store_unavailable"
            assert int(response.headers["Retry-After"]) >= 1
        health = client.get(f"{base}/v1/health")
        assert health.status_code == 503 and health.json()["store"] == "unreachable", health.text
        restart_postgres(postgres)
        _health(base, 200)
        answer = client.post(f"{base}/v1/ask", json={"question": QUESTION})
        assert answer.status_code == 200 and answer.json()["rows"] == [[62]], answer.text
