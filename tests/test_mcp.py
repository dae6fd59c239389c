"""`sqlchorus mcp`: the MCP server, talked to with the SDK's own client over stdio (a subprocess)
and over streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from conftest import WAIT_S
from servers import BIN, TOKEN, free_port, http, running, server_env
from sqlchorus.runs.demo import demo_db_path

QUESTION = "How many customers do we have?"
TOOLS = {"ask", "list_databases", "search_schema", "describe_table", "execute_sql", "validate_sql", "teach",
         "list_examples"}


def _args(folder: Path) -> list[str]:
    shutil.copy(demo_db_path(), folder / "shop.sqlite")
    return ["mcp", "--db", str(folder / "shop.sqlite"), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--checkpoints", str(folder / "checkpoints.sqlite")]


async def _exercise(client: Client) -> dict:
    """Every tool and resource once; what came back."""
    seen: dict = {}
    tools = (await client.list_tools()).tools
    seen["tools"] = {t.name: t for t in tools}
    progress: list[tuple[float, str | None]] = []

    async def told(value, total, message):
        progress.append((value, message))

    seen["ask"] = await client.call_tool("ask", {"question": QUESTION}, progress_callback=told)
    seen["progress"] = progress
    seen["databases"] = await client.call_tool("list_databases", {})
    seen["names"] = await client.call_tool("search_schema", {"pattern": "email"})
    seen["summary"] = await client.call_tool("search_schema", {"pattern": "cust*", "detail": "summary"})
    seen["full"] = await client.call_tool("search_schema", {"pattern": "orders", "detail": "full"})
    seen["describe"] = await client.call_tool("describe_table", {"table": "customers"})
    seen["no_table"] = await client.call_tool("describe_table", {"table": "customer"})
    seen["select"] = await client.call_tool("execute_sql", {"sql": "SELECT first_name FROM customers ORDER BY 1",
                                                            "max_rows": 3})
    seen["delete"] = await client.call_tool("execute_sql", {"sql": "DELETE FROM customers"})
    seen["attach"] = await client.call_tool("execute_sql", {"sql": "SELECT * FROM pragma_database_list"})
    seen["valid"] = await client.call_tool("validate_sql", {"sql": "SELECT COUNT(*) FROM orders WHERE status = 'x'"})
    seen["invalid"] = await client.call_tool("validate_sql", {"sql": "SELECT nam FROM customers"})
    seen["failed"] = await client.call_tool("ask", {"question": "[fail] " + QUESTION})
    seen["templates"] = (await client.list_resource_templates()).resource_templates
    seen["schema"] = await client.read_resource("sqlchorus://databases/shop/schema")
    run_id = seen["ask"].structured_content["run_id"]
    seen["trace"] = await client.read_resource(f"sqlchorus://runs/{run_id}/trace")
    return seen


def _check(seen: dict) -> None:
    assert set(seen["tools"]) == TOOLS
    for tool in seen["tools"].values():
        # teach adds to the examples store, never to a database: the one tool that is not read-only.
        assert tool.annotations.read_only_hint is (tool.name != "teach") and tool.annotations.destructive_hint is False
        assert tool.description
    assert set(seen["tools"]["ask"].input_schema["properties"]) == {"question", "database", "evidence"}
    ask = seen["ask"]
    assert not ask.is_error
    assert ask.structured_content["sql"] == "SELECT COUNT(*) FROM customers"
    assert ask.structured_content["rows"] == [[62]] and ask.structured_content["error"] is None
    messages = [m for _, m in seen["progress"]]
    assert "generate_divide_conquer finished" in messages and messages[-1] == "select_candidate finished"
    assert [v for v, _ in seen["progress"]] == sorted(v for v, _ in seen["progress"])
    assert seen["databases"].structured_content["databases"][0]["id"] == "shop"
    names = seen["names"].structured_content
    assert {t["table"] for t in names["tables"]} == {"customers", "suppliers"}
    assert all(set(t) == {"table", "columns", "matched", "matching_columns"} for t in names["tables"])
    summary = seen["summary"].structured_content["tables"]
    assert [(t["table"], t["matched"]) for t in summary] == [("customers", "table"), ("orders", "columns")]
    assert summary[0]["rows"] == 62 and summary[1]["matching_columns"] == ["customer_id"]
    assert "foreign_keys" not in summary[0] and summary[0]["columns"][0] == {"name": "customer_id", "type": "INTEGER"}
    full = next(t for t in seen["full"].structured_content["tables"] if t["table"] == "orders")
    assert full["foreign_keys"] and full["columns"][0]["samples"]
    assert seen["describe"].structured_content["primary_key"] == ["customer_id"]
    assert seen["no_table"].is_error and "customers" in seen["no_table"].content[0].text
    select = seen["select"].structured_content
    assert not seen["select"].is_error and select["row_count"] == 3 and select["truncated"] is True
    assert seen["delete"].is_error and seen["delete"].structured_content["error"]["code"] == "not_a_query"
    assert seen["attach"].is_error and seen["attach"].structured_content["error"]["code"] == "forbidden"
    assert seen["valid"].structured_content["valid"] is True and seen["valid"].structured_content["plan"]
    invalid = seen["invalid"].structured_content
    assert seen["invalid"].is_error and invalid["valid"] is False and "nam" in invalid["error"]["message"]
    assert seen["failed"].is_error and seen["failed"].structured_content["error"]
    assert {t.uri_template for t in seen["templates"]} == {
        "sqlchorus://databases/{database}/schema", "sqlchorus://runs/{run_id}/trace"}
    assert "customers" in seen["schema"].contents[0].text
    spans = [json.loads(line) for line in seen["trace"].contents[0].text.splitlines()]
    assert any(s["name"] == "mcp" for s in spans)


@pytest.mark.slow
def test_over_stdio_with_the_sdks_client(tmp_path):
    params = StdioServerParameters(command=str(BIN), args=_args(tmp_path), env=server_env(tmp_path), cwd=str(tmp_path))

    async def main():
        async with Client(params) as client:
            return await _exercise(client)

    _check(asyncio.run(main()))
    # The database is as it was: nothing the tools ran wrote to it.
    assert (tmp_path / "shop.sqlite").read_bytes() == demo_db_path().read_bytes()


@pytest.mark.slow
def test_over_streamable_http_on_loopback_with_a_token(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    env = server_env(tmp_path, SQLCHORUS_TOKEN=TOKEN)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with running([*_args(tmp_path), "--transport", "http", "--port", str(port)], tmp_path, env,
                 f"http://127.0.0.1:{port}/mcp", headers=headers):
        refused = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401 and refused.json()["error"]["kind"] == "unauthorized"

        async def main():
            async with httpx.AsyncClient(headers=headers, timeout=WAIT_S) as web:
                async with Client(streamable_http_client(url, http_client=web)) as client:
                    return await _exercise(client)

        _check(asyncio.run(main()))


ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
"""A statement that never ends by itself: it runs until its budget stops it."""


@pytest.mark.slow
def test_one_clients_statements_leave_workers_for_another(tmp_path):
    """Two statement workers; one client (127.0.0.2) sends two statements that run until their
    budget stops them: it holds one worker, so another client's query runs at once, while both
    of the first are still under way."""
    import httpx2

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    budget_s = 20
    args = [*_args(tmp_path), "--transport", "http", "--port", str(port), "--statement-workers", "2",
            "--timeout", str(budget_s)]

    async def scenario() -> tuple[dict, list[bool]]:
        other = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(local_address="127.0.0.2"),
                                   timeout=httpx2.Timeout(budget_s * 3))
        async with other, Client(streamable_http_client(url)) as mine, \
                Client(streamable_http_client(url, http_client=other)) as theirs:
            heavy = [asyncio.create_task(theirs.call_tool("execute_sql", {"sql": ENDLESS})) for _ in range(2)]
            await asyncio.sleep(1.0)  # both sent: one runs, one waits for its client's share
            cheap = await asyncio.wait_for(mine.call_tool("execute_sql", {"sql": "SELECT count(*) FROM customers"}),
                                           timeout=budget_s)
            pending = [not task.done() for task in heavy]
            ended = await asyncio.gather(*heavy)
            assert all(e.is_error and e.structured_content["error"]["code"] == "timeout" for e in ended), ended
            return cheap.structured_content, pending

    with running(args, tmp_path, server_env(tmp_path), url):
        cheap, pending = asyncio.run(scenario())
    assert cheap["rows"] == [[62]] and cheap["error"] is None
    assert pending == [True, True]
