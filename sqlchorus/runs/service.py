"""Questions answered for servers: runs in the background, watched as they go, cancelled, kept.

A :class:`RunService` holds one :class:`~sqlchorus.runs.session.Session` over a fixed set of databases,
each known by an id, and runs questions on a pool of worker threads. Each run is a
:class:`LiveRun` while this process runs it: its events (nodes started and finished, candidates,
the answer) go to whoever listens, in order. Its status, result and trace also go to the
checkpoint store, so that every server sharing the store (a SQLite file on one machine, a
PostgreSQL database across several) can read a run, cancel it or resume it, whichever server
started it. The REST API (:mod:`sqlchorus.interfaces.rest`) and the MCP server (:mod:`sqlchorus.interfaces.mcp_server`)
are thin layers over this.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context

from sqlchorus.config.errors import (
    NoCheckpointsError,
    RunFinishedError,
    ServiceError,
    SqlchorusError,
    UnknownDatabaseError,
    UnknownRunIdError,
)
from sqlchorus.config.settings import Settings
from sqlchorus.core.checkpoint_history import checkpoint_history
from sqlchorus.core.checkpoints import FINISHED, UnknownRunError
from sqlchorus.core.tracing import NodeEvent, new_run_id, valid_run_id
from sqlchorus.runs.demo import demo_db_path
from sqlchorus.runs.integrations import tool_result
from sqlchorus.runs.result import Result
from sqlchorus.runs.session import Session, checked_question

DEFAULT_WORKERS = 8
"""Runs one server answers at once; more wait (``queued``) for a worker."""
KEPT_RUNS = 1000
"""Finished runs kept in memory for their events; older ones are read from the store."""
__all__ = ["LiveRun", "NoCheckpointsError", "RunFinishedError", "RunService", "ServiceError",
           "UnknownDatabaseError", "UnknownRunIdError", "answer_json", "model_failed", "model_failure"]

HEARTBEAT_S = 30.0
"""How often a running run says in the store that it still runs (at a node's start)."""
STALE_AFTER_S = 900.0
"""A run the store says is running, unchanged for this long, has lost its server: it is read as
failed (kind ``stale``), and can be resumed."""
EVENT_LIMIT = 10_000
"""Events one run keeps at most (a run's nodes, candidates and answer are far fewer)."""


@dataclass
class LiveRun:
    """A run this process is running or has run: its events, and its result once it ends."""

    run_id: str
    question: str
    database: str
    kind: str = "ask"
    parent: str | None = None
    status: str = "queued"
    result: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    future: Future | None = None
    _listeners: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def emit(self, name: str, /, **data: Any) -> None:
        """Tell every listener of event ``name`` with ``data``, in order; one that comes later
        gets the events so far first."""
        event = {"event": name, "run_id": self.run_id, **data}
        with self._lock:  # scheduled under the lock: every listener gets the events in one order
            if len(self.events) >= EVENT_LIMIT and name not in ("answer", "error", "done"):
                return
            self.events.append(event)
            for loop, queue in self._listeners:
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, event)
                except RuntimeError:  # its loop has closed: the listener is gone
                    pass

    async def listen(self) -> AsyncIterator[dict[str, Any]]:
        """Every event of the run, from its first, until ``done``."""
        queue: asyncio.Queue = asyncio.Queue()
        entry = (asyncio.get_running_loop(), queue)
        with self._lock:
            past = list(self.events)
            self._listeners.append(entry)
        try:
            for event in past:
                yield event
                if event["event"] == "done":
                    return
            while True:
                event = await queue.get()
                yield event
                if event["event"] == "done":
                    return
        finally:
            with self._lock:
                if entry in self._listeners:
                    self._listeners.remove(entry)

    def record(self) -> dict[str, Any]:
        # A cancel takes effect before the next node: until then the run says it is stopping.
        status = "cancelling" if self.cancel.is_set() and self.status not in FINISHED else self.status
        return {"run_id": self.run_id, "status": status, "question": self.question,
                "database": self.database, "kind": self.kind, "parent": self.parent, "result": self.result}


