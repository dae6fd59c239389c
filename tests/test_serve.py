"""`sqlchorus serve`: the REST API started for real on loopback and talked to over HTTP."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest

from conftest import WAIT_S, wait_for
from servers import BIN, Gate, free_port, http, running, server_env
from sqlchorus.core.trace_file import load_spans

pytestmark = pytest.mark.slow  # every test here starts `sqlchorus serve`

QUESTION = "How many customers do we have?"
TOKEN = "s3cret-token-" + "9f2c4e7a1b8d6035" * 3  # 256 bits and more, as a server requires


def _serve(folder: Path, *extra: str, env_extra: dict[str, str] | None = None):
    port = free_port()
    args = ["serve", "--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--checkpoints", str(folder / "checkpoints.sqlite"), *extra]
    base = f"http://127.0.0.1:{port}"
    return base, running(args, folder, server_env(folder, **(env_extra or {})), base + "/v1/health")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    base, context = _serve(folder, "--max-question-chars", "500", "--max-body-bytes", "4096")
    with context:
        yield base, folder


def _events(response: httpx.Response) -> list[dict]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            events.append(json.loads(line[5:].strip()))
    return events


def _poll(base: str, run_id: str, until: set[str]) -> dict:
    """The run's record once its status is one of ``until``."""
    def reached() -> dict | None:
        record = http.get(f"{base}/v1/runs/{run_id}").json()
        return record if record["status"] in until else None

    return wait_for(reached, f"run {run_id} to reach {sorted(until)}")


def test_ask_answers_with_its_sql_rows_cost_and_a_trace_and_history(server):
    base, folder = server
    response = http.post(f"{base}/v1/ask", json={"question": QUESTION})
    assert response.status_code == 200
    answer = response.json()
    assert answer["sql"] == "SELECT COUNT(*) FROM customers"
    assert answer["rows"] == [[62]] and answer["columns"] == ["COUNT(*)"] and answer["error"] is None
    assert answer["database"] == "demo" and answer["cost"]["calls"] >= 3
    assert [c["status"] for c in answer["candidates"]] == ["ok"]
    run_id = answer["run_id"]
    spans = [json.loads(line) for line in http.get(f"{base}/v1/runs/{run_id}/trace").text.splitlines()]
    assert {s["name"] for s in spans} >= {"serve", "node:generate_divide_conquer", "node:select_candidate"}
    assert {s["resource"]["attributes"]["sqlchorus.run_id"] for s in spans} == {run_id}
    history = http.get(f"{base}/v1/runs/{run_id}/history").json()["checkpoints"]
    assert history[0]["source"] == "input" and history[-1]["next"] == []
    assert http.get(f"{base}/v1/runs/{run_id}").json()["status"] == "done"


def test_databases_schema_and_openapi(server):
    base, _ = server
    assert http.get(f"{base}/v1/databases").json()["databases"] == [
        {"id": "demo", "file": "demo.sqlite", "engine": "sqlite", "tables": 7, "columns": 39}]
    schema = http.get(f"{base}/v1/databases/demo/schema").json()
    customers = next(t for t in schema["tables"] if t["name"] == "customers")
    assert customers["rows"] == 62 and customers["columns"][0] == {
        "name": "customer_id", "type": "INTEGER", "primary_key": True, "not_null": False, "description": None}
    missing = http.get(f"{base}/v1/databases/nope/schema")
    assert missing.status_code == 404 and missing.json()["error"]["kind"] == "unknown_database"
    paths = http.get(f"{base}/openapi.json").json()["paths"]
    assert {"/v1/ask", "/v1/ask/stream", "/v1/runs", "/v1/runs/{run_id}", "/v1/databases"} <= set(paths)
    assert "post" in paths["/v1/runs/{run_id}/cancel"]
    # A cancel is not a deletion: the run stays, so DELETE is no method of a run's.
    assert "delete" not in paths["/v1/runs/{run_id}"]
    docs = http.get(f"{base}/docs")
    assert docs.status_code == 200 and "<code>/v1/ask/stream</code>" in docs.text
    assert "http://" not in docs.text and "https://" not in docs.text  # nothing fetched from elsewhere


