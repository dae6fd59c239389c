"""sqlchorus inside other programs: an async ``ask``, a LangChain tool, a graph to embed.

* :func:`aask` answers without blocking an event loop (the run goes to a worker thread).
* :func:`as_tool` gives a LangChain tool with a typed argument schema (``question``, ``evidence``)
  and a structured result (:func:`tool_result`), for any agent that calls tools.
* :func:`graph_for` gives the graph with declared input (``question``, ``database``,
  ``evidence``) and output (``answer``, ``selection``, ``errors``), each run prepared as ``ask``
  prepares one, so it can run where only input is passed: as a node of a parent LangGraph graph,
  or under a LangGraph server (:mod:`sqlchorus.interfaces.studio`).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from langchain_core.tools import StructuredTool, ToolException
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel, Field
from typing_extensions import NotRequired, TypedDict

from sqlchorus.config.errors import SqlchorusError
from sqlchorus.config.settings import Settings
from sqlchorus.core.models import ModelConfigError
from sqlchorus.core.state import Answer, ErrorRecord, Selection
from sqlchorus.runs.result import Result, answer_json, tool_answer
from sqlchorus.runs.session import Session, ask
from sqlchorus.tools.engines.opening import display_name, file_of

TOOL_ROWS = 50
"""Rows a tool's result carries at most; ``truncated`` says when there were more."""


async def aask(question: str, db: str | Path | None = None, model: Any = None, **kwargs: Any) -> Result:
    """:func:`sqlchorus.ask` for async code: the run goes to a worker thread, the loop goes on."""
    return await asyncio.to_thread(ask, question, db, model, **kwargs)


class AskInput(BaseModel):
    """The arguments of the tool."""

    question: str = Field(description="The question about the database, in plain language.")
    evidence: str = Field("", description="A hint that defines terms the question uses (optional).")


def tool_result(result: Result, max_rows: int = TOOL_ROWS) -> dict[str, Any]:
    """What the tool returns: :data:`~sqlchorus.runs.result.TOOL_FIELDS` of the run's answer
    (:func:`~sqlchorus.runs.result.answer_json`), the SQL, its result (``max_rows`` rows at
    most), whether rows were cut, the selection's confidence, the run's id and why there is no
    answer, if there is none."""
    return tool_answer(answer_json(result), max_rows)


def failure_text(result: Result) -> str:
    """Why ``result`` has no answer, with the causes the run met (a model's own complaint, the
    candidates' errors), not only its summary."""
    causes: list[str] = []
    for e in result.errors:
        text = f"{e.get('node') or e.get('kind') or 'run'}: {e.get('message')}"
        if e.get("message") and text not in causes:
            causes.append(text)
    for c in result.candidates:
        if c.get("error") and len(causes) < 5:
            causes.append(f"{c.get('id')}: {c.get('error')}")
    summary = result.error or "No answer."
    return summary + (" Causes: " + "; ".join(causes[:5]) + "." if causes else "")


def ask_tool(session: Session, db: str | Path | None, question: str, evidence: str, max_rows: int) -> dict[str, Any]:
    """What a tool that asks returns (:func:`tool_result`).

    Raises:
        ToolException: the question cannot be taken, or the run found no answer (its causes
            named), so the agent's framework sees a failed call.
        ModelConfigError: the model cannot be used at all (a configuration error for the host).
    """
    try:
        result = session.ask(question, db=db, evidence=evidence)
    except ModelConfigError:  # no question can be answered: the host must hear of it
        raise
    except SqlchorusError as e:
        raise ToolException(f"{e.kind}: {e}") from e
    if not result.ok:
        raise ToolException(failure_text(result))
    return tool_result(result, max_rows)


