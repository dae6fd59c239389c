"""OpenTelemetry tracing of a run: a span per node, a ``route`` event per routing decision.

Each run gets its own ``TracerProvider`` (the global one can be set only once per process), a
root span named for what started the run (``ask``, ``eval``, ``debug``...; ``run`` before there
were origins) with its metadata and tags (:func:`run_labels`), and a JSON Lines file
``<trace_dir>/<run-id>.jsonl`` with one finished span per line, written as each span ends so that
a run that dies still leaves its trace. An OTLP/HTTP
endpoint can receive the same spans. Model calls (``chat <model>``) and SQL executions (``sql``)
are child spans of the node that made them.

Every span carries ``session.id`` (the run's thread, shared by its replays and debugging
sessions) and, as ``Settings.trace_content`` allows, the content a dashboard shows: OpenInference's
``input.value`` / ``output.value``, a model call's messages, a retriever's documents (see
:mod:`sqlchorus.tools.tracing.content`). Without an explicit endpoint, the standard
``OTEL_EXPORTER_OTLP_*`` variables and ``OTEL_SERVICE_NAME`` are honoured.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import typing
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp
from langgraph.types import Send, interrupt
from opentelemetry import trace
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from sqlchorus.config.install import install_hint
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.json_values import json_value
from sqlchorus.tools.tracing.content import (
    ALL,
    NONE,
    TRUNCATION_MARK,
    bounded,
    content_mode,
    set_content_mode,
    set_value,
)


class JsonlSpanExporter(SpanExporter):
    """Appends one JSON object per finished span to a file.

    A file that cannot be written (a full disk) stops the export, not the run: the first error
    is kept in ``failed`` and later spans are dropped quietly.

    Raises:
        OSError: the folder cannot be made or the file opened.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self.failed: str | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.failed is not None:
            return SpanExportResult.FAILURE
        try:
            for span in spans:
                # to_json() is pretty-printed; one line per span keeps the file greppable.
                self._file.write(json.dumps(json.loads(span.to_json()), ensure_ascii=False) + "\n")
            self._file.flush()
        except OSError as e:
            self.failed = f"the trace file {self.path} stopped being written: {e.strerror or e}"
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        if not self._file.closed:
            self._file.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if not self._file.closed:
            self._file.flush()
        return True


def new_run_id() -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{uuid.uuid4().hex[:8]}"


RUN_ID = re.compile(r"^[0-9]{8}T[0-9]{6}-[0-9a-f]{8}$")
"""What :func:`new_run_id` makes; anything else is refused before a path is made of it."""


def valid_run_id(run_id: str) -> bool:
    return bool(RUN_ID.match(run_id or ""))