def test_the_stream_tells_nodes_candidates_and_the_answer_in_order(server):
    base, _ = server
    with httpx.stream("POST", f"{base}/v1/ask/stream", json={"question": QUESTION}, timeout=WAIT_S) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run" and kinds[-2:] == ["answer", "done"]
    nodes = [(e["node"], e["state"]) for e in events if e["event"] == "node"]
    assert nodes.index(("generate_divide_conquer", "started")) < nodes.index(("generate_divide_conquer", "finished"))
    assert nodes.index(("check_candidates", "finished")) < nodes.index(("select_candidate", "started"))
    candidates = [e["candidate"] for e in events if e["event"] == "candidate"]
    assert candidates and candidates[-1]["sql"] == "SELECT COUNT(*) FROM customers"
    assert kinds.index("candidate") < kinds.index("answer")
    assert events[-2]["answer"]["rows"] == [[62]] and events[-1]["status"] == "done"
    assert len({e["run_id"] for e in events}) == 1


def test_a_run_in_the_background_is_read_cancelled_and_resumed(server):
    base, folder = server
    with Gate(folder / "gates") as gate:
        started = http.post(f"{base}/v1/runs", json={"question": gate.mark + QUESTION})
        assert started.status_code == 202
        run_id = started.json()["run_id"]
        gate.wait_called()  # the run is in its first model call, held there until the gate opens
        assert http.get(f"{base}/v1/runs/{run_id}").json()["status"] == "running"
        cancelled = http.post(f"{base}/v1/runs/{run_id}/cancel")
        assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelling"
        assert http.get(f"{base}/v1/runs/{run_id}").json()["status"] == "cancelling"
        refused = http.post(f"{base}/v1/runs/{run_id}/resume")  # not while it is still stopping
        assert refused.status_code == 409 and refused.json()["error"]["kind"] == "run_finished"
        gate.open()  # the call ends; the run stops before its next node
        record = _poll(base, run_id, {"cancelled", "done", "failed"})
    assert record["status"] == "cancelled", record
    kept = http.get(f"{base}/v1/runs/{run_id}/history").json()["checkpoints"]
    # Its checkpoints are kept, up to where it stopped, short of its end.
    assert kept[0]["source"] == "input" and kept[-1]["next"]
    again = http.post(f"{base}/v1/runs/{run_id}/cancel")
    assert again.status_code == 409 and again.json()["error"]["kind"] == "run_finished"
    # Resumed from its newest checkpoint, the run goes on to its answer.
    resumed = http.post(f"{base}/v1/runs/{run_id}/resume")
    assert resumed.status_code == 202
    new_id = resumed.json()["run_id"]
    record = _poll(base, new_id, {"done", "failed", "cancelled"})
    assert record["status"] == "done" and record["parent"] == run_id and record["kind"] == "resume"
    assert record["result"]["sql"] == "SELECT COUNT(*) FROM customers"


def test_bad_requests_get_json_errors_and_the_server_goes_on(server):
    base, _ = server

    def error(response, status, kind):
        assert response.status_code == status, response.text
        assert response.json()["error"]["kind"] == kind
        assert response.json()["error"]["message"]

    post = f"{base}/v1/ask"
    error(http.post(post, content=b"{not json", headers={"content-type": "application/json"}), 400, "invalid_json")
    error(http.post(post, json={"questio": QUESTION}), 422, "invalid_request")
    error(http.post(post, json={"question": "   "}), 422, "empty_question")
    error(http.post(post, json={"question": "why " * 200}), 413, "question_too_long")
    error(http.post(post, json={"question": "x" * 5000}), 413, "payload_too_large")
    chunks = (b'{"question": "' + b"y" * 1000 + b'", ' for _ in range(6))
    error(http.post(post, content=chunks, headers={"content-type": "application/json"}), 413, "payload_too_large")
    error(http.post(post, json={"question": QUESTION, "database": "nope"}), 404, "unknown_database")
    error(http.get(f"{base}/v1/runs/20990101T000000-00000000"), 404, "unknown_run")
    error(http.get(f"{base}/v1/nothing"), 404, "not_found")
    error(http.put(f"{base}/v1/ask", json={}), 405, "method_not_allowed")
    # A lone surrogate is valid JSON but not valid text: it is replaced, not a 500.
    lone = b'{"question": "How many customers \\ud800 do we have?"}'
    assert lone.count(b"\\ud800") == 1
    for path in ("/v1/ask", "/v1/runs"):
        taken = http.post(base + path, content=lone, headers={"content-type": "application/json"})
        assert taken.status_code in (200, 202), taken.text
    assert "\ufffd" in http.post(post, content=lone, headers={"content-type": "application/json"}).json()["question"]
    failed = http.post(post, json={"question": "[fail] " + QUESTION})
    error(failed, 502, "model_failed")
    assert "provider is down" in failed.json()["error"]["message"]
    assert http.post(post, json={"question": QUESTION}).json()["rows"] == [[62]]


