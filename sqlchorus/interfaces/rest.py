"""The REST API: ``sqlchorus serve``, on FastAPI, over a :class:`~sqlchorus.runs.service.RunService`.

Endpoints (all under ``/v1``; the OpenAPI document at ``/openapi.json``):

* ``POST /ask`` answers a question and returns the answer; ``POST /ask/stream`` answers it as
  server-sent events (``run``, ``node``, ``candidate``, ``answer``, ``error``, ``done``).
* ``POST /runs`` starts a run and returns its id at once; ``GET /runs/{id}`` reads it,
  ``POST /runs/{id}/cancel`` cancels it (the run and its checkpoints stay), ``POST
  /runs/{id}/resume`` goes on from its newest checkpoint, ``GET /runs/{id}/events`` follows it,
  ``/trace`` and ``/history`` show it.
* ``POST /teach`` keeps a verified question and its SQL (or a glossary term) for a database, which
  later runs' prompts show; ``POST /runs/{id}/feedback`` teaches a run's question with its SQL
  (said correct) or with the right SQL; ``GET /examples``, ``GET`` and ``DELETE /examples/{id}``.
* ``GET /databases`` and ``GET /databases/{id}/schema``; ``GET /health``: ``ok``, or ``degraded``
  while the checkpoint store cannot be reached (then with 503: no run is taken) or runs' traces
  cannot be written. It is answered from what the server knows, never waiting for the store.

A server refuses what it cannot do now, with a ``Retry-After`` header: 429 ``queue_full`` beyond
its runs running and queued, 503 ``store_unavailable`` while its store is away.

Every error is JSON, ``{"error": {"kind": ..., "message": ...}}``, with a ``kind`` that stays the
same across versions; the OpenAPI document lists the errors each endpoint can answer. A message
never says where the checkpoint store is (the server's log does). With a token
(``SQLCHORUS_TOKEN``), every request but ``/v1/health`` needs ``Authorization: Bearer TOKEN``.
An incoming W3C ``traceparent`` makes the run's spans part of the caller's trace. Needs the
``serve`` extra: ``pip install 'sqlchorus[serve]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi import Path as PathPart
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import EventSourceResponse

from sqlchorus.core.checkpoints import FINISHED
from sqlchorus.core.tracing import RUN_ID
from sqlchorus.interfaces.http_guard import Guard, client_of, error_response, install_error_handlers
from sqlchorus.runs.service import (
    MAX_AUTHOR_CHARS,
    LiveRun,
    RunService,
    ServiceError,
    TaughtEntry,
    model_failure,
)
from sqlchorus.runs.teach import MAX_SQL_CHARS, MAX_TERM_CHARS

MAX_BODY_BYTES = 64 * 1024
"""Largest request body taken; a question is limited by ``--max-question-chars`` besides."""
OPEN_PATHS = frozenset({"/v1/health"})
"""Paths that need no token (a load balancer's health check)."""

NO_CONTROL_CHARACTERS = r"^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]*$"
"""Text without control characters but tab, newline and carriage return (what a question and its
hint may hold: anything else is refused with 422 ``invalid_request``)."""
_TEXT = r"[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]"
NOT_BLANK = rf"^{_TEXT}*[^\s\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]{_TEXT}*$"
"""Text as :data:`NO_CONTROL_CHARACTERS` says, with a character that is not white space: a
question, or SQL, of spaces only (a no-break space included) is refused as empty."""


class AskRequest(BaseModel):
    """A question for the server."""

    # The constraints are the service's, said in the schema: refused there, an empty question
    # keeps its own kind (422 empty_question).
    question: str = Field(description="The question, in plain language: not empty nor white space only, no "
                                      "control characters but tab, newline and carriage return.",
                          json_schema_extra={"minLength": 1, "pattern": NOT_BLANK})
    database: str | None = Field(None, description="The database's id; may be left out when the server has one.")
    evidence: str = Field("", description="A hint that defines terms the question uses; no control characters "
                                          "but tab, newline and carriage return.",
                          json_schema_extra={"pattern": NO_CONTROL_CHARACTERS})


NO_CONTROL = {"pattern": NO_CONTROL_CHARACTERS}
"""The schema of text that takes no control characters but tab, newline and carriage return (a
request holding one is refused with 422 ``invalid_request``)."""
FILLED = {"minLength": 1, "pattern": NOT_BLANK}
"""The schema of such text that must say something: not empty nor white space only."""


class _Teaching(BaseModel):
    """What every request that teaches may say besides: the database, who verified it, and the
    run it came from. Nothing else: a key it does not know is refused, not ignored."""

    model_config = ConfigDict(extra="forbid")

    # Named, never implied: what is taught steers every later run over that database.
    database: str = Field(min_length=1, description="The database's id (see `GET /v1/databases`).")
    author: str | None = Field(None, description="Who verified it; the client's address when left out. No control "
                                                 "characters.",
                               json_schema_extra={"maxLength": MAX_AUTHOR_CHARS, **NO_CONTROL})
    run_id: str | None = Field(None, description="The run it came from, if any: one this server's run store knows "
                                                 "(404 `unknown_run` otherwise).",
                               json_schema_extra={"pattern": RUN_ID.pattern})


class TeachExample(_Teaching):
    """A question and the SQL a user verified for it, kept for its database: later runs' prompts
    show it when their question is like it."""

    question: str = Field(description="The question, in plain language: not empty nor white space only, no control "
                                      "characters but tab, newline and carriage return.",
                          json_schema_extra=FILLED)
    # Its length limit is said, not given as maxLength: a schema's maxLength of thousands with a
    # pattern has schema-driven test generators build strings that long, for minutes.
    sql: str = Field(description="Its verified SQL: one read query, in the database's dialect, that returns rows "
                                 f"(the guard checks it, and it is run once); {MAX_SQL_CHARS:,} characters at most.",
                     json_schema_extra=FILLED)
    hint: str = Field("", description="A hint the question needs (what its terms mean), kept with it.",
                      json_schema_extra=NO_CONTROL)


class TeachTerm(_Teaching):
    """A glossary entry: a term of the database's world and what it means. A later question that
    names the term gets its meaning in its hint."""

    term: str = Field(description="The word or phrase.", json_schema_extra={**FILLED, "maxLength": MAX_TERM_CHARS})
    meaning: str = Field("", description="What it means, in words. Give this, `sql`, or both.",
                         json_schema_extra=NO_CONTROL)
    sql: str = Field("", description="What it means as a SQL condition on one of the database's tables "
                                     f"(`status = 'A' AND closed_at IS NULL`), which must run there; {MAX_SQL_CHARS:,} "
                                     "characters at most.",
                     json_schema_extra=NO_CONTROL)


class _Feedback(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hint: str | None = Field(None, description="The hint kept with the question; the run's own by default.",
                             json_schema_extra=NO_CONTROL)
    author: str | None = Field(None, description="Who says so; the client's address when left out.",
                               json_schema_extra={"maxLength": MAX_AUTHOR_CHARS, **NO_CONTROL})


class RunConfirmed(_Feedback):
    """The run's answer is right: its question and final SQL are taught."""

    correct: Literal[True] = Field(description="`true`: the run's SQL answers its question.")


class RunCorrected(_Feedback):
    """The run's answer is wrong, and this is the right SQL: the run's question is taught with it."""

    sql: str = Field(description="The right SQL for the run's question: one read query that returns rows; "
                                 f"{MAX_SQL_CHARS:,} characters at most.",
                     json_schema_extra=FILLED)
    correct: Literal[False] = Field(False, description="May say that the run's answer was wrong.")


class TaughtEntries(BaseModel):
    """Taught entries, oldest first."""

    examples: list[TaughtEntry]


class Error(BaseModel):
    """What went wrong."""

    kind: str = Field(description="What kind of error: stays the same across versions (`unknown_run`, "
                                  "`store_unavailable`, ...).")
    message: str = Field(description="What went wrong, and what to do about it, for a person.")
    run_id: str | None = Field(None, description="The run, for a run that was cancelled or failed.")


class ErrorBody(BaseModel):
    """Every error's body."""

    error: Error


class Health(BaseModel):
    """Whether the server can take runs, and keeps their record."""

    status: str = Field(description="`ok`; `degraded` while the checkpoint store cannot be reached (with 503) or "
                                    "runs' traces cannot be written (with 200: runs are still answered).")
    store: str = Field(description="`ok`, `unreachable` or `none` (no checkpoints); tried every second in the "
                                   "background.")
    traces: str = Field(description="`ok`, `failing` (the latest run's trace could not be written, or the trace "
                                    "folder has no room for the next) or `none` (no trace folder).")
    running: int
    queued: int
    max_pending: int = Field(description="Runs, running and queued, the server takes at most.")
    unsaved_runs: int = Field(description="Ends of runs the store has not taken yet.")
    unwritten_traces: int = Field(description="Runs since the server started whose trace could not be written.")
    store_error: str | None = Field(None, description="Why the store cannot be reached (never where it is).")
    trace_error: str | None = Field(None, description="Why traces are not written (never where they go).")


KINDS = {
    400: {"invalid_json": "the body is not JSON",
          "invalid_request": "the request is not valid HTTP (a Content-Length that is not a number of bytes)"},
    401: {"unauthorized": "the server has a token (SQLCHORUS_TOKEN) and the request does not carry it"},
    403: {"forbidden_host": "the Host is not a name this server answers",
          "cross_site": "a request from another site, port or origin that would change something"},
    404: {"unknown_run": "no run has that id (ids are matched exactly)",
          "unknown_database": "this server serves no database of that id",
          "unknown_taught": "no taught entry has that id on the databases this server serves"},
    409: {"already_taught": "the question (or term) is taught already on the database: remove that entry first",
          "no_examples_store": "this server keeps no taught examples (--no-taught)",
          "no_answer": "the run has no SQL to confirm: give the right SQL instead",
          "cancelled": "the run was cancelled",
          "run_finished": "the run has ended, or is still running or stopping",
          "trace_not_written": "the run's trace could not be written (its folder full or unwritable), or is gone",
          "already_resumed": "another resume of the run is under way",
          "no_checkpoints": "no checkpoints to go on from (or the server keeps none)",
          "run_elsewhere": "the run runs on another server: poll GET /v1/runs/{run_id}",
          "checkpoints_damaged": "the checkpoint store is damaged (the server's log says how to recover it)"},
    413: {"question_too_long": "the question or hint is over the server's --max-question-chars",
          "payload_too_large": "the body is over the server's --max-body-bytes"},
    422: {"empty_question": "the question is empty",
          "invalid_request": "the body does not fit the schema, or the question or hint holds a control character",
          "taught": "not taught: an empty or over-long question, SQL the guard refuses or that returns no rows, a "
                    "term without a meaning or whose SQL runs on no table"},
    429: {"queue_full": "the server has as many runs as it takes: try again after Retry-After seconds"},
    500: {"internal": "the server failed (no traceback is sent)"},
    502: {"model_failed": "the model failed and no query came out"},
    503: {"store_unavailable": "the checkpoint store cannot be reached: try again after Retry-After seconds"},
}
"""Each status's error kinds, for the OpenAPI document."""
GUARDED = {400: ("invalid_request",), 401: ("unauthorized",), 403: ("forbidden_host", "cross_site")}
"""What the guard may answer on any path (but 401 on /v1/health), with its kinds."""


def _errors(*statuses: int, **only: tuple[str, ...]) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of errors ``statuses`` and the guard's, each with the error
    body's schema and its kinds (``only``: ``s404=("unknown_run",)`` narrows those of a status)."""
    responses: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*GUARDED, *statuses}):
        default = tuple(KINDS[status]) if status in statuses else GUARDED[status]
        kinds = only.get(f"s{status}", default)
        entry: dict[str, Any] = {"model": ErrorBody, "description": "; ".join(
            f"`{kind}`: {KINDS[status][kind]}" for kind in kinds) + "."}
        if status in (429, 503):
            entry["headers"] = {"Retry-After": {"description": "Seconds to wait before trying again.",
                                                "schema": {"type": "integer"}}}
        responses[status] = entry
    return responses


