"""list_traceback: LIST's way out of a step that failed every local attempt.

When some step is verified, the search goes back to the last one and rewrites it: the step
that failed may be impossible on top of it (a join through the wrong table, a filter that
already dropped the rows the next step needs). Its verified query is set aside as a dead end, with the failed attempts
at the step after it, and shown to the model, with any earlier dead end of that step and the
step's own failed attempts, when it rewrites the step (dead ends of deeper steps go: they were
built on the version being replaced). When nothing is verified,
the plan itself is suspect and the search re-plans, shown every plan that failed. The router (:func:`sqlchorus.graph.routing.after_traceback`)
says which happened and why.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus.core.context import Context
from sqlchorus.core.list_search import ListState
from sqlchorus.core.updates import TracebackUpdate

NODE = "list_traceback"


def list_traceback(state: ListState, runtime: Runtime[Context]) -> TracebackUpdate:
    verified = list(state.get("verified") or [])
    check = state.get("check") or {}
    error = check.get("error") or check.get("kind") or "failed"
    failed_step = check.get("step", state.get("step", 0))
    failures = list(state.get("failures") or [])
    update: TracebackUpdate = {"tracebacks": (state.get("tracebacks") or 0) + 1, "local_attempts": 0, "failures": []}
    if verified:
        last = verified.pop()
        kept = [d for d in state.get("dead_ends") or [] if d["step"] <= last["step"]]
        update.update({
            "verified": verified,
            "step": last["step"],
            "failures": list(last.get("failures") or []),
            "dead_ends": [*kept, {"step": last["step"], "sql": last["sql"], "error": error, "failures": failures}],
            "last_traceback": {"to": "step", "step": last["step"], "failed_step": failed_step},
        })
    else:
        update.update({
            "failed_plans": [*(state.get("failed_plans") or []), {"plan": list(state.get("plan") or []), "error": error}],
            "last_traceback": {"to": "plan", "failed_step": failed_step},
        })
    return update
