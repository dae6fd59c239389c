"""`sqlchorus.as_tools(..., teach=True)`: the `teach_database` tool keeps what the user confirmed,
in the examples store; a later `ask_database` shows it to the model; a refusal is a failed call
the agent sees; and an agent records a pair once the user confirms an answer."""

from __future__ import annotations

import ast
import json
import shutil

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import sqlchorus
from conftest import spider_db
from teach_model import HEADER, reading_model
from teach_servers import DB, GOLD_QUESTION, LIKE_TAUGHT, TAUGHT_QUESTION, TAUGHT_SQL, gold, kept, sha

NAMES = ["list_databases", "search_schema", "describe_table", "execute_sql", "validate_sql", "ask_database"]


@pytest.fixture
def db(tmp_path):
    if not spider_db(DB).exists():
        pytest.skip(f"Spider database {DB} is not in the shared data")
    path = tmp_path / f"{DB}.sqlite"
    shutil.copy(spider_db(DB), path)
    return path


def _tools(db, tmp_path, prompts=None, **settings):
    """The toolkit over ``db`` with the teach tool, its examples in ``tmp_path/examples.sqlite``."""
    options = {"trace_dir": None, "examples_store": str(tmp_path / "examples.sqlite"), **settings}
    tools = sqlchorus.as_tools(db, model=reading_model(gold(), prompts=prompts), teach=True,
                               settings=sqlchorus.Settings(**options))
    return {t.name: t for t in tools}


def _call(tool, **args) -> ToolMessage:
    """The tool called as an agent calls it: a ToolMessage comes back."""
    return tool.invoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args})


def test_the_teach_tool_is_given_only_when_asked_for(db, tmp_path):
    plain = sqlchorus.as_tools(db, model=reading_model(gold()), settings=sqlchorus.Settings(trace_dir=None))
    assert [t.name for t in plain] == NAMES
    tools = _tools(db, tmp_path)
    assert list(tools) == [*NAMES, "teach_database"]
    assert set(tools["teach_database"].args) == {"database", "question", "sql", "hint", "term", "meaning", "run_id"}


def test_a_taught_pair_is_kept_and_shown_to_a_later_question(db, tmp_path):
    prompts: list[str] = []
    tools = _tools(db, tmp_path, prompts)
    entry = tools["teach_database"].invoke({"question": TAUGHT_QUESTION, "sql": TAUGHT_SQL})
    assert (entry["question"], entry["sql"], entry["database"], entry["source"]) == (
        TAUGHT_QUESTION, TAUGHT_SQL, DB, "toolkit")
    assert [row["id"] for row in kept(tmp_path / "examples.sqlite")] == [entry["id"]]
    answer = tools["ask_database"].invoke({"question": LIKE_TAUGHT})
    assert answer["sql"] == TAUGHT_SQL and answer["rows"] == [["John Nizinik"], ["Rose White"]]
    shown = [p for p in prompts if HEADER in p]
    assert shown and TAUGHT_QUESTION in shown[0]


def test_refusals_are_failed_calls_and_keep_nothing(db, tmp_path):
    tools = _tools(db, tmp_path)
    before = sha(db)
    assert _call(tools["teach_database"], question=TAUGHT_QUESTION, sql=TAUGHT_SQL).status != "error"
    cases = [
        (dict(question="Remove every singer", sql="DROP TABLE singer"), "taught: "),
        (dict(question=TAUGHT_QUESTION.lower(), sql=TAUGHT_SQL), "already_taught: "),
        (dict(question="Who sings?", sql="SELECT Name FROM singer", database="nope"), "unknown_database: "),
        (dict(question="Who sings?", term="singer", meaning="x"), "invalid_request: "),
        (dict(term="loud singer", sql="Volume > 3"), "taught: "),
    ]
    for args, kind in cases:
        refused = _call(tools["teach_database"], **args)
        assert refused.status == "error" and refused.content.startswith(kind), (args, refused.content)
        assert "\n" not in refused.content
    bad_run = _call(tools["teach_database"], question="Who sings?", sql="SELECT Name FROM singer", run_id="x\ny")
    assert bad_run.status == "error"
    assert len(kept(tmp_path / "examples.sqlite")) == 1 and sha(db) == before


def test_without_a_store_the_tool_says_so(db, tmp_path):
    tools = _tools(db, tmp_path, examples_store=None)
    refused = _call(tools["teach_database"], question=TAUGHT_QUESTION, sql=TAUGHT_SQL)
    assert refused.status == "error" and refused.content.startswith("no_examples_store: ")


def _result(message: ToolMessage) -> dict:
    """What a tool returned, from the ToolMessage the agent got (its content is the dict as text)."""
    try:
        return json.loads(message.content)
    except ValueError:
        return ast.literal_eval(message.content)


def test_an_agent_teaches_the_answer_the_user_confirmed(db, tmp_path):
    """A scripted agent asks the database, tells the user, and once the user confirms, teaches
    the question with the SQL and run of its answer."""
    from langchain.agents import create_agent

    from sqlchorus.testing import ScriptedChatModel

    tools = _tools(db, tmp_path)

    def asked(messages) -> dict:
        return _result(next(m for m in messages if isinstance(m, ToolMessage) and m.tool_call_id == "ask"))

    def turn(messages) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage) and last.content == GOLD_QUESTION:
            return AIMessage("", tool_calls=[{"name": "ask_database", "args": {"question": GOLD_QUESTION}, "id": "ask"}])
        if isinstance(last, ToolMessage) and last.tool_call_id == "ask":
            return AIMessage(f"We have {asked(messages)['rows'][0][0]} singers. Is that right?")
        if isinstance(last, HumanMessage):  # the user confirmed
            answer = asked(messages)
            return AIMessage("", tool_calls=[{"name": "teach_database", "id": "teach", "args": {
                "question": GOLD_QUESTION, "sql": answer["sql"], "run_id": answer["run_id"]}}])
        return AIMessage("Noted: later answers will follow it.")

    agent = create_agent(ScriptedChatModel(turn, name="agent"), tools=list(tools.values()))
    first = agent.invoke({"messages": [HumanMessage(GOLD_QUESTION)]}, {"recursion_limit": 20})
    assert first["messages"][-1].content == "We have 6 singers. Is that right?"
    assert kept(tmp_path / "examples.sqlite") == []  # nothing taught before the user said so
    second = agent.invoke({"messages": [*first["messages"], HumanMessage("Yes, that is right.")]},
                          {"recursion_limit": 20})
    taught = next(m for m in second["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "teach")
    assert taught.status == "success", taught.content
    (row,) = kept(tmp_path / "examples.sqlite")
    answer = asked(second["messages"])
    assert (row["question"], row["sql"], row["run_id"], row["source"]) == (
        GOLD_QUESTION, "SELECT count(*) FROM singer", answer["run_id"], "toolkit")
