"""The MCP server: ``sqlchorus mcp``, on the official ``mcp`` SDK, over a
:class:`~sqlchorus.runs.service.RunService`.

Tools, each read-only and non-destructive but ``teach``:

* ``ask``: a question in, checked SQL and its rows out, with a progress notification as each
  node finishes.
* ``list_databases``; ``search_schema`` (a pattern, and a detail level ``names``, ``summary`` or
  ``full``, so that an agent can discover a large schema a little at a time); ``describe_table``.
* ``execute_sql``: one read query through the guard, rows capped, errors with a stable ``code``.
* ``validate_sql``: parse a query and have its engine plan it (``EXPLAIN``, never a run) without running it.
* ``teach``: keep a question and the SQL the user confirmed for it, or a glossary term, for a
  database (in the examples store, never the database): later runs' prompts show it.
  ``list_examples``: what is taught.

Resources: each database's schema (``sqlchorus://databases/{database}/schema``) and a run's
trace (``sqlchorus://runs/{run_id}/trace``). Over stdio, or streamable HTTP on loopback (a
token, ``SQLCHORUS_TOKEN``, is required to bind anywhere else). Needs the ``mcp`` extra.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from sqlchorus.config.errors import SqlchorusError, UnknownTableError
from sqlchorus.interfaces.http_guard import Guard
from sqlchorus.runs.databases import EXECUTE_ROWS
from sqlchorus.runs.integrations import TOOL_ROWS
from sqlchorus.runs.result import tool_answer
from sqlchorus.runs.service import RunService, ServiceError, TaughtEntry
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.search import search
from sqlchorus.tools.schema.views import render_view

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
"""Every tool but ``teach`` only reads: nothing it does changes a database."""
TEACHES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
"""``teach`` adds an entry to the examples store (never to a database), which later runs read; a
second call with the same question is refused, not repeated."""


class AskOutput(BaseModel):
    """``ask``'s structured output: :data:`~sqlchorus.runs.result.TOOL_FIELDS` of the run's answer
    (:func:`~sqlchorus.runs.result.tool_answer`), the LangChain tool's fields. Validated from that
    dict, which may hold no other field."""

    model_config = ConfigDict(extra="forbid")

    sql: str | None = Field(description="The chosen query, or null when none answered.")
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list, description=f"At most {TOOL_ROWS} rows.")
    truncated: bool = Field(False, description="Whether the result had more rows than these.")
    confidence: float | None = Field(None, description="How much the candidates agreed on this answer (0 to 1).")
    run_id: str = Field("", description="The run's id: its trace is sqlchorus://runs/{run_id}/trace.")
    error: str | None = Field(None, description="Why there is no answer, when there is none.")


class QueryOutput(BaseModel):
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    row_count: int = 0
    truncated: bool = False
    elapsed_ms: float = 0.0
    error: dict[str, str] | None = Field(None, description="{code, message} when the query was refused or failed.")


class ValidateOutput(BaseModel):
    valid: bool
    plan: list[str] = Field(default_factory=list, description="The engine's query plan, one step a line.")
    error: dict[str, str] | None = Field(None, description="{code, message} when the query would not run.")


class ExamplesOutput(BaseModel):
    examples: list[TaughtEntry] = Field(default_factory=list, description="Oldest first.")


def _failed(output: BaseModel, code: str, message: str) -> CallToolResult:
    """A tool result marked as an error, with its ``code`` in the structured output."""
    data = output.model_dump()
    data["error"] = {"code": code, "message": message}
    return CallToolResult(content=[TextContent(type="text", text=f"{code}: {message}")],
                          structured_content=data, is_error=True)


def _refused(kind: str, message: str) -> CallToolResult:
    """A tool result marked as an error, in one line: ``kind: message`` (the SDK's own wording
    of a raised error would come first)."""
    return CallToolResult(content=[TextContent(type="text", text=f"{kind}: {message}")], is_error=True)


def build_server(service: RunService, *, host: str = "127.0.0.1") -> MCPServer:
    """The MCP server over ``service``'s databases."""
    server = MCPServer(
        "sqlchorus",
        instructions=(
            "Answers questions about databases (SQLite, PostgreSQL, DuckDB) with checked SQL. Call "
            "list_databases first: it says each database's engine, whose SQL dialect queries must use; "
            "ask answers a question in plain language; search_schema and describe_table show the "
            "schema a little at a time; execute_sql and validate_sql run or plan a read query. "
            "teach keeps a question and SQL the user has confirmed (or a glossary term) so that later "
            "answers follow it; call it only after the user said an answer is right. list_examples "
            "lists what is taught. Nothing here can change a database."
        ),
    )

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def ask(question: str, ctx: Context, database: str | None = None, evidence: str = "") -> AskOutput:
        """Answer a question about a database in plain language: writes SQL, checks it against the
        database, runs it (read only) and returns the SQL with its rows. `database` may be left
        out when there is one; `evidence` is a hint that defines the question's terms."""
        try:
            live = await asyncio.to_thread(partial(service.start, question, database, evidence, client=_client(ctx),
                                                   origin="mcp"))
        except SqlchorusError as e:
            return _failed(AskOutput(sql=None), e.kind, str(e))
        finished = 0
        try:
            async for event in live.listen():
                if event["event"] == "node" and event["state"] == "finished":
                    finished += 1
                    await ctx.report_progress(finished, None, f"{event['node']} finished")
        finally:
            if live.status not in ("done", "failed", "cancelled"):
                live.cancel.set()
        record = await service.wait(live)
        result = record.get("result") or {}
        # A run that failed before it had an answer has its error only: no SQL, and the live run's id.
        output = AskOutput.model_validate({"sql": None, "run_id": live.run_id, **tool_answer(result, TOOL_ROWS)})
        if record["status"] != "done" or result.get("kind") == "model_failed":
            kind = result.get("kind") or record["status"]
            return _failed(output, kind, result.get("error") or f"The run {record['status']}.")
        return output

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def list_databases() -> dict[str, Any]:
        """The databases this server answers over: id, file name (or URL without password), engine
        (sqlite, postgresql, duckdb: the SQL dialect to write), number of tables and columns."""
        return {"databases": await asyncio.to_thread(service.databases)}

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def search_schema(pattern: str, database: str | None = None,
                            detail: Literal["names", "summary", "full"] = "names") -> dict[str, Any]:
        """Find tables and columns whose names match `pattern` (case-insensitive; `*` or `%`
        for any text, `?` or `_` for one character; with neither, the text anywhere in the
        name). `detail`: `names` (column names only), `summary` (types, keys, row counts) or
        `full` (also foreign keys, descriptions, sample values). At most 100 tables."""
        return search(await _schema(service, database), pattern, detail)

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def describe_table(table: str, database: str | None = None) -> dict[str, Any]:
        """Everything about one table: columns with types, keys, descriptions and sample
        values, foreign keys and row count."""
        try:
            return await asyncio.to_thread(service.describe, table, database)
        except (ServiceError, UnknownTableError) as e:
            raise ToolError(f"{e.kind}: {e}") from None

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def execute_sql(sql: str, ctx: Context, database: str | None = None,
                          max_rows: int = EXECUTE_ROWS) -> QueryOutput:
        """Run one read query, in the database's dialect (its `engine` in list_databases), through
        the guard and return its rows, at most `max_rows`
        (1000 at most). Anything but a single read query is refused; errors come with a code:
        not_a_query, forbidden, timeout, resource, execution, too_long, too_deep."""
        try:
            return QueryOutput(**await asyncio.to_thread(partial(service.query, sql, database, max_rows,
                                                                 client=_client(ctx))))
        except SqlchorusError as e:
            return _failed(QueryOutput(), e.kind, str(e))

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def validate_sql(sql: str, database: str | None = None) -> ValidateOutput:
        """Check one read query without running it: parse it, and have its engine plan it (unknown
        tables or columns, syntax errors and refused statements are found). Returns the plan."""
        try:
            return ValidateOutput(valid=True, plan=await asyncio.to_thread(service.plan, sql, database))
        except SqlchorusError as e:
            return _failed(ValidateOutput(valid=False), e.kind, str(e))

    @server.tool(annotations=TEACHES, structured_output=True)
    async def teach(ctx: Context, database: str | None = None, question: str = "", sql: str = "", hint: str = "",
                    term: str = "", meaning: str = "", run_id: str | None = None) -> TaughtEntry:
        """Keep what the user has confirmed about a database, so that later answers follow it:
        a `question` with the `sql` that answers it (and a `hint` it needs), or a glossary `term`
        with its `meaning` and/or a SQL condition `sql` (`status = 'A'`). Call it only after the
        user said the answer is right. The SQL must be one read query that returns rows; the
        same question taught twice is refused. `run_id`: the run it came from (from ask)."""
        if term and question:
            return _refused("invalid_request", "Give a question and its sql, or a term, not both.")
        try:
            if term:
                entry = await asyncio.to_thread(partial(service.teach_term, database, term, meaning, sql,
                                                        author=_client(ctx), run_id=run_id, source="mcp"))
            else:
                entry = await asyncio.to_thread(partial(service.teach, database, question, sql, hint,
                                                        author=_client(ctx), run_id=run_id, source="mcp"))
        except SqlchorusError as e:
            return _refused(e.kind, service.public_message(e))
        return TaughtEntry(**entry)

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def list_examples(database: str | None = None,
                            kind: Literal["example", "term"] | None = None) -> ExamplesOutput:
        """The questions and SQL taught for a database (every database's when `database` is left
        out), and its glossary terms; `kind`: only `example`s or only `term`s."""
        try:
            entries = await asyncio.to_thread(service.teaching.entries, database, kind)
        except SqlchorusError as e:
            return _refused(e.kind, service.public_message(e))
        return ExamplesOutput(examples=[TaughtEntry(**entry) for entry in entries])

    @server.resource("sqlchorus://databases/{database}/schema", mime_type="text/plain",
                     description="A database's schema: tables, columns, keys and sample values.")
    def database_schema(database: str) -> str:
        try:
            return render_view(service.schema(database), "m-schema")
        except ServiceError as e:
            raise ResourceNotFoundError(str(e)) from None

    @server.resource("sqlchorus://runs/{run_id}/trace", mime_type="application/x-ndjson",
                     description="A run's trace: one OpenTelemetry span per line (JSON).")
    def run_trace(run_id: str) -> str:
        try:
            return service.trace(run_id)
        except ServiceError as e:
            raise ResourceNotFoundError(str(e)) from None

    return server


def _client(ctx: Context) -> str | None:
    """Who sent the request, for the per-client share of each database's statement workers: its
    remote address over HTTP; nobody in particular over stdio (one client)."""
    request = ctx.request_context.request
    client = getattr(request, "client", None)
    return client.host if client else None


async def _schema(service: RunService, database: str | None) -> DatabaseSchema:
    try:
        return await asyncio.to_thread(service.schema, database)
    except ServiceError as e:
        raise ToolError(f"{e.kind}: {e}") from None


def http_app(server: MCPServer, *, host: str, token: str | None) -> Any:
    """The server over streamable HTTP at ``/mcp``, behind the guard: the token when there is
    one, and the Host and Origin checks always (the SDK's own turn on for three exact loopback
    spellings only)."""
    app = server.streamable_http_app(host=host)
    return Guard(app, token, max_body_bytes=1024 * 1024, host=host)