ASKING = dict(s404=("unknown_database",))
"""What a request that starts a run meets: 404 for its database only."""
TEACHING = dict(s404=("unknown_database", "unknown_run"),
                s409=("already_taught", "no_examples_store", "checkpoints_damaged"),
                s413=("payload_too_large",), s422=("taught", "invalid_request"))
"""What a request that teaches meets."""
READING_TAUGHT = dict(s409=("no_examples_store", "checkpoints_damaged"))
"""What a request that reads or removes taught entries meets besides its 404."""


EVENTS = ("run", "node", "candidate", "answer", "error", "done")
"""The server-sent events of a run, in the order they come (``node`` and ``candidate`` repeat)."""
EVENT_STREAM = {"text/event-stream": {"itemSchema": {
    "type": "object", "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "enum": list(EVENTS)},
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": {
            "type": "object", "required": ["event", "run_id"],
            "properties": {"event": {"type": "string", "enum": list(EVENTS)}, "run_id": {"type": "string"}}}},
        "id": {"type": "string"}, "retry": {"type": "integer"}}}}}
"""What each event of a stream is (OpenAPI 3.2's ``itemSchema``): its name, and its data as JSON
that names it again with the run's id."""


class EventStream(EventSourceResponse):
    """Server-sent events, as the OpenAPI document names their media type."""

    media_type = "text/event-stream"


