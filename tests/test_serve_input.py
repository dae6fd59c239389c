"""`sqlchorus serve` and what clients send it: control characters refused before any store is
asked (SQLite, PostgreSQL, none), run ids matched exactly, no store location in what a client is
told, a 405's ``Allow``, JSON for a request uvicorn cannot parse, and an OpenAPI document that
lists each endpoint's errors."""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from conftest import WAIT_S, wait_for
from servers import free_port, halt_postgres, http, postgres_of_a_test, running, server_env

pytestmark = pytest.mark.slow  # every test here starts `sqlchorus serve`

QUESTION = "How many customers do we have?"
FINISHED = {"done", "failed", "cancelled"}
CONTROLS = ["\x00", "\x1b[31m", "\x07", "\x7f", "\x85", "\x0b"]
"""A NUL byte, an escape sequence, a bell, DEL, a C1 control (NEL), a vertical tab."""


def _serve(folder: Path, *store: str):
    """A server over the demo database whose store is ``store`` (``--checkpoints X`` or
    ``--no-checkpoints``); its base URL and the context that runs it."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = ["serve", "--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--max-body-bytes", "4096", *store]
    base = f"http://127.0.0.1:{port}"
    return base, running(args, folder, server_env(folder), base + "/v1/health")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve-input")
    base, context = _serve(folder, "--checkpoints", str(folder / "checkpoints.sqlite"))
    with context:
        yield base, folder


@pytest.fixture
def postgres():
    yield from postgres_of_a_test()


def _error(response: httpx.Response, status: int, kind: str) -> str:
    """The error's message, once the response is that error, as JSON in the server's one shape."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = response.json()["error"]
    assert error["kind"] == kind, error
    assert error["message"]
    return error["message"]


def _poll(base: str, run_id: str) -> dict:
    def ended() -> dict | None:
        record = http.get(f"{base}/v1/runs/{run_id}").json()
        return record if record["status"] in FINISHED else None

    return wait_for(ended, f"run {run_id} to end")


def _refuses_control_characters(base: str, stored_runs) -> None:
    """Every way of asking refuses a question or hint with a control character (422, before the
    store is asked: ``stored_runs()`` does not change), and the store is not marked down: health
    says ok and the next run is taken at once. Tab, newline and carriage return are taken."""
    before = stored_runs()
    for control in CONTROLS:
        for body in ({"question": f"How many{control} customers do we have?"},
                     {"question": QUESTION, "evidence": f"customers{control} are people"}):
            for path in ("/v1/ask", "/v1/ask/stream", "/v1/runs"):
                message = _error(http.post(base + path, json=body), 422, "invalid_request")
                assert "control character" in message and f"U+{ord(control[0]):04X}" in message, message
                assert ("hint" if "evidence" in body else "question") in message
    assert stored_runs() == before
    health = http.get(f"{base}/v1/health")
    assert health.status_code == 200 and health.json()["status"] == "ok", health.text
    started = http.post(f"{base}/v1/runs", json={"question": QUESTION})  # no 503: the store was never down
    assert started.status_code == 202, started.text
    assert _poll(base, started.json()["run_id"])["status"] == "done"
    spaced = http.post(f"{base}/v1/ask", json={"question": QUESTION, "evidence": "one\tper\r\nrow\n"})
    assert spaced.status_code == 200 and spaced.json()["rows"] == [[62]], spaced.text


def _sqlite_runs(path: Path):
    def count() -> int:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT count(*) FROM sqlchorus_status").fetchone()[0]
    return count


def _unknown_everywhere(base: str, run_id: str) -> None:
    """Every endpoint of a run answers 404 unknown_run for ``run_id``."""
    for method, path in (("GET", ""), ("POST", "/cancel"), ("POST", "/resume"), ("GET", "/events"),
                         ("GET", "/trace"), ("GET", "/history")):
        response = httpx.request(method, f"{base}/v1/runs/{run_id}{path}", timeout=WAIT_S)
        _error(response, 404, "unknown_run")


def test_a_question_with_a_control_character_is_refused_before_the_sqlite_store(server):
    base, folder = server
    _refuses_control_characters(base, _sqlite_runs(folder / "checkpoints.sqlite"))


