"""generate_list: LIST's step-wise generator, one candidate per sample like any other generator.

The node runs the LIST subgraph (wired in :mod:`sqlchorus.graph.list_graph` and handed to the
node as ``search`` when the graph is built) to the end and turns its
final state into one candidate. Running the subgraph inside the node, rather than adding it as
the node, keeps the search's working state (plans, sub-query verdicts, verified steps) out of the
parent state: only the candidate, its usage and errors come back, with a compact record of the
search in ``candidate["meta"]["list"]``. The inner nodes still trace as ``node:list_plan`` and so
on, as children of ``node:generate_list``.

The candidate's SQL is the query of the last step when every step was verified. A search that
gave up (global attempts spent, or a model call failed) offers no SQL: in LIST the query of an
earlier step is only a partial state (the rows and columns a step builds on, often a plain
``SELECT *`` of a join), not an answer to the question, and as a candidate it would run, vote and
look like one. The paper's search returns only a fully verified path. Its error says the search
gave up and why, and ``meta["list"]["deepest_verified"]`` keeps the deepest verified step
(its number, the plan's step count and its query) for the record. The one exception is a
deepest verified state that is the last step of its plan, a complete path: it is the candidate.
"""

from __future__ import annotations

from typing import Any

from langgraph.errors import GraphRecursionError
from langgraph.runtime import Runtime

from sqlchorus.core.candidates import new_candidate, updated
from sqlchorus.core.context import Context
from sqlchorus.core.generator import Generator
from sqlchorus.core.list_search import recursion_limit
from sqlchorus.core.state import Candidate, GeneratorInput
from sqlchorus.core.updates import GeneratorUpdate

NODE = "generate_list"
KEY = "list"
SEARCH = "sqlchorus.graph.list_graph:build_list_graph"
"""The LIST subgraph's compiler, by import path: the graph floor wires it from the ``list_*``
nodes, which this module may not import."""

LIST_PAPER_CALLS = 6
"""Model calls per question LIST made with GPT-4o in the paper (5.84 on BIRD dev, its Table 5).
A search makes at most ``list_max_global_attempts`` step queries, plus a plan and one re-plan per
stuck first step; this is the typical count."""


def generate_list(state: GeneratorInput, runtime: Runtime[Context], *, search: Any) -> GeneratorUpdate:
    """Run the LIST search (``search``, the compiled subgraph the assembly hands in) for this
    sample and return its candidate."""
    context = runtime.context
    sample = state.get("sample", 0)
    inputs = {
        "question": state["question"],
        "evidence": state.get("evidence") or "",
        "schema_view": state.get("schema_view") or "",
        "values": dict(state.get("values") or {}),
        "generator": KEY,
        "sample": sample,
    }
    limit = recursion_limit(context.settings)
    try:
        final = search.invoke(inputs, config={"recursion_limit": limit}, context=context)
    except GraphRecursionError:
        message = f"the LIST search exceeded its step limit ({limit})"
        candidate = updated(new_candidate(KEY, sample, None), error=message, error_kind="list")
        return {"candidates": [candidate], "errors": [{"node": NODE, "kind": "recursion", "message": message}]}
    return {
        "candidates": [candidate_of(final, sample, context.settings)],
        "usage": list(final.get("usage") or []),
        "errors": list(final.get("errors") or []),
    }


def candidate_of(final: dict[str, Any], sample: int, settings: Any) -> Candidate:
    """The candidate a finished LIST search stands for."""
    plan = final.get("plan") or []
    verified = final.get("verified") or []
    complete = bool(plan) and len(verified) == len(plan) and not final.get("halt")
    best = final.get("best") or {}
    # A give-up still answers when its deepest verified state completed its own plan.
    whole = bool(best.get("sql")) and best.get("verified", 0) >= best.get("steps", 0) > 0
    sql = verified[-1]["sql"] if complete else (best["sql"] if whole else None)
    reason = None
    if not complete:
        reason = final.get("halt") or (
            f"global attempts spent ({final.get('global_attempts', 0)} of "
            f"{settings.list_max_global_attempts})"
        )
    meta = {
        "complete": complete,
        "plan": plan,
        "plans": final.get("plan_round", 0),
        "steps_planned": len(plan),
        "steps_verified": len(verified) if complete else best.get("verified", 0),
        "deepest_verified": (
            {"verified": best.get("verified", 0), "steps": best.get("steps", 0), "sql": best.get("sql")}
            if best and not complete else None
        ),
        "global_attempts": final.get("global_attempts", 0),
        "new_queries": len(final.get("written") or []),
        "tracebacks": final.get("tracebacks", 0),
        "verifier": settings.list_verifier,
        "gave_up": reason,
        "attempts": list(final.get("trail") or []),
    }
    candidate = new_candidate(KEY, sample, sql, reasoning=_reasoning(plan, verified if complete else []))
    if sql is None:
        depth = (f"only {best['verified']} of {best['steps']} steps were verified" if best.get("verified")
                 else "no step was verified")
        candidate = updated(
            candidate, error=f"LIST gave up before verifying every step ({depth}): {reason}", error_kind="list",
        )
    return updated(candidate, meta={"list": meta})


def _reasoning(plan: list[str], verified: list[dict[str, Any]]) -> str:
    queries = {v["step"]: v["sql"] for v in verified}
    lines = []
    for i, instruction in enumerate(plan):
        lines.append(f"Step {i + 1}: {instruction}")
        if i in queries:
            lines.append(f"  {queries[i]}")
    return "\n".join(lines)


GENERATOR = Generator(
    key=KEY,
    node=NODE,
    fn=generate_list,
    calls=lambda settings: LIST_PAPER_CALLS,
    search=SEARCH,
    paper="LIST",
    differs=(
        "the plan examples are natural-language back-translations written by hand for four "
        "questions over the demo database, not by a model over train-set queries; a re-plan is shown "
        "the plan that failed and why"
    ),
    oracle={"list_plan": "list:plan", "list_write_step": "list:write_step", "list_reprompt": "list:reprompt"},
    presets={"full": 1},
    order=60,
)
