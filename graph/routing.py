"""Routing decisions: each returns where to go next and why.

A router takes the state as it will be after its node's update, and the runtime; it returns a
list of ``(target, reason)`` pairs, where a target is a node name, ``END`` or a ``Send``.
"""

from __future__ import annotations

from typing import Any

from langgraph.types import Send

from sqlchorus.graph.candidates import is_broken
from sqlchorus.graph.generators import enabled
from sqlchorus.graph.state import GeneratorInput

Route = list[tuple[Any, str]]


def fan_out_generators(state: dict, runtime: Any) -> Route:
    """One ``Send`` per enabled generator sample, each with its own copy of the shared inputs."""
    settings = runtime.context.settings
    routes: Route = []
    for name, generator, samples in enabled(settings.generators):
        for sample in range(samples):
            payload = GeneratorInput(
                question=state["question"],
                evidence=state.get("evidence") or "",
                keywords=list(state.get("keywords") or []),
                values=dict(state.get("values") or {}),
                links=dict(state.get("links") or {}),
                schema_view=state.get("schema_view") or "",
                generator=name,
                sample=sample,
            )
            routes.append((Send(generator.node, payload), f"generator {name}, sample {sample + 1} of {samples}"))
    return routes


def after_check(state: dict, runtime: Any) -> Route:
    """To the fixer while some candidate is broken and has attempts left, else to selection."""
    beta = runtime.context.settings.fix_rounds
    rounds = state.get("fix_round") or 0
    candidates = state.get("candidates") or []
    fixable = [c for c in candidates if is_broken(c) and c["fix_attempts"] < beta]
    if fixable and rounds < beta:
        ids = ", ".join(f"{c['id']} ({c['status']}: {c['error'] or 'no rows'})" for c in fixable)
        return [("fix_candidates", f"round {rounds + 1} of {beta}: fixing {ids}")]
    if fixable:
        return [("select_candidate", f"fixer rounds spent ({rounds} of {beta})")]
    broken = [c for c in candidates if is_broken(c)]
    if broken:
        return [("select_candidate", f"{len(broken)} candidate(s) still broken after {beta} attempts each")]
    if not candidates:
        return [("select_candidate", "no candidates were produced")]
    return [("select_candidate", f"all {len(candidates)} candidate(s) ran and returned rows")]