def test_a_client_that_leaves_mid_stream_cancels_its_run(server):
    base, folder = server
    with Gate(folder / "gates") as gate:
        with httpx.stream("POST", f"{base}/v1/ask/stream", json={"question": gate.mark + QUESTION},
                          timeout=WAIT_S) as response:
            lines = response.iter_lines()  # held: dropped early, it would close the connection
            first = next(line for line in lines if line.startswith("data:"))
            run_id = json.loads(first[5:])["run_id"]
            gate.wait_called()  # mid-run: in its first model call, held there
        # The client has gone; once the server has told the run to stop, the call may end.
        _poll(base, run_id, {"cancelling"})
        gate.open()
        record = _poll(base, run_id, {"cancelled", "done", "failed"})
    assert record["status"] == "cancelled", record


def test_an_incoming_traceparent_puts_the_run_in_the_callers_trace(server):
    base, folder = server
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    response = http.post(f"{base}/v1/ask", json={"question": QUESTION},
                          headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
    run_id = response.json()["run_id"]
    roots = load_spans(folder / "traces" / f"{run_id}.jsonl")
    spans = [json.loads(line) for line in (folder / "traces" / f"{run_id}.jsonl").read_text().splitlines()]
    assert {s["context"]["trace_id"] for s in spans} == {"0x" + trace_id}
    run_span = next(s for s in spans if s["name"] == "serve")
    assert run_span["parent_id"] == "0x" + parent_id
    assert roots  # the file still reads as one run


def test_fifty_clients_at_once_each_get_their_own_complete_run(server):
    base, folder = server
    questions = [q for q in _demo_questions()][:10]

    async def main():
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:
            return await asyncio.gather(*[
                client.post("/v1/ask", json={"question": questions[i % len(questions)]}) for i in range(50)])

    responses = asyncio.run(main())
    assert [r.status_code for r in responses] == [200] * 50
    answers = [r.json() for r in responses]
    assert len({a["run_id"] for a in answers}) == 50
    gold = {q: sql for q, sql in _demo_gold().items()}
    for answer in answers:
        assert answer["sql"] == gold[answer["question"]], answer
        spans = [json.loads(line) for line in (folder / "traces" / f"{answer['run_id']}.jsonl").read_text().splitlines()]
        assert {s["resource"]["attributes"]["sqlchorus.run_id"] for s in spans} == {answer["run_id"]}
        assert len({s["context"]["trace_id"] for s in spans}) == 1
        names = {s["name"] for s in spans}
        assert {"serve", "node:extract_keywords", "node:check_candidates", "node:select_candidate"} <= names
    with sqlite3.connect(folder / "checkpoints.sqlite") as conn:
        kept = {row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")}
        statuses = dict(conn.execute("SELECT thread_id, status FROM sqlchorus_status"))
    assert {a["run_id"] for a in answers} <= kept
    assert all(statuses[a["run_id"]] == "done" for a in answers)


def _demo_questions() -> list[str]:
    return list(_demo_gold())


def _demo_gold() -> dict[str, str]:
    from sqlchorus.runs.demo import load_demo_questions

    return {q["question"]: q["sql"] for q in load_demo_questions()}


def test_a_token_is_required_when_set_and_to_listen_beyond_loopback(tmp_path):
    refused = subprocess.run([str(BIN), "serve", "--host", "0.0.0.0", "--port", str(free_port())],
                             capture_output=True, text=True, timeout=WAIT_S, env=server_env(tmp_path))
    assert refused.returncode == 2
    assert "SQLCHORUS_TOKEN" in refused.stderr and "Traceback" not in refused.stderr
    base, context = _serve(tmp_path, env_extra={"SQLCHORUS_TOKEN": TOKEN})
    with context:
        assert http.get(f"{base}/v1/health").status_code == 200  # a load balancer's check needs none
        missing = http.get(f"{base}/v1/databases")
        assert missing.status_code == 401 and missing.json()["error"]["kind"] == "unauthorized"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = http.get(f"{base}/v1/databases", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = http.post(f"{base}/v1/ask", json={"question": QUESTION},
                           headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200 and right.json()["rows"] == [[62]]


def test_a_page_elsewhere_cannot_reach_a_server_without_a_token(server):
    base, _ = server
    # DNS rebinding: another name that now points at 127.0.0.1; or a page posting from elsewhere.
    renamed = http.post(f"{base}/v1/runs", json={"question": QUESTION}, headers={"Host": "evil.example"})
    assert renamed.status_code == 403 and renamed.json()["error"]["kind"] == "forbidden_host"
    posted = http.post(f"{base}/v1/runs", json={"question": QUESTION}, headers={"Origin": "http://evil.example"})
    assert posted.status_code == 403
    assert http.get(f"{base}/v1/databases", headers={"Host": "localhost"}).status_code == 200


def test_resume_refuses_a_run_over_a_database_the_server_does_not_serve_and_follows_resumed_runs(server, tmp_path):
    from conftest import spider_db
    from sqlchorus import Session
    from sqlchorus.config.settings import Settings
    from sqlchorus.testing import oracle_model

    base, folder = server
    settings = Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(folder / "checkpoints.sqlite"), cache=False)
    with Session(settings, model=oracle_model(lambda q: "SELECT COUNT(*) FROM singer")) as session:
        elsewhere = session.ask("How many singers are there?", db=spider_db("concert_singer")).run_id
    refused = http.post(f"{base}/v1/runs/{elsewhere}/resume")
    assert refused.status_code == 404 and refused.json()["error"]["kind"] == "unknown_database"
    # A resumed run's history is its thread's; resuming it again goes on from the same thread.
    first = http.post(f"{base}/v1/ask", json={"question": QUESTION}).json()["run_id"]
    resumed = http.post(f"{base}/v1/runs/{first}/resume").json()["run_id"]
    assert _poll(base, resumed, {"done", "failed"})["status"] == "done"
    assert http.get(f"{base}/v1/runs/{resumed}/history").json()["checkpoints"][-1]["next"] == []
    again = http.post(f"{base}/v1/runs/{resumed}/resume").json()["run_id"]
    assert _poll(base, again, {"done", "failed"})["result"]["rows"] == [[62]]


def test_a_damaged_checkpoint_file_is_named_with_how_to_recover_it(tmp_path):
    """Another program overwrote the checkpoint file's pages while no server ran: the runs it held
    cannot be read, and each request for one says so (409 checkpoints_damaged), not a bare 500;
    the server goes on answering. The client is not told where the file is; the server's log
    names it, with how to recover it."""
    base, context = _serve(tmp_path)
    with context:
        run_id = http.post(f"{base}/v1/ask", json={"question": QUESTION}).json()["run_id"]
    store = tmp_path / "checkpoints.sqlite"
    conn = sqlite3.connect(store)
    try:  # everything in the file itself, none of it left in its write-ahead log
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    finally:
        conn.close()
    assert pages > 4
    with open(store, "r+b") as f:  # every page but the first (the schema) overwritten
        f.seek(page)
        f.write(b"\xa5" * page * (pages - 1))
    base, context = _serve(tmp_path)
    with context:
        response = http.get(f"{base}/v1/runs/{run_id}/history")
        assert response.status_code == 409, response.text
        body = response.json()
        assert body["error"]["kind"] == "checkpoints_damaged" and "damaged" in body["error"]["message"]
        assert ".recover" in body["error"]["message"]
        assert str(tmp_path) not in response.text and store.name not in response.text
        assert http.get(f"{base}/v1/databases").status_code == 200
        log = "".join(p.read_text(encoding="utf-8", errors="replace") for p in tmp_path.glob("server-*.log"))
        assert f"sqlite3 {store} .recover" in log