class JsonLines(PlainTextResponse):
    """JSON lines (one span per line), as the OpenAPI document names their media type."""

    media_type = "application/x-ndjson"


def trace_context(request: Request) -> Any:
    """The caller's trace context from a W3C ``traceparent`` header, or None."""
    if "traceparent" not in request.headers:
        return None
    return TraceContextTextMapPropagator().extract(carrier=dict(request.headers))


def create_app(service: RunService, *, token: str | None = None, max_body_bytes: int = MAX_BODY_BYTES,
               host: str | None = None) -> Any:
    """The REST API over ``service``, as an ASGI app (FastAPI inside a token and size guard;
    ``host``: the address it listens on, whose names it answers). When the ASGI server shuts the
    app down (its lifespan's end: SIGTERM, Ctrl-C), the service is closed: its runs end and
    their ends are stored, or kept for the store (see :meth:`RunService.close`)."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        yield
        # Here, not after the server returns: uvicorn raises the SIGTERM it caught again once
        # its shutdown is done, which ends the process before any code after it runs.
        await asyncio.to_thread(service.close)

    app = FastAPI(
        title="sqlchorus", version="1",
        description="Ask questions about SQLite, PostgreSQL and DuckDB databases; get checked SQL and its answer.",
        docs_url=None, redoc_url=None, lifespan=lifespan,
    )
    app.state.service = service

    install_error_handlers(app, public=service.public_message, hint=_moved)
    _without_default_validation_errors(app)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """The endpoints, from the OpenAPI document, as a page that needs nothing from elsewhere."""
        return HTMLResponse(docs_page(app.openapi()))

    @app.get("/v1/health", responses={
        200: {"model": Health, "description": "The server can take runs (`degraded` while their traces cannot be "
                                              "written)."},
        503: {"model": Health, "description": "`degraded`: the checkpoint store cannot be reached."},
        **{status: entry for status, entry in _errors().items() if status != 401}})
    async def health() -> Any:
        """Whether the server can take runs and keeps their record: ``status`` ok, or degraded
        while its checkpoint store cannot be reached (with 503) or its runs' traces cannot be
        written; ``store`` (ok, unreachable, none), ``traces`` (ok, failing, none), runs running
        and queued, ``max_pending`` (the most it takes), ``unsaved_runs`` (run ends not yet
        stored) and ``unwritten_traces``."""
        # On the event loop, from what the service knows: never behind a worker thread, a lock of
        # the store or a try of it, however loaded the server is.
        data = service.health()
        return JSONResponse(data, status_code=503 if data["store"] == "unreachable" else 200)

    @app.get("/v1/databases", responses=_errors())
    async def databases() -> dict[str, Any]:
        """The databases this server answers over."""
        return {"databases": await asyncio.to_thread(service.databases)}

    @app.get("/v1/databases/{database}/schema", responses=_errors(404, s404=("unknown_database",)))
    async def schema(database: str = PathPart(description="A database's id (see `GET /v1/databases`).",
                                              examples=list(service.paths))) -> dict[str, Any]:
        """A database's tables, columns and foreign keys."""
        found = await asyncio.to_thread(service.schema, database)
        return {"database": database, "tables": [
            {"name": t.name, "rows": t.row_count, "is_view": t.is_view,
             "columns": [{"name": c.name, "type": c.type, "primary_key": c.primary_key, "not_null": c.not_null,
                          "description": c.description} for c in t.columns],
             "foreign_keys": [{"column": f.column, "ref_table": f.ref_table, "ref_column": f.ref_column}
                              for f in t.foreign_keys]}
            for t in found.tables]}

    @app.post("/v1/ask", responses=_errors(400, 404, 409, 413, 422, 429, 500, 502, 503, **ASKING,
                                           s409=("cancelled",), s500=("internal",)))
    async def ask(body: AskRequest, request: Request) -> Any:
        """Answer a question; the answer comes back when the run ends. A client that goes away
        cancels its run."""
        live = await asyncio.to_thread(service.start, body.question, body.database, body.evidence,
                                       trace_context=trace_context(request), client=client_of(request))
        record = await _wait_or_cancel(service, live, request)
        return _answer(record)

    @app.post("/v1/ask/stream", response_class=EventStream, responses={
        200: {"description": "The run's events, as server-sent events.", "content": EVENT_STREAM},
        **_errors(400, 404, 413, 422, 429, 503, **ASKING)})
    async def ask_stream(body: AskRequest, request: Request) -> EventSourceResponse:
        """Answer a question as server-sent events: ``run``, ``node`` (started, finished),
        ``candidate``, ``answer`` or ``error``, and ``done``. A client that goes away cancels
        its run."""
        live = await asyncio.to_thread(service.start, body.question, body.database, body.evidence,
                                       trace_context=trace_context(request), client=client_of(request))
        return EventStream(_events(service, live, cancel_on_close=True), ping=15)

    @app.post("/v1/runs", status_code=202, responses=_errors(400, 404, 413, 422, 429, 503, **ASKING))
    async def start_run(body: AskRequest, request: Request) -> dict[str, Any]:
        """Start a run; read it with ``GET /v1/runs/{id}``."""
        live = await asyncio.to_thread(service.start, body.question, body.database, body.evidence,
                                       trace_context=trace_context(request), client=client_of(request))
        return _started(live)

    @app.get("/v1/runs/{run_id}", responses=_errors(404, 409, 503, s404=("unknown_run",),
                                                      s409=("checkpoints_damaged",)))
    async def get_run(run_id: str) -> dict[str, Any]:
        """A run's status, and its answer once it has ended."""
        return await asyncio.to_thread(service.get, run_id)

    @app.post("/v1/runs/{run_id}/cancel", status_code=202, responses=_errors(
        404, 409, 413, 503, s404=("unknown_run",), s409=("run_finished", "checkpoints_damaged"),
        s413=("payload_too_large",)))
    async def cancel_run(run_id: str) -> dict[str, Any]:
        """Cancel a run, on whichever server runs it: it stops before its next node; the run and
        its checkpoints stay (resume it with ``POST /v1/runs/{id}/resume``)."""
        status = await asyncio.to_thread(service.cancel, run_id)
        return {"run_id": run_id, "status": status}

    @app.post("/v1/runs/{run_id}/resume", status_code=202, responses=_errors(
        404, 409, 413, 429, 503, s409=("run_finished", "already_resumed", "no_checkpoints", "checkpoints_damaged"),
        s413=("payload_too_large",)))
    async def resume_run(run_id: str, request: Request) -> dict[str, Any]:
        """Go on with a cancelled or stopped run from its newest checkpoint, as a new run."""
        live = await asyncio.to_thread(service.resume, run_id, trace_context=trace_context(request))
        return _started(live)

    @app.get("/v1/runs/{run_id}/events", response_class=EventStream, responses={
        200: {"description": "The run's events, as server-sent events.", "content": EVENT_STREAM},
        **_errors(404, 409, 503, s404=("unknown_run",), s409=("run_elsewhere", "checkpoints_damaged"))})
    async def run_events(run_id: str) -> Any:
        """A run's events as server-sent events, from its first (for a run of this server), or
        its end (for one that ended elsewhere)."""
        live = service.live(run_id)
        if live is None:
            record = await asyncio.to_thread(service.get, run_id)
            if record["status"] not in FINISHED:
                return error_response(409, "run_elsewhere",
                                      f"Run {run_id} runs on another server; poll GET /v1/runs/{run_id}.")
            return EventStream(_ended(record))
        return EventStream(_events(service, live, cancel_on_close=False), ping=15)

    @app.get("/v1/runs/{run_id}/trace", response_class=JsonLines, responses={
        200: {"description": "The run's spans, one JSON object per line."},
        **_errors(404, 409, 503, s404=("unknown_run",),
                  s409=("trace_not_written", "run_finished", "checkpoints_damaged"))})
    async def run_trace(run_id: str) -> PlainTextResponse:
        """A run's trace: one OpenTelemetry span per line (JSON). A run whose trace could not be
        written (or is gone) is 409 ``trace_not_written``; one still running with no span written
        yet, 409 ``run_finished``."""
        text = await asyncio.to_thread(service.trace, run_id)
        return JsonLines(text)

    @app.get("/v1/runs/{run_id}/history", responses=_errors(404, 409, 503, s404=("unknown_run",),
                                                              s409=("no_checkpoints", "checkpoints_damaged")))
    async def run_history(run_id: str) -> dict[str, Any]:
        """A run's checkpoints, oldest first."""
        return {"run_id": run_id, "checkpoints": await asyncio.to_thread(service.history, run_id)}

    _teaching_routes(app, service)
    return Guard(app, token, max_body_bytes, open_paths=OPEN_PATHS, host=host)