def as_tool(db: str | Path | None = None, *, model: Any = None, settings: Settings | None = None,
            name: str = "ask_database", description: str | None = None, max_rows: int = TOOL_ROWS) -> StructuredTool:
    """A LangChain tool that answers questions over ``db`` (the demo database by default).

    The tool keeps one :class:`~sqlchorus.runs.session.Session` (models, cache, the database's schema and
    value index built once). A question it cannot take (empty, too long), or a run with no
    answer, raises ``ToolException`` with the cause, which the tool hands to the agent as a
    failed call (``status="error"``) so that it can go on; a model that cannot be used at all
    raises, as a configuration error should. :func:`sqlchorus.as_tools` gives the whole toolkit.
    """
    session = Session(settings, model=model)
    # A file by its name; a database on a server by its URL, never with its password.
    where = "the demo shop database" if db is None else Path(db).name if file_of(db) is not None else display_name(db)

    def run(question: str, evidence: str = "") -> dict[str, Any]:
        return ask_tool(session, db, question, evidence, max_rows)

    async def arun(question: str, evidence: str = "") -> dict[str, Any]:
        return await asyncio.to_thread(run, question, evidence)

    return StructuredTool.from_function(
        func=run, coroutine=arun, name=name, args_schema=AskInput, handle_tool_error=True,
        description=description or (
            f"Answers a question about {where} by writing SQL, checking it against the database and "
            "running it (read only). Returns the SQL, its columns and rows; a failed call says why."
        ),
    )


class GraphInput(TypedDict):
    """What :func:`graph_for`'s graph takes."""

    question: str
    database: NotRequired[str]  # any database name (a file, a URL); the graph's own when left out
    evidence: NotRequired[str]


class GraphOutput(TypedDict, total=False):
    """What :func:`graph_for`'s graph gives."""

    answer: Answer
    selection: Selection
    errors: list[ErrorRecord]


class HostedRunError(SqlchorusError, ValueError):
    """A run a host started (LangGraph Studio, ``langgraph dev``) could not be made: the question,
    the database or the settings were refused. It is a ``ValueError`` because a LangGraph server
    shows only such errors' messages to its client (any other reads "An internal error
    occurred"); ``kind`` and ``http_status`` are those of the refusal, which is its cause."""

    def __init__(self, error: SqlchorusError):
        super().__init__(f"{type(error).__name__}: {error}")
        self.kind = error.kind
        self.http_status = getattr(error, "http_status", 400)


def graph_for(db: str | Path | None = None, *, model: Any = None, settings: Settings | None = None,
              hosted_errors: bool = False) -> Any:
    """The graph with declared input and output, for hosts that pass input only.

    Its one node, ``sqlchorus``, runs the pipeline through the same preparation as
    :func:`sqlchorus.ask` (the question checked, the run traced, nested under the host's current
    span) over the input's ``database``, else ``db``, else the demo database, with one
    :class:`~sqlchorus.runs.session.Session` made on first use. The pipeline runs as a subgraph of
    the host's step: ``stream(..., subgraphs=True)`` shows its nodes, and its checkpoints are the
    host's (a LangGraph server keeps them), not a file of sqlchorus's.

    Raises (from ``invoke``):
        EmptyQuestionError, QuestionTooLongError: the question cannot be asked.
        sqlchorus.tools.engines.sqlite.DatabaseOpenError: the database is missing or cannot be opened.
        HostedRunError: any of these, with ``hosted_errors``, for a LangGraph server to show its
            client (the cause is its ``__cause__``).
    """
    settings = settings or Settings()
    if model is not None:
        settings = settings.replace(model=model)
    lock = threading.Lock()
    made: list[Session] = []

    def answer(state: GraphInput) -> GraphOutput:
        with lock:
            if not made:
                made.append(Session(settings))
        try:
            result = made[0].run(state.get("question"), state.get("database") or db,
                                 evidence=state.get("evidence") or "", hosted=True)
        except SqlchorusError as e:
            if hosted_errors:
                raise HostedRunError(e) from e
            raise
        found = result.state.get("answer") or {"sql": None, "columns": [], "rows": [], "error": result.error}
        return {"answer": found, "selection": result.selection, "errors": result.errors}

    builder = StateGraph(GraphOutput, input_schema=GraphInput, output_schema=GraphOutput)
    builder.add_node(GRAPH_NODE, answer)
    builder.add_edge(START, GRAPH_NODE)
    builder.add_edge(GRAPH_NODE, END)
    return builder.compile(name="sqlchorus")


GRAPH_NODE = "sqlchorus"
"""The node of :func:`graph_for`'s graph that runs the pipeline."""
