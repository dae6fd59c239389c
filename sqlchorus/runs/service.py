"""Questions answered for servers: runs in the background, watched as they go, cancelled, kept.

A :class:`RunService` holds one :class:`~sqlchorus.runs.session.Session` over a fixed set of databases,
each known by an id, and runs questions on a pool of worker threads. Each run is a
:class:`LiveRun` while this process runs it: its events (nodes started and finished, candidates,
the answer) go to whoever listens, in order. Its status, result and trace also go to the
checkpoint store, so that every server sharing the store (a SQLite file on one machine, a
PostgreSQL database across several) can read a run, cancel it or resume it, whichever server
started it. The REST API (:mod:`sqlchorus.interfaces.rest`) and the MCP server (:mod:`sqlchorus.interfaces.mcp_server`)
are thin layers over this.

Teaching (verified question–SQL pairs and glossary terms, see :mod:`sqlchorus.runs.teach`) goes
through :class:`Teaching`, which the REST API, the MCP server and the LangChain toolkit share: the
same refusals with the same kinds and statuses, entries naming their database by its id.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from opentelemetry import context as otel_context
from pydantic import BaseModel, Field

from sqlchorus.config.errors import (
    NoCheckpointsError,
    RunFinishedError,
    ServiceError,
    SqlchorusError,
    UnknownDatabaseError,
    UnknownRunIdError,
)
from sqlchorus.config.settings import Settings, user_traces
from sqlchorus.core.checkpoint_history import checkpoint_history
from sqlchorus.core.checkpoints import FINISHED, CheckpointDamagedError, CheckpointFileError, UnknownRunError
from sqlchorus.core.tracing import NodeEvent, new_run_id, valid_run_id
from sqlchorus.runs.databases import Databases, database_ids
from sqlchorus.runs.demo import demo_db_path
from sqlchorus.runs.result import LOCAL_FIELDS, Result, answer_json
from sqlchorus.runs.retention import Retention
from sqlchorus.runs.session import Session, checked_question
from sqlchorus.runs.teach import (
    EXAMPLE,
    TERM,
    DuplicateTaughtError,
    NoExamplesStoreError,
    TaughtError,
    Teacher,
    UnknownTaughtError,
    exported,
)
from sqlchorus.tools.engines.opening import database_key as engine_key
from sqlchorus.tools.engines.opening import database_name
from sqlchorus.tools.examples.taught import entry_id

DEFAULT_WORKERS = 8
"""Runs one server answers at once; more wait (``queued``) for a worker."""
KEPT_RUNS = 1000
"""Finished runs kept in memory for their events; older ones are read from the store."""
__all__ = ["AlreadyResumedError", "AlreadyTaughtError", "ControlCharacterError", "ExamplesOffError", "LiveRun",
           "NoAnswerError", "NoCheckpointsError", "QueueFullError", "RunFinishedError", "RunService", "ServiceError",
           "StoreUnavailableError", "TeachRefusedError", "Teaching", "TraceNotWrittenError", "UnknownDatabaseError",
           "UnknownExampleError", "UnknownRunIdError", "answer_json", "model_failed", "model_failure",
           "served_answer"]

MISSED_HEARTBEATS = 3
"""Heartbeats a run's server may miss before the run's lease runs out (``settings.run_heartbeat_s``
apart): the run has lost its server, is read as failed (kind ``stale``), and any server may cancel
or resume it."""
STALE_AFTER_S = 900.0
"""A run recorded without a lease (by an older version) that is unchanged for this long is stale."""
PROBE_EVERY_S = 1.0
"""How often the store keeper tries the store, reachable or not: what ``/v1/health`` says of it
is at most this old, and while it is unreachable requests are refused at once, without trying it."""
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
"""A run's end the store did not take is written again after ``RETRY_FIRST_S``, doubling up to this."""
RETRY_FOR_S = 24 * 3600.0
"""How long a run's end is kept in memory for the store at most; after that it goes to the kept
runs' folder (see :data:`KEPT_FOLDER`)."""
SAVE_ON_STOP_S = 5.0
"""How long a server asked to stop tries to write to the store the ends of runs it has not taken;
what is left then goes to the kept runs' folder."""
KEPT_FOLDER = "unsaved"
"""The folder, in the trace folder (else in the per-user data folder), of run ends that a stopping
server could not write to its store: each one a file that any server over the same store, given the
same folder, writes to the store once it is reachable, and then removes."""
CLAIM_STALE_S = 600.0
"""A kept run's file claimed by a server that then never wrote it nor gave it back (it was killed)
is taken up again after this long."""
TRACE_ROOM_BYTES = 1 << 20
"""Free space below which the trace folder is reported full: the next run's trace would not fit."""
PENDING_PER_WORKER = 8
"""Runs, running and queued, a server takes per worker when ``settings.max_pending_runs`` is 0:
a burst of clients waits its turn; beyond it, a client is told to come back (429)."""
QUEUE_RETRY_AFTER_S = 2
"""Retry-After of a refusal because the server has as many runs as it takes."""
_log = logging.getLogger(__name__)


class _TryLater(ServiceError):
    """A refusal that passes: ``retry_after_s`` says when to try again (an HTTP server sends it
    as ``Retry-After``)."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StoreUnavailableError(_TryLater):
    """The checkpoint store (the shared database) cannot be reached: a request that needs it is
    refused at once."""

    kind = "store_unavailable"
    http_status = 503


class QueueFullError(_TryLater):
    """The server has as many runs, running and queued, as it takes."""

    kind = "queue_full"
    http_status = 429

    def __init__(self, message: str, retry_after_s: int = QUEUE_RETRY_AFTER_S):
        super().__init__(message, retry_after_s)


class AlreadyResumedError(RunFinishedError):
    """Another resume of the run is under way (on this server or another)."""

    kind = "already_resumed"
    http_status = 409


class ControlCharacterError(ServiceError):
    """A question or hint holding a control character (a NUL byte, an escape; tab, newline and
    carriage return aside): refused before any store is asked, which could not keep it
    (PostgreSQL takes no NUL in text)."""

    kind = "invalid_request"
    http_status = 422


class TraceNotWrittenError(ServiceError):
    """The run's trace could not be written (its folder full or unwritable), or is gone: there is
    no trace to give, and an empty one would not be the truth."""

    kind = "trace_not_written"
    http_status = 409


class RefusedValueError(ServiceError):
    """The store refused a value of the request (text it cannot hold): the request is at fault,
    not the store, which stays marked reachable."""

    kind = "invalid_request"
    http_status = 422


CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""Unicode's control characters (category Cc) but tab, newline and carriage return: no question or
hint holds one."""
MAX_RUN_ID_CHARS = 200
"""The longest run id looked for; a longer one names no run (ids are 24 characters)."""
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
    thread: str | None = None
    """The checkpoint thread the run writes to: its own id, or for a resume its parent's thread."""
    status: str = "queued"
    trace_error: str | None = None
    """Why the run's trace file could not be written (as clients are told), or None."""
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


def served_answer(result: Result, database: str) -> dict[str, Any]:
    """A run's answer as a server returns it: :func:`~sqlchorus.runs.result.answer_json` with the
    server's id of its database, without the files it names on the server's machine
    (:data:`~sqlchorus.runs.result.LOCAL_FIELDS`)."""
    data = answer_json(result, database)
    for key in LOCAL_FIELDS:
        data.pop(key, None)
    return data


def _age_s(stamp: str) -> float:
    try:
        return (datetime.now(timezone.utc) - datetime.fromisoformat(stamp)).total_seconds()
    except (TypeError, ValueError):
        return 0.0