def test_a_question_with_a_control_character_is_refused_without_a_store(tmp_path):
    base, context = _serve(tmp_path, "--no-checkpoints")
    with context:
        _refuses_control_characters(base, lambda: 0)
        # Without a store, an unknown run is still unknown, not a run without checkpoints.
        _unknown_everywhere(base, "0")
        run_id = http.post(f"{base}/v1/ask", json={"question": QUESTION}).json()["run_id"]
        _unknown_everywhere(base, run_id[:-2])
        _error(http.post(f"{base}/v1/runs/{run_id}/resume"), 409, "no_checkpoints")


def test_run_ids_are_matched_exactly(server):
    base, _ = server
    run_id = http.post(f"{base}/v1/ask", json={"question": QUESTION}).json()["run_id"]
    message = _error(http.post(f"{base}/v1/runs/0/resume"), 404, "unknown_run")
    assert "'0'" in message
    # A unique start of the id, or a unique part of it (as the command line takes them), names
    # no run here; nor does an id with a control character, which no store is asked about.
    for near in ("0", run_id[:-1], run_id[:15], run_id[-8:], run_id + "0", run_id.replace("T", "t"), "%00", "x%0Ay",
                 "a" * 500):
        _unknown_everywhere(base, near)
    assert http.get(f"{base}/v1/health").json()["store"] == "ok"
    assert http.get(f"{base}/v1/runs/{run_id}").json()["status"] == "done"
    resumed = http.post(f"{base}/v1/runs/{run_id}/resume")
    assert resumed.status_code == 202, resumed.text
    assert _poll(base, resumed.json()["run_id"])["status"] == "done"


def test_a_405_says_what_is_allowed(server):
    base, _ = server
    for method, path, allowed in (("PUT", "/v1/ask", "POST"), ("PATCH", "/v1/runs/x", "GET"),
                                  ("POST", "/v1/health", "GET"), ("GET", "/v1/runs/x/resume", "POST"),
                                  ("DELETE", "/v1/runs", "POST"), ("GET", "/v1/runs/x/cancel", "POST")):
        response = httpx.request(method, base + path, timeout=WAIT_S)
        message = _error(response, 405, "method_not_allowed")
        assert response.headers["allow"] == allowed, (path, response.headers)
        assert method in message and allowed in message
    # A run is cancelled with POST .../cancel (DELETE did once): the 405 says so.
    message = _error(httpx.delete(f"{base}/v1/runs/x", timeout=WAIT_S), 405, "method_not_allowed")
    assert "POST /v1/runs/x/cancel" in message, message


