"""LIST's search as data: its state, its step bound, and the prompt parts its nodes share.

The LIST subgraph (:mod:`sqlchorus.graph.list_graph`) runs ``list_plan``, ``list_write_step``,
``list_verify_step``, ``list_reprompt`` and ``list_traceback`` over :class:`ListState`; only the
candidate it stands for reaches the parent graph.

Every call of a search samples as the LIST paper does throughout (its Appendix A: temperature
0.8, top-p 0.95, ``retry_temperature`` and ``retry_top_p``; :func:`sampling`), the first plan and
first writes as much as the retries: every reprompt, every re-plan, and every step written after
the first traceback, when the search goes over ground it has covered. A first-pass call carries
the sample's number, so that it is a reproducible draw of its own (the response cache and a run's
call log key it by sample) and two samples of LIST are two draws; a retry carries none, so it is
always a fresh draw. Each retry's prompt shows every earlier failure it answers (the step's failed
attempts, the versions of a step that led to dead ends, the plans that failed), so no retry
repeats an earlier prompt.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Annotated, Any

from typing_extensions import TypedDict

from sqlchorus.core.diversity import Sampling, retry_sampling
from sqlchorus.core.state import ErrorRecord, UsageRecord
from sqlchorus.tools.values.shown import values_text
from sqlchorus.tools.steps.verify import same_query

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
        failures: the failed attempts at the current step, oldest first (``sql``, ``kind``,
            ``error``, ``failing``), every one shown to the next retry of the step. A verified
            step keeps its own (``verified[i]["failures"]``), so that a rewrite after a traceback
            sees them again.
        local_attempts: reprompts of the current step; ``global_attempts``: queries written (the
            paper's bound, every model answer counts); ``written``: those answers that were a
            query the search had not written before (``new_queries`` in the candidate's record).
        best: the deepest verified state seen, the candidate if the search gives up.
        dead_ends: verified steps set aside by traceback (``step``, ``sql``, ``error``, and the
            ``failures`` of the step after it), shown when their step is rewritten; when the
            rewrite is the same query, the next step starts from those failures.
        failed_plans: the plans re-plans replaced, and why each failed.
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
    failures: list[dict[str, Any]]
    local_attempts: int
    global_attempts: int
    written: list[str]
    tracebacks: int
    best: dict[str, Any] | None
    dead_ends: list[dict[str, Any]]
    failed_plans: list[dict[str, Any]]
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


def shared_values(state: Mapping[str, Any]) -> dict[str, str]:
    """The prompt values every LIST prompt shares."""
    return {
        "schema": state.get("schema_view") or "",
        "values": values_text(state.get("values")),
        "question": state["question"],
        "evidence": state.get("evidence") or "(none)",
    }


def numbered(plan: list[str]) -> str:
    return "\n".join(f"Step {n}: {s}" for n, s in enumerate(plan, 1))


def step_values(state: Mapping[str, Any]) -> dict[str, Any]:
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


def sampling(context: Any, state: Mapping[str, Any], retry: bool) -> Sampling:
    """``call_model``'s sampling arguments: LIST's temperature and top-p for every call, with the
    sample's number on a first-pass call and none on a retry (a reprompt, a re-plan, a step
    written after a traceback; see the module's docstring)."""
    if retry:
        return retry_sampling(context)
    return {**retry_sampling(context), "sample": state.get("sample", 0)}


def earlier_text(failures: list[dict[str, Any]], title: str = "Earlier attempts at this step") -> str:
    """Failed attempts at a step, oldest first, each with what happened (a repeated query is
    named, not shown again), under a ``##`` heading; empty when there are none."""
    if not failures:
        return ""
    lines = [f"## {title} (oldest first), each with what happened"]
    for n, attempt in enumerate(failures, 1):
        sql = attempt.get("sql")
        same = next((k for k, other in enumerate(failures[: n - 1], 1) if same_query(sql, other.get("sql"))), None)
        shown = f" the same query as attempt {same}" if same else f"\n```sql\n{sql or '-- (no SQL in the answer)'}\n```"
        lines.append(f"Attempt {n}:{shown}\nthis happened: {attempt.get('kind') or 'error'}: {attempt.get('error') or 'failed'}")
    return "\n".join(lines) + "\n"
