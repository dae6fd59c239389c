"""``ask``: a question in, a checked answer out."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from langgraph.errors import GraphRecursionError

from sqlchorus.errors import EmptyQuestionError
from sqlchorus.graph import attributes as attrs
from sqlchorus.graph.build import build_graph
from sqlchorus.graph.context import Context
from sqlchorus.graph.tracing import RunTracer
from sqlchorus.models import resolve_roles
from sqlchorus.settings import Settings
from sqlchorus.tools.database import GuardedDatabase, SqlError
from sqlchorus.tools.schema import introspect
from sqlchorus.tools.value_index import ValueIndex


@dataclass
class Result:
    """The answer to one question, with everything that led to it.

    Attributes:
        question: the question asked.
        sql: the chosen query, or None when no query ran.
        columns, rows: its result (at most ``Settings.answer_rows`` rows; ``truncated`` says so).
        candidates: every candidate with its generator, status, error and fix attempts.
        selection: how the answer was chosen (clusters, confidence, reason).
        usage: one record per model call (node, role, model, tokens, latency).
        errors: problems met on the way that did not stop the run.
        error: why there is no answer, or None.
        run_id, trace_path: where the trace of this run is.
        seconds: wall time of the run.
    """

    question: str
    sql: str | None = None
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    truncated: bool = False
    candidates: list[dict[str, Any]] = field(default_factory=list)
    selection: dict[str, Any] = field(default_factory=dict)
    usage: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    run_id: str = ""
    trace_path: str | None = None
    seconds: float = 0.0
    state: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None and self.sql is not None

    @property
    def cost(self) -> dict[str, Any]:
        """Model calls, tokens, dollars and seconds, in total and per node.

        ``cost_usd`` comes from the price table (:mod:`sqlchorus.pricing`); calls answered from
        the response cache count in ``cached_calls`` and cost nothing; ``unpriced_models`` names
        models that have no price, whose calls are counted at 0.
        """
        per_node: dict[str, dict[str, Any]] = {}
        for u in self.usage:
            entry = per_node.setdefault(u["node"], {"calls": 0, "cached_calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "model_seconds": 0.0})
            entry["calls"] += 1
            entry["cached_calls"] += 1 if u.get("cached") else 0
            entry["input_tokens"] += u["input_tokens"]
            entry["output_tokens"] += u["output_tokens"]
            entry["cost_usd"] = round(entry["cost_usd"] + float(u.get("cost_usd") or 0.0), 10)
            entry["model_seconds"] = round(entry["model_seconds"] + u["latency_ms"] / 1000.0, 4)
        return {
            "calls": len(self.usage),
            "cached_calls": sum(1 for u in self.usage if u.get("cached")),
            "input_tokens": sum(u["input_tokens"] for u in self.usage),
            "output_tokens": sum(u["output_tokens"] for u in self.usage),
            "cost_usd": round(sum(float(u.get("cost_usd") or 0.0) for u in self.usage), 10),
            "unpriced_models": sorted({u["model"] for u in self.usage if u.get("priced") is False}),
            "model_seconds": round(sum(u["latency_ms"] for u in self.usage) / 1000.0, 4),
            "seconds": round(self.seconds, 4),
            "by_node": per_node,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict: binary values become ``<blob N bytes>``."""
        data = asdict(self)
        data.pop("state", None)
        data["rows"] = [[_json_safe(v) for v in row] for row in self.rows]
        data["cost"] = self.cost
        data["ok"] = self.ok
        return data


