"""A guarded SQL toolkit for any LangChain agent: the MCP server's six tools as typed tools.

:func:`as_tools` gives ``list_databases``, ``search_schema``, ``describe_table``,
``execute_sql``, ``validate_sql`` and ``ask_database`` over one or more databases (SQLite files, DuckDB files, PostgreSQL URLs) — what
LangChain's ``SQLDatabaseToolkit`` gives (list tables, schema, query, check), with every
statement through sqlchorus's guard (read only, time and row limits) and a question answered
by the whole pipeline. A tool that cannot do what it was asked raises ``ToolException`` with the
cause, so the agent's framework sees a failed call (a ``ToolMessage`` with ``status="error"``),
not a result that looks like success.

With ``teach=True`` the toolkit also has ``teach_database``, with which an agent keeps a question
and the SQL the user confirmed for it (or a glossary term) in the examples store, so that later
answers over that database follow it. It is asked for, not given: it changes what every later
run's prompt shows, so a host decides whether its agent may.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel, Field

from sqlchorus.config.errors import SqlchorusError
from sqlchorus.config.settings import Settings
from sqlchorus.runs.databases import EXECUTE_ROWS, MAX_EXECUTE_ROWS, Databases, database_ids
from sqlchorus.runs.demo import demo_db_path
from sqlchorus.runs.integrations import TOOL_ROWS, ask_tool
from sqlchorus.runs.service import Teaching
from sqlchorus.runs.session import Session
from sqlchorus.tools.schema.search import search


class _DatabaseArg(BaseModel):
    database: str | None = Field(None, description="The database's id (from list_databases); may be left out "
                                                   "when there is only one.")


class _SearchArgs(_DatabaseArg):
    pattern: str = Field(description="Part of a table or column name; * or % for any text, ? or _ for one character.")
    detail: Literal["names", "summary", "full"] = Field(
        "names", description="names: column names; summary: types, keys, row counts; full: also foreign keys, "
                             "descriptions and sample values.")


class _TableArgs(_DatabaseArg):
    table: str = Field(description="The table's name.")


class _ExecuteArgs(_DatabaseArg):
    sql: str = Field(description="One read query in the database's dialect (see list_databases).")
    max_rows: int = Field(EXECUTE_ROWS, ge=1, le=MAX_EXECUTE_ROWS, description="Rows to return at most.")


class _ValidateArgs(_DatabaseArg):
    sql: str = Field(description="One read query in the database's dialect (see list_databases).")


class _TeachArgs(_DatabaseArg):
    question: str = Field("", description="The question the user asked, in their words.")
    sql: str = Field("", description="The SQL the user confirmed answers it: one read query, in the database's "
                                     "dialect, that returns rows. For a term: its SQL condition, if it has one.")
    hint: str = Field("", description="A hint the question needs (what its terms mean), if any.")
    term: str = Field("", description="Instead of a question: a term of the database's world to keep in its "
                                      "glossary (say what it means in meaning, sql or both).")
    meaning: str = Field("", description="What the term means, in words.")
    # No pattern here: a run id of another form is refused by the tool, a failed call the agent
    # sees, not an error its framework raises.
    run_id: str | None = Field(None, description="The run the answer came from (ask_database's run_id), if any.")


def _failing(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` with sqlchorus's errors raised as ``ToolException`` (``kind: message``)."""

    def call(**kwargs: Any) -> Any:
        try:
            return func(**kwargs)
        except SqlchorusError as e:
            raise ToolException(f"{e.kind}: {e}") from e

    call.__name__ = func.__name__
    return call


def _tool(func: Callable[..., Any], name: str, args: type[BaseModel], description: str) -> StructuredTool:
    sync = _failing(func)

    async def run(**kwargs: Any) -> Any:
        return await asyncio.to_thread(sync, **kwargs)

    return StructuredTool.from_function(func=sync, coroutine=run, name=name, args_schema=args, description=description,
                                        handle_tool_error=True)


