"""The answer to one question, with everything that led to it, and why a run has none."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlchorus.core.candidates import fix_record
from sqlchorus.tools.json_values import json_value
from sqlchorus.tools.models.pricing import usage_cost


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
        checkpoint_path: the file of this run's checkpoints (its thread id is ``run_id``), or None.
        seconds: wall time of the run.
        database: the name of the database it was asked over (a file's name without its
            extension, a server database's name), or None when not known.

    :func:`answer_json` gives it as JSON, as every interface returns it.
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
    checkpoint_path: str | None = None
    seconds: float = 0.0
    database: str | None = None
    state: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None and self.sql is not None

    @property
    def cost(self) -> dict[str, Any]:
        """Model calls, tokens, dollars and seconds, in total and per node
        (:func:`sqlchorus.tools.models.pricing.usage_cost`)."""
        return usage_cost(self.usage, self.seconds)

    def to_dict(self) -> dict[str, Any]:
        """The answer as JSON: :func:`answer_json` of this result."""
        return answer_json(self)


LOCAL_FIELDS = ("trace_path", "checkpoint_path")
"""The fields of :func:`answer_json` that name files on the machine that ran the run: a server
leaves them out of what it returns (its clients read a run's trace and history through it)."""
TOOL_FIELDS = ("sql", "columns", "rows", "truncated", "confidence", "run_id", "error")
"""The fields of :func:`answer_json` an agent's tool returns (the LangChain tools, MCP's ``ask``):
what an agent goes on with, in few tokens."""


def answer_json(result: Result, database: str | None = None) -> dict[str, Any]:
    """A run's answer as JSON: the one shape every interface returns it in.

    ``ask --json`` prints all of it; the REST API returns it without :data:`LOCAL_FIELDS` (and,
    when the model failed, with ``kind``); a tool returns :data:`TOOL_FIELDS` of it
    (:func:`tool_answer`). Every value is JSON-safe
    (:func:`sqlchorus.tools.json_values.json_value`): a blob becomes ``<blob N bytes>``.

    Fields: ``question``; ``database`` (``database`` when given, a server's id for it, else
    :attr:`Result.database`); ``ok``; ``sql``, ``columns``, ``rows`` and ``truncated`` (the
    answer, at most ``Settings.answer_rows`` rows); ``confidence`` (the selection's, 0 to 1);
    ``error`` (why there is no answer, or null); ``candidates`` and ``selection`` (how it was
    found and chosen); ``errors`` (problems met on the way); ``usage`` (one record per model
    call) and ``cost`` (:attr:`Result.cost`); ``seconds``; ``run_id``; ``trace_path`` and
    ``checkpoint_path``.
    """
    data = {
        "question": result.question,
        "database": database if database is not None else result.database,
        "ok": result.ok,
        "sql": result.sql,
        "columns": list(result.columns),
        "rows": result.rows,
        "truncated": bool(result.truncated),
        "confidence": result.selection.get("confidence"),
        "error": result.error,
        "candidates": result.candidates,
        "selection": result.selection,
        "errors": result.errors,
        "usage": result.usage,
        "cost": result.cost,
        "seconds": round(result.seconds, 4),
        "run_id": result.run_id,
        "trace_path": result.trace_path,
        "checkpoint_path": result.checkpoint_path,
    }
    return json_value(data)


def tool_answer(answer: dict[str, Any], max_rows: int) -> dict[str, Any]:
    """:data:`TOOL_FIELDS` of ``answer`` (:func:`answer_json`'s, or what a server kept of it),
    its rows cut to ``max_rows`` (``truncated`` says when there were more). A field the answer
    lacks (a run that failed before it had one) is left out."""
    brief = {k: answer[k] for k in TOOL_FIELDS if k in answer}
    rows = answer.get("rows")
    if isinstance(rows, list):
        brief["rows"] = rows[:max_rows]
        brief["truncated"] = bool(answer.get("truncated")) or len(rows) > max_rows
    return brief


FAILURE_KINDS = ("cancelled", "step_limit", "model", "no_sql", "timeout", "fixer_gave_up", "execution_error",
                 "empty", "no_answer")
"""Why a run has no answer, most telling first (see :func:`failure_kind`)."""


def failure_kind(result: Result) -> str | None:
    """Why ``result`` has no answer, as one of :data:`FAILURE_KINDS`, or None when it has one."""
    if result.ok:
        return None
    error = result.error or ""
    if error == "The run was cancelled.":
        return "cancelled"
    if "step limit" in error:
        return "step_limit"
    candidates = result.candidates
    if not any(c.get("sql") for c in candidates):
        return "model" if any(e.get("kind") == "model" for e in result.errors) else "no_sql"
    if any(c.get("error_kind") == "timeout" for c in candidates):
        return "timeout"
    failed = [c for c in candidates if c.get("status") == "error"]
    # Rounds the fixer spent count, not only those that gave a new query: a fixer that only
    # repeated a query, or answered without one, gave up as well.
    if failed and any(fix_record({"fix_attempts": 0, **c})["rounds"] for c in failed):
        return "fixer_gave_up"
    if failed:
        return "execution_error"
    if candidates and all(c.get("status") == "empty" for c in candidates):
        return "empty"
    return "no_answer"


def result_from_state(question: str, state: dict[str, Any], error: str | None) -> Result:
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