def answer_json(result: Result, database: str, max_rows: int | None = None) -> dict[str, Any]:
    """A run's answer as JSON: what the tool gives (SQL, columns, rows, truncated, confidence, run
    id, error) and the candidates, cost, problems met and seconds."""
    rows = max_rows if max_rows is not None else max(len(result.rows), 1)
    data = tool_result(result, rows)
    data.update({
        "question": result.question,
        "database": database,
        "ok": result.ok,
        "candidates": [
            {k: c.get(k) for k in ("id", "generator", "sql", "status", "error", "error_kind", "row_count",
                                    "fix_attempts")}
            for c in result.candidates
        ],
        "selection": {k: v for k, v in result.selection.items() if k in ("method", "confidence", "reason", "winner")},
        "errors": [dict(e) for e in result.errors],
        "cost": result.cost,
        "seconds": round(result.seconds, 4),
    })
    return data


def _age_s(stamp: str) -> float:
    try:
        return (datetime.now(timezone.utc) - datetime.fromisoformat(stamp)).total_seconds()
    except (TypeError, ValueError):
        return 0.0


def model_failure(error: str | None, errors: list[dict[str, Any]]) -> str:
    """What to tell of a run whose model failed: why there is no answer, and the model's own
    first complaint."""
    first = next((e["message"] for e in errors if e.get("kind") == "model"), "")
    return f"{error or 'The model failed.'} {first}".strip()


def model_failed(result: Result) -> bool:
    """Whether ``result`` has no answer because its models failed (every call, or enough of
    them that no query came out), not because the question had none."""
    return not result.ok and any(e.get("kind") == "model" for e in result.errors)