def _json_safe(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<blob {len(bytes(value))} bytes>"
    return value


def default_db() -> Path:
    from sqlchorus.demo import demo_db_path

    return demo_db_path()


def _file_key(db: GuardedDatabase) -> tuple[str, int, int]:
    stat = db.path.stat()
    return (str(db.path), stat.st_mtime_ns, stat.st_size)


_SCHEMAS: dict[tuple[Any, ...], Any] = {}
_VALUES: dict[tuple[Any, ...], Any] = {}
_CACHE_SIZE = 16


_CACHE_LOCK = threading.Lock()
_BUILDING: dict[Any, threading.Lock] = {}


def _remember(cache: dict, key: Any, make: Any) -> Any:
    """Build once per database file version; a changed file gets a fresh entry.

    Evaluation answers questions from several threads: one lock per key makes each build happen
    once, while questions on databases already built (or being built by another key) go on.
    """
    with _CACHE_LOCK:
        if key in cache:
            return cache[key]
        building = _BUILDING.setdefault(key, threading.Lock())
    with building:
        with _CACHE_LOCK:
            if key in cache:
                return cache[key]
        value = make()
        with _CACHE_LOCK:
            if len(cache) >= _CACHE_SIZE:
                cache.pop(next(iter(cache)))
            cache[key] = value
            _BUILDING.pop(key, None)
        return value


@lru_cache(maxsize=32)
def _compiled(generators: tuple[tuple[str, int], ...]):
    return build_graph(Settings(generators=dict(generators)))


def ask(
    question: str,
    db: str | Path | GuardedDatabase | None = None,
    model: Any = None,
    *,
    evidence: str = "",
    settings: Settings | None = None,
    exporters: Iterable[Any] = (),
    value_index: Any = None,
) -> Result:
    """Answer ``question`` over the SQLite database ``db`` (the bundled demo database by default).

    Args:
        question: the question in plain language.
        db: path of a SQLite file, or an open :class:`GuardedDatabase`.
        model: the chat model for every role (overrides ``settings.model``): a
            ``provider:model`` name or a ``BaseChatModel``.
        evidence: a hint that defines terms of the question (BIRD's "evidence").
        settings: everything else; defaults are sane.
        exporters: extra OpenTelemetry span exporters for this run.
        value_index: a prebuilt value index to reuse across questions on the same database.

    Returns:
        A :class:`Result`; ``result.error`` says why when there is no answer.

    Raises:
        EmptyQuestionError: the question is empty.
        sqlchorus.tools.database.DatabaseOpenError: the database is missing or not SQLite.
        sqlchorus.models.ModelConfigError: no usable model is configured.
    """
    if not question or not question.strip():
        raise EmptyQuestionError("The question is empty: ask something about the database.")
    settings = settings or Settings()
    if model is not None:
        settings = settings.replace(model=model)
    models = resolve_roles(settings)
    owned = not isinstance(db, GuardedDatabase)
    database = (
        db
        if isinstance(db, GuardedDatabase)
        else GuardedDatabase(
            db if db is not None else default_db(),
            timeout_s=settings.sql_timeout_s,
            max_rows=settings.max_rows,
            max_bytes=settings.max_bytes,
        )
    )
    start = time.perf_counter()
    try:
        with RunTracer(
            trace_dir=settings.trace_dir,
            otlp_endpoint=settings.otlp_endpoint,
            exporters=exporters,
            attributes={attrs.SQLCHORUS_QUESTION: question, attrs.DB_NAMESPACE: database.name},
        ) as run:
            database.tracer = run.tracer
            key = _file_key(database)
            schema = _remember(
                _SCHEMAS, (*key, settings.sample_values),
                lambda: introspect(database, sample_values=settings.sample_values),
            )
            if value_index is None:
                try:
                    value_index = _remember(
                        _VALUES, (*key, settings.value_cache_dir),
                        lambda: ValueIndex.load_or_build(database, settings.value_cache_dir),
                    )
                except (SqlError, OSError, sqlite3.Error, ValueError):
                    value_index = None  # retrieve_values tries again and records why it failed
            context = Context(
                db=database, models=models, settings=settings, schema=schema,
                tracer=run.tracer, value_index=value_index,
            )
            graph = _compiled(tuple(settings.generators.items()))
            initial = {"question": question.strip(), "evidence": evidence or ""}
            config = {"recursion_limit": settings.recursion_limit}
            error = None
            try:
                state = graph.invoke(initial, config=config, context=context)
            except GraphRecursionError:
                state, error = {}, f"The run exceeded its step limit ({settings.recursion_limit})."
                run.root.set_attribute(attrs.SQLCHORUS_ERROR, error)
            except Exception as e:  # a failure no node handled: report it, keep it in the trace
                run.root.record_exception(e)
                state, error = {}, f"The run failed: {type(e).__name__}: {e}"
            result = _result(question, state, error)
            result.run_id = run.run_id
            result.trace_path = str(run.path) if run.path else None
            if result.error:
                run.root.set_attribute(attrs.SQLCHORUS_ERROR, result.error)
            run.root.set_attribute(attrs.SQLCHORUS_COST_USD, result.cost["cost_usd"])
    finally:
        database.tracer = None
        if owned:
            database.close()
    result.seconds = time.perf_counter() - start
    return result


def _result(question: str, state: dict[str, Any], error: str | None) -> Result:
    answer = state.get("answer") or {}
    return Result(
        question=question,
        sql=answer.get("sql"),
        columns=list(answer.get("columns") or []),
        rows=[list(r) for r in answer.get("rows") or []],
        truncated=bool(answer.get("truncated")),
        candidates=[dict(c) for c in state.get("candidates") or []],
        selection=dict(state.get("selection") or {}),
        usage=[dict(u) for u in state.get("usage") or []],
        errors=[dict(e) for e in state.get("errors") or []],
        error=error or answer.get("error") or (None if answer else "The run ended without an answer."),
        state=state,
    )