TAUGHT = {"model": TaughtEntry, "description": "The entry kept."}
"""A taught entry as the OpenAPI document shows a response that gives one."""
ENTRY_ID = PathPart(description="A taught entry's id (`e` for an example, `t` for a term, then 9 hex digits); "
                                "an id of another form names no entry (404).",
                    json_schema_extra={"pattern": "^[et][0-9a-f]{9}$"})
"""A taught entry's id in a path. Its form is said, not enforced: an id of another form is 404."""


def _teaching_routes(app: FastAPI, service: RunService) -> None:
    """The routes that teach and read taught examples and glossary entries: ``POST /v1/teach``,
    ``POST /v1/runs/{id}/feedback``, ``GET /v1/examples``, ``GET`` and ``DELETE
    /v1/examples/{id}``. Each entry names its database by its id here."""

    @app.post("/v1/teach", status_code=201, response_model=None, responses={
        201: {**TAUGHT, "headers": {"Location": {"description": "The entry's URL.", "schema": {"type": "string"}}}},
        **_errors(400, 404, 409, 413, 422, 503, **TEACHING)})
    async def teach(body: TeachExample | TeachTerm, request: Request) -> JSONResponse:
        """Keep a question and the SQL a user verified for it (``question``, ``sql``, ``hint``), or a
        glossary term (``term``, with its ``meaning`` and/or a SQL condition ``sql``), for a
        database: later runs over it show the examples most like their question in their
        prompts, and add the meaning of each term their question names to their hint. The SQL
        goes through the guard and must return rows; a question taught already is 409."""
        author = _author(body.author, request)
        if isinstance(body, TeachTerm):
            entry = await asyncio.to_thread(service.teach_term, body.database, body.term, body.meaning, body.sql,
                                            author=author, run_id=body.run_id, source="rest")
        else:
            entry = await asyncio.to_thread(service.teach, body.database, body.question, body.sql, body.hint,
                                            author=author, run_id=body.run_id, source="rest")
        return _created(entry)

    @app.post("/v1/runs/{run_id}/feedback", status_code=201, response_model=None, responses={
        201: {**TAUGHT, "headers": {"Location": {"description": "The entry's URL.", "schema": {"type": "string"}}}},
        **_errors(400, 404, 409, 413, 422, 503, s404=("unknown_run", "unknown_database"),
                  s409=("run_finished", "no_answer", "already_taught", "no_examples_store", "checkpoints_damaged"),
                  s413=("payload_too_large",), s422=("taught", "invalid_request"))})
    async def run_feedback(run_id: str, body: RunConfirmed | RunCorrected, request: Request) -> JSONResponse:
        """Say whether a run's answer was right, which teaches its question: ``{"correct": true}``
        with the run's final SQL, ``{"sql": ...}`` with the right SQL instead. The run must have
        ended; it may be another server's, over a database this one serves."""
        entry = await asyncio.to_thread(service.feedback, run_id, correct=body.correct,
                                        sql=body.sql if isinstance(body, RunCorrected) else None, hint=body.hint,
                                        author=_author(body.author, request), source="rest")
        return _created(entry)

    @app.get("/v1/examples", response_model=None, responses={
        200: {"model": TaughtEntries, "description": "The entries, oldest first."},
        **_errors(404, 409, 422, 503, s404=("unknown_database",), s422=("invalid_request",), **READING_TAUGHT)})
    async def examples(
        # Typed without None: a query parameter left out is absent, never null (an OpenAPI
        # document that allowed null would have clients send the text "null").
        database: str = Query(None, description="A database's id; every database this server serves when left out.",
                              examples=list(service.paths)),
        kind: Literal["example", "term"] = Query(None, description="Only examples, or only glossary terms; both when "
                                                                   "left out."),
    ) -> dict[str, Any]:
        """The taught examples and glossary terms of a database, or of every database this
        server serves."""
        return {"examples": await asyncio.to_thread(service.teaching.entries, database, kind)}

    @app.get("/v1/examples/{example_id}", response_model=None, responses={
        200: {"model": TaughtEntry, "description": "The entry."},
        **_errors(404, 409, 503, s404=("unknown_taught",), **READING_TAUGHT)})
    async def example(example_id: str = ENTRY_ID) -> dict[str, Any]:
        """One taught example or glossary term."""
        return await asyncio.to_thread(service.teaching.entry, example_id)

    @app.delete("/v1/examples/{example_id}", response_model=None, responses={
        200: {"model": TaughtEntry, "description": "The entry removed."},
        **_errors(404, 409, 503, s404=("unknown_taught",), **READING_TAUGHT)})
    async def forget_example(example_id: str = ENTRY_ID) -> dict[str, Any]:
        """Remove a taught example or glossary term: no later run's prompt shows it. The same
        question may then be taught again."""
        return await asyncio.to_thread(service.teaching.remove, example_id)


