"""The answer to one question, with everything that led to it, and why a run has none."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
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
        """A JSON-safe dict (:func:`sqlchorus.tools.json_values.json_value`): a blob becomes
        ``<blob N bytes>``."""
        data = asdict(self)
        data.pop("state", None)
        data["cost"] = self.cost
        data["ok"] = self.ok
        return json_value(data)


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