def _stale(record: dict[str, Any]) -> bool:
    """Whether the unfinished run of store ``record`` lost its server: its lease ran out (or, for
    a run recorded without one, it was last updated :data:`STALE_AFTER_S` ago)."""
    if record.get("lease_until"):
        return _age_s(record["lease_until"]) > 0
    return _age_s(record["updated"]) > STALE_AFTER_S


def _stale_result(record: dict[str, Any]) -> dict[str, Any]:
    since = record.get("lease_until") or record["updated"]
    return {"kind": "stale", "error": f"The server running it stopped renewing its lease; it ran out at {since}."}


def _refuse_control_characters(name: str, text: str) -> None:
    found = CONTROL_CHARACTERS.search(text)
    if found:
        raise ControlCharacterError(
            f"The {name} holds a control character (U+{ord(found.group()):04X}, at character {found.start() + 1}): "
            "a question or hint takes none but tab, newline and carriage return. Remove it and ask again.")


def _refuse_unknown_form(run_id: str) -> None:
    """Raise :class:`UnknownRunIdError` for an id no run can have (a control character, or too
    long for one), before any store is asked."""
    if not isinstance(run_id, str) or not run_id or len(run_id) > MAX_RUN_ID_CHARS or CONTROL_CHARACTERS.search(run_id):
        raise UnknownRunIdError(f"No run {str(run_id)[:MAX_RUN_ID_CHARS]!r}.")


def _value_refused(error: BaseException) -> bool:
    """Whether the store refused a value rather than failed: a DB-API ``DataError`` (PostgreSQL's
    text with a NUL byte, a number out of range), which no store outage causes."""
    return any(cls.__name__ == "DataError" for cls in type(error).__mro__)