def _author(given: str | None, request: Request) -> str:
    """Who teaches: the author a request names, else the client's address (who a request is,
    here as for the per-client share of statement workers). An empty name names nobody: it is
    the client's address too, never the server's own login name."""
    if given is not None and given.strip():
        return given.strip()
    return client_of(request) or "unknown client"


def _created(entry: dict[str, Any]) -> JSONResponse:
    return JSONResponse(entry, status_code=201, headers={"Location": f"/v1/examples/{entry['id']}"})


def _moved(method: str, path: str) -> str | None:
    """What a request of a method a path does not take may have meant (a 405's hint)."""
    parts = path.strip("/").split("/")
    if method == "DELETE" and len(parts) == 3 and parts[:2] == ["v1", "runs"]:
        # DELETE cancelled a run before; a run it named stayed, as a deletion would not.
        return f"To cancel the run: POST {path.rstrip('/')}/cancel."
    return None


def _without_default_validation_errors(app: FastAPI) -> None:
    """Drop FastAPI's own 422 (``{"detail": [...]}``, a body this server never sends) from the
    OpenAPI document: each route lists the errors it gives, in their one shape; and give every
    error its media type, JSON, where FastAPI gives it the route's (a stream's, a trace's)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = generate()
            for operations in spec.get("paths", {}).values():
                for operation in operations.values():
                    invalid = operation.get("responses", {}).get("422")
                    if invalid is not None and "HTTPValidationError" in json.dumps(invalid):
                        del operation["responses"]["422"]
                    for status, response in operation.get("responses", {}).items():
                        content = response.get("content") or {}
                        error = str(status).isdigit() and int(status) >= 400
                        if error and content and "application/json" not in content:
                            response["content"] = {"application/json": next(iter(content.values()))}
            schemas = spec.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi


def docs_page(spec: dict[str, Any]) -> str:
    """A plain page listing every endpoint of ``spec`` with its summary and description."""
    rows = []
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            text = html.escape(op.get("description") or op.get("summary") or "")
            rows.append(f"<tr><td><code>{html.escape(method.upper())}</code></td><td><code>{html.escape(path)}</code></td>"
                        f"<td>{text}</td></tr>")
    title = html.escape(spec.get("info", {}).get("title", "API"))
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + title + " API</title>"
            "<style>body{font:15px system-ui,sans-serif;margin:2em}td{padding:4px 10px;vertical-align:top}"
            "tr:nth-child(odd){background:#f4f4f4}</style></head><body>"
            f"<h1>{title} API</h1><p>The OpenAPI document: <a href='/openapi.json'>/openapi.json</a>.</p>"
            "<table>" + "".join(rows) + "</table></body></html>")


def _started(live: LiveRun) -> dict[str, Any]:
    return {"run_id": live.run_id, "status": live.status, "links": {
        "self": f"/v1/runs/{live.run_id}", "events": f"/v1/runs/{live.run_id}/events"}}


def _answer(record: dict[str, Any]) -> Any:
    result = record.get("result") or {}
    status = record["status"]
    if status == "cancelled":
        return error_response(409, "cancelled", "The run was cancelled.", run_id=record["run_id"])
    if status == "failed":
        return error_response(500 if result.get("kind") == "internal" else 502, result.get("kind", "internal"),
                              result.get("error", "The run failed."), run_id=record["run_id"])
    if result.get("kind") == "model_failed":
        return error_response(502, "model_failed", model_failure(result.get("error"), result.get("errors", [])),
                              run_id=record["run_id"])
    return result


async def _wait_or_cancel(service: RunService, live: LiveRun, request: Request) -> dict[str, Any]:
    """The run's record once it ends; if the client goes away first, the run is cancelled."""
    waiting = asyncio.ensure_future(service.wait(live))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        if gone in done and waiting not in done:
            await asyncio.to_thread(_cancel_quietly, service, live)
        return await waiting
    finally:
        gone.cancel()


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _cancel_quietly(service: RunService, live: LiveRun) -> None:
    if live.status not in FINISHED:
        try:
            service.cancel(live.run_id)
        except ServiceError:
            pass


async def _events(service: RunService, live: LiveRun, *, cancel_on_close: bool) -> Any:
    try:
        async for event in live.listen():
            yield {"event": event["event"], "data": json.dumps(event, default=str, ensure_ascii=False)}
    finally:
        # The client went away before the run ended: nobody is left to take its answer. Called,
        # not awaited: the generator is being cancelled, and an await here would not finish.
        if cancel_on_close:
            _cancel_quietly(service, live)


async def _ended(record: dict[str, Any]) -> Any:
    result = record.get("result") or {}
    if record["status"] == "done" and result.get("kind") != "model_failed":
        yield {"event": "answer", "data": json.dumps({"event": "answer", "run_id": record["run_id"], "answer": result},
                                                     default=str, ensure_ascii=False)}
    elif record["status"] != "done" or result:
        yield {"event": "error", "data": json.dumps({"event": "error", "run_id": record["run_id"],
                                                     "kind": result.get("kind", record["status"]),
                                                     "message": result.get("error", f"The run {record['status']}.")})}
    yield {"event": "done", "data": json.dumps({"event": "done", "run_id": record["run_id"], "status": record["status"]})}
