"""LangGraph Studio: `langgraph dev` serves the graph with its input and output declared, and a run
answers over HTTP on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, WAIT_S, wait_for
from servers import START_TIMEOUT_S, free_port, stop
from sqlchorus.runs.demo import load_demo_questions

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


def test_the_studio_graph_declares_what_it_takes_and_gives(monkeypatch, tmp_path, factories_env):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SQLCHORUS_MODEL", "python:scripted_factories:oracle")
    from sqlchorus.interfaces.studio import graph

    assert list(graph.get_input_jsonschema()["properties"]) == ["question", "database", "evidence"]
    assert graph.get_input_jsonschema()["required"] == ["question"]
    assert set(graph.get_output_jsonschema()["properties"]) == {"answer", "selection", "errors"}
    out = graph.invoke({"question": QUESTION}, {"recursion_limit": 40})
    assert set(out) <= {"answer", "selection", "errors"} and out["answer"]["rows"] == [[62]]


def test_a_run_studio_cannot_make_says_why(monkeypatch, tmp_path, factories_env):
    """A LangGraph server shows a client only a ValueError's message: a refusal reaches Studio as
    one, naming its cause."""
    from langgraph_api.serde import default as server_serialises

    from sqlchorus.runs.integrations import HostedRunError, graph_for
    from sqlchorus.tools.sql.errors import DatabaseOpenError

    monkeypatch.syspath_prepend(str(tmp_path))
    graph = graph_for(model="python:scripted_factories:oracle", hosted_errors=True)
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(HostedRunError) as refused:
        graph.invoke({"question": QUESTION, "database": str(missing)}, {"recursion_limit": 40})
    assert isinstance(refused.value.__cause__, DatabaseOpenError) and refused.value.kind == "database_open"
    shown = server_serialises(refused.value)
    assert shown["message"].startswith("DatabaseOpenError: ") and str(missing) in shown["message"]
    with pytest.raises(HostedRunError, match="EmptyQuestionError"):
        graph.invoke({"question": "   "}, {"recursion_limit": 40})


def _call(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"},
                                     method="POST" if body is not None else "GET")
    with urllib.request.urlopen(request, timeout=WAIT_S) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_langgraph_dev_serves_the_graph_offline(tmp_path, factories_env):
    langgraph = Path(sys.executable).with_name("langgraph")
    if not langgraph.exists():
        pytest.skip("langgraph-cli is not installed (the studio extra)")
    config = tmp_path / "langgraph.json"
    shipped = json.loads((REPO / "langgraph.json").read_text(encoding="utf-8"))
    graph_file = shipped["graphs"]["sqlchorus"].split(":")[0]
    config.write_text(json.dumps({"dependencies": [str(REPO)],
                                  "graphs": {"sqlchorus": f"{REPO / graph_file}:graph"}}), encoding="utf-8")
    port = free_port()
    env = {**factories_env, "SQLCHORUS_MODEL": "python:scripted_factories:oracle", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}
    # Its log goes to a file: a pipe nobody reads would fill and stop the server.
    log_path = tmp_path / "langgraph-dev.log"
    log = log_path.open("w", encoding="utf-8")
    server = subprocess.Popen(
        [str(langgraph), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port),
         "--config", str(config)],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"

    def started() -> bool:
        if server.poll() is not None:
            pytest.fail(f"langgraph dev exited ({server.returncode}): {log_path.read_text()}")
        try:
            return bool(_call(f"{base}/ok").get("ok"))
        except OSError:
            return False

    try:
        wait_for(started, "langgraph dev to start", timeout_s=START_TIMEOUT_S)
        (assistant,) = _call(f"{base}/assistants/search", {})
        schemas = _call(f"{base}/assistants/{assistant['assistant_id']}/schemas")
        assert list(schemas["input_schema"]["properties"]) == ["question", "database", "evidence"]
        assert set(schemas["output_schema"]["properties"]) == {"answer", "selection", "errors"}
        out = _call(f"{base}/runs/wait", {"assistant_id": assistant["assistant_id"], "input": {"question": QUESTION}})
        assert out["answer"]["sql"] == GOLD[QUESTION] and out["answer"]["rows"] == [[62]]
        missing = str(tmp_path / "missing.sqlite")
        refused = _call(f"{base}/runs/wait", {"assistant_id": assistant["assistant_id"],
                                              "input": {"question": QUESTION, "database": missing}})
        assert refused["__error__"]["message"] == f"DatabaseOpenError: No database at {missing}: the file does not exist."
    finally:
        stop(server, timeout_s=20)
        log.close()
