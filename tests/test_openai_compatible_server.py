"""The whole graph against a real OpenAI-compatible server: llama.cpp's own, with SmolLM2.

The server (llama.cpp's server engine, from the prebuilt xllamacpp wheel) runs on 127.0.0.1 in
a subprocess for this module's tests, behind an API key, and is always stopped at teardown. The model is a 135M-parameter toy, so the test never asserts what SQL comes out: it
asserts that the run completes, that whatever came back was handled (an answer, a rejected or
fixed candidate, or a reported error), and that the model spans carry the token counts the
server itself reported on the wire. Every model call must have been answered by the server: a
run whose calls all failed proves nothing about the provider.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import sqlchorus
from sqlchorus.config.settings import Settings

pytestmark = pytest.mark.slow

STARTUP_S = 300.0
"""How long the server may take to load the model and answer: seconds on an idle machine, far more
on a loaded one, and waiting costs nothing once it answers."""
KNOWN_STATUSES = {"pending", "ok", "empty", "error", "timeout", "no_sql", "unchecked"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVE = r"""
import sys, xllamacpp
gguf, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
params = xllamacpp.CommonParams()
params.model.path = gguf
params.model_alias = {"smollm2"}
params.hostnames = ["127.0.0.1"]
params.port = port
params.api_keys = [key]
params.n_ctx = 8192
params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 2
params.verbosity = -1
server = xllamacpp.Server(params)
print(server.listening_address, flush=True)
sys.stdin.read()  # serve until the test closes our input
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("xllamacpp", reason="needs the local extra (xllamacpp)")
    from sqlchorus.core.local_model import LocalModelError, find_smollm2

    try:
        gguf = find_smollm2()
    except LocalModelError as e:
        pytest.skip(str(e))
    port = _free_port()
    key = secrets.token_urlsafe(16)
    log = tmp_path_factory.mktemp("server") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(gguf), str(port), key],
            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited with {proc.returncode}:\n{log.read_text(errors='replace')[-2000:]}")
            try:
                request = urllib.request.Request(f"{base}/models", headers={"Authorization": f"Bearer {key}"})
                with urllib.request.urlopen(request, timeout=2) as r:
                    if r.status == 200 and "smollm2" in r.read().decode():
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                said = log.read_text(errors="replace")[-2000:]
                pytest.fail(f"the server did not answer within {STARTUP_S:g} s:\n{said}")
            time.sleep(0.25)  # between polls of the server; the deadline above is what bounds the wait
        yield base, key
    finally:
        proc.stdin.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def wire_usage(monkeypatch, server):
    """The ``usage`` of every chat completion the server sent back, as read off the wire."""
    from sqlchorus.core.models import resolve_model

    base, key = server
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", key)
    # The HTTP client class the provider really uses (the openai SDK's, whichever httpx it is).
    probe = resolve_model(f"openai-compatible:smollm2@{base}")
    owner = next(c for c in type(probe.root_client._client).__mro__ if "send" in vars(c))
    seen: list[dict] = []
    real_send = owner.send

    def send(self, request, *args, **kwargs):
        response = real_send(self, request, *args, **kwargs)
        if str(request.url).endswith("/chat/completions") and response.status_code == 200:
            response.read()
            seen.append(json.loads(response.content)["usage"])
        return response

    monkeypatch.setattr(owner, "send", send)
    return seen


def test_whole_graph_through_the_openai_compatible_provider(server, wire_usage, demo_db, spans, tmp_path):
    base, _ = server
    settings = Settings(
        model=f"openai-compatible:smollm2@{base}", fix_rounds=1, max_tokens=48, cache=False,
        trace_dir=str(tmp_path / "traces"), model_timeout_s=120,
    )
    result = sqlchorus.ask("How many customers do we have?", db=demo_db, settings=settings, exporters=[spans])

    # Completed, and whatever the model said was handled: an answer or a reported reason.
    assert result.ok or (isinstance(result.error, str) and result.error)
    for candidate in result.candidates:
        assert candidate["status"] in KNOWN_STATUSES, candidate
        assert candidate["status"] == "ok" or candidate.get("error") or candidate["status"] == "empty"
    if result.ok:
        assert result.sql and result.columns

    llm = [s for s in spans.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert llm, "no model span"
    # The server answered: every call the run made got its completion in the end (an attempt
    # that failed and was retried keeps its error on its own span), one per answered span.
    assert not [e for e in result.errors if e.get("kind") == "model"], result.errors
    answered = [s for s in llm if not s.attributes.get("sqlchorus.error")]
    assert answered and len(wire_usage) == len(answered)
    from_spans = sorted(
        (s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"]) for s in answered
    )
    from_server = sorted((u["prompt_tokens"], u["completion_tokens"]) for u in wire_usage)
    assert from_spans == from_server
    assert all(i > 0 and 0 < o <= 48 for i, o in from_spans)
    assert all(s.attributes["gen_ai.request.model"] == "smollm2" for s in llm)
    assert result.cost["input_tokens"] == sum(i for i, _ in from_spans)
    assert result.cost["calls"] == len(llm)

    # The trace file holds the same spans, and the CLI's JSON form is well-formed.
    trace = [json.loads(line) for line in open(result.trace_path, encoding="utf-8")]
    assert sum(1 for s in trace if s["attributes"].get("gen_ai.operation.name") == "chat") == len(llm)
    json.dumps(result.to_dict(), default=str)