class RunService:
    """Questions over ``databases`` (id → SQLite file; the demo database alone when empty).

    Args:
        databases: the databases this service answers over, by id.
        settings: every run's settings (models, checkpoints, tracing, limits).
        model: a chat model for every role (overrides ``settings.model``).
        workers: runs answered at once.

    Raises:
        ServiceError: two databases share an id; DatabaseOpenError: a file is not SQLite.
    """

    def __init__(self, databases: Mapping[str, str | Path] | None = None, settings: Settings | None = None, *,
                 model: Any = None, workers: int = DEFAULT_WORKERS):
        self.settings = settings or Settings()
        self.session = Session(self.settings, model=model)
        self.paths: dict[str, Path] = {k: Path(v) for k, v in (databases or {"demo": demo_db_path()}).items()}
        for db_id, path in self.paths.items():
            self.session.database(path)  # opened now: a bad file is found before a request is
        self.store = self.session.checkpoints(self.settings)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="sqlchorus-run")
        self._runs: OrderedDict[str, LiveRun] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    @staticmethod
    def database_ids(paths: list[str | Path]) -> dict[str, Path]:
        """Ids for ``paths``: each file's name without its extension.

        Raises:
            ServiceError: two files would share an id.
        """
        ids: dict[str, Path] = {}
        for path in paths:
            db_id = Path(path).stem
            if db_id in ids:
                raise ServiceError(f"Two databases would both be called {db_id!r}: {ids[db_id]} and {path}. "
                                   "Give files of different names.")
            ids[db_id] = Path(path)
        return ids

    # -- databases ----------------------------------------------------------------------------

    def resolve(self, database: str | None) -> tuple[str, Path]:
        """The id and file of ``database``; None names the only one there is.

        Raises:
            UnknownDatabaseError: no such id, or none given where there are several.
        """
        if not database:
            if len(self.paths) == 1:
                return next(iter(self.paths.items()))
            raise UnknownDatabaseError(f"Say which database: this server has {', '.join(self.paths)}.")
        if database not in self.paths:
            raise UnknownDatabaseError(f"No database {database!r} here; there are: {', '.join(self.paths)}.")
        return database, self.paths[database]

    def databases(self) -> list[dict[str, Any]]:
        """Each database: id, file name, tables and columns."""
        rows = []
        for db_id, path in self.paths.items():
            schema = self.schema(db_id)
            rows.append({"id": db_id, "file": path.name, "tables": len(schema.tables),
                         "columns": sum(len(t.columns) for t in schema.tables)})
        return rows

    def schema(self, database: str | None):
        """The introspected schema of ``database`` (see :class:`~sqlchorus.tools.schema.DatabaseSchema`)."""
        _, path = self.resolve(database)
        return self.session.database(path).schema

    def guarded(self, database: str | None):
        """The guarded database of ``database``: the only way a request reaches its data."""
        _, path = self.resolve(database)
        return self.session.database(path).db

    # -- runs ---------------------------------------------------------------------------------

    def start(self, question: str, database: str | None = None, evidence: str = "", *,
              trace_context: Any = None) -> LiveRun:
        """Start answering ``question``; the run goes on in a worker thread.

        ``trace_context``: an OpenTelemetry context (from an incoming ``traceparent``) that the
        run's spans nest under.

        Raises:
            EmptyQuestionError, QuestionTooLongError, UnknownDatabaseError.
        """
        question, evidence = checked_question(question, evidence, self.settings.max_question_chars)
        db_id, path = self.resolve(database)
        live = LiveRun(new_run_id(), question, db_id)
        self._begin(live)

        def work() -> Result:
            return self.session.ask(question, path, evidence=evidence, run_id=live.run_id,
                                    progress=self._progress(live), updates=self._updates(live),
                                    cancelled=self._cancelled(live))

        live.future = self._pool.submit(self._run, live, work, trace_context)
        return live

    def resume(self, run_id: str, *, trace_context: Any = None) -> LiveRun:
        """Go on with run ``run_id`` from its newest checkpoint, as a new run (its ``parent`` is
        ``run_id``); model calls it already made are served from its call log.

        Raises:
            UnknownRunIdError, NoCheckpointsError.
        """
        if self.store is None:
            raise NoCheckpointsError("This server keeps no checkpoints (--no-checkpoints): there is nothing to resume.")
        record = self.get(run_id) if self.store.status(run_id) is not None else {"status": "done"}
        if record["status"] == "cancelling":
            raise RunFinishedError(f"Run {run_id} is still stopping: resume it once it has ended.")
        if record["status"] in ("queued", "running"):
            raise RunFinishedError(f"Run {run_id} is still {record['status']}: cancel it first, or wait for it.")
        thread = self._thread_of(run_id)
        try:
            info = self.store.run(thread)
        except UnknownRunError:
            raise UnknownRunIdError(f"No run {run_id!r} in {self.store.path}.") from None
        served = {str(Path(p).resolve()): k for k, p in self.paths.items()}
        db_id = served.get(str(Path(info["db_path"] or "").resolve()))
        if db_id is None:
            raise UnknownDatabaseError(f"Run {run_id} was asked over a database this server does not serve.")
        if not list(self.store.list({"configurable": {"thread_id": thread}}, limit=1)):
            raise NoCheckpointsError(f"Run {run_id} has no checkpoints to go on from.")
        live = LiveRun(new_run_id(), info["question"], db_id, kind="resume", parent=run_id)
        self._begin(live)

        def work() -> Result:
            return self.session.replay(thread, latest=True, new_run_id=live.run_id, progress=self._progress(live),
                                       updates=self._updates(live), cancelled=self._cancelled(live))

        live.future = self._pool.submit(self._run, live, work, trace_context)
        return live

    def get(self, run_id: str) -> dict[str, Any]:
        """The run's status record: status, question, database, and its result once it ended.

        Raises:
            UnknownRunIdError: neither this server nor the store knows the run.
        """
        with self._lock:
            live = self._runs.get(run_id)
        if live is not None:
            return live.record()
        record = self.store.status(run_id) if self.store is not None else None
        if record is None:
            raise UnknownRunIdError(f"No run {run_id!r}.")
        if record["status"] not in FINISHED and _age_s(record["updated"]) > STALE_AFTER_S:
            # Its server stopped without ending it (it was stopped, or crashed): it is over.
            record["status"] = "failed"
            record["result"] = {"kind": "stale", "error": f"The server running it stopped updating it at {record['updated']}."}
        record.pop("owner", None)
        record.pop("cancel_requested", None)
        record.pop("updated", None)
        return record

    def _thread_of(self, run_id: str) -> str:
        """The checkpoint thread of ``run_id``: its own, or for a resumed run the thread of the
        run it went on with (resumes of resumes followed back, within bounds)."""
        thread = run_id
        for _ in range(100):
            record = self.store.status(thread) if self.store is not None else None
            if record is None or record["kind"] != "resume" or not record["parent"]:
                return thread
            thread = record["parent"]
        return thread

    def live(self, run_id: str) -> LiveRun | None:
        """The run, if this process runs it (or ran it lately)."""
        with self._lock:
            return self._runs.get(run_id)

    def cancel(self, run_id: str) -> str:
        """Stop run ``run_id`` before its next node, wherever it runs; returns its status then
        (``cancelling`` while the node under way ends).

        Raises:
            UnknownRunIdError; RunFinishedError: it has already ended.
        """
        with self._lock:
            live = self._runs.get(run_id)
        if live is not None:
            if live.status in FINISHED:
                raise RunFinishedError(f"Run {run_id} has already ended ({live.status}).")
            live.cancel.set()
            if live.status == "queued" and live.future is not None and live.future.cancel():
                self._finish(live, "cancelled", None, None)
                return "cancelled"
            return "cancelling"
        record = self.get(run_id)
        if record["status"] in FINISHED:
            raise RunFinishedError(f"Run {run_id} has already ended ({record['status']}).")
        if self.store is None or not self.store.request_cancel(run_id):
            raise RunFinishedError(f"Run {run_id} is not running.")
        return "cancelling"

    async def wait(self, live: LiveRun) -> dict[str, Any]:
        """The run's record once it has ended."""
        if live.future is not None:
            try:
                await asyncio.wrap_future(live.future)
            except BaseException:  # its end is in the record
                pass
        await asyncio.to_thread(live.done.wait)
        return live.record()

    def trace(self, run_id: str) -> str:
        """The run's trace as JSON lines: its file, else what the store kept when it ended.

        Raises:
            UnknownRunIdError: no trace for that run here.
        """
        if self.settings.trace_folder and valid_run_id(run_id):
            path = Path(self.settings.trace_folder) / f"{run_id}.jsonl"
            if path.is_file():
                return path.read_text(encoding="utf-8")
        text = self.store.trace(run_id) if self.store is not None else None
        if text is None:
            self.get(run_id)  # an unknown run says so
            raise UnknownRunIdError(f"Run {run_id} has no trace (yet, or tracing is off).")
        return text

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """The run's checkpoints, oldest first (see :func:`sqlchorus.core.checkpoint_history.checkpoint_history`).

        Raises:
            NoCheckpointsError, UnknownRunIdError.
        """
        if self.store is None:
            raise NoCheckpointsError("This server keeps no checkpoints (--no-checkpoints).")
        rows = checkpoint_history(self.session.graph(self.settings, self.store), self._thread_of(run_id))
        if not rows:
            self.get(run_id)
            raise UnknownRunIdError(f"Run {run_id} has no checkpoints.")
        return rows

    def close(self, timeout_s: float = 10.0) -> None:
        """Cancel what is running, wait for it (``timeout_s`` at most) and close the session."""
        self._closed = True
        with self._lock:
            running = [r for r in self._runs.values() if r.status not in FINISHED]
        for live in running:
            live.cancel.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for live in running:  # those a worker never took end here
            if live.future is not None and live.future.cancelled() and not live.done.is_set():
                self._finish(live, "cancelled", None, None)
        deadline = time.monotonic() + timeout_s
        for live in running:
            live.done.wait(max(0.0, deadline - time.monotonic()))
        self.session.close()

    # -- the run itself -----------------------------------------------------------------------

    def _begin(self, live: LiveRun) -> None:
        with self._lock:
            self._runs[live.run_id] = live
            if len(self._runs) > KEPT_RUNS:
                finished = [k for k, r in self._runs.items() if r.status in FINISHED]
                for key in finished[:len(self._runs) - KEPT_RUNS]:
                    del self._runs[key]
        self._store_status(live, "queued", first=True)
        live.emit("run", status="queued", question=live.question, database=live.database, kind=live.kind,
                  parent=live.parent)

    def _run(self, live: LiveRun, work: Any, trace_context: Any) -> None:
        token = otel_context.attach(trace_context) if trace_context is not None else None
        try:
            self._outcome(live, work)
        except Exception as e:  # a fault after the run itself: it still ends, and says what it was
            if not live.done.is_set():
                message = f"The run failed: {type(e).__name__}: {e}"
                live.emit("error", kind="internal", message=message)
                self._finish(live, "failed", {"error": message, "kind": "internal"}, None)
        finally:
            if token is not None:
                otel_context.detach(token)

    def _outcome(self, live: LiveRun, work: Any) -> None:
        if live.cancel.is_set():
            self._finish(live, "cancelled", None, None)
            return
        live.status = "running"
        self._store_status(live, "running")
        try:
            result = work()
        except SqlchorusError as e:  # a model that cannot be set up, a database or store that went away
            live.emit("error", kind=e.kind, message=str(e))
            self._finish(live, "failed", {"error": str(e), "kind": e.kind}, None)
            return
        except Exception as e:  # a fault: the service goes on, the run says what it was
            message = f"The run failed: {type(e).__name__}: {e}"
            live.emit("error", kind="internal", message=message)
            self._finish(live, "failed", {"error": message, "kind": "internal"}, None)
            return
        data = answer_json(result, live.database)
        if result.error == "The run was cancelled.":
            live.emit("error", kind="cancelled", message=result.error)
            self._finish(live, "cancelled", data, result.trace_path)
            return
        if model_failed(result):
            data["kind"] = "model_failed"
            live.emit("error", kind="model_failed", message=model_failure(result.error, result.errors))
        else:
            live.emit("answer", answer=data)
        self._finish(live, "done", data, result.trace_path)

    def _finish(self, live: LiveRun, status: str, result: dict[str, Any] | None, trace_path: str | None) -> None:
        live.result = result
        live.status = status
        trace_text = None
        if trace_path:
            try:
                trace_text = Path(trace_path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                trace_text = None
        self._store_status(live, status, result=result, trace=trace_text)
        live.emit("done", status=status)
        live.done.set()

    def _store_status(self, live: LiveRun, status: str, *, first: bool = False, **kw: Any) -> None:
        if self.store is None:
            return
        try:
            if first:
                self.store.set_status(live.run_id, status, owner=self.owner, question=live.question,
                                      database=live.database, kind=live.kind, parent=live.parent)
            else:
                self.store.set_status(live.run_id, status, **kw)
        except self.store.db_errors as e:  # the run goes on; other servers see less of it
            self.store.lost(e)

    def _progress(self, live: LiveRun) -> Any:
        def told(event: NodeEvent) -> None:
            kind = "started" if event.kind == "start" else "finished"
            live.emit("node", node=event.node, state=kind, seconds=round(event.seconds, 4))
        return told

    def _updates(self, live: LiveRun) -> Any:
        seen: set[tuple[str, str]] = set()

        def told(chunk: dict[str, Any]) -> None:
            for node, update in chunk.items():
                if not isinstance(update, dict):
                    continue
                for candidate in update.get("candidates") or []:
                    if not isinstance(candidate, dict):
                        continue
                    key = (str(candidate.get("id")), str(candidate.get("status")) + str(candidate.get("sql")))
                    if key in seen:
                        continue
                    seen.add(key)
                    live.emit("candidate", node=node, candidate={
                        k: candidate.get(k) for k in ("id", "generator", "sql", "status", "error", "row_count",
                                                      "fix_attempts")})
        return told

    def _cancelled(self, live: LiveRun) -> Any:
        touched = [time.monotonic()]

        def asked() -> bool:
            if live.cancel.is_set() or self._closed:
                return True
            if self.store is not None:
                try:
                    if self.store.cancel_requested(live.run_id):
                        live.cancel.set()
                    if time.monotonic() - touched[0] > HEARTBEAT_S:  # still running: others may wait
                        self.store.touch(live.run_id)
                        touched[0] = time.monotonic()
                except self.store.db_errors:
                    return False
            return live.cancel.is_set()
        return asked
