"""`sqlchorus serve` when runs' traces cannot be written: a trace folder that cannot be made, and
one on a full disk (a tmpfs filled up, in a mount namespace of the server's own). Answers still
come; `/v1/health` says the traces are failing, and a run's trace endpoint says its trace could
not be written instead of answering 200 with an empty body. Once the folder takes traces again,
both say so."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import wait_for
from servers import BIN, START_TIMEOUT_S, free_port, http, running, server_env, stop

pytestmark = pytest.mark.slow  # every test here starts `sqlchorus serve`

QUESTION = "How many customers do we have?"


def _args(folder: Path, traces: Path, port: int) -> list[str]:
    return ["serve", "--port", str(port), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(traces), "--checkpoints", str(folder / "checkpoints.sqlite")]


def _error(response: httpx.Response, status: int, kind: str) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = response.json()["error"]
    assert error["kind"] == kind, error
    return error["message"]


def _health(base: str, traces: str) -> dict:
    def reached() -> dict | None:
        response = http.get(f"{base}/v1/health")
        assert response.status_code == 200, response.text  # a server whose traces fail still takes runs
        return response.json() if response.json()["traces"] == traces else None

    return wait_for(reached, f"health to say traces {traces}")


def _answered_without_a_trace(base: str, hidden: str) -> str:
    """A question is answered; its trace could not be written, and the server says so on the
    trace endpoint and in health, naming neither where traces go (``hidden``). The run's id."""
    answer = http.post(f"{base}/v1/ask", json={"question": QUESTION})
    assert answer.status_code == 200 and answer.json()["rows"] == [[62]], answer.text
    run_id = answer.json()["run_id"]
    message = _error(http.get(f"{base}/v1/runs/{run_id}/trace"), 409, "trace_not_written")
    assert "could not be written" in message and hidden not in message, message
    health = _health(base, "failing")
    assert health["status"] == "degraded" and health["store"] == "ok", health
    assert health["unwritten_traces"] >= 1 and health["trace_error"], health
    assert hidden not in json.dumps(health), health
    assert hidden not in json.dumps(answer.json()), answer.json()["errors"]
    return run_id


def _answered_with_a_trace(base: str) -> None:
    answer = http.post(f"{base}/v1/ask", json={"question": QUESTION})
    assert answer.status_code == 200 and answer.json()["rows"] == [[62]], answer.text
    trace = http.get(f"{base}/v1/runs/{answer.json()['run_id']}/trace")
    assert trace.status_code == 200 and trace.text.strip(), trace.text
    assert any(json.loads(line)["name"] == "serve" for line in trace.text.splitlines())
    health = _health(base, "ok")
    assert health["status"] == "ok" and "trace_error" not in health, health


def test_a_trace_folder_that_cannot_be_made_is_told_by_health_and_the_trace_endpoint(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the trace folder's parent should be\n", encoding="utf-8")
    traces = blocker / "traces"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running(_args(tmp_path, traces, port), tmp_path, server_env(tmp_path, SQLCHORUS_RUN_HEARTBEAT_S="1"),
                 base + "/v1/health"):
        before = _health(base, "failing")  # found before any run: the folder cannot be made
        assert before["unwritten_traces"] == 0 and str(tmp_path) not in json.dumps(before), before
        run_id = _answered_without_a_trace(base, str(tmp_path))
        assert http.get(f"{base}/v1/runs/{run_id}").json()["status"] == "done"
        # The folder can be made again: the next run has its trace, and health says ok.
        blocker.unlink()
        _answered_with_a_trace(base)
        # The run without one still says so.
        _error(http.get(f"{base}/v1/runs/{run_id}/trace"), 409, "trace_not_written")


def _mounts_allowed(folder: Path) -> bool:
    """Whether this process may mount a tmpfs in a mount namespace of its own (root, or a user
    namespace), as the full-disk test does for its server."""
    if shutil.which("unshare") is None:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    try:
        tried = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs '{folder}'"],
                               capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return tried.returncode == 0


@contextlib.contextmanager
def _on_a_full_disk(folder: Path, traces: Path, port: int) -> Iterator[subprocess.Popen]:
    """A server whose trace folder is a 4 MB tmpfs filled to the last byte, mounted in a mount
    namespace of the server's own (nothing outside it sees the mount)."""
    traces.mkdir(parents=True)
    script = ('mount -t tmpfs -o size=4m tmpfs "$TRACES" && { cat /dev/zero > "$TRACES/filler" 2>/dev/null; '
              'exec "$@"; }')
    env = {**server_env(folder, SQLCHORUS_RUN_HEARTBEAT_S="1"), "TRACES": str(traces)}
    log = open(folder / f"server-{uuid.uuid4().hex[:6]}.log", "w+", encoding="utf-8")
    process = subprocess.Popen(["unshare", "-m", "sh", "-c", script, "sh", str(BIN), *_args(folder, traces, port)],
                               cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # bounded: START_TIMEOUT_S
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the server exited ({process.returncode}): {log.read()}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=10).status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no server within {START_TIMEOUT_S:g} s")
            time.sleep(0.2)
        yield process
    finally:
        stop(process)
        log.close()


def test_a_full_trace_disk_is_told_by_health_and_the_trace_endpoint(tmp_path):
    if not _mounts_allowed(tmp_path / "probe"):
        pytest.skip("this process may not mount a tmpfs in a mount namespace of its own (unshare -m)")
    traces = tmp_path / "traces"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with _on_a_full_disk(tmp_path, traces, port) as process:
        before = _health(base, "failing")  # the folder has no room, before any run fails
        assert "full" in before["trace_error"], before
        run_id = _answered_without_a_trace(base, str(tmp_path))
        # Its trace file was made, and stayed empty: the endpoint does not give that as a trace.
        inside = Path(f"/proc/{process.pid}/root") / traces.relative_to("/")
        assert (inside / f"{run_id}.jsonl").stat().st_size == 0
        # Room again (the filler goes, seen through the server's own view of its mounts).
        (inside / "filler").unlink()
        _answered_with_a_trace(base)
        _error(http.get(f"{base}/v1/runs/{run_id}/trace"), 409, "trace_not_written")
