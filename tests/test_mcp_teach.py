"""`sqlchorus mcp`'s `teach` and `list_examples` tools, called with the SDK's own client over
streamable HTTP on loopback, with a token: an entry taught is kept, listed and shown to a later
run; a refusal is a tool error in one line."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import WAIT_S
from servers import TOKEN, free_port, http, running, server_env
from teach_servers import DB, LIKE_TAUGHT, TAUGHT_QUESTION, TAUGHT_SQL, kept, sha, teach_folder

HEADERS = {"Authorization": f"Bearer {TOKEN}"}
pytestmark = pytest.mark.slow  # each test talks to a server of its own process


async def _session(url: str, calls) -> dict:
    """What ``calls(client)`` gives, with an SDK client that carries the token."""
    async with httpx.AsyncClient(headers=HEADERS, timeout=WAIT_S) as web:
        async with Client(streamable_http_client(url, http_client=web)) as client:
            return await calls(client)


async def _exercise(client: Client) -> dict:
    """Every teaching call once, in order; what came back."""
    seen: dict = {"tools": {t.name: t for t in (await client.list_tools()).tools}}
    seen["taught"] = await client.call_tool("teach", {"database": DB, "question": TAUGHT_QUESTION, "sql": TAUGHT_SQL})
    seen["again"] = await client.call_tool("teach", {"question": TAUGHT_QUESTION.upper(), "sql": TAUGHT_SQL})
    seen["dropped"] = await client.call_tool("teach", {"question": "Remove every singer", "sql": "DROP TABLE singer"})
    seen["unknown_db"] = await client.call_tool("teach", {"database": "nope", "question": "Who sings?",
                                                          "sql": "SELECT Name FROM singer"})
    seen["both"] = await client.call_tool("teach", {"question": "Who sings?", "term": "singer", "meaning": "x"})
    seen["term"] = await client.call_tool("teach", {"term": "veteran singer", "meaning": "a singer older than 40",
                                                    "sql": "Age > 40"})
    seen["listed"] = await client.call_tool("list_examples", {"database": DB})
    seen["terms"] = await client.call_tool("list_examples", {"kind": "term"})
    seen["no_db_list"] = await client.call_tool("list_examples", {"database": "nope"})
    seen["ask"] = await client.call_tool("ask", {"question": LIKE_TAUGHT})
    run_id = seen["ask"].structured_content["run_id"]
    seen["trace"] = await client.read_resource(f"sqlchorus://runs/{run_id}/trace")
    return seen


def _refused(result, kind: str) -> str:
    assert result.is_error, result
    text = result.content[0].text
    assert text.startswith(f"{kind}: ") and "\n" not in text, text
    return text


@pytest.fixture
def mcp_server(tmp_path):
    env = server_env(tmp_path, SQLCHORUS_TOKEN=TOKEN)
    db = teach_folder(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    args = ["mcp", "--db", str(db), "--model", "python:teach_model:model", "--no-cache", "--transport", "http",
            "--port", str(port), "--trace-dir", str(tmp_path / "traces"),
            "--checkpoints", str(tmp_path / "checkpoints.sqlite")]
    with running(args, tmp_path, env, url, headers=HEADERS):
        yield url, tmp_path


def test_teach_and_list_examples_over_streamable_http(mcp_server):
    url, folder = mcp_server
    db_sha = sha(folder / f"{DB}.sqlite")
    seen = asyncio.run(_session(url, _exercise))

    teach, listing = seen["tools"]["teach"], seen["tools"]["list_examples"]
    assert teach.annotations.read_only_hint is False and teach.annotations.destructive_hint is False
    assert listing.annotations.read_only_hint is True
    assert {"database", "question", "sql", "hint", "term", "meaning", "run_id"} == set(teach.input_schema["properties"])

    assert not seen["taught"].is_error, seen["taught"]
    entry = seen["taught"].structured_content
    assert (entry["question"], entry["sql"], entry["database"]) == (TAUGHT_QUESTION, TAUGHT_SQL, DB)
    assert entry["source"] == "mcp" and entry["author"] == "127.0.0.1" and entry["kind"] == "example"
    stored = {row["id"]: row for row in kept(folder / "checkpoints.sqlite")}
    assert stored[entry["id"]]["sql"] == TAUGHT_SQL

    assert entry["id"] in _refused(seen["again"], "already_taught")
    assert "DROP" in _refused(seen["dropped"], "taught")
    _refused(seen["unknown_db"], "unknown_database")
    _refused(seen["both"], "invalid_request")
    _refused(seen["no_db_list"], "unknown_database")
    term = seen["term"].structured_content
    assert not seen["term"].is_error and (term["kind"], term["term"], term["sql"]) == ("term", "veteran singer", "Age > 40")
    # Nothing refused was kept.
    assert {row["id"] for row in kept(folder / "checkpoints.sqlite")} == {entry["id"], term["id"]}
    assert [e["id"] for e in seen["listed"].structured_content["examples"]] == [entry["id"], term["id"]]
    assert [e["id"] for e in seen["terms"].structured_content["examples"]] == [term["id"]]

    # A later run shows the taught example in its prompt, and answers from it.
    assert not seen["ask"].is_error and seen["ask"].structured_content["sql"] == TAUGHT_SQL
    spans = [json.loads(line) for line in seen["trace"].contents[0].text.splitlines()]
    shown = [json.loads(s["attributes"]["sqlchorus.taught_examples"]) for s in spans
             if "sqlchorus.taught_examples" in s.get("attributes", {})]
    assert shown and shown[0][0]["id"] == entry["id"] and shown[0][0]["source"] == "mcp"
    assert sha(folder / f"{DB}.sqlite") == db_sha  # the database itself is as it was


def test_teaching_without_the_token_is_refused(mcp_server):
    url, folder = mcp_server
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "teach", "arguments": {"question": "Who sings?", "sql": "SELECT Name FROM singer"}}}
    refused = http.post(url, json=call, headers={"Accept": "application/json, text/event-stream"})
    assert refused.status_code == 401 and refused.json()["error"]["kind"] == "unauthorized"
    assert kept(folder / "checkpoints.sqlite") == []
