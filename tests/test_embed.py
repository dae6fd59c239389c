"""sqlchorus inside other programs: async ask, a LangChain tool an agent calls, and the graph as a
node of a parent graph whose state differs."""

from __future__ import annotations

import asyncio
import json
import operator
import threading
from typing import Annotated

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import sqlchorus
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.runs.integrations import AskInput, tool_result
from sqlchorus.testing import ScriptedChatModel, oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


def _oracle():
    return oracle_model(GOLD.get)


def test_aask_answers_without_blocking_the_loop(demo_db):
    in_call, loop_ran = threading.Event(), threading.Event()
    oracle = _oracle().responses
    waited: list[bool] = []

    def respond(messages):
        # Each call waits for the event loop to run a task of its own while the call is under
        # way: it can only if aask left the loop free.
        in_call.set()
        waited.append(loop_ran.wait(60))
        return oracle(messages)

    async def main():
        async def meanwhile():
            while not in_call.is_set():
                await asyncio.sleep(0.001)
            loop_ran.set()

        task = asyncio.create_task(meanwhile())
        result = await sqlchorus.aask(QUESTION, demo_db, ScriptedChatModel(respond),
                                      settings=sqlchorus.Settings(trace_dir=None))
        task.cancel()
        return result

    result = asyncio.run(main())
    assert result.ok and result.rows == [[62]]
    assert waited and all(waited)


def test_the_tool_has_a_typed_schema_and_a_structured_result(demo_db):
    tool = sqlchorus.as_tool(demo_db, model=_oracle(), settings=sqlchorus.Settings(trace_dir=None))
    assert tool.name == "ask_database" and tool.args_schema is AskInput
    assert set(tool.args) == {"question", "evidence"} and "read only" in tool.description
    out = tool.invoke({"question": QUESTION})
    assert out["sql"] == GOLD[QUESTION] and out["rows"] == [[62]] and out["columns"] == ["COUNT(*)"]
    assert out["error"] is None and out["truncated"] is False and out["run_id"] and out["confidence"] == 1.0
    # A question it cannot take is a failed call, with why, not a result that looks like one.
    empty = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": {"question": "   "}})
    assert empty.status == "error" and empty.content.startswith("empty_question:")
    assert asyncio.run(tool.ainvoke({"question": QUESTION}))["rows"] == [[62]]


def test_rows_are_capped_and_flagged(demo_db):
    many = sqlchorus.ask("List every customer", demo_db, ScriptedChatModel(lambda m: "SELECT * FROM customers"),
                         settings=sqlchorus.Settings(trace_dir=None, preset="tiny"))
    capped = tool_result(many, max_rows=5)
    assert len(capped["rows"]) == 5 and capped["truncated"] is True


def test_a_react_agent_calls_the_tool(demo_db):
    from langchain.agents import create_agent

    tool = sqlchorus.as_tool(demo_db, model=_oracle(), settings=sqlchorus.Settings(trace_dir=None))
    turns = iter([
        AIMessage("", tool_calls=[{"name": "ask_database", "args": {"question": QUESTION}, "id": "call-1"}]),
        AIMessage("There are 62 customers."),
    ])
    agent_model = ScriptedChatModel(lambda messages: next(turns), name="agent")
    agent = create_agent(agent_model, tools=[tool])
    state = agent.invoke({"messages": [HumanMessage("How many customers are there?")]})
    tool_messages = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(tool_messages) == 1 and '"rows": [[62]]' in tool_messages[0].content.replace("'", '"')
    assert state["messages"][-1].content == "There are 62 customers."


class Parent(TypedDict, total=False):
    """A host's own state: nothing in common with sqlchorus's but what it maps."""

    user_request: str
    sql: str
    log: Annotated[list[str], operator.add]


def test_the_graph_runs_as_a_node_of_a_parent_graph(demo_db):
    child = sqlchorus.graph_for(demo_db, model=_oracle(), settings=sqlchorus.Settings(trace_dir=None, checkpoints=None))
    assert list(child.get_input_jsonschema()["properties"]) == ["question", "database", "evidence"]

    def ask_database(state: Parent) -> dict:
        out = child.invoke({"question": state["user_request"]}, {"recursion_limit": 40})
        return {"sql": out["answer"]["sql"], "log": [f"{len(out['answer']['rows'])} row(s)"]}

    parent = StateGraph(Parent)
    parent.add_node("plan", lambda state: {"log": ["planned"]})
    parent.add_node("ask_database", ask_database)
    parent.add_edge(START, "plan")
    parent.add_edge("plan", "ask_database")
    parent.add_edge("ask_database", END)
    out = parent.compile().invoke({"user_request": QUESTION})
    assert out["sql"] == GOLD[QUESTION] and out["log"] == ["planned", "1 row(s)"]


