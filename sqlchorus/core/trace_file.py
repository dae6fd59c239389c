"""Reading a run's trace file back: spans as a tree, printable with timings.

A trace file holds one finished span per line (see :mod:`sqlchorus.core.tracing`); this module
needs nothing else to show what happened in a run. Every reader of trace files reads its lines
here: strictly for the tree (a damaged file is an error), leniently for the viewer (a torn last
line of a run still being written is left out).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.errors import SqlchorusError


@dataclass
class SpanNode:
    name: str
    span_id: str
    parent_id: str | None
    start: datetime
    end: datetime
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    status: str
    children: list[SpanNode] = field(default_factory=list)

    @property
    def ms(self) -> float:
        return (self.end - self.start).total_seconds() * 1000.0


def is_run_span(name: str | None, attributes: dict[str, Any] | None) -> bool:
    """Whether a span is a run's own (its root): named for its origin (``ask``, ``eval``...)
    and saying so in ``sqlchorus.origin``, or, in traces written before origins, named ``run``."""
    return name == attrs.RUN_SPAN or bool((attributes or {}).get(attrs.SQLCHORUS_ORIGIN))


class TraceNotFoundError(SqlchorusError, FileNotFoundError):
    """No trace of that run, or no such trace file."""

    kind = "trace_not_found"
    http_status = 404


def find_trace(run: str, trace_dir: str | Path = "traces") -> Path:
    """The trace file for a run id, a unique run-id prefix, or a path.

    Raises:
        TraceNotFoundError: nothing matches, or the prefix is ambiguous.
    """
    path = Path(run)
    if path.is_file():
        return path
    folder = Path(trace_dir)
    exact = folder / f"{run}.jsonl"
    if exact.is_file():
        return exact
    if path.is_absolute() or "/" in run or any(ch in run for ch in "*?["):
        raise TraceNotFoundError(f"No trace file at {run}.")
    matches = sorted(folder.glob(f"{run}*.jsonl")) if folder.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise TraceNotFoundError(f"No trace for run {run!r} in {folder}/.")
    raise TraceNotFoundError(
        f"Run id {run!r} matches {len(matches)} traces in {folder}/; give more of it."
    )


def span_time(value: str) -> datetime:
    """A time stamp of a trace file, as OpenTelemetry writes it (``Z`` for UTC)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _check_types(node: SpanNode) -> None:
    if not isinstance(node.name, str) or not isinstance(node.span_id, str):
        raise TypeError("name and span_id must be strings")
    if not isinstance(node.attributes, dict) or not isinstance(node.events, list):
        raise TypeError("attributes must be an object and events a list")
    if not all(isinstance(e, dict) for e in node.events):
        raise TypeError("every event must be an object")
    if (node.start.tzinfo is None) != (node.end.tzinfo is None):
        raise ValueError("start and end times mix time zones")


def span_records(path: str | Path, *, strict: bool = True) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each span of a trace file as its JSON, with its line number; blank lines are skipped.

    Args:
        strict: a line that is not a span raises; else it is left out (a torn last line, a line
            of another shape, bytes that are not UTF-8), for readers that show what they can.

    Raises:
        ValueError: with ``strict``, a line is not a span.
    """
    with open(path, encoding="utf-8", errors="strict" if strict else "replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                if not _is_span(raw):
                    raise ValueError("not of a span's shape")
            except ValueError as e:
                if strict:
                    raise _not_a_span(path, number, e) from e
                continue
            yield number, raw


def read_spans(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The spans of a trace file as their JSON, at most ``limit``, leaving out any line that
    is not a span (see :func:`span_records`)."""
    spans = []
    for _, span in span_records(path, strict=False):
        if limit is not None and len(spans) >= limit:
            break
        spans.append(span)
    return spans


def _is_span(span: Any) -> bool:
    return (isinstance(span, dict) and isinstance(span.get("name"), str) and isinstance(span.get("start_time"), str)
            and isinstance(span.get("context"), dict) and isinstance(span["context"].get("span_id"), str)
            and isinstance(span.get("attributes") or {}, dict))


def _not_a_span(path: str | Path, number: int, error: Exception) -> ValueError:
    return ValueError(f"{path}:{number} is not a span ({error}).")


