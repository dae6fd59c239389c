"""OpenTelemetry tracing of a run: a span per node, a ``route`` event per routing decision.

Each run gets its own ``TracerProvider`` (the global one can be set only once per process), a
root span ``run``, and a JSON Lines file ``<trace_dir>/<run-id>.jsonl`` with one finished span per
line, written as each span ends so that a run that dies still leaves its trace. An OTLP/HTTP
endpoint can receive the same spans. Model calls (``llm:<role>``) and SQL executions (``sql``)
are child spans of the node that made them.
"""

from __future__ import annotations

import json
import time
import typing
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from langgraph.types import Command, Send
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from sqlchorus.config.install import install_hint
from sqlchorus.core import attributes as attrs


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


class RunTracer(AbstractContextManager["RunTracer"]):
    """The tracing of one run: provider, exporters and the root span.

    Args:
        trace_dir: folder for the JSONL file; None writes no file.
        otlp_endpoint: OTLP/HTTP traces endpoint (``http://host:4318/v1/traces``), or None.
        exporters: extra span exporters (tests pass an ``InMemorySpanExporter``).
        run_id: the run's id; a timestamped random one by default.
        attributes: attributes of the root span.
    """

    def __init__(
        self,
        *,
        trace_dir: str | Path | None = None,
        otlp_endpoint: str | None = None,
        exporters: Iterable[SpanExporter] = (),
        run_id: str | None = None,
        attributes: dict[str, Any] | None = None,
    ):
        self.run_id = run_id or new_run_id()
        self.path: Path | None = Path(trace_dir) / f"{self.run_id}.jsonl" if trace_dir else None
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "sqlchorus", attrs.SQLCHORUS_RUN_ID: self.run_id})
        )
        self._problems: list[str] = []
        self._file: JsonlSpanExporter | None = None
        if self.path is not None:
            try:
                self._file = JsonlSpanExporter(self.path)
                self.provider.add_span_processor(SimpleSpanProcessor(self._file))
            except OSError as e:  # tracing is a record of the run, never a reason to lose it
                self._problems.append(f"no trace file: cannot write {self.path} ({e.strerror or e})")
                self.path = None
        for exporter in exporters:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        if otlp_endpoint:
            try:
                self.provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(otlp_endpoint)))
            except RuntimeError as e:
                self._problems.append(f"spans are not sent to {otlp_endpoint}: {e}")
        self.tracer = self.provider.get_tracer("sqlchorus")
        self._attributes = {attrs.SQLCHORUS_RUN_ID: self.run_id, **(attributes or {})}
        self._span_cm: Any = None
        self.root: Any = None

    @property
    def problems(self) -> list[str]:
        """What went wrong with tracing (a file that could not be written, an exporter that is
        not installed), one line each; the run itself went on."""
        late = [self._file.failed] if self._file is not None and self._file.failed else []
        return self._problems + late

    def __enter__(self) -> RunTracer:
        self._span_cm = self.tracer.start_as_current_span(attrs.RUN_SPAN, attributes=self._attributes)
        self.root = self._span_cm.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._span_cm is not None:
                self._span_cm.__exit__(*exc)
        finally:
            self.provider.shutdown()


def _otlp_exporter(endpoint: str) -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as e:
        raise RuntimeError(
            f"Exporting to an OTLP endpoint needs the OTLP exporter: {install_hint('otlp')}."
        ) from e
    return OTLPSpanExporter(endpoint=endpoint)


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

    With a ``router``, the wrapper asks it where to go, given the state as it will be after the
    node's update, and returns a ``Command``; each decision becomes a ``route`` event with the
    router's reason. Without one, the fixed ``successors`` (the targets of the node's edges, as
    the assembly declared them) are recorded with the reason ``edge``.
    Routing inside the node's span keeps every decision on the span of the node that made it.
    """
    reducers = reducers or {}

    def run(state: Any, runtime: Any) -> Any:
        tracer = runtime.context.tracer
        progress = runtime.context.progress
        with tracer.start_as_current_span(attrs.NODE_SPAN_PREFIX + name) as span:
            span.set_attribute(attrs.SQLCHORUS_NODE, name)
            started = time.monotonic()
            if progress is not None:
                progress(NodeEvent(name, "start", 0.0))
            try:
                update = fn(state, runtime) or {}
                if isinstance(update, dict):
                    span.set_attribute(attrs.SQLCHORUS_UPDATE_KEYS, sorted(update))
                if router is None:
                    for target in successors:
                        emit_route(name, target, "edge")
                    return update
                routes = router(apply_update(state, update, reducers), runtime)
            except Exception as e:
                span.record_exception(e)
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(e)[:300]))
                raise
            finally:
                if progress is not None:
                    progress(NodeEvent(name, "end", time.monotonic() - started))
            for target, reason in routes:
                emit_route(name, goto_targets(target)[0], reason)
            return Command(update=update, goto=[target for target, _ in routes])

    run.__name__ = name
    run.__qualname__ = name
    run.__doc__ = getattr(fn, "func", fn).__doc__  # a partial's own docstring says nothing
    return run


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
