"""``sqlchorus.as_tools``: the MCP server's six tools as typed LangChain tools, guarded, with
failures that an agent's framework sees as failures; and an agent that uses them."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import sqlchorus
from conftest import spider_loader
from sqlchorus.runs.demo import demo_db_path, load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"
NAMES = ["list_databases", "search_schema", "describe_table", "execute_sql", "validate_sql", "ask_database"]


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def shop(tmp_path):
    db = tmp_path / "shop.sqlite"
    shutil.copy(demo_db_path(), db)
    return db


def _tools(*dbs, model=None):
    tools = sqlchorus.as_tools(*dbs, model=model or oracle_model(GOLD.get), settings=sqlchorus.Settings(trace_dir=None))
    return {t.name: t for t in tools}


def _call(tool, **args):
    """The tool called as an agent calls it: a ToolMessage comes back."""
    return tool.invoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args})


def test_six_typed_tools_that_read_and_never_write(shop):
    tools = _tools(shop)
    assert list(tools) == NAMES
    assert set(tools["execute_sql"].args) == {"sql", "database", "max_rows"}
    assert set(tools["search_schema"].args) == {"pattern", "database", "detail"}
    assert tools["list_databases"].invoke({}) == {"databases": [{"id": "shop", "file": "shop.sqlite", "engine": "sqlite", "tables": 7,
                                                                 "columns": 39}]}
    found = tools["search_schema"].invoke({"pattern": "cust*"})
    assert [t["table"] for t in found["tables"]] == ["customers", "orders"]  # orders by its customer_id
    described = tools["describe_table"].invoke({"table": "customers"})
    assert described["table"] == "customers" and described["rows"] == 62
    assert tools["execute_sql"].invoke({"sql": "SELECT count(*) FROM customers"})["rows"] == [[62]]
    assert tools["validate_sql"].invoke({"sql": "SELECT count(*) FROM customers"})["valid"] is True
    before = _sha(shop)
    for sql, kind in [("DELETE FROM customers", "not_a_query"), ("ATTACH DATABASE 'x.db' AS x", "not_a_query"),
                      ("SELECT * FROM customers; DROP TABLE customers", "not_a_query"),
                      ("SELECT nope FROM customers", "execution")]:
        refused = _call(tools["execute_sql"], sql=sql)
        assert refused.status == "error" and refused.content.startswith(kind), (sql, refused.content)
    assert _sha(shop) == before
    unknown = _call(tools["describe_table"], table="custmers")
    assert unknown.status == "error" and "Close names: customers" in unknown.content
    invalid = _call(tools["validate_sql"], sql="SELECT nope FROM customers")
    assert invalid.status == "error" and "no such column" in invalid.content


def test_several_databases_are_named_and_a_missing_name_is_an_error(shop, tmp_path):
    other = tmp_path / "other.sqlite"
    shutil.copy(demo_db_path(), other)
    tools = _tools(shop, other)
    assert [d["id"] for d in tools["list_databases"].invoke({})["databases"]] == ["shop", "other"]
    unsaid = _call(tools["execute_sql"], sql="SELECT 1")
    assert unsaid.status == "error" and "Say which database" in unsaid.content
    wrong = _call(tools["execute_sql"], sql="SELECT 1", database="nope")
    assert wrong.status == "error" and "unknown_database" in wrong.content
    assert tools["execute_sql"].invoke({"sql": "SELECT 1", "database": "other"})["rows"] == [[1]]


@pytest.mark.slow
def test_a_run_without_an_answer_is_a_failed_call_with_its_cause(shop):
    def down(messages):
        raise ConnectionError("the provider is down for maintenance")

    tools = _tools(shop, model=ScriptedChatModel(down))
    failed = _call(tools["ask_database"], question=QUESTION)
    assert failed.status == "error"
    assert "provider is down for maintenance" in failed.content  # the model's own complaint, not a summary
    ok = _call(_tools(shop)["ask_database"], question=QUESTION)
    assert ok.status == "success" and '"rows": [[62]]' in ok.content.replace("'", '"')


def test_an_agent_explores_the_schema_queries_and_recovers_from_a_refusal(shop):
    from langchain.agents import create_agent

    before = _sha(shop)
    turns = iter([
        AIMessage("", tool_calls=[{"name": "list_databases", "args": {}, "id": "t1"}]),
        AIMessage("", tool_calls=[{"name": "search_schema", "args": {"pattern": "customer"}, "id": "t2"}]),
        AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"sql": "DELETE FROM customers"}, "id": "t3"}]),
        AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"sql": "SELECT count(*) FROM customers"},
                                   "id": "t4"}]),
        AIMessage("", tool_calls=[{"name": "ask_database", "args": {"question": QUESTION}, "id": "t5"}]),
        AIMessage("There are 62 customers."),
    ])
    agent = create_agent(ScriptedChatModel(lambda messages: next(turns), name="agent"),
                         tools=sqlchorus.as_tools(shop, model=oracle_model(GOLD.get),
                                                  settings=sqlchorus.Settings(trace_dir=None)))
    state = agent.invoke({"messages": [HumanMessage("How many customers are there?")]}, {"recursion_limit": 20})
    replies = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    assert sorted(replies) == ["t1", "t2", "t3", "t4", "t5"]
    assert replies["t3"].status == "error" and "not_a_query" in replies["t3"].content
    assert all(replies[k].status == "success" for k in ("t1", "t2", "t4", "t5"))
    assert "[[62]]" in replies["t4"].content
    assert state["messages"][-1].content == "There are 62 customers."
    assert _sha(shop) == before


def test_the_tools_answer_over_duckdb(spider, tmp_path):
    pytest.importorskip("duckdb")
    spider_loader().load_database(spider("concert_singer"), duckdb_path=tmp_path)
    db = tmp_path / "concert_singer.duckdb"
    before = _sha(db)
    question = "How many singers are from France?"
    model = oracle_model({question: """SELECT count(*) FROM singer WHERE "Country" = 'France'"""}.get)
    tool = sqlchorus.as_tool(db, model=model, settings=sqlchorus.Settings(trace_dir=None))
    assert "concert_singer.duckdb" in tool.description
    assert tool.invoke({"question": question})["rows"] == [[4]]
    tools = _tools(db, model=model)
    (listed,) = tools["list_databases"].invoke({})["databases"]
    assert (listed["id"], listed["engine"]) == ("concert_singer", "duckdb")
    assert tools["execute_sql"].invoke({"sql": "SELECT count(*) FROM singer"})["rows"] == [[6]]
    refused = _call(tools["execute_sql"], sql="DELETE FROM singer")
    assert refused.status == "error" and refused.content.startswith("not_a_query"), refused.content
    ok = _call(tools["ask_database"], question=question)
    assert ok.status == "success" and '"rows": [[4]]' in ok.content.replace("'", '"'), ok.content
    assert _sha(db) == before and sorted(p.name for p in tmp_path.glob("concert_singer.duckdb*")) == [db.name]


def test_a_tool_over_a_server_names_it_without_its_password():
    tool = sqlchorus.as_tool("postgresql://me:s3cret@db.example:5432", model=oracle_model(GOLD.get))
    assert "s3cret" not in tool.description and "db.example" in tool.description
