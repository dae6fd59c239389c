"""One answer format: the same run gives the same JSON through the command line's `--json`, the
REST API, MCP's `ask` and the LangChain tools (each a part of one dict, `answer_json`), and each
run's question is checked once, whichever of them asked it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from mcp import Client

import sqlchorus
from sqlchorus.config import question as question_module
from sqlchorus.config.question import checked_question, is_checked
from sqlchorus.interfaces.cli import cli
from sqlchorus.interfaces.mcp_server import AskOutput, build_server
from sqlchorus.interfaces.rest import create_app
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.runs.integrations import TOOL_ROWS
from sqlchorus.runs.result import LOCAL_FIELDS, TOOL_FIELDS, answer_json, tool_answer
from sqlchorus.runs.service import RunService
from sqlchorus.testing import ScriptedChatModel, oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"
MODEL = "openai:x"
"""The model every interface is given by name; resolving it gives the scripted oracle."""


@pytest.fixture
def oracle(monkeypatch):
    model = oracle_model(GOLD.get)
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    return model


@pytest.fixture
def checks(monkeypatch) -> Counter:
    """How many times a question was checked, by question: every module of sqlchorus that holds
    ``checked_question`` gets a counting one."""
    counted: Counter = Counter()
    real = question_module.checked_question

    def counting(question: Any, evidence: Any, limit: int):
        counted[str(question)] += 1
        return real(question, evidence, limit)

    for name, module in list(sys.modules.items()):
        if name.startswith("sqlchorus") and getattr(module, "checked_question", None) is real:
            monkeypatch.setattr(module, "checked_question", counting)
    return counted


def _settings(tmp_path, name: str) -> sqlchorus.Settings:
    folder = tmp_path / name
    return sqlchorus.Settings(model=MODEL, trace_dir=str(folder / "traces"),
                              checkpoints=str(folder / "checkpoints.sqlite"), cache=False)


VOLATILE = ("run_id", "call", "seconds", "latency_ms")


def _steady(value: Any) -> Any:
    """``value`` without what differs between two runs of one question (ids, times)."""
    if isinstance(value, dict):
        return {k: "…" if k in VOLATILE or k.endswith("_seconds") else _steady(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def _cli(tmp_path, demo_db) -> dict:
    settings = _settings(tmp_path, "cli")
    out = CliRunner().invoke(cli, ["ask", QUESTION, "--db", str(demo_db), "--model", MODEL, "--json", "--no-cache",
                                   "--trace-dir", settings.trace_folder, "--checkpoints", str(settings.checkpoint_file)])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def _served(tmp_path) -> tuple[dict, dict]:
    """The answer of POST /v1/ask and the structured output of MCP's ask, from one service."""
    service = RunService(settings=_settings(tmp_path, "serve"))
    try:
        rest = TestClient(create_app(service), base_url="http://127.0.0.1").post("/v1/ask", json={"question": QUESTION})
        assert rest.status_code == 200, rest.text

        async def mcp_ask():
            async with Client(build_server(service)) as client:
                return await client.call_tool("ask", {"question": QUESTION})

        called = asyncio.run(mcp_ask())
        assert not called.is_error, called.content
        return rest.json(), called.structured_content
    finally:
        service.close()


def _tools(tmp_path, demo_db) -> tuple[dict, dict]:
    """What ``as_tool`` and the toolkit's ``ask_database`` return."""
    tool = sqlchorus.as_tool(demo_db, settings=_settings(tmp_path, "tool"))
    (asking,) = [t for t in sqlchorus.as_tools(demo_db, settings=_settings(tmp_path, "toolkit"))
                 if t.name == "ask_database"]
    return tool.invoke({"question": QUESTION}), asking.invoke({"question": QUESTION})


def test_one_run_gives_one_json_through_every_interface(oracle, tmp_path, demo_db):
    printed = _cli(tmp_path, demo_db)
    rest, mcp = _served(tmp_path)
    tool, toolkit = _tools(tmp_path, demo_db)

    assert printed["ok"] is True and printed["sql"] == GOLD[QUESTION] and printed["rows"] == [[62]]
    assert printed["database"] == rest["database"] == "demo"
    # The REST API's answer is the command line's, without the files it names on the server.
    assert set(printed) == set(rest) | set(LOCAL_FIELDS) and not set(rest) & set(LOCAL_FIELDS)
    assert _steady({k: v for k, v in printed.items() if k not in LOCAL_FIELDS}) == _steady(rest)
    # MCP and the tools give the tool's fields of the same answer.
    assert set(AskOutput.model_fields) == set(TOOL_FIELDS)
    brief = _steady(tool_answer(printed, TOOL_ROWS))
    assert _steady(mcp) == _steady(tool) == _steady(toolkit) == brief
    assert all(set(part) == set(TOOL_FIELDS) for part in (mcp, tool, toolkit))
    # Each run's own id is in its answer.
    assert len({printed["run_id"], rest["run_id"], mcp["run_id"], tool["run_id"], toolkit["run_id"]}) == 5


def test_a_run_checks_its_question_once_whichever_interface_asks(oracle, checks, tmp_path, demo_db):
    _cli(tmp_path, demo_db)
    assert checks == {QUESTION: 1}
    checks.clear()
    _served(tmp_path)
    assert checks == {QUESTION: 2}  # two runs: POST /v1/ask and MCP's ask
    checks.clear()
    _tools(tmp_path, demo_db)
    assert checks == {QUESTION: 2}  # two runs: as_tool's and the toolkit's
    checks.clear()
    assert sqlchorus.ask(QUESTION, demo_db, settings=_settings(tmp_path, "ask")).ok
    assert checks == {QUESTION: 1}


def test_a_question_checked_against_a_higher_limit_is_checked_again():
    question, evidence = checked_question("How many?", "", 100)
    assert is_checked(question, evidence, 100) and is_checked(question, evidence, 1000)
    assert not is_checked(question, evidence, 50)
    assert not is_checked("How many?", "", 100)  # text no check gave
    assert type(str(question)) is str


def test_the_answer_json_is_json_and_the_tools_part_cuts_rows(demo_db):
    many = sqlchorus.ask("List every customer", demo_db, ScriptedChatModel(lambda m: "SELECT * FROM customers"),
                         settings=sqlchorus.Settings(trace_dir=None, preset="tiny"))
    answer = answer_json(many)
    assert json.loads(json.dumps(answer)) == answer and answer == many.to_dict()
    brief = tool_answer(answer, 5)
    assert len(brief["rows"]) == 5 and brief["truncated"] is True and answer["truncated"] is False
    assert brief["rows"] == answer["rows"][:5]