def test_the_embedded_graph_runs_as_ask_does_traced_and_checked(demo_db, tmp_path):
    calls: list[int] = []
    oracle = _oracle().responses

    def counted(messages):
        calls.append(1)
        return oracle(messages)

    traces = tmp_path / "traces"
    graph = sqlchorus.graph_for(demo_db, model=ScriptedChatModel(counted, name="oracle"),
                                settings=sqlchorus.Settings(trace_dir=str(traces), checkpoints=None))
    # Refused before any model is asked, as ask refuses them.
    for bad in ({"question": ""}, {"question": "   "}, {"question": "x" * 20_000}, {}, {"question": 5},
                {"question": QUESTION, "evidence": 5}):
        try:
            graph.invoke(bad)
        except (sqlchorus.EmptyQuestionError, sqlchorus.QuestionTooLongError):
            pass
        else:
            raise AssertionError(f"{str(bad)[:30]} was asked")
    assert calls == []
    # Streamed as a subgraph: the host sees every node of the pipeline.
    seen = [(ns, list(chunk)) for ns, chunk in graph.stream({"question": QUESTION}, subgraphs=True)]
    inner = [names[0] for ns, names in seen if ns]
    assert inner[0] == "extract_keywords" and inner[-1] == "select_candidate" and seen[-1] == ((), ["sqlchorus"])
    # ...and traced: one trace file with the run and its nodes.
    (trace_file,) = traces.glob("*.jsonl")
    names = {json.loads(line)["name"] for line in trace_file.read_text(encoding="utf-8").splitlines()}
    assert {"ask", "node:extract_keywords", "node:select_candidate"} <= names


def test_the_embedded_graph_keeps_its_steps_in_the_hosts_checkpoints(demo_db):
    from langgraph.checkpoint.memory import InMemorySaver

    child = sqlchorus.graph_for(demo_db, model=_oracle(), settings=sqlchorus.Settings(trace_dir=None, checkpoints=None))

    class Host(TypedDict, total=False):
        question: str
        answer: dict

    builder = StateGraph(Host)
    builder.add_node("ask", child)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    saver = InMemorySaver()
    host = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "host-thread"}}
    assert host.invoke({"question": QUESTION}, config)["answer"]["rows"] == [[62]]
    # The host's own steps, those of its node "ask", and the pipeline's inside that node.
    namespaces = {"|".join(part.split(":")[0] for part in c.config["configurable"]["checkpoint_ns"].split("|"))
                  for c in saver.list(config)}
    assert namespaces == {"", "ask", "ask|sqlchorus"}


HOST_APP = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import sqlchorus
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
gold = {q["question"]: q["sql"] for q in load_demo_questions()}
with trace.get_tracer("host-app").start_as_current_span("agent step") as step:
    result = sqlchorus.ask(sys.argv[1], model=oracle_model(gold.get), settings=sqlchorus.Settings(trace_dir=sys.argv[2]))
spans = exporter.get_finished_spans()
print(json.dumps({
    "ok": result.ok, "trace_path": result.trace_path,
    "step": [format(step.get_span_context().trace_id, "032x"), format(step.get_span_context().span_id, "016x")],
    "spans": [[s.name, format(s.context.trace_id, "032x"), format(s.parent.span_id, "016x") if s.parent else None]
              for s in spans],
}))
"""


@pytest.mark.slow
def test_spans_join_the_host_applications_trace(tmp_path):
    import json
    import subprocess
    import sys

    script = tmp_path / "host_app.py"
    script.write_text(HOST_APP, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script), QUESTION, str(tmp_path / "traces")],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    trace_id, step_id = report["step"]
    by_name = {name: (tid, parent) for name, tid, parent in report["spans"]}
    assert report["ok"] and {"ask", "node:extract_keywords", "node:select_candidate", "agent step"} <= set(by_name)
    assert by_name["ask"] == (trace_id, step_id)  # the run nests under the host's current span
    assert {tid for tid, _ in by_name.values()} == {trace_id}
    # ...and the run's own file still has every span.
    names = {json.loads(line)["name"] for line in open(report["trace_path"], encoding="utf-8")}
    assert {"ask", "node:extract_keywords"} <= names