class RunTracer(AbstractContextManager["RunTracer"]):
    """The tracing of one run: provider, exporters and the root span.

    Args:
        trace_dir: folder for the JSONL file; None writes no file.
        otlp_endpoint: OTLP/HTTP traces endpoint (``http://host:4318/v1/traces``), or None.
        exporters: extra span exporters (tests pass an ``InMemorySpanExporter``).
        run_id: the run's id; a timestamped random one by default.
        attributes: attributes of the root span.
        session_id: the ``session.id`` every span of the run carries: the run's thread (the
            original run's id for a replay, a debugger's fork, a resume); the run's id by default.
        content: what text the spans carry (``Settings.trace_content``: all, metadata, none).
        came_from: ``(trace_id, span_id)`` in hex of the root span of the run this one goes on
            with (a replay's, a reopened run's): the root span links to it.
        name: the root span's name: what started the run (its origin: ``ask``, ``eval``,
            ``debug``, ``serve``...; see :func:`run_labels`).
        deferred: the root span starts with the run's first work (:meth:`working`) rather than
            on entering, and ends where its last work ended: a debugging session, open between
            its commands, spans only what it ran, and one that ran nothing leaves no span.

    Without ``otlp_endpoint``, the OpenTelemetry environment is honoured: spans go to
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or ``OTEL_EXPORTER_OTLP_ENDPOINT`` with ``/v1/traces``
    appended; ``OTEL_EXPORTER_OTLP_HEADERS`` (or ``..._TRACES_HEADERS``) go with them, and
    ``OTEL_SERVICE_NAME`` names the service (else ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``,
    else ``sqlchorus``: :func:`service_name`).
    """

    def __init__(
        self,
        *,
        trace_dir: str | Path | None = None,
        otlp_endpoint: str | None = None,
        exporters: Iterable[SpanExporter] = (),
        run_id: str | None = None,
        attributes: dict[str, Any] | None = None,
        session_id: str | None = None,
        content: str = "all",
        came_from: tuple[str, str] | None = None,
        name: str = attrs.RUN_SPAN,
        deferred: bool = False,
    ):
        self.run_id = run_id or new_run_id()
        self.session_id = session_id or self.run_id
        self.content = content
        # A replay's or a reopened run's root links to the root span of the run it goes on with.
        self._links = [trace.Link(trace.SpanContext(
            trace_id=int(came_from[0], 16), span_id=int(came_from[1], 16), is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)))] if came_from else []
        otlp_endpoint = otlp_endpoint or otlp_endpoint_from_env()
        self.path: Path | None = Path(trace_dir) / f"{self.run_id}.jsonl" if trace_dir else None
        # Shut down by __exit__, not at interpreter exit: an atexit hook per run would keep every
        # run's provider alive for the life of the process.
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service_name(), attrs.SQLCHORUS_RUN_ID: self.run_id}),
            shutdown_on_exit=False,
        )
        # First, so that every other processor (and exporter) sees the session on each span.
        self.provider.add_span_processor(SessionSpans(self.session_id))
        self._problems: list[str] = []
        self._file: JsonlSpanExporter | None = None
        self._otlp: OtlpExport | None = None
        if self.path is not None:
            try:
                self._file = JsonlSpanExporter(self.path)
                self.provider.add_span_processor(SimpleSpanProcessor(self._file))
            except OSError as e:  # tracing is a record of the run, never a reason to lose it
                self._problems.append(f"no trace file: cannot write {self.path} ({e.strerror or e})")
                self.path = None
        for exporter in exporters:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        host = _host_processor()
        if host is not None:
            self.provider.add_span_processor(HostSpans(host))
        if otlp_endpoint:
            try:
                self._otlp = OtlpExport(otlp_endpoint)
            except RuntimeError as e:
                self._problems.append(f"spans are not sent to {otlp_endpoint}: {e}")
            else:
                # Sent in the background as the run goes, so a slow or absent collector is
                # found out while the models work, not at the end.
                self.provider.add_span_processor(
                    BatchSpanProcessor(self._otlp, schedule_delay_millis=OTLP_SCHEDULE_DELAY_MS))
        self.tracer = self.provider.get_tracer("sqlchorus")
        set_content_mode(self.tracer, content)
        self._attributes = {attrs.SQLCHORUS_RUN_ID: self.run_id, attrs.SQLCHORUS_TRACE_CONTENT: content,
                            **(attributes or {})}
        self.name = name
        self.deferred = deferred
        self.root: Any = None
        self._worked_until: int | None = None  # when the latest work of a deferred run ended (ns)

    @property
    def problems(self) -> list[str]:
        """What went wrong with tracing (a file that could not be written, an exporter that is
        not installed, an endpoint that did not take the spans), one line each; the run itself
        went on."""
        late = [exporter.failed for exporter in (self._file, self._otlp)
                if exporter is not None and exporter.failed]
        return self._problems + late

    @property
    def file_written(self) -> bool:
        """Whether the run's trace file holds the run (it was opened and no write failed)."""
        return self._file is not None and not self._file.failed

    def __enter__(self) -> RunTracer:
        if not self.deferred:
            self.start()
        return self

    def start(self) -> None:
        """Start the run span, once."""
        # The run span starts under whatever span is current (a host's), but is made current only
        # while the run works (:meth:`active`): a run kept open between calls (the debugger's)
        # must not become the parent of whatever its caller does in between.
        if self.root is None:
            self.root = self.tracer.start_span(
                self.name, attributes={attrs.OPENINFERENCE_KIND: attrs.KIND_AGENT, **self._attributes},
                links=self._links)

    @contextmanager
    def active(self) -> Iterator[None]:
        """The run span as the current span, for the work of the run."""
        if self.root is None:
            yield
            return
        with trace.use_span(self.root, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield

    @contextmanager
    def working(self, name: str | None = None, attributes: dict[str, Any] | None = None) -> Iterator[Any]:
        """The run span as the current span (started now if deferred and not yet), for one piece
        of the run's work; with ``name``, inside a child span of that name (with ``attributes``)
        that says what the work is. Yields that child span, or None."""
        self.start()
        try:
            with self.active():
                if name is None:
                    yield None
                    return
                with self.tracer.start_as_current_span(
                        name, attributes={attrs.OPENINFERENCE_KIND: attrs.KIND_CHAIN, **(attributes or {})},
                        record_exception=False, set_status_on_exception=False) as span:
                    try:
                        yield span
                    except BaseException as e:
                        if isinstance(e, GraphBubbleUp):
                            span.set_status(trace.Status(trace.StatusCode.OK))
                        else:
                            span.record_exception(e)
                            span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(e).__name__}: {e}"[:300]))
                        raise
                    span.set_status(trace.Status(trace.StatusCode.OK))
        finally:
            self._worked_until = time.time_ns()

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.root is not None and self.root.is_recording():
                if exc[0] is None:
                    error = (getattr(self.root, "attributes", None) or {}).get(attrs.SQLCHORUS_ERROR)
                    self.root.set_status(trace.Status(trace.StatusCode.ERROR, str(error)[:300]) if error
                                         else trace.Status(trace.StatusCode.OK))
                elif exc[1] is not None:
                    self.root.record_exception(exc[1])
                    self.root.set_status(trace.Status(trace.StatusCode.ERROR, f"{exc[0].__name__}: {exc[1]}"[:300]))
                # A deferred run (a debugging session) ends where its work ended, not when it
                # was closed: the time it stood open between commands is not the run's.
                self.root.end(end_time=self._worked_until if self.deferred else None)
        finally:
            if self._otlp is not None:
                self._otlp.stop_waiting()
            self.provider.shutdown()
            if self.root is None and self.path is not None and self.file_written:
                # Nothing ran (a debugging session that only looked): no trace, not an empty file.
                try:
                    if self.path.stat().st_size == 0:
                        self.path.unlink()
                        self.path = None
                except OSError:
                    pass


