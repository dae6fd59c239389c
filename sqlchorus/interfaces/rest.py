"""The REST API: ``sqlchorus serve``, on FastAPI, over a :class:`~sqlchorus.runs.service.RunService`.

Endpoints (all under ``/v1``; the OpenAPI document at ``/openapi.json``):

* ``POST /ask`` answers a question and returns the answer; ``POST /ask/stream`` answers it as
  server-sent events (``run``, ``node``, ``candidate``, ``answer``, ``error``, ``done``).
* ``POST /runs`` starts a run and returns its id at once; ``GET /runs/{id}`` reads it,
  ``DELETE /runs/{id}`` cancels it, ``POST /runs/{id}/resume`` goes on from its newest
  checkpoint, ``GET /runs/{id}/events`` follows it, ``/trace`` and ``/history`` show it.
* ``GET /databases`` and ``GET /databases/{id}/schema``; ``GET /health`` (503 ``degraded`` while
  the checkpoint store cannot be reached).

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
import html
import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import BaseModel, Field
from sse_starlette.sse import EventSourceResponse

from sqlchorus.core.checkpoints import FINISHED
from sqlchorus.interfaces.http_guard import Guard, client_of, error_response, install_error_handlers
from sqlchorus.runs.service import (
    LiveRun,
    RunService,
    ServiceError,
    model_failure,
)

MAX_BODY_BYTES = 64 * 1024
"""Largest request body taken; a question is limited by ``--max-question-chars`` besides."""
OPEN_PATHS = frozenset({"/v1/health"})
"""Paths that need no token (a load balancer's health check)."""

NO_CONTROL_CHARACTERS = r"^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]*$"
"""Text without control characters but tab, newline and carriage return (what a question and its
hint may hold: anything else is refused with 422 ``invalid_request``)."""


class AskRequest(BaseModel):
    """A question for the server."""

    # The constraints are the service's, said in the schema: refused there, an empty question
    # keeps its own kind (422 empty_question).
    question: str = Field(description="The question, in plain language: not empty, no control characters "
                                      "but tab, newline and carriage return.",
                          json_schema_extra={"minLength": 1, "pattern": NO_CONTROL_CHARACTERS})
    database: str | None = Field(None, description="The database's id; may be left out when the server has one.")
    evidence: str = Field("", description="A hint that defines terms the question uses; no control characters "
                                          "but tab, newline and carriage return.",
                          json_schema_extra={"pattern": NO_CONTROL_CHARACTERS})


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
    """Whether the server can take runs."""

    status: str = Field(description="`ok`, or `degraded` (503) while the checkpoint store cannot be reached.")
    store: str = Field(description="`ok`, `unreachable` or `none` (no checkpoints).")
    running: int
    queued: int
    max_pending: int = Field(description="Runs, running and queued, the server takes at most.")
    unsaved_runs: int = Field(description="Ends of runs the store has not taken yet.")
    store_error: str | None = Field(None, description="Why the store cannot be reached (never where it is).")


KINDS = {
    400: {"invalid_json": "the body is not JSON",
          "invalid_request": "the request is not valid HTTP (a Content-Length that is not a number of bytes)"},
    401: {"unauthorized": "the server has a token (SQLCHORUS_TOKEN) and the request does not carry it"},
    403: {"forbidden_host": "the Host is not a name this server answers",
          "cross_site": "a request from another site, port or origin that would change something"},
    404: {"unknown_run": "no run has that id (ids are matched exactly)",
          "unknown_database": "this server serves no database of that id"},
    409: {"cancelled": "the run was cancelled",
          "run_finished": "the run has ended, or is still running or stopping",
          "already_resumed": "another resume of the run is under way",
          "no_checkpoints": "no checkpoints to go on from (or the server keeps none)",
          "run_elsewhere": "the run runs on another server: poll GET /v1/runs/{run_id}",
          "checkpoints_damaged": "the checkpoint store is damaged (the server's log says how to recover it)"},
    413: {"question_too_long": "the question or hint is over the server's --max-question-chars",
          "payload_too_large": "the body is over the server's --max-body-bytes"},
    422: {"empty_question": "the question is empty",
          "invalid_request": "the body does not fit the schema, or the question or hint holds a control character"},
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


def trace_context(request: Request) -> Any:
    """The caller's trace context from a W3C ``traceparent`` header, or None."""
    if "traceparent" not in request.headers:
        return None
    return TraceContextTextMapPropagator().extract(carrier=dict(request.headers))


def create_app(service: RunService, *, token: str | None = None, max_body_bytes: int = MAX_BODY_BYTES,
               host: str | None = None) -> Any:
    """The REST API over ``service``, as an ASGI app (FastAPI inside a token and size guard;
    ``host``: the address it listens on, whose names it answers)."""
    app = FastAPI(
        title="sqlchorus", version="1",
        description="Ask questions about SQLite, PostgreSQL and DuckDB databases; get checked SQL and its answer.",
        docs_url=None, redoc_url=None,
    )
    app.state.service = service

    install_error_handlers(app, public=service.public_message)
    _without_default_validation_errors(app)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """The endpoints, from the OpenAPI document, as a page that needs nothing from elsewhere."""
        return HTMLResponse(docs_page(app.openapi()))

    @app.get("/v1/health", responses={
        200: {"model": Health, "description": "The server can take runs."},
        503: {"model": Health, "description": "`degraded`: the checkpoint store cannot be reached."},
        **{status: entry for status, entry in _errors().items() if status != 401}})
    async def health() -> Any:
        """Whether the server can take runs: ``status`` ok, or degraded (with 503) while its
        checkpoint store cannot be reached; ``store`` (ok, unreachable, none), runs running and
        queued, ``max_pending`` (the most it takes) and ``unsaved_runs`` (run ends not yet stored)."""
        data = await asyncio.to_thread(service.health)
        return JSONResponse(data, status_code=200 if data["status"] == "ok" else 503)

    @app.get("/v1/databases", responses=_errors())
    async def databases() -> dict[str, Any]:
        """The databases this server answers over."""
        return {"databases": await asyncio.to_thread(service.databases)}

    @app.get("/v1/databases/{database}/schema", responses=_errors(404, s404=("unknown_database",)))
    async def schema(database: str) -> dict[str, Any]:
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

    @app.post("/v1/ask/stream", responses=_errors(400, 404, 413, 422, 429, 503, **ASKING))
    async def ask_stream(body: AskRequest, request: Request) -> EventSourceResponse:
        """Answer a question as server-sent events: ``run``, ``node`` (started, finished),
        ``candidate``, ``answer`` or ``error``, and ``done``. A client that goes away cancels
        its run."""
        live = await asyncio.to_thread(service.start, body.question, body.database, body.evidence,
                                       trace_context=trace_context(request), client=client_of(request))
        return EventSourceResponse(_events(service, live, cancel_on_close=True), ping=15)

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

    @app.delete("/v1/runs/{run_id}", status_code=202, responses=_errors(
        404, 409, 503, s404=("unknown_run",), s409=("run_finished", "checkpoints_damaged")))
    async def cancel_run(run_id: str) -> dict[str, Any]:
        """Cancel a run, on whichever server runs it: it stops before its next node."""
        status = await asyncio.to_thread(service.cancel, run_id)
        return {"run_id": run_id, "status": status}

    @app.post("/v1/runs/{run_id}/resume", status_code=202, responses=_errors(
        404, 409, 413, 429, 503, s409=("run_finished", "already_resumed", "no_checkpoints", "checkpoints_damaged"),
        s413=("payload_too_large",)))
    async def resume_run(run_id: str, request: Request) -> dict[str, Any]:
        """Go on with a cancelled or stopped run from its newest checkpoint, as a new run."""
        live = await asyncio.to_thread(service.resume, run_id, trace_context=trace_context(request))
        return _started(live)

    @app.get("/v1/runs/{run_id}/events", responses=_errors(404, 409, 503, s404=("unknown_run",),
                                                             s409=("run_elsewhere", "checkpoints_damaged")))
    async def run_events(run_id: str) -> Any:
        """A run's events as server-sent events, from its first (for a run of this server), or
        its end (for one that ended elsewhere)."""
        live = service.live(run_id)
        if live is None:
            record = await asyncio.to_thread(service.get, run_id)
            if record["status"] not in FINISHED:
                return error_response(409, "run_elsewhere",
                                      f"Run {run_id} runs on another server; poll GET /v1/runs/{run_id}.")
            return EventSourceResponse(_ended(record))
        return EventSourceResponse(_events(service, live, cancel_on_close=False), ping=15)

    @app.get("/v1/runs/{run_id}/trace", responses=_errors(404, 409, 503, s404=("unknown_run",),
                                                            s409=("checkpoints_damaged",)))
    async def run_trace(run_id: str) -> PlainTextResponse:
        """A run's trace: one OpenTelemetry span per line (JSON)."""
        text = await asyncio.to_thread(service.trace, run_id)
        return PlainTextResponse(text, media_type="application/x-ndjson")

    @app.get("/v1/runs/{run_id}/history", responses=_errors(404, 409, 503, s404=("unknown_run",),
                                                              s409=("no_checkpoints", "checkpoints_damaged")))
    async def run_history(run_id: str) -> dict[str, Any]:
        """A run's checkpoints, oldest first."""
        return {"run_id": run_id, "checkpoints": await asyncio.to_thread(service.history, run_id)}

    return Guard(app, token, max_body_bytes, open_paths=OPEN_PATHS, host=host)


def _without_default_validation_errors(app: FastAPI) -> None:
    """Drop FastAPI's own 422 (``{"detail": [...]}``, a body this server never sends) from the
    OpenAPI document: each route lists the errors it gives, in their one shape."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = generate()
            for operations in spec.get("paths", {}).values():
                for operation in operations.values():
                    invalid = operation.get("responses", {}).get("422")
                    if invalid is not None and "HTTPValidationError" in json.dumps(invalid):
                        del operation["responses"]["422"]
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
