"""The LIST subgraph: step-wise generation that the database verifies, with reprompt and traceback.

```
START -> list_plan -> list_write_step -> list_verify_step
list_verify_step --(verified, more steps)--> list_write_step
                 --(verified, last step)--> END
                 --(failed, local attempts left)--> list_reprompt -> list_verify_step
                 --(failed, local attempts spent)--> list_traceback
                 --(global attempts spent)--> END, with the best verified state
list_traceback --(a step is verified)--> list_write_step (rewrite the last verified step)
               --(nothing verified)--> list_plan (re-plan)
```

A model call that fails ends the search at once (``halt``): retrying a provider is the model
layer's job, and LIST's attempts are for repairing SQL. Every node is wrapped by
:func:`~sqlchorus.graph.tracing.traced_node`, so every transition is a ``route`` event with its
reason, on the span of the node that decided it.

The loop is bounded twice: by ``Settings.list_max_global_attempts`` (queries written, counted in
state) and by the explicit ``recursion_limit`` from :func:`recursion_limit`, which is a little
above the most steps the attempts allow.
"""

from __future__ import annotations

import operator
import typing
from collections.abc import Callable
from functools import lru_cache
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from sqlchorus.graph.context import Context
from sqlchorus.graph.state import ErrorRecord, UsageRecord
from sqlchorus.graph.tracing import traced_node

Route = list[tuple[Any, str]]
_SLACK = 5  # steps above the worst case, so the limit never cuts a search that is within budget
NODES: tuple[str, ...] = ("list_plan", "list_write_step", "list_verify_step", "list_reprompt", "list_traceback")


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


# -- routing -------------------------------------------------------------------------------------


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


# -- building ------------------------------------------------------------------------------------


def _reducers() -> dict[str, Callable[[Any, Any], Any]]:
    hints = typing.get_type_hints(ListState, include_extras=True)
    return {
        key: meta
        for key, hint in hints.items()
        for meta in getattr(hint, "__metadata__", ())
        if callable(meta)
    }


def build_list_graph():
    """Compile the LIST subgraph. Its input is a ``GeneratorInput``; run it with a
    :class:`~sqlchorus.graph.context.Context` and ``recursion_limit(settings)``.

    It is compiled without a checkpointer of its own (``checkpointer=False``): the parent graph
    checkpoints ``generate_list`` as one step, and a resumed run re-runs the whole search.
    """
    from sqlchorus.nodes.list_plan import list_plan
    from sqlchorus.nodes.list_reprompt import list_reprompt
    from sqlchorus.nodes.list_traceback import list_traceback
    from sqlchorus.nodes.list_verify_step import list_verify_step
    from sqlchorus.nodes.list_write_step import list_write_step

    reducers = _reducers()
    builder = StateGraph(ListState, context_schema=Context)

    def add(name: str, fn: Callable[..., Any], router: Callable[..., Route], destinations: tuple[str, ...]):
        builder.add_node(name, traced_node(name, fn, router=router, reducers=reducers), destinations=destinations)

    add("list_plan", list_plan, after_plan, ("list_write_step", END))
    add("list_write_step", list_write_step, after_write, ("list_verify_step", END))
    add("list_verify_step", list_verify_step, after_verify, ("list_write_step", "list_reprompt", "list_traceback", END))
    add("list_reprompt", list_reprompt, after_reprompt, ("list_verify_step", END))
    add("list_traceback", list_traceback, after_traceback, ("list_write_step", "list_plan"))
    builder.add_edge(START, "list_plan")
    return builder.compile(checkpointer=False, name="generate_list")


@lru_cache(maxsize=1)
def list_graph():
    """The compiled subgraph, built once per process (it does not depend on settings)."""
    return build_list_graph()
