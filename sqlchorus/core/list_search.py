"""LIST's search as data: its state, its step bound, and the prompt parts its nodes share.

The LIST subgraph (:mod:`sqlchorus.graph.list_graph`) runs ``list_plan``, ``list_write_step``,
``list_verify_step``, ``list_reprompt`` and ``list_traceback`` over :class:`ListState`; only the
candidate it stands for reaches the parent graph.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict

from sqlchorus.core.state import ErrorRecord, UsageRecord
from sqlchorus.tools.values import values_text

GENERATOR = "list"
NOTHING_VERIFIED = "-- nothing is verified yet: this step starts the query"
_SLACK = 5  # steps above the worst case, so the limit never cuts a search that is within budget


class ListState(TypedDict, total=False):
    """The running state of one LIST search. None of it reaches the parent graph but the candidate.

    Attributes:
        plan: the step instructions; ``plan_round`` counts plans made, ``plan_fallback`` says the
            model's answer had no steps and the plan is one step (the whole query).
        step: index of the step being written or repaired.
        verified: the verified path: ``{"step", "sql"}`` for steps ``0 .. step-1``.
        attempt: the query just written (``step``, ``kind`` write/reprompt, ``sql``).
        check: the verifier's verdict on it (see ``list_verify_step.verify_sql``).
        local_attempts: reprompts of the current step; ``global_attempts``: queries written.
        best: the deepest verified state seen, the candidate if the search gives up.
        dead_end: a verified step set aside by traceback, shown when it is rewritten.
        failed_plan: the plan a re-plan replaces, and why it failed.
        last_traceback: what the last traceback did: ``to`` ``step`` (and which) or ``plan``.
        accepted: sub-queries whose soft verdict (empty, join without a condition) the model
            confirmed.
        trail: one compact record per verification.
        halt: why the search stopped early (a model call failed).
    """

    question: str
    evidence: str
    schema_view: str
    values: dict[str, list[dict[str, Any]]]
    generator: str
    sample: int
    plan: list[str]
    plan_round: int
    plan_fallback: bool
    step: int
    verified: list[dict[str, Any]]
    attempt: dict[str, Any]
    check: dict[str, Any]
    local_attempts: int
    global_attempts: int
    tracebacks: int
    best: dict[str, Any] | None
    dead_end: dict[str, Any]
    failed_plan: dict[str, Any]
    accepted: list[str]
    last_traceback: dict[str, Any]
    trail: Annotated[list[dict[str, Any]], operator.add]
    halt: str | None
    usage: Annotated[list[UsageRecord], operator.add]
    errors: Annotated[list[ErrorRecord], operator.add]


def recursion_limit(settings: Any) -> int:
    """Graph steps a LIST search may take: two per query written (write or reprompt, then
    verify), one traceback and one plan per ``local + 1`` queries at most, and the first plan."""
    queries = settings.list_max_global_attempts
    per_traceback = settings.list_max_local_attempts + 1
    tracebacks = -(-queries // per_traceback)
    return 2 * queries + 2 * tracebacks + 1 + _SLACK


def shared_values(state: dict) -> dict[str, str]:
    """The prompt values every LIST prompt shares."""
    return {
        "schema": state.get("schema_view") or "",
        "values": values_text(state.get("values")),
        "question": state["question"],
        "evidence": state.get("evidence") or "(none)",
    }


def numbered(plan: list[str]) -> str:
    return "\n".join(f"Step {n}: {s}" for n, s in enumerate(plan, 1))


def step_values(state: dict) -> dict[str, Any]:
    """The plan, the current step and the verified queries before it, for the write and reprompt prompts."""
    plan = state.get("plan") or []
    step = state.get("step", 0)
    verified = state.get("verified") or []
    return {
        "steps": numbered(plan),
        "step_number": step + 1,
        "step_count": len(plan),
        "step": plan[step] if step < len(plan) else "",
        "verified": "\n".join(f"-- step {v['step'] + 1}\n{v['sql']};" for v in verified) or NOTHING_VERIFIED,
    }
