"""Routing decisions, every one of the graph's and of the LIST subgraph's: where to go next and why.

A router takes the state as it will be after its node's update, and the runtime; it returns a
list of ``(target, reason)`` pairs, where a target is a node name, ``END`` or a ``Send``. The
node wrapper (:func:`~sqlchorus.core.tracing.traced_node`) records each reason as a ``route``
event on the deciding node's span.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from langgraph.config import get_config
from langgraph.graph import END
from langgraph.runtime import get_runtime
from langgraph.types import Send

from sqlchorus.core.candidates import UNFIXABLE_KINDS, can_fix, fix_record, is_broken
from sqlchorus.core.state import GeneratorInput

Route = list[tuple[Any, str]]


def fan_out_generators(state: dict, runtime: Any, *, nodes: dict[str, str]) -> Route:
    """One ``Send`` per enabled generator sample, each with its own copy of the shared inputs.

    ``nodes`` maps each generator the graph was built with to its node (the assembly binds it).
    """
    settings = runtime.context.settings
    routes: Route = []
    for name, samples in settings.generators.items():
        for sample in range(samples):
            payload = GeneratorInput(
                question=state["question"],
                evidence=state.get("evidence") or "",
                keywords=list(state.get("keywords") or []),
                values=dict(state.get("values") or {}),
                links=dict(state.get("links") or {}),
                schema_links=state.get("schema_links") or "",
                schema_view=state.get("schema_view") or "",
                **({"database": state["database"]} if state.get("database") else {}),
                generator=name,
                sample=sample,
            )
            routes.append((Send(nodes[name], payload), f"generator {name}, sample {sample + 1} of {samples}"))
    return routes


def after_check(state: dict, runtime: Any) -> Route:
    """To the fixer while some candidate is broken and has attempts left, else to selection."""
    beta = runtime.context.settings.fix_rounds
    rounds = state.get("fix_round") or 0
    candidates = state.get("candidates") or []
    fixable = [c for c in candidates if can_fix(c, beta)]
    if fixable and rounds < beta:
        ids = ", ".join(f"{c['id']} ({c['status']}: {c['error'] or 'no rows'})" for c in fixable)
        return [("fix_candidates", f"round {rounds + 1} of {beta}: fixing {ids}")]
    if fixable:
        return [("select_candidate", f"fixer rounds spent ({rounds} of {beta})")]
    broken = [c for c in candidates if is_broken(c)]
    if broken:
        records = {c["id"]: fix_record(c) for c in broken}
        stopped = [f"{i} ({r['stopped']})" for i, r in records.items() if r["stopped"]]
        note = f"; stopped early: {', '.join(stopped)}" if stopped else ""
        return [("select_candidate", f"{len(broken)} candidate(s) still broken after at most {beta} fixer round(s) each{note}")]
    damaged = [c for c in candidates if c.get("error_kind") in UNFIXABLE_KINDS]
    if damaged:
        return [("select_candidate", f"{len(damaged)} candidate(s) failed on the database itself "
                                     f"({damaged[0]['error']}); no rewrite can mend that")]
    if not candidates:
        return [("select_candidate", "no candidates were produced")]
    return [("select_candidate", f"all {len(candidates)} candidate(s) ran and returned rows")]


# -- the LIST subgraph ---------------------------------------------------------------------------


def _step_name(state: dict, step: int | None = None) -> str:
    step = state.get("step", 0) if step is None else step
    return f"step {step + 1} of {len(state.get('plan') or [])}"


def _best_text(state: dict) -> str:
    best = state.get("best")
    if not best:
        return "nothing verified"
    return f"best verified: {best['verified']} of {_steps(best['steps'])} (plan {best['plan']})"


def _steps(n: int) -> str:
    return f"{n} step{'' if n == 1 else 's'}"


def _short(text: str | None, limit: int = 160) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def after_plan(state: dict, runtime: Any) -> Route:
    if state.get("halt"):
        return [(END, state["halt"])]
    plan = state.get("plan") or []
    round_ = state.get("plan_round", 1)
    label = f"plan {round_}" + (" (re-plan)" if round_ > 1 else "")
    if state.get("plan_fallback"):
        return [("list_write_step", f"{label}: no steps in the answer; one step: write the whole query")]
    return [("list_write_step", f"{label}: {_steps(len(plan))}")]


def _after_writing(state: dict, runtime: Any, how: str) -> Route:
    if state.get("halt"):
        return [(END, state["halt"])]
    limit = runtime.context.settings.list_max_global_attempts
    return [("list_verify_step", f"{_step_name(state)} {how} (query {state.get('global_attempts', 0)} of {limit})")]


def after_write(state: dict, runtime: Any) -> Route:
    return _after_writing(state, runtime, "written")


def after_reprompt(state: dict, runtime: Any) -> Route:
    limit = runtime.context.settings.list_max_local_attempts
    return _after_writing(state, runtime, f"repaired, reprompt {state.get('local_attempts', 0)} of {limit}")


def after_verify(state: dict, runtime: Any) -> Route:
    """Continue, finish, reprompt, trace back or give up; the reason says which and why."""
    settings = runtime.context.settings
    check = state.get("check") or {}
    plan = state.get("plan") or []
    attempt_step = check.get("step", state.get("step", 0))
    name = _step_name(state, attempt_step)
    spent = state.get("global_attempts", 0) >= settings.list_max_global_attempts
    global_text = f"global attempts spent ({state.get('global_attempts', 0)} of {settings.list_max_global_attempts})"
    if check.get("ok"):
        note = f" ({check['warning']})" if check.get("warning") else ""
        if state.get("step", 0) >= len(plan):
            return [(END, f"{'all ' if len(plan) > 1 else ''}{_steps(len(plan))} verified{note}")]
        if spent:
            return [(END, f"{name} verified{note}, but {global_text}; {_best_text(state)}")]
        return [("list_write_step", f"{name} verified{note}; writing step {state['step'] + 1}")]
    error = _short(f"{check.get('kind')}: {check.get('error')}")
    if spent:
        return [(END, f"{name} failed ({error}) and {global_text}; {_best_text(state)}")]
    local = state.get("local_attempts", 0)
    limit = settings.list_max_local_attempts
    if local < limit:
        return [("list_reprompt", f"{name} failed ({error}); reprompt {local + 1} of {limit}")]
    return [("list_traceback", f"{name} failed {local + 1} times, local attempts spent ({local} of {limit}): {error}")]


def after_traceback(state: dict, runtime: Any) -> Route:
    back = state.get("last_traceback") or {}
    failed = _step_name(state, back.get("failed_step", 0))
    if back.get("to") == "step":
        step = back["step"] + 1
        return [("list_write_step", f"{failed} is stuck; back to step {step}, the last verified step, to rewrite it")]
    return [("list_plan", f"{failed} is stuck and no step is verified; re-planning (plan {state.get('plan_round', 1) + 1})")]


KEEP_NEXT = "sqlchorus_keep_next"
"""A configurable key an edit (``update_state``) may carry: the nodes the edited checkpoint goes
on to, whatever the routers would now say (the debugger's edits keep the run where it was)."""


def by_router(router: Any, settings: Any) -> Any:
    """A conditional edge that goes where ``router`` says for the state as it is (the node's
    span records the same decisions with their reasons).

    A state edited through LangGraph's API (``update_state``) is routed with no run under way,
    so without the run's context: the router then reads ``settings``, those the graph was built
    for."""

    def route(state: dict) -> list[Any]:
        try:
            pinned = (get_config().get("configurable") or {}).get(KEEP_NEXT)
        except RuntimeError:
            pinned = None
        if pinned is not None:  # an edit that keeps the run before the nodes it was before
            return list(pinned)
        runtime: Any
        try:
            runtime = get_runtime()
        except (RuntimeError, LookupError):  # no run under way: an edit of a checkpoint
            runtime = None
        if runtime is None or getattr(runtime, "context", None) is None:
            runtime = SimpleNamespace(context=SimpleNamespace(settings=settings))
        return [target for target, _ in router(state, runtime)]

    name = getattr(router, "__name__", None) or getattr(getattr(router, "func", None), "__name__", None)
    route.__name__ = name or "route"
    return route