def as_tools(*dbs: str | Path, model: Any = None, settings: Settings | None = None,
             max_rows: int = TOOL_ROWS, teach: bool = False) -> list[BaseTool]:
    """Six typed LangChain tools over ``dbs`` (any database name, :mod:`sqlchorus.tools.engines.opening`; the demo database when none):
    ``list_databases``, ``search_schema``, ``describe_table``, ``execute_sql``, ``validate_sql``
    and ``ask_database`` (the pipeline; needs ``model``, or the settings' model). Nothing they
    run can change a database. A failed call raises ``ToolException`` with its cause, which the
    tools hand to the agent as an error result (``handle_tool_error``).

    With ``teach``, a seventh, ``teach_database``: it keeps a question and the SQL the user
    confirmed (or a glossary term) in the settings' examples store (``examples_store``: the
    checkpoint store by default), said to be verified by the login name, from ``toolkit``.

    Raises:
        sqlchorus.tools.sql.errors.DatabaseOpenError: a database is missing or cannot be opened.
        ServiceError: two files would have the same id (the same file name).
    """
    session = Session(settings, model=model)
    databases = Databases(database_ids(list(dbs) or [demo_db_path()]), session)

    def list_databases() -> dict[str, Any]:
        return {"databases": databases.databases()}

    def search_schema(pattern: str, database: str | None = None, detail: str = "names") -> dict[str, Any]:
        return search(databases.schema(database), pattern, detail)

    def describe_table(table: str, database: str | None = None) -> dict[str, Any]:
        return databases.describe(table, database)

    def execute_sql(sql: str, database: str | None = None, max_rows: int = EXECUTE_ROWS) -> dict[str, Any]:
        return databases.query(sql, database, max_rows)

    def validate_sql(sql: str, database: str | None = None) -> dict[str, Any]:
        return {"valid": True, "plan": databases.plan(sql, database)}

    class _AskArgs(_DatabaseArg):
        question: str = Field(description="The question about the database, in plain language.")
        evidence: str = Field("", description="A hint that defines terms the question uses (optional).")

    def ask_database(question: str, database: str | None = None, evidence: str = "") -> dict[str, Any]:
        return ask_tool(session, databases.resolve(database)[1], question, evidence, max_rows)

    where = ", ".join(databases.paths)
    tools = [
        _tool(list_databases, "list_databases", BaseModel,
              f"The databases these tools answer over ({where}): id, file name, number of tables and columns."),
        _tool(search_schema, "search_schema", _SearchArgs,
              "Find tables and columns whose names match a pattern (case-insensitive). Use it before writing SQL "
              "to learn the exact names. At most 100 tables."),
        _tool(describe_table, "describe_table", _TableArgs,
              "Everything about one table: columns with types, keys, descriptions and sample values, foreign keys "
              "and row count."),
        _tool(execute_sql, "execute_sql", _ExecuteArgs,
              "Run one read query, in the database's dialect, and return its rows. Anything but a single read query is refused; an "
              "error names its kind (not_a_query, forbidden, timeout, resource, execution, ...)."),
        _tool(validate_sql, "validate_sql", _ValidateArgs,
              "Check one read query without running it: its engine plans it, so unknown tables or columns and syntax "
              "errors are found. Returns the plan."),
        _tool(ask_database, "ask_database", _AskArgs,
              "Answer a question about a database in plain language: writes SQL, checks it against the database "
              "and runs it (read only). Returns the SQL, its columns and rows."),
    ]
    if teach:
        tools.append(_teach_tool(Teaching(databases)))
    return tools


def _teach_tool(teaching: Teaching) -> StructuredTool:
    """``teach_database`` over ``teaching``'s databases: a question and its confirmed SQL, or a
    glossary term, kept for later runs."""

    def teach_database(database: str | None = None, question: str = "", sql: str = "", hint: str = "",
                       term: str = "", meaning: str = "", run_id: str | None = None) -> dict[str, Any]:
        if term and question:
            raise ToolException("invalid_request: Give a question and its sql, or a term, not both.")
        if term:
            return teaching.teach_term(database, term, meaning, sql, run_id=run_id, source="toolkit")
        return teaching.teach(database, question, sql, hint, run_id=run_id, source="toolkit")

    return _tool(teach_database, "teach_database", _TeachArgs,
                 "Keep a question and the SQL that answers it, once the user has confirmed the answer is right, so "
                 "that later answers over that database follow it; or a glossary term with what it means. The SQL "
                 "must be one read query that returns rows; a question taught already is refused. Never call it "
                 "for an answer the user has not confirmed.")