def load_spans(path: str | Path) -> list[SpanNode]:
    """The root spans of a trace file, children sorted by start time.

    Raises:
        ValueError: a line is not a span written by sqlchorus.
    """
    nodes: dict[str, SpanNode] = {}
    for number, raw in span_records(path):
        try:
            node = SpanNode(
                name=raw["name"],
                span_id=raw["context"]["span_id"],
                parent_id=raw.get("parent_id"),
                start=span_time(raw["start_time"]),
                end=span_time(raw["end_time"]),
                attributes=raw.get("attributes") or {},
                events=raw.get("events") or [],
                status=(raw.get("status") or {}).get("status_code", "UNSET"),
            )
            _check_types(node)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise _not_a_span(path, number, e) from e
        nodes[node.span_id] = node
    roots = []
    for node in nodes.values():
        parent = nodes.get(node.parent_id) if node.parent_id else None
        (parent.children if parent else roots).append(node)
    # Spans whose parents form a cycle (a damaged file) would vanish from the tree: show them
    # as roots instead.
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node.span_id not in seen:
            seen.add(node.span_id)
            stack.extend(node.children)
    for node in nodes.values():
        if node.span_id not in seen:
            parent = nodes.get(node.parent_id or "")
            if parent is not None and node in parent.children:
                parent.children.remove(node)
            roots.append(node)
            seen.add(node.span_id)
    for node in nodes.values():
        node.children.sort(key=lambda n: n.start)
    roots.sort(key=lambda n: n.start)
    return roots


def _detail(node: SpanNode) -> str:
    a = node.attributes
    parts = []
    if a.get(attrs.GEN_AI_OPERATION) == "chat":
        parts.append(f"{a.get(attrs.SQLCHORUS_ROLE, '?')} model")
        if attrs.GEN_AI_USAGE_INPUT in a:
            parts.append(f"tokens {a.get(attrs.GEN_AI_USAGE_INPUT)} in / {a.get(attrs.GEN_AI_USAGE_OUTPUT)} out")
    elif node.name == "sql":
        text = " ".join(str(a.get(attrs.DB_QUERY_TEXT, "")).split())
        parts.append(text if len(text) <= 80 else text[:77] + "...")
        if "sql.error" in a:
            parts.append(f"error: {a['sql.error']}")
        else:
            parts.append(f"{a.get('sql.rows', '?')} rows")
    elif node.name == attrs.VALUE_INDEX_BUILD_SPAN and attrs.VALUE_INDEX_VALUES in a:
        parts.append(f"{a[attrs.VALUE_INDEX_VALUES]} values from {a.get(attrs.VALUE_INDEX_COLUMNS, '?')} columns")
    elif is_run_span(node.name, a):
        if attrs.SQLCHORUS_QUESTION in a:
            parts.append(repr(a[attrs.SQLCHORUS_QUESTION]))
    if attrs.SQLCHORUS_ERROR in a:
        parts.append(f"error: {a[attrs.SQLCHORUS_ERROR]}")
    return "  ".join(parts)


def render_tree(roots: list[SpanNode]) -> list[str]:
    """Indented lines: one per span with its milliseconds, one per route event."""
    lines: list[str] = []

    def walk(node: SpanNode, depth: int) -> None:
        pad = "  " * depth
        detail = _detail(node)
        flag = "  [ERROR]" if node.status == "ERROR" else ""
        lines.append(f"{pad}{node.name}  {node.ms:.1f} ms{'  ' + detail if detail else ''}{flag}")
        for child in node.children:
            walk(child, depth + 1)
        for event in node.events:
            if event.get("name") == attrs.ROUTE_EVENT:
                ea = event.get("attributes") or {}
                lines.append(f"{pad}  -> {ea.get('to')}  ({ea.get('reason')})")

    for root in roots:
        walk(root, 0)
    return lines


def root_span_of(trace_dir: str | Path | None, run_id: str) -> tuple[str, str] | None:
    """``(trace_id, span_id)`` in hex of run ``run_id``'s root span, read from its trace file in
    ``trace_dir``; None when there is no such file or span (no trace folder, a run traced
    elsewhere, a file cut short)."""
    path = Path(trace_dir) / f"{run_id}.jsonl" if trace_dir else None
    if path is None or not path.is_file():
        return None
    for span in read_spans(path):
        context = span.get("context") or {}
        if span.get("parent_id") is None and is_run_span(span.get("name"), span.get("attributes")) \
                and context.get("span_id"):
            return str(context["trace_id"]).removeprefix("0x"), str(context["span_id"]).removeprefix("0x")
    return None