ORIGIN = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
"""What names a run's origin, and so its span: a short lowercase word (``ask``, ``eval``...)."""

MAX_LABEL_CHARS = 1000
"""Characters one metadata value keeps (as JSON, cut beyond), and a tag at most (a tenth)."""

MAX_LABELS = 50
"""Metadata keys, and tags, a run span keeps at most."""


def run_labels(origin: str, metadata: Mapping[str, Any] | None = None, tags: Iterable[str] = ()) -> dict[str, Any]:
    """The attributes that say what started a run and file it, for its root span:
    ``sqlchorus.origin``; OpenInference's ``metadata`` (one JSON object, ``origin`` first, then
    ``metadata``'s keys in order) and ``tag.tags`` (``origin`` first, then ``tags``), which Arize
    Phoenix shows and filters by; and the same as Langfuse's trace attributes,
    ``langfuse.trace.metadata.<key>`` (text, or JSON) and ``langfuse.trace.tags``.

    Any JSON-able value is taken (others become their text); each is cut at
    :data:`MAX_LABEL_CHARS` characters of JSON (a cut one becomes text ending in the truncation
    mark), and at most :data:`MAX_LABELS` keys and tags are kept.

    Raises:
        ValueError: ``origin`` is not a short lowercase word (see :data:`ORIGIN`).
        TypeError: ``metadata`` is not a mapping.
    """
    if not isinstance(origin, str) or not ORIGIN.match(origin):
        raise ValueError(f"A run's origin is a short lowercase word (ask, eval, serve...), not {origin!r}.")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(f"Run metadata is a dict of JSON values, not {type(metadata).__name__}.")
    shown: dict[str, Any] = {"origin": origin}
    for key, value in (metadata or {}).items():
        if len(shown) >= MAX_LABELS:
            break
        shown[str(key)] = _preview(value, MAX_LABEL_CHARS)
    labels = list(dict.fromkeys(bounded(str(t), MAX_LABEL_CHARS // 10) for t in (origin, *tags) if str(t)))
    labels = labels[:MAX_LABELS]
    attributes: dict[str, Any] = {
        attrs.SQLCHORUS_ORIGIN: origin,
        attrs.METADATA: json.dumps(shown, ensure_ascii=False),
        attrs.TAG_TAGS: labels,
        attrs.LANGFUSE_TRACE_TAGS: labels,
        attrs.LANGFUSE_TRACE_NAME: origin,
    }
    for key, value in shown.items():
        attributes[f"{attrs.LANGFUSE_TRACE_METADATA}.{key}"] = (
            value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return attributes


def _preview(value: Any, limit: int, depth: int = 0) -> Any:
    """``value`` made plain for JSON when its JSON fits in about ``limit`` characters. Else a
    list or object (two levels deep) keeps its first items, each shown the same way within its
    share, and says how many more there were; a string, or anything deeper, is cut, ending in the
    truncation mark (the start of its JSON, for what is not a string). A list's items share the
    room alike (five at least), an object's fields take it in order. Only what is shown is
    serialised: a large value costs about its first ``limit`` characters."""
    if isinstance(value, str):
        return bounded(value, limit + len(TRUNCATION_MARK))
    try:
        fits, shown = _json_head(value, limit)
    except (TypeError, ValueError):  # keys JSON cannot take: made plain first (a walk of it all)
        value = json_value(value)
        fits, shown = _json_head(value, limit)
    if fits or depth >= 2:
        return shown
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        room, share = limit, max(60, limit // min(len(value), 5))
        for i, item in enumerate(value):
            if room <= 0:
                items.append(f"... {len(value) - i} more")
                break
            items.append(_preview(item, min(share, room), depth + 1))
            room -= _size(items[-1]) + 2  # and the separator
        return items
    if isinstance(value, dict):
        fields: dict[str, Any] = {}
        room = limit
        for i, (key, item) in enumerate(value.items()):  # first fields first (a candidate's id, sql)
            if room <= 0:
                fields["..."] = f"{len(value) - i} more"
                break
            fields[str(key)] = _preview(item, room, depth + 1)
            room -= _size(fields[str(key)]) + len(str(key)) + 6  # its key, quoted, and separators
        return fields
    return shown


def _json_head(value: Any, limit: int) -> tuple[bool, Any]:
    """Whether ``value``'s JSON fits in ``limit`` characters, and the value made plain if so,
    else the start of its JSON, cut; no more of it is serialised than that."""
    size, head = 0, []
    for chunk in json.JSONEncoder(ensure_ascii=False, default=str).iterencode(value):
        head.append(chunk)
        size += len(chunk)
        if size > limit:
            return False, "".join(head)[:limit] + TRUNCATION_MARK
    return True, json.loads("".join(head))


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False))


DEFAULT_SERVICE_NAME = "sqlchorus"


def service_name() -> str:
    """The ``service.name`` of a run's spans, as the OpenTelemetry specification orders the
    variables: ``OTEL_SERVICE_NAME``, else the ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``,
    else ``sqlchorus`` (rather than the SDK's ``unknown_service``). The other attributes of
    ``OTEL_RESOURCE_ATTRIBUTES`` reach the resource as they are."""
    # The SDK's own reading of the two variables (percent-decoding, OTEL_SERVICE_NAME first).
    detected = OTELResourceDetector().detect().attributes.get("service.name")
    return str(detected) if detected is not None and str(detected).strip() else DEFAULT_SERVICE_NAME


def otlp_endpoint_from_env() -> str | None:
    """The OTLP/HTTP traces endpoint the OpenTelemetry environment names, or None:
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as it is, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` with
    ``/v1/traces`` appended (as the OTLP/HTTP specification says)."""
    traces = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
    if traces:
        return traces
    base = (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
    if base:
        return base.rstrip("/") + "/v1/traces"
    return None


class SessionSpans(SpanProcessor):
    """Puts ``session.id`` on every span of a run as it starts, so that a dashboard groups a run
    with its replays and debugging sessions (one LangGraph thread, one session)."""

    def __init__(self, session_id: str):
        self.session_id = session_id

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        span.set_attribute(attrs.SESSION_ID, self.session_id)

    def on_end(self, span: ReadableSpan) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class HostSpans(SpanProcessor):
    """Hands each span of a run to the host application's own span processors as well.

    When the program sqlchorus runs in has set an OpenTelemetry SDK tracer provider of its own,
    a run's spans go where the host's go (its exporters, its backend) besides the run's file;
    and since the run span starts in the caller's context, it nests under the host's current
    span, in the host's trace. The host's processors are the host's to shut down.
    """

    def __init__(self, host: Any):
        self.host = host

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.host.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self.host.on_end(span)

    def shutdown(self) -> None:
        """Not the host's: it shuts its own processors down."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.host.force_flush(timeout_millis)


def _host_processor() -> Any:
    """The span processor of the tracer provider the host application set, or None."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # no SDK provider set: a proxy or a no-op one
        return None
    # The SDK keeps its processors in one composite; there is no public accessor for it.
    return getattr(provider, "_active_span_processor", None)


OTLP_TIMEOUT_S = 2.0
"""Time an OTLP export of one batch may take, retries included (the exporter's default is 10 s).
A collector answers in milliseconds; one that does not answer in 2 s is not taking spans, and a
run must not wait on it. ``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`` or ``OTEL_EXPORTER_OTLP_TIMEOUT``
set by the user win."""

OTLP_SCHEDULE_DELAY_MS = 500
"""How often finished spans are sent to an OTLP endpoint during a run."""

_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.otlp.common.http",
)
"""The loggers the OTLP/HTTP exporter reports its retries and failures on, across versions."""


class _ExporterLogs(logging.Filter):
    """Takes the exporter's log records away from the threads exporting for a run.

    The exporter logs a warning per retry and an error per failed batch; for a run those become
    one line in :attr:`RunTracer.problems`. Records of other threads (an exporter the
    application set up itself) pass untouched.
    """

    def __init__(self) -> None:
        super().__init__()
        self._heard: dict[int, tuple[list[logging.LogRecord], Callable[[], None]]] = {}

    @contextmanager
    def hearing(self, told: Callable[[], None] = lambda: None) -> Iterator[list[logging.LogRecord]]:
        """The records logged by this thread while the block runs, kept from the log; ``told``
        is called as each one comes."""
        heard: list[logging.LogRecord] = []
        self._heard[threading.get_ident()] = (heard, told)
        try:
            yield heard
        finally:
            self._heard.pop(threading.get_ident(), None)

    def filter(self, record: logging.LogRecord) -> bool:
        listener = self._heard.get(record.thread or 0)
        if listener is None:
            return True
        listener[0].append(record)
        listener[1]()
        return False


_exporter_logs = _ExporterLogs()
for _name in _EXPORTER_LOGGERS:
    logging.getLogger(_name).addFilter(_exporter_logs)


class OtlpExport(SpanExporter):
    """The OTLP/HTTP export of one run: spans sent to ``endpoint``, or one line saying why not.

    Once a batch fails (the endpoint is unreachable, or refuses the spans), the rest of the run's
    spans are dropped at once instead of each batch waiting out its own retries; and once the run
    has ended (:meth:`stop_waiting`), an export whose attempt failed is not retried. The run
    waits for a failing endpoint for one export's timeout at most, usually not at all.

    Attributes:
        failed: the line that says the spans did not reach the endpoint, or None.

    Raises:
        RuntimeError: the OTLP exporter is not installed.
    """

    def __init__(self, endpoint: str):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as e:
            raise RuntimeError(
                f"Exporting to an OTLP endpoint needs the OTLP exporter: {install_hint('otlp')}."
            ) from e
        user_timeout = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or os.environ.get(
            "OTEL_EXPORTER_OTLP_TIMEOUT")
        self.endpoint = endpoint
        self._inner = OTLPSpanExporter(endpoint=endpoint, timeout=None if user_timeout else OTLP_TIMEOUT_S)
        self._why: str | None = None
        self._sent = self._dropped = 0
        self._attempt_failed = False
        self._ending = False
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def failed(self) -> str | None:
        if self._why is None:
            return None
        return (f"spans could not be sent to {self.endpoint}: {self._why} "
                f"({self._dropped} of {self._sent + self._dropped} spans dropped)")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._why is not None:
            self._dropped += len(spans)
            return SpanExportResult.FAILURE
        with _exporter_logs.hearing(self._told_of_failure) as heard:
            try:
                result = self._inner.export(spans)
            except Exception as e:  # an exporter bug must not reach the run either
                heard.append(logging.makeLogRecord({"msg": "%s", "args": (e,)}))
                result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._sent += len(spans)
        else:
            self._why = _failure_reason(heard)
            self._dropped += len(spans)
        return result

    def stop_waiting(self) -> None:
        """The run has ended: an endpoint that has failed an attempt is not waited for."""
        self._ending = True
        if self._attempt_failed:
            self._stop()

    def _told_of_failure(self) -> None:
        # The exporter logs each failed attempt before it waits to retry.
        self._attempt_failed = True
        if self._ending:
            self._stop()

    def _stop(self) -> None:
        """Shut the exporter down, which also ends a retry's wait; once."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._inner.shutdown()

    def shutdown(self) -> None:
        self._stop()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _failure_reason(records: Sequence[logging.LogRecord]) -> str:
    """A few words on why an export failed, from what the exporter logged: the operating
    system's reason for a connection that failed, or the HTTP status the endpoint answered."""
    for record in reversed(records):
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if isinstance(arg, BaseException):
                return _root_cause(arg)
        codes = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
        if codes:
            reason = next((str(a) for a in args[args.index(codes[0]) + 1:] if a), "")
            return f"it answered HTTP {codes[0]} {reason}".rstrip()
    return "it did not take them in time"


def _root_cause(error: BaseException) -> str:
    """The innermost reason of a chain of wrapped errors (requests wraps urllib3, which wraps
    the socket's ``ConnectionRefusedError``)."""
    seen: set[int] = set()
    queue = [error]
    deepest = error
    while queue:
        e = queue.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        deepest = e
        queue += [x for x in (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args)
                  if isinstance(x, BaseException)]
    text = str(deepest) or type(deepest).__name__
    return text if len(text) <= 120 else text[:117] + "..."


# -- node spans and route events ---------------------------------------------------------------


class NodeEvent(NamedTuple):
    """A node starting (``kind`` ``start``) or ending (``end``, after ``seconds``), told to the
    context's ``progress`` callback so a front end can show what is running."""

    node: str
    kind: str
    seconds: float


def state_reducers(schema: type) -> dict[str, Callable[[Any, Any], Any]]:
    """The reducer of each key of a state schema that has one, read from its annotations."""
    hints = typing.get_type_hints(schema, include_extras=True)
    return {
        key: meta
        for key, hint in hints.items()
        for meta in getattr(hint, "__metadata__", ())
        if callable(meta)
    }


def emit_route(source: str, target: str, reason: str) -> None:
    """Record a routing decision on the current node span."""
    trace.get_current_span().add_event(
        attrs.ROUTE_EVENT, {"from": source, "to": target, "reason": reason}
    )


def traced_node(
    name: str,
    fn: Callable[..., Any],
    successors: Sequence[str] = (),
    router: Callable[[dict, Any], list[tuple[Any, str]]] | None = None,
    reducers: dict[str, Callable[[Any, Any], Any]] | None = None,
) -> Callable[..., Any]:
    """Wrap a node so that each execution is a span ``node:<name>`` with its routing on it.

    With a ``router``, the wrapper asks it where the state will go after the node's update (the
    graph's conditional edge, built from the same router, sends it there); each decision becomes
    a ``route`` event with the router's reason. Without one, the fixed ``successors`` (the targets of the node's edges, as
    the assembly declared them) are recorded with the reason ``edge``.
    Routing inside the node's span keeps every decision on the span of the node that made it.
    """
    reducers = reducers or {}

    def run(state: Any, runtime: Any) -> Any:
        pause = getattr(runtime.context, "pause", None)
        if pause is not None and pause(name, state):
            interrupt({"before": name})  # resumed, it returns, and the node runs
        tracer = runtime.context.tracer
        progress = runtime.context.progress
        with tracer.start_as_current_span(attrs.NODE_SPAN_PREFIX + name) as span:
            span.set_attribute(attrs.SQLCHORUS_NODE, name)
            span.set_attribute(attrs.OPENINFERENCE_KIND,
                               attrs.KIND_RETRIEVER if name in attrs.RETRIEVER_NODES else attrs.KIND_CHAIN)
            _mark_checkpoint(span)
            content = content_mode(tracer)
            if content != NONE:
                set_value(span, "input", node_input(state, content))
            started = time.monotonic()
            if progress is not None:
                progress(NodeEvent(name, "start", 0.0))
            try:
                update = fn(state, runtime) or {}
                if isinstance(update, dict):
                    span.set_attribute(attrs.SQLCHORUS_UPDATE_KEYS, sorted(update))
                    if content != NONE:
                        set_value(span, "output", update if content == ALL else {"keys": sorted(update)})
                if router is None:
                    for target in successors:
                        emit_route(name, target, "edge")
                    span.set_status(trace.Status(trace.StatusCode.OK))
                    return update
                routes = router(apply_update(state, update, reducers), runtime)
            except GraphBubbleUp:  # a pause inside (a debugger's interrupt) is not a failure
                span.set_status(trace.Status(trace.StatusCode.OK))
                span.set_attribute(attrs.SQLCHORUS_PAUSED, True)
                raise
            except Exception as e:
                span.record_exception(e)
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(e)[:300]))
                raise
            finally:
                if progress is not None:
                    progress(NodeEvent(name, "end", time.monotonic() - started))
            for target, reason in routes:
                emit_route(name, goto_targets(target)[0], reason)
            span.set_status(trace.Status(trace.StatusCode.OK))
            return update

    run.__name__ = name
    run.__qualname__ = name
    run.__doc__ = getattr(fn, "func", fn).__doc__  # a partial's own docstring says nothing
    return run


NODE_VALUE_CHARS = 800
"""Characters of JSON a node span shows of one state value it was given, before cutting it."""

NODE_VALUES_CHARS = 6000
"""Characters of JSON a node span shows of all the state values it was given; keys past it are
named in ``more``."""


def node_input(state: Any, content: str) -> dict[str, Any]:
    """What a node span shows as its input: the question and hint it works on, the keys of the
    state it was given and, with ``all`` content, their values (``values``).

    Each value is shown as JSON when that fits in :data:`NODE_VALUE_CHARS` characters, else cut
    (a string's start, a list's first items, an object's first fields, each ending in the
    truncation mark or saying how many more there were; see :func:`_preview`); values are added,
    keys in order, while they fit in :data:`NODE_VALUES_CHARS`, and the keys left out are listed
    in ``more``.
    With ``metadata`` content the values are left out (they hold rows, retrieved values and the
    models' text); ``none`` shows nothing (the caller puts no input).
    """
    if not isinstance(state, dict):
        return {}
    shown: dict[str, Any] = {}
    if content != NONE:
        shown["question"] = state.get("question") or ""
        if state.get("evidence"):
            shown["evidence"] = state["evidence"]
    keys = sorted(str(k) for k, v in state.items()
                  if v is not None and not (isinstance(v, (str, list, tuple, dict)) and not v))
    shown["state_keys"] = keys
    if content == ALL:
        values: dict[str, Any] = {}
        more: list[str] = []
        room = NODE_VALUES_CHARS
        for key in keys:
            if key in ("question", "evidence"):
                continue
            if room <= 0:
                more.append(key)
                continue
            values[key] = _preview(state[key], min(NODE_VALUE_CHARS, room))
            room -= _size(values[key])
        shown["values"] = values
        if more:
            shown["more"] = more
    return shown


def _mark_checkpoint(span: Any) -> None:
    """Put on a node's span the thread and the checkpoint its input state came from."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a graph run
        return
    thread = configurable.get("thread_id")
    if thread is None:
        return
    span.set_attribute(attrs.SQLCHORUS_THREAD_ID, str(thread))
    checkpoint = (configurable.get("checkpoint_map") or {}).get("")
    if checkpoint:
        span.set_attribute(attrs.SQLCHORUS_CHECKPOINT_ID, str(checkpoint))


def apply_update(state: dict, update: dict, reducers: dict[str, Callable[[Any, Any], Any]]) -> dict:
    """The state as it will be once ``update`` is applied with the graph's reducers."""
    merged = dict(state)
    for key, value in update.items():
        reducer = reducers.get(key)
        merged[key] = reducer(merged.get(key), value) if reducer and key in merged else value
    return merged


def goto_targets(goto: Any) -> list[str]:
    """The node names a ``Command.goto`` sends to."""
    items = goto if isinstance(goto, (list, tuple)) else [goto]
    return [item.node if isinstance(item, Send) else str(item) for item in items]