def _first_line(error: BaseException | str) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _trace_failure(result: dict[str, Any] | None) -> str | None:
    """Why a run's trace file was not written, from the problems its result lists (those its
    tracer met with the file), or None."""
    for error in (result or {}).get("errors") or []:
        message = error.get("message") if isinstance(error, dict) else None
        if error.get("kind") == "trace" and isinstance(message, str) and "trace file" in message:
            return message
    return None


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a file beside it, flushed to the disk,
    then renamed over it): a reader never finds half of it.

    Raises:
        OSError: it could not be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        with open(partial, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


_LIBPQ_PLACES = [
    # libpq names where it tried to connect, and as whom, in its own words.
    (re.compile(r'(connection to )server at "[^"]*"(?: \([^)]*\))?, port \d+'), r"\1the checkpoint store"),
    (re.compile(r'(connection to )server on socket "[^"]*"'), r"\1the checkpoint store"),
    (re.compile(r'(for |)(user|role|database) "[^"]*"'), r"\1its \2"),
]


def model_failure(error: str | None, errors: list[dict[str, Any]]) -> str:
    """What to tell of a run whose model failed: why there is no answer, and the model's own
    first complaint."""
    first = next((e["message"] for e in errors if e.get("kind") == "model"), "")
    return f"{error or 'The model failed.'} {first}".strip()


def model_failed(result: Result) -> bool:
    """Whether ``result`` has no answer because its models failed (every call, or enough of
    them that no query came out), not because the question had none."""
    return not result.ok and any(e.get("kind") == "model" for e in result.errors)


# -- teaching ------------------------------------------------------------------------------------

MAX_AUTHOR_CHARS = 200
"""Characters an author's name has at most."""
MAX_ENTRY_ID_CHARS = 64
"""The longest taught entry id looked for; a longer one names no entry (ids are 10 characters)."""
EXAMPLES_RETRY_AFTER_S = 5
"""Retry-After of a refusal because an examples store of its own (not the checkpoint store) cannot
be used."""


class TeachRefusedError(ServiceError):
    """A taught example or glossary entry that was not kept: an empty or over-long question, SQL
    the guard refuses or that returns no rows, a term without a meaning; said in one line."""

    kind = "taught"
    http_status = 422


class AlreadyTaughtError(ServiceError):
    """The same question (or term) is taught already on that database: one entry per question,
    so that no prompt shows two answers to it. Remove the old entry to teach it anew."""

    kind = "already_taught"
    http_status = 409


class ExamplesOffError(ServiceError):
    """The server keeps no taught examples (``--no-taught``, or no store to keep them in)."""

    kind = "no_examples_store"
    http_status = 409


class UnknownExampleError(ServiceError):
    """No taught entry of that id on the databases served here."""

    kind = "unknown_taught"
    http_status = 404


class NoAnswerError(ServiceError):
    """A run said to be correct that has no SQL to teach (it failed, was cancelled, or found no
    answer): the right SQL must be given instead."""

    kind = "no_answer"
    http_status = 409


def _refuse_control(*named: tuple[str, str | None]) -> None:
    """Raise :class:`ControlCharacterError` for the first of ``named`` (name, text) that holds a
    control character: no store keeps a NUL byte everywhere, and a prompt shows taught text."""
    for name, text in named:
        found = CONTROL_CHARACTERS.search(text or "")
        if found:
            raise ControlCharacterError(
                f"The {name} holds a control character (U+{ord(found.group()):04X}, at character "
                f"{found.start() + 1}): it takes none but tab, newline and carriage return.")


def _examples_unavailable(error: BaseException) -> ServiceError:
    """What a client is told when an examples store of its own failed: that it cannot be used now
    (where it is, and why, go to the log only)."""
    _log.warning("sqlchorus: the examples store cannot be used: %s", error)
    return StoreUnavailableError("The examples store cannot be reached; try again shortly (the log says why).",
                                 retry_after_s=EXAMPLES_RETRY_AFTER_S)


def public_entry(entry: dict[str, Any], database: str) -> dict[str, Any]:
    """A taught entry as a client sees it: its JSON line form
    (:func:`~sqlchorus.runs.teach.exported`: ``question``, ``sql``, ``hint`` of an example;
    ``term``, ``meaning``, ``sql`` of a glossary entry) with its ``kind``, and its database named by
    the id it is served under, never by its file or URL on the server."""
    line = {k: v for k, v in exported(entry).items() if k not in ("id", "db")}
    return {"id": entry["id"], "kind": entry["kind"], "database": database, **line}


class TaughtEntry(BaseModel):
    """A taught example (`question`, `sql`, `hint`) or glossary entry (`term`, `meaning`, `sql`), as
    the REST API and the MCP server both give it."""

    id: str = Field(description="Its id: one question (or term) on one database has one id.")
    kind: Literal["example", "term"]
    database: str = Field(description="The database's id.")
    question: str | None = Field(None, description="An example's question.")
    hint: str | None = Field(None, description="An example's hint.")
    term: str | None = Field(None, description="A glossary entry's term.")
    meaning: str | None = Field(None, description="A glossary entry's meaning, in words.")
    sql: str = Field(description="An example's SQL; a glossary entry's SQL condition (empty when it has none).")
    author: str = Field(description="Who verified it.")
    created: str = Field(description="When it was taught (ISO 8601, UTC).")
    run_id: str | None = Field(None, description="The run it was taught from, if any.")
    source: str = Field(description="Where it was taught: `rest`, `mcp`, `toolkit`, `cli`, `debug` or `ui`.")


class Teaching:
    """Taught examples and glossary entries over databases known by id, for the REST API, the MCP
    server and the LangChain toolkit: a :class:`~sqlchorus.runs.teach.Teacher` whose refusals and
    store failures are errors a client can act on (each kind with its HTTP status), and whose
    entries name their database by its id.

    Only the databases served are seen: an entry of another database in a shared store is neither
    listed, read nor removed here.

    Args:
        databases: the databases, by id, and the session that opens them.
        ready: called before the store is used; raises while the store is known to be away.
        refuse: what a failure of the store (its driver's error, or one opening it) is told as;
            by default 503 ``store_unavailable``.
    """

    def __init__(self, databases: Databases, *, ready: Callable[[], None] | None = None,
                 refuse: Callable[[BaseException], ServiceError] | None = None):
        self.databases = databases
        self.teacher = Teacher(databases.session)
        self._ready = ready
        self._refuse = refuse or _examples_unavailable

    def teach(self, database: str | None, question: str, sql: str, hint: str = "", *, author: str | None = None,
              run_id: str | None = None, source: str) -> dict[str, Any]:
        """Keep a verified question–SQL pair for database ``database`` (an id; None names the only
        one); the entry kept (:func:`public_entry`). ``author``: who verified it (the login name
        by default); ``run_id``: the run it came from; ``source``: where it was taught.

        Raises:
            ControlCharacterError, TeachRefusedError: the request holds what cannot be kept.
            UnknownDatabaseError; AlreadyTaughtError; ExamplesOffError; StoreUnavailableError.
        """
        _refuse_control(("question", question), ("hint", hint), ("SQL", sql), ("author", author))
        _check_provenance(author, run_id)
        db_id, path = self.databases.resolve(database)
        return self._kept(db_id, EXAMPLE, question, lambda: self.teacher.teach(
            path, question, sql, hint=hint, author=author, run_id=run_id, source=source))

    def teach_term(self, database: str | None, term: str, meaning: str = "", sql: str = "", *,
                   author: str | None = None, run_id: str | None = None, source: str) -> dict[str, Any]:
        """Keep a glossary entry for database ``database``: a term and what it means, in words
        and/or as a SQL condition; the entry kept (:func:`public_entry`).

        Raises:
            as :meth:`teach`.
        """
        _refuse_control(("term", term), ("meaning", meaning), ("SQL", sql), ("author", author))
        _check_provenance(author, run_id)
        db_id, path = self.databases.resolve(database)
        return self._kept(db_id, TERM, term, lambda: self.teacher.teach_term(
            path, term, meaning, sql, author=author, run_id=run_id, source=source))

    def entries(self, database: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """The entries of database ``database`` (an id; every database served when None), of
        ``kind`` (``example``, ``term``; both when None), oldest first.

        Raises:
            UnknownDatabaseError; ExamplesOffError; StoreUnavailableError.
        """
        ids = [self.databases.resolve(database)[0]] if database else list(self.databases.paths)
        out: list[dict[str, Any]] = []
        for db_id in ids:
            name = self._name(db_id)
            rows = self._using_store(lambda: self.teacher.store().taught(name, kind))
            out.extend(public_entry(row, db_id) for row in rows)
        return out

    def entry(self, entry_id: str) -> dict[str, Any]:
        """The entry of id ``entry_id``.

        Raises:
            UnknownExampleError: none of that id on the databases served here.
            ExamplesOffError; StoreUnavailableError.
        """
        if not isinstance(entry_id, str) or not entry_id or len(entry_id) > MAX_ENTRY_ID_CHARS \
                or CONTROL_CHARACTERS.search(entry_id):
            raise UnknownExampleError(f"No taught entry {str(entry_id)[:MAX_ENTRY_ID_CHARS]!r}.")
        names = {self._name(db_id): db_id for db_id in self.databases.paths}
        rows = self._using_store(lambda: self.teacher.store().taught(ids=[entry_id]))
        for row in rows:
            if row["database"] in names:
                return public_entry(row, names[row["database"]])
        raise UnknownExampleError(f"No taught entry {entry_id!r} on {', '.join(self.databases.paths)}.")

    def remove(self, entry_id: str) -> dict[str, Any]:
        """Remove the entry of id ``entry_id``; the entry removed.

        Raises:
            as :meth:`entry`.
        """
        entry = self.entry(entry_id)
        try:
            self._using_store(lambda: self.teacher.remove([entry["id"]]))
        except UnknownTaughtError:  # removed meanwhile, by another request or server
            raise UnknownExampleError(f"No taught entry {entry_id!r}: it was removed meanwhile.") from None
        return entry

    def _kept(self, db_id: str, kind: str, text: str, keep: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``keep()``'s entry as clients see it; a refusal is 422, and one because the same
        question or term is kept already, 409 (naming the database by its id here, never by its
        file)."""
        try:
            entry = self._using_store(keep)
        except DuplicateTaughtError:
            kept = entry_id(self._name(db_id), kind, " ".join(str(text).split()))
            what = "question" if kind == EXAMPLE else "term"
            raise AlreadyTaughtError(f"This {what} is taught already on {db_id} (as {kept}); remove that entry "
                                     "to teach it anew.") from None
        except TaughtError as e:
            raise TeachRefusedError(_first_line(e)) from None
        return public_entry(entry, db_id)

    def _name(self, db_id: str) -> str:
        """The store's name of the database served as ``db_id`` (its file or URL)."""
        return database_name(self.databases.guarded(db_id))

    def _using_store(self, call: Callable[[], Any]) -> Any:
        """``call()``, which uses the examples store: the store off is 409, away or failing 503
        (or what ``refuse`` says), not a fault."""
        if self._ready is not None:
            self._ready()
        try:
            return call()
        except NoExamplesStoreError as e:
            raise ExamplesOffError(_first_line(e)) from None
        except CheckpointDamagedError:
            raise
        except CheckpointFileError as e:
            raise self._refuse(e.__cause__ or e) from None
        except Exception as e:
            if isinstance(e, self._store_errors()):
                raise self._refuse(e) from None
            raise

    def _store_errors(self) -> tuple[type[BaseException], ...]:
        """The errors of the examples store's driver, once it is open."""
        try:
            return tuple(self.teacher.store().db_errors)
        except SqlchorusError:
            return ()


def _check_provenance(author: str | None, run_id: str | None) -> None:
    """Refuse an author over :data:`MAX_AUTHOR_CHARS`, or a run id no run has: a prompt shows the
    run an example came from, so it is never free text."""
    if author is not None and len(author) > MAX_AUTHOR_CHARS:
        raise TeachRefusedError(f"The author has {len(author):,} characters; the limit is {MAX_AUTHOR_CHARS}.")
    if run_id is not None and not valid_run_id(run_id):
        raise TeachRefusedError(f"{run_id[:MAX_RUN_ID_CHARS]!r} is not a run's id (such as 20260101T120000-1a2b3c4d).")


class RunService(Databases):
    """Questions over ``databases`` (id → SQLite file; the demo database alone when empty).

    Args:
        databases: the databases this service answers over, by id.
        settings: every run's settings (models, checkpoints, tracing, limits).
        model: a chat model for every role (overrides ``settings.model``).
        workers: runs answered at once.
        origin: what its runs are said to come from, which names their spans (``serve``; the
            viewer's ``ui``); :meth:`start` may say otherwise per run (MCP's ``mcp``).

    Raises:
        ServiceError: two databases share an id; DatabaseOpenError: a file is not SQLite.
    """

    def __init__(self, databases: Mapping[str, str | Path] | None = None, settings: Settings | None = None, *,
                 model: Any = None, workers: int = DEFAULT_WORKERS, origin: str = "serve"):
        self.settings = settings or Settings()
        self.origin = origin
        Databases.__init__(self, databases or {"demo": demo_db_path()}, Session(self.settings, model=model))
        self.store = self.session.checkpoints(self.settings)
        # Taught examples are kept in the checkpoint store unless settings name another: then
        # that store's outages are the checkpoint store's, refused at once while it is away.
        shared = self.store is not None and self.settings.examples_file == self.settings.checkpoint_file
        self.teaching = Teaching(self, ready=self._store_ready if shared else None,
                                 refuse=self._store_refusal if shared else None)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="sqlchorus-run")
        self._runs: OrderedDict[str, LiveRun] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False
        self._closing = False
        self.heartbeat_s = float(self.settings.run_heartbeat_s)
        self.lease_s = MISSED_HEARTBEATS * self.heartbeat_s
        self.max_pending = self.settings.max_pending_runs or PENDING_PER_WORKER * max(1, workers)
        # The store's state: when it was last found unreachable (None: reachable), why, and
        # when it was last tried; the ends of runs it has not taken yet, by run id.
        self._down_at: float | None = None
        self._down_why = ""
        self._probed_at = 0.0
        self._renewed_at = 0.0
        self._unsaved: dict[str, dict[str, Any]] = {}
        self._places: list[tuple[re.Pattern, str]] | None = None
        # Run ends a stopping server could not store wait in files here for any server over the
        # same store (known by a digest of where it is: the files never say where).
        self.kept_folder = Path(self.settings.trace_folder or user_traces()) / KEPT_FOLDER
        self._store_key = self._key_of_store() if self.store is not None else None
        # The trace folder's state: why the latest run's trace could not be written (None: it
        # was), why the folder cannot take the next one, and how many traces were lost.
        self._trace_failed: str | None = None
        self._trace_room: str | None = None
        self._traces_unwritten = 0
        self._wake = threading.Event()
        self._keeper = threading.Thread(target=self._keep, name="sqlchorus-store", daemon=True)
        self._keeper.start()
        # Old runs go (settings.keep_runs / keep_days) now and after every few finished runs,
        # in a thread of their own: no request waits for a prune.
        self.retention = Retention(self.store, self.settings.trace_folder, keep_runs=self.settings.keep_runs,
                                   keep_days=self.settings.keep_days)
        self.retention.start()

    database_ids = staticmethod(database_ids)

    # -- runs ---------------------------------------------------------------------------------

    def start(self, question: str, database: str | None = None, evidence: str = "", *,
              trace_context: Any = None, client: str | None = None, origin: str | None = None) -> LiveRun:
        """Start answering ``question``; the run goes on in a worker thread.

        ``trace_context``: an OpenTelemetry context (from an incoming ``traceparent``) that the
        run's spans nest under. ``client``: who asked (a server passes the remote address); the
        run's statements hold at most that client's share of the database's statement workers.
        ``origin``: what started the run, which names its span (the service's own by default).

        Raises:
            EmptyQuestionError, QuestionTooLongError, ControlCharacterError, UnknownDatabaseError.
        """
        question, evidence = checked_question(question, evidence, self.settings.max_question_chars)
        for name, text in (("question", question), ("hint", evidence)):
            _refuse_control_characters(name, text)
        db_id, path = self.resolve(database)
        self._store_ready()
        run_id = new_run_id()
        live = LiveRun(run_id, str(question), db_id, thread=run_id)
        self._begin(live)

        def work() -> Result:
            # The checked question and hint: the run does not check them again.
            return self.session.run(question, path, evidence=evidence, run_id=live.run_id,
                                    progress=self._progress(live), updates=self._updates(live),
                                    cancelled=self._cancelled(live), client=client, origin=origin or self.origin)

        live.future = self._pool.submit(self._run, live, work, trace_context)
        return live

    def resume(self, run_id: str, *, trace_context: Any = None, origin: str | None = None) -> LiveRun:
        """Go on with run ``run_id`` from its newest checkpoint, as a new run (its ``parent`` is
        ``run_id``); model calls it already made are served from its call log. ``origin`` names
        its span, as for :meth:`start`.

        Raises:
            UnknownRunIdError, NoCheckpointsError.
        """
        _refuse_unknown_form(run_id)
        if self.store is None:
            self.get(run_id)  # an unknown run says so
            raise NoCheckpointsError("This server keeps no checkpoints (--no-checkpoints): there is nothing to resume.")
        self._store_ready()
        raw = self._reading(self.store.status, run_id)
        record = self.get(run_id) if raw is not None else {"status": "done"}
        if record["status"] == "cancelling":
            raise RunFinishedError(f"Run {run_id} is still stopping: resume it once it has ended.")
        if record["status"] in ("queued", "running"):
            raise RunFinishedError(f"Run {run_id} is still {record['status']}: cancel it first, or wait for it.")
        thread = self._reading(self._thread_of, run_id)
        try:
            info = self._reading(self.store.run, thread)
        except UnknownRunError:
            info = None
        # The store also takes a unique part of an id (as the command line does); a server
        # takes the id itself only.
        if info is None or info["run_id"] != thread:
            if raw is not None:  # a run that was refused or stopped before its first checkpoint
                raise NoCheckpointsError(f"Run {run_id} has no checkpoints to go on from.")
            raise UnknownRunIdError(f"No run {run_id!r}.")
        served = {engine_key(p): k for k, p in self.paths.items()}
        db_id = served.get(engine_key(info["db_path"])) if info["db_path"] else None
        if db_id is None:
            raise UnknownDatabaseError(f"Run {run_id} was asked over a database this server does not serve.")
        if not self._reading(lambda: list(self.store.list({"configurable": {"thread_id": thread}}, limit=1))):
            raise NoCheckpointsError(f"Run {run_id} has no checkpoints to go on from.")
        seen = raw["resume_claim"] if raw is not None else None
        if seen:
            other = self._reading(self.store.status, seen)
            if other is not None and other["status"] not in FINISHED and not _stale(other):
                raise AlreadyResumedError(f"Run {run_id} is being resumed already, as run {seen} ({other['status']}).")
        live = LiveRun(new_run_id(), info["question"], db_id, kind="resume", parent=run_id, thread=thread)
        self._begin(live)
        # The claim is one conditional write: of resumes racing on any servers, one wins.
        claimed = raw is None or self._reading(self.store.claim_resume, run_id, seen, live.run_id)
        if not claimed:
            with self._lock:
                self._runs.pop(live.run_id, None)
            live.status = "cancelled"
            live.done.set()
            try:
                self.store.forget_status(live.run_id)
            except self.store.db_errors as e:
                self._store_failed(e)
            raise AlreadyResumedError(f"Run {run_id} is being resumed already, by another request.")
        if raw is not None and raw["status"] not in FINISHED:  # its server died: it is over for everyone
            try:
                self.store.end_stale(run_id, "failed", _stale_result(raw), STALE_AFTER_S)
            except self.store.db_errors as e:
                self._store_failed(e)

        def work() -> Result:
            return self.session.replay(thread, latest=True, new_run_id=live.run_id, progress=self._progress(live),
                                       updates=self._updates(live), cancelled=self._cancelled(live),
                                       origin=origin or self.origin)

        live.future = self._pool.submit(self._run, live, work, trace_context)
        return live

    def get(self, run_id: str) -> dict[str, Any]:
        """The run's status record: status, question, database, and its result once it ended.

        Raises:
            UnknownRunIdError: neither this server nor the store knows the run.
        """
        _refuse_unknown_form(run_id)
        with self._lock:
            live = self._runs.get(run_id)
        if live is not None:
            return live.record()
        record = self._reading(self.store.status, run_id) if self.store is not None else None
        if record is None:
            raise UnknownRunIdError(f"No run {run_id!r}.")
        if record["status"] not in FINISHED and _stale(record):
            # Its server stopped renewing its lease (it was stopped, or crashed): it is over.
            record["status"] = "failed"
            record["result"] = _stale_result(record)
        for key in ("owner", "cancel_requested", "updated", "lease_until", "resume_claim"):
            record.pop(key, None)
        record["result"] = self._public_result(record.get("result"))
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
        _refuse_unknown_form(run_id)
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
        if record["status"] == "failed" and (record.get("result") or {}).get("kind") == "stale" and self.store:
            # Its server is gone: nobody will act on a request to stop, so the run ends here.
            ended = {"kind": "cancelled", "error": "The run was cancelled after its server stopped."}
            if self._reading(self.store.end_stale, run_id, "cancelled", ended, STALE_AFTER_S):
                return "cancelled"
            record = self.get(run_id)
        if record["status"] in FINISHED:
            raise RunFinishedError(f"Run {run_id} has already ended ({record['status']}).")
        if self.store is None or not self._reading(self.store.request_cancel, run_id):
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
            UnknownRunIdError: no such run. TraceNotWrittenError: its trace could not be
            written (or is gone). RunFinishedError: it is still running, no span written yet.
        """
        _refuse_unknown_form(run_id)
        live = self.live(run_id)
        failure = live.trace_error if live is not None else None
        text = None
        if failure is None and self.settings.trace_folder and valid_run_id(run_id):
            path = Path(self.settings.trace_folder) / f"{run_id}.jsonl"
            if path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
        record = None
        if failure is None and live is None and self.store is not None:
            # A run of another server, or of this one before it started again: what its end
            # says of its trace comes before a file that may have been cut short.
            try:
                record = self.get(run_id)
            except (UnknownRunIdError, StoreUnavailableError):  # its file, if any, is what there is
                record = None
            failure = _trace_failure((record or {}).get("result"))
        if failure is None and text and text.strip():
            return text
        stored = self._reading(self.store.trace, run_id) if self.store is not None and failure is None else None
        if stored and stored.strip():
            return stored
        record = live.record() if live is not None else record or self.get(run_id)  # an unknown run says so
        if failure is not None:
            raise TraceNotWrittenError(f"The trace of run {run_id} could not be written ({failure}); the run "
                                       "itself and its answer are kept.")
        if record["status"] not in FINISHED:
            raise RunFinishedError(f"Run {run_id} is still {record['status']} and no span of it is written yet; "
                                   "read its trace once it has ended.")
        raise TraceNotWrittenError(f"Run {run_id} has no trace: tracing was off for it, or its trace was removed.")

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """The run's checkpoints, oldest first (see :func:`sqlchorus.core.checkpoint_history.checkpoint_history`).

        Raises:
            NoCheckpointsError, UnknownRunIdError.
        """
        _refuse_unknown_form(run_id)
        if self.store is None:
            self.get(run_id)  # an unknown run says so
            raise NoCheckpointsError("This server keeps no checkpoints (--no-checkpoints).")
        rows = self._reading(lambda: checkpoint_history(self.session.graph(self.settings, self.store),
                                                        self._thread_of(run_id)))
        if not rows:
            record = self.get(run_id)  # an unknown run says so
            # A run there is, without a checkpoint: still queued, refused or stopped before its
            # first, or kept while the store was away.
            raise NoCheckpointsError(f"Run {run_id} has no checkpoints (it is {record['status']}).")
        return rows

    # -- teaching -------------------------------------------------------------------------------

    def teach(self, database: str | None, question: str, sql: str, hint: str = "", *, author: str | None = None,
              run_id: str | None = None, source: str = "rest") -> dict[str, Any]:
        """Keep a verified question–SQL pair for ``database`` (see :meth:`Teaching.teach`);
        ``run_id``, the run it came from, must be one this server or its store knows.

        Raises:
            UnknownRunIdError, and what :meth:`Teaching.teach` raises.
        """
        if run_id is not None:
            self.get(run_id)
        return self.teaching.teach(database, question, sql, hint, author=author, run_id=run_id, source=source)

    def teach_term(self, database: str | None, term: str, meaning: str = "", sql: str = "", *,
                   author: str | None = None, run_id: str | None = None, source: str = "rest") -> dict[str, Any]:
        """Keep a glossary entry for ``database`` (see :meth:`Teaching.teach_term`); ``run_id``
        as for :meth:`teach`."""
        if run_id is not None:
            self.get(run_id)
        return self.teaching.teach_term(database, term, meaning, sql, author=author, run_id=run_id, source=source)

    def feedback(self, run_id: str, *, correct: bool = False, sql: str | None = None, hint: str | None = None,
                 author: str | None = None, source: str = "rest") -> dict[str, Any]:
        """Teach what a user said of run ``run_id``'s answer: ``correct`` keeps its question with
        its final SQL; ``sql`` keeps the question with that SQL instead. ``hint`` is kept with it:
        by default the run's own, as its store kept it (with the glossary terms its question
        named). The run may be another server's, over a database this one serves too.

        Raises:
            UnknownRunIdError; RunFinishedError: the run has not ended; NoAnswerError: said
            correct, it has no SQL; TeachRefusedError: neither said; UnknownDatabaseError: its
            database is not served here; and what :meth:`Teaching.teach` raises.
        """
        record = self.get(run_id)
        if record["status"] not in FINISHED:
            raise RunFinishedError(f"Run {run_id} is still {record['status']}: say whether it was right once it "
                                   "has ended.")
        if sql is None:
            if not correct:
                raise TeachRefusedError("Say that the run's answer is correct, or give the right SQL for its question.")
            sql = self._final_sql(run_id, record)
        question, asked_hint, database = self._asked(run_id, record)
        return self.teaching.teach(database, question, sql, asked_hint if hint is None else hint, author=author,
                                   run_id=run_id, source=source)

    @staticmethod
    def _final_sql(run_id: str, record: dict[str, Any]) -> str:
        """The SQL run ``run_id`` answered with.

        Raises:
            NoAnswerError: it has none (it failed, was cancelled, or found no answer).
        """
        answer = record.get("result") or {}
        if record["status"] != "done" or not answer.get("sql") or answer.get("kind") == "model_failed":
            why = "it found no answer" if record["status"] == "done" else f"it {record['status']}"
            raise NoAnswerError(f"Run {run_id} has no SQL to confirm ({why}): give the right SQL instead.")
        return answer["sql"]

    def _asked(self, run_id: str, record: dict[str, Any]) -> tuple[str, str, str]:
        """What run ``run_id`` was asked: its question, its hint and the id its database is
        served under here. From what the store kept of it when it has that, so that a run of
        another server is matched by its database's file or URL, not by its id there."""
        if self.store is not None:
            thread = self._reading(self._thread_of, run_id)
            try:
                info = self._reading(self.store.run, thread)
            except UnknownRunError:
                info = None
            if info is not None and info["run_id"] == thread and info.get("db_path"):
                served = {engine_key(p): k for k, p in self.paths.items()}
                db_id = served.get(engine_key(info["db_path"]))
                if db_id is None:
                    raise UnknownDatabaseError(f"Run {run_id} was asked over a database this server does not serve.")
                return info["question"], info.get("evidence") or "", db_id
        return record["question"], "", self.resolve(record["database"])[0]

    def _store_refusal(self, error: BaseException) -> ServiceError:
        """What a request is told when the checkpoint store, which keeps taught examples too,
        failed with ``error``: a driver's error also marks the store away, as a run's would."""
        if self.store is not None and isinstance(error, self.store.db_errors):
            self._store_failed(error)
            return self._refusal(error)
        return _examples_unavailable(error)

    def close(self, timeout_s: float = 10.0) -> None:
        """Cancel what is running, wait for it (``timeout_s`` at most), write to the store the ends
        of runs it has not taken (:data:`SAVE_ON_STOP_S` at most; what it still refuses goes to
        the kept runs' folder, each run logged), and close the session. Once: a later call (the
        app's shutdown closed it, then its command) does nothing."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
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
        self._wake.set()
        if self._keeper is not None:
            self._keeper.join(max(0.0, deadline - time.monotonic()))
        self.retention.wait(max(0.0, deadline - time.monotonic()))
        if self.store is not None:
            self._save_on_stop()
        self.session.close()

    def _save_on_stop(self) -> None:
        """The ends of runs the store has not taken: written to it when it answers, within
        :data:`SAVE_ON_STOP_S`, else kept in files (:meth:`_keep_in_file`); each one logged."""
        with self._lock:
            if not self._unsaved:
                return
        until = time.monotonic() + SAVE_ON_STOP_S
        if self._down_at is not None:
            self._probe()
        if self._down_at is None:
            with self._lock:
                ids = list(self._unsaved)
            self._flush(force=True, until=until)
            with self._lock:
                stored = [run_id for run_id in ids if run_id not in self._unsaved]
            for run_id in stored:
                _log.warning("sqlchorus: stopping: the end of run %s is now in the checkpoint store", run_id)
        with self._lock:
            left = list(self._unsaved.items())
            self._unsaved.clear()
        for run_id, item in left:
            self._keep_in_file(run_id, item, "the server stopped")

    # -- the run itself -----------------------------------------------------------------------

    def _begin(self, live: LiveRun) -> None:
        with self._lock:
            pending = sum(1 for r in self._runs.values() if r.status not in FINISHED)
            if pending >= self.max_pending:
                raise QueueFullError(f"This server has {pending} runs, running and queued, as many as it takes "
                                     f"({self.max_pending}); try again shortly, or another server.")
            self._runs[live.run_id] = live
            if len(self._runs) > KEPT_RUNS:
                finished = [k for k, r in self._runs.items() if r.status in FINISHED]
                for key in finished[:len(self._runs) - KEPT_RUNS]:
                    del self._runs[key]
        if self.store is not None:
            try:
                self.store.set_status(live.run_id, "queued", owner=self.owner, question=live.question,
                                      database=live.database, kind=live.kind, parent=live.parent, lease_s=self.lease_s)
            except self.store.db_errors as e:
                # A run no other server could see, whose end could be lost: refused instead.
                with self._lock:
                    self._runs.pop(live.run_id, None)
                self._store_failed(e)
                raise self._refusal(e) from None
        live.emit("run", status="queued", question=live.question, database=live.database, kind=live.kind,
                  parent=live.parent)

    def _run(self, live: LiveRun, work: Any, trace_context: Any) -> None:
        token = otel_context.attach(trace_context) if trace_context is not None else None
        try:
            self._outcome(live, work)
        except Exception as e:  # a fault after the run itself: it still ends, and says what it was
            if not live.done.is_set():
                message = self._told(f"The run failed: {type(e).__name__}: {e}", live.run_id)
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
            message = self._told(e, live.run_id)
            live.emit("error", kind=e.kind, message=message)
            self._finish(live, "failed", {"error": message, "kind": e.kind}, None)
            return
        except Exception as e:  # a fault: the service goes on, the run says what it was
            message = self._told(f"The run failed: {type(e).__name__}: {e}", live.run_id)
            live.emit("error", kind="internal", message=message)
            self._finish(live, "failed", {"error": message, "kind": "internal"}, None)
            return
        data = self._public_result(served_answer(result, live.database), live.run_id)
        # A trace folder was named, yet the run has no trace file: say why, from what its
        # tracer met (a full disk, a folder that cannot be written).
        trace_error = None
        if self.settings.trace_folder and not result.trace_path:
            trace_error = _trace_failure(data) or "it was not written"
        if result.error == "The run was cancelled.":
            live.emit("error", kind="cancelled", message=result.error)
            self._finish(live, "cancelled", data, result.trace_path, trace_error)
            return
        if model_failed(result):
            data["kind"] = "model_failed"
            live.emit("error", kind="model_failed", message=model_failure(data["error"], data["errors"]))
        else:
            live.emit("answer", answer=data)
        self._finish(live, "done", data, result.trace_path, trace_error)

    def _finish(self, live: LiveRun, status: str, result: dict[str, Any] | None, trace_path: str | None,
                trace_error: str | None = None) -> None:
        live.result = result
        live.status = status
        trace_text = None
        if trace_path:
            try:
                trace_text = Path(trace_path).read_text(encoding="utf-8", errors="replace")
            except OSError as e:
                trace_error = trace_error or f"its file cannot be read back: {e.strerror or e}"
        if trace_error is not None:
            self._trace_lost(live, trace_error)
        elif trace_text:
            with self._lock:
                self._trace_failed = None  # the folder takes traces again
        self._save_end(live, status, result, trace_text)
        live.emit("done", status=status)
        live.done.set()
        self.retention.finished()

    def _trace_lost(self, live: LiveRun, why: str) -> None:
        """Run ``live`` has no trace (``why``): its trace endpoint and ``/v1/health`` say so."""
        live.trace_error = why
        with self._lock:
            self._trace_failed = why
            self._traces_unwritten += 1
        _log.warning("sqlchorus: run %s has no trace: %s", live.run_id, why)

    def _store_status(self, live: LiveRun, status: str) -> None:
        if self.store is None or self._down_at is not None:  # a store that is away costs no wait
            return
        try:
            self.store.set_status(live.run_id, status, lease_s=self.lease_s)
        except self.store.db_errors as e:  # the run goes on; other servers see less of it until its end
            self.store.lost(e)
            self._store_failed(e)

    def _save_end(self, live: LiveRun, status: str, result: dict[str, Any] | None, trace: str | None) -> None:
        """Write the run's end (what the store did not take of the run, its status, result and
        trace) to the store; one the store does not take now is kept and written again in the
        background, with backoff, until it does."""
        if self.store is None:
            return
        end = {"thread_id": live.run_id, "status": status, "owner": self.owner, "question": live.question,
               "database": live.database, "kind": live.kind, "parent": live.parent, "result": result,
               "trace": trace}
        item = {"end": end, "kept": self.store.take_unwritten(live.thread or live.run_id)}
        if self._down_at is None:
            try:
                self._write_end(item)
                return
            except self.store.db_errors as e:
                if _value_refused(e):  # no later try would do better
                    _log.warning("sqlchorus: the checkpoint store refused the end of run %s: %s", live.run_id, e)
                    return
                self._store_failed(e)
        now = time.monotonic()
        item.update({"since": now, "next": now + RETRY_FIRST_S, "delay": RETRY_FIRST_S})
        with self._lock:
            self._unsaved[live.run_id] = item
        self._wake.set()

    def _write_end(self, item: dict[str, Any]) -> None:
        """Write a run's end: first what the store did not take while it ran (its record, model
        calls and newest checkpoints), then its status, so that a server that reads it ended
        finds all of it."""
        if item.get("kept"):
            self.store.write_unwritten(item["kept"])
            item["kept"] = None
        self.store.set_status(**item["end"])

    # -- run ends kept in files -------------------------------------------------------------------

    def _key_of_store(self) -> str:
        """The store's digest, by which kept runs' files name it without saying where it is."""
        url = getattr(self.store, "url", None)
        place = str(self.store.path) if isinstance(url, str) else str(Path(self.store.path).resolve())
        return hashlib.sha256(place.encode()).hexdigest()[:32]

    def _keep_in_file(self, run_id: str, item: dict[str, Any], why: str) -> None:
        """Write a run's end the store did not take to a file of the kept runs' folder, from which
        a server over the same store writes it once it is reachable; logged either way."""
        data = {"format": 1, "store": self._store_key, "run_id": run_id, "owner": self.owner,
                "kept_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "end": item["end"], "kept": None}
        if item.get("kept"):
            try:
                data["kept"] = self.store.encode_unwritten(item["kept"])
            except (TypeError, ValueError) as e:  # its checkpoints cannot be kept: its end still is
                _log.warning("sqlchorus: run %s: its checkpoints cannot be kept in a file (%s)", run_id, e)
        path = self.kept_folder / f"{run_id}.json"
        try:
            _write_atomically(path, json.dumps(data, default=str, ensure_ascii=False))
        except OSError as e:
            _log.error("sqlchorus: %s and the checkpoint store %s did not take the end of run %s; it could not be "
                       "kept in %s either (%s): it is lost", why, self.store.path, run_id, path, e)
            return
        _log.warning("sqlchorus: %s and the checkpoint store %s did not take the end of run %s: kept in %s, which "
                     "a server over this store, given this folder, writes to it once it is reachable",
                     why, self.store.path, run_id, path)

    def _store_kept_files(self) -> None:
        """Write to the store the run ends kept in files for it (by this server before it stopped,
        or another over the same store and folder), each claimed first so that no two servers
        write one; stop at the first the store does not take."""
        try:
            names = sorted(os.listdir(self.kept_folder))
        except OSError:  # no folder: nothing kept
            return
        now = time.time()
        for name in names:  # claims of servers that died before writing them are taken up again
            if ".json.claimed-" in name:
                claimed = self.kept_folder / name
                try:
                    if now - claimed.stat().st_mtime > CLAIM_STALE_S:
                        os.replace(claimed, self.kept_folder / name.partition(".claimed-")[0])
                except OSError:
                    pass
        for name in names:
            if self._closed or self._down_at is not None:
                return
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = self.kept_folder / name
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if not isinstance(data, dict) or data.get("store") != self._store_key:
                    continue  # another store's
                claimed = path.with_name(f"{name}.claimed-{os.getpid()}-{uuid.uuid4().hex[:6]}")
                os.replace(path, claimed)
            except OSError:  # another server claimed it first
                continue
            except ValueError as e:
                _log.warning("sqlchorus: %s is not a kept run's end (%s); left as it is", path, e)
                continue
            try:
                os.utime(claimed)  # when it was claimed: a claim left this long is taken up again
            except OSError:
                pass
            self._store_kept_file(path, claimed, data)

    def _store_kept_file(self, path: Path, claimed: Path, data: dict[str, Any]) -> None:
        run_id = str(data.get("run_id"))
        item: dict[str, Any] = {"end": None, "kept": None}
        try:
            item["end"] = dict(data["end"])
            item["kept"] = self.store.decode_unwritten(data["kept"]) if data.get("kept") else None
            self._write_end(item)
        except (KeyError, TypeError, ValueError) as e:
            _log.warning("sqlchorus: %s is not a kept run's end (%s); set aside as %s", path, e, path.name + ".damaged")
            os.replace(claimed, path.with_name(path.name + ".damaged"))
            return
        except self.store.db_errors as e:
            if _value_refused(e):
                _log.warning("sqlchorus: the checkpoint store refused the end of run %s kept in %s (%s); set aside "
                             "as %s", run_id, path, _first_line(e), path.name + ".refused")
                os.replace(claimed, path.with_name(path.name + ".refused"))
                return
            # Given back, with only what the store has not taken yet: nothing is written twice.
            data["kept"] = self.store.encode_unwritten(item["kept"]) if item["kept"] else None
            _write_atomically(path, json.dumps(data, default=str, ensure_ascii=False))
            claimed.unlink(missing_ok=True)
            self._store_failed(e)
            return
        claimed.unlink(missing_ok=True)
        _log.warning("sqlchorus: wrote to the checkpoint store the end of run %s, kept in %s by %s when it stopped",
                     run_id, path, data.get("owner"))

    # -- what clients are told ------------------------------------------------------------------

    def public_message(self, error: BaseException | str) -> str:
        """What a client is told of ``error``: its message without where the checkpoint store is
        (its file; its PostgreSQL host, port, user and database), which the server's log keeps."""
        if isinstance(error, CheckpointDamagedError):
            return ("The checkpoint store is damaged: the runs it holds cannot be read. The server's log names "
                    "its file and how to recover what it holds (sqlite3 FILE .recover).")
        text = str(error)
        if not text:
            return text
        if self.store is not None:
            for pattern, replacement in _LIBPQ_PLACES:
                text = pattern.sub(replacement, text)
        for place, replacement in self._store_places():
            text = place.sub(replacement, text)
        return text

    def _store_places(self) -> list[tuple[re.Pattern, str]]:
        """Patterns of what names the store's location, longest first: its URL or file, then the
        parts of a URL (host, port, user, database) on their own; and the trace folder's."""
        if self._places is not None:
            return self._places
        whole: set[str] = set()
        parts: set[str] = set()
        traces: set[str] = set()
        if self.settings.trace_folder:
            # Its full path wherever it appears; a relative one (``traces``, a word too) only as
            # the start of a path in it.
            folder = Path(self.settings.trace_folder)
            traces = {str(folder.absolute()), str(folder.resolve())}
            if not folder.is_absolute():
                traces.add(str(folder) + os.sep)
        url = getattr(self.store, "url", None)
        if self.store is None:
            pass
        elif isinstance(url, str) and "://" in url:
            whole |= {url, str(self.store.path)}
            split = urlsplit(url)
            query = parse_qs(split.query)
            try:
                port = str(split.port or "")
            except ValueError:
                port = ""
            parts |= {split.hostname or "", port or ("5432" if split.hostname else ""), split.username or "",
                      split.path.lstrip("/")}
            for key in ("host", "hostaddr", "port", "user", "dbname"):
                parts |= set(query.get(key, []))
            parts.discard("")
        elif self.store.path is not None:
            path = Path(self.store.path)
            for each in {path, path.absolute(), path.resolve()}:
                whole |= {str(each), str(each.with_name(each.stem + "-recovered.sqlite"))}
        named = [(w, "the checkpoint store") for w in whole if w] + [
            (t, "the trace folder" + (os.sep if t.endswith(os.sep) else "")) for t in traces]
        named.sort(key=lambda wt: len(wt[0]), reverse=True)
        places = [(re.compile(re.escape(w)), told) for w, told in named]
        places += [(re.compile(r"(?<![\w.])" + re.escape(p) + r"(?![\w])"), "…")
                   for p in sorted(parts, key=len, reverse=True) if len(p) > 1]
        self._places = places
        return places

    def _told(self, error: BaseException | str, run_id: str) -> str:
        """:meth:`public_message` of ``error``; what it leaves out goes to the log."""
        told = self.public_message(error)
        if told != str(error):
            _log.warning("sqlchorus: run %s: %s", run_id, error)
        return told

    def _public_result(self, result: dict[str, Any] | None, run_id: str | None = None) -> dict[str, Any] | None:
        """A run's result as clients see it: its error and the problems it met without the store's location."""
        if not result or self.store is None:
            return result
        result = dict(result)
        if isinstance(result.get("error"), str):
            result["error"] = self._told(result["error"], run_id) if run_id else self.public_message(result["error"])
        if isinstance(result.get("errors"), list):
            result["errors"] = [
                {**e, "message": self._told(e["message"], run_id) if run_id else self.public_message(e["message"])}
                if isinstance(e, dict) and isinstance(e.get("message"), str) else e
                for e in result["errors"]]
        return result

    # -- the store's health ---------------------------------------------------------------------

    def _unavailable(self) -> StoreUnavailableError:
        # Where the store is (its file, or its host, port, user and database) is in the log only.
        return StoreUnavailableError(
            f"The checkpoint store cannot be reached ({self.public_message(self._down_why)}); try again shortly.",
            retry_after_s=max(1, math.ceil(min(self.heartbeat_s, 30.0))))

    def _refusal(self, error: BaseException) -> ServiceError:
        """What a request whose store statement failed with ``error`` is told: the store refused
        one of its values (422), or it cannot be reached (503)."""
        if _value_refused(error):
            return RefusedValueError("The checkpoint store cannot keep a value of this request "
                                     f"({self.public_message(_first_line(error))}).")
        if self.store.busy(error):
            return StoreUnavailableError("The checkpoint store is busy (every connection of this server to it is "
                                         "in use); try again shortly.", retry_after_s=1)
        return self._unavailable()

    def _store_failed(self, error: BaseException) -> None:
        if _value_refused(error):  # the request's fault, not the store's: it stays reachable
            _log.warning("sqlchorus: the checkpoint store %s refused a value: %s", self.store.path, _first_line(error))
            return
        if self.store.busy(error):  # it answers, with every connection in use: not an outage
            _log.warning("sqlchorus: the checkpoint store %s is busy: %s", self.store.path, _first_line(error))
            return
        with self._lock:
            first = self._down_at is None
            if first:
                self._down_at = time.monotonic()
                self.store.away = True
            self._down_why = _first_line(error)
            self._probed_at = time.monotonic()
        if first:
            _log.warning("sqlchorus: the checkpoint store %s is unreachable (%s); new runs are refused, and the "
                         "ends of runs are kept until it is back", self.store.path, self._down_why)

    def _probe(self) -> bool:
        """Try the store once; whether it answered (it is then marked reachable)."""
        self._probed_at = time.monotonic()
        try:
            self.store.ping()
        except self.store.db_errors as e:
            self._store_failed(e)
            return self.store.busy(e) and self._down_at is None
        with self._lock:
            was_down, self._down_at = self._down_at is not None, None
            self.store.away = False
            for item in self._unsaved.values():  # back: the ends kept for it go now
                item["next"] = 0.0
        if was_down:
            _log.warning("sqlchorus: the checkpoint store %s is reachable again", self.store.path)
            self._wake.set()
        return True

    def _store_ready(self) -> None:
        """Raise :class:`StoreUnavailableError` at once while the store is known to be away: the
        store keeper tries it every :data:`PROBE_EVERY_S`, and no request waits for a try."""
        if self.store is not None and self._down_at is not None:
            raise self._unavailable()

    def _reading(self, use: Any, *args: Any) -> Any:
        """``use(*args)`` on the store; a store that cannot be reached is a 503, not a fault."""
        self._store_ready()
        try:
            return use(*args)
        except self.store.db_errors as e:
            self._store_failed(e)
            raise self._refusal(e) from None

    def health(self) -> dict[str, Any]:
        """Whether this server can take runs and keeps their record, from what is known now
        (no store or disk is touched: the store keeper tries them in the background): its store's
        state (``ok``, ``unreachable`` or ``none``), its trace folder's (``ok``, ``failing`` or
        ``none``), its runs running and queued, the most it takes, run ends not yet stored and
        traces not written. ``status`` is ``ok`` when both are, else ``degraded``."""
        store = "none" if self.store is None else "ok" if self._down_at is None else "unreachable"
        with self._lock:
            statuses = [r.status for r in self._runs.values()]
            unsaved = len(self._unsaved)
            trace_problem = self._trace_failed or self._trace_room
            unwritten = self._traces_unwritten
        traces = "none" if not self.settings.trace_folder else "failing" if trace_problem else "ok"
        data = {"status": "ok" if store != "unreachable" and traces != "failing" else "degraded", "store": store,
                "traces": traces, "running": statuses.count("running"), "queued": statuses.count("queued"),
                "max_pending": self.max_pending, "unsaved_runs": unsaved, "unwritten_traces": unwritten}
        if store == "unreachable":
            data["store_error"] = self.public_message(self._down_why)
        if traces == "failing":
            data["trace_error"] = self.public_message(trace_problem)
        return data

    def _check_trace_folder(self) -> None:
        """Whether the trace folder can take the next run's trace: it is a folder (made here if
        it is not there yet, as a run's tracer would) with room for one (:data:`TRACE_ROOM_BYTES`)."""
        if not self.settings.trace_folder:
            return
        problem = None
        try:
            folder = Path(self.settings.trace_folder)
            folder.mkdir(parents=True, exist_ok=True)
            room = os.statvfs(folder)
            if room.f_bavail * room.f_frsize < TRACE_ROOM_BYTES:
                problem = f"the trace folder's disk is full ({room.f_bavail * room.f_frsize} bytes free)"
        except OSError as e:
            problem = f"the trace folder cannot be used: {e.strerror or e}"
        with self._lock:
            self._trace_room = problem

    def _keep(self) -> None:
        """The store keeper, in a thread of its own: tries the store every :data:`PROBE_EVERY_S`
        (what health says of it), writes again the run ends the store did not take; every
        heartbeat renews the leases of this server's runs, writes the run ends kept in files and
        looks at the trace folder."""
        while not self._closed:
            with self._lock:
                due = min((item["next"] for item in self._unsaved.values()), default=math.inf)
            wait = max(0.0, min(PROBE_EVERY_S, due - time.monotonic()))
            self._wake.wait(wait)
            self._wake.clear()
            if self._closed:
                return
            try:
                beat = time.monotonic() - self._renewed_at >= self.heartbeat_s
                if beat:
                    self._renewed_at = time.monotonic()
                    self._check_trace_folder()
                if self.store is None:
                    continue
                if time.monotonic() - self._probed_at >= PROBE_EVERY_S and not self._probe():
                    continue
                if self._down_at is not None:
                    continue
                self._flush()
                if beat:
                    self._renew()
                    self._store_kept_files()
            except Exception as e:  # noqa: BLE001 - the keeper outlives any one fault
                _log.warning("sqlchorus: the store keeper met %s: %s", type(e).__name__, e)

    def _renew(self) -> None:
        with self._lock:
            ids = [r.run_id for r in self._runs.values() if r.status not in FINISHED]
        if not ids:
            return
        try:
            self.store.renew(ids, self.lease_s)
        except self.store.db_errors as e:
            self._store_failed(e)

    def _flush(self, force: bool = False, until: float = math.inf) -> None:
        """Write the kept run ends that are due (all with ``force``), oldest first, until the
        store refuses one or the time ``until`` (monotonic) comes."""
        now = time.monotonic()
        with self._lock:
            due = [(k, v) for k, v in self._unsaved.items() if force or v["next"] <= now]
        for run_id, item in sorted(due, key=lambda kv: kv[1]["since"]):
            if time.monotonic() >= until:
                return
            try:
                self._write_end(item)
            except self.store.db_errors as e:
                if _value_refused(e):  # no later try would do better
                    _log.warning("sqlchorus: the checkpoint store refused the end of run %s: %s", run_id, e)
                    with self._lock:
                        self._unsaved.pop(run_id, None)
                    continue
                self._store_failed(e)
                with self._lock:
                    for other in self._unsaved.values():  # backoff: the store is tried less as it stays away
                        other["delay"] = min(other["delay"] * 2, RETRY_MAX_S)
                        other["next"] = time.monotonic() + other["delay"]
                    given_up = time.monotonic() - item["since"] > RETRY_FOR_S and self._unsaved.pop(run_id, None)
                if given_up:  # out of memory, into a file any server writes once the store is back
                    self._keep_in_file(run_id, item, f"after {RETRY_FOR_S:g} s")
                return
            with self._lock:
                self._unsaved.pop(run_id, None)

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
        def asked() -> bool:
            if live.cancel.is_set() or self._closed:
                return True
            if self.store is not None and self._down_at is None:  # a store that is away costs no wait
                try:
                    if self.store.cancel_requested(live.run_id):
                        live.cancel.set()
                except self.store.db_errors as e:
                    self._store_failed(e)
                    return False
            return live.cancel.is_set()
        return asked