def _raw(base: str, head: str, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Send a request as bytes (however malformed); its status, headers and body."""
    address = urlsplit(base)
    with socket.create_connection((address.hostname, address.port), timeout=WAIT_S) as conn:
        conn.sendall(head.replace("\n", "\r\n").encode("latin-1") + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < _length(data):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, rest


def _length(data: bytes) -> int:
    for line in data.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@pytest.mark.parametrize("length", ["abc", "-1", "1e9", "99999999999999999999999999999", "100000", "4097"])
def test_an_absurd_content_length_gets_a_json_error(server, length):
    base, _ = server
    status, headers, body = _raw(base, f"POST /v1/ask HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\n"
                                       f"Content-Length: {length}\nConnection: close\n", b'{"question": "x"}')
    assert 400 <= status < 500 and headers["content-type"].startswith("application/json"), (status, headers, body)
    error = json.loads(body)["error"]
    assert error["kind"] == ("payload_too_large" if length.isdigit() and len(length) < 10 else "invalid_request")
    assert status == (413 if error["kind"] == "payload_too_large" else 400) and error["message"]
    assert http.get(f"{base}/v1/health").status_code == 200


def test_the_openapi_document_lists_each_endpoints_errors(server):
    base, _ = server
    spec = http.get(f"{base}/openapi.json").json()
    asking = {400, 401, 403, 404, 413, 422, 429, 503}
    run = {401, 403, 404, 503}
    expected = {
        ("/v1/ask", "post"): asking | {409, 502},
        ("/v1/ask/stream", "post"): asking,
        ("/v1/runs", "post"): asking,
        ("/v1/runs/{run_id}", "get"): run,
        ("/v1/runs/{run_id}/cancel", "post"): run | {409},
        ("/v1/runs/{run_id}/resume", "post"): run | {409, 413, 429},
        ("/v1/runs/{run_id}/events", "get"): run | {409},
        ("/v1/runs/{run_id}/trace", "get"): run | {409},
        ("/v1/runs/{run_id}/history", "get"): run | {409},
        ("/v1/databases", "get"): {401, 403},
        ("/v1/databases/{database}/schema", "get"): {401, 403, 404},
        ("/v1/health", "get"): {403},
    }
    for (path, method), statuses in expected.items():
        responses = spec["paths"][path][method]["responses"]
        listed = {int(status) for status in responses if int(status) >= 400}
        assert statuses <= listed, (path, method, sorted(listed))
        for status in listed - ({503} if path == "/v1/health" else set()):
            entry = responses[str(status)]
            assert entry["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
            assert "`" in entry["description"], entry  # names its kinds
        for status in {429, 503} & listed - ({503} if path == "/v1/health" else set()):
            assert "Retry-After" in responses[str(status)]["headers"]
    assert "401" not in spec["paths"]["/v1/health"]["get"]["responses"]  # it needs no token
    assert "unknown_run" in spec["paths"]["/v1/runs/{run_id}"]["get"]["responses"]["404"]["description"]
    schemas = spec["components"]["schemas"]
    assert schemas["ErrorBody"]["properties"]["error"] == {"$ref": "#/components/schemas/Error"}
    assert {"kind", "message"} <= set(schemas["Error"]["required"])
    question = schemas["AskRequest"]["properties"]["question"]
    assert question["minLength"] == 1 and question["type"] == "string" and "pattern" in question
    assert "HTTPValidationError" not in json.dumps(spec)  # FastAPI's own 422 body is not this server's
    # What a 200 is, where it is not JSON: each event of a stream, a trace's lines.
    for path, method in (("/v1/ask/stream", "post"), ("/v1/runs/{run_id}/events", "get")):
        events = spec["paths"][path][method]["responses"]["200"]["content"]["text/event-stream"]["itemSchema"]
        assert events["required"] == ["event", "data"] and "answer" in events["properties"]["event"]["enum"]
    trace = spec["paths"]["/v1/runs/{run_id}/trace"]["get"]["responses"]
    assert set(trace["200"]["content"]) == {"application/x-ndjson"}
    assert "trace_not_written" in trace["409"]["description"]
    # The schema says what the server does: an empty question is refused, with its own kind.
    _error(http.post(f"{base}/v1/ask", json={"question": ""}), 422, "empty_question")


@pytest.mark.slow
def test_a_postgresql_store_is_never_marked_down_by_a_request_and_never_named(postgres, tmp_path):
    url = postgres.new_database()
    parts = urlsplit(url)
    secret = [parts.hostname, str(parts.port), parts.username, parts.path.lstrip("/")]
    base, context = _serve(tmp_path, "--checkpoints", url)

    def named(text: str) -> list[str]:
        return [part for part in secret if part in text]

    def stored() -> int:
        import psycopg

        with psycopg.connect(url) as conn:
            return conn.execute("SELECT count(*) FROM sqlchorus_status").fetchone()[0]

    with context:
        _refuses_control_characters(base, stored)
        for near in ("0", "%00", "x%00y"):
            assert not named(_error(http.post(f"{base}/v1/runs/{near}/resume"), 404, "unknown_run"))
            _error(http.get(f"{base}/v1/runs/{near}"), 404, "unknown_run")
        assert http.get(f"{base}/v1/health").json()["store"] == "ok"  # no id was taken for an outage

        halt_postgres(postgres)
        refused = wait_for(lambda: (r := http.post(f"{base}/v1/runs", json={"question": QUESTION})).status_code == 503
                           and r, "the store to be found away")
        message = _error(refused, 503, "store_unavailable")
        assert not named(message), message
        health = wait_for(lambda: (r := http.get(f"{base}/v1/health")).status_code == 503 and r.json(),
                          "health to say degraded")
        assert health["store"] == "unreachable" and health.get("store_error") is not None
        assert not named(json.dumps(health)), health
        assert not named(_error(http.get(f"{base}/v1/runs/20990101T000000-00000000"), 503, "store_unavailable"))
        # The server's log keeps where the store is.
        log = "".join(p.read_text(encoding="utf-8", errors="replace") for p in tmp_path.glob("server-*.log"))
        assert parts.hostname in log and str(parts.port) in log and parts.path.lstrip("/") in log
